//! The operator's Prometheus metrics, kept in atomics and written out in the text
//! exposition format by hand (three metrics do not need a metrics library).

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the reconcile duration histogram, in seconds.
pub const BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

#[derive(Debug, Default)]
pub struct Metrics {
    reconciliations: AtomicU64,
    /// Failures by error kind (`Error::metric_label`), in first-seen order.
    failures: Mutex<Vec<(&'static str, u64)>>,
    /// Observations at or below each bound of [`BUCKETS`] (not cumulative here).
    buckets: [AtomicU64; BUCKETS.len()],
    duration_count: AtomicU64,
    duration_sum_micros: AtomicU64,
    leader: AtomicBool,
}

impl Metrics {
    /// Counts one reconciliation that took `took`.
    pub fn reconciled(&self, took: Duration) {
        self.reconciliations.fetch_add(1, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.duration_count.fetch_add(1, Ordering::Relaxed);
        self.duration_sum_micros.fetch_add(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Counts one failed reconciliation, by error kind.
    pub fn failed(&self, kind: &'static str) {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        match f.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => f.push((kind, 1)),
        }
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.store(leading, Ordering::Relaxed);
    }

    pub fn reconciliations(&self) -> u64 {
        self.reconciliations.load(Ordering::Relaxed)
    }

    pub fn failures(&self, kind: &str) -> u64 {
        let f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        f.iter().find(|(k, _)| *k == kind).map_or(0, |(_, n)| *n)
    }

    /// The Prometheus text exposition (version 0.0.4) of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP gprobe_operator_reconciliations_total ProbeSpec reconciliations run."
        );
        let _ = writeln!(out, "# TYPE gprobe_operator_reconciliations_total counter");
        let _ = writeln!(
            out,
            "gprobe_operator_reconciliations_total {}",
            self.reconciliations()
        );

        let _ = writeln!(
            out,
            "# HELP gprobe_operator_reconcile_failures_total ProbeSpec \
            reconciliations that failed, by error."
        );
        let _ = writeln!(
            out,
            "# TYPE gprobe_operator_reconcile_failures_total counter"
        );
        let failures = self
            .failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if failures.is_empty() {
            let _ = writeln!(out, "gprobe_operator_reconcile_failures_total 0");
        }
        for (kind, n) in failures {
            let _ = writeln!(
                out,
                "gprobe_operator_reconcile_failures_total{{error=\"{kind}\"}} {n}"
            );
        }

        let name = "gprobe_operator_reconcile_duration_seconds";
        let _ = writeln!(out, "# HELP {name} Time one ProbeSpec reconciliation took.");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.duration_count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.duration_sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {count}");

        let _ = writeln!(
            out,
            "# HELP gprobe_operator_leader 1 while this replica runs the controller."
        );
        let _ = writeln!(out, "# TYPE gprobe_operator_leader gauge");
        let _ = writeln!(
            out,
            "gprobe_operator_leader {}",
            u8::from(self.leader.load(Ordering::Relaxed))
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_counts_and_buckets() {
        let m = Metrics::default();
        m.reconciled(Duration::from_millis(3));
        m.reconciled(Duration::from_millis(30));
        m.reconciled(Duration::from_secs(10));
        m.failed("patch_status");
        m.failed("patch_status");
        m.set_leader(true);
        let text = m.render();
        for line in [
            "gprobe_operator_reconciliations_total 3",
            "gprobe_operator_reconcile_failures_total{error=\"patch_status\"} 2",
            "gprobe_operator_reconcile_duration_seconds_bucket{le=\"0.005\"} 1",
            "gprobe_operator_reconcile_duration_seconds_bucket{le=\"0.05\"} 2",
            "gprobe_operator_reconcile_duration_seconds_bucket{le=\"5\"} 2",
            "gprobe_operator_reconcile_duration_seconds_bucket{le=\"+Inf\"} 3",
            "gprobe_operator_reconcile_duration_seconds_sum 10.033",
            "gprobe_operator_reconcile_duration_seconds_count 3",
            "gprobe_operator_leader 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
    }
}
