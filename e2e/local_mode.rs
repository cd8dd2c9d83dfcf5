//! End-to-end tests of `gprobe run` on real Go programs built here with Go 1.19 and 1.27.
//! They need root (BPF); CI on the project's machines runs them all.

mod harness;

use harness::go::GoVersion;
use harness::{can_trace, gprobe_once, program, run_program, serial, Gprobe, VERSIONS};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

fn spec(name: &str, exe: &std::path::Path, probes: &str) -> String {
    format!(
        "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: {name}}}\nspec:\n  selector: {{executable: \"{}\"}}\n  probes:\n{probes}",
        exe.display()
    )
}

const CLIENT_GET: &str = r#"    - symbol: "net/http.(*Client).Get"
      signature: "func(c *Client, url string) (resp *Response, err error)"
      capture: [url, err]
      latency: true
"#;

#[test]
fn every_fetched_url_appears_exactly_once_on_go119_and_go127_stripped_or_not() {
    if !can_trace("urls") {
        return;
    }
    for v in VERSIONS {
        for stripped in [false, true] {
            let bin = program("examples/http-client", v, stripped);
            let _guard = serial();
            let g = Gprobe::start(&spec("urls", &bin, CLIENT_GET), &[]);
            // Started after gprobe: found through the exec tracepoint.
            let urls_file = harness::build_dir().join(format!("urls-{v:?}-{stripped}.txt"));
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
                assert_eq!(r["returns"]["err"], "nil");
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
    if !can_trace("already running") {
        return;
    }
    let bin = program("examples/http-client", GoVersion::Go127, false);
    let _guard = serial();
    let urls_file = harness::build_dir().join("urls-early.txt");
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
    std::thread::sleep(Duration::from_millis(300));
    let g = Gprobe::start(&spec("early", &bin, CLIENT_GET), &[]);
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
    if !can_trace("computeE") {
        return;
    }
    let bin = program("examples/compute-e", GoVersion::Go127, true);
    let _guard = serial();
    let probes = r#"    - symbol: main.computeE
      signature: "func(iterations int64) float64"
      capture: [iterations]
      latency: true
"#;
    let g = Gprobe::start(&spec("compute-e", &bin, probes), &[]);
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
    if !can_trace("latency") {
        return;
    }
    let bin = program("e2e/testdata/sleeper", GoVersion::Go127, false);
    let _guard = serial();
    let probes = r#"    - symbol: main.sleepFor
      signature: "func(ms int64, info *callInfo) int64"
      capture: [ms, r0]
      latency: true
"#;
    // The scheduler decides where a goroutine resumes; retry the rare run where none moved.
    let mut attempt = 0;
    let (out, run, calls, migrated) = loop {
        attempt += 1;
        let g = Gprobe::start(&spec("sleeper", &bin, probes), &[]);
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
    // Ground truth: the program's own clock around each call. Calls of one requested
    // duration are paired in sorted order (the pairing that minimises the largest error).
    let mut truth: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    for c in &calls {
        truth
            .entry(c["ms"].parse().unwrap())
            .or_default()
            .push(c["elapsed_ns"].parse::<f64>().unwrap());
    }
    let mut measured: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
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
        measured.entry(ms).or_default().push(d);
    }
    assert_eq!(
        truth.keys().collect::<Vec<_>>(),
        measured.keys().collect::<Vec<_>>()
    );
    for (ms, t) in truth.iter_mut() {
        let m = measured.get_mut(ms).unwrap();
        t.sort_by(f64::total_cmp);
        m.sort_by(f64::total_cmp);
        assert_eq!(t.len(), m.len());
        for (t, m) in t.iter().zip(m.iter()) {
            assert!(
                (m - t).abs() <= 0.10 * t,
                "sleepFor({ms}): gprobe measured {:.3} ms, the program {:.3} ms: not within 10%",
                m / 1e6,
                t / 1e6
            );
        }
    }
    eprintln!("{migrated} of 40 calls returned on another thread than they entered on");
}

const ZOO_PROBES: &str = r#"    - symbol: main.manyArgs
      signature: "func(a, b, c, d, e, f, g, h int, s string, i int, j int8, k int64) int"
      capture: [a, s, i, j, k, r0]
    - symbol: main.kinds
      signature: "func(b bool, i8 int8, u16 uint16, i32 int32, u64 uint64, p *int, bs []byte, e error) (ok bool, n int)"
      capture: [b, i8, u16, i32, u64, p, bs, e]
    - symbol: main.kinds
      capture: [ok, n]
    - symbol: main.scale
      signature: "func(x float64, n int) float64"
      capture: [x, n]
    - symbol: main.area
      capture: [p]
    - symbol: main.fail
      capture: [n, r0]
      latency: true
    - symbol: main.nope
    - symbol: net/http.Get
    - symbol: main.manyArgs
      signature: "func(a int) int"
      capture: [zz]
    - symbol: main.kinds
      signature: "func(b Thing)"
      capture: [b]
"#;

fn program_lines(out: &str, prefix: &str) -> Vec<BTreeMap<String, String>> {
    out.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

#[test]
fn arguments_of_every_supported_kind_and_bad_probes_reported_while_the_rest_runs() {
    if !can_trace("zoo") {
        return;
    }
    for v in VERSIONS {
        let bin = program("e2e/testdata/zoo", v, false);
        let _guard = serial();
        let g = Gprobe::start(&spec("zoo", &bin, ZOO_PROBES), &[]);
        let out = run_program(&bin, &["-rounds", "4", "-delay", "1500ms"]);
        let run = g.stop();
        assert!(run.status.success());
        let err = &run.stderr;
        for expected in [
            r#"spec.probes[8].capture[0]: "zz" is not a parameter or result of "func(a int) int"; known names: a, r0"#,
            r#"cannot capture "x": the float64 is passed in register X0; uprobes see only the general-purpose registers"#,
            r#"cannot capture "p": struct(16 bytes) values cannot be captured"#,
            "symbol main.nope not found in",
            "net/http.Get is inlined into its callers",
            "probe net/http.(*Client).Get instead",
            "unknown type Thing: write its underlying type",
        ] {
            assert!(
                err.contains(expected),
                "{v:?}: stderr lacks {expected:?}:\n{err}"
            );
        }

        let want = program_lines(&out, "manyArgs");
        let got = run.records_of("main.manyArgs");
        assert_eq!(got.len(), want.len(), "{err}");
        for (g, w) in got.iter().zip(&want) {
            let a = &g["args"];
            assert_eq!(a["a"].as_i64().unwrap().to_string(), w["a"]);
            assert_eq!(
                a["s"].as_str().unwrap(),
                w["s"],
                "string passed on the stack"
            );
            assert_eq!(
                a["i"].as_i64().unwrap().to_string(),
                w["i"],
                "int in R11 after a stack string"
            );
            assert_eq!(
                a["j"].as_i64().unwrap().to_string(),
                w["j"],
                "int8 on the stack"
            );
            assert_eq!(
                a["k"].as_i64().unwrap().to_string(),
                w["k"],
                "int64 on the stack"
            );
        }

        let want = program_lines(&out, "kinds");
        let all = run.records_of("main.kinds");
        let got: Vec<_> = all.iter().filter(|g| g.get("returns").is_none()).collect();
        assert_eq!(got.len(), want.len(), "{err}");
        for (g, w) in got.iter().zip(&want) {
            let a = &g["args"];
            assert_eq!(a["b"].as_bool().unwrap().to_string(), w["b"]);
            assert_eq!(a["i8"].as_i64().unwrap().to_string(), w["i8"]);
            assert_eq!(a["u16"].as_u64().unwrap().to_string(), w["u16"]);
            assert_eq!(a["i32"].as_i64().unwrap().to_string(), w["i32"]);
            assert_eq!(a["u64"].as_u64().unwrap().to_string(), w["u64"]);
            let p = a["p"].as_str().unwrap();
            assert!(p.starts_with("0x") && p != "0x0", "a non-nil pointer: {p}");
            assert_eq!(a["bs"].as_str().unwrap(), w["bs"]);
            assert_eq!(a["e"] == "non-nil", w["e"] == "true");
        }
        let results: Vec<_> = all.iter().filter(|g| g.get("returns").is_some()).collect();
        assert_eq!(
            results.len(),
            want.len(),
            "results probe (signature from DWARF)"
        );
        for (g, w) in results.iter().zip(&want) {
            let r = &g["returns"];
            assert_eq!(r["ok"].as_bool().unwrap().to_string(), w["ok"]);
            assert_eq!(r["n"].as_i64().unwrap().to_string(), w["n"]);
        }

        let fails = run.records_of("main.fail");
        assert_eq!(fails.len(), 4);
        for (i, f) in fails.iter().enumerate() {
            assert_eq!(f["args"]["n"].as_i64().unwrap(), i as i64);
            assert_eq!(
                f["returns"]["r0"],
                if i % 2 == 1 { "non-nil" } else { "nil" },
                "DWARF-derived signature"
            );
            assert!(f["duration_ns"].as_u64().is_some());
        }
        assert!(run.records_of("main.scale").is_empty());
    }
}

#[test]
fn stripped_binary_needs_a_signature_to_capture_but_can_count_calls() {
    if !can_trace("stripped") {
        return;
    }
    let bin = program("e2e/testdata/zoo", GoVersion::Go119, true);
    let _guard = serial();
    let probes = "    - symbol: main.fail\n      capture: [n]\n    - symbol: main.area\n";
    let g = Gprobe::start(&spec("stripped", &bin, probes), &[]);
    run_program(&bin, &["-rounds", "3"]);
    let run = g.stop();
    assert!(
        run.stderr.contains("main.fail: /proc/")
            && run.stderr.contains(
                "has no DWARF (stripped) and the probe has no signature: add `signature:"
            ),
        "{}",
        run.stderr
    );
    let area = run.records_of("main.area");
    assert_eq!(area.len(), 3, "{}", run.stderr);
    assert_eq!(area[0]["args"], Value::Object(Default::default()));
}

#[test]
fn malformed_specs_are_clear_errors() {
    let run = gprobe_once(
        "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: x}\nspec:\n  selector: {executable: /bin/x\n",
        &[],
    );
    assert!(!run.status.success());
    assert!(
        run.stderr.contains("spec.yaml: document 1:") && run.stderr.contains("line"),
        "{}",
        run.stderr
    );

    let run = gprobe_once(
        "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: x}\nspec:\n  selector: {}\n  probes: [{symbol: main.f}]\n",
        &[],
    );
    assert!(!run.status.success());
    assert!(
        run.stderr.contains("no ProbeSpec can run") && run.stderr.contains("selects nothing"),
        "{}",
        run.stderr
    );
}

/// `N calls delivered, L lost (ring buffer full), T throttled` from gprobe's summary.
fn summary_counts(stderr: &str, symbol: &str) -> (u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains(&format!("/ {symbol}: ")) && l.contains("calls delivered"))
        .unwrap_or_else(|| panic!("no summary line for {symbol}:\n{stderr}"));
    let num = |after: &str| -> u64 {
        let words: Vec<&str> = line.split_whitespace().collect();
        let i = words
            .iter()
            .position(|w| w.trim_end_matches(',') == after)
            .unwrap();
        words[i - 1].parse().unwrap()
    };
    (num("calls"), num("lost"), num("throttled"))
}

fn burst_spec(bin: &std::path::Path, limit: u32) -> String {
    format!(
        "{}  limits: {{eventsPerSecond: {limit}}}\n",
        spec(
            "burst",
            bin,
            "    - symbol: main.tick\n      signature: \"func(i int64) int64\"\n      capture: [i]\n"
        )
    )
}

#[test]
fn calls_over_the_rate_limit_are_counted_not_lost_silently() {
    if !can_trace("rate limit") {
        return;
    }
    let bin = program("e2e/testdata/burst", GoVersion::Go127, false);
    let _guard = serial();
    let g = Gprobe::start(&burst_spec(&bin, 50), &[]);
    let out = run_program(&bin, &["-n", "20000"]);
    assert!(out.contains("calls=20000"));
    let run = g.stop();
    let (delivered, lost, throttled) = summary_counts(&run.stderr, "main.tick");
    assert_eq!(run.records_of("main.tick").len() as u64, delivered);
    assert_eq!(delivered + lost + throttled, 20_000, "{}", run.stderr);
    // A one-second window: the burst lasts well under two of them.
    assert!((50..=150).contains(&delivered), "delivered {delivered}");
    assert!(throttled > 0);
}

/// 8 KiB hold about 110 records, under a millisecond of two goroutines calling flat out
/// while they keep both CPUs busy: the reader (woken per 4 KiB) cannot keep up.
const TINY_RING: &[&str] = &["--ring-buffer-size", "8KiB", "--wakeup-size", "4KiB"];

#[test]
fn a_full_ring_buffer_loses_calls_but_counts_every_one() {
    if !can_trace("ring buffer full") {
        return;
    }
    let bin = program("e2e/testdata/burst", GoVersion::Go127, false);
    let _guard = serial();
    let g = Gprobe::start(&burst_spec(&bin, 0), TINY_RING);
    run_program(&bin, &["-n", "100000", "-goroutines", "2"]);
    let run = g.stop();
    let (delivered, lost, throttled) = summary_counts(&run.stderr, "main.tick");
    assert_eq!(throttled, 0);
    assert_eq!(delivered + lost, 100_000, "{}", run.stderr);
    assert!(lost > 0, "the buffer never filled: the test proves nothing");
    assert!(
        run.stderr
            .contains("calls lost (ring buffer full; raise --ring-buffer-size)"),
        "{}",
        run.stderr
    );
    // The delivered ones are real, distinct calls.
    let mut seen: Vec<i64> = run
        .records_of("main.tick")
        .iter()
        .map(|r| r["args"]["i"].as_i64().unwrap())
        .collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len() as u64, delivered);
}

#[test]
fn a_full_ring_buffer_with_latency_probes_counts_every_call_once() {
    if !can_trace("ring buffer full, latency") {
        return;
    }
    let bin = program("e2e/testdata/burst", GoVersion::Go127, false);
    let _guard = serial();
    let spec = spec(
        "burst",
        &bin,
        "    - symbol: main.tick\n      signature: \"func(i int64) int64\"\n      capture: [i, r0]\n      latency: true\n",
    ) + "  limits: {eventsPerSecond: 0}\n";
    let g = Gprobe::start(&spec, TINY_RING);
    run_program(&bin, &["-n", "100000", "-goroutines", "2"]);
    let run = g.stop();
    let (delivered, lost, throttled) = summary_counts(&run.stderr, "main.tick");
    assert_eq!(throttled, 0);
    assert!(lost > 0, "the buffer never filled: the test proves nothing");
    // A call whose RETURN record was dropped is delivered (unfinished), not lost.
    assert_eq!(delivered + lost, 100_000, "{}", run.stderr);
    let records = run.records_of("main.tick");
    assert_eq!(records.len() as u64, delivered);
    let unfinished = records
        .iter()
        .filter(|r| r["unfinished"] == serde_json::json!(true))
        .count() as u64;
    let returns_lost = run
        .stderr
        .lines()
        .find(|l| l.contains("of the delivered calls lost their return"))
        .map(|l| l.split_whitespace().next().unwrap().parse::<u64>().unwrap())
        .unwrap_or(0);
    assert_eq!(unfinished, returns_lost, "{}", run.stderr);
    // Every finished call is paired with its own return: r0 = 2 * i.
    for r in records
        .iter()
        .filter(|r| r["unfinished"] != serde_json::json!(true))
    {
        let i = r["args"]["i"].as_i64().unwrap();
        assert_eq!(r["returns"]["r0"].as_i64(), Some(2 * i), "{r}");
        assert!(r["duration_ns"].as_u64().is_some(), "{r}");
    }
}

#[test]
fn symbols_lists_functions_with_dwarf_signatures_and_stripped_ones_without() {
    let full = program("e2e/testdata/zoo", GoVersion::Go127, false);
    let stripped = program("e2e/testdata/zoo", GoVersion::Go127, true);
    let list = |bin: &std::path::Path| {
        let o = std::process::Command::new(harness::gprobe_bin())
            .args([
                "symbols",
                bin.to_str().unwrap(),
                "--filter",
                r"^main\.(kinds|fail)$",
            ])
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap()
    };
    let out = list(&full);
    assert!(
        out.starts_with(&format!("# {}: Go binary (go1.27", full.display())),
        "{out}"
    );
    assert!(out.contains("main.fail  func(n int) (r0 error)"), "{out}");
    assert!(
        out.contains("main.kinds  func(b bool, i8 int8, u16 uint16, i32 int32, u64 uint64, p *int, bs []uint8, e error) (ok bool, n int)"),
        "{out}"
    );
    let out = list(&stripped);
    assert!(
        out.contains("stripped (no symbol table), no DWARF: probes need a signature"),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("main.")).count(),
        2,
        "{out}"
    );
    let o = std::process::Command::new(harness::gprobe_bin())
        .args(["symbols", "/nonexistent/binary"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/binary"));
}
