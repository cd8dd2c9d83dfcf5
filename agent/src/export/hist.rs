//! The latency histograms of the probes with `hist: true`, as printed on stderr: per probe
//! a heading and the rows of bpftrace's `hist()` (`gprobe_crds::hist`), counted from the
//! calls delivered and those `when:` or `sample:` left out ([`ProbeStats::durations`]),
//! since the start.
//!
//! ```text
//! @ns[main.computeE]: 200 calls
//! [256K, 512K)         190 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
//! [512K, 1M)            10 |@@                                                  |
//! ```

use crate::stats::{ProbeKey, ProbeStats, Stats};
use gprobe_crds::ProbeSpec;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Which probes print a histogram: (spec name, probe index) of every `hist: true`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistProbes(BTreeSet<(Arc<str>, u16)>);

impl HistProbes {
    /// The probes of `specs` (local mode: a spec's stats name is its name) with `hist: true`.
    pub fn of(specs: &[ProbeSpec]) -> Self {
        let mut set = BTreeSet::new();
        for s in specs {
            for (i, p) in s.spec.probes.iter().enumerate() {
                if p.hist {
                    set.insert((Arc::from(s.display_name()), i as u16));
                }
            }
        }
        HistProbes(set)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn wants(&self, k: &ProbeKey) -> bool {
        self.0.contains(&(k.spec.clone(), k.index))
    }

    /// The histograms of these probes now, each followed by an empty line (as bpftrace
    /// prints its maps).
    pub fn render(&self, stats: &Stats) -> String {
        let probes: Vec<(ProbeKey, ProbeStats)> = stats
            .probes()
            .into_iter()
            .filter(|(k, _)| self.wants(k))
            .collect();
        render(&probes)
    }
}

/// Each probe's heading and rows. A probe is named by its symbol, or by its spec and
/// symbol where two probes share a symbol.
fn render(probes: &[(ProbeKey, ProbeStats)]) -> String {
    let symbols: BTreeSet<&str> = probes.iter().map(|(k, _)| &*k.symbol).collect();
    let by_symbol = symbols.len() == probes.len();
    let mut out = String::new();
    for (k, p) in probes {
        let name = if by_symbol {
            k.symbol.to_string()
        } else {
            format!("{}, {}", k.spec, k.symbol)
        };
        let mut left_out = p.filtered_durations;
        left_out += p.sampled_out_durations;
        let not_counted = p.throttled + p.lost;
        out.push_str(
            &p.durations()
                .block(&name, left_out.0.iter().sum(), not_counted),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::DurationBuckets;

    fn key(spec: &str, index: u16, symbol: &str) -> ProbeKey {
        ProbeKey {
            spec: spec.into(),
            name: spec.into(),
            index,
            symbol: symbol.into(),
        }
    }

    #[test]
    fn delivered_and_left_out_calls_are_counted_together() {
        let st = Stats::new();
        let k = key("compute", 0, "main.computeE");
        let other = key("compute", 1, "main.tick");
        st.register(&k);
        st.register(&other);
        let mut d = DurationBuckets::default();
        for ns in [300_000, 300_000, 600_000] {
            d.add_ns(ns);
        }
        st.add_delivered_durations([(&k, d)]);
        let mut filtered = DurationBuckets::default();
        filtered.add_ns(700_000);
        st.set_kernel(
            &k,
            crate::stats::KernelCounts {
                filtered: 1,
                filtered_durations: filtered,
                throttled: 2,
                lost: 1,
                ..Default::default()
            },
        );
        st.add_sampled_out(&k, Some(3_000_000));
        let spec = gprobe_crds::load_specs(
            "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: compute}\n\
             spec:\n  selector: {executable: /x}\n  probes:\n  - {symbol: main.computeE, \
             latency: true, hist: true}\n  - {symbol: main.tick, latency: true}\n",
            "t.yaml",
        )
        .unwrap();
        let hp = HistProbes::of(&spec);
        let text = hp.render(&st);
        let expected = "@ns[main.computeE]: 5 calls\n  \
            (2 of them left out by when: or sample:, counted here)\n  \
            (3 more throttled or lost, without a duration: not counted)\n\
            [256K, 512K)           2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
            [512K, 1M)             2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
            [1M, 2M)               0 |                                                    |\n\
            [2M, 4M)               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n\n";
        assert_eq!(text, expected, "\n{text}");
        assert!(HistProbes::of(&[]).is_empty());
    }

    #[test]
    fn probes_of_one_symbol_are_told_apart_by_spec() {
        let a = key("a", 0, "main.f");
        let b = key("b", 0, "main.f");
        let text = render(&[(a, ProbeStats::default()), (b, ProbeStats::default())]);
        assert_eq!(
            text,
            "@ns[a, main.f]: no call has returned yet\n\n@ns[b, main.f]: no call has returned yet\n\n"
        );
    }
}
