//! Spans nest like the calls they record: a call that starts while another probed call is
//! open on the same goroutine (Go: runtime.g, the goroutine's identity while it lives; C:
//! the thread) is that call's child, in its trace. The ring buffer hands records over in
//! the order their uprobes fired, so one stack per goroutine of the calls open on it is
//! enough: an entry pushes, its return pops (and anything above it, whose returns will
//! never come: a panic unwound them, or they were lost and counted).

use super::tracecontext::Remote;
use std::collections::HashMap;

/// A span's identity (W3C trace context): its trace, itself, and its parent, if any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanIds {
    pub trace_id: u128,
    pub span_id: u64,
    /// `None` for a root span.
    pub parent: Option<u64>,
}

/// What a record says of its span's place, besides the goroutine it ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Origin {
    /// Nothing: nested by goroutine alone.
    #[default]
    Local,
    /// A handler's incoming traceparent: the caller's span, where no call is open.
    Caller(Remote),
    /// A propagating probe's span, whose ids BPF made (`CAP_SPAN`).
    Made(SpanIds),
}

/// A call open on a goroutine: its call id (what its return carries) and its span.
#[derive(Debug, Clone, Copy)]
struct Open {
    call_id: u64,
    ids: SpanIds,
}

/// Deeper than this, the oldest open calls of a goroutine are forgotten (their children
/// become roots): bounds memory on a goroutine whose returns are never seen.
const MAX_DEPTH: usize = 256;

#[derive(Debug)]
pub struct Nesting {
    open: HashMap<(u32, u64), Vec<Open>>,
    /// Goroutines started (runtime.newproc) while their parent had a call open: that
    /// call's span is the parent of their calls opened on an empty stack. A goroutine's
    /// entry is replaced (or removed) when its `g` is reused for a new goroutine.
    inherited: HashMap<(u32, u64), SpanIds>,
    /// Most goroutines with open calls remembered; past it, all are forgotten at once
    /// (counted): a goroutine whose calls never return must not grow this without end.
    capacity: usize,
    pub forgotten: u64,
    rng: u64,
}

