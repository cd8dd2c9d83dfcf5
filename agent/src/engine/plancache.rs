//! Plans made in one binary, kept for the next version of a spec. A ProbeSpec edit
//! reaches every agent and usually leaves most of its probes as they were; resolving them
//! again (the binary's symbols, DWARF, instructions) was most of what a change cost.

use super::error::ProbeError;
use crate::plan::ProbePlan;
use gprobe_crds::Probe;
use std::collections::VecDeque;
use std::sync::Arc;

/// Most plans kept per binary: the probes of a few versions of its specs.
const KEEP: usize = 32;

type Outcome = Result<ProbePlan, Arc<ProbeError>>;

/// The latest plans of one binary, by probe and string limit (all a plan depends on),
/// least recently used first.
#[derive(Default)]
pub(super) struct PlanCache {
    entries: VecDeque<((Probe, u32), Outcome)>,
}

impl PlanCache {
    pub(super) fn get(&mut self, probe: &Probe, max_string_bytes: u32) -> Option<Outcome> {
        let i = self
            .entries
            .iter()
            .position(|((p, m), _)| *m == max_string_bytes && p == probe)?;
        let e = self.entries.remove(i)?;
        let out = e.1.clone();
        self.entries.push_back(e);
        Some(out)
    }

    pub(super) fn put(&mut self, probe: &Probe, max_string_bytes: u32, plan: &Outcome) {
        if self.get(probe, max_string_bytes).is_some() {
            return;
        }
        if self.entries.len() == KEEP {
            self.entries.pop_front();
        }
        self.entries
            .push_back(((probe.clone(), max_string_bytes), plan.clone()));
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(symbol: &str) -> Probe {
        Probe {
            symbol: symbol.into(),
            ..Default::default()
        }
    }

    fn plan(symbol: &str) -> Outcome {
        Ok(ProbePlan {
            symbol: symbol.into(),
            ..Default::default()
        })
    }

    #[test]
    fn plans_are_found_by_probe_and_string_limit_and_the_oldest_go_first() {
        let mut c = PlanCache::default();
        c.put(&probe("main.a"), 64, &plan("main.a"));
        assert!(c.get(&probe("main.a"), 64).is_some());
        assert!(
            c.get(&probe("main.a"), 128).is_none(),
            "another string limit"
        );
        assert!(c.get(&probe("main.b"), 64).is_none());
        for i in 0..KEEP {
            c.put(&probe(&format!("f{i}")), 64, &plan("f"));
            // main.a stays in use.
            assert!(c.get(&probe("main.a"), 64).is_some());
        }
        assert_eq!(c.len(), KEEP);
        assert!(c.get(&probe("main.a"), 64).is_some(), "recently used");
        assert!(
            c.get(&probe("f0"), 64).is_none(),
            "the least recently used went"
        );
    }
}
