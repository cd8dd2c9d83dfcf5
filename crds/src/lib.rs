//! The ProbeSpec contract: one type for the Kubernetes custom resource and for the YAML
//! that `gprobe run` reads, with the validation both modes share; and ProbeAttachment, the
//! per-node report the agent writes in cluster mode.

mod attachment;
pub mod csig;
pub mod ctype;
pub mod fuzzing;
pub mod glob;
pub mod gopath;
pub mod hist;
pub mod oneliner;
pub mod signature;
mod spec;
pub mod trace;
mod validate;
pub mod when;

pub use attachment::*;
pub use spec::*;
pub use validate::{
    load_specs, validate_spec, LoadError, SpecIssue, MAX_SPEC_BYTES, MAX_SPEC_DEPTH,
};

use kube::CustomResourceExt;

/// Both CRDs (ProbeSpec, then ProbeAttachment) as one multi-document YAML text: what
/// `crdgen` prints and `crds/crds.yaml` holds.
pub fn crds_yaml() -> String {
    let mut out = String::new();
    for crd in [ProbeSpec::crd(), ProbeAttachment::crd()] {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd).expect("a CRD serializes to YAML"));
    }
    out
}
