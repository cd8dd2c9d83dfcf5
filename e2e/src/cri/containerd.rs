//! The private containerd's lifecycle: its config, start, the CRI connection, and stop.

use super::cleanup::{remove_pod_cgroups, unmount_under};
use super::{CALL_TIMEOUT, PAUSE_IMAGE, START_TIMEOUT};
use crate::go::GoVersion;
use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::VersionRequest;
use std::ffi::CString;
use std::fs::File;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Uri};

/// A private containerd with its CRI plugin, all state under one temporary folder.
pub struct Containerd {
    pub(super) child: Option<Child>,
    pub(super) dir: PathBuf,
    pub(super) socket: PathBuf,
    pub(super) snapshotter: &'static str,
    pub(super) rt: Option<tokio::runtime::Runtime>,
    pub(super) channel: Option<Channel>,
    /// Pod uids this instance ran (their cgroup folders are removed with them).
    pub(super) uids: Mutex<Vec<String>>,
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

    pub(super) fn log_tail(&self) -> String {
        let log = self.containerd_log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Runs `fut` on the private runtime and waits for it from this (any) thread.
    pub(super) fn run<T: Send + 'static>(
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

    pub(super) fn runtime_client(&self) -> Result<RuntimeServiceClient<Channel>, String> {
        self.channel
            .clone()
            .map(RuntimeServiceClient::new)
            .ok_or_else(|| "not connected to containerd".to_string())
    }

    pub(super) fn image_client(&self) -> Result<ImageServiceClient<Channel>, String> {
        self.channel
            .clone()
            .map(ImageServiceClient::new)
            .ok_or_else(|| "not connected to containerd".to_string())
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
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
]

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
            let dir = crate::harness::build_dir().join("cri-pause-src");
            std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
            let src = dir.join("cri-pause.go");
            std::fs::write(&src, PAUSE_GO).map_err(|e| format!("write {}: {e}", src.display()))?;
            let mut last = String::new();
            // Go 1.27 first: its build cache is the one `harness::program` fills for Go127
            // programs, so the pause program costs only a link. Then Go 1.19.
            for v in [GoVersion::Go127, GoVersion::Go119] {
                let src = src.clone();
                match std::panic::catch_unwind(move || {
                    crate::binaries::build_go(v, &src, false, "cri-pause")
                }) {
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
