//! gprobe's agent: the pipeline discover -> resolve -> attach -> events -> export.

pub mod abi;
pub mod attach;
pub mod auxiliary;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod command;
pub mod discover;
pub mod duration;
pub mod engine;
pub mod events;
pub mod export;
pub mod filter;
pub mod gosym;
pub mod kernel;
pub mod local;
pub mod pipeline;
pub mod plan;
pub mod priority;
pub mod resolve;
pub mod stats;
pub mod symbols;
pub mod trace;
pub mod types;
pub mod util;
