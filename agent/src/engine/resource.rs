//! The resource attributes of a traced process (OpenTelemetry semantic conventions): what
//! every record and span of it carries.

use super::Mode;
use crate::discover::cri::Container;
use crate::discover::ProcInfo;
use crate::events::Resource;

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `registry:5000/repo/name:tag` -> (`registry:5000/repo/name`, `tag`); a digest counts as no tag.
pub fn split_image(image: &str) -> (String, String) {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    match last.rsplit_once(':') {
        Some((_, tag)) => (
            no_digest[..no_digest.len() - tag.len() - 1].to_string(),
            tag.to_string(),
        ),
        None => (
            no_digest.to_string(),
            if image.contains('@') {
                String::new()
            } else {
                "latest".into()
            },
        ),
    }
}

/// The resource of a process: of this host in local mode, of its container (pod,
/// namespace, node) in cluster mode.
pub fn resource_of(mode: &Mode, p: &ProcInfo, container: Option<&Container>) -> Resource {
    let exe_name = p
        .exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match (mode, container) {
        (Mode::Cluster { node }, Some(c)) => {
            let (image_name, tag) = split_image(&c.image);
            let service = if c.name.is_empty() {
                image_name.rsplit('/').next().unwrap_or("").to_string()
            } else {
                c.name.clone()
            };
            Resource {
                attributes: vec![
                    ("service.name", service),
                    ("process.pid", p.pid.to_string()),
                    ("process.executable.path", p.exe.display().to_string()),
                    ("container.id", c.id.clone()),
                    ("container.image.name", image_name),
                    ("container.image.tag", tag),
                    ("k8s.namespace.name", c.pod_namespace.clone()),
                    ("k8s.pod.name", c.pod_name.clone()),
                    ("k8s.pod.uid", c.pod_uid.clone()),
                    ("k8s.container.name", c.name.clone()),
                    ("k8s.node.name", node.clone()),
                ],
            }
        }
        _ => Resource {
            attributes: vec![
                ("service.name", exe_name),
                ("process.pid", p.pid.to_string()),
                ("process.executable.path", p.exe.display().to_string()),
                ("host.name", hostname()),
            ],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_split_into_name_and_tag() {
        assert_eq!(
            split_image("registry.example:5000/shop/cart:v1.2"),
            ("registry.example:5000/shop/cart".into(), "v1.2".into())
        );
        assert_eq!(split_image("nginx"), ("nginx".into(), "latest".into()));
        assert_eq!(split_image("r/x@sha256:abc"), ("r/x".into(), "".into()));
        assert_eq!(
            split_image("localhost:5000/x"),
            ("localhost:5000/x".into(), "latest".into())
        );
    }
}
