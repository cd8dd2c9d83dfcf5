//! Which instructions this kernel emulates under a uprobe, and what a hit costs: measured
//! once at start on gprobe's own code (resolve/sites.rs uses the answer to place probes).
//!
//! Four tiny functions below each hold one instruction of a kind gprobe may choose as a
//! site: `push rbp` and `nop` (emulated by recent kernels), `cmp` (single-stepped by every
//! kernel) and a conditional jump (emulated by every kernel with uprobes, but measured, not
//! assumed). A uprobe with gprobe's program (under a cookie that names no configuration, so
//! the program returns at once) is placed on each, in gprobe's own process, and each
//! function called a few thousand times, unprobed then probed: the best of a few rounds, so
//! that a busy CPU does not make an emulated site look single-stepped. A site is emulated
//! when a hit costs under a third of the `cmp`'s: the two differ about fivefold to tenfold.

use super::multi::MultiProgram;
use super::object::{uprobe_object, UPROBE_PROG};
use super::perf::{self, ProbePoint};
use super::slots::Link;
use crate::resolve::sites::KernelSites;
use aya::programs::UProbe;
use aya::EbpfLoader;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::Instant;

// One function per kind of instruction, each probed on the instruction named.
std::arch::global_asm!(
    ".pushsection .text.gprobe_site_test,\"ax\",@progbits",
    ".p2align 4",
    ".globl gprobe_site_cmp",
    "gprobe_site_cmp:",
    "cmp rdi, rsi",
    "ret",
    ".p2align 4",
    ".globl gprobe_site_jcc",
    "gprobe_site_jcc:",
    "cmp rdi, rsi",
    "jbe 2f",
    "2:",
    "ret",
    ".p2align 4",
    ".globl gprobe_site_push",
    "gprobe_site_push:",
    "push rbp",
    "pop rbp",
    "ret",
    ".p2align 4",
    ".globl gprobe_site_nop",
    "gprobe_site_nop:",
    "nop",
    "ret",
    ".popsection",
);

extern "C" {
    fn gprobe_site_cmp(a: u64, b: u64);
    fn gprobe_site_jcc(a: u64, b: u64);
    fn gprobe_site_push(a: u64, b: u64);
    fn gprobe_site_nop(a: u64, b: u64);
}

type TestFn = unsafe extern "C" fn(u64, u64);

/// The functions, with the offset of the probed instruction in each: `cmp` (single-stepped
/// everywhere, the reference), the conditional jump, `push`, `nop`.
fn test_sites() -> [(TestFn, u64); 4] {
    [
        (gprobe_site_cmp as TestFn, 0),
        (gprobe_site_jcc as TestFn, 3),
        (gprobe_site_push as TestFn, 0),
        (gprobe_site_nop as TestFn, 0),
    ]
}

const ROUNDS: usize = 5;
const CALLS: u32 = 400;

/// A cookie that names no configuration: the program returns right after its lookup.
pub const NO_CONFIG: u64 = u32::MAX as u64;

