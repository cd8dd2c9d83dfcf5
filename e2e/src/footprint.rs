//! What a running gprobe holds, read from /proc and the kernel: its anonymous memory, fds,
//! threads, and the BPF objects (links, programs, maps) its fds refer to; and whether
//! those objects are still in the kernel after it exited.

use std::collections::BTreeSet;
use std::process::Command;

/// One line of /proc/PID/status (`RssAnon`, `Threads`, ...) as a number (kB for sizes).
pub fn status_field(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Anonymous resident memory (heap, stacks, anonymous mappings) in bytes.
pub fn rss_anon(pid: u32) -> u64 {
    status_field(pid, "RssAnon").expect("RssAnon in /proc/PID/status") * 1024
}

pub fn threads(pid: u32) -> u64 {
    status_field(pid, "Threads").expect("Threads in /proc/PID/status")
}

pub fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// The BPF objects of one process's fds, by kernel id.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BpfObjects {
    pub links: BTreeSet<u64>,
    /// Of `links`, the uprobe links (uprobe_multi, or perf-event ones).
    pub uprobe_links: usize,
    pub progs: BTreeSet<u64>,
    pub maps: BTreeSet<u64>,
}

impl BpfObjects {
    pub fn is_empty(&self) -> bool {
        self.links.is_empty() && self.progs.is_empty() && self.maps.is_empty()
    }
}

/// The BPF links, programs and maps that `pid`'s fds hold (from /proc/PID/fdinfo).
pub fn bpf_objects(pid: u32) -> BpfObjects {
    let mut out = BpfObjects::default();
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let field = |name: &str| -> Option<u64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        };
        if let Some(id) = field("link_id:") {
            out.links.insert(id);
            // uprobe_multi, or perf_event (a uprobe per perf event, where the kernel has no
            // uprobe_multi); the three tracepoints are raw_tracepoint links.
            if text.lines().any(|l| {
                l.starts_with("link_type:") && (l.contains("uprobe") || l.contains("perf_event"))
            }) {
                out.uprobe_links += 1;
            }
            // A link's program is held by the link, not by an fd of its own.
            if let Some(p) = field("prog_id:") {
                out.progs.insert(p);
            }
        } else if let Some(id) = field("prog_id:") {
            out.progs.insert(id);
        } else if let Some(id) = field("map_id:") {
            out.maps.insert(id);
        }
    }
    out
}

/// The ids of every BPF link, program and map in the kernel now (`bpftool`).
pub fn kernel_bpf_objects() -> BpfObjects {
    let ids = |kind: &str| -> BTreeSet<u64> {
        let out = Command::new("bpftool")
            .args(["-j", kind, "show"])
            .output()
            .unwrap_or_else(|e| {
                panic!("bpftool {kind} show: {e} (scripts/setup.sh --test installs bpftool)")
            });
        assert!(
            out.status.success(),
            "bpftool {kind} show: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v.as_array()
            .map(|a| a.iter().filter_map(|o| o["id"].as_u64()).collect())
            .unwrap_or_default()
    };
    BpfObjects {
        links: ids("link"),
        uprobe_links: 0,
        progs: ids("prog"),
        maps: ids("map"),
    }
}

/// Of `mine` (a gprobe's objects), those the kernel still has.
pub fn still_in_kernel(mine: &BpfObjects) -> BpfObjects {
    let now = kernel_bpf_objects();
    BpfObjects {
        links: mine.links.intersection(&now.links).copied().collect(),
        uprobe_links: 0,
        progs: mine.progs.intersection(&now.progs).copied().collect(),
        maps: mine.maps.intersection(&now.maps).copied().collect(),
    }
}

/// Least-squares slope of `ys` over `xs`.
pub fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let cov: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    if var == 0.0 {
        0.0
    } else {
        cov / var
    }
}
