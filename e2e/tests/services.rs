//! Traces that cross services: e2e/testdata/services runs a front and a back service and a
//! client that sends some requests with a traceparent of their own (valid, of a later
//! version, or invalid), some with many headers. The front handler (`propagate: true`)
//! joins the client's trace, its direct call and the goroutine it starts are its
//! children, and its requests to the back service (its own, and the goroutine's) carry
//! its span where the kernel lets BPF write it (else gprobe says why and counts the
//! requests that went out without it). JSONL and a real OTLP receiver must show exactly
//! the trees the program's own record describes. A handler joins the trace of a request
//! with many headers (150, 850, 1,000) on both Go map layouts, and counts a request with more
//! than gprobe searches (`join_incomplete`). Requests that share one http.Header, made by
//! calls on many goroutines at once, each carry their own call's span. They need root
//! (BPF).

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{program, program_lines, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::otlp_receiver::{attr_str, grpc_receiver, spans, Received};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
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

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
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
    require_trace("a_requests_spans_form_one_trace_across_two_services");
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
    rec: &Received,
    what: &str,
) -> Value {
    let mut args = vec!["--otlp-endpoint", endpoint];
    args.extend_from_slice(extra);
    let g = Gprobe::cmd(spec).args(&args).summary_file().start();
    g.wait_ready();
    let dir = gprobe_e2e::harness::build_dir();
    let back = Service::start(bin, &["-role", "back"], dir.join("services-back.log"));
    attached(&g, &back, 5);
    let front = Service::start(
        bin,
        &["-role", "front", "-backend", &back.url()],
        dir.join("services-front.log"),
    );
    attached(&g, &front, 5);
    let front_url = front.url();
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
    rec: &Received,
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

/// Waits until gprobe has attached `probes` probes to `s`.
fn attached(g: &Gprobe, s: &Service, probes: usize) {
    let tag = format!("pid {})", s.pid());
    g.wait_for_stderr(
        |e| e.matches(&tag).count() >= probes,
        Duration::from_secs(30),
    );
}

/// The last value the receiver got of the counter `name` for the probe on `symbol`.
fn counter(rec: &Received, name: &str, symbol: &str) -> Option<i64> {
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value as V};
    let mut last = None;
    for req in rec.metrics.lock().unwrap().iter() {
        for sm in req.resource_metrics.iter().flat_map(|r| &r.scope_metrics) {
            for m in sm.metrics.iter().filter(|m| m.name == name) {
                if let Some(Data::Sum(sum)) = &m.data {
                    for p in &sum.data_points {
                        if attr_str(&p.attributes, "code.function").as_deref() == Some(symbol) {
                            if let Some(V::AsInt(v)) = p.value {
                                last = Some(v);
                            }
                        }
                    }
                }
            }
        }
    }
    last
}

/// Requests of `headers` headers, a valid traceparent among them, `n` of them from id
/// `first` on, and whether the handler must join their traces.
const MANY_HEADERS: [(usize, usize, usize, bool); 5] = [
    (10, 3, 1, true),
    (150, 5, 101, true),
    // As many as net/http sizes a request's map for.
    (1000, 3, 201, true),
    // More keys than gprobe searches (1,024): not searched, counted.
    (1100, 2, 301, false),
    // Go 1.19: the server sizes the map for the headers in its first 4 KiB (about 290
    // here), so it grows while they are read; past 832 keys to 256 buckets, moving two
    // old ones per key added: with 852 keys most of the 128 old buckets are still to be
    // searched.
    (850, 2, 401, true),
];