#[derive(Debug, thiserror::Error)]
pub enum SelfTestError {
    #[error("cannot load gprobe's uprobe program: {0}")]
    Load(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot find gprobe's own code in /proc/self/maps")]
    NotMapped,
    #[error("cannot read /proc/self/maps: {0}")]
    Maps(#[source] std::io::Error),
    #[error("cannot place a uprobe on gprobe's own code: {0}")]
    Multi(#[source] std::io::Error),
    #[error("cannot place a uprobe on gprobe's own code: {0}")]
    Perf(#[source] perf::PerfError),
}

/// The file and file offset of `f` as mapped in this process.
fn file_offset(f: TestFn, maps: &str) -> Result<(PathBuf, u64), SelfTestError> {
    let addr = f as *const () as u64;
    for line in maps.lines() {
        let mut w = line.split_whitespace();
        let (Some(range), Some(perms), Some(off), _, _, Some(path)) =
            (w.next(), w.next(), w.next(), w.next(), w.next(), w.next())
        else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let parse = |s: &str| u64::from_str_radix(s, 16).ok();
        let (Some(lo), Some(hi), Some(off)) = (parse(lo), parse(hi), parse(off)) else {
            continue;
        };
        if perms.contains('x') && (lo..hi).contains(&addr) {
            return Ok((PathBuf::from(path), addr - lo + off));
        }
    }
    Err(SelfTestError::NotMapped)
}

/// The best ns per call of `f` over a few rounds.
fn ns_per_call(f: TestFn) -> u32 {
    let f = std::hint::black_box(f);
    let mut best = u128::MAX;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for i in 0..CALLS {
            // SAFETY: each test function compares two registers and returns.
            unsafe { f(std::hint::black_box(i as u64), 7) };
        }
        best = best.min(t.elapsed().as_nanos());
    }
    (best / CALLS as u128) as u32
}

/// Measures this kernel's uprobe sites: `place(file, offsets)` puts a uprobe of gprobe's
/// program on each offset of `file` in this process (with [`NO_CONFIG`]) and returns what
/// keeps them; it is handed back, so that the caller detaches them where a slow detach
/// costs nothing.
pub fn measure<G>(
    place: impl FnOnce(&Path, &[u64]) -> Result<G, SelfTestError>,
) -> Result<(KernelSites, G), SelfTestError> {
    let t0 = Instant::now();
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(SelfTestError::Maps)?;
    let sites = test_sites();
    let mut path = None;
    let mut offsets = Vec::new();
    for (f, at) in sites {
        let (p, base) = file_offset(f, &maps)?;
        path.get_or_insert(p);
        offsets.push(base + at);
    }
    let path = path.ok_or(SelfTestError::NotMapped)?;
    let bare: Vec<u32> = sites.iter().map(|(f, _)| ns_per_call(*f)).collect();
    let guard = place(&path, &offsets)?;
    let probed: Vec<u32> = sites.iter().map(|(f, _)| ns_per_call(*f)).collect();
    let cost: Vec<u32> = probed
        .iter()
        .zip(&bare)
        .map(|(p, b)| p.saturating_sub(*b))
        .collect();
    let [single_step_ns, jcc_ns, push_ns, nop_ns] = [cost[0], cost[1], cost[2], cost[3]];
    let emulated = |ns: u32| ns.saturating_mul(3) < single_step_ns;
    let class = |e: bool| if e { "emulated" } else { "single-stepped" };
    let k = KernelSites {
        jcc: emulated(jcc_ns),
        push: emulated(push_ns),
        nop: emulated(nop_ns),
        emulated_ns: if emulated(jcc_ns) {
            jcc_ns
        } else {
            push_ns.min(jcc_ns)
        },
        single_step_ns,
    };
    tracing::info!(
        "uprobe sites on this kernel: a single-stepped instruction costs {single_step_ns} ns per \
        call, a conditional jump {jcc_ns} ns ({}), push {push_ns} ns ({}), nop {nop_ns} ns ({}); measured in {} ms",
        class(k.jcc),
        class(k.push),
        class(k.nop),
        t0.elapsed().as_millis()
    );
    Ok((k, guard))
}

/// Measures this kernel's uprobe sites (above) without a tracer: loads gprobe's
/// uprobe program alone (no hooks, nothing pinned), for commands that only show sites
/// (`gprobe symbols --verbose`).
pub fn measure_sites() -> Result<KernelSites, SelfTestError> {
    let load = |e: Box<dyn std::error::Error + Send + Sync>| SelfTestError::Load(e);
    let bpf_object = uprobe_object(super::features::probe());
    let mut ebpf = EbpfLoader::new()
        .load(bpf_object)
        .map_err(|e| load(e.into()))?;
    let up: &mut UProbe = ebpf
        .program_mut(UPROBE_PROG)
        .and_then(|p| p.try_into().ok())
        .expect("BPF object has its uprobe program");
    up.load().map_err(|e| load(e.into()))?;
    let multi = MultiProgram::load(bpf_object, &ebpf, UPROBE_PROG).ok();
    let up: &UProbe = ebpf
        .program(UPROBE_PROG)
        .and_then(|p| p.try_into().ok())
        .expect("BPF object has its uprobe program");
    let prog = up.fd().map_err(|e| load(e.into()))?;
    let (k, links) = measure(|path, offsets| place(multi.as_ref(), prog.as_fd(), path, offsets))?;
    drop(links);
    Ok(k)
}

/// Places the self-test's uprobes ([`measure`]): one uprobe_multi link where the
/// kernel has them (one detach), else a perf event each.
pub(super) fn place(
    multi: Option<&MultiProgram>,
    prog: BorrowedFd<'_>,
    path: &Path,
    offsets: &[u64],
) -> Result<Vec<Link>, SelfTestError> {
    let pid = std::process::id();
    let identify = if super::object::has_cookies(super::features::probe()) {
        perf::Identify::Cookie
    } else {
        perf::Identify::Nothing
    };
    if let Some(m) = multi {
        let sites: Vec<(u64, u64, u64)> = offsets.iter().map(|&o| (o, NO_CONFIG, 0)).collect();
        return m
            .attach(path, &sites, pid, false)
            .map(|fd| vec![Link::multi_unaccounted(fd)])
            .map_err(SelfTestError::Multi);
    }
    offsets
        .iter()
        .map(|&offset| {
            let point = ProbePoint {
                offset,
                ret: false,
                ref_ctr_offset: 0,
            };
            perf::attach(prog, path, point, pid, NO_CONFIG, identify)
                .map(Link::perf_unaccounted)
                .map_err(SelfTestError::Perf)
        })
        .collect()
}
