//! Reads the events ring buffer: turns records into calls and hands them on in batches.

use super::call::{CallRecord, Clock, InternalProbe, ProbeMeta, Resource};
use super::decode::decode_values;
use super::nesting::{Nesting, Origin, SpanIds};
use super::pairing::{Pairing, PairingStats};
use super::tracecontext::parse_traceparent;
use super::value::{DecodeCtx, Value, ValueKind};
use crate::abi::decode::read_event;
use crate::abi::{cfg_slot, EV_AFTER_LOSS, EV_CALL, EV_ENTRY, EV_FILTERED, EV_RETURN};
use crate::attach::ring::Ring;
use crate::plan::Decode;
use crate::resolve::go::plan::{SPAN_CAPTURE, TRACEPARENT_CAPTURE};
use crate::stats::Stats;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, watch};

/// What the session tells the decoder: probe configurations by handle, processes by pid.
#[derive(Debug, Default)]
pub struct Registry {
    /// By slot (`abi::cfg_slot`), with the handle each was set for: a record decodes only
    /// with the configuration that wrote it, not a later one given the same slot.
    probes: RwLock<Vec<Option<Handled>>>,
    procs: RwLock<HashMap<u32, Arc<Resource>>>,
    /// Configurations freed in the kernel, whose records may still be in the ring buffer:
    /// their decoders are dropped once the reader has read past them.
    retired: Mutex<Vec<Retired>>,
}

/// A configuration's handle and decoder.
type Handled = (u32, Arc<ProbeMeta>);

/// A freed configuration: its id, its decoder, and when it was freed.
#[derive(Debug)]
struct Retired {
    id: u32,
    meta: Arc<ProbeMeta>,
    at: Instant,
}

/// How long after a configuration is freed its records may still arrive: BPF programs
/// that read it before it was freed commit their records microseconds later.
const RETIRE_GRACE: Duration = Duration::from_millis(100);

impl Registry {
    pub fn set_probe(&self, id: u32, meta: Option<Arc<ProbeMeta>>) {
        let mut p = self.probes.write().unwrap_or_else(|e| e.into_inner());
        let i = cfg_slot(id) as usize;
        if p.len() <= i {
            p.resize(i + 1, None);
        }
        p[i] = meta.map(|m| (id, m));
    }

    /// The decoder of configuration `id`: the one its slot holds, or one retired but not
    /// yet forgotten.
    pub fn probe(&self, id: u32) -> Option<Arc<ProbeMeta>> {
        {
            let p = self.probes.read().unwrap_or_else(|e| e.into_inner());
            match p.get(cfg_slot(id) as usize) {
                Some(Some((h, m))) if *h == id => return Some(m.clone()),
                _ => {}
            }
        }
        lock(&self.retired)
            .iter()
            .rev()
            .find(|r| r.id == id)
            .map(|r| r.meta.clone())
    }

    /// Configuration `id` was freed in the kernel (no record of it is written any more):
    /// its decoder goes once the records written before are read ([`Processor::retire`]).
    pub fn retire(&self, id: u32) {
        if let Some(meta) = self.probe(id) {
            lock(&self.retired).push(Retired {
                id,
                meta,
                at: Instant::now(),
            });
        }
    }

    /// Takes the configurations freed before `before`, and forgets their decoders (unless
    /// the id was given to another configuration since).
    fn take_retired(&self, before: Instant) -> Vec<Arc<ProbeMeta>> {
        let gone: Vec<Retired> = {
            let mut r = lock(&self.retired);
            if r.iter().all(|x| x.at >= before) {
                return Vec::new();
            }
            let (gone, keep) = std::mem::take(&mut *r)
                .into_iter()
                .partition(|x| x.at < before);
            *r = keep;
            gone
        };
        let mut p = self.probes.write().unwrap_or_else(|e| e.into_inner());
        for g in &gone {
            if let Some(slot) = p.get_mut(cfg_slot(g.id) as usize) {
                if slot.as_ref().is_some_and(|(h, _)| *h == g.id) {
                    *slot = None;
                }
            }
        }
        gone.into_iter().map(|g| g.meta).collect()
    }

    /// How many configurations have a decoder.
    #[cfg(test)]
    pub fn live_probes(&self) -> usize {
        let p = self.probes.read().unwrap_or_else(|e| e.into_inner());
        p.iter().filter(|m| m.is_some()).count()
    }

    pub fn set_process(&self, pid: u32, res: Option<Arc<Resource>>) {
        let mut p = self.procs.write().unwrap_or_else(|e| e.into_inner());
        match res {
            Some(r) => p.insert(pid, r),
            None => p.remove(&pid),
        };
    }

