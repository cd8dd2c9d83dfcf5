//! Real pods without a kubelet: a private `containerd` (with its CRI plugin) per test, images
//! built locally from a static binary and imported with `ctr`, and pods run over CRI the way
//! the kubelet runs them (host network, kubelet labels, cgroupfs parent
//! `/kubepods/besteffort/pod<uid>`).
//!
//! ```no_run
//! use gprobe_e2e::cri::{require_containers, Containerd, PodSpec};
//! # fn test(binary: &std::path::Path) -> Result<(), String> {
//! require_containers("my_test");
//! let ctrd = Containerd::start()?;
//! ctrd.import_image("registry.test/shop/app:v1", binary)?;
//! let pod = ctrd.run_pod(&PodSpec {
//!     name: "app-1".into(),
//!     image: "registry.test/shop/app:v1".into(),
//!     ..Default::default()
//! })?;
//! # Ok(())
//! # }
//! ```
//! Everything lives under one temporary folder that `Drop` removes, after removing every
//! pod and stopping containerd.
//!
//! - `containerd.rs`: the daemon's lifecycle (config, start, CRI connection, stop)
//! - `image.rs`: one-layer OCI image archives, imported with `ctr`
//! - `pods.rs`: pods through CRI calls (run, remove, logs)
//! - `cleanup.rs`: what must not outlive a test (mounts, cgroups, shims)

mod cleanup;
mod containerd;
mod image;
mod pods;

pub use containerd::Containerd;

use crate::harness::which;
use std::collections::BTreeMap;
use std::time::Duration;

/// The image every sandbox runs (imported by `start`, never pulled).
pub const PAUSE_IMAGE: &str = "registry.test/gprobe/pause:e2e";
/// How long one CRI call may take before it is reported as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `start` waits for the CRI to answer.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Grace period given to a container's process by `remove_pod` before SIGKILL.
const STOP_GRACE_SECS: i64 = 2;

/// A pod to run: one sandbox with one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The pod's own labels (the kubelet's `io.kubernetes.pod.*` ones are added).
    pub labels: BTreeMap<String, String>,
    /// The container's name.
    pub container: String,
    /// An image reference imported with `import_image`.
    pub image: String,
    /// Arguments after the image's entrypoint.
    pub args: Vec<String>,
}

/// A running pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub sandbox_id: String,
    pub container_id: String,
    /// The container's main process in the host's pid namespace.
    pub pid: u32,
    pub spec: PodSpec,
}

/// Fails the calling test, naming why, when containers cannot run here: a test that did
/// not run must not pass.
pub fn require_containers(test: &str) {
    // SAFETY: geteuid has no preconditions.
    assert!(
        unsafe { libc::geteuid() } == 0,
        "{test}: needs root to run containerd and containers: run it as root"
    );
    let missing: Vec<&str> = [
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
        "ctr",
        "sha256sum",
    ]
    .into_iter()
    .filter(|t| which(t).is_none())
    .collect();
    assert!(
        missing.is_empty(),
        "{test}: {} not installed (scripts/setup.sh --test installs containerd and runc)",
        missing.join(", ")
    );
}
