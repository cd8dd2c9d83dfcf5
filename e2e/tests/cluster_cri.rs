//! Cluster mode end to end on this machine: a private containerd, real pods created over CRI
//! with kubelet-style labels, Go images built and imported here, and `gprobe agent` with
//! ProbeSpecs from --spec-dir exporting to a real OTLP receiver.

use gprobe_e2e::cri::{require_containers, Containerd, Pod, PodSpec};
use gprobe_e2e::go::{GoVersion, TempDir};
use gprobe_e2e::harness::{self, gprobe_bin, require_trace, serial};
use gprobe_e2e::otlp_receiver::{attr_str, grpc_receiver, receiver_runtime, spans};
use gprobe_e2e::procmem::{byte_at_file_offset, probe_offset, INT3};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Pods of shop's images (v1.x) labelled app=shop, container `app`: their URLs.
fn shop_spec() -> String {
    SpecBuilder::new("shop-urls")
        .namespace("shop")
        .images(["registry.test/shop/*:v1.*"])
        .pod_labels([("app", "shop")])
        .container_names(["app"])
        .probe(
            ProbeBuilder::new("net/http.(*Client).Get")
                .signature("func(c *Client, url string) (resp *Response, err error)")
                .capture(["url"])
                .latency(),
        )
        .yaml()
}

fn pod(ctrd: &Containerd, name: &str, app: &str, image: &str) -> Pod {
    ctrd.run_pod(&PodSpec {
        name: name.into(),
        namespace: "shop".into(),
        uid: format!("uid-{name}"),
        labels: BTreeMap::from([("app".to_string(), app.to_string())]),
        container: "app".into(),
        image: image.into(),
        args: vec![
            "-n".into(),
            "0".into(),
            "-interval".into(),
            "100ms".into(),
            "-delay".into(),
            "0s".into(),
        ],
    })
    .unwrap_or_else(|e| panic!("pod {name}: {e}"))
}

fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// BPF links the agent holds (its uprobes, plus three tracepoints): fds in /proc/PID/fd.
fn perf_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|t| t.to_string_lossy().contains("bpf_link"))
                .count()
        })
        .unwrap_or(0)
}

fn report(path: &Path) -> serde_json::Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null)
}

