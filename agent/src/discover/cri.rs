//! The one module that speaks CRI: the node's running containers with their pods.

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerFilter, ContainerState, ContainerStateValue, ContainerStatusRequest, ImageSpec,
    ImageStatusRequest, ListContainersRequest, ListPodSandboxRequest, VersionRequest,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use thiserror::Error;
use tonic::transport::{Channel, Endpoint, Uri};

#[derive(Debug, Error)]
pub enum CriError {
    #[error("connecting to the container runtime at {path}: {source}; check --cri-socket \
        (containerd: /run/containerd/containerd.sock, CRI-O: /var/run/crio/crio.sock) and that the socket is mounted")]
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
    /// The image reference the container was created from (`registry/repo:tag`); when the
    /// runtime reports only the image id, the image's first repo tag (or repo digest); the
    /// id itself when the runtime knows neither.
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
    images: ImageServiceClient<Channel>,
    /// Verbose status is costly: remember each container's pid.
    pids: HashMap<String, u32>,
    /// The name chosen for each image id a live container reports instead of a reference
    /// (`None`: the runtime knows no tag or digest for it), so each image is asked once.
    names: HashMap<String, Option<String>>,
}

/// Whether the runtime reported an image id (`sha256:<hex>`) or nothing rather than a
/// reference. The kubelet creates containers from the image id and passes the pod's
/// reference in `user_specified_image`, which containerd before 1.7 does not keep.
fn is_image_id(image: &str) -> bool {
    image.is_empty()
        || image
            .strip_prefix("sha256:")
            .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The name to report for an image the runtime knows by these tags and digests: the first
/// repo tag (as containerd's own ContainerStatus does), else the first repo digest
/// (`repo@sha256:...`, an image pulled by digest), else none.
fn image_name(repo_tags: &[String], repo_digests: &[String]) -> Option<String> {
    repo_tags
        .iter()
        .chain(repo_digests)
        .find(|r| !r.is_empty())
        .cloned()
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
        let mut client = RuntimeServiceClient::new(channel.clone());
        client
            .version(VersionRequest {
                version: "v1".into(),
            })
            .await
            .map_err(call_err("Version"))?;
        Ok(CriClient {
            client,
            images: ImageServiceClient::new(channel),
            pids: HashMap::new(),
            names: HashMap::new(),
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
        let live: HashSet<String> = containers.iter().map(|c| c.id.clone()).collect();
        self.pids.retain(|id, _| live.contains(id));
        let live_images: HashSet<&str> = containers
            .iter()
            .flat_map(|c| {
                [
                    c.image.as_ref().map_or("", |i| i.image.as_str()),
                    c.image_ref.as_str(),
                ]
            })
            .collect();
        self.names.retain(|id, _| live_images.contains(id.as_str()));
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
            let spec_image = c.image.as_ref().map_or("", |i| i.image.as_str());
            let user_image = c
                .image
                .as_ref()
                .map_or("", |i| i.user_specified_image.as_str());
            let image = if !user_image.is_empty() {
                user_image.to_string()
            } else if !is_image_id(spec_image) {
                spec_image.to_string()
            } else {
                let id = if spec_image.is_empty() {
                    c.image_ref.as_str()
                } else {
                    spec_image
                };
                self.name_of_image(id).await
            };
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

    /// The name of image `id` (its first repo tag or digest), asked once per image; `id`
    /// itself when the runtime knows none, or the call fails (asked again next time).
    async fn name_of_image(&mut self, id: &str) -> String {
        if id.is_empty() {
            return String::new();
        }
        if let Some(known) = self.names.get(id) {
            return known.clone().unwrap_or_else(|| id.to_string());
        }
        let status = self
            .images
            .image_status(ImageStatusRequest {
                image: Some(ImageSpec {
                    image: id.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .map_err(call_err("ImageStatus"));
        let name = match status {
            Ok(st) => {
                let image = st.into_inner().image.unwrap_or_default();
                image_name(&image.repo_tags, &image.repo_digests)
            }
            Err(e) => {
                tracing::debug!("{e}; containers of image {id} are named by the id for now");
                return id.to_string();
            }
        };
        if name.is_none() {
            tracing::debug!(
                "the container runtime knows no tag or digest for image {id}: its containers \
                 carry the id as their image, and selector.images matches them only by the id"
            );
        }
        self.names.insert(id.to_string(), name.clone());
        name.unwrap_or_else(|| id.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_ids_are_told_from_references() {
        let id = "sha256:8f1f8ba1e3e4b4c5a9d1f0a6b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f";
        assert!(is_image_id(id));
        assert!(is_image_id(""), "nothing reported: ask the runtime");
        for reference in [
            "registry.test/shop/http-client:v1.2",
            "http-client:dev",
            "nginx",
            // A reference pinned by digest names its repository: keep it.
            "registry.test/shop/http-client@sha256:8f1f8ba1e3e4b4c5",
            "sha256:not-hex",
            "sha256:",
        ] {
            assert!(!is_image_id(reference), "{reference}");
        }
    }

    #[test]
    fn the_first_tag_names_an_image_then_the_first_digest() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            image_name(
                &s(&[
                    "docker.io/library/http-client:dev",
                    "gprobe.local/http-client:e2e"
                ]),
                &s(&["docker.io/library/http-client@sha256:abc"])
            ),
            Some("docker.io/library/http-client:dev".into())
        );
        assert_eq!(
            image_name(&[], &s(&["registry.test/shop/app@sha256:abc"])),
            Some("registry.test/shop/app@sha256:abc".into())
        );
        assert_eq!(image_name(&s(&[""]), &[]), None);
        assert_eq!(image_name(&[], &[]), None);
    }
}
