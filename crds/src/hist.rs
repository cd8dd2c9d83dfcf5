//! Log2 histograms of call durations, and their rows as bpftrace's `hist()` prints them:
//!
//! ```text
//! [256K, 512K)          12 |@@@                                                 |
//! [512K, 1M)           190 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
//! [1M, 2M)              31 |@@@@@@@@                                            |
//! ```
//!
//! Bucket `i` holds the durations in [2^i, 2^(i+1)) nanoseconds (bucket 0 also holds 0 ns),
//! as the kernel side counts the calls that `when:` left out. A row's bounds are those
//! nanoseconds, written as bpftrace writes a power of two: `K`, `M`, `G` are 2^10, 2^20,
//! 2^30, so `[1M, 2M)` is 1.05 ms to 2.10 ms (read K as microseconds, M as milliseconds and
//! G as seconds, each 2.4 to 7.4% longer). The label is 16 characters wide, the count 8,
//! and the bar up to 52 `@`, scaled to the largest bucket; rows run from the first bucket
//! with a call to the last, empty ones between them included.
//!
//! In this crate so that `gprobe` and `kubectl gprobe` print the same rows.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt::Write;

/// Buckets of a histogram: one per power of two of a u64.
pub const BUCKETS: usize = 64;
/// The widest bar, as bpftrace draws it.
const BAR_WIDTH: usize = 52;

/// Call counts by floor(log2(duration in ns)).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Log2Hist {
    counts: [u64; BUCKETS],
}

impl Default for Log2Hist {
    fn default() -> Self {
        Self {
            counts: [0; BUCKETS],
        }
    }
}

impl std::fmt::Debug for Log2Hist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.nonzero()).finish()
    }
}

impl Log2Hist {
    /// The bucket of a duration of `ns` nanoseconds.
    pub fn bucket_of(ns: u64) -> usize {
        ns.max(1).ilog2() as usize
    }

    /// A histogram with these counts per bucket (at most [`BUCKETS`]; more are refused).
    pub fn from_counts(counts: &[u64]) -> Option<Self> {
        let mut h = Self::default();
        h.counts.get_mut(..counts.len())?.copy_from_slice(counts);
        Some(h)
    }

    /// Counts one call of `ns` nanoseconds.
    pub fn record(&mut self, ns: u64) {
        self.add(Self::bucket_of(ns), 1);
    }

    /// Adds `n` calls to bucket `i` (ignored past the last bucket).
    pub fn add(&mut self, i: usize, n: u64) {
        if let Some(c) = self.counts.get_mut(i) {
            *c = c.saturating_add(n);
        }
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Log2Hist) {
        for (i, n) in other.nonzero() {
            self.add(i, n);
        }
    }

    /// The counts, bucket by bucket.
    pub fn counts(&self) -> &[u64; BUCKETS] {
        &self.counts
    }

    /// The calls counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, n| a.saturating_add(*n))
    }

    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|n| *n == 0)
    }

    /// The buckets that hold calls, in order: (bucket, count).
    pub fn nonzero(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| (i, *n))
    }

    /// Bucket `i`'s label, as bpftrace writes it: `[1K, 2K)`; bucket 0 is `[0, 2)`.
    pub fn label(i: usize) -> String {
        let lo = if i == 0 {
            "0".to_string()
        } else {
            power_label(i as u32)
        };
        let hi = if i + 1 >= BUCKETS {
            // 2^64 does not fit a u64: bpftrace's own label for it.
            "16E".to_string()
        } else {
            power_label(i as u32 + 1)
        };
        format!("[{lo}, {hi})")
    }

    /// The rows, bpftrace's layout, each ending in a newline; empty for no calls.
    pub fn rows(&self) -> String {
        let mut out = String::new();
        let (Some(first), Some(last)) = (
            self.counts.iter().position(|n| *n > 0),
            self.counts.iter().rposition(|n| *n > 0),
        ) else {
            return out;
        };
        let max = self.counts.iter().copied().max().unwrap_or(1).max(1);
        for i in first..=last {
            let n = self.counts[i];
            let bar = (n as f64 / max as f64 * BAR_WIDTH as f64) as usize;
            let _ = writeln!(
                out,
                "{:<16}{:>8} |{:<width$}|",
                Self::label(i),
                n,
                "@".repeat(bar.min(BAR_WIDTH)),
                width = BAR_WIDTH
            );
        }
        out
    }
}

impl Log2Hist {
    /// One probe's histogram as gprobe prints it: the heading `@ns[NAME]: N calls`, a line
    /// saying how many of them `when:` or `sample:` left out (when some were), one saying
    /// how many calls are not in it (`not_counted`: throttled or lost, which have no
    /// duration), the rows, and an empty line (as bpftrace ends each map).
    pub fn block(&self, name: &str, left_out: u64, not_counted: u64) -> String {
        let mut out = format!("@ns[{name}]: ");
        match self.total() {
            0 => out.push_str("no call has returned yet\n"),
            1 => out.push_str("1 call\n"),
            n => {
                let _ = writeln!(out, "{n} calls");
            }
        }
        if left_out > 0 {
            // On a line of its own: the heading stays as bpftrace's.
            let _ = writeln!(
                out,
                "  ({left_out} of them left out by when: or sample:, counted here)"
            );
        }
        if not_counted > 0 {
            let _ = writeln!(
                out,
                "  ({not_counted} more throttled or lost, without a duration: not counted)"
            );
        }
        out.push_str(&self.rows());
        out.push('\n');
        out
    }
}