#[test]
fn a_handler_joins_the_trace_of_a_request_with_many_headers() {
    let _serial = serial();
    require_trace("a_handler_joins_the_trace_of_a_request_with_many_headers");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // Go 1.19: buckets with overflow chains, old buckets while the map grows; Go 1.27
    // stripped: swiss tables, a directory of several for 1,000 headers.
    for (v, stripped) in [(GoVersion::Go119, false), (GoVersion::Go127, true)] {
        let what = format!("{v:?} stripped={stripped}");
        let (rec, endpoint) = grpc_receiver(&rt);
        let bin = program("e2e/testdata/services", v, stripped);
        let mut probe = ProbeBuilder::new("main.backHandler")
            .capture(["r.URL.RawQuery"])
            .latency();
        if stripped {
            probe = probe.signature("func(w http.ResponseWriter, r *http.Request)");
        }
        let spec = SpecBuilder::new("headers")
            .executable(&bin)
            .events_per_second(0)
            .probe(probe)
            .yaml();
        let g = Gprobe::cmd(&spec)
            .args(&["--otlp-endpoint", &endpoint])
            .summary_file()
            .start();
        g.wait_ready();
        let dir = gprobe_e2e::harness::build_dir();
        let back = Service::start(&bin, &["-role", "back"], dir.join("headers-back.log"));
        attached(&g, &back, 1);
        let mut sent = Vec::new();
        for (headers, n, first, _) in MANY_HEADERS {
            let (h, n, f) = (headers.to_string(), n.to_string(), first.to_string());
            let args = ["-role", "headers", "-backend", &back.url(), "-headers", &h];
            let out = run_program(&bin, &[&args[..], &["-n", &n, "-first", &f]].concat());
            sent.extend(program_lines(&out, "sent "));
        }
        let received = back.lines("back ");
        drop(back);
        let run = g.stop();
        assert!(run.status.success(), "{what}: {}", run.stderr);
        let records = run.records_of("main.backHandler");
        let expected: usize = MANY_HEADERS.iter().map(|c| c.1).sum();
        assert_eq!(sent.len(), expected, "{what}");
        assert_eq!(records.len(), expected, "{what}: every call recorded");
        let mut joined = 0;
        for line in &sent {
            let i: usize = line["id"].parse().unwrap();
            let (headers, _, _, joins) = *MANY_HEADERS.iter().rev().find(|c| i >= c.2).unwrap();
            assert_eq!(line["headers"], headers.to_string(), "{what}");
            let tp = &line["traceparent"];
            assert_eq!(&received[&line["id"]], tp, "{what}: the handler got it");
            let q = format!("id={i}");
            let r = records
                .iter()
                .find(|r| r["args"]["r.URL.RawQuery"] == q.as_str())
                .unwrap_or_else(|| panic!("{what}: no record of {q}"));
            let (trace, span) = ctx(tp).unwrap();
            if joins {
                assert_eq!(
                    (id(r, "trace_id"), id(r, "parent_span_id")),
                    (Some(trace), Some(span)),
                    "{what}: {headers} headers: {r} joins {tp}"
                );
                joined += 1;
            } else {
                assert_eq!(id(r, "parent_span_id"), None, "{what}: {r} is a root");
                assert_ne!(id(r, "trace_id"), Some(trace), "{what}: {r}");
            }
        }
        assert_eq!(joined, expected - 2, "{what}");
        let summary = run.summary_json();
        let p = &summary["probes"][0];
        assert_eq!(p["symbol"], "main.backHandler", "{what}: {summary}");
        assert_eq!(
            p["join_incomplete"], 2,
            "{what}: the two requests of 1,100 headers are counted: {summary}"
        );
        assert_eq!(
            counter(&rec, "gprobe.joins.incomplete", "main.backHandler"),
            Some(2),
            "{what}: the metric says the same"
        );
    }
}

/// Requests made inside calls per round, requests made outside any, rounds.
const SHARED: (usize, usize, usize) = (30, 10, 2);

#[test]
fn requests_sharing_one_header_each_carry_their_own_span() {
    let _serial = serial();
    require_trace("requests_sharing_one_header_each_carry_their_own_span");
    for (v, stripped) in [(GoVersion::Go119, false), (GoVersion::Go127, true)] {
        let what = format!("{v:?} stripped={stripped}");
        let bin = program("e2e/testdata/services", v, stripped);
        let sig = |p: ProbeBuilder, s: &str| if stripped { p.signature(s) } else { p };
        let spec = SpecBuilder::new("shared")
            .executable(&bin)
            .events_per_second(0)
            .probe(
                sig(
                    ProbeBuilder::new("main.call"),
                    "func(id int, c *http.Client, back string, h http.Header) error",
                )
                .capture(["id"])
                .latency()
                .propagate(),
            )
            .probe(
                sig(
                    ProbeBuilder::new("main.backHandler"),
                    "func(w http.ResponseWriter, r *http.Request)",
                )
                .capture(["r.URL.RawQuery"])
                .latency(),
            )
            .yaml();
        let prop = run_shared(&bin, &spec, &[], &what);
        if !prop["error"].is_null() {
            // The kernel forbids the write: the dry run does everything else and counts.
            let prop = run_shared(
                &bin,
                &spec,
                &["--propagate-dry-run"],
                &format!("{what} dry"),
            );
            assert_eq!(prop["dry_run"], true, "{what}: {prop}");
        }
    }
}

