//! Warnings logged when something happens, but at most once per period: a dead collector
//! fails every export, and one line per failure would flood the log.

use std::time::{Duration, Instant};

/// The period of export warnings.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct LogLimiter {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(n)` when a warning may be logged now, `n` being how many were held back since
    /// the last one; `None` (and one more held back) otherwise.
    pub fn allow(&mut self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.duration_since(t) < self.every => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }

    /// Warnings held back since the last one logged.
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }
}

/// ` (N similar warnings not logged in the last ...)`, or nothing.
pub fn suppressed_note(n: u64, every: Duration) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(
            " ({n} similar warning{} not logged in the last {}s)",
            if n == 1 { "" } else { "s" },
            every.as_secs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_period_with_the_count_of_the_others() {
        let mut l = LogLimiter::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(l.allow_at(t0), Some(0));
        assert_eq!(l.allow_at(t0 + Duration::from_secs(1)), None);
        assert_eq!(l.allow_at(t0 + Duration::from_secs(9)), None);
        assert_eq!(l.suppressed(), 2);
        assert_eq!(l.allow_at(t0 + Duration::from_secs(10)), Some(2));
        assert_eq!(l.suppressed(), 0);
        assert_eq!(
            suppressed_note(2, Duration::from_secs(10)),
            " (2 similar warnings not logged in the last 10s)"
        );
        assert_eq!(suppressed_note(0, Duration::from_secs(10)), "");
    }
}
