//! `gprobe agent` under spec and process churn for a long time (`bench/soak.sh`; not part of
//! the test suite). Pods of e2e/testdata/churn run on a private containerd: steady ones
//! calling five functions all along, and spawners starting short-lived copies that each make
//! 100 rounds of calls. A ProbeSpec selecting all of them is rewritten every `--spec-every`
//! (each version a real change), and a second spec comes and goes. The agent's JSONL is
//! read as it comes.
//!
//! It prints the slopes (per hour, after warm-up) of the agent's anonymous memory, RSS, fds,
//! threads and uprobe links; and the calls checked against what the programs recorded
//! themselves: every record's value is right (r0 is the function of its argument), no
//! process has more records than calls, and every process that lived between two spec
//! changes has each of its calls recorded exactly once. Then it stops the agent, timing
//! it, and checks that nothing of it is left in the kernel. Exit status 1 if a check failed.
//!
//! ```text
//! cargo run --release -p gprobe-e2e --example soak -- --gprobe target/release/gprobe --duration 1h
//! ```

use gprobe_e2e::cri::{require_containers, Containerd, Pod, PodSpec};
use gprobe_e2e::footprint::{
    bpf_objects, fds, rss_anon, slope, status_field, still_in_kernel, threads, BpfObjects,
};
use gprobe_e2e::go::{GoVersion, TempDir};
use gprobe_e2e::harness::{program, require_trace};
use gprobe_e2e::spec::{to_yaml, ProbeBuilder, SpecBuilder};
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const FUNCS: [&str; 5] = [
    "main.add",
    "main.double",
    "main.square",
    "main.negate",
    "main.mix",
];
const SPEC: &str = "soak-calls";
const NS: &str = "soak";
/// A process's arguments start at a multiple of this (its base) and stay below the next.
const PROC_SPAN: i64 = 1_000_000;

/// What each function returns (wrapping, as Go's int64 does).
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

struct Args {
    gprobe: PathBuf,
    duration: Duration,
    spec_every: Duration,
    settle: Duration,
    sample_every: Duration,
    warmup: Duration,
    steady: usize,
    steady_rate: u32,
    spawners: usize,
    spawn_every: Duration,
    child_calls: u32,
    child_rate: u32,
}

fn parse_duration(s: &str) -> Duration {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| s.split_at(i))
        .unwrap_or((s, "s"));
    let n: f64 = num.parse().unwrap_or_else(|_| panic!("bad duration {s:?}"));
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => panic!("bad duration unit in {s:?} (ms, s, m, h)"),
    };
    Duration::from_secs_f64(secs)
}

