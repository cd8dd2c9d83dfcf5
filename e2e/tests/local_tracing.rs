//! `gprobe run` traces real Go programs (built here with Go 1.19 and 1.27) from their first
//! call: URLs fetched, a process already running, exact argument values, and latency when
//! goroutines move between threads. They need root (BPF); CI on the project's machines runs
//! them all.

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{
    build_dir, program, program_lines, require_trace, run_program, serial, Gprobe, VERSIONS,
};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// `net/http.(*Client).Get` with its URL and error, and latency.
fn client_get_spec(name: &str, bin: &Path) -> String {
    SpecBuilder::new(name)
        .executable(bin)
        .probe(
            ProbeBuilder::new("net/http.(*Client).Get")
                .signature("func(c *Client, url string) (resp *Response, err error)")
                .capture(["url", "err"])
                .latency(),
        )
        .yaml()
}

#[test]
fn every_fetched_url_appears_exactly_once_on_go119_and_go127_stripped_or_not() {
    require_trace("urls");
    for v in VERSIONS {
        for stripped in [false, true] {
            let bin = program("examples/http-client", v, stripped);
            let _guard = serial();
            let g = Gprobe::start(&client_get_spec("urls", &bin), &[]);
            // Started after gprobe: found through the exec tracepoint.
            let urls_file = build_dir().join(format!("urls-{v:?}-{stripped}.txt"));
            let out = run_program(
                &bin,
                &[
                    "-n",
                    "6",
                    "-interval",
                    "30ms",
                    "-urls-out",
                    urls_file.to_str().unwrap(),
                ],
            );
            let run = g.stop();
            assert!(run.status.success(), "gprobe failed: {}", run.stderr);
            let fetched: Vec<String> = std::fs::read_to_string(&urls_file)
                .unwrap()
                .lines()
                .map(String::from)
                .collect();
            assert_eq!(fetched.len(), 6);
            // The traced program behaved as usual.
            assert_eq!(
                out.lines()
                    .filter(|l| l.starts_with("GET ") && l.contains("-> 200"))
                    .count(),
                6
            );
            let recs = run.records_of("net/http.(*Client).Get");
            let mut seen: Vec<String> = recs
                .iter()
                .map(|r| r["args"]["url"].as_str().unwrap().to_string())
                .collect();
            seen.sort();
            let mut want = fetched.clone();
            want.sort();
            assert_eq!(
                seen, want,
                "{v:?} stripped={stripped}: traced URLs differ from fetched ones\n{}",
                run.stderr
            );
            for r in &recs {
                assert_eq!(r["probe"], "urls");
                assert_eq!(r["returns"]["err"], serde_json::Value::Null);
                assert!(r["duration_ns"].as_u64().unwrap() > 0);
                assert_eq!(
                    r["resource"]["process.executable.path"],
                    bin.to_str().unwrap()
                );
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64;
                let start = r["start_time_unix_nano"].as_u64().unwrap();
                assert!(
                    now - start < 60_000_000_000,
                    "start time {start} is not wall-clock time"
                );
            }
            assert!(
                run.stderr.contains("6 calls delivered, 0 lost"),
                "{}",
                run.stderr
            );
        }
    }
}

#[test]
fn a_process_running_before_gprobe_starts_is_traced() {
    require_trace("already running");
    let bin = program("examples/http-client", GoVersion::Go127, false);
    let _guard = serial();
    let urls_file = build_dir().join("urls-early.txt");
    let mut child = std::process::Command::new(&bin)
        .args([
            "-n",
            "4",
            "-interval",
            "30ms",
            "-delay",
            "2s",
            "-urls-out",
            urls_file.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Stopped until gprobe is ready, so that its calls (2 s after its start) come after
    // the attach however slowly gprobe starts: it still started before gprobe, unseen.
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGSTOP) };
    let g = Gprobe::start(&client_get_spec("early", &bin), &[]);
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGCONT) };
    assert!(
        g.stderr_now()
            .contains("attached early / net/http.(*Client).Get"),
        "{}",
        g.stderr_now()
    );
    assert!(child.wait().unwrap().success());
    let run = g.stop();
    let n = std::fs::read_to_string(&urls_file).unwrap().lines().count();
    assert_eq!(n, 4);
    assert_eq!(
        run.records_of("net/http.(*Client).Get").len(),
        4,
        "{}",
        run.stderr
    );
}

