//! Capture planning for Go functions: each capture's root looked up among the parameters
//! and results (`params.rs`: from the probe's signature or DWARF, placed under the register
//! ABI), the BPF read of each captured value (`types/path.rs`: names, field paths and
//! lengths alike), and the hidden captures of trace context (an incoming `traceparent`, a
//! propagating probe's span).

use gprobe_crds::gopath::parse_go_capture;
use gprobe_crds::signature::ValueRef;
use gprobe_crds::Probe;

use super::params::{types, Typed};
use super::types::{path, TypeRef, TypeStore};
use crate::abi::{self, GP_MAX_CAPTURES};
use crate::gosym::go_package;
use crate::plan::TypeNames;
use crate::plan::{
    CapturePlan, Captures, Decode, Pairing, PlanWarning, ProbePlan, Returns, Role, SignatureSource,
    SiteCosts,
};
use crate::resolve::error::PlanError;
use crate::resolve::sizes::check_sizes;
use crate::resolve::{Binary, FuncInfo};

/// Plans a probe on the Go function `func`: entry after the stack check (or on its jump),
/// returns, when needed, uprobes on every RET (never a uretprobe: see `c/mod.rs`).
pub(crate) fn plan(
    bin: &Binary,
    probe: &Probe,
    func: FuncInfo,
    max_string_bytes: u32,
) -> Result<ProbePlan, PlanError> {
    let symbol = probe.symbol.clone();
    let sites = bin.probe_sites(&func)?;
    let mut warnings = Vec::new();
    let mut caps = plan_captures(bin, &func, probe, max_string_bytes, &mut warnings)?;
    // The hidden captures come after the spec's and must fit with them: the incoming
    // traceparent is given up (said) where they leave no room; a propagating probe's span
    // must be recorded.
    if probe.propagate {
        caps.entry.push(span_capture());
    }
    let fits = |entry: &[CapturePlan]| check_sizes(&probe.symbol, [entry]).is_ok();
    if !fits(&caps.entry) {
        if let Some(i) = caps.entry.iter().position(|c| c.decode == Decode::Header) {
            caps.entry.remove(i);
            warnings.push(PlanWarning::NoRoomForTraceparent {
                symbol: probe.symbol.clone(),
            });
        }
    }
    if probe.propagate && !fits(&caps.entry) {
        return Err(PlanError::TooManyCaptures {
            symbol: probe.symbol.clone(),
            name: "the span of propagate: true, recorded as a value".into(),
            max: GP_MAX_CAPTURES - 1,
        });
    }
    let needs_return = probe.latency || !caps.ret.is_empty();
    let type_names = caps
        .entry
        .iter()
        .chain(&caps.ret)
        .any(|c| c.decode.shows_type())
        .then(|| TypeNames::of(bin));
    if needs_return && sites.ret_offsets.is_empty() {
        return Err(PlanError::NoReturn { symbol });
    }
    Ok(ProbePlan {
        symbol,
        entry_offset: sites.entry.offset,
        entry_jcc: sites.entry.jcc,
        costs: SiteCosts {
            entry: sites.entry.class,
            ret: needs_return.then_some(sites.ret_class),
        },
        returns: if needs_return {
            Returns::ret_sites(sites.ret_offsets)
        } else {
            Returns::None
        },
        entry_captures: caps.entry,
        return_captures: caps.ret,
        signature_source: caps.source.unwrap_or(SignatureSource::None),
        warnings,
        extra_entry_sites: Vec::new(),
        ref_ctr_offset: 0,
        pairing: Pairing::Goroutine,
        type_names,
        role: if probe.propagate {
            Role::Propagating
        } else {
            Role::Traced
        },
        filter: None,
        sample_bound: 0,
    })
}