fn args() -> Args {
    let mut a = Args {
        gprobe: PathBuf::from("target/release/gprobe"),
        duration: Duration::from_secs(3600),
        spec_every: Duration::from_millis(1500),
        settle: Duration::from_secs(60),
        sample_every: Duration::from_secs(10),
        warmup: Duration::from_secs(120),
        steady: 4,
        steady_rate: 20,
        spawners: 2,
        spawn_every: Duration::from_millis(500),
        child_calls: 100,
        child_rate: 50,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut it = argv.iter();
    while let Some(k) = it.next() {
        let mut v = || {
            it.next()
                .unwrap_or_else(|| panic!("{k} needs a value"))
                .clone()
        };
        match k.as_str() {
            "--gprobe" => a.gprobe = v().into(),
            "--duration" => a.duration = parse_duration(&v()),
            "--spec-every" => a.spec_every = parse_duration(&v()),
            "--settle" => a.settle = parse_duration(&v()),
            "--sample-every" => a.sample_every = parse_duration(&v()),
            "--warmup" => a.warmup = parse_duration(&v()),
            "--steady" => a.steady = v().parse().expect("--steady N"),
            "--steady-rate" => a.steady_rate = v().parse().expect("--steady-rate N"),
            "--spawners" => a.spawners = v().parse().expect("--spawners N"),
            "--spawn-every" => a.spawn_every = parse_duration(&v()),
            "--child-calls" => a.child_calls = v().parse().expect("--child-calls N"),
            "--child-rate" => a.child_rate = v().parse().expect("--child-rate N"),
            "-h" | "--help" => {
                println!(
                    "soak [--gprobe PATH] [--duration 1h] [--spec-every 1.5s] [--settle 60s] \
                     [--sample-every 10s] [--warmup 2m] [--steady 4] [--steady-rate 20] \
                     [--spawners 2] [--spawn-every 500ms] [--child-calls 100] [--child-rate 50]"
                );
                std::process::exit(0);
            }
            _ => panic!("unknown argument {k} (--help)"),
        }
    }
    a
}

fn unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// The main spec's version `generation`: all five functions, with or without latency and
/// results, the limit changed every time (each version is a real change).
fn main_spec(generation: i64) -> String {
    let latency = generation % 2 == 0;
    let mut b = SpecBuilder::new(SPEC)
        .namespace(NS)
        .images(["registry.test/soak/*"])
        .events_per_second(100_000 + generation as u32);
    for f in FUNCS {
        let p = ProbeBuilder::new(f).signature("func(i int64) int64");
        b = b.probe(if latency {
            p.capture(["i", "r0"]).latency()
        } else {
            p.capture(["i"])
        });
    }
    let mut spec = b.build();
    spec.metadata.generation = Some(generation);
    to_yaml(&spec)
}

/// A second spec on the steady pods, added and deleted as the main one changes.
fn extra_spec() -> String {
    SpecBuilder::new("soak-extra")
        .namespace(NS)
        .pod_labels([("app", "steady")])
        .probe(
            ProbeBuilder::new("main.add")
                .signature("func(i int64) int64")
                .capture(["i"]),
        )
        .yaml()
}

fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn observed_generation(report: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(report).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v[format!("{NS}/{SPEC}")]["observedGeneration"].as_i64()
}

/// Records of one function of one process, as the agent delivered them.
#[derive(Debug, Default, Clone)]
struct Seen {
    records: u64,
    argsum: i64,
    max_arg: i64,
}

#[derive(Debug, Default)]
struct Records {
    /// By (process base, function).
    seen: HashMap<(i64, String), Seen>,
    total: u64,
    /// Records whose result is not the function of the argument.
    wrong: Vec<String>,
    other_specs: u64,
    unfinished: u64,
    malformed: u64,
}

fn read_records(out: impl std::io::Read, into: Arc<Mutex<Records>>) {
    for line in std::io::BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        let v: serde_json::Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(_) => {
                into.lock().unwrap().malformed += 1;
                continue;
            }
        };
        let mut r = into.lock().unwrap();
        if v["probe"] != SPEC {
            r.other_specs += 1;
            continue;
        }
        r.total += 1;
        if v["unfinished"].as_bool() == Some(true) {
            r.unfinished += 1;
        }
        let func = v["symbol"].as_str().unwrap_or("").to_string();
        let Some(i) = v["args"]["i"].as_i64() else {
            r.malformed += 1;
            continue;
        };
        if let Some(r0) = v["returns"]["r0"].as_i64() {
            if expected(&func, i) != Some(r0) && r.wrong.len() < 20 {
                r.wrong.push(line.clone());
            }
        }
        let e = r
            .seen
            .entry((i - i.rem_euclid(PROC_SPAN), func))
            .or_default();
        e.records += 1;
        e.argsum = e.argsum.wrapping_add(i);
        e.max_arg = e.max_arg.max(i);
    }
}

/// What a process of the churn program said it did.
#[derive(Debug, Default, Clone)]
struct Report {
    calls: BTreeMap<String, (u64, i64)>,
    first_ns: i64,
    last_ns: i64,
}

fn reports(logs: &str) -> BTreeMap<i64, Report> {
    let mut out: BTreeMap<i64, Report> = BTreeMap::new();
    for line in logs.lines() {
        let mut words = line.split_whitespace();
        let Some(base) = words
            .next()
            .and_then(|w| w.strip_prefix("base="))
            .and_then(|b| b.parse::<i64>().ok())
        else {
            continue;
        };
        let what = words.next().unwrap_or("");
        let kv: BTreeMap<&str, i64> = words
            .filter_map(|w| w.split_once('='))
            .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
            .collect();
        let r = out.entry(base).or_default();
        if what == "done" {
            r.first_ns = kv.get("first").copied().unwrap_or(0);
            r.last_ns = kv.get("last").copied().unwrap_or(0);
        } else if let (Some(c), Some(s)) = (kv.get("calls"), kv.get("argsum")) {
            r.calls.insert(what.to_string(), (*c as u64, *s));
        }
    }
    out
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    t: f64,
    rss_anon: u64,
    rss: u64,
    fds: usize,
    threads: u64,
    links: usize,
}

