//! Human durations for flags: `500ms`, `10s`, `2m`, `1h`, `1m30s`.

use std::time::Duration;

/// A duration flag that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: use e.g. 500ms, 10s, 2m, 1h30m")]
pub struct InvalidDuration {
    pub input: String,
}

/// A size flag that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: use e.g. 4096, 256KiB, 8MiB")]
pub struct InvalidSize {
    pub input: String,
}

pub fn parse_duration(s: &str) -> Result<Duration, InvalidDuration> {
    let err = || InvalidDuration {
        input: s.to_string(),
    };
    let s = s.trim();
    if s.is_empty() {
        return Err(err());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(err());
        }
        let n: f64 = rest[..digits].parse().map_err(|_| err())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "ns" => n / 1e9,
            "us" | "µs" => n / 1e6,
            "ms" => n / 1e3,
            "s" => n,
            "m" => n * 60.0,
            "h" => n * 3600.0,
            _ => return Err(err()),
        };
        rest = &rest[unit_len..];
        total += Duration::from_secs_f64(secs);
    }
    Ok(total)
}

/// Sizes for flags: `8MiB`, `256KiB`, `4096`.
pub fn parse_size(s: &str) -> Result<u64, InvalidSize> {
    let err = || InvalidSize {
        input: s.to_string(),
    };
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..digits].parse().map_err(|_| err())?;
    let mult = match &s[digits..] {
        "" | "B" => 1,
        "KiB" | "K" | "k" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        _ => return Err(err()),
    };
    Ok(n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("3 days").is_err());
        assert_eq!(parse_size("8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
    }
}