/// 2^p as bpftrace labels it: the largest power of 1024 as a suffix (`1K`, `512M`).
fn power_label(p: u32) -> String {
    let decade = (p / 10) as usize;
    let suffix = ["", "K", "M", "G", "T", "P", "E"][decade.min(6)];
    format!("{}{suffix}", 1u64 << (p - 10 * decade as u32))
}

/// As JSON: the buckets that hold calls, `[[bucket, count], ...]` (bucket i is
/// [2^i, 2^(i+1)) ns).
impl Serialize for Log2Hist {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.nonzero().map(|(i, n)| [i as u64, n]))
    }
}

impl<'de> Deserialize<'de> for Log2Hist {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs: Vec<[u64; 2]> = Vec::deserialize(d)?;
        let mut h = Log2Hist::default();
        for [i, n] in pairs {
            if i >= BUCKETS as u64 {
                return Err(serde::de::Error::custom(format!(
                    "bucket {i} is past the last one ({})",
                    BUCKETS - 1
                )));
            }
            h.add(i as usize, n);
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_of_nanoseconds() {
        assert_eq!(Log2Hist::bucket_of(0), 0);
        assert_eq!(Log2Hist::bucket_of(1), 0);
        assert_eq!(Log2Hist::bucket_of(2), 1);
        assert_eq!(Log2Hist::bucket_of(1023), 9);
        assert_eq!(Log2Hist::bucket_of(1024), 10);
        assert_eq!(Log2Hist::bucket_of(1_000_000), 19);
        assert_eq!(Log2Hist::bucket_of(u64::MAX), 63);
    }

    #[test]
    fn labels_are_bpftraces() {
        assert_eq!(Log2Hist::label(0), "[0, 2)");
        assert_eq!(Log2Hist::label(1), "[2, 4)");
        assert_eq!(Log2Hist::label(9), "[512, 1K)");
        assert_eq!(Log2Hist::label(10), "[1K, 2K)");
        assert_eq!(Log2Hist::label(19), "[512K, 1M)");
        assert_eq!(Log2Hist::label(20), "[1M, 2M)");
        assert_eq!(Log2Hist::label(30), "[1G, 2G)");
        assert_eq!(Log2Hist::label(62), "[4E, 8E)");
        assert_eq!(Log2Hist::label(63), "[8E, 16E)");
    }

    #[test]
    fn rows_have_bpftraces_layout() {
        let mut h = Log2Hist::default();
        for _ in 0..3 {
            h.record(300_000);
        }
        for _ in 0..12 {
            h.record(600_000);
        }
        h.record(2_500_000);
        assert_eq!(h.total(), 16);
        let rows = h.rows();
        let expected = [
            "[256K, 512K)           3 |@@@@@@@@@@@@@                                       |",
            "[512K, 1M)            12 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|",
            "[1M, 2M)               0 |                                                    |",
            "[2M, 4M)               1 |@@@@                                                |",
        ];
        assert_eq!(rows.lines().collect::<Vec<_>>(), expected, "\n{rows}");
        assert!(rows.ends_with("|\n"));
        assert_eq!(Log2Hist::default().rows(), "");
    }

    #[test]
    fn a_block_is_a_heading_and_the_rows() {
        let mut h = Log2Hist::default();
        h.record(1500);
        h.record(1600);
        assert_eq!(
            h.block("main.f", 1, 0),
            "@ns[main.f]: 2 calls\n  (1 of them left out by when: or sample:, counted here)\n\
             [1K, 2K)               2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\n"
        );
        assert_eq!(
            Log2Hist::default().block("x", 0, 3),
            "@ns[x]: no call has returned yet\n  (3 more throttled or lost, without a duration: \
             not counted)\n\n"
        );
    }

    #[test]
    fn merging_adds_and_json_keeps_the_buckets() {
        let mut a = Log2Hist::default();
        a.record(1500);
        let b = Log2Hist::from_counts(&[0, 0, 5]).unwrap();
        a.merge(&b);
        assert_eq!(a.total(), 6);
        assert_eq!(a.nonzero().collect::<Vec<_>>(), [(2, 5), (10, 1)]);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, "[[2,5],[10,1]]");
        assert_eq!(serde_json::from_str::<Log2Hist>(&json).unwrap(), a);
        assert!(serde_json::from_str::<Log2Hist>("[[64,1]]").is_err());
        assert!(Log2Hist::from_counts(&[1; BUCKETS + 1]).is_none());
        let mut full = Log2Hist::default();
        full.add(3, u64::MAX);
        full.add(3, 1);
        assert_eq!(full.counts()[3], u64::MAX);
        full.add(BUCKETS, 1);
        assert_eq!(full.total(), u64::MAX);
    }
}
