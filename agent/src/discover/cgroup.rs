//! Which container a process belongs to, from /proc/PID/cgroup: both the cgroupfs layout
//! (`/kubepods/besteffort/pod<uid>/<id>`, cgroup v1 or v2) and the systemd one
//! (`.../cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`).

/// The 64-hex container id in a /proc/PID/cgroup text, if any.
pub fn container_id(cgroup: &str) -> Option<String> {
    for line in cgroup.lines() {
        // hierarchy-id:controllers:path
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        for comp in path.rsplit('/') {
            let comp = comp.strip_suffix(".scope").unwrap_or(comp);
            let id = comp.rsplit(['-', ':']).next().unwrap_or(comp);
            if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Some(id.to_ascii_lowercase());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f1c2b0a9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b";

    #[test]
    fn cgroup_v1_cgroupfs_layout() {
        let text = format!(
            "12:pids:/kubepods/besteffort/pod1234-5678/{ID}\n11:memory:/kubepods/besteffort/pod1234-5678/{ID}\n0::/\n"
        );
        assert_eq!(container_id(&text).as_deref(), Some(ID));
    }

    #[test]
    fn cgroup_v2_systemd_layouts() {
        for path in [
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice/\
                cri-containerd-{ID}.scope"
            ),
            format!("/kubepods.slice/kubepods-pod12_34.slice/crio-{ID}.scope"),
            format!("/system.slice/docker-{ID}.scope"),
            format!("/kubepods/burstable/pod12/{ID}"),
        ] {
            assert_eq!(
                container_id(&format!("0::{path}\n")).as_deref(),
                Some(ID),
                "{path}"
            );
        }
    }

    #[test]
    fn host_processes_have_none() {
        assert_eq!(
            container_id("0::/user.slice/user-0.slice/session-1.scope\n"),
            None
        );
        assert_eq!(container_id("0::/\n"), None);
        assert_eq!(container_id(""), None);
    }
}
