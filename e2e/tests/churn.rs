//! The agent under churn: ProbeSpecs rewritten again and again, processes coming and going,
//! many links at once. Memory stays flat, links go with their processes, and stopping is
//! quick and leaves nothing in the kernel. They need root (BPF, containers); CI on the
//! project's machines runs them all.

use gprobe_e2e::cri::{require_containers, Containerd, Pod, PodSpec};
use gprobe_e2e::footprint::{bpf_objects, rss_anon, slope, still_in_kernel};
use gprobe_e2e::go::{GoVersion, TempDir};
use gprobe_e2e::harness::{gprobe_bin, program, require_trace, serial, Gprobe};
use gprobe_e2e::procmem::{byte_at_file_offset, probe_offset, INT3};
use gprobe_e2e::spec::{to_yaml, ProbeBuilder, SpecBuilder};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The five functions of e2e/testdata/churn, each `func(i int64) int64`.
const FUNCS: [&str; 5] = [
    "main.add",
    "main.double",
    "main.square",
    "main.negate",
    "main.mix",
];

fn churn_bin() -> PathBuf {
    program("e2e/testdata/churn", GoVersion::Go127, false)
}

fn probe(symbol: &str) -> ProbeBuilder {
    ProbeBuilder::new(symbol)
        .signature("func(i int64) int64")
        .capture(["i", "r0"])
        .latency()
}

fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Children stopped (SIGKILL) and reaped when dropped.
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `gprobe agent`, stopped by pid (SIGINT, then SIGKILL after 30 s) when dropped.
struct Agent {
    child: Option<Child>,
    dir: TempDir,
}