impl Nesting {
    pub fn new(capacity: usize) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ ((std::process::id() as u64) << 32);
        Self {
            open: HashMap::new(),
            inherited: HashMap::new(),
            capacity: capacity.max(1),
            forgotten: 0,
            rng: seed | 1,
        }
    }

    fn next_u64(&mut self) -> u64 {
        // xorshift64*: ids need uniqueness, not cryptographic strength.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d).max(1)
    }

    /// The ids of a call starting on goroutine `g` of `pid`: a child of the innermost call
    /// open there; else of the caller's span `remote` (a handler's incoming traceparent),
    /// else of what the goroutine inherited; else the root of a new trace.
    fn ids(&mut self, pid: u32, g: u64, origin: Origin) -> SpanIds {
        let open = self
            .open
            .get(&(pid, g))
            .and_then(|s| s.last())
            .map(|o| o.ids);
        let remote = match origin {
            // A propagating span keeps the ids BPF gave it (requests carried them already);
            // the agent only finds it a nearer parent in the same trace.
            Origin::Made(m) => {
                let parent = match open {
                    Some(p) if p.trace_id == m.trace_id => Some(p.span_id),
                    _ => m.parent,
                };
                return SpanIds { parent, ..m };
            }
            Origin::Caller(r) => Some(r),
            Origin::Local => None,
        };
        let span_id = self.next_u64();
        if let (None, Some(r)) = (open, remote) {
            return SpanIds {
                trace_id: r.trace_id,
                span_id,
                parent: Some(r.span_id),
            };
        }
        let parent = open.or_else(|| self.inherited.get(&(pid, g)).copied());
        match parent {
            Some(p) => SpanIds {
                trace_id: p.trace_id,
                span_id,
                parent: Some(p.span_id),
            },
            None => SpanIds {
                trace_id: ((self.next_u64() as u128) << 64) | self.next_u64() as u128,
                span_id,
                parent: None,
            },
        }
    }

    /// The span a call starting on goroutine `g` would be the child of: the innermost call
    /// open on it, else what it inherited from the goroutine that started it.
    fn current(&self, pid: u32, g: u64) -> Option<SpanIds> {
        self.open
            .get(&(pid, g))
            .and_then(|s| s.last())
            .map(|o| o.ids)
            .or_else(|| self.inherited.get(&(pid, g)).copied())
    }

    /// Goroutine `child` was started by `parent` (runtime.newproc1): it inherits the span
    /// `parent` is in, if any.
    pub fn spawned(&mut self, pid: u32, parent: u64, child: u64) {
        match self.current(pid, parent) {
            Some(ids) => {
                if self.inherited.len() >= self.capacity {
                    self.forgotten += self.inherited.len() as u64;
                    self.inherited.clear();
                }
                self.inherited.insert((pid, child), ids);
            }
            None => {
                self.inherited.remove(&(pid, child));
            }
        }
    }

    /// A call without a return probe: a child of the open call, never a parent itself.
    pub fn call(&mut self, pid: u32, g: u64, origin: Origin) -> SpanIds {
        self.ids(pid, g, origin)
    }

    /// A call with a return probe started: it is open until [`Nesting::ret`].
    pub fn entry(&mut self, pid: u32, g: u64, call_id: u64, origin: Origin) -> SpanIds {
        let ids = self.ids(pid, g, origin);
        if self.open.len() >= self.capacity && !self.open.contains_key(&(pid, g)) {
            self.forgotten += self.open.values().map(|s| s.len() as u64).sum::<u64>();
            self.open.clear();
        }
        let stack = self.open.entry((pid, g)).or_default();
        if stack.len() >= MAX_DEPTH {
            stack.remove(0);
            self.forgotten += 1;
        }
        stack.push(Open { call_id, ids });
        ids
    }

    /// The call `call_id` returned: it and any call opened above it are closed.
    pub fn ret(&mut self, pid: u32, g: u64, call_id: u64) {
        let Some(stack) = self.open.get_mut(&(pid, g)) else {
            return;
        };
        if let Some(i) = stack.iter().rposition(|o| o.call_id == call_id) {
            stack.truncate(i);
        }
        if stack.is_empty() {
            self.open.remove(&(pid, g));
        }
    }

    /// Forgets every open call and inherited span (a record was lost: any of them may be
    /// stale). Calls then start new traces until their goroutines open calls again.
    pub fn restart(&mut self) {
        self.forgotten += self.open.values().map(|s| s.len() as u64).sum::<u64>();
        self.open.clear();
        self.inherited.clear();
    }

    /// Calls `call_ids` of `pid` will never return (their return probe was removed): they
    /// are no one's parent any more. Calls opened above them stay open.
    pub fn forget_calls(&mut self, pid: u32, call_ids: &[u64]) {
        self.open.retain(|(p, _), stack| {
            if *p == pid {
                stack.retain(|o| !call_ids.contains(&o.call_id));
            }
            !stack.is_empty()
        });
    }

    /// Process `pid` is gone: its open calls with it.
    pub fn process_exited(&mut self, pid: u32) {
        self.open.retain(|(p, _), _| *p != pid);
        self.inherited.retain(|(p, _), _| *p != pid);
    }

    /// Goroutines with open calls.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_nest_per_goroutine_with_siblings_and_recursion() {
        let mut n = Nesting::new(16);
        // Goroutine 1: a(b(c), b) with a call d inside the second b; goroutine 2 apart.
        let a = n.entry(7, 1, 10, Origin::Local);
        let other = n.entry(7, 2, 20, Origin::Local);
        let b1 = n.entry(7, 1, 11, Origin::Local);
        let c = n.entry(7, 1, 12, Origin::Local);
        n.ret(7, 1, 12);
        n.ret(7, 1, 11);
        let b2 = n.entry(7, 1, 13, Origin::Local);
        let d = n.call(7, 1, Origin::Local);
        n.ret(7, 1, 13);
        n.ret(7, 1, 10);
        assert_eq!(a.parent, None);
        assert_eq!(other.parent, None);
        assert_ne!(a.trace_id, other.trace_id);
        for (child, parent) in [(b1, a), (c, b1), (b2, a), (d, b2)] {
            assert_eq!(child.parent, Some(parent.span_id));
            assert_eq!(child.trace_id, a.trace_id);
        }
        let ids = [a.span_id, b1.span_id, c.span_id, b2.span_id, d.span_id];
        let unique: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len());
        n.ret(7, 2, 20);
        assert!(n.is_empty(), "every stack closed");
        // The same goroutine later: a new trace.
        let again = n.entry(7, 1, 30, Origin::Local);
        assert_eq!(again.parent, None);
        assert_ne!(again.trace_id, a.trace_id);
        // Recursion: each level the child of the one above.
        let mut up = again;
        for id in 31..40 {
            let s = n.entry(7, 1, id, Origin::Local);
            assert_eq!(s.parent, Some(up.span_id));
            up = s;
        }
    }

    #[test]
    fn a_return_closes_calls_left_open_above_it_and_exits_forget() {
        let mut n = Nesting::new(16);
        let a = n.entry(1, 1, 1, Origin::Local);
        n.entry(1, 1, 2, Origin::Local); // its return never comes (a panic unwound it)
        n.ret(1, 1, 1);
        assert!(n.is_empty());
        let b = n.entry(1, 1, 3, Origin::Local);
        assert_eq!(b.parent, None, "not a child of the unwound call");
        assert_ne!(b.trace_id, a.trace_id);
        n.entry(2, 5, 4, Origin::Local);
        n.process_exited(2);
        assert_eq!(n.len(), 1);
    }

    #[test]
    fn goroutines_started_inside_a_call_are_in_its_trace() {
        let mut n = Nesting::new(16);
        let handler = n.entry(1, 10, 1, Origin::Local);
        n.spawned(1, 10, 20); // go worker() inside the handler
        let before_return = n.call(1, 20, Origin::Local);
        n.ret(1, 10, 1); // the handler returns before the goroutine's work
        let work = n.entry(1, 20, 2, Origin::Local);
        let inner = n.call(1, 20, Origin::Local);
        n.ret(1, 20, 2);
        assert_eq!(before_return.parent, Some(handler.span_id));
        assert_eq!(work.parent, Some(handler.span_id));
        assert_eq!(work.trace_id, handler.trace_id);
        assert_eq!(inner.parent, Some(work.span_id));
        // A goroutine started outside any span, reusing g 20: no parent.
        n.spawned(1, 30, 20);
        assert_eq!(n.call(1, 20, Origin::Local).parent, None);
        // Grandchildren: started by a goroutine that inherited.
        let h2 = n.entry(1, 10, 3, Origin::Local);
        n.spawned(1, 10, 40);
        n.spawned(1, 40, 50);
        assert_eq!(n.call(1, 50, Origin::Local).parent, Some(h2.span_id));
    }

    #[test]
    fn after_a_lost_record_no_call_is_the_child_of_a_possibly_stale_one() {
        let mut n = Nesting::new(16);
        let a = n.entry(1, 1, 1, Origin::Local);
        n.spawned(1, 1, 2);
        n.restart(); // a's RETURN may be the record that was lost
        assert_eq!(n.call(1, 1, Origin::Local).parent, None);
        assert_eq!(n.call(1, 2, Origin::Local).parent, None);
        assert!(n.is_empty());
        assert_eq!(n.forgotten, 1);
        let b = n.entry(1, 1, 3, Origin::Local);
        assert_ne!(b.trace_id, a.trace_id);
    }

    #[test]
    fn a_handler_with_a_traceparent_joins_the_callers_trace() {
        let mut n = Nesting::new(16);
        let caller = Remote {
            trace_id: 0xabc,
            span_id: 0xdef,
        };
        // Inherited from the goroutine that started it, and still the caller's child.
        let spawner = n.entry(1, 1, 1, Origin::Local);
        n.spawned(1, 1, 2);
        let handler = n.entry(1, 2, 2, Origin::Caller(caller));
        assert_eq!((handler.trace_id, handler.parent), (0xabc, Some(0xdef)));
        let child = n.entry(1, 2, 3, Origin::Local);
        assert_eq!(
            (child.trace_id, child.parent),
            (0xabc, Some(handler.span_id))
        );
        // A header seen on a call nested in an open one changes nothing: it is a child.
        let nested = n.call(
            1,
            2,
            Origin::Caller(Remote {
                trace_id: 0x1,
                span_id: 0x2,
            }),
        );
        assert_eq!(
            (nested.trace_id, nested.parent),
            (0xabc, Some(child.span_id))
        );
        assert_ne!(spawner.trace_id, 0xabc);
    }

    #[test]
    fn spans_made_in_bpf_keep_their_ids_and_find_nearer_parents_in_their_trace() {
        let mut n = Nesting::new(16);
        let made = |trace_id, span_id, parent| {
            Origin::Made(SpanIds {
                trace_id,
                span_id,
                parent,
            })
        };
        // A root propagating span, a local child, then a nested propagating span whose BPF
        // parent is the outer one: its nearer parent in the same trace is the local child.
        let outer = n.entry(1, 1, 1, made(0x77, 0x10, None));
        assert_eq!(
            (outer.trace_id, outer.span_id, outer.parent),
            (0x77, 0x10, None)
        );
        let local = n.entry(1, 1, 2, Origin::Local);
        assert_eq!((local.trace_id, local.parent), (0x77, Some(0x10)));
        let inner = n.entry(1, 1, 3, made(0x77, 0x20, Some(0x10)));
        assert_eq!((inner.span_id, inner.parent), (0x20, Some(local.span_id)));
        // Inside a span of another trace (BPF saw no propagating span open): BPF's ids win.
        let other = n.entry(1, 1, 4, made(0x99, 0x30, Some(0x5)));
        assert_eq!((other.trace_id, other.parent), (0x99, Some(0x5)));
    }

    #[test]
    fn memory_is_bounded() {
        let mut n = Nesting::new(4);
        for g in 0..10 {
            n.entry(1, g, g, Origin::Local);
        }
        assert!(n.len() <= 4);
        assert!(n.forgotten >= 4);
        for id in 0..(MAX_DEPTH as u64 + 10) {
            n.entry(9, 9, 1000 + id, Origin::Local);
        }
        assert_eq!(n.open[&(9, 9)].len(), MAX_DEPTH);
    }
}
