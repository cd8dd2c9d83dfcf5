//! What `gprobe run --summary-file PATH` writes at exit (the README, docs/DESIGN.md): the
//! numbers of the summary printed on stderr, as one JSON object.

use serde::Deserialize;

/// The whole summary file. Fields gprobe adds later are ignored here until a test needs them
/// (`Run::summary_json` has everything).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Summary {
    pub probes: Vec<ProbeSummary>,
    pub processes: ProcessSummary,
    pub otlp: OtlpSummary,
    /// Processes whose probes were taken off for their cost.
    #[serde(default)]
    pub budget: Vec<BudgetEntry>,
}

/// A spec's probes taken off a process for their cost.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BudgetEntry {
    pub spec: String,
    pub pid: u32,
    pub executable: String,
    pub percent: f64,
    pub peak_percent: f64,
    /// "none", "returns" or "all".
    pub taken_off: String,
    pub returns_detached: u64,
    pub detached: u64,
    pub retried: u64,
    pub backoff_s: u64,
}

/// One probe of one spec.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ProbeSummary {
    pub spec: String,
    pub symbol: String,
    /// Whether the probe was attached (to some process) at some time.
    pub attached: bool,
    /// Why it could not be attached.
    pub error: Option<String>,
    pub delivered: u64,
    pub lost: u64,
    pub throttled: u64,
    pub unfinished: u64,
    pub abandoned: u64,
    /// Delivered calls whose RETURN record found the ring buffer full.
    #[serde(default)]
    pub returns_lost: u64,
    /// Calls nested deeper than the pairing stack (not recorded).
    #[serde(default)]
    pub too_deep: u64,
    /// Calls for which the probe's `when` did not hold.
    #[serde(default)]
    pub filtered: u64,
    /// Calls that passed `when` but were left out by `sample`.
    #[serde(default)]
    pub sampled_out: u64,
    /// Calls whose `when` needed their return, which never came (not delivered).
    #[serde(default)]
    pub undecided: u64,
    /// How the kernel runs its sites, once attached.
    #[serde(default)]
    pub site: Option<SiteSummary>,
}

/// A probe's sites: `emulated`, `single-stepped` or `unmeasured`, with the measured cost.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SiteSummary {
    pub entry: String,
    pub entry_ns: Option<u32>,
    #[serde(rename = "return")]
    pub ret: Option<String>,
    pub return_ns: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ProcessSummary {
    pub matched: u64,
    pub traced: u64,
    pub missed: Vec<MissedProcess>,
}

/// A process the selector matched but gprobe did not trace from its first call.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MissedProcess {
    pub pid: u32,
    pub executable: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct OtlpSummary {
    pub spans_exported: u64,
    pub spans_dropped: u64,
    pub export_errors: u64,
}

impl Summary {
    /// The probe on `symbol` (the only one: panics when none or several match).
    pub fn probe(&self, symbol: &str) -> &ProbeSummary {
        let found: Vec<&ProbeSummary> = self.probes.iter().filter(|p| p.symbol == symbol).collect();
        match found[..] {
            [one] => one,
            _ => panic!(
                "{} probes on {symbol} in the summary: {:?}",
                found.len(),
                self.probes
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let text = r#"{"probes": [{"spec": "http-client-urls", "symbol": "net/http.(*Client).Get", "attached": true,
             "error": null, "delivered": 812, "lost": 0, "throttled": 0, "unfinished": 0,
             "abandoned": 0}],
 "processes": {"matched": 31, "traced": 30,
               "missed": [{"pid": 4711, "executable": "/app/shop", "reason": "exited before attach"}]},
 "otlp": {"spans_exported": 812, "spans_dropped": 0, "export_errors": 0}}"#;
        let s: Summary = serde_json::from_str(text).unwrap();
        assert_eq!(s.probe("net/http.(*Client).Get").delivered, 812);
        assert_eq!(s.processes.missed[0].reason, "exited before attach");
        assert_eq!(s.otlp.spans_exported, 812);
    }
}
