//! Traces that cross services: e2e/testdata/services runs a front and a back service and a
//! client that sends some requests with a traceparent of their own (valid, of a later
//! version, or invalid), some with many headers. The front handler (`propagate: true`)
//! joins the client's trace, its direct call and the goroutine it starts are its
//! children, and its requests to the back service (its own, and the goroutine's) carry
//! its span where the kernel lets BPF write it (else gprobe says why and counts the
//! requests that went out without it). JSONL and a real OTLP receiver must show exactly
//! the trees the program's own record describes. They need root (BPF).

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{can_trace, program, program_lines, run_program, serial, Gprobe};
use gprobe_e2e::otlp_receiver::{grpc_receiver, spans};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A service of the test program, stopped (by pid) when dropped.
struct Service {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Service {
    fn start(bin: &Path, args: &[&str], log: PathBuf) -> Service {
        let _ = std::fs::remove_file(&log);
        let child = Command::new(bin)
            .args(args)
            .arg("-log")
            .arg(&log)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        // Owned from here: stopped (by pid) on any failure below.
        let mut s = Service {
            child,
            port: 0,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&s.log).unwrap_or_default();
            if let Some(l) = program_lines(&text, "listening ").first() {
                s.port = l["port"].parse().unwrap();
                return s;
            }
            assert!(Instant::now() < deadline, "{args:?} never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn lines(&self, prefix: &str) -> BTreeMap<String, String> {
        let text = std::fs::read_to_string(&self.log).unwrap();
        program_lines(&text, prefix)
            .into_iter()
            .map(|l| (l["id"].clone(), l["traceparent"].clone()))
            .collect()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn id(r: &Value, key: &str) -> Option<String> {
    r.get(key).and_then(Value::as_str).map(str::to_string)
}

/// A captured value as the program prints it: a string as it is, a number in decimal.
fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// `(trace id, span id)` of a traceparent, or None for "-".
fn ctx(tp: &str) -> Option<(String, String)> {
    let p: Vec<&str> = tp.split('-').collect();
    (p.len() >= 4).then(|| (p[1].to_string(), p[2].to_string()))
}

const REQUESTS: usize = 12;

#[test]
fn a_requests_spans_form_one_trace_across_two_services() {
    let _serial = serial();
    if !can_trace("a_requests_spans_form_one_trace_across_two_services") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // Go 1.19: buckets of the old map layout; Go 1.27 stripped: swiss maps, and the
    // handlers' types from their signatures and Go's runtime type data.
    for (v, stripped) in [(GoVersion::Go119, false), (GoVersion::Go127, true)] {
        let (rec, endpoint) = grpc_receiver(&rt);
        let bin = program("e2e/testdata/services", v, stripped);
        let sig = |p: ProbeBuilder, s: &str| if stripped { p.signature(s) } else { p };
        let handler = "func(w http.ResponseWriter, r *http.Request)";
        let spec = SpecBuilder::new("services")
            .executable(&bin)
            .events_per_second(0)
            .probe(
                sig(ProbeBuilder::new("main.frontHandler"), handler)
                    .capture(["r.URL.RawQuery"])
                    .latency()
                    .propagate(),
            )
            .probe(
                sig(ProbeBuilder::new("main.work"), "func(id int) int")
                    .capture(["id"])
                    .latency(),
            )
            .probe(
                sig(ProbeBuilder::new("main.async"), "func(id int) int")
                    .capture(["id"])
                    .latency(),
            )
            .probe(
                sig(ProbeBuilder::new("main.backHandler"), handler)
                    .capture(["r.URL.RawQuery"])
                    .latency(),
            )
            .probe(sig(ProbeBuilder::new("main.lookup"), "func(id int) int").capture(["id"]))
            .yaml();
        let what = format!("{v:?} stripped={stripped}");
        let prop = run_services(&bin, &spec, &endpoint, &[], &rec, &what);
        if !prop["error"].is_null() {
            // The kernel forbids the write: the dry run checks the rest (the writer's type
            // check of the connection's *bufio.Writer, the room in its buffer), counts what
            // it would have written, and still sends the requests as they were.
            let (rec, endpoint) = grpc_receiver(&rt);
            let dry = ["--propagate-dry-run"];
            let prop = run_services(&bin, &spec, &endpoint, &dry, &rec, &format!("{what} dry"));
            assert_eq!(prop["written"], 2 * REQUESTS, "{what}: {prop}");
            assert_eq!(prop["dry_run"], true, "{what}: {prop}");
        }
    }
}

/// Runs the two services and the client under gprobe with `spec`; checks the traces;
/// returns the summary's propagation counts.
fn run_services(
    bin: &Path,
    spec: &str,
    endpoint: &str,
    extra: &[&str],
    rec: &gprobe_e2e::otlp_receiver::Received,
    what: &str,
) -> Value {
    let mut args = vec!["--otlp-endpoint", endpoint];
    args.extend_from_slice(extra);
    let g = Gprobe::cmd(spec).args(&args).summary_file().start();
    g.wait_ready();
    let dir = gprobe_e2e::harness::build_dir();
    let attached = |s: &Service| {
        let tag = format!("pid {})", s.pid());
        g.wait_for_stderr(|e| e.matches(&tag).count() >= 5, Duration::from_secs(30));
    };
    let back = Service::start(bin, &["-role", "back"], dir.join("services-back.log"));
    attached(&back);
    let backend = format!("http://127.0.0.1:{}", back.port);
    let front = Service::start(
        bin,
        &["-role", "front", "-backend", &backend],
        dir.join("services-front.log"),
    );
    attached(&front);
    let front_url = format!("http://127.0.0.1:{}", front.port);
    let n = REQUESTS.to_string();
    let out = run_program(bin, &["-role", "client", "-front", &front_url, "-n", &n]);
    let (fronts, backs) = (front.lines("front "), back.lines("back "));
    drop((front, back));
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);
    check(&run, &out, &fronts, &backs, rec, what);
    run.summary_json()["propagation"].clone()
}

fn check(
    run: &gprobe_e2e::harness::Run,
    client_out: &str,
    fronts: &BTreeMap<String, String>,
    backs: &BTreeMap<String, String>,
    rec: &gprobe_e2e::otlp_receiver::Received,
    what: &str,
) {
    let lines = program_lines(client_out, "sent ");
    let sent: BTreeMap<String, String> = lines
        .iter()
        .map(|l| (l["id"].clone(), l["traceparent"].clone()))
        .collect();
    let valid: BTreeMap<String, bool> = lines
        .iter()
        .map(|l| (l["id"].clone(), l["valid"] == "1"))
        .collect();
    assert_eq!(sent.len(), REQUESTS, "{what}");
    assert!(valid.values().filter(|v| **v).count() >= 4, "{what}");
    assert_eq!(
        &sent, fronts,
        "{what}: the front service got what the client sent"
    );
    let records = run.records();
    let by_span: BTreeMap<String, &Value> = records
        .iter()
        .map(|r| (id(r, "span_id").expect("every record has a span id"), r))
        .collect();
    assert_eq!(by_span.len(), records.len(), "{what}: span ids are unique");
    let of = |symbol: &str, key: &str, value: &str| -> &Value {
        let hits: Vec<&&Value> = by_span
            .values()
            .filter(|r| r["symbol"] == symbol)
            .filter(|r| text(&r["args"][key]) == value)
            .collect();
        assert_eq!(hits.len(), 1, "{what}: one {symbol} with {key}={value}");
        hits[0]
    };
    let parent = |r: &Value| id(r, "parent_span_id");
    let summary = run.summary_json();
    let prop = &summary["propagation"];
    // Each front request makes two: its own, and its goroutine's.
    assert_eq!(prop["requests"], 2 * REQUESTS, "{what}: {summary}");
    let written = prop["written"].as_u64().unwrap();
    let dry_run = prop["dry_run"] == true;
    let kernel_writes = prop["error"].is_null() && !dry_run;
    if dry_run {
        // Counted as written; nothing was: the requests went out as they were.
        assert_eq!(written, 2 * REQUESTS as u64, "{what}: {prop}");
    } else if kernel_writes {
        assert_eq!(
            written,
            2 * REQUESTS as u64,
            "{what}: every request carried its span"
        );
    } else {
        // This kernel forbids BPF writes to process memory (lockdown): said, and counted.
        assert_eq!(written, 0, "{what}");
        assert!(
            prop["error"]
                .as_str()
                .unwrap()
                .contains("bpf_probe_write_user"),
            "{what}: {prop}"
        );
        assert!(
            run.stderr.contains("carry no traceparent"),
            "{}",
            run.stderr
        );
    }
    for (i, tp) in &sent {
        let q = format!("id={i}");
        let f = of("main.frontHandler", "r.URL.RawQuery", &q);
        let (ft, fs) = (id(f, "trace_id").unwrap(), id(f, "span_id").unwrap());
        match ctx(tp).filter(|_| valid[i]) {
            Some((trace, span)) => {
                assert_eq!(
                    (&ft, parent(f)),
                    (&trace, Some(span)),
                    "{what}: {f} joins {tp}"
                )
            }
            None => assert_eq!(parent(f), None, "{what}: {f} is a root ({tp})"),
        }
        for child in ["main.work", "main.async"] {
            let c = of(child, "id", i);
            assert_eq!(parent(c).as_ref(), Some(&fs), "{what}: {c} under {f}");
            assert_eq!(id(c, "trace_id").as_ref(), Some(&ft), "{what}: {c}");
        }
        // The request the handler makes, and the one the goroutine it started makes.
        for (query, line) in [
            (q.clone(), i.clone()),
            (format!("{q}&from=goroutine"), format!("{i}/goroutine")),
        ] {
            let b = of("main.backHandler", "r.URL.RawQuery", &query);
            let bs = id(b, "span_id");
            let lookups: Vec<&&Value> = by_span
                .values()
                .filter(|r| r["symbol"] == "main.lookup" && parent(r) == bs)
                .collect();
            assert_eq!(lookups.len(), 1, "{what}: one lookup under {b}");
            assert_eq!(text(&lookups[0]["args"]["id"]), *i, "{what}: {b}");
            assert_eq!(id(lookups[0], "trace_id"), id(b, "trace_id"), "{what}: {b}");
            if kernel_writes {
                assert_eq!(
                    backs[&line],
                    format!("00-{ft}-{fs}-01"),
                    "{what}: request {line}"
                );
                assert_eq!(
                    (id(b, "trace_id"), parent(b)),
                    (Some(ft.clone()), Some(fs.clone())),
                    "{what}: {b}"
                );
            } else {
                assert_eq!(
                    backs[&line], "-",
                    "{what}: request {line} went out as it was"
                );
                assert_eq!(parent(b), None, "{what}: {b} is a root");
                assert_ne!(id(b, "trace_id"), Some(ft.clone()), "{what}: {b}");
            }
        }
    }
    assert_eq!(records.len(), REQUESTS * 7, "{what}: every call recorded");

    // The receiver has the same spans with the same ids and parents.
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let got: BTreeMap<String, (String, String, String)> = spans(rec)
        .into_iter()
        .map(|(_, s)| {
            let p = if s.parent_span_id.is_empty() {
                String::new()
            } else {
                hex(&s.parent_span_id)
            };
            (hex(&s.span_id), (s.name.clone(), hex(&s.trace_id), p))
        })
        .collect();
    let want: BTreeMap<String, (String, String, String)> = by_span
        .iter()
        .map(|(s, r)| {
            let name = r["symbol"].as_str().unwrap().to_string();
            (
                s.clone(),
                (
                    name,
                    id(r, "trace_id").unwrap(),
                    parent(r).unwrap_or_default(),
                ),
            )
        })
        .collect();
    assert_eq!(
        got, want,
        "{what}: the receiver's spans are the records' spans"
    );
}
