//! The ProbeSpec contract: one type for the Kubernetes custom resource and for the YAML
//! that `gprobe run` reads, with the validation both modes share.

pub mod glob;
pub mod signature;
mod spec;
mod validate;

pub use spec::*;
pub use validate::{load_specs, validate_spec, LoadError, SpecIssue};