impl Agent {
    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    fn stop(&mut self) -> String {
        if let Some(mut c) = self.child.take() {
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

fn report(path: &Path) -> serde_json::Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// The `i`-th version of the spec: each a real change (its probes are attached anew),
/// alternating between all five functions and three of them with other captures and
/// limits, and `metadata.generation` = `i`, which the report echoes once it is applied.
fn rewrite(i: i64) -> (String, usize) {
    let mut b = SpecBuilder::new("churn-calls")
        .namespace("churn")
        .images(["registry.test/churn/*"])
        .events_per_second(10_000 + i as u32);
    let n = if i % 2 == 0 { 5 } else { 3 };
    for f in &FUNCS[..n] {
        let p = if n == 5 {
            probe(f)
        } else {
            ProbeBuilder::new(f)
                .signature("func(i int64) int64")
                .capture(["i"])
        };
        b = b.probe(p);
    }
    let mut spec = b.build();
    spec.metadata.generation = Some(i);
    (to_yaml(&spec), n)
}

/// Links attached as of the spec's generation `i`, from the report file.
fn applied(report_file: &Path, i: i64) -> Option<usize> {
    let r = report(report_file);
    let st = &r["churn/churn-calls"];
    if st["observedGeneration"].as_i64() != Some(i) {
        return None;
    }
    st["links"]
        .as_array()
        .map(|l| l.iter().filter(|l| l["state"] == "Attached").count())
}

/// Links attached in pod `pod`, from the report file.
fn attached_in(report_file: &Path, pod: &str) -> usize {
    let r = report(report_file);
    r["churn/churn-calls"]["links"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter(|l| l["pod"] == pod && l["state"] == "Attached")
                .count()
        })
        .unwrap_or(0)
}

/// What each function of a churn-check process was called with, as the agent recorded it.
#[derive(Debug, Default, Clone)]
struct Seen {
    records: u64,
    argsum: i64,
    unfinished: u64,
    with_result: u64,
}

/// What each function of the churn program returns (wrapping, as Go's int64 does).
fn expected(func: &str, i: i64) -> Option<i64> {
    Some(match func {
        "main.add" => i.wrapping_add(7),
        "main.double" => i.wrapping_mul(2),
        "main.square" => i.wrapping_mul(i),
        "main.negate" => i.wrapping_neg(),
        "main.mix" => i.wrapping_mul(31).wrapping_add(3),
        _ => return None,
    })
}

/// The records (JSON lines) of `file` that contain `having`.
fn records(file: &Path, having: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(having))
        // The last line may be half-written while the agent runs.
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The agent's records of process `pid`, by function.
fn records_of(file: &Path, pid: u32) -> BTreeMap<String, Seen> {
    let mut out: BTreeMap<String, Seen> = BTreeMap::new();
    for v in records(file, &format!("\"pid\":{pid},")) {
        let s = out
            .entry(v["symbol"].as_str().unwrap_or_default().to_string())
            .or_default();
        s.records += 1;
        s.argsum = s.argsum.wrapping_add(v["args"]["i"].as_i64().unwrap_or(0));
        if v["unfinished"].as_bool() == Some(true) {
            s.unfinished += 1;
        }
        if v["returns"]["r0"].as_i64().is_some() {
            s.with_result += 1;
        }
    }
    out
}

/// Every record (of any process, during the churn too) whose result is not what the function
/// returns for its argument, or that has no argument.
fn wrong_values(file: &Path) -> Vec<String> {
    records(file, "")
        .into_iter()
        .filter(|v| {
            let func = v["symbol"].as_str().unwrap_or_default();
            match (v["args"]["i"].as_i64(), v["returns"]["r0"].as_i64()) {
                (None, _) => true,
                (Some(i), Some(r0)) => expected(func, i) != Some(r0),
                (Some(_), None) => false,
            }
        })
        .map(|v| v.to_string())
        .collect()
}

/// The churn program's own account: (calls, sum of arguments) by function.
fn program_account(logs: &str) -> BTreeMap<String, (u64, i64)> {
    let mut out = BTreeMap::new();
    for line in logs.lines() {
        let mut kv = BTreeMap::new();
        let mut func = None;
        for w in line.split_whitespace() {
            match w.split_once('=') {
                Some((k, v)) => {
                    kv.insert(k, v);
                }
                None if w.starts_with("main.") => func = Some(w),
                None => {}
            }
        }
        if let (Some(f), Some(c), Some(s)) = (func, kv.get("calls"), kv.get("argsum")) {
            out.insert(f.to_string(), (c.parse().unwrap(), s.parse().unwrap()));
        }
    }
    out
}

/// The process that checks the calls after the churn: its rounds and its first argument.
const CHECK_CALLS: u64 = 400;
const CHECK_BASE: i64 = 1_000_000_000;

/// Three pods of the churn program, one ProbeSpec rewritten 1,000 times (the agent reads its
/// folder every 10 ms: about a minute of rewrites): the agent's RssAnon grows at most 1 MiB
/// after the first fifth, no record has a wrong or missing value, and a process started
/// afterwards has every call recorded exactly. For a closer look: GPROBE_CHURN_REWRITES=N
/// (another count), GPROBE_CHURN_KEEP=FILE (the agent's log), GPROBE_CHURN_RECORDS=FILE (its
/// records).
#[test]
fn a_thousand_spec_rewrites_leave_anonymous_memory_flat() {
    require_trace("spec churn");
    require_containers("spec churn");
    let rewrites: i64 = std::env::var("GPROBE_CHURN_REWRITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let warmup = rewrites / 5;
    let bin = churn_bin();
    let _guard = serial();
    let ctrd = Containerd::start().expect("containerd");
    ctrd.import_image("registry.test/churn/churn:v1", &bin)
        .expect("import");
    const PODS: usize = 3;
    let pods: Vec<Pod> = (0..PODS)
        .map(|k| {
            ctrd.run_pod(&PodSpec {
                name: format!("churn-{k}"),
                namespace: "churn".into(),
                uid: format!("uid-churn-{k}"),
                labels: BTreeMap::from([("app".to_string(), "churn".to_string())]),
                container: "app".into(),
                image: "registry.test/churn/churn:v1".into(),
                args: ["-calls", "0", "-rate", "50"].map(String::from).to_vec(),
            })
            .unwrap_or_else(|e| panic!("pod churn-{k}: {e}"))
        })
        .collect();

    let dir = TempDir::new("spec-churn");
    let specs = dir.path().join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    let spec_file = specs.join("churn.yaml");
    let write_spec = |i: i64| -> usize {
        let (text, n) = rewrite(i);
        // Whole or not at all: the agent never reads a half-written file.
        let tmp = specs.join(".churn.yaml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &spec_file).unwrap();
        n
    };
    let report_file = dir.path().join("report.json");
    let records_file = dir.path().join("records.jsonl");
    let n = write_spec(1);
    // Read every 10 ms rather than every second: 1,000 rewrites in about a minute.
    let child = Command::new(gprobe_bin())
        .args(["agent", "--node-name", "test-node", "--spec-dir"])
        .arg(&specs)
        .args(["--spec-dir-interval", "10ms"])
        .arg("--cri-socket")
        .arg(ctrd.socket())
        .arg("--report-file")
        .arg(&report_file)
        .args(["--container-poll-interval", "200ms", "--output", "jsonl"])
        .stdout(std::fs::File::create(&records_file).unwrap())
        .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut agent = Agent {
        child: Some(child),
        dir,
    };
    let pid = agent.pid();
    wait_until("generation 1 applied", Duration::from_secs(60), || {
        applied(&report_file, 1) == Some(PODS * n)
    });

    let t0 = Instant::now();
    let mut samples: Vec<(f64, f64)> = Vec::new();
    for i in 2..=rewrites {
        let n = write_spec(i);
        wait_until(
            &format!("generation {i} applied"),
            Duration::from_secs(30),
            || applied(&report_file, i) == Some(PODS * n),
        );
        samples.push((i as f64, rss_anon(pid) as f64));
    }
    let took = t0.elapsed();
    let after: Vec<(f64, f64)> = samples
        .iter()
        .copied()
        .filter(|(i, _)| *i > warmup as f64)
        .collect();
    let (xs, ys): (Vec<f64>, Vec<f64>) = after.iter().copied().unzip();
    let per_rewrite = slope(&xs, &ys);
    let first = ys[..10].iter().copied().fold(f64::MAX, f64::min);
    let last = ys[ys.len() - 10..].iter().copied().fold(f64::MIN, f64::max);
    let growth = last - first;
    let kib = |b: f64| b / 1024.0;
    eprintln!(
        "{} rewrites in {took:.1?} ({:.0} ms each); RssAnon after warm-up ({warmup}): \
         {:.0} KiB -> {:.0} KiB, growth {:.0} KiB, slope {:.2} KiB per rewrite; \
         every 100: {:?}",
        rewrites - 1,
        took.as_secs_f64() * 1000.0 / (rewrites - 1) as f64,
        kib(first),
        kib(last),
        kib(growth),
        kib(per_rewrite),
        samples
            .iter()
            .filter(|(i, _)| *i as i64 % 100 == 0)
            .map(|(i, b)| (*i as i64, (kib(*b)) as i64))
            .collect::<Vec<_>>()
    );
    // The calls are still exact after the churn: a new process of the last version's probes,
    // calling once they are attached, has each of its calls recorded once, with its values.
    let check = ctrd
        .run_pod(&PodSpec {
            name: "churn-check".into(),
            namespace: "churn".into(),
            uid: "uid-churn-check".into(),
            labels: BTreeMap::from([("app".to_string(), "churn".to_string())]),
            container: "app".into(),
            image: "registry.test/churn/churn:v1".into(),
            args: [
                "-calls",
                &CHECK_CALLS.to_string(),
                "-rate",
                "200",
                "-base",
                &CHECK_BASE.to_string(),
                "-start-signal",
            ]
            .map(String::from)
            .to_vec(),
        })
        .expect("pod churn-check");
    let n = rewrite(rewrites).1;
    wait_until(
        "the last version's probes attached in churn-check",
        Duration::from_secs(30),
        || attached_in(&report_file, "churn-check") == n,
    );
    ctrd.wait_for_logs(&check, |l| l.contains("ready"), Duration::from_secs(30))
        .unwrap();
    // SAFETY: signalling the check pod's own process by pid.
    assert_eq!(unsafe { libc::kill(check.pid as i32, libc::SIGUSR1) }, 0);
    let own = ctrd
        .wait_for_logs(&check, |l| l.contains(" done "), Duration::from_secs(30))
        .unwrap();
    let own = program_account(&own);
    let want: u64 = FUNCS[..n].iter().map(|f| own[*f].0).sum();
    wait_until("churn-check's records", Duration::from_secs(30), || {
        records_of(&records_file, check.pid)
            .values()
            .map(|s| s.records)
            .sum::<u64>()
            >= want
    });
    let stderr = agent.stop();
    if let Ok(p) = std::env::var("GPROBE_CHURN_KEEP") {
        std::fs::write(p, &stderr).unwrap();
    }
    if let Ok(p) = std::env::var("GPROBE_CHURN_RECORDS") {
        std::fs::copy(&records_file, p).unwrap();
    }
    let seen = records_of(&records_file, check.pid);
    let wrong = wrong_values(&records_file);
    assert!(
        wrong.is_empty(),
        "{} records whose result is not the function of the argument, e.g.:\n{}",
        wrong.len(),
        wrong.iter().take(5).cloned().collect::<Vec<_>>().join("\n")
    );
    for f in &FUNCS[..n] {
        let (calls, argsum) = own[*f];
        assert_eq!(calls, CHECK_CALLS, "churn-check's own count of {f}");
        let s = seen.get(*f).cloned().unwrap_or_default();
        assert_eq!(
            (s.records, s.argsum, s.unfinished),
            (calls, argsum, 0),
            "{f} in churn-check after the churn: (records, sum of arguments, unfinished) vs \
             the program's own (calls, sum)"
        );
        if n == 5 {
            assert_eq!(s.with_result, calls, "{f}: records with r0");
        }
    }
    eprintln!(
        "after the churn: {} of {} calls of churn-check recorded exactly; no wrong value in {} records",
        seen.values().map(|s| s.records).sum::<u64>(),
        want,
        std::fs::read_to_string(&records_file).unwrap().lines().count()
    );
    ctrd.remove_pod(&check).unwrap();
    assert!(
        growth <= 1024.0 * 1024.0,
        "anonymous memory grew {:.0} KiB over {} rewrites after warm-up ({:.2} KiB per rewrite)\n{}",
        kib(growth),
        after.len(),
        kib(per_rewrite),
        stderr.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
    for p in &pods {
        ctrd.remove_pod(p).unwrap();
    }
}

/// The spec of `bin` with its five functions as latency probes: in each process, five
/// links and gprobe's own runtime.newproc1 probe (six).
fn five_latency_probes(name: &str, bin: &Path) -> String {
    let mut spec = SpecBuilder::new(name).executable(bin).events_per_second(0);
    for f in FUNCS {
        spec = spec.probe(probe(f));
    }
    spec.yaml()
}

fn spawn_churn(bin: &Path, n: usize, args: &[&str]) -> Kids {
    Kids(
        (0..n)
            .map(|_| {
                Command::new(bin)
                    .args(args)
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    )
}

#[test]
fn stopping_with_1200_links_takes_at_most_two_seconds_and_leaves_nothing() {
    require_trace("stop with 1,200 links");
    let bin = churn_bin();
    let _guard = serial();
    const PROCS: usize = 200;
    let kids = spawn_churn(&bin, PROCS, &["-calls", "0", "-rate", "2"]);
    let g = Gprobe::cmd(&five_latency_probes("crowd", &bin))
        .summary_file()
        .start();
    g.wait_for_stderr(
        |s| s.matches("attached crowd / ").count() == PROCS * FUNCS.len(),
        Duration::from_secs(60),
    );
    let mine = bpf_objects(g.pid());
    assert!(
        mine.uprobe_links >= PROCS * (FUNCS.len() + 1),
        "{} uprobe links for {PROCS} processes x ({} probes + runtime.newproc1)",
        mine.uprobe_links,
        FUNCS.len()
    );
    let t0 = Instant::now();
    let run = g.stop();
    let took = t0.elapsed();
    let detached = run
        .stderr
        .lines()
        .find(|l| l.contains("every uprobe detached in"))
        .unwrap_or_else(|| panic!("not every uprobe was detached:\n{}", run.stderr))
        .to_string();
    eprintln!(
        "{} uprobe links ({} BPF links, {} programs, {} maps): SIGINT to exit {took:.2?}; {detached}",
        mine.uprobe_links,
        mine.links.len(),
        mine.progs.len(),
        mine.maps.len()
    );
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(run.summary().processes.traced, PROCS as u64);
    // Nothing of this gprobe in the kernel: its links went with it; programs and maps are
    // freed once the kernel's last reference (a link's, after a grace period) is dropped.
    let left = still_in_kernel(&mine);
    assert!(left.links.is_empty(), "links left: {:?}", left.links);
    wait_until(
        "gprobe's programs and maps freed",
        Duration::from_secs(5),
        || still_in_kernel(&mine).is_empty(),
    );
    // ... and no breakpoint in any process.
    for f in FUNCS {
        let off = probe_offset(&bin, f);
        for k in &kids.0 {
            assert_ne!(
                byte_at_file_offset(k.id(), off),
                INT3,
                "{f} in pid {}",
                k.id()
            );
        }
    }
    assert!(
        took <= Duration::from_secs(2),
        "stopping with {} uprobe links took {took:.2?}\n{}",
        mine.uprobe_links,
        run.stderr
    );
}

#[test]
fn links_of_processes_that_exited_are_released_when_they_exit() {
    require_trace("links of exited processes");
    let bin = churn_bin();
    let _guard = serial();
    let g = Gprobe::cmd(&five_latency_probes("crowd", &bin))
        .summary_file()
        .start();
    const PROCS: usize = 200;
    // Two seconds of calls each, all at once: the ring buffer fills while they run.
    let mut kids = spawn_churn(&bin, PROCS, &["-calls", "100", "-rate", "50"]);
    let mut most = 0;
    for k in &mut kids.0 {
        most = most.max(bpf_objects(g.pid()).uprobe_links);
        assert!(k.wait().unwrap().success());
    }
    let exited = Instant::now();
    let mut left = bpf_objects(g.pid()).uprobe_links;
    while left > 0 && exited.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        left = bpf_objects(g.pid()).uprobe_links;
    }
    let took = exited.elapsed();
    let run = g.stop();
    eprintln!(
        "{PROCS} processes exited; up to {most} uprobe links seen, all released {took:.2?} after the last exit; {}",
        run.stderr
            .lines()
            .find(|l| l.contains("processes:"))
            .unwrap_or_default()
            .trim()
    );
    assert_eq!(
        left, 0,
        "{left} uprobe links of exited processes still open 10 s after they exited\n{}",
        run.stderr
    );
    assert!(most > 0, "no link was ever attached\n{}", run.stderr);
}
