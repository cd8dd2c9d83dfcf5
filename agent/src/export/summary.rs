//! The end-of-run report, built from [`Stats`] only: the text printed on stderr and the
//! `--summary-file` JSON of docs/DESIGN.md and the README, with the same numbers. The model
//! and the JSON are here; the text is worded in summary/text.rs.

use crate::resolve::sites::{self, KernelSites, SiteClass, SiteCosts};
use crate::stats::Stats;
use serde::Serialize;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use thiserror::Error;

mod text;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeSummary {
    pub spec: String,
    pub symbol: String,
    pub attached: bool,
    pub error: Option<String>,
    pub delivered: u64,
    pub lost: u64,
    pub throttled: u64,
    pub unfinished: u64,
    pub abandoned: u64,
    pub returns_lost: u64,
    pub too_deep: u64,
    /// Calls that failed the probe's `when:`: counted, not delivered.
    pub filtered: u64,
    /// Calls that passed `when:` and were left out by `sample:`.
    pub sampled_out: u64,
    /// Calls whose `when:` needed their return, which never came: not delivered.
    pub undecided: u64,
    /// Calls whose request's header map could not be searched to the end for a
    /// `traceparent` (more headers than gprobe searches, or unreadable memory).
    pub join_incomplete: u64,
    /// How the kernel runs the probe's sites, once attached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<SiteSummary>,
}

/// What a call costs the traced program, by site: `emulated`, `single-stepped` or
/// `unmeasured`, and the cost measured at start (ns per call; absent when unmeasured).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SiteSummary {
    pub entry: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_ns: Option<u32>,
    #[serde(rename = "return", skip_serializing_if = "Option::is_none")]
    pub ret: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_ns: Option<u32>,
}

