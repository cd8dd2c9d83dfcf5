//! Real pods without a kubelet: a private `containerd` (with its CRI plugin) per test, images
//! built locally from a static binary and imported with `ctr`, and pods run over CRI the way
//! the kubelet runs them (host network, kubelet labels, cgroupfs parent
//! `/kubepods/besteffort/pod<uid>`).
//!
//! Use from an e2e test file that also declares `mod harness;`:
//! ```ignore
//! mod harness;
//! mod cri_support;
//! if !cri_support::can_run_containers("my_test") { return; }
//! let ctrd = cri_support::Containerd::start()?;
//! ctrd.import_image("registry.test/shop/app:v1", &binary)?;
//! let pod = ctrd.run_pod(&PodSpec { .. })?;
//! ```
//! Everything lives under one temporary folder that `Drop` removes, after removing every
//! pod and stopping containerd.
#![allow(dead_code)]

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ContainerStatusRequest, CreateContainerRequest, ImageSpec,
    ImageStatusRequest, LinuxContainerConfig, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, ListContainersRequest, ListPodSandboxRequest, NamespaceMode,
    NamespaceOption, PodSandboxConfig, PodSandboxMetadata, RemoveContainerRequest,
    RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest, StopContainerRequest,
    StopPodSandboxRequest, VersionRequest,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::fs::File;
use std::future::Future;
use std::io::{BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Uri};

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

/// Prints "SKIPPED <test>: <reason>" and returns false when containers cannot run here.
pub fn can_run_containers(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED {test}: needs root to run containerd and containers");
        return false;
    }
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
    if !missing.is_empty() {
        eprintln!(
            "SKIPPED {test}: {} not installed (scripts/setup.sh --test installs containerd and runc)",
            missing.join(", ")
        );
        return false;
    }
    true
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// A private containerd with its CRI plugin, all state under one temporary folder.
pub struct Containerd {
    child: Option<Child>,
    dir: PathBuf,
    socket: PathBuf,
    snapshotter: &'static str,
    rt: Option<tokio::runtime::Runtime>,
    channel: Option<Channel>,
    /// Pod uids this instance ran (their cgroup folders are removed with them).
    uids: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Containerd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Containerd")
            .field("pid", &self.child.as_ref().map(|c| c.id()))
            .field("dir", &self.dir)
            .field("snapshotter", &self.snapshotter)
            .finish()
    }
}