    pub fn process(&self, pid: u32) -> Option<Arc<Resource>> {
        self.procs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&pid)
            .cloned()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counters of the decoding stage.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReaderStats {
    pub records: u64,
    pub malformed: u64,
    /// Records of a probe configuration that was removed meanwhile.
    pub unknown_probe: u64,
    pub pairing: PairingStats,
}

/// Record-to-call processing, independent of the ring buffer (benchmarks feed it directly).
pub struct Processor {
    registry: Arc<Registry>,
    clock: Clock,
    pairing: Pairing,
    nesting: Nesting,
    pub stats: ReaderStats,
    counts: Option<Stats>,
    sampler: super::sampling::Sampler,
    // Per-batch caches: avoid a lock per record.
    probe_cache: HashMap<u32, Arc<ProbeMeta>>,
    proc_cache: HashMap<u32, Arc<Resource>>,
}

impl Processor {
    pub fn new(registry: Arc<Registry>, clock: Clock, max_in_flight: usize) -> Self {
        Self {
            registry,
            clock,
            pairing: Pairing::new(max_in_flight),
            nesting: Nesting::new(max_in_flight),
            stats: ReaderStats::default(),
            counts: None,
            sampler: Default::default(),
            probe_cache: HashMap::new(),
            proc_cache: HashMap::new(),
        }
    }

    /// Where unfinished and abandoned calls are counted, per probe.
    pub fn with_stats(mut self, stats: Stats) -> Self {
        self.counts = Some(stats);
        self
    }

    /// Call at the start of each batch: configurations and processes may have changed.
    pub fn new_batch(&mut self) {
        self.probe_cache.clear();
        self.proc_cache.clear();
    }

    fn meta(&mut self, id: u32) -> Option<Arc<ProbeMeta>> {
        if let Some(m) = self.probe_cache.get(&id) {
            return Some(m.clone());
        }
        let m = self.registry.probe(id)?;
        self.probe_cache.insert(id, m.clone());
        Some(m)
    }

    fn resource(&mut self, pid: u32) -> Arc<Resource> {
        if let Some(r) = self.proc_cache.get(&pid) {
            return r.clone();
        }
        let r = self.registry.process(pid).unwrap_or_else(|| {
            Arc::new(Resource {
                attributes: vec![("process.pid", pid.to_string())],
            })
        });
        self.proc_cache.insert(pid, r.clone());
        r
    }

    /// Processes one ring buffer record; returns a call when one completed (and its probe's
    /// `sample:` keeps it).
    pub fn process(&mut self, raw: &[u8]) -> Option<CallRecord> {
        let rec = self.process_record(raw)?;
        self.sample_keeps(&rec).then_some(rec)
    }

    /// Whether `rec`'s probe's `sample:` keeps it; one it leaves out is counted.
    fn sample_keeps(&self, rec: &CallRecord) -> bool {
        let keep = self.sampler.keeps(rec);
        if let (false, Some(st)) = (keep, &self.counts) {
            st.add_sampled_out(&rec.probe.key, rec.duration_ns);
        }
        keep
    }

    fn process_record(&mut self, raw: &[u8]) -> Option<CallRecord> {
        self.stats.records += 1;
        let Some(mut ev) = read_event(raw) else {
            self.stats.malformed += 1;
            return None;
        };
        if ev.kind & EV_AFTER_LOSS != 0 {
            // A lost record may be a RETURN: open calls could be stale, and a wrong parent
            // is worse than none.
            ev.kind &= !EV_AFTER_LOSS;
            self.nesting.restart();
        }
        // The call failed its `when:` at the return (counted in BPF): its entry goes.
        let filtered = ev.kind & EV_FILTERED != 0;
        ev.kind &= !EV_FILTERED;
        let hdr = std::mem::size_of::<crate::abi::GpEvent>();
        let data = raw.get(hdr..hdr + ev.data_len as usize).unwrap_or(&[]);
        let Some(meta) = self.meta(ev.probe_id) else {
            self.stats.unknown_probe += 1;
            return None;
        };
        let ctx = DecodeCtx {
            redact: meta.redact,
            types: meta.types.as_ref().and_then(|t| t.for_pid(ev.pid)),
        };
        let mut values = decode_values(data, &meta.captures, &ctx);
        match ev.kind {
            EV_CALL | EV_ENTRY => {
                if meta.sample.is_some() {
                    self.sampler.note_incoming(&values, TRACEPARENT_CAPTURE);
                }
                let origin = take_origin(&meta, &mut values);
                let span = if meta.internal.is_some() {
                    Default::default()
                } else if ev.kind == EV_CALL {
                    self.nesting.call(ev.pid, ev.goroutine, origin)
                } else {
                    self.nesting.entry(ev.pid, ev.goroutine, ev.call_id, origin)
                };
                let rec = CallRecord {
                    probe: meta,
                    pid: ev.pid,
                    tid: ev.tid,
                    start_time_unix_nano: self.clock.to_unix_nanos(ev.ts_ns),
                    duration_ns: None,
                    args: values,
                    returns: None,
                    resource: self.resource(ev.pid),
                    unfinished: false,
                    span,
                };
                if ev.kind == EV_CALL {
                    return Some(rec);
                }
                if let (Some(old), Some(st)) = (self.pairing.entry(ev.call_id, rec), &self.counts) {
                    if old.probe.internal.is_none() {
                        st.add_abandoned(&old.probe.key, 1);
                    }
                }
                self.stats.pairing = self.pairing.stats;
                None
            }
            EV_RETURN => {
                self.nesting.ret(ev.pid, ev.goroutine, ev.call_id);
                let r = self.pairing.ret(ev.call_id, ev.duration_ns, values);
                self.stats.pairing = self.pairing.stats;
                if filtered {
                    return None;
                }
                match r {
                    Some(rec) if rec.probe.internal == Some(InternalProbe::Newproc) => {
                        if let (Some(parent), Some(child)) = (
                            word(rec.args.first()),
                            word(rec.returns.as_ref().and_then(|r| r.first())),
                        ) {
                            self.nesting.spawned(rec.pid, parent, child);
                        }
                        None
                    }
                    r => r,
                }
            }
            _ => {
                self.stats.malformed += 1;
                None
            }
        }
    }

