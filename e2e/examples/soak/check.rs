//! The soak's verdict: the agent's records checked against the programs' own accounts,
//! the footprint's slopes, and what its stop left in the kernel, printed; each failed
//! check named.

use crate::args::Args;
use crate::records::{Records, Report};
use crate::samples::{per_hour, Sample};
use crate::{FUNCS, SPEC};
use gprobe_e2e::footprint::BpfObjects;
use std::collections::BTreeMap;
use std::process::ExitStatus;
use std::time::Duration;

/// What a soak run left to check.
pub struct Outcome<'a> {
    /// The agent's records, read to the end of its output.
    pub records: &'a Records,
    /// The programs' own accounts, by process base.
    pub own: BTreeMap<i64, Report>,
    /// When each spec change was written and when the agent had applied it (unix ns).
    pub windows: Vec<(i64, i64)>,
    pub samples: Vec<Sample>,
    /// Spec versions applied, and how many took over 60 s.
    pub generation: i64,
    pub late: u32,
    /// The agent's stop: its status, how long SIGINT took, its BPF objects before and
    /// what of them was still in the kernel after.
    pub status: ExitStatus,
    pub stop_took: Duration,
    pub mine: BpfObjects,
    pub left: BpfObjects,
    /// The agent's log.
    pub stderr: String,
}

/// Prints the results; true when every check passed.
pub fn verdict(a: &Args, o: Outcome) -> bool {
    let Outcome {
        records: r,
        own,
        windows,
        samples,
        generation,
        late,
        status,
        stop_took,
        mine,
        left,
        stderr,
    } = o;
    let overlaps = |rep: &Report| {
        windows
            .iter()
            .any(|(w0, w1)| rep.first_ns <= *w1 && rep.last_ns >= *w0)
    };
    let (mut checked, mut exact_calls, mut exact_procs, mut stable_procs) = (0u64, 0u64, 0, 0);
    let mut too_many = Vec::new();
    let mut inexact = Vec::new();
    let mut out_of_range = 0;
    for (base, rep) in &own {
        let stable = rep.first_ns > 0 && !overlaps(rep);
        if stable {
            stable_procs += 1;
        }
        let mut all_exact = true;
        for f in FUNCS {
            let (calls, argsum) = rep.calls.get(f).copied().unwrap_or((0, 0));
            let seen = r
                .seen
                .get(&(*base, f.to_string()))
                .cloned()
                .unwrap_or_default();
            if seen.records > calls {
                too_many.push(format!(
                    "base {base} {f}: {} records, {calls} calls",
                    seen.records
                ));
            }
            if seen.records > 0 && seen.max_arg >= base + calls as i64 {
                out_of_range += 1;
            }
            if stable {
                checked += calls;
                if seen.records == calls && seen.argsum == argsum {
                    exact_calls += calls;
                } else {
                    all_exact = false;
                    if inexact.len() < 10 {
                        inexact.push(format!(
                            "base {base} {f}: {} of {calls} calls recorded (argsum {} vs {argsum})",
                            seen.records, seen.argsum
                        ));
                    }
                }
            }
        }
        if stable && all_exact {
            exact_procs += 1;
        }
    }
    let unknown: u64 = r
        .seen
        .iter()
        .filter(|((b, _), _)| !own.contains_key(b))
        .map(|(_, s)| s.records)
        .sum();

    let after: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.t >= a.warmup.as_secs_f64())
        .collect();
    let first = after.first().copied().unwrap_or(samples[0]);
    let last = *samples.last().unwrap();
    println!(
        "\n== gprobe agent soak: {:?} of churn + {:?} settled",
        a.duration, a.settle
    );
    println!(
        "spec versions applied: {generation} (+{} toggles of a second spec); {late} took over 60 s",
        generation / 10
    );
    println!(
        "processes: {} reported (steady {}, short-lived {}); records of {SPEC}: {} ({} unfinished), other specs: {}",
        own.len(),
        a.steady,
        own.len().saturating_sub(a.steady),
        r.total,
        r.unfinished,
        r.other_specs
    );
    println!(
        "slopes after {:?} of warm-up ({} samples): RssAnon {:+.2} MiB/h ({:.1} -> {:.1} MiB), \
         RSS {:+.2} MiB/h ({:.1} -> {:.1} MiB), fds {:+.1}/h ({} -> {}), threads {:+.1}/h \
         ({} -> {}), uprobe links {:+.1}/h ({} -> {})",
        a.warmup,
        after.len(),
        per_hour(&after, |s| s.rss_anon as f64) / 1048576.0,
        first.rss_anon as f64 / 1048576.0,
        last.rss_anon as f64 / 1048576.0,
        per_hour(&after, |s| s.rss as f64) / 1048576.0,
        first.rss as f64 / 1048576.0,
        last.rss as f64 / 1048576.0,
        per_hour(&after, |s| s.fds as f64),
        first.fds,
        last.fds,
        per_hour(&after, |s| s.threads as f64),
        first.threads,
        last.threads,
        per_hour(&after, |s| s.links as f64),
        first.links,
        last.links
    );
    println!(
        "calls checked (processes that lived between two spec changes): {exact_calls} of {checked} \
         exact; {exact_procs} of {stable_procs} processes exact"
    );
    println!(
        "wrong values: {}; processes with more records than calls: {}; arguments out of range: \
         {out_of_range}; records of no process: {unknown}; malformed lines: {}",
        r.wrong.len(),
        too_many.len(),
        r.malformed
    );
    println!(
        "stop: SIGINT to exit {stop_took:.2?} ({}), {} uprobe links at the stop; left in the kernel: \
         {} links, {} programs, {} maps",
        status,
        mine.uprobe_links,
        left.links.len(),
        left.progs.len(),
        left.maps.len()
    );
    let mut failed = Vec::new();
    if !r.wrong.is_empty() {
        failed.push(format!("wrong values:\n{}", r.wrong.join("\n")));
    }
    if !too_many.is_empty() {
        failed.push(format!("more records than calls:\n{}", too_many.join("\n")));
    }
    if exact_calls != checked {
        failed.push(format!("inexact processes:\n{}", inexact.join("\n")));
    }
    if r.malformed > 0 {
        failed.push(format!("{} records without their argument", r.malformed));
    }
    if out_of_range + unknown as usize > 0 {
        failed.push("records of arguments no process passed".into());
    }
    if !left.links.is_empty() || !status.success() {
        failed.push("the agent's stop".into());
    }
    if failed.is_empty() {
        println!("all checks passed");
    } else {
        println!("FAILED:\n{}", failed.join("\n"));
        println!(
            "agent log (last 30 lines):\n{}",
            stderr
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        );
        return false;
    }
    true
}