impl Containerd {
    /// Starts containerd, waits until its CRI answers `Version`, and imports the pause image.
    pub fn start() -> Result<Containerd, String> {
        let pause = pause_binary()?;
        let dir = new_temp_dir()?;
        let snapshotter = if overlay_works(&dir) {
            "overlayfs"
        } else {
            "native"
        };
        let socket = dir.join("containerd.sock");
        for d in [
            "root", "state", "logs", "runc", "opt", "cni/bin", "cni/conf", "images",
        ] {
            std::fs::create_dir_all(dir.join(d))
                .map_err(|e| format!("create {}/{d}: {e}", dir.display()))?;
        }
        let config = config_toml(&dir, &socket, snapshotter);
        let config_path = dir.join("config.toml");
        std::fs::write(&config_path, config)
            .map_err(|e| format!("write {}: {e}", config_path.display()))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("cri-support")
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        let log =
            File::create(dir.join("containerd.log")).map_err(|e| format!("containerd.log: {e}"))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("containerd.log: {e}"))?;
        let mut me = Containerd {
            child: None,
            dir: dir.clone(),
            socket: socket.clone(),
            snapshotter,
            rt: Some(rt),
            channel: None,
            uids: Mutex::new(Vec::new()),
        };
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("start containerd: {e}"))?;
        me.child = Some(child);
        me.wait_ready()?;
        me.import_image(PAUSE_IMAGE, &pause)?;
        Ok(me)
    }

    /// containerd's gRPC socket (CRI and containerd's own API).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The temporary folder holding containerd's root, state, config, logs and pod logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// containerd's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// "overlayfs", or "native" where overlay mounts fail.
    pub fn snapshotter(&self) -> &str {
        self.snapshotter
    }

    /// containerd's own log so far (for failure messages).
    pub fn containerd_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let t0 = Instant::now();
        let mut last = String::from("socket not created yet");
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!(
                    "containerd exited ({status}) before its CRI answered; log:\n{}",
                    self.log_tail()
                ));
            }
            if self.socket.exists() {
                let socket = self.socket.clone();
                let r = self.run(async move {
                    let channel = connect(socket).await.map_err(|e| format!("connect: {e}"))?;
                    let v = RuntimeServiceClient::new(channel.clone())
                        .version(VersionRequest {
                            version: "v1".into(),
                        })
                        .await
                        .map_err(|s| format!("Version: {s}"))?;
                    Ok::<_, String>((channel, v.into_inner()))
                });
                match r {
                    Ok((channel, _)) => {
                        self.channel = Some(channel);
                        return Ok(());
                    }
                    Err(e) => last = e,
                }
            }
            if t0.elapsed() > START_TIMEOUT {
                return Err(format!(
                    "containerd's CRI did not answer within {START_TIMEOUT:?} ({last}); log:\n{}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_tail(&self) -> String {
        let log = self.containerd_log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Runs `fut` on the private runtime and waits for it from this (any) thread.
    fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, String>> + Send + 'static,
    ) -> Result<T, String> {
        let rt = self.rt.as_ref().ok_or("runtime gone")?;
        let (tx, rx) = std::sync::mpsc::channel();
        rt.spawn(async move {
            let r = match tokio::time::timeout(CALL_TIMEOUT, fut).await {
                Ok(r) => r,
                Err(_) => Err(format!("timed out after {CALL_TIMEOUT:?}")),
            };
            let _ = tx.send(r);
        });
        rx.recv()
            .map_err(|_| "the CRI call's task was dropped".to_string())?
    }

    fn runtime_client(&self) -> Result<RuntimeServiceClient<Channel>, String> {
        self.channel
            .clone()
            .map(RuntimeServiceClient::new)
            .ok_or_else(|| "not connected to containerd".to_string())
    }

    fn image_client(&self) -> Result<ImageServiceClient<Channel>, String> {
        self.channel
            .clone()
            .map(ImageServiceClient::new)
            .ok_or_else(|| "not connected to containerd".to_string())
    }

    /// Builds a one-layer OCI image holding `binary` at `/app/<file name>` (and an empty
    /// `/tmp`), entrypoint `/app/<file name>`, tagged `reference`; imports it into the
    /// `k8s.io` namespace and waits until the CRI sees it.
    pub fn import_image(&self, reference: &str, binary: &Path) -> Result<(), String> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = binary
            .file_name()
            .ok_or_else(|| format!("{} has no file name", binary.display()))?
            .to_string_lossy()
            .into_owned();
        let slug: String = reference
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let work = self
            .dir
            .join("images")
            .join(format!("{slug}-{}", N.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&work).map_err(|e| format!("create {}: {e}", work.display()))?;
        let tar = write_oci_archive(&work, reference, binary, &name)?;
        let out = Command::new("ctr")
            .arg("-n")
            .arg("k8s.io")
            .arg("-a")
            .arg(&self.socket)
            .args(["image", "import", "--snapshotter", self.snapshotter])
            .arg(&tar)
            .output()
            .map_err(|e| format!("run ctr: {e}"))?;
        let _ = std::fs::remove_dir_all(&work);
        if !out.status.success() {
            return Err(format!(
                "ctr image import {reference} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // The CRI learns about imported images from containerd's events: wait for it.
        let t0 = Instant::now();
        loop {
            let mut client = self.image_client()?;
            let image = reference.to_string();
            let found = self.run(async move {
                let r = client
                    .image_status(ImageStatusRequest {
                        image: Some(ImageSpec {
                            image,
                            ..Default::default()
                        }),
                        verbose: false,
                    })
                    .await
                    .map_err(|s| format!("ImageStatus: {s}"))?;
                Ok(r.into_inner().image.is_some())
            })?;
            if found {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(15) {
                return Err(format!(
                    "imported {reference}, but the CRI does not see it after 15s"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_dir(&self, spec: &PodSpec) -> PathBuf {
        self.dir
            .join("logs")
            .join(format!("{}_{}_{}", spec.namespace, spec.name, spec.uid))
    }

    fn sandbox_config(&self, spec: &PodSpec) -> PodSandboxConfig {
        let mut labels: HashMap<String, String> = spec
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.insert("io.kubernetes.pod.name".into(), spec.name.clone());
        labels.insert("io.kubernetes.pod.namespace".into(), spec.namespace.clone());
        labels.insert("io.kubernetes.pod.uid".into(), spec.uid.clone());
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: spec.name.clone(),
                uid: spec.uid.clone(),
                namespace: spec.namespace.clone(),
                attempt: 0,
            }),
            // A host-network sandbox must not set a hostname.
            hostname: String::new(),
            log_directory: self.log_dir(spec).to_string_lossy().into_owned(),
            labels,
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: format!("/kubepods/besteffort/pod{}", spec.uid),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(host_network()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Runs the pod's sandbox and container (host network), waits until the container runs,
    /// and returns its ids and host pid. On failure, whatever was created is removed.
    pub fn run_pod(&self, spec: &PodSpec) -> Result<Pod, String> {
        let sandbox_config = self.sandbox_config(spec);
        std::fs::create_dir_all(self.log_dir(spec)).map_err(|e| format!("create log dir: {e}"))?;
        self.uids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(spec.uid.clone());
        let mut client = self.runtime_client()?;
        let config = sandbox_config.clone();
        let sandbox_id = self.run(async move {
            let r = client
                .run_pod_sandbox(RunPodSandboxRequest {
                    config: Some(config),
                    runtime_handler: String::new(),
                })
                .await
                .map_err(|s| format!("RunPodSandbox: {s}"))?;
            Ok(r.into_inner().pod_sandbox_id)
        })?;
        let container_labels: HashMap<String, String> = [
            ("io.kubernetes.container.name", spec.container.as_str()),
            ("io.kubernetes.pod.name", spec.name.as_str()),
            ("io.kubernetes.pod.namespace", spec.namespace.as_str()),
            ("io.kubernetes.pod.uid", spec.uid.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let container_config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: spec.container.clone(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: spec.image.clone(),
                ..Default::default()
            }),
            args: spec.args.clone(),
            labels: container_labels,
            log_path: format!("{}/0.log", spec.container),
            linux: Some(LinuxContainerConfig {
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(host_network()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut client = self.runtime_client()?;
        let sid = sandbox_id.clone();
        let started = self.run(async move {
            let id = client
                .create_container(CreateContainerRequest {
                    pod_sandbox_id: sid,
                    config: Some(container_config),
                    sandbox_config: Some(sandbox_config),
                })
                .await
                .map_err(|s| format!("CreateContainer: {s}"))?
                .into_inner()
                .container_id;
            if let Err(s) = client
                .start_container(StartContainerRequest {
                    container_id: id.clone(),
                })
                .await
            {
                return Ok(Err((Some(id), format!("StartContainer: {s}"))));
            }
            let status = client
                .container_status(ContainerStatusRequest {
                    container_id: id.clone(),
                    verbose: true,
                })
                .await;
            let status = match status {
                Ok(s) => s.into_inner(),
                Err(s) => return Ok(Err((Some(id), format!("ContainerStatus: {s}")))),
            };
            let pid = status
                .info
                .get("info")
                .and_then(|i| serde_json::from_str::<serde_json::Value>(i).ok())
                .and_then(|v| v["pid"].as_u64())
                .filter(|&p| p > 0);
            match pid {
                Some(pid) => Ok(Ok((id, pid as u32))),
                None => Ok(Err((
                    Some(id),
                    format!("ContainerStatus has no pid: {:?}", status.info),
                ))),
            }
        });
        let outcome = match started {
            Ok(o) => o,
            Err(e) => Err((None, e)),
        };
        match outcome {
            Ok((container_id, pid)) => Ok(Pod {
                sandbox_id,
                container_id,
                pid,
                spec: spec.clone(),
            }),
            Err((container_id, e)) => {
                let logs = container_id
                    .as_ref()
                    .map(|_| self.read_logs(spec))
                    .unwrap_or_default();
                let _ = self.remove(&sandbox_id, container_id.as_deref(), &spec.uid);
                Err(format!(
                    "run pod {}/{}: {e}\ncontainer output: {logs}\ncontainerd log:\n{}",
                    spec.namespace,
                    spec.name,
                    self.log_tail()
                ))
            }
        }
    }

    /// Stops and removes the pod's container and sandbox (the process gets SIGTERM, then
    /// SIGKILL after 2 s), and removes the pod's cgroup folders. Its logs stay readable.
    pub fn remove_pod(&self, pod: &Pod) -> Result<(), String> {
        self.remove(&pod.sandbox_id, Some(&pod.container_id), &pod.spec.uid)
    }

    fn remove(
        &self,
        sandbox_id: &str,
        container_id: Option<&str>,
        uid: &str,
    ) -> Result<(), String> {
        let mut client = self.runtime_client()?;
        let sid = sandbox_id.to_string();
        let cid = container_id.map(str::to_string);
        let r = self.run(async move {
            let mut errors = Vec::new();
            if let Some(cid) = cid {
                if let Err(s) = client
                    .stop_container(StopContainerRequest {
                        container_id: cid.clone(),
                        timeout: STOP_GRACE_SECS,
                    })
                    .await
                {
                    errors.push(format!("StopContainer: {s}"));
                }
                if let Err(s) = client
                    .remove_container(RemoveContainerRequest { container_id: cid })
                    .await
                {
                    errors.push(format!("RemoveContainer: {s}"));
                }
            }
            if let Err(s) = client
                .stop_pod_sandbox(StopPodSandboxRequest {
                    pod_sandbox_id: sid.clone(),
                })
                .await
            {
                errors.push(format!("StopPodSandbox: {s}"));
            }
            if let Err(s) = client
                .remove_pod_sandbox(RemovePodSandboxRequest {
                    pod_sandbox_id: sid,
                })
                .await
            {
                errors.push(format!("RemovePodSandbox: {s}"));
            }
            if errors.is_empty() {
                Ok(())
            } else {
                Err(errors.join("; "))
            }
        });
        remove_pod_cgroups(uid);
        r
    }

    /// The container's stdout and stderr so far, as the program wrote them (from the CRI
    /// log file; lines of both streams in the order they were logged).
    pub fn logs(&self, pod: &Pod) -> String {
        self.read_logs(&pod.spec)
    }

    /// Polls `logs` until `pred` holds; returns them, or an error with them after `timeout`.
    pub fn wait_for_logs(
        &self,
        pod: &Pod,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<String, String> {
        let t0 = Instant::now();
        loop {
            let logs = self.logs(pod);
            if pred(&logs) {
                return Ok(logs);
            }
            if t0.elapsed() > timeout {
                return Err(format!(
                    "pod {} logs after {timeout:?}:\n{logs}",
                    pod.spec.name
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn read_logs(&self, spec: &PodSpec) -> String {
        let path = self.log_dir(spec).join(&spec.container).join("0.log");
        parse_cri_log(&std::fs::read_to_string(path).unwrap_or_default())
    }

    /// Removes every container and sandbox containerd knows (all are ours).
    fn remove_everything(&self) {
        let Ok(mut client) = self.runtime_client() else {
            return;
        };
        let _ = self.run(async move {
            let containers = client
                .list_containers(ListContainersRequest { filter: None })
                .await
                .map(|r| r.into_inner().containers)
                .unwrap_or_default();
            for c in containers {
                let _ = client
                    .stop_container(StopContainerRequest {
                        container_id: c.id.clone(),
                        timeout: 0,
                    })
                    .await;
                let _ = client
                    .remove_container(RemoveContainerRequest { container_id: c.id })
                    .await;
            }
            let sandboxes = client
                .list_pod_sandbox(ListPodSandboxRequest { filter: None })
                .await
                .map(|r| r.into_inner().items)
                .unwrap_or_default();
            for s in sandboxes {
                let _ = client
                    .stop_pod_sandbox(StopPodSandboxRequest {
                        pod_sandbox_id: s.id.clone(),
                    })
                    .await;
                let _ = client
                    .remove_pod_sandbox(RemovePodSandboxRequest {
                        pod_sandbox_id: s.id,
                    })
                    .await;
            }
            Ok(())
        });
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.remove_everything();
        for uid in self.uids.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            remove_pod_cgroups(uid);
        }
        self.channel = None;
        if let Some(mut child) = self.child.take() {
            let pid = child.id() as libc::pid_t;
            // SAFETY: signalling our own child, by its pid.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let t0 = Instant::now();
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if t0.elapsed() > Duration::from_secs(5) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
        self.kill_leftovers();
        unmount_under(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Containerd {
    /// Last resort when pods could not be removed: force-delete runc containers of our runc
    /// root, and kill the shims our containerd started (found by our socket in their command line).
    fn kill_leftovers(&self) {
        let root = self.dir.join("runc").join("k8s.io");
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                let _ = Command::new("runc")
                    .arg("--root")
                    .arg(&root)
                    .args(["delete", "--force"])
                    .arg(e.file_name())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let needle = self.socket.as_os_str().as_bytes();
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return;
        };
        for p in procs.flatten() {
            let Some(pid) = p
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<libc::pid_t>().ok())
            else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(p.path().join("cmdline")) else {
                continue;
            };
            let is_our_shim = cmdline
                .split(|&b| b == 0)
                .next()
                .is_some_and(|a| a.ends_with(b"containerd-shim-runc-v2"))
                && cmdline.split(|&b| b == 0).any(|a| a == needle);
            if is_our_shim {
                // SAFETY: killing a shim started by the containerd we started, by its pid.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

fn host_network() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

async fn connect(socket: PathBuf) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_static("http://[::]")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
}

fn new_temp_dir() -> Result<PathBuf, String> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "gprobe-cri-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    if dir.exists() {
        unmount_under(&dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

fn config_toml(dir: &Path, socket: &Path, snapshotter: &str) -> String {
    let d = dir.display();
    let s = socket.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{s}"

[ttrpc]
  address = "{s}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "{snapshotter}"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{d}/runc"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/conf"
"#
    )
}

/// True when an overlay mount works in `dir` (containerd's overlayfs snapshotter needs it).
fn overlay_works(dir: &Path) -> bool {
    let base = dir.join("overlay-probe");
    let [lower, upper, work, merged] = ["lower", "upper", "work", "merged"].map(|n| base.join(n));
    for d in [&lower, &upper, &work, &merged] {
        if std::fs::create_dir_all(d).is_err() {
            return false;
        }
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    let (Ok(target), Ok(opts)) = (
        CString::new(merged.as_os_str().as_bytes()),
        CString::new(opts),
    ) else {
        return false;
    };
    // SAFETY: all pointers are valid NUL-terminated strings for the duration of the call.
    let ok = unsafe {
        libc::mount(
            c"overlay".as_ptr(),
            target.as_ptr(),
            c"overlay".as_ptr(),
            0,
            opts.as_ptr().cast(),
        )
    } == 0;
    if ok {
        // SAFETY: unmounting the overlay we just mounted.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
    let _ = std::fs::remove_dir_all(&base);
    ok
}

/// Lazily unmounts every mount point under `dir`, deepest first.
fn unmount_under(dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let prefix = dir.as_os_str().as_bytes();
    let mut points: Vec<Vec<u8>> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .filter(|p| p.starts_with(prefix) && (p.len() == prefix.len() || p[prefix.len()] == b'/'))
        .collect();
    points.sort();
    points.dedup();
    points.sort_by_key(|p| std::cmp::Reverse(p.iter().filter(|&&b| b == b'/').count()));
    for p in points {
        if let Ok(c) = CString::new(p) {
            // SAFETY: c is a valid NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Removes `/kubepods/besteffort/pod<uid>` in every cgroup hierarchy (runc removes the
/// containers' own cgroups; the kubelet would remove the pod's).
fn remove_pod_cgroups(uid: &str) {
    if uid.is_empty() || uid.contains('/') {
        return;
    }
    let rel = format!("kubepods/besteffort/pod{uid}");
    let mut roots = vec![PathBuf::from("/sys/fs/cgroup")];
    if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
        roots.extend(entries.flatten().map(|e| e.path()));
    }
    for root in roots {
        let pod = root.join(&rel);
        if pod.is_dir() {
            // Sandbox/container cgroups left inside (normally runc removed them) go first.
            if let Ok(children) = std::fs::read_dir(&pod) {
                for c in children.flatten() {
                    if c.path().is_dir() {
                        let _ = std::fs::remove_dir(c.path());
                    }
                }
            }
            let _ = std::fs::remove_dir(&pod);
        }
    }
}

/// Turns a CRI log file (`<time> <stream> <P|F> <text>` lines) back into the program's output.
fn parse_cri_log(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut it = line.splitn(4, ' ');
        let (_time, _stream, tag, msg) = (it.next(), it.next(), it.next(), it.next().unwrap_or(""));
        match tag {
            Some("P") => out.push_str(msg),
            Some(_) => {
                out.push_str(msg);
                out.push('\n');
            }
            None => {}
        }
    }
    out
}

const PAUSE_GO: &str = "// The sandbox's process: blocks until SIGTERM or SIGINT.
package main

import (
	\"os\"
	\"os/signal\"
	\"syscall\"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
";

/// The pause program every sandbox runs: waits for SIGTERM/SIGINT. Built once per test binary.
fn pause_binary() -> Result<PathBuf, String> {
    static PAUSE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PAUSE
        .get_or_init(|| {
            use crate::harness::go::{self, GoVersion};
            let mut last = String::new();
            // Go 1.27 first: its build cache (per output folder) is the one `harness::program`
            // fills for Go127 programs, so the pause program costs only a link. Then Go 1.19.
            for (v, sub) in [
                (GoVersion::Go127, "go127-full"),
                (GoVersion::Go119, "go119-full"),
            ] {
                let dir = crate::harness::build_dir().join(sub);
                std::fs::create_dir_all(&dir)
                    .map_err(|e| format!("create {}: {e}", dir.display()))?;
                let src = dir.join("cri-pause.go");
                std::fs::write(&src, PAUSE_GO)
                    .map_err(|e| format!("write {}: {e}", src.display()))?;
                let out = dir.join("cri-pause");
                match std::panic::catch_unwind(move || go::build(v, &src, &out, false, &[])) {
                    Ok(p) => return Ok(p),
                    Err(e) => {
                        last = e
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default()
                    }
                }
            }
            Err(format!("cannot build the pause program: {last}"))
        })
        .clone()
}

// ---- OCI image archive ----

fn sha256_file(path: &Path) -> Result<String, String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .map_err(|e| format!("run sha256sum: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split_whitespace().next().unwrap_or("");
    if !out.status.success() || hex.len() != 64 {
        return Err(format!(
            "sha256sum {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(hex.to_string())
}

/// A blob written to `work`: its file, sha256 hex and size.
struct Blob {
    path: PathBuf,
    hex: String,
    size: u64,
}

fn blob_from_bytes(work: &Path, name: &str, data: &[u8]) -> Result<Blob, String> {
    let path = work.join(name);
    std::fs::write(&path, data).map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(Blob {
        hex: sha256_file(&path)?,
        size: data.len() as u64,
        path,
    })
}

fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The tag of `reference` (`latest` when it has none).
fn tag_of(reference: &str) -> &str {
    let last = reference.rsplit('/').next().unwrap_or(reference);
    match last.rsplit_once(':') {
        Some((_, tag)) if !last.contains('@') => tag,
        _ => "latest",
    }
}

/// Writes `<work>/image.tar`, an OCI layout archive of one image, and returns its path.
fn write_oci_archive(
    work: &Path,
    reference: &str,
    binary: &Path,
    name: &str,
) -> Result<PathBuf, String> {
    let err = |what: &str, e: std::io::Error| format!("{what}: {e}");
    // The layer: /app/<name>, /tmp.
    let layer_path = work.join("layer.tar");
    {
        let mut t = TarWriter::new(BufWriter::new(
            File::create(&layer_path).map_err(|e| err("layer.tar", e))?,
        ));
        t.dir("app/", 0o755).map_err(|e| err("layer.tar", e))?;
        t.file_from(&format!("app/{name}"), 0o755, binary)
            .map_err(|e| err(&format!("add {} to layer", binary.display()), e))?;
        t.dir("tmp/", 0o1777).map_err(|e| err("layer.tar", e))?;
        t.finish().map_err(|e| err("layer.tar", e))?;
    }
    let layer = Blob {
        hex: sha256_file(&layer_path)?,
        size: std::fs::metadata(&layer_path)
            .map_err(|e| err("layer.tar", e))?
            .len(),
        path: layer_path,
    };
    let config = serde_json::json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {
            "Entrypoint": [format!("/app/{name}")],
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", layer.hex)]},
        "history": [{"created_by": "gprobe e2e cri_support", "comment": format!("/app/{name}")}],
    });
    let config = blob_from_bytes(work, "config.json", config.to_string().as_bytes())?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{}", config.hex),
            "size": config.size,
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{}", layer.hex),
            "size": layer.size,
        }],
    });
    let manifest = blob_from_bytes(work, "manifest.json", manifest.to_string().as_bytes())?;
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{}", manifest.hex),
            "size": manifest.size,
            "platform": {"architecture": oci_arch(), "os": "linux"},
            "annotations": {
                "io.containerd.image.name": reference,
                "org.opencontainers.image.ref.name": tag_of(reference),
            },
        }],
    })
    .to_string();
    let tar_path = work.join("image.tar");
    let mut t = TarWriter::new(BufWriter::new(
        File::create(&tar_path).map_err(|e| err("image.tar", e))?,
    ));
    let w = (|| -> std::io::Result<()> {
        t.file_bytes("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        t.file_bytes("index.json", 0o644, index.as_bytes())?;
        t.dir("blobs/", 0o755)?;
        t.dir("blobs/sha256/", 0o755)?;
        for b in [&layer, &config, &manifest] {
            t.file_from(&format!("blobs/sha256/{}", b.hex), 0o644, &b.path)?;
        }
        t.finish()
    })();
    w.map_err(|e| err("image.tar", e))?;
    Ok(tar_path)
}

/// The little of ustar that images need: regular files and directories, owned by root.
struct TarWriter<W: Write> {
    w: W,
}

impl<W: Write> TarWriter<W> {
    fn new(w: W) -> Self {
        TarWriter { w }
    }

    fn header(&mut self, name: &str, mode: u32, size: u64, kind: u8) -> std::io::Result<()> {
        if name.len() > 99 {
            return Err(std::io::Error::other(format!(
                "tar entry name too long: {name}"
            )));
        }
        let mut h = [0u8; 512];
        fn put(h: &mut [u8; 512], at: usize, s: &[u8]) {
            h[at..at + s.len()].copy_from_slice(s);
        }
        put(&mut h, 0, name.as_bytes());
        put(&mut h, 100, format!("{mode:07o}\0").as_bytes());
        put(&mut h, 108, b"0000000\0");
        put(&mut h, 116, b"0000000\0");
        put(&mut h, 124, format!("{size:011o}\0").as_bytes());
        put(&mut h, 136, b"00000000000\0");
        put(&mut h, 148, b"        ");
        h[156] = kind;
        put(&mut h, 257, b"ustar\0");
        put(&mut h, 263, b"00");
        put(&mut h, 265, b"root");
        put(&mut h, 297, b"root");
        put(&mut h, 329, b"0000000\0");
        put(&mut h, 337, b"0000000\0");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
        self.w.write_all(&h)
    }

    fn pad(&mut self, size: u64) -> std::io::Result<()> {
        let rem = (size % 512) as usize;
        if rem != 0 {
            self.w.write_all(&[0u8; 512][..512 - rem])?;
        }
        Ok(())
    }

    fn dir(&mut self, name: &str, mode: u32) -> std::io::Result<()> {
        self.header(name, mode, 0, b'5')
    }

    fn file_bytes(&mut self, name: &str, mode: u32, data: &[u8]) -> std::io::Result<()> {
        self.header(name, mode, data.len() as u64, b'0')?;
        self.w.write_all(data)?;
        self.pad(data.len() as u64)
    }

    fn file_from(&mut self, name: &str, mode: u32, path: &Path) -> std::io::Result<()> {
        let mut f = File::open(path)?;
        let size = f.metadata()?.len();
        self.header(name, mode, size, b'0')?;
        let copied = std::io::copy(&mut (&mut f).take(size), &mut self.w)?;
        if copied != size {
            return Err(std::io::Error::other(format!(
                "{} shrank while archiving",
                path.display()
            )));
        }
        self.pad(size)
    }

    fn finish(mut self) -> std::io::Result<()> {
        self.w.write_all(&[0u8; 1024])?;
        self.w.flush()
    }
}
