//! Hands the memory the allocator holds free back to the kernel. glibc's malloc keeps an
//! arena per busy thread (up to 8 per core) and returns freed memory only from the top of
//! each heap; under process churn the agent's busiest arenas grew in steps of 1-2 MiB
//! whose pages were free but never returned (the hour-long soak, `bench/soak.sh`, in
//! BENCHMARKS.md). `malloc_trim(0)` also gives back whole free pages inside every arena
//! (madvise), so resident memory follows what is live.

use std::time::{Duration, Instant};

/// How often: a trim walks every arena under its lock (well under a millisecond for the
/// agent's few MiB), so rarely enough that it never shows on the event path.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Trims at most once per [`TRIM_EVERY`].
#[derive(Debug)]
pub struct Trimmer {
    next: Instant,
}

impl Default for Trimmer {
    fn default() -> Self {
        Trimmer {
            next: Instant::now() + TRIM_EVERY,
        }
    }
}

impl Trimmer {
    /// Trims if the last trim was [`TRIM_EVERY`] ago. True when it trimmed.
    pub fn maybe_trim(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now + TRIM_EVERY;
        release_free_memory();
        true
    }
}

/// Returns the allocator's free pages to the kernel (glibc only; a no-op elsewhere).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers and may be called from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_anon_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = s.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn free_pages_in_the_middle_of_a_heap_go_back_to_the_kernel() {
        // 64 MiB in 4 KiB blocks, with one block kept at the top so that the heap cannot
        // shrink from its end: freeing the rest leaves free pages that only a trim returns.
        let mut blocks: Vec<Vec<u8>> = (0..16384).map(|i| vec![i as u8; 4000]).collect();
        let top = blocks.pop().unwrap();
        let before = rss_anon_kib();
        drop(blocks);
        release_free_memory();
        let after = rss_anon_kib();
        assert!(
            before.saturating_sub(after) > 32 * 1024,
            "RssAnon {before} KiB -> {after} KiB after freeing 64 MiB and trimming"
        );
        drop(top);
    }

    #[test]
    fn trims_at_most_once_per_period() {
        let mut t = Trimmer::default();
        let now = Instant::now();
        assert!(!t.maybe_trim(now));
        assert!(t.maybe_trim(now + TRIM_EVERY));
        assert!(!t.maybe_trim(now + TRIM_EVERY + Duration::from_secs(1)));
        assert!(t.maybe_trim(now + TRIM_EVERY * 2));
    }
}