fn attached_pods(path: &Path) -> BTreeSet<String> {
    report(path)["shop/shop-urls"]["links"]
        .as_array()
        .map(|links| {
            links
                .iter()
                .filter(|l| l["state"] == "Attached")
                .map(|l| l["pod"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn urls_in_logs(logs: &str) -> BTreeSet<String> {
    logs.lines()
        .filter_map(|l| l.strip_prefix("GET "))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

struct Agent(Option<Child>, TempDir);

impl Agent {
    fn stderr(&self) -> String {
        std::fs::read_to_string(self.1.path().join("stderr")).unwrap_or_default()
    }
    fn stop(&mut self) -> String {
        if let Some(mut c) = self.0.take() {
            // SAFETY: signalling our own child by pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let t0 = Instant::now();
            while c.try_wait().unwrap().is_none() {
                if t0.elapsed() > Duration::from_secs(30) {
                    let _ = c.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.wait();
        }
        self.stderr()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn agent_traces_selected_pods_only_follows_new_ones_and_detaches_removed_ones() {
    require_trace("cluster cri");
    require_containers("cluster cri");
    let bin = harness::program("examples/http-client", GoVersion::Go127, false);
    let _guard = serial();
    let rt = receiver_runtime();
    let (rec, endpoint) = grpc_receiver(&rt);
    let ctrd = Containerd::start().expect("containerd");
    for image in [
        "registry.test/shop/http-client:v1.2",
        "registry.test/other/http-client:v1.2",
    ] {
        ctrd.import_image(image, &bin).expect("import");
    }
    // v1.3 gets an image of its own (another file name makes another layer, so another
    // id): its pod is created from the id, so the agent can only learn the name from it.
    let dir = TempDir::new("agent");
    let bin_v13 = dir.path().join("http-client-v13");
    std::fs::copy(&bin, &bin_v13).unwrap();
    ctrd.import_image("registry.test/shop/http-client:v1.3", &bin_v13)
        .expect("import");
    let v13_id = ctrd
        .image_id("registry.test/shop/http-client:v1.3")
        .unwrap();
    assert_ne!(
        v13_id,
        ctrd.image_id("registry.test/shop/http-client:v1.2")
            .unwrap()
    );

    let specs = dir.path().join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    std::fs::write(specs.join("shop.yaml"), shop_spec()).unwrap();
    let report_file = dir.path().join("report.json");
    // Pods running before the agent starts: the selected one, one of the same image whose
    // labels do not match (it shares the binary's inode, so its calls fire the same uprobes),
    // and one with the right labels but another image.
    let a = pod(
        &ctrd,
        "shop-a",
        "shop",
        "registry.test/shop/http-client:v1.2",
    );
    let b = pod(&ctrd, "web-b", "web", "registry.test/shop/http-client:v1.2");
    let c = pod(
        &ctrd,
        "other-c",
        "shop",
        "registry.test/other/http-client:v1.2",
    );

    let child = Command::new(gprobe_bin())
        .args(["agent", "--node-name", "test-node", "--spec-dir"])
        .arg(&specs)
        .arg("--cri-socket")
        .arg(ctrd.socket())
        .arg("--report-file")
        .arg(&report_file)
        .args([
            "--otlp-endpoint",
            &endpoint,
            "--metrics-interval",
            "1s",
            "--container-poll-interval",
            "200ms",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let agent_pid = child.id();
    let mut agent = Agent(Some(child), dir);
    wait_until("shop-a attached", Duration::from_secs(30), || {
        attached_pods(&report_file).contains("shop-a")
    });
    assert_eq!(
        attached_pods(&report_file),
        BTreeSet::from(["shop-a".to_string()]),
        "{}",
        agent.stderr()
    );
    let fds_one = perf_fds(agent_pid);
    // Uprobes are per process: the pod of the same image that the spec does not select
    // has no breakpoint in its memory, the selected one has.
    let off = probe_offset(&bin, "net/http.(*Client).Get");
    assert_eq!(byte_at_file_offset(a.pid, off), INT3, "shop-a is traced");
    assert_ne!(byte_at_file_offset(b.pid, off), INT3, "web-b pays nothing");

    // A pod started later is traced within a second or so. It is created as the kubelet
    // does: ImageSpec.image is the image id, and containerd 1.6 drops user_specified_image,
    // so the runtime reports only the id; the agent asks the runtime for the image's tag
    // and the spec's image glob selects it.
    let started = Instant::now();
    let d = pod(&ctrd, "shop-d", "shop", &v13_id);
    wait_until("shop-d attached", Duration::from_secs(10), || {
        attached_pods(&report_file).contains("shop-d")
    });
    eprintln!(
        "shop-d reported attached {:?} after its start",
        started.elapsed()
    );
    let fds_two = perf_fds(agent_pid);
    assert!(
        fds_two > fds_one,
        "a new binary adds uprobes: {fds_one} -> {fds_two}"
    );
    wait_until("spans from shop-d", Duration::from_secs(10), || {
        spans(&rec)
            .iter()
            .any(|(r, _)| attr_str(r, "k8s.pod.name").as_deref() == Some("shop-d"))
    });
    let d_spans = spans(&rec);
    let (d_res, _) = d_spans
        .iter()
        .find(|(r, _)| attr_str(r, "k8s.pod.name").as_deref() == Some("shop-d"))
        .unwrap();
    for (k, v) in [
        ("container.image.name", "registry.test/shop/http-client"),
        ("container.image.tag", "v1.3"),
        ("process.executable.path", "/app/http-client-v13"),
    ] {
        assert_eq!(
            attr_str(d_res, k).as_deref(),
            Some(v),
            "shop-d (created from {v13_id}): resource attribute {k}"
        );
    }

    // A removed pod leaves no probe behind.
    // Its log read after it stopped: everything it fetched while traced is in it.
    ctrd.remove_pod(&a).unwrap();
    let a_logs = ctrd.logs(&a);
    wait_until(
        "shop-a gone from the report",
        Duration::from_secs(5),
        || !attached_pods(&report_file).contains("shop-a"),
    );
    wait_until("shop-a's uprobes detached", Duration::from_secs(5), || {
        perf_fds(agent_pid) == fds_one
    });
    // Deleting the ProbeSpec detaches its probes everywhere (the spec folder is re-read
    // every second). Three links remain: the exec, exit and fork tracepoints.
    std::fs::remove_file(specs.join("shop.yaml")).unwrap();
    wait_until(
        "the deleted spec's uprobes detached",
        Duration::from_secs(5),
        || perf_fds(agent_pid) == 3,
    );
    let stderr = agent.stop();
    assert!(
        stderr.contains("ProbeSpec shop/shop-urls deleted: its probes are detached"),
        "{stderr}"
    );

    let all = spans(&rec);
    let pods: BTreeSet<String> = all
        .iter()
        .filter_map(|(r, _)| attr_str(r, "k8s.pod.name"))
        .collect();
    assert_eq!(
        pods,
        BTreeSet::from(["shop-a".to_string(), "shop-d".to_string()]),
        "only selected pods are reported\n{stderr}"
    );
    let a_spans: Vec<_> = all
        .iter()
        .filter(|(r, _)| attr_str(r, "k8s.pod.name").as_deref() == Some("shop-a"))
        .collect();
    let (res, _) = a_spans[0];
    for (k, v) in [
        ("k8s.namespace.name", "shop"),
        ("k8s.pod.uid", "uid-shop-a"),
        ("k8s.container.name", "app"),
        ("k8s.node.name", "test-node"),
        ("container.id", a.container_id.as_str()),
        ("container.image.name", "registry.test/shop/http-client"),
        ("container.image.tag", "v1.2"),
        ("process.executable.path", "/app/http-client"),
    ] {
        assert_eq!(
            attr_str(res, k).as_deref(),
            Some(v),
            "resource attribute {k}"
        );
    }
    // Every URL shop-a traced is one it fetched (its log), and it fetched them while traced.
    let fetched = urls_in_logs(&a_logs);
    let traced: BTreeSet<String> = a_spans
        .iter()
        .filter_map(|(_, s)| attr_str(&s.attributes, "gprobe.args.url"))
        .collect();
    assert!(traced.len() >= 3, "shop-a traced {} URLs", traced.len());
    assert!(
        traced.is_subset(&fetched),
        "traced URLs not in shop-a's log: {:?}",
        traced.difference(&fetched).collect::<Vec<_>>()
    );
    let mut seen = std::collections::BTreeMap::new();
    for (_, s) in &a_spans {
        seen.entry(attr_str(&s.attributes, "gprobe.args.url").unwrap())
            .or_insert_with(Vec::new)
            .push((s.start_time_unix_nano, s.span_id.clone()));
    }
    let dups: Vec<_> = seen.iter().filter(|(_, v)| v.len() > 1).take(3).collect();
    assert_eq!(
        traced.len(),
        a_spans.len(),
        "each URL once: {dups:?}\n{stderr}"
    );

    for p in [&b, &c, &d] {
        ctrd.remove_pod(p).unwrap();
    }
}