/// Plans the captures of `probe` on the Go function `func`; adds what the user should know
/// to `warnings`.
pub(crate) fn plan_captures(
    bin: &Binary,
    func: &FuncInfo,
    probe: &Probe,
    max_string_bytes: u32,
    warnings: &mut Vec<PlanWarning>,
) -> Result<Captures, PlanError> {
    let symbol = &probe.symbol;
    match bin.inlined_call_sites(&func.name) {
        Ok(0) => {}
        Ok(count) => warnings.push(PlanWarning::InlinedCallSites {
            symbol: symbol.clone(),
            count,
        }),
        // The warning is advice; a binary whose inline trees cannot be read still traces.
        Err(e) => tracing::debug!("{symbol}: inlined call sites not counted: {e}"),
    }
    let mut store = TypeStore::new(bin, go_package(&func.name));
    if probe.capture.is_empty() {
        // Without captures the types are needed only to join the caller's trace: a
        // function whose types are unknown traces as before, without joining.
        let mut caps = Captures::default();
        if let Ok(typed) = types(bin, &mut store, func, probe, &mut Vec::new()) {
            caps.entry
                .extend(trace_context(bin, &mut store, symbol, &typed));
        }
        return Ok(caps);
    }
    let typed = types(bin, &mut store, func, probe, warnings)?;
    let mut caps = Captures {
        source: Some(typed.source),
        ..Default::default()
    };
    for entry in &probe.capture {
        let cap = parse_go_capture(entry).map_err(|source| PlanError::CaptureSyntax {
            symbol: symbol.clone(),
            source,
        })?;
        let (placed, ty, is_result) = match typed.lookup(&cap.root) {
            Some(ValueRef::Param(i)) => (&typed.layout.params[i], typed.param_types[i], false),
            Some(ValueRef::Result(i)) => (&typed.layout.results[i], typed.result_types[i], true),
            None => {
                return Err(match typed.positional(&cap.root) {
                    Some((position, real)) => {
                        PlanError::PositionalName(Box::new(crate::resolve::error::PositionalName {
                            symbol: symbol.clone(),
                            capture: entry.clone(),
                            name: cap.root.clone(),
                            position,
                            real: real.to_string(),
                            described_by: match typed.source {
                                SignatureSource::Dwarf => "DWARF",
                                _ => "the signature",
                            },
                            known: typed.known(),
                        }))
                    }
                    None => PlanError::UnknownCapture {
                        symbol: symbol.clone(),
                        name: entry.clone(),
                        known: typed.known(),
                    },
                })
            }
        };
        let plan = path::plan_capture(
            &mut store,
            symbol,
            entry,
            &cap,
            placed,
            ty,
            max_string_bytes,
        )?;
        if is_result {
            caps.ret.push(plan);
        } else {
            caps.entry.push(plan);
        }
    }
    caps.entry
        .extend(trace_context(bin, &mut store, symbol, &typed));
    Ok(caps)
}

/// The name of the hidden capture that reads a handler's incoming `traceparent`: not a Go
/// expression, so no capture of the spec can have it.
pub const TRACEPARENT_CAPTURE: &str = "(traceparent)";