/// Runs the back service and the sharing client under gprobe; checks each request's
/// traceparent (where written) and the counts; returns the summary's propagation.
fn run_shared(bin: &Path, spec: &str, extra: &[&str], what: &str) -> Value {
    let (calls, outside, rounds) = SHARED;
    let g = Gprobe::cmd(spec).args(extra).summary_file().start();
    g.wait_ready();
    let dir = gprobe_e2e::harness::build_dir();
    let barrier = (calls + outside).to_string();
    let back = Service::start(
        bin,
        &["-role", "back", "-barrier", &barrier],
        dir.join("shared-back.log"),
    );
    attached(&g, &back, 1);
    let (n, o, r) = (calls.to_string(), outside.to_string(), rounds.to_string());
    let args = [
        "-role",
        "shared",
        "-backend",
        &back.url(),
        "-n",
        &n,
        "-outside",
        &o,
    ];
    let mut client = Command::new(bin)
        .args(args)
        .args(["-rounds", &r, "-linger"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: start the client: {e}"));
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let mut out = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        out += &line;
        out.push('\n');
        if line == "client done" {
            break;
        }
    }
    assert!(
        out.ends_with("client done\n"),
        "{what}: the client ended early:\n{out}"
    );
    // Every round trip returned, the client still runs: BPF keeps nothing of its requests.
    let pid = client.id();
    for map in ["requests", "conns"] {
        assert_eq!(
            bpf_map_entries_of(map, pid),
            0,
            "{what}: BPF map {map} still holds requests of the client"
        );
    }
    drop(client.stdin.take());
    assert!(
        client.wait().unwrap().success(),
        "{what}: the client failed"
    );
    let received = back.lines("back ");
    drop(back);
    let run = g.stop();
    assert!(run.status.success(), "{what}: {}", run.stderr);
    let sent: Vec<String> = program_lines(&out, "sent ")
        .into_iter()
        .map(|l| l["id"].clone())
        .collect();
    assert_eq!(sent.len(), (calls + outside) * rounds, "{what}");
    let summary = run.summary_json();
    let prop = summary["propagation"].clone();
    let made = (calls * rounds) as u64;
    assert_eq!(
        prop["requests"], made,
        "{what}: requests made in calls: {prop}"
    );
    assert_eq!(prop["incomplete"], 0, "{what}: {prop}");
    let dry_run = prop["dry_run"] == true;
    let kernel_writes = prop["error"].is_null() && !dry_run;
    if dry_run || kernel_writes {
        // Each request of a call found its own hand-off: none took another's, none was
        // left for a request outside the calls.
        assert_eq!(prop["written"], made, "{what}: {prop}");
    } else {
        assert_eq!(prop["written"], 0, "{what}: {prop}");
    }
    let calls_made = run.records_of("main.call");
    assert_eq!(
        calls_made.len(),
        calls * rounds,
        "{what}: every call recorded"
    );
    let handled = run.records_of("main.backHandler");
    assert_eq!(handled.len(), sent.len(), "{what}: every request handled");
    for line in &sent {
        let (i, from) = line.split_once('/').unwrap();
        let h = handled
            .iter()
            .find(|r| r["args"]["r.URL.RawQuery"] == format!("id={i}&from={from}").as_str())
            .unwrap_or_else(|| panic!("{what}: no handler record of {line}"));
        let c = calls_made
            .iter()
            .find(|r| text(&r["args"]["id"]) == i)
            .filter(|_| from == "call");
        match c.filter(|_| kernel_writes) {
            Some(c) => {
                let (ct, cs) = (id(c, "trace_id").unwrap(), id(c, "span_id").unwrap());
                assert_eq!(
                    received[line],
                    format!("00-{ct}-{cs}-01"),
                    "{what}: request {line} carries its own call's span"
                );
                assert_eq!(
                    (id(h, "trace_id"), id(h, "parent_span_id")),
                    (Some(ct), Some(cs)),
                    "{what}: {h}"
                );
            }
            None => {
                assert_eq!(
                    received[line], "-",
                    "{what}: request {line} carries nothing"
                );
                assert_eq!(id(h, "parent_span_id"), None, "{what}: {h} is a root");
            }
        }
    }
    prop
}

/// Entries of the BPF maps named `map` (gprobe's `requests` and `conns`: keys of a u64 then
/// the process's tgid) that belong to process `tgid`, read with bpftool.
fn bpf_map_entries_of(map: &str, tgid: u32) -> usize {
    let out = Command::new("bpftool")
        .args(["-j", "map", "dump", "name", map])
        .output()
        .expect("bpftool runs (scripts/setup.sh --test installs it)");
    assert!(out.status.success(), "bpftool map dump name {map}: {out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let byte = |b: &Value| u8::from_str_radix(b.as_str().unwrap().trim_start_matches("0x"), 16);
    // One map: its entries; several of that name (other gprobe processes): each with its
    // entries under "elements".
    let entries: Vec<&Value> = v
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| match e["elements"].as_array() {
            Some(elements) => elements.iter().collect(),
            None => vec![e],
        })
        .collect();
    entries
        .into_iter()
        .filter(|e| {
            let key: Vec<u8> = e["key"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| byte(b).unwrap())
                .collect();
            u32::from_le_bytes(key[8..12].try_into().unwrap()) == tgid
        })
        .count()
}
