//! The agent's footprint sampled over time (memory, fds, threads, uprobe links) and its
//! slopes per hour.

use gprobe_e2e::footprint::{bpf_objects, fds, rss_anon, slope, status_field, threads};
use std::time::Instant;

/// One sample of the agent, `t` seconds into the run.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub t: f64,
    pub rss_anon: u64,
    pub rss: u64,
    pub fds: usize,
    pub threads: u64,
    pub links: usize,
}

pub fn sample(pid: u32, t0: Instant) -> Sample {
    Sample {
        t: t0.elapsed().as_secs_f64(),
        rss_anon: rss_anon(pid),
        rss: status_field(pid, "VmRSS").unwrap_or(0) * 1024,
        fds: fds(pid),
        threads: threads(pid),
        links: bpf_objects(pid).uprobe_links,
    }
}

pub fn per_hour(samples: &[Sample], f: impl Fn(&Sample) -> f64) -> f64 {
    let xs: Vec<f64> = samples.iter().map(|s| s.t / 3600.0).collect();
    let ys: Vec<f64> = samples.iter().map(f).collect();
    slope(&xs, &ys)
}