fn sample(pid: u32, t0: Instant) -> Sample {
    Sample {
        t: t0.elapsed().as_secs_f64(),
        rss_anon: rss_anon(pid),
        rss: status_field(pid, "VmRSS").unwrap_or(0) * 1024,
        fds: fds(pid),
        threads: threads(pid),
        links: bpf_objects(pid).uprobe_links,
    }
}

fn per_hour(samples: &[Sample], f: impl Fn(&Sample) -> f64) -> f64 {
    let xs: Vec<f64> = samples.iter().map(|s| s.t / 3600.0).collect();
    let ys: Vec<f64> = samples.iter().map(f).collect();
    slope(&xs, &ys)
}

fn main() {
    let a = args();
    require_trace("soak");
    require_containers("soak");
    // Exits only after `soak` returned: its containerd, pods and folders are dropped (by
    // pid) first, also when a check failed.
    let passed = soak(a);
    std::process::exit(if passed { 0 } else { 1 });
}

/// Runs the soak and its checks; true when every check passed.
fn soak(a: Args) -> bool {
    let bin = program("e2e/testdata/churn", GoVersion::Go127, false);
    let ctrd = Containerd::start().expect("containerd");
    ctrd.import_image("registry.test/soak/churn:v1", &bin)
        .expect("import");
    let pod = |name: String, app: &str, args: Vec<String>| -> Pod {
        ctrd.run_pod(&PodSpec {
            uid: format!("uid-{name}"),
            name,
            namespace: NS.into(),
            labels: BTreeMap::from([("app".to_string(), app.to_string())]),
            container: "app".into(),
            image: "registry.test/soak/churn:v1".into(),
            args,
        })
        .expect("pod")
    };
    let s = |x: &dyn ToString| x.to_string();
    let steady: Vec<Pod> = (0..a.steady)
        .map(|k| {
            let base = (100 + k as i64) * 1_000_000_000_000;
            pod(
                format!("steady-{k}"),
                "steady",
                vec![
                    s(&"-calls"),
                    s(&0),
                    s(&"-rate"),
                    s(&a.steady_rate),
                    s(&"-base"),
                    s(&base),
                ],
            )
        })
        .collect();
    let spawners: Vec<Pod> = (0..a.spawners)
        .map(|k| {
            let base = (1 + k as i64) * 1_000_000_000_000;
            pod(
                format!("spawner-{k}"),
                "spawner",
                vec![
                    s(&"-spawn-every"),
                    format!("{}ms", a.spawn_every.as_millis()),
                    s(&"-child-calls"),
                    s(&a.child_calls),
                    s(&"-child-rate"),
                    s(&a.child_rate),
                    s(&"-base"),
                    s(&base),
                ],
            )
        })
        .collect();

    let dir = TempDir::new("soak");
    let specs = dir.path().join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    let main_file = specs.join("calls.yaml");
    let extra_file = specs.join("extra.yaml");
    let report = dir.path().join("report.json");
    write_atomic(&main_file, &main_spec(1));
    let stderr_path = dir.path().join("agent.stderr");
    let cmd = [
        "agent",
        "--node-name",
        "soak",
        "--spec-dir-interval",
        "100ms",
        "--container-poll-interval",
        "500ms",
        "--output",
        "jsonl",
    ];
    let mut agent: Child = Command::new(&a.gprobe)
        .args(cmd)
        .arg("--spec-dir")
        .arg(&specs)
        .arg("--cri-socket")
        .arg(ctrd.socket())
        .arg("--report-file")
        .arg(&report)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", a.gprobe.display()));
    let pid = agent.id();
    let records = Arc::new(Mutex::new(Records::default()));
    let reader = {
        let out = agent.stdout.take().unwrap();
        let r = records.clone();
        std::thread::spawn(move || read_records(out, r))
    };
    let wait_gen = |g: i64| -> bool {
        let t = Instant::now();
        while observed_generation(&report) != Some(g) {
            if t.elapsed() > Duration::from_secs(60) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    };
    assert!(wait_gen(1), "the agent never applied the first spec");
    println!(
        "soak: {} steady pods ({} rounds/s), {} spawners (a copy every {:?}, {} rounds at {}/s), \
         spec change every {:?}, for {:?} then {:?} without changes; agent pid {pid}",
        a.steady,
        a.steady_rate,
        a.spawners,
        a.spawn_every,
        a.child_calls,
        a.child_rate,
        a.spec_every,
        a.duration,
        a.settle
    );

    let t0 = Instant::now();
    let mut samples = vec![sample(pid, t0)];
    let mut windows: Vec<(i64, i64)> = Vec::new();
    let mut generation = 1;
    let mut extra = false;
    let mut late = 0;
    let mut next_sample = t0 + a.sample_every;
    let churn_until = t0 + a.duration;
    let end = churn_until + a.settle;
    let mut last_print = t0;
    while Instant::now() < end {
        let now = Instant::now();
        if now >= next_sample {
            samples.push(sample(pid, t0));
            next_sample += a.sample_every;
        }
        if now < churn_until {
            generation += 1;
            let start = unix_ns();
            write_atomic(&main_file, &main_spec(generation));
            if !wait_gen(generation) {
                late += 1;
            }
            windows.push((start, unix_ns()));
            if generation % 10 == 0 {
                extra = !extra;
                if extra {
                    write_atomic(&extra_file, &extra_spec());
                } else {
                    let _ = std::fs::remove_file(&extra_file);
                }
            }
        }
        if now.duration_since(last_print) >= Duration::from_secs(60) {
            last_print = now;
            let s = samples.last().unwrap();
            println!(
                "  {:>5.0} s: {generation} spec versions, RssAnon {} KiB, fds {}, threads {}, uprobe links {}, {} records",
                s.t,
                s.rss_anon / 1024,
                s.fds,
                s.threads,
                s.links,
                records.lock().unwrap().total
            );
        }
        let pause = if now < churn_until {
            a.spec_every
        } else {
            a.sample_every
        };
        std::thread::sleep(pause.min(next_sample.saturating_duration_since(Instant::now())));
    }
    samples.push(sample(pid, t0));

    // The programs' own accounts: steady pods print theirs when stopped; spawners print
    // their copies' as each exits (copies cut short by the pod's removal print none).
    for p in spawners.iter().chain(&steady) {
        let _ = ctrd.remove_pod(p);
    }
    let mut own: BTreeMap<i64, Report> = BTreeMap::new();
    for p in steady.iter().chain(&spawners) {
        own.extend(reports(&ctrd.logs(p)));
    }
    // The agent's last records of them, then its stop.
    std::thread::sleep(Duration::from_secs(2));
    let mine: BpfObjects = bpf_objects(pid);
    let t_stop = Instant::now();
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let status = agent.wait().unwrap();
    let stop_took = t_stop.elapsed();
    reader.join().unwrap();
    let left = still_in_kernel(&mine);
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();

    // The checks.
    let r = records.lock().unwrap();
    let overlaps = |rep: &Report| {
        windows
            .iter()
            .any(|(w0, w1)| rep.first_ns <= *w1 && rep.last_ns >= *w0)
    };
    let (mut checked, mut exact_calls, mut exact_procs, mut stable_procs) = (0u64, 0u64, 0, 0);
    let mut too_many = Vec::new();
    let mut inexact = Vec::new();
    let mut out_of_range = 0;
    for (base, rep) in &own {
        let stable = rep.first_ns > 0 && !overlaps(rep);
        if stable {
            stable_procs += 1;
        }
        let mut all_exact = true;
        for f in FUNCS {
            let (calls, argsum) = rep.calls.get(f).copied().unwrap_or((0, 0));
            let seen = r
                .seen
                .get(&(*base, f.to_string()))
                .cloned()
                .unwrap_or_default();
            if seen.records > calls {
                too_many.push(format!(
                    "base {base} {f}: {} records, {calls} calls",
                    seen.records
                ));
            }
            if seen.records > 0 && seen.max_arg >= base + calls as i64 {
                out_of_range += 1;
            }
            if stable {
                checked += calls;
                if seen.records == calls && seen.argsum == argsum {
                    exact_calls += calls;
                } else {
                    all_exact = false;
                    if inexact.len() < 10 {
                        inexact.push(format!(
                            "base {base} {f}: {} of {calls} calls recorded (argsum {} vs {argsum})",
                            seen.records, seen.argsum
                        ));
                    }
                }
            }
        }
        if stable && all_exact {
            exact_procs += 1;
        }
    }
    let unknown: u64 = r
        .seen
        .iter()
        .filter(|((b, _), _)| !own.contains_key(b))
        .map(|(_, s)| s.records)
        .sum();

    let after: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.t >= a.warmup.as_secs_f64())
        .collect();
    let first = after.first().copied().unwrap_or(samples[0]);
    let last = *samples.last().unwrap();
    println!(
        "\n== gprobe agent soak: {:?} of churn + {:?} settled",
        a.duration, a.settle
    );
    println!(
        "spec versions applied: {generation} (+{} toggles of a second spec); {late} took over 60 s",
        generation / 10
    );
    println!(
        "processes: {} reported (steady {}, short-lived {}); records of {SPEC}: {} ({} unfinished), other specs: {}",
        own.len(),
        a.steady,
        own.len().saturating_sub(a.steady),
        r.total,
        r.unfinished,
        r.other_specs
    );
    println!(
        "slopes after {:?} of warm-up ({} samples): RssAnon {:+.2} MiB/h ({:.1} -> {:.1} MiB), \
         RSS {:+.2} MiB/h ({:.1} -> {:.1} MiB), fds {:+.1}/h ({} -> {}), threads {:+.1}/h \
         ({} -> {}), uprobe links {:+.1}/h ({} -> {})",
        a.warmup,
        after.len(),
        per_hour(&after, |s| s.rss_anon as f64) / 1048576.0,
        first.rss_anon as f64 / 1048576.0,
        last.rss_anon as f64 / 1048576.0,
        per_hour(&after, |s| s.rss as f64) / 1048576.0,
        first.rss as f64 / 1048576.0,
        last.rss as f64 / 1048576.0,
        per_hour(&after, |s| s.fds as f64),
        first.fds,
        last.fds,
        per_hour(&after, |s| s.threads as f64),
        first.threads,
        last.threads,
        per_hour(&after, |s| s.links as f64),
        first.links,
        last.links
    );
    println!(
        "calls checked (processes that lived between two spec changes): {exact_calls} of {checked} \
         exact; {exact_procs} of {stable_procs} processes exact"
    );
    println!(
        "wrong values: {}; processes with more records than calls: {}; arguments out of range: \
         {out_of_range}; records of no process: {unknown}; malformed lines: {}",
        r.wrong.len(),
        too_many.len(),
        r.malformed
    );
    println!(
        "stop: SIGINT to exit {stop_took:.2?} ({}), {} uprobe links at the stop; left in the kernel: \
         {} links, {} programs, {} maps",
        status,
        mine.uprobe_links,
        left.links.len(),
        left.progs.len(),
        left.maps.len()
    );
    let mut failed = Vec::new();
    if !r.wrong.is_empty() {
        failed.push(format!("wrong values:\n{}", r.wrong.join("\n")));
    }
    if !too_many.is_empty() {
        failed.push(format!("more records than calls:\n{}", too_many.join("\n")));
    }
    if exact_calls != checked {
        failed.push(format!("inexact processes:\n{}", inexact.join("\n")));
    }
    if r.malformed > 0 {
        failed.push(format!("{} records without their argument", r.malformed));
    }
    if out_of_range + unknown as usize > 0 {
        failed.push("records of arguments no process passed".into());
    }
    if !left.links.is_empty() || !status.success() {
        failed.push("the agent's stop".into());
    }
    if failed.is_empty() {
        println!("all checks passed");
    } else {
        println!("FAILED:\n{}", failed.join("\n"));
        println!(
            "agent log (last 30 lines):\n{}",
            stderr
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        );
        return false;
    }
    true
}