    pub fn finish(&mut self) -> Vec<CallRecord> {
        let mut out = self.pairing.drain_unfinished();
        self.stats.pairing = self.pairing.stats;
        out.retain(|r| r.probe.internal.is_none());
        self.unfinished(out)
    }

    /// Process `pid` exited: its calls in flight, reported unfinished now. Its resource is
    /// forgotten (its records were all read before this is called).
    pub fn process_exited(&mut self, pid: u32) -> Vec<CallRecord> {
        let mut out = self.pairing.drain_pid(pid);
        out.retain(|r| r.probe.internal.is_none());
        self.nesting.process_exited(pid);
        self.registry.set_process(pid, None);
        self.proc_cache.remove(&pid);
        self.unfinished(out)
    }

    /// Configurations freed at least [`RETIRE_GRACE`] before `read_from` (when the drain
    /// that just ended began: every record they wrote has been read): their decoders are
    /// dropped, and their calls still in flight, whose returns can no longer be seen, are
    /// reported unfinished now.
    pub fn retire(&mut self, read_from: Instant) -> Vec<CallRecord> {
        let Some(before) = read_from.checked_sub(RETIRE_GRACE) else {
            return Vec::new();
        };
        let gone = self.registry.take_retired(before);
        if gone.is_empty() {
            return Vec::new();
        }
        self.probe_cache.clear();
        let ended = self
            .pairing
            .drain_where(|r| gone.iter().any(|m| Arc::ptr_eq(m, &r.probe)));
        let mut by_pid: HashMap<u32, Vec<u64>> = HashMap::new();
        for (id, r) in &ended {
            by_pid.entry(r.pid).or_default().push(*id);
        }
        // Left open, they would be the parent of every later call of their goroutines.
        for (pid, ids) in by_pid {
            self.nesting.forget_calls(pid, &ids);
        }
        let mut out: Vec<CallRecord> = ended.into_iter().map(|(_, r)| r).collect();
        out.retain(|r| r.probe.internal.is_none());
        self.unfinished(out)
    }

