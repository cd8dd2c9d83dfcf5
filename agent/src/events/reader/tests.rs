use super::*;
use crate::abi::GpEvent;

/// An ENTRY record (no values) of configuration `probe_id` in process `pid`.
fn entry(probe_id: u32, pid: u32, call_id: u64) -> Vec<u8> {
    let ev = GpEvent {
        ts_ns: 1,
        call_id,
        goroutine: 0xc000,
        duration_ns: 0,
        pid,
        tid: pid,
        probe_id,
        kind: EV_ENTRY,
        data_len: 0,
    };
    // SAFETY: GpEvent is a plain repr(C) struct of integers.
    unsafe {
        std::slice::from_raw_parts(
            (&ev as *const GpEvent).cast::<u8>(),
            std::mem::size_of::<GpEvent>(),
        )
    }
    .to_vec()
}

#[test]
fn a_freed_configuration_is_decoded_until_read_past_then_its_calls_in_flight_end() {
    let registry = Arc::new(Registry::default());
    let (a, b) = (
        Arc::new(ProbeMeta::simple("s", "main.a", true)),
        Arc::new(ProbeMeta::simple("s", "main.b", true)),
    );
    registry.set_probe(3, Some(a.clone()));
    registry.set_probe(4, Some(b));
    let mut proc = Processor::new(registry.clone(), Clock::new(), 64);
    assert!(proc.process(&entry(3, 10, 1)).is_none());
    assert!(proc.process(&entry(4, 10, 2)).is_none());
    let before = Instant::now();
    registry.retire(3);
    // Records written before it was freed still decode.
    assert!(proc.retire(before).is_empty());
    assert!(proc.process(&entry(3, 11, 5)).is_none());
    assert_eq!(proc.stats.unknown_probe, 0);
    // Read past it: its decoder goes, and its two calls in flight end, oldest first.
    let ended = proc.retire(Instant::now() + RETIRE_GRACE * 2);
    assert_eq!(
        ended
            .iter()
            .map(|r| (r.pid, r.unfinished))
            .collect::<Vec<_>>(),
        [(10, true), (11, true)]
    );
    assert!(ended.iter().all(|r| Arc::ptr_eq(&r.probe, &a)));
    assert_eq!(registry.live_probes(), 1);
    assert!(proc.process(&entry(3, 10, 6)).is_none());
    assert_eq!(proc.stats.unknown_probe, 1);
    // The ended call is no one's parent: pid 11's next call starts a trace of its own,
    // while pid 10's main.b call is still open and the parent of the next one there.
    assert!(proc.process(&entry(4, 11, 7)).is_none());
    assert!(proc.process(&entry(4, 10, 8)).is_none());
    let rest = proc.finish();
    let span = |call_pid: u32, n: usize| rest.iter().filter(|r| r.pid == call_pid).nth(n);
    assert_eq!(rest.len(), 3, "main.b's calls still in flight");
    assert_eq!(span(11, 0).unwrap().span.parent, None);
    assert_eq!(
        span(10, 1).unwrap().span.parent,
        Some(span(10, 0).unwrap().span.span_id)
    );
}

/// A slot given to another configuration while the old one's records are still in the
/// ring: each record decodes with the configuration that wrote it (the handle it
/// carries), whichever was read first.
#[test]
fn a_record_decodes_with_the_configuration_that_wrote_it_not_the_slots_new_one() {
    use crate::abi::cfg_handle;
    let registry = Arc::new(Registry::default());
    let (old_h, new_h) = (cfg_handle(3, 1), cfg_handle(3, 2));
    let old = Arc::new(ProbeMeta::simple("s", "main.old", true));
    let new = Arc::new(ProbeMeta::simple("t", "main.new", true));
    registry.set_probe(old_h, Some(old.clone()));
    registry.retire(old_h);
    registry.set_probe(new_h, Some(new.clone()));
    let mut proc = Processor::new(registry.clone(), Clock::new(), 64);
    assert!(proc.process(&entry(new_h, 10, 1)).is_none());
    assert!(proc.process(&entry(old_h, 10, 2)).is_none());
    let symbols = |recs: Vec<CallRecord>| -> Vec<String> {
        recs.iter().map(|r| r.probe.symbol.to_string()).collect()
    };
    // Read past the old one: its call ends unfinished, as main.old.
    let ended = proc.retire(Instant::now() + RETIRE_GRACE * 2);
    assert_eq!(symbols(ended), ["main.old"]);
    // The old handle is unknown from then on; the new one still decodes.
    assert!(proc.process(&entry(old_h, 10, 3)).is_none());
    assert_eq!(proc.stats.unknown_probe, 1);
    assert_eq!(symbols(proc.finish()), ["main.new"]);
    // A handle of a slot never set is unknown too.
    assert!(registry.probe(cfg_handle(3, 7)).is_none());
}
