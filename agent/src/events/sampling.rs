//! A probe's `sample:`: which of the calls that passed its `when:` are kept, decided by
//! trace id as OpenTelemetry's TraceIdRatioBased sampler decides (so the same request is
//! kept or left out alike in every service that samples at the same ratio), except in
//! a trace that came in with a `traceparent`, whose sampled flag decides for every call
//! of that trace here.

use std::collections::HashMap;

use super::call::CallRecord;
use super::value::{Value, ValueKind};

/// Traces whose incoming flag is remembered at most (then forgotten, all at once: a trace
/// seen again after that is decided by its id).
const MAX_REMEMBERED: usize = 65_536;

#[derive(Debug, Default)]
pub struct Sampler {
    /// Traces that came in with a `traceparent`: whether it said sampled.
    remote: HashMap<u128, bool>,
}

impl Sampler {
    /// Notes the incoming `traceparent` of a probe that samples (its hidden capture's
    /// text, among `values`), before the capture is taken out of them.
    pub fn note_incoming(&mut self, values: &[Value], capture: &str) {
        let Some(text) = values
            .iter()
            .find(|v| &*v.name == capture)
            .and_then(|v| match &v.kind {
                ValueKind::Str { text, .. } => Some(text),
                _ => None,
            })
        else {
            return;
        };
        if let Some((trace, sampled)) = trace_and_flag(text) {
            if self.remote.len() >= MAX_REMEMBERED {
                self.remote.clear();
            }
            self.remote.insert(trace, sampled);
        }
    }

    /// Whether `rec` is kept: always, without `sample:`.
    pub fn keeps(&self, rec: &CallRecord) -> bool {
        let Some(ratio) = rec.probe.sample else {
            return true;
        };
        let trace = rec.span.trace_id;
        match self.remote.get(&trace) {
            Some(sampled) => *sampled,
            None => ratio_keeps(trace, ratio),
        }
    }
}

/// OpenTelemetry's TraceIdRatioBased decision: the trace id's low 8 bytes (big-endian, as
/// in its hex form), shifted right once, below `ratio` * 2^63.
pub fn ratio_keeps(trace_id: u128, ratio: f64) -> bool {
    match crate::plan::sample_bound(ratio) {
        0 => ratio >= 1.0 || ratio.is_nan(),
        bound => ((trace_id as u64) >> 1) < bound,
    }
}

/// The trace id and the sampled flag of a `traceparent` value (`00-<32>-<16>-<2>`).
fn trace_and_flag(text: &str) -> Option<(u128, bool)> {
    let remote = super::tracecontext::parse_traceparent(text)?;
    let flags = text.trim().get(53..55)?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some((remote.trace_id, flags & 1 == 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_keeps_the_share_of_trace_ids_it_names_and_is_the_same_for_the_same_id() {
        // Trace ids as a generator of 128 random bits gives them (a fixed LCG here).
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut kept = 0;
        for _ in 0..100_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = u128::from(x) | (u128::from(x.rotate_left(17)) << 64);
            if ratio_keeps(id, 0.1) {
                kept += 1;
            }
            assert_eq!(ratio_keeps(id, 0.1), ratio_keeps(id, 0.1));
        }
        assert!(
            (9_500..=10_500).contains(&kept),
            "kept {kept} of 100000 at 0.1"
        );
        assert!(ratio_keeps(u128::MAX, 1.0));
        // The low 8 bytes decide, as OpenTelemetry's sampler reads them.
        assert!(ratio_keeps(
            0xffff_ffff_ffff_ffff_0000_0000_0000_0001,
            0.001
        ));
        assert!(!ratio_keeps(0x0000_0000_0000_0000_ffff_ffff_ffff_fff0, 0.5));
    }

    #[test]
    fn an_incoming_traceparent_decides_by_its_sampled_flag() {
        let kept = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let dropped = "00-4bf92f3577b34da6a3ce929d0e0e4737-00f067aa0ba902b7-00";
        assert_eq!(
            trace_and_flag(kept),
            Some((0x4bf92f3577b34da6a3ce929d0e0e4736, true))
        );
        assert_eq!(
            trace_and_flag(dropped),
            Some((0x4bf92f3577b34da6a3ce929d0e0e4737, false))
        );
        assert_eq!(trace_and_flag("00-zz"), None);
    }
}
