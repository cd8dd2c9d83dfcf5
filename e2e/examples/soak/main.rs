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

mod args;
mod check;
mod records;
mod samples;
mod specs;

use args::{args, Args};
use check::{verdict, Outcome};
use gprobe_e2e::cri::{require_containers, Containerd, Pod, PodSpec};
use gprobe_e2e::footprint::{bpf_objects, still_in_kernel, BpfObjects};
use gprobe_e2e::go::{GoVersion, TempDir};
use gprobe_e2e::harness::{program, require_trace};
use records::{read_records, reports, Records, Report};
use samples::sample;
use specs::{extra_spec, main_spec, observed_generation, write_atomic};
use std::collections::BTreeMap;
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

fn unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
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
                "  {:>5.0} s: {generation} spec versions, RssAnon {} KiB, fds {}, threads {}, \
                uprobe links {}, {} records",
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

    let r = records.lock().unwrap();
    verdict(
        &a,
        Outcome {
            records: &r,
            own,
            windows,
            samples,
            generation,
            late,
            status,
            stop_took,
            mine,
            left,
            stderr,
        },
    )
}
