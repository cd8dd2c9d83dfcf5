//! Binary resolution: functions, probe sites and signatures of ELF (Go) binaries.

pub mod abi;
pub mod gotype;
