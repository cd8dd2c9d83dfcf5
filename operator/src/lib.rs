//! gprobe-operator: validates ProbeSpecs beyond what the CRD schema can, rolls the
//! agents' ProbeAttachments up into `ProbeSpec.status`, and emits Events. See README.md.

pub mod controller;
pub mod error;
pub mod expiry;
pub mod leader;
pub mod metrics;
pub mod rollup;
pub mod server;
pub mod validation;

pub use error::{Error, LeaseError};

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod reconcile_tests;
