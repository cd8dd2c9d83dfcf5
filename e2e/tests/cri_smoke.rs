//! The CRI scaffolding itself: a private containerd runs a locally built Go image as a pod,
//! the way a kubelet would, and cleans everything up.

use gprobe_e2e::cri::{require_containers, Containerd, PodSpec};
use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t0.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True while `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Pids of processes whose command line mentions `needle` (our containerd's socket).
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(p.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(needle) {
                out.push(pid);
            }
        }
    }
    out
}

#[test]
fn containerd_runs_a_go_pod_over_cri() {
    let test = "containerd_runs_a_go_pod_over_cri";
    require_containers(test);
    let t0 = Instant::now();
    let binary = harness::program("examples/http-client", GoVersion::Go127, false);
    eprintln!("{test}: built http-client in {:?}", t0.elapsed());

    let t1 = Instant::now();
    let ctrd = Containerd::start().unwrap_or_else(|e| panic!("start containerd: {e}"));
    let containerd_pid = ctrd.pid().expect("containerd pid");
    let dir = ctrd.dir().to_path_buf();
    let socket = ctrd.socket().to_string_lossy().into_owned();
    eprintln!(
        "{test}: containerd {containerd_pid} ready in {:?} ({} snapshotter)",
        t1.elapsed(),
        ctrd.snapshotter()
    );

    let image = "registry.test/shop/http-client:v1.2";
    let t2 = Instant::now();
    ctrd.import_image(image, &binary)
        .unwrap_or_else(|e| panic!("import {image}: {e}"));
    eprintln!("{test}: imported {image} in {:?}", t2.elapsed());

    let spec = PodSpec {
        name: "http-client-7d4b9".into(),
        namespace: "shop".into(),
        uid: "0b6f3c1e-5a8d-4e0f-9c2a-7e1d3b5a9f01".into(),
        labels: BTreeMap::from([("app".to_string(), "shop".to_string())]),
        container: "app".into(),
        image: image.into(),
        args: ["-n", "0", "-interval", "100ms"].map(String::from).to_vec(),
    };
    let t3 = Instant::now();
    let pod = ctrd
        .run_pod(&spec)
        .unwrap_or_else(|e| panic!("run pod: {e}"));
    eprintln!(
        "{test}: pod running in {:?}: container {} pid {}",
        t3.elapsed(),
        pod.container_id,
        pod.pid
    );

    assert_eq!(
        pod.container_id.len(),
        64,
        "container id {:?}",
        pod.container_id
    );
    assert!(pod.container_id.bytes().all(|b| b.is_ascii_hexdigit()));
    let cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", pod.pid))
        .expect("read the pod's cgroup");
    assert!(
        cgroup.contains(&pod.container_id),
        "/proc/{}/cgroup does not name container {}:\n{cgroup}",
        pod.pid,
        pod.container_id
    );
    assert!(
        cgroup.contains(&format!(
            "/kubepods/besteffort/pod{}/{}",
            spec.uid, pod.container_id
        )),
        "cgroup is not kubelet-shaped:\n{cgroup}"
    );
    let in_root = format!("/proc/{}/root/app/http-client", pod.pid);
    assert!(Path::new(&in_root).is_file(), "{in_root} missing");
    let exe = std::fs::read_link(format!("/proc/{}/exe", pod.pid)).expect("readlink exe");
    assert_eq!(exe, Path::new("/app/http-client"));

    let logs = ctrd
        .wait_for_logs(
            &pod,
            |l| l.lines().any(|l| l.starts_with("GET http://")),
            Duration::from_secs(5),
        )
        .unwrap_or_else(|e| panic!("no GET lines: {e}"));
    eprintln!(
        "{test}: first log line: {}",
        logs.lines().next().unwrap_or("")
    );

    let t4 = Instant::now();
    ctrd.remove_pod(&pod)
        .unwrap_or_else(|e| panic!("remove pod: {e}"));
    assert!(
        wait_until(Duration::from_secs(5), || !alive(pod.pid)),
        "pod process {} still alive 5s after remove_pod",
        pod.pid
    );
    eprintln!("{test}: pod removed in {:?}", t4.elapsed());

    let t5 = Instant::now();
    drop(ctrd);
    eprintln!("{test}: containerd stopped in {:?}", t5.elapsed());
    assert!(
        !alive(containerd_pid),
        "containerd {containerd_pid} still running"
    );
    let left = processes_mentioning(&socket);
    assert!(left.is_empty(), "processes still using {socket}: {left:?}");
    assert!(!dir.exists(), "{} not removed", dir.display());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&*dir.to_string_lossy()),
        "mounts left under {}",
        dir.display()
    );
    for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let pod_cgroup = h
            .path()
            .join(format!("kubepods/besteffort/pod{}", spec.uid));
        assert!(!pod_cgroup.exists(), "{} left behind", pod_cgroup.display());
    }
    eprintln!("{test}: total {:?}", t0.elapsed());
}
