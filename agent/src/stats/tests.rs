//! Unit tests of the counters.

use super::*;

fn key(s: &str) -> ProbeKey {
    ProbeKey {
        spec: s.into(),
        name: s.into(),
        index: 0,
        symbol: "main.f".into(),
    }
}

#[test]
fn delivered_counts_add_up_per_probe_and_pid() {
    let st = Stats::new();
    let (a, b) = (key("a"), key("b"));
    st.add_delivered([(&a, 1, 3), (&a, 2, 4), (&b, 1, 1)]);
    st.add_delivered([(&a, 1, 2)]);
    assert_eq!(st.probe(&a).delivered, 9);
    assert_eq!(st.delivered_by(&a, 1), 5);
    st.retain_pids(|pid| pid != 1);
    assert_eq!(st.delivered_by(&a, 1), 0);
    assert_eq!(st.delivered_by(&a, 2), 4);
    assert_eq!(st.probe(&a).delivered, 9, "totals survive the process");
}

#[test]
fn missed_processes_are_all_counted_and_the_latest_listed() {
    let st = Stats::new();
    let a: Arc<str> = "a".into();
    for pid in 0..(MAX_MISSED_LISTED as u32 + 5) {
        st.process_missed(
            std::slice::from_ref(&a),
            Missed {
                pid,
                executable: "/bin/x".into(),
                reason: "exited before attach".into(),
            },
        );
    }
    st.process_matched(&["a".into(), "b".into()]);
    let p = st.processes();
    assert_eq!(p.missed_total, MAX_MISSED_LISTED as u64 + 5);
    assert_eq!(p.missed.len(), MAX_MISSED_LISTED);
    assert_eq!(p.missed.front().unwrap().pid, 5);
    assert_eq!(p.matched, 1);
    assert_eq!(
        st.processes_of("a").missed_total,
        MAX_MISSED_LISTED as u64 + 5
    );
    assert_eq!(st.processes_of("b").matched, 1);
    assert_eq!(st.processes_of("b").missed_total, 0);
}
