//! Trace context on e2e/testdata/resolve/values, stripped and not: a handler (a function
//! with a `*net/http.Request` parameter) gets a hidden capture that reads the incoming
//! traceparent from `r.Header` in the map layout of its Go release, where the spec's
//! captures leave room; a `propagate: true` probe records the span BPF makes.

use gprobe_agent::abi;
use gprobe_agent::attach::encode::configs;
use gprobe_agent::plan::{Decode, PlanWarning};
use gprobe_agent::resolve::planner::plan_probe;
use gprobe_crds::Probe;

use crate::go::GoVersion;
use crate::types::{cap, plan, probe};
use crate::{open, values_bin, VERSIONS};

const HANDLER: Option<&str> = Some("func(w http.ResponseWriter, r *net/http.Request)");
const HIDDEN: &str = "(traceparent)";

#[test]
fn handlers_read_the_incoming_traceparent_from_r_header() {
    for v in VERSIONS {
        let layout = match v {
            GoVersion::Go119 | GoVersion::Go121 => abi::MAP_HMAP,
            _ => abi::MAP_SWISS,
        };
        for kind in ["full", "stripped"] {
            let what = format!("{} {kind}", v.tag());
            let b = open(&values_bin(v, kind));
            let p = plan(
                &b,
                &probe("main.handleOrder", HANDLER, &["r.Method", "r.Header"]),
            );
            let (_, header) = cap(&p, "r.Header");
            let (d, c) = cap(&p, HIDDEN);
            assert_eq!(
                p.entry_captures.last().unwrap().name,
                HIDDEN,
                "{what}: last"
            );
            assert_eq!(d, Decode::Header, "{what}");
            assert_eq!((c.kind, c.size), (abi::CAP_HEADER, layout), "{what}");
            // The same place as the map pointer a spec's `r.Header` reads.
            assert_eq!(c.flags & abi::CAPF_PATH, abi::CAPF_PATH, "{what}");
            assert_eq!(
                (c.loc[0], c.n_hops, c.hops, c.off),
                (header.loc[0], header.n_hops, header.hops, header.off),
                "{what}"
            );
            // Without captures, too (the types from DWARF or the signature).
            let p = plan(&b, &probe("main.handleOrder", HANDLER, &[]));
            assert_eq!(p.entry_captures.len(), 1, "{what}");
            assert_eq!(p.entry_captures[0].name, HIDDEN, "{what}");
            // A function without a request has none.
            let p = plan(
                &b,
                &probe("main.process", Some("func(o *main.order) int"), &["o"]),
            );
            assert!(p.entry_captures.iter().all(|c| c.name != HIDDEN), "{what}");
        }
    }
}

#[test]
fn a_handler_whose_captures_fill_the_record_starts_its_own_traces_and_says_so() {
    let eight = [
        "r.Method",
        "r.Host",
        "r.URL.Path",
        "r.URL.RawQuery",
        "r.Proto",
        "r.RequestURI",
        "r.RemoteAddr",
        "r.ContentLength",
    ];
    let b = open(&values_bin(GoVersion::Go127, "full"));
    let p = plan(&b, &probe("main.handleOrder", HANDLER, &eight));
    assert_eq!(p.entry_captures.len(), 8);
    assert!(p.entry_captures.iter().all(|c| c.name != HIDDEN));
    assert!(
        p.warnings
            .iter()
            .any(|w| matches!(w, PlanWarning::NoRoomForTraceparent { .. })
                && w.to_string().contains("capture fewer values")),
        "{:?}",
        p.warnings
    );
    // A propagating probe must record its span: eight captures leave no room.
    let mut prop = probe("main.handleOrder", HANDLER, &eight);
    prop.latency = true;
    prop.propagate = true;
    let e = plan_probe(&b, &prop, 64).unwrap_err().to_string();
    assert!(e.contains("propagate"), "{e}");
}

#[test]
fn a_propagating_probe_records_its_span_and_finds_the_traceparent() {
    let b = open(&values_bin(GoVersion::Go127, "stripped"));
    let p = plan(
        &b,
        &Probe {
            latency: true,
            propagate: true,
            ..probe("main.handleOrder", HANDLER, &["r.Method"])
        },
    );
    let names: Vec<&str> = p.entry_captures.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["r.Method", HIDDEN, "(span)"]);
    let (d, c) = cap(&p, "(span)");
    assert_eq!((d, c.kind), (Decode::Span, abi::CAP_SPAN));
    let (entry, ret) = configs(&p, 1, 0);
    let ret = ret.expect("latency: a return configuration");
    assert_eq!(entry.flags & abi::CFG_PROPAGATE, abi::CFG_PROPAGATE);
    assert_eq!(ret.flags & abi::CFG_PROPAGATE, abi::CFG_PROPAGATE);
    assert_eq!(entry.aux, 2, "1 + the index of the traceparent capture");
    assert_eq!(entry.flags & (abi::CFG_WORDS | abi::CFG_ONE_BYTES), 0);
}

/// Propagation finds what it needs in every Go release, stripped or not: the client's
/// round trips, the header writer, and the `*bufio.Writer` type descriptor among the runtime
/// types (Go 1.26 put `epclntab` before the module data's typelinks: no descriptor of its
/// binaries was found, and their requests went out without a traceparent).
#[test]
fn propagation_is_planned_in_every_go_release() {
    for v in GoVersion::ALL {
        for (kind, flags) in [("full", &[][..]), ("stripped", &["-ldflags=-s -w"][..])] {
            let what = format!("{} {kind}", v.tag());
            let path = crate::build(v, "httpget", kind, flags, false);
            let p = gprobe_agent::resolve::propagate::plan(&open(&path))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_ne!(p.writer_type, 0, "{what}");
            assert_ne!(p.write_offset, 0, "{what}");
        }
    }
}
