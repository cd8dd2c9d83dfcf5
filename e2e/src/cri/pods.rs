//! Pods through CRI calls, as the kubelet makes them: sandbox, container, status, removal, logs.

use super::cleanup::remove_pod_cgroups;
use super::{Containerd, Pod, PodSpec, STOP_GRACE_SECS};
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ContainerStatusRequest, CreateContainerRequest, ImageSpec,
    LinuxContainerConfig, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, ListContainersRequest, ListPodSandboxRequest, NamespaceMode,
    NamespaceOption, PodSandboxConfig, PodSandboxMetadata, RemoveContainerRequest,
    RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest, StopContainerRequest,
    StopPodSandboxRequest,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

impl Containerd {
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
    pub(super) fn remove_everything(&self) {
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

fn host_network() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
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