    /// Calls that ended unfinished: those `sample:` keeps, counted. A call whose `when:`
    /// needed its return (lost to a full ring buffer, or never made) is undecided: counted,
    /// never delivered (it may not hold).
    fn unfinished(&self, mut recs: Vec<CallRecord>) -> Vec<CallRecord> {
        recs.retain(|r| {
            if r.probe.when_at_return {
                if let Some(st) = &self.counts {
                    st.add_undecided(&r.probe.key, 1);
                }
                return false;
            }
            self.sample_keeps(r)
        });
        if let Some(st) = &self.counts {
            for r in &recs {
                st.add_unfinished(&r.probe.key, 1);
            }
        }
        recs
    }
}

/// Where a span belongs beyond its goroutine, from the hidden captures (taken out of the
/// values: they are never output): the span BPF made for a propagating probe, else the
/// caller's span from a handler's incoming `traceparent`.
fn take_origin(meta: &ProbeMeta, values: &mut Vec<Value>) -> Origin {
    if !meta
        .captures
        .iter()
        .any(|(_, d)| matches!(d, Decode::Header | Decode::Span))
    {
        return Origin::Local;
    }
    let mut take = |name: &str| {
        let i = values.iter().position(|v| &*v.name == name)?;
        match values.remove(i).kind {
            ValueKind::Str { text, .. } => Some(text),
            _ => None,
        }
    };
    let caller = take(TRACEPARENT_CAPTURE).and_then(|t| parse_traceparent(&t));
    if let Some(made) = take(SPAN_CAPTURE).and_then(|t| parse_made(&t)) {
        return Origin::Made(made);
    }
    caller.map_or(Origin::Local, Origin::Caller)
}

/// `Decode::Span`'s text: `<trace id: 32 hex>-<span id: 16 hex>-<parent: 16 hex, 0 none>`.
fn parse_made(text: &str) -> Option<SpanIds> {
    let mut parts = text.split('-');
    let trace_id = u128::from_str_radix(parts.next()?, 16).ok()?;
    let span_id = u64::from_str_radix(parts.next()?, 16).ok()?;
    let parent = u64::from_str_radix(parts.next()?, 16).ok()?;
    (trace_id != 0 && span_id != 0).then_some(SpanIds {
        trace_id,
        span_id,
        parent: (parent != 0).then_some(parent),
    })
}

/// A captured pointer or integer as a word (runtime.newproc1's goroutines).
fn word(v: Option<&Value>) -> Option<u64> {
    match v?.kind {
        ValueKind::Pointer(p) => Some(p),
        ValueKind::Uint(u) => Some(u),
        ValueKind::Int(i) => Some(i as u64),
        _ => None,
    }
}

/// Reads `ring` until `stop` turns true, then drains it, flushes unfinished calls and
/// returns the stage's counters. Batches go to `tx`; a slow consumer slows this loop,
/// and the ring buffer (not memory) absorbs it, with losses counted in BPF.
pub async fn run(
    ring: Ring,
    mut proc: Processor,
    tx: mpsc::Sender<Vec<CallRecord>>,
    mut stop: watch::Receiver<bool>,
    exits: std::sync::mpsc::Receiver<u32>,
    poll: Duration,
) -> std::io::Result<ReaderStats> {
    // SAFETY: the Ring owns its map fd for as long as the AsyncFd owns the Ring, and
    // as_raw_fd always returns that same fd.
    let mut afd = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let read_from = Instant::now();
        let stopping = tokio::select! {
            g = afd.readable_mut() => {
                let mut g = g?;
                g.clear_ready();
                false
            }
            _ = tick.tick() => false,
            _ = stop.changed() => true,
        };
        // Only exits known before the drain starts: every record their processes wrote is
        // in the ring by then. One that arrives during the drain may still have returns
        // behind the drain's end, and waits for the next one.
        let exited: Vec<u32> = exits.try_iter().collect();
        loop {
            let (more, batch) = drain(afd.get_mut(), &mut proc);
            if !batch.is_empty() && tx.send(batch).await.is_err() {
                return Ok(proc.stats);
            }
            if !more {
                break;
            }
            // A full ring keeps this loop busy for as long as the programs write: give the
            // runtime's other tasks (process events, which holds and detaches wait for) their
            // turn after each batch.
            tokio::task::yield_now().await;
        }
        // The ring holds nothing older than these exits now: their calls still in flight
        // will never return.
        let mut ended = Vec::new();
        for pid in exited {
            ended.extend(proc.process_exited(pid));
        }
        ended.extend(proc.retire(read_from));
        if !ended.is_empty() && tx.send(ended).await.is_err() {
            return Ok(proc.stats);
        }
        if stopping || *stop.borrow() {
            break;
        }
    }
    // Final drain after the probes were detached.
    loop {
        let (more, batch) = drain(afd.get_mut(), &mut proc);
        if !batch.is_empty() {
            let _ = tx.send(batch).await;
        }
        if !more {
            break;
        }
    }
    let rest = proc.finish();
    if !rest.is_empty() {
        let _ = tx.send(rest).await;
    }
    Ok(proc.stats)
}

/// Reads up to a batch of records; the flag says whether the batch limit stopped it.
fn drain(ring: &mut Ring, proc: &mut Processor) -> (bool, Vec<CallRecord>) {
    const BATCH: usize = 4096;
    proc.new_batch();
    let mut out = Vec::new();
    let mut n = 0;
    while let Some(item) = ring.next_record() {
        if let Some(rec) = proc.process(&item) {
            out.push(rec);
        }
        n += 1;
        // Bounded batches: output starts while a burst is still draining.
        if n >= BATCH {
            return (true, out);
        }
    }
    (false, out)
}

#[cfg(test)]
mod tests;