/// A net/http handler (a function with a `*net/http.Request` parameter) joins the trace of
/// a request that carries a W3C `traceparent`: a hidden capture reads that header from
/// `r.Header` at entry. None where the parameter, the field or the map layout of this Go
/// release is not known for sure: the span then starts its own trace.
fn trace_context(
    bin: &Binary,
    store: &mut TypeStore<'_>,
    symbol: &str,
    typed: &Typed,
) -> Option<CapturePlan> {
    // DWARF names the pointer type itself; a signature's `*http.Request` resolves its
    // element in the binary.
    let is_request = |store: &mut TypeStore<'_>, r: TypeRef| match store.get(r) {
        Ok(t) if t.name == "*net/http.Request" => true,
        Ok(t) => match t.kind {
            super::types::Kind::Pointer(e) => {
                store.get(e).is_ok_and(|e| e.name == "net/http.Request")
            }
            _ => false,
        },
        Err(_) => false,
    };
    let i = (0..typed.params.len()).find(|&i| is_request(store, typed.param_types[i]))?;
    let Some(layout) = bin.go_version().and_then(map_layout) else {
        tracing::debug!(
            "{symbol}: the map layout of {:?} is not known: incoming traceparent not read",
            bin.go_version()
        );
        return None;
    };
    let cap = gprobe_crds::gopath::GoCapture {
        root: typed.params[i].clone(),
        fields: vec!["Header".into()],
        len: false,
    };
    let placed = &typed.layout.params[i];
    match path::plan_capture(
        store,
        symbol,
        "r.Header",
        &cap,
        placed,
        typed.param_types[i],
        0,
    ) {
        Ok(mut plan) if plan.bpf.flags & abi::CAPF_PATH != 0 => {
            plan.name = TRACEPARENT_CAPTURE.into();
            plan.decode = Decode::Header;
            plan.bpf.kind = abi::CAP_HEADER;
            plan.bpf.size = layout;
            plan.bpf.max_len = TRACEPARENT_MAX;
            Some(plan)
        }
        Ok(_) => None,
        Err(e) => {
            tracing::debug!("{symbol}: r.Header not found: {e}");
            None
        }
    }
}

/// The name of the hidden capture of the span a propagating probe's entry opened in BPF.
pub const SPAN_CAPTURE: &str = "(span)";

/// The capture of the span a propagating probe's entry opens (`propagate: true`).
pub(crate) fn span_capture() -> CapturePlan {
    CapturePlan {
        name: SPAN_CAPTURE.into(),
        decode: Decode::Span,
        bpf: crate::abi::GpCapture {
            kind: abi::CAP_SPAN,
            ..Default::default()
        },
    }
}

/// Bytes of a traceparent kept: version 00 is 55; later versions may append fields.
const TRACEPARENT_MAX: u16 = 64;

/// The map layout of the Go release `version` ("go1.24.3", "go1.25.0 X:noswissmap"), from
/// its minor version and experiments; None for a release gprobe does not know (after 1.27).
pub(crate) fn map_layout(version: &str) -> Option<u8> {
    let (release, experiments) = match version.split_once(" X:") {
        Some((r, x)) => (r, x),
        None => (version, ""),
    };
    let minor: u32 = release
        .strip_prefix("go1.")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    let on = |name: &str| experiments.split(',').any(|e| e.trim() == name);
    match minor {
        0..=11 => None,
        12..=23 => Some(abi::MAP_HMAP),
        24..=25 if on("noswissmap") => Some(abi::MAP_HMAP),
        // Go 1.26 removed the old maps: the experiment means nothing gprobe knows.
        26..=27 if on("noswissmap") => None,
        24..=27 if on("mapsplitgroup") => Some(abi::MAP_SWISS_SPLIT),
        24..=27 => Some(abi::MAP_SWISS),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_layouts_follow_the_release_and_its_experiments() {
        for (v, want) in [
            ("go1.19.8", Some(abi::MAP_HMAP)),
            ("go1.23.12", Some(abi::MAP_HMAP)),
            ("go1.24.11", Some(abi::MAP_SWISS)),
            ("go1.25.0 X:noswissmap", Some(abi::MAP_HMAP)),
            ("go1.27.3", Some(abi::MAP_SWISS)),
            ("go1.27.3 X:mapsplitgroup", Some(abi::MAP_SWISS_SPLIT)),
            ("go1.27.3 X:nomapsplitgroup", Some(abi::MAP_SWISS)),
            ("go1.26rc1", Some(abi::MAP_SWISS)),
            // Not known for sure: no traceparent is read.
            ("go1.28.0", None),
            ("go1.26.0 X:noswissmap", None),
            ("devel go1.27-abc", None),
        ] {
            assert_eq!(map_layout(v), want, "{v}");
        }
    }
}
