//! gprobe's agent: the pipeline discover -> resolve -> attach -> events -> export.

pub mod resolve;