#[test]
fn compute_e_iterations_are_exact() {
    require_trace("computeE");
    let bin = program("examples/compute-e", GoVersion::Go127, true);
    let _guard = serial();
    let spec = SpecBuilder::new("compute-e")
        .executable(&bin)
        .probe(
            ProbeBuilder::new("main.computeE")
                .signature("func(iterations int64) float64")
                .capture(["iterations"])
                .latency(),
        )
        .yaml();
    let g = Gprobe::start(&spec, &[]);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut server = std::process::Command::new(&bin)
        .args(["-addr", &addr])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let iters = [1i64, 7, 42, 1000, 123_456, 9_000_000];
    for (i, n) in iters.iter().enumerate() {
        let body = http_get(&addr, &format!("/e?iters={n}"));
        assert!(body.contains("e = 2.71") || *n < 10, "request {i}: {body}");
    }
    let bad = http_get(&addr, "/e?iters=-1");
    assert!(bad.contains("positive"), "{bad}");
    std::thread::sleep(Duration::from_millis(200));
    let run = g.stop();
    let _ = server.kill();
    let _ = server.wait();
    let got: Vec<i64> = run
        .records_of("main.computeE")
        .iter()
        .map(|r| r["args"]["iterations"].as_i64().unwrap())
        .collect();
    assert_eq!(got, iters, "{}", run.stderr);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let t0 = std::time::Instant::now();
    loop {
        match std::net::TcpStream::connect(addr) {
            Ok(mut s) => {
                write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
                let mut out = String::new();
                s.read_to_string(&mut out).unwrap();
                return out;
            }
            Err(_) if t0.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("connect {addr}: {e}"),
        }
    }
}

#[test]
fn latency_is_right_when_goroutines_migrate_between_threads() {
    require_trace("latency");
    let bin = program("e2e/testdata/sleeper", GoVersion::Go127, false);
    let _guard = serial();
    let spec = SpecBuilder::new("sleeper")
        .executable(&bin)
        .probe(
            ProbeBuilder::new("main.sleepFor")
                .signature("func(ms int64, info *callInfo) int64")
                .capture(["ms", "r0"])
                .latency(),
        )
        .yaml();
    // The scheduler decides where a goroutine resumes; retry the rare run where none moved.
    let mut attempt = 0;
    let (out, run, calls, migrated) = loop {
        attempt += 1;
        let g = Gprobe::start(&spec, &[]);
        let out = run_program(&bin, &["-workers", "8", "-calls", "5"]);
        let run = g.stop();
        let calls = program_lines(&out, "call");
        let migrated = calls
            .iter()
            .filter(|c| c["tid_entry"] != c["tid_return"])
            .count();
        if migrated > 0 || attempt == 3 {
            break (out, run, calls, migrated);
        }
    };
    let recs = run.records_of("main.sleepFor");
    assert_eq!(recs.len(), 40, "{}", run.stderr);
    assert!(
        migrated > 0,
        "no call resumed on another thread: the test proves nothing\n{out}"
    );
    // Pairing: a return paired with another call's entry would carry that call's result;
    // every record's r0 (read at its RET) equals its ms (read at its entry), checked below,
    // while calls migrate between threads.
    //
    // Ground truth: the program's own clock around each call, inside gprobe's interval
    // (entry probe before the program's time.Now(), RET probe after its time.Since()).
    // Calls of one requested duration entered on one thread are paired in sorted order.
    let mut truth: BTreeMap<(i64, String), Vec<f64>> = BTreeMap::new();
    for c in &calls {
        truth
            .entry((c["ms"].parse().unwrap(), c["tid_entry"].clone()))
            .or_default()
            .push(c["elapsed_ns"].parse::<f64>().unwrap());
    }
    let mut measured: BTreeMap<(i64, String), Vec<f64>> = BTreeMap::new();
    for r in &recs {
        let ms = r["args"]["ms"].as_i64().unwrap();
        assert_eq!(
            r["returns"]["r0"].as_i64().unwrap(),
            ms,
            "result read at return"
        );
        let d = r["duration_ns"].as_u64().unwrap() as f64;
        assert!(
            d >= ms as f64 * 1e6,
            "sleepFor({ms}) measured {d} ns: shorter than it slept\n{r}"
        );
        measured
            .entry((ms, r["tid"].as_u64().unwrap().to_string()))
            .or_default()
            .push(d);
    }
    assert_eq!(
        truth.keys().collect::<Vec<_>>(),
        measured.keys().collect::<Vec<_>>(),
        "calls by (ms, entry thread)"
    );
    // Per requested duration, the closest gprobe came to the program's own measurement: a
    // trap is a preemption point, so on a busy machine some calls measure a time slice more,
    // but not every one of the ten calls of a duration.
    let mut closest: BTreeMap<i64, f64> = BTreeMap::new();
    for (key, t) in truth.iter_mut() {
        let m = measured.get_mut(key).unwrap();
        t.sort_by(f64::total_cmp);
        m.sort_by(f64::total_cmp);
        assert_eq!(t.len(), m.len());
        for (t, m) in t.iter().zip(m.iter()) {
            // 50 µs: the two clocks are read a few instructions apart from the probes.
            assert!(
                *m >= t - 50_000.0,
                "sleepFor({}): gprobe measured {:.3} ms, less than the program's own {:.3} ms",
                key.0,
                m / 1e6,
                t / 1e6
            );
            let rel = (m - t) / t;
            let c = closest.entry(key.0).or_insert(f64::MAX);
            *c = c.min(rel);
        }
    }
    for (ms, rel) in &closest {
        assert!(
            *rel <= 0.10,
            "sleepFor({ms}): no call measured within 10% of the program's own clock (closest {:.1}% over)",
            rel * 100.0
        );
    }
    eprintln!("{migrated} of 40 calls returned on another thread than they entered on");
}
