//! The end-of-run report as text for stderr: per probe the calls delivered and every way a
//! call was not, with its cause and what to do, then processes, budgets, OTLP and
//! propagation. Kept apart from the model in summary.rs (which the JSON file serializes),
//! so the two read the same numbers and only this file words them.

use super::Summary;
use std::fmt::Write as _;

/// Missed processes named in the text (the file lists every one Stats kept).
const MISSED_SHOWN: usize = 5;

/// `1 call`, `2 calls`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl Summary {
    /// The text for stderr: per probe the calls delivered and every way a call was not,
    /// with its cause and what to do; failed probes; missed processes; OTLP.
    pub fn render(&self) -> String {
        let mut s = String::from("gprobe summary:\n");
        if self.probes.is_empty() {
            s += "  no probe was configured\n";
        }
        // Without bpf_loop no header map is searched at all (README: Kernels).
        let no_map_search = self.kernel.as_ref().is_some_and(|k| {
            k.missing()
                .any(|f| f == crate::kernel::FeatureName::BpfLoop)
        });
        for p in &self.probes {
            let _ = writeln!(
                s,
                "  {} / {}: {} delivered, {} lost, {} throttled",
                p.spec,
                p.symbol,
                count(p.delivered, "call", "calls"),
                p.lost,
                p.throttled
            );
            let detail = |s: &mut String, n: u64, text: &str| {
                if n > 0 {
                    let _ = writeln!(s, "    {text}");
                }
            };
            detail(
                &mut s,
                p.lost,
                &format!(
                    "{} lost: the ring buffer was full (raise --ring-buffer-size)",
                    count(p.lost, "call", "calls")
                ),
            );
            detail(
                &mut s,
                p.throttled,
                &format!(
                    "{} not recorded: over the spec's limits.eventsPerSecond (raise it)",
                    count(p.throttled, "call", "calls")
                ),
            );
            detail(
                &mut s,
                p.filtered,
                &format!(
                    "{} left out by the probe's when: (counted, not delivered)",
                    count(p.filtered, "call", "calls")
                ),
            );
            detail(
                &mut s,
                p.undecided,
                &format!(
                    "{} not delivered: its when: needed the return, which never came (lost to \
                     a full ring buffer, or the process ended in the call)",
                    count(p.undecided, "call", "calls")
                ),
            );
            detail(
                &mut s,
                p.sampled_out,
                &format!(
                    "{} left out by the probe's sample: (counted, not delivered)",
                    count(p.sampled_out, "call", "calls")
                ),
            );
            detail(
                &mut s,
                p.too_deep,
                &format!(
                    "{} not recorded: nested deeper in one goroutine than gprobe pairs \
                     (recursion; probe a function outside the recursion)",
                    count(p.too_deep, "call", "calls")
                ),
            );
            detail(
                &mut s,
                p.abandoned,
                &format!(
                    "{} abandoned: more calls in flight at once than gprobe pairs \
                     (probe a less concurrent function)",
                    count(p.abandoned, "call", "calls")
                ),
            );
            detail(
                &mut s,
                p.returns_lost,
                &format!(
                    "{} of the delivered calls lost their return (ring buffer full; raise \
                     --ring-buffer-size) and are reported unfinished",
                    p.returns_lost
                ),
            );
            detail(
                &mut s,
                p.join_incomplete,
                &format!(
                    "{} could not be searched to the end for an incoming traceparent \
                     ({}): their spans may start a trace of their own",
                    count(p.join_incomplete, "request's header", "requests' headers"),
                    if no_map_search {
                        "this kernel has no bpf_loop: Go maps are not searched"
                    } else {
                        "over 1,024 headers, or unreadable"
                    }
                ),
            );
            detail(
                &mut s,
                p.unfinished,
                &format!(
                    "{} had not returned when their process exited or gprobe stopped \
                     (delivered with \"unfinished\": true)",
                    count(p.unfinished, "call", "calls")
                ),
            );
            match (&p.error, p.attached) {
                (Some(e), false) => {
                    let _ = writeln!(s, "    failed: not attached: {e}");
                }
                (Some(e), true) => {
                    let _ = writeln!(s, "    failed in some processes: {e}");
                }
                (None, false) => s += "    never attached: no selected process ran it\n",
                (None, true) => {}
            }
        }
        let pr = &self.processes;
        if pr.matched > 0 || pr.missed_total > 0 || pr.events_lost > 0 {
            let _ = writeln!(
                s,
                "  processes: {} matched, {} traced, {} missed",
                pr.matched, pr.traced, pr.missed_total
            );
            if pr.events_lost > 0 {
                let _ = writeln!(
                    s,
                    "    {} lost: the process ring buffer was full (processes that started \
                    meanwhile were looked for in /proc)",
                    count(pr.events_lost, "process event", "process events")
                );
            }
            for m in pr.missed.iter().take(MISSED_SHOWN) {
                let _ = writeln!(
                    s,
                    "    missed pid {} ({}): {}",
                    m.pid,
                    crate::util::printable(&m.executable),
                    m.reason
                );
            }
            let shown = pr.missed.len().min(MISSED_SHOWN) as u64;
            if pr.missed_total > shown {
                let _ = writeln!(
                    s,
                    "    and {} more missed (--summary-file lists the latest {})",
                    pr.missed_total - shown,
                    pr.missed.len()
                );
            }
        }
        for b in self.budget.iter().filter(|b| b.taken_off != "none") {
            let _ = writeln!(
                s,
                "  over budget: {} in pid {} ({}): about {}% of a CPU, its return probes taken \
                off {}, all its probes {} (attached again {}; latest back-off {} s)",
                b.spec,
                b.pid,
                crate::util::printable(&b.executable),
                b.percent,
                count(b.returns_detached, "time", "times"),
                count(b.detached, "time", "times"),
                count(b.retried, "time", "times"),
                b.backoff_s
            );
        }
        let o = &self.otlp;
        if o.spans_exported + o.spans_dropped + o.export_errors > 0 {
            let _ = write!(
                s,
                "  OTLP: {} exported, {} dropped, {}",
                count(o.spans_exported, "span", "spans"),
                o.spans_dropped,
                count(o.export_errors, "failed export", "failed exports"),
            );
            if o.spans_dropped > 0 || o.export_errors > 0 {
                s += " (collector slow or unreachable: check --otlp-endpoint and the collector)";
            }
            s += "\n";
        }
        if let Some(p) = &self.propagation {
            let _ = write!(
                s,
                "  propagation: {} made inside propagating spans, {} a traceparent",
                count(p.requests, "request", "requests"),
                if p.written == p.requests && p.requests > 0 {
                    "each carried".to_string()
                } else {
                    format!("{} carried", p.written)
                }
            );
            if p.dry_run {
                s += " (dry run: would have; the requests went out unchanged)";
            }
            if p.incomplete > 0 {
                let _ = write!(
                    s,
                    "; {} not searched to the end for a traceparent of their own, sent \
                     without one",
                    count(p.incomplete, "request's headers", "requests' headers")
                );
            }
            if let Some(e) = &p.error {
                let _ = write!(s, " ({e})");
            }
            s += "\n";
        }
        s
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}
