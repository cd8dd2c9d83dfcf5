//! The one module that speaks CRI: the node's running containers with their pods.

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerFilter, ContainerState, ContainerStateValue, ContainerStatusRequest,
    ListContainersRequest, ListPodSandboxRequest, VersionRequest,
};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use thiserror::Error;
use tonic::transport::{Channel, Endpoint, Uri};

#[derive(Debug, Error)]
pub enum CriError {
    #[error("connecting to the container runtime at {path}: {source}; check --cri-socket (containerd: /run/containerd/containerd.sock, CRI-O: /var/run/crio/crio.sock) and that the socket is mounted")]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("container runtime call {call} failed: {source}")]
    Call {
        call: &'static str,
        #[source]
        source: Box<tonic::Status>,
    },
}

/// A running container as the runtime and its pod sandbox describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    pub name: String,
    /// The image reference the container was created from (`registry/repo:tag`).
    pub image: String,
    /// The image's digest or id (`sha256:...`), when the runtime reports it.
    pub image_id: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
    /// The pod's labels (the kubelet copies them to the sandbox), without the
    /// runtime's own `io.kubernetes.*` bookkeeping labels.
    pub pod_labels: BTreeMap<String, String>,
    /// The container's main process, in the node's pid namespace (0 if unknown).
    pub pid: u32,
}

pub struct CriClient {
    client: RuntimeServiceClient<Channel>,
    /// Verbose status is costly: remember each container's pid.
    pids: HashMap<String, u32>,
}

fn call_err(call: &'static str) -> impl FnOnce(tonic::Status) -> CriError {
    move |s| CriError::Call {
        call,
        source: Box::new(s),
    }
}

impl CriClient {
    pub async fn connect(path: &Path) -> Result<CriClient, CriError> {
        let p = path.to_path_buf();
        let channel = Endpoint::from_static("http://[::]")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let p = p.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(p).await?))
                }
            }))
            .await
            .map_err(|source| CriError::Connect {
                path: path.to_path_buf(),
                source,
            })?;
        let mut client = RuntimeServiceClient::new(channel);
        client
            .version(VersionRequest {
                version: "v1".into(),
            })
            .await
            .map_err(call_err("Version"))?;
        Ok(CriClient {
            client,
            pids: HashMap::new(),
        })
    }

    /// Every running container.
    pub async fn running(&mut self) -> Result<Vec<Container>, CriError> {
        let sandboxes = self
            .client
            .list_pod_sandbox(ListPodSandboxRequest { filter: None })
            .await
            .map_err(call_err("ListPodSandbox"))?
            .into_inner()
            .items;
        let pods: HashMap<String, _> = sandboxes.into_iter().map(|s| (s.id.clone(), s)).collect();
        let containers = self
            .client
            .list_containers(ListContainersRequest {
                filter: Some(ContainerFilter {
                    state: Some(ContainerStateValue {
                        state: ContainerState::ContainerRunning as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await
            .map_err(call_err("ListContainers"))?
            .into_inner()
            .containers;
        let mut out = Vec::with_capacity(containers.len());
        let live: std::collections::HashSet<String> =
            containers.iter().map(|c| c.id.clone()).collect();
        self.pids.retain(|id, _| live.contains(id));
        for c in containers {
            let pod = pods.get(&c.pod_sandbox_id);
            let meta = pod.and_then(|p| p.metadata.clone()).unwrap_or_default();
            let labels = pod
                .map(|p| {
                    p.labels
                        .iter()
                        .filter(|(k, _)| !k.starts_with("io.kubernetes."))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            let pid = match self.pids.get(&c.id) {
                Some(p) => *p,
                None => {
                    let p = self.pid_of(&c.id).await.unwrap_or(0);
                    if p != 0 {
                        self.pids.insert(c.id.clone(), p);
                    }
                    p
                }
            };
            // The kubelet's reference is in the annotations/labels it set; containerd also
            // reports the creation image spec. An id-only value (sha256:...) is a last resort.
            let spec_image = c
                .image
                .as_ref()
                .map(|i| i.image.clone())
                .unwrap_or_default();
            let user_image = c
                .image
                .as_ref()
                .map(|i| i.user_specified_image.clone())
                .filter(|s| !s.is_empty());
            let image = user_image.unwrap_or_else(|| spec_image.clone());
            out.push(Container {
                name: c
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default(),
                id: c.id,
                image,
                image_id: c.image_ref,
                pod_name: meta.name,
                pod_namespace: meta.namespace,
                pod_uid: meta.uid,
                pod_labels: labels,
                pid,
            });
        }
        Ok(out)
    }

    async fn pid_of(&mut self, id: &str) -> Result<u32, CriError> {
        let st = self
            .client
            .container_status(ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: true,
            })
            .await
            .map_err(call_err("ContainerStatus"))?
            .into_inner();
        let pid = st
            .info
            .get("info")
            .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
            .and_then(|v| v.get("pid").and_then(|p| p.as_u64()))
            .unwrap_or(0);
        Ok(pid as u32)
    }
}
