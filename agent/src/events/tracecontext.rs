//! W3C trace context (<https://www.w3.org/TR/trace-context/>): the `traceparent` header a
//! caller sends, `00-<trace id: 32 hex>-<parent span id: 16 hex>-<flags: 2 hex>`.

/// The caller's span, from an incoming `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    pub trace_id: u128,
    pub span_id: u64,
}

/// Parses a `traceparent` value; None for anything the specification says to ignore: a
/// wrong length or character, version `ff`, an all-zero trace or span id, or a version-00
/// header with more after it. Upper-case hex is invalid too.
pub fn parse_traceparent(s: &str) -> Option<Remote> {
    let b = s.trim_matches(|c| c == ' ' || c == '\t').as_bytes();
    if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return None;
    }
    let hex = |part: &[u8]| -> Option<u128> {
        part.iter().try_fold(0u128, |acc, &c| {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                _ => return None,
            };
            Some(acc << 4 | d as u128)
        })
    };
    let version = hex(&b[0..2])?;
    hex(&b[53..55])?;
    if version == 0xff || (version == 0 && b.len() != 55) || (b.len() > 55 && b[55] != b'-') {
        return None;
    }
    let trace_id = hex(&b[3..35])?;
    let span_id = hex(&b[36..52])? as u64;
    (trace_id != 0 && span_id != 0).then_some(Remote { trace_id, span_id })
}

/// The `traceparent` a callee of span `span_id` in trace `trace_id` receives (sampled).
pub fn format_traceparent(trace_id: u128, span_id: u64) -> String {
    format!("00-{trace_id:032x}-{span_id:016x}-01")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_headers_parse_and_round_trip() {
        let h = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let r = parse_traceparent(h).expect("valid");
        assert_eq!(r.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(r.span_id, 0x00f067aa0ba902b7);
        assert_eq!(format_traceparent(r.trace_id, r.span_id), h);
        // A later version may carry more fields; flags other than sampled are kept out.
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-ever";
        assert_eq!(parse_traceparent(later), Some(r));
    }

    #[test]
    fn invalid_headers_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad:?}");
        }
    }
}