impl SiteSummary {
    fn of(c: SiteCosts, k: Option<KernelSites>) -> Self {
        let ns = |class: SiteClass| Some(class.cost_ns(k)).filter(|&n| n > 0);
        SiteSummary {
            entry: c.entry.as_str(),
            entry_ns: ns(c.entry),
            ret: c.ret.map(SiteClass::as_str),
            return_ns: c.ret.and_then(ns),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissedSummary {
    pub pid: u32,
    pub executable: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessSummary {
    pub matched: u64,
    pub traced: u64,
    /// Every missed process; `missed` lists the latest of them.
    pub missed_total: u64,
    pub missed: Vec<MissedSummary>,
    /// Process events (exec, fork, exit) lost from a full process ring buffer.
    pub events_lost: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OtlpSummary {
    pub spans_exported: u64,
    pub spans_dropped: u64,
    pub export_errors: u64,
}

/// Outgoing requests made inside spans of `propagate: true` probes (present only when a
/// process had one): `written` of the `requests` carried a traceparent (with `dry_run`,
/// would have); `error` says why none could (the kernel's refusal), if so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PropagationSummary {
    pub requests: u64,
    pub written: u64,
    /// Of `written`, the traceparents that said the trace is not sampled (`sample:`).
    pub unsampled: u64,
    /// Requests whose header map could not be searched to the end for one of their own:
    /// sent as they were.
    pub incomplete: u64,
    pub error: Option<String>,
    /// `--propagate-dry-run`: `written` counts the headers that would have been written.
    pub dry_run: bool,
}

/// A spec's probes in one process, measured against `limits.maxOverheadPercent`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetSummary {
    pub spec: String,
    pub pid: u32,
    pub executable: String,
    /// The estimated share of one CPU they cost when taken off the latest time (percent;
    /// 0 if never).
    pub percent: f64,
    /// The highest share estimated over one second (percent).
    pub peak_percent: f64,
    /// What was taken off the latest time: `none` (within its budget), `returns` (the
    /// return probes: calls still recorded, without a duration or results) or `all`.
    pub taken_off: &'static str,
    /// How often the return probes alone were taken off, all of the spec's probes were,
    /// and they were attached again after the back-off.
    pub returns_detached: u64,
    pub detached: u64,
    pub retried: u64,
    /// The latest back-off (s).
    pub backoff_s: u64,
}

/// What a run did: one object, serialized as the `--summary-file` JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub probes: Vec<ProbeSummary>,
    pub processes: ProcessSummary,
    pub otlp: OtlpSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub propagation: Option<PropagationSummary>,
    /// Every process whose probes were taken off for their cost, and every live one whose
    /// probes a budget measures (absent when there is none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budget: Vec<BudgetSummary>,
    /// The running kernel's features: each available or missing (absent before the BPF
    /// programs were loaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<crate::kernel::KernelFeatures>,
}

#[derive(Debug, Error)]
pub enum SummaryError {
    #[error("writing the summary file {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("renaming {from} to the summary file {to}: {source}")]
    Rename {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Summary {
    pub fn from_stats(stats: &Stats) -> Self {
        let probes = stats
            .probes()
            .into_iter()
            .map(|(k, p)| ProbeSummary {
                spec: k.spec.to_string(),
                symbol: k.symbol.to_string(),
                attached: p.attached,
                error: p.error,
                delivered: p.delivered,
                lost: p.lost,
                throttled: p.throttled,
                unfinished: p.unfinished,
                abandoned: p.abandoned,
                returns_lost: p.returns_lost,
                too_deep: p.too_deep,
                filtered: p.filtered,
                sampled_out: p.sampled_out,
                undecided: p.undecided,
                join_incomplete: p.join_incomplete,
                site: p.costs.map(|c| SiteSummary::of(c, sites::kernel())),
            })
            .collect();
        let p = stats.processes();
        let (spans_exported, spans_dropped, export_errors) = stats.otlp_counts();
        Summary {
            probes,
            processes: ProcessSummary {
                matched: p.matched,
                traced: p.traced,
                missed_total: p.missed_total,
                missed: p
                    .missed
                    .into_iter()
                    .map(|m| MissedSummary {
                        pid: m.pid,
                        executable: m.executable,
                        reason: m.reason,
                    })
                    .collect(),
                events_lost: p.events_lost,
            },
            otlp: OtlpSummary {
                spans_exported,
                spans_dropped,
                export_errors,
            },
            propagation: Some(stats.propagation()).filter(|p| p.active).map(|p| {
                PropagationSummary {
                    requests: p.requests,
                    written: p.written,
                    unsampled: p.unsampled,
                    incomplete: p.incomplete,
                    error: p.error,
                    dry_run: p.dry_run,
                }
            }),
            budget: stats
                .budget()
                .into_iter()
                .map(|((spec, pid), e)| BudgetSummary {
                    spec,
                    pid,
                    executable: e.executable,
                    percent: (e.percent * 10.0).round() / 10.0,
                    peak_percent: (e.peak_percent * 100.0).round() / 100.0,
                    taken_off: e.taken_off.map_or("none", |t| t.as_str()),
                    returns_detached: e.returns_detached,
                    detached: e.detached,
                    retried: e.retried,
                    backoff_s: e.backoff_s,
                })
                .collect(),
            kernel: stats.kernel_features(),
        }
    }

    pub fn to_json(&self) -> String {
        // Plain structs of strings and integers: serialization cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// Writes the JSON to `path` atomically: a reader sees the old file or the whole new
    /// one (a temporary file in the same directory, synced, then renamed over `path`).
    pub fn write_file(&self, path: &Path) -> Result<(), SummaryError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "summary".into());
        let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(self.to_json().as_bytes())?;
            f.sync_all()
        };
        if let Err(source) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(SummaryError::Write {
                path: path.to_path_buf(),
                source,
            });
        }
        std::fs::rename(&tmp, path).map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            SummaryError::Rename {
                from: tmp.clone(),
                to: path.to_path_buf(),
                source,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{KernelCounts, Missed, ProbeKey};
    use std::sync::atomic::Ordering;

    fn key(spec: &str, symbol: &str) -> ProbeKey {
        ProbeKey {
            spec: spec.into(),
            name: spec.into(),
            index: 0,
            symbol: symbol.into(),
        }
    }

    fn stats() -> Stats {
        let st = Stats::new();
        let get = key("http-client-urls", "net/http.(*Client).Get");
        st.set_attached(&get, SiteCosts::default());
        st.add_delivered([(&get, 7, 811), (&get, 8, 1)]);
        let tick = key("burst", "main.tick");
        st.set_attached(&tick, SiteCosts::default());
        st.add_delivered([(&tick, 9, 1)]);
        st.set_kernel(
            &tick,
            KernelCounts {
                hits: 100,
                emitted: 10,
                lost: 1,
                throttled: 90,
                returns_lost: 2,
                too_deep: 3,
                incomplete: 5,
                ..Default::default()
            },
        );
        st.add_unfinished(&tick, 2);
        st.add_abandoned(&tick, 4);
        let fail = key("shop", "main.handleOrder");
        st.set_error(
            &fail,
            "symbol main.handleOrder not found in /app/shop".into(),
        );
        for _ in 0..31 {
            st.process_matched(&[]);
        }
        for _ in 0..24 {
            st.process_traced(&[]);
        }
        st.set_process_events_lost(3);
        for pid in 4711..4718 {
            st.process_missed(
                &[],
                Missed {
                    pid,
                    executable: "/app/shop".into(),
                    reason: "exited before attach".into(),
                },
            );
        }
        st.otlp().spans_exported.store(812, Ordering::Relaxed);
        st.otlp().spans_dropped.store(1, Ordering::Relaxed);
        st.otlp().export_errors.store(1, Ordering::Relaxed);
        st
    }

    #[test]
    fn the_file_has_the_documented_shape_and_numbers() {
        let dir = std::env::temp_dir().join(format!("gprobe-summary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("summary.json");
        std::fs::write(&path, "old").unwrap();
        Summary::from_stats(&stats()).write_file(&path).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        // Only the file itself is left: the temporary one was renamed over it.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();

        let get = v["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["symbol"] == "net/http.(*Client).Get")
            .unwrap();
        assert_eq!(
            get,
            &serde_json::json!({"spec": "http-client-urls", "symbol": "net/http.(*Client).Get",
                "attached": true, "error": null, "delivered": 812, "lost": 0, "throttled": 0,
                "unfinished": 0, "abandoned": 0, "returns_lost": 0, "too_deep": 0,
                "filtered": 0, "sampled_out": 0, "undecided": 0,
                "join_incomplete": 0, "site": {"entry": "unmeasured"}})
        );
        let tick = &v["probes"][0];
        assert_eq!(tick["symbol"], "main.tick");
        assert_eq!(
            (
                &tick["lost"],
                &tick["throttled"],
                &tick["returns_lost"],
                &tick["too_deep"]
            ),
            (&1.into(), &90.into(), &2.into(), &3.into())
        );
        assert_eq!(
            (
                &tick["unfinished"],
                &tick["abandoned"],
                &tick["join_incomplete"]
            ),
            (&2.into(), &4.into(), &5.into())
        );
        let fail = &v["probes"][2];
        assert_eq!(fail["attached"], false);
        assert_eq!(
            fail["error"],
            "symbol main.handleOrder not found in /app/shop"
        );
        assert_eq!(v["processes"]["matched"], 31);
        assert_eq!(v["processes"]["traced"], 24);
        assert_eq!(v["processes"]["missed_total"], 7);
        assert_eq!(v["processes"]["events_lost"], 3);
        assert_eq!(
            v["processes"]["missed"][0],
            serde_json::json!({"pid": 4711, "executable": "/app/shop", "reason": "exited before attach"})
        );
        assert_eq!(
            v["otlp"],
            serde_json::json!({"spans_exported": 812, "spans_dropped": 1, "export_errors": 1})
        );
    }

    #[test]
    fn a_failed_write_names_the_file_and_leaves_nothing_behind() {
        let err = Summary::from_stats(&Stats::new())
            .write_file(Path::new("/nonexistent-dir/summary.json"))
            .unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent-dir/summary.json"),
            "{err}"
        );
    }

    #[test]
    fn without_bpf_loop_unsearched_headers_are_said_to_be_the_kernels() {
        let mut sum = Summary::from_stats(&stats());
        sum.kernel = Some(crate::kernel::KernelFeatures {
            release: "5.10.0-32-amd64".into(),
            features: vec![(
                crate::kernel::FeatureName::BpfLoop,
                crate::kernel::Found::Missing,
            )],
        });
        let t = sum.render();
        assert!(
            t.contains(
                "5 requests' headers could not be searched to the end for an incoming \
                traceparent (this kernel has no bpf_loop: Go maps are not searched)"
            ),
            "{t}"
        );
    }

    #[test]
    fn the_text_names_every_cause_with_what_to_do() {
        let t = Summary::from_stats(&stats()).render();
        let has = |s: &str| assert!(t.contains(s), "missing {s:?} in:\n{t}");
        has("  burst / main.tick: 1 call delivered, 1 lost, 90 throttled\n");
        has("    1 call lost: the ring buffer was full (raise --ring-buffer-size)\n");
        has("    90 calls not recorded: over the spec's limits.eventsPerSecond (raise it)\n");
        has("    3 calls not recorded: nested deeper in one goroutine");
        has("    4 calls abandoned: more calls in flight at once");
        has(
            "    2 of the delivered calls lost their return (ring buffer full; raise \
            --ring-buffer-size) and are reported unfinished\n",
        );
        has("    2 calls had not returned when their process exited or gprobe stopped");
        has("    5 requests' headers could not be searched to the end for an incoming traceparent");
        has("  http-client-urls / net/http.(*Client).Get: 812 calls delivered, 0 lost, 0 throttled\n");
        has(
            "  shop / main.handleOrder: 0 calls delivered, 0 lost, 0 throttled\n    failed: not \
            attached: symbol main.handleOrder not found in /app/shop\n",
        );
        has("  processes: 31 matched, 24 traced, 7 missed\n");
        has("    3 process events lost: the process ring buffer was full");
        has("    missed pid 4711 (/app/shop): exited before attach\n");
        has("    and 2 more missed");
        assert!(
            !t.contains("pid 4716"),
            "only the first five are named:\n{t}"
        );
        has("  OTLP: 812 spans exported, 1 dropped, 1 failed export (collector slow");
        // Nothing is said about causes that did not happen.
        let get: Vec<&str> = t
            .lines()
            .skip_while(|l| !l.contains("net/http"))
            .skip(1)
            .take_while(|l| l.starts_with("    "))
            .collect();
        assert!(get.is_empty(), "{get:?}");
    }

    #[test]
    fn an_empty_run_says_so() {
        let t = Summary::from_stats(&Stats::new()).render();
        assert_eq!(t, "gprobe summary:\n  no probe was configured\n");
    }
}
