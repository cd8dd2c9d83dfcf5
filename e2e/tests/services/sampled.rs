//! `sample:` across two services: the front handler (`propagate: true`) decides, by trace
//! id, whether each request's trace is sampled, and says so in the traceparent it writes
//! into its requests to the back service (flags 01 or 00); the back handler, sampling at
//! the same share, follows that flag. Both keep exactly the same requests.

use crate::service::{attached, id, text, Service};
use gprobe_e2e::harness::{run_program, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::collections::BTreeSet;
use std::path::Path;

/// Requests the client sends (without a traceparent of their own).
const REQUESTS: u64 = 400;
/// The share both handlers keep.
const SHARE: f64 = 0.25;

/// Runs the services under gprobe with both handlers sampled; checks that they keep the
/// same traces. Returns whether the kernel let BPF write the traceparents: without them
/// the back service cannot know the front's decision; `--propagate-dry-run` (`extra`) then
/// shows that the lines BPF made say "not sampled" for exactly the requests of the front
/// calls left out.
pub fn run_sampled(bin: &Path, extra: &[&str], what: &str) -> bool {
    let handler = "func(w http.ResponseWriter, r *http.Request)";
    let spec = SpecBuilder::new("sampled")
        .executable(bin)
        .events_per_second(0)
        .probe(
            ProbeBuilder::new("main.frontHandler")
                .signature(handler)
                .capture(["r.URL.RawQuery"])
                .latency()
                .propagate()
                .sample(SHARE),
        )
        .probe(
            ProbeBuilder::new("main.backHandler")
                .signature(handler)
                .capture(["r.URL.RawQuery"])
                .latency()
                .sample(SHARE),
        )
        .yaml();
    let g = Gprobe::cmd(&spec).args(extra).summary_file().start();
    g.wait_ready();
    let dir = gprobe_e2e::harness::build_dir();
    let back = Service::start(bin, &["-role", "back"], dir.join("sampled-back.log"));
    attached(&g, &back, 2);
    let front = Service::start(
        bin,
        &["-role", "front", "-backend", &back.url()],
        dir.join("sampled-front.log"),
    );
    attached(&g, &front, 2);
    let n = REQUESTS.to_string();
    let front_url = front.url();
    let out = run_program(
        bin,
        &["-role", "client", "-plain", "-front", &front_url, "-n", &n],
    );
    assert_eq!(out.matches("sent id=").count() as u64, REQUESTS, "{what}");
    let backs = back.lines("back ");
    drop((front, back));
    let run = g.stop();
    assert!(run.status.success(), "{what}: {}", run.stderr);
    let s = run.summary();
    let (fp, bp) = (s.probe("main.frontHandler"), s.probe("main.backHandler"));
    // Every request is counted once by each handler: kept or sampled out.
    assert_eq!(fp.delivered + fp.sampled_out, REQUESTS, "{what}: {fp:?}");
    assert_eq!(
        bp.delivered + bp.sampled_out,
        2 * REQUESTS,
        "{what}: {bp:?}"
    );
    let kept = fp.delivered as f64 / REQUESTS as f64;
    // 400 draws at 0.25: the standard deviation is 0.022; 4 of them either way.
    assert!(
        (SHARE - 0.09..=SHARE + 0.09).contains(&kept),
        "{what}: kept {kept}"
    );

    let records = run.records();
    let traces = |symbol: &str| -> BTreeSet<String> {
        records
            .iter()
            .filter(|r| r["symbol"] == symbol)
            .map(|r| id(r, "trace_id").expect("a trace id"))
            .collect()
    };
    let front_traces = traces("main.frontHandler");
    assert_eq!(
        front_traces.len() as u64,
        fp.delivered,
        "{what}: one trace per request"
    );
    let prop = run.summary_json()["propagation"].clone();
    // Each front call makes two requests: those of the calls left out say so.
    assert_eq!(prop["requests"], 2 * REQUESTS, "{what}: {prop}");
    if prop["dry_run"] == true || prop["error"].is_null() {
        assert_eq!(prop["written"], 2 * REQUESTS, "{what}: {prop}");
        assert_eq!(prop["unsampled"], 2 * fp.sampled_out, "{what}: {prop}");
    }
    let written = prop["error"].is_null() && prop["dry_run"] != true;
    // What the back service was sent: sampled (01) exactly for the front's kept traces.
    let flagged: BTreeSet<String> = backs
        .values()
        .filter(|tp| tp.ends_with("-01"))
        .filter_map(|tp| tp.split('-').nth(1).map(str::to_string))
        .collect();
    if !written {
        eprintln!("{what}: no traceparent written ({prop}): the back service not compared");
        return false;
    }
    assert_eq!(
        backs.len() as u64,
        2 * REQUESTS,
        "{what}: the back service's requests"
    );
    assert_eq!(
        flagged, front_traces,
        "{what}: the traceparents sent as sampled are the front's kept traces"
    );
    assert_eq!(
        traces("main.backHandler"),
        front_traces,
        "{what}: the back handler keeps the same traces"
    );
    assert_eq!(
        bp.delivered,
        2 * fp.delivered,
        "{what}: two back requests per kept front one"
    );
    // The back records are the kept requests' own (their query names the front's id).
    let front_ids: BTreeSet<String> = records
        .iter()
        .filter(|r| r["symbol"] == "main.frontHandler")
        .map(|r| text(&r["args"]["r.URL.RawQuery"]))
        .collect();
    for r in records.iter().filter(|r| r["symbol"] == "main.backHandler") {
        let q = text(&r["args"]["r.URL.RawQuery"]);
        let id = q.split('&').next().unwrap_or_default();
        assert!(
            front_ids.contains(id),
            "{what}: back {q} of a front request not kept"
        );
    }
    true
}
