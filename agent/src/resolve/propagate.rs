//! Where gprobe's own probes for `propagate: true` go in a Go executable: the request
//! `net/http.(*Transport).roundTrip(t, req)` (its `req.Header`, read by the hidden
//! traceparent capture that every function with a `*net/http.Request` gets; its RET sites,
//! where the request is forgotten), `net/http.(*persistConn).roundTrip(pc, treq)`, where it
//! is handed to a connection (`pc.bw`, the connection's `*bufio.Writer`), and
//! `net/http.Header.writeSubset(h, w, ...)`, where the headers are written through that
//! writer, whose type descriptor BPF checks before it writes. Anything gprobe cannot be
//! sure of refuses propagation with the reason.

use super::planner::plan_probe;
use super::Binary;
use super::PlanError;
use crate::abi;
use crate::plan::{ProbePlan, Returns};
use gprobe_crds::Probe;

/// The propagation probes planned in one executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropagatePlan {
    /// `(*Transport).roundTrip`: its entry with its one capture, the request's header map,
    /// and its RET sites.
    pub out: ProbePlan,
    /// `(*persistConn).roundTrip`: its entry with its one capture, `pc.bw`.
    pub conn: ProbePlan,
    /// writeSubset's entry (file offset).
    pub write_offset: u64,
    /// The link-time address of the `*bufio.Writer` type descriptor.
    pub writer_type: u64,
}

const ROUND_TRIP: &str = "net/http.(*Transport).roundTrip";
const WRITE_SUBSET: &str = "net/http.Header.writeSubset";
const CONN_ROUND_TRIP: &str = "net/http.(*persistConn).roundTrip";

/// Why propagation cannot be done in an executable.
#[derive(Debug, thiserror::Error)]
pub enum PropagateError {
    /// The executable could not be opened or parsed.
    #[error("{source}")]
    Open {
        #[source]
        source: Box<super::ResolveError>,
    },
    #[error("not a Go program")]
    NotGo,
    /// A position-independent executable's type descriptors move with its load address;
    /// BPF compares against one address.
    #[error(
        "a position-independent Go executable (-buildmode=pie) is not supported: build it as \
        a plain executable (the default)"
    )]
    PositionIndependent,
    #[error("it makes no net/http client requests (no {ROUND_TRIP})")]
    NoClientRequests,
    /// One of the functions propagation probes could not be planned.
    #[error("{function}: {source}")]
    Plan {
        function: &'static str,
        #[source]
        source: Box<PlanError>,
    },
    #[error(
        "{ROUND_TRIP}: the request's Header field or its map layout ({go_version}) is not known"
    )]
    UnknownHeaderLayout { go_version: String },
    #[error("{ROUND_TRIP}: no return sites were found")]
    NoReturnSites,
    #[error("{CONN_ROUND_TRIP}: pc.bw is not a pointer")]
    WriterNotPointer,
    #[error("the *bufio.Writer type descriptor was not found")]
    NoWriterType,
}

/// The error of a probe of `function` that could not be planned.
fn planned(function: &'static str) -> impl Fn(PlanError) -> PropagateError {
    move |source| PropagateError::Plan {
        function,
        source: Box::new(source),
    }
}

/// Plans propagation in `bin`, or says why it cannot be done there.
pub fn plan(bin: &Binary) -> Result<PropagatePlan, PropagateError> {
    if !bin.is_go() {
        return Err(PropagateError::NotGo);
    }
    let data = bin.elf.data();
    if data.get(16..18) != Some(&[2, 0]) {
        return Err(PropagateError::PositionIndependent);
    }
    let probe = Probe {
        symbol: ROUND_TRIP.into(),
        signature: Some(
            "func(t *http.Transport, req *http.Request) (*http.Response, error)".into(),
        ),
        // Its RET sites: the request is forgotten when the round trip returns.
        latency: true,
        ..Default::default()
    };
    let out = plan_probe(bin, &probe, 0).map_err(|e| match bin.find_function(ROUND_TRIP) {
        Err(_) => PropagateError::NoClientRequests,
        Ok(_) => planned(ROUND_TRIP)(e),
    })?;
    match out.entry_captures.as_slice() {
        [c] if c.bpf.kind == abi::CAP_HEADER => {}
        _ => {
            return Err(PropagateError::UnknownHeaderLayout {
                go_version: bin
                    .go_version()
                    .unwrap_or("an unknown Go release")
                    .to_string(),
            })
        }
    }
    // Uprobes on its RETs (engine/propagate.rs attaches them so): a Go function's returns.
    if !matches!(out.returns, Returns::RetSites(_)) {
        return Err(PropagateError::NoReturnSites);
    }
    // The connection's writer, as the type data of this binary lays persistConn out; the
    // request is only a word here.
    let conn = plan_probe(
        bin,
        &Probe {
            symbol: CONN_ROUND_TRIP.into(),
            signature: Some(
                "func(pc *http.persistConn, req uintptr) (*http.Response, error)".into(),
            ),
            capture: vec!["pc.bw".into()],
            ..Default::default()
        },
        0,
    )
    .map_err(planned(CONN_ROUND_TRIP))?;
    match conn.entry_captures.as_slice() {
        [c] if c.bpf.kind == abi::CAP_WORD && c.bpf.size == 8 => {}
        _ => return Err(PropagateError::WriterNotPointer),
    }
    let write = plan_probe(
        bin,
        &Probe {
            symbol: WRITE_SUBSET.into(),
            ..Default::default()
        },
        0,
    )
    .map_err(planned(WRITE_SUBSET))?;
    let writer_type = bin
        .type_descriptor("*bufio.Writer")
        .ok_or(PropagateError::NoWriterType)?;
    Ok(PropagatePlan {
        out,
        conn,
        write_offset: write.entry_offset,
        writer_type,
    })
}
