//! Calls to OTLP spans: one span per call, grouped by the process it came from (whose
//! attributes become the span's resource).

use crate::events::{CallRecord, ProbeMeta, Resource, Value, ValueKind};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, Key, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Entries of a [`PerProbe`] at which retired probes are first pruned.
pub(crate) const PRUNE_MIN: usize = 1024;

/// Something cached per probe configuration, keyed by the address of its `ProbeMeta` (a
/// `usize`: a raw pointer would make the owner `!Send`).
pub(crate) struct PerProbe<T> {
    /// The `Weak` keeps the `ProbeMeta` allocation, whose address is the key, from being
    /// reused by another probe while the entry exists; dead once the probe is retired and
    /// its records are gone.
    pub(crate) map: HashMap<usize, (Weak<ProbeMeta>, T)>,
    /// The map is pruned of retired probes when it reaches this size.
    pub(crate) prune_at: usize,
}

impl<T> Default for PerProbe<T> {
    fn default() -> Self {
        Self {
            map: HashMap::new(),
            prune_at: PRUNE_MIN,
        }
    }
}

impl<T> PerProbe<T> {
    /// Drops the entries of retired probes. Pruning only when the map has doubled since
    /// keeps it linear in the probes alive, amortized. Call between batches.
    pub(crate) fn prune(&mut self) {
        if self.map.len() >= self.prune_at {
            self.map.retain(|_, (p, _)| p.strong_count() > 0);
            self.prune_at = (self.map.len() * 2).max(PRUNE_MIN);
        }
    }

    pub(crate) fn get(&mut self, probe: &Arc<ProbeMeta>, new: impl FnOnce() -> T) -> &mut T {
        let id = Arc::as_ptr(probe) as usize;
        &mut self
            .map
            .entry(id)
            .or_insert_with(|| (Arc::downgrade(probe), new()))
            .1
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// `gprobe.probe` and `code.function` of a probe, sharing its `Arc<str>`s: the metrics'
/// attributes and the first two of every span's.
pub(crate) fn probe_attributes(probe: &ProbeMeta) -> [KeyValue; 2] {
    [
        KeyValue::new("gprobe.probe", probe.spec.clone()),
        KeyValue::new("code.function", probe.symbol.clone()),
    ]
}

/// What every span of one probe configuration shares, built on its first call.
pub(crate) struct ProbeAttrs {
    pub(crate) attrs: [KeyValue; 2],
    /// The span name: the symbol, interned.
    name: &'static str,
    /// `gprobe.args.NAME` / `gprobe.returns.NAME` by capture name, in capture order.
    args: Vec<(Arc<str>, Key)>,
    returns: Vec<(Arc<str>, Key)>,
}

/// The attribute key of a captured value: usually at the value's own index (values come
/// in capture order), built once per probe and name.
fn value_key(keys: &mut Vec<(Arc<str>, Key)>, i: usize, prefix: &str, name: &Arc<str>) -> Key {
    if let Some((n, k)) = keys.get(i) {
        if Arc::ptr_eq(n, name) || **n == **name {
            return k.clone();
        }
    }
    if let Some((_, k)) = keys.iter().find(|(n, _)| **n == **name) {
        return k.clone();
    }
    let k = Key::from(Arc::<str>::from(format!("{prefix}.{name}")));
    keys.push((name.clone(), k.clone()));
    k
}

fn push_values(
    out: &mut Vec<KeyValue>,
    keys: &mut Vec<(Arc<str>, Key)>,
    prefix: &str,
    vals: &[Value],
) {
    for (i, v) in vals.iter().enumerate() {
        // A nil (JSON's null) has no attribute: OTLP has no null, and a string "nil" could
        // not be told from an error whose text is "nil".
        if matches!(v.kind, ValueKind::Null | ValueKind::Interface { nil: true }) {
            continue;
        }
        let key = value_key(keys, i, prefix, &v.name);
        out.push(match &v.kind {
            ValueKind::Bool(b) => KeyValue::new(key, *b),
            ValueKind::Int(i) => KeyValue::new(key, *i),
            ValueKind::Uint(u) if *u <= i64::MAX as u64 => KeyValue::new(key, *u as i64),
            ValueKind::Uint(u) => KeyValue::new(key, u.to_string()),
            ValueKind::Float(f) => KeyValue::new(key, *f),
            ValueKind::Pointer(p) => KeyValue::new(key, format!("{p:#x}")),
            ValueKind::Str { text, .. } => KeyValue::new(key, text.clone()),
            ValueKind::Bytes { bytes, .. } => {
                KeyValue::new(key, String::from_utf8_lossy(bytes).into_owned())
            }
            ValueKind::Interface { .. } => KeyValue::new(key, "non-nil"),
            ValueKind::Null => continue,
            ValueKind::Array { items, .. } => KeyValue::new(key, array(items)),
            ValueKind::Fault => KeyValue::new(key, "<unreadable>"),
            ValueKind::Invalid => KeyValue::new(key, "<invalid>"),
        });
    }
}

/// A slice as an OTLP array where its elements are of one kind, else its JSONL text.
fn array(items: &[ValueKind]) -> opentelemetry::Value {
    use opentelemetry::{Array, StringValue, Value};
    let all = |f: fn(&ValueKind) -> bool| items.iter().all(f);
    if all(|v| matches!(v, ValueKind::Int(_))) {
        let v = items.iter().map(|v| match v {
            ValueKind::Int(i) => *i,
            _ => 0,
        });
        return Value::Array(Array::I64(v.collect()));
    }
    if all(|v| matches!(v, ValueKind::Bool(_))) {
        let v = items.iter().map(|v| matches!(v, ValueKind::Bool(true)));
        return Value::Array(Array::Bool(v.collect()));
    }
    if all(|v| matches!(v, ValueKind::Float(_))) {
        let v = items.iter().map(|v| match v {
            ValueKind::Float(f) => *f,
            _ => 0.0,
        });
        return Value::Array(Array::F64(v.collect()));
    }
    if all(|v| matches!(v, ValueKind::Str { .. } | ValueKind::Bytes { .. })) {
        let v = items.iter().map(|v| match v {
            ValueKind::Str { text, .. } => StringValue::from(text.clone()),
            ValueKind::Bytes { bytes, .. } => {
                StringValue::from(String::from_utf8_lossy(bytes).into_owned())
            }
            _ => StringValue::from(""),
        });
        return Value::Array(Array::String(v.collect()));
    }
    let mut out = Vec::new();
    crate::export::jsonl::write_value(
        &mut out,
        &ValueKind::Array {
            items: items.to_vec(),
            truncated: false,
        },
    );
    Value::String(String::from_utf8_lossy(&out).into_owned().into())
}

/// Builds spans from calls and holds them until they are taken for export.
pub struct SpanBuilder {
    pub(crate) pending: VecDeque<(Arc<Resource>, SpanData)>,
    rng: u64,
    scope: InstrumentationScope,
    pub(crate) probes: PerProbe<ProbeAttrs>,
    /// Span names (symbols), interned: see [`SpanBuilder::record`].
    names: HashSet<&'static str>,
}

impl Default for SpanBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl SpanBuilder {
    pub fn new() -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ ((std::process::id() as u64) << 32);
        Self {
            pending: VecDeque::new(),
            rng: seed | 1,
            scope: InstrumentationScope::builder("gprobe")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            probes: PerProbe::default(),
            names: HashSet::new(),
        }
    }

    fn next_u64(&mut self) -> u64 {
        // xorshift64*: ids need uniqueness, not cryptographic strength.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d).max(1)
    }

    /// Spans built and not yet taken.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Builds one span per call.
    pub fn record(&mut self, batch: &[CallRecord]) {
        self.probes.prune();
        for rec in batch {
            let names = &mut self.names;
            let pa = self.probes.get(&rec.probe, || {
                let symbol = &rec.probe.symbol;
                // SpanData wants a `'static` name: one leaked copy per distinct symbol,
                // never freed but bounded by the functions ever traced, instead of a
                // String per span.
                let name = match names.get(&**symbol) {
                    Some(n) => *n,
                    None => {
                        let n: &'static str = Box::leak(symbol.to_string().into_boxed_str());
                        names.insert(n);
                        n
                    }
                };
                ProbeAttrs {
                    attrs: probe_attributes(&rec.probe),
                    name,
                    args: Vec::new(),
                    returns: Vec::new(),
                }
            });
            let n_values = rec.args.len() + rec.returns.as_ref().map_or(0, Vec::len);
            let mut attributes = Vec::with_capacity(4 + n_values);
            attributes.extend_from_slice(&pa.attrs);
            attributes.push(KeyValue::new("thread.id", rec.tid as i64));
            push_values(&mut attributes, &mut pa.args, "gprobe.args", &rec.args);
            if let Some(r) = &rec.returns {
                push_values(&mut attributes, &mut pa.returns, "gprobe.returns", r);
            }
            if rec.unfinished {
                attributes.push(KeyValue::new("gprobe.unfinished", true));
            }
            let name = pa.name;
            // The reader gives every call its ids (nesting); records made elsewhere
            // (tests, benchmarks) may have none: a root of its own then.
            let (trace_id, span_id, parent) = if rec.span.span_id != 0 {
                (
                    TraceId::from(rec.span.trace_id),
                    SpanId::from(rec.span.span_id),
                    rec.span.parent.map_or(SpanId::INVALID, SpanId::from),
                )
            } else {
                (
                    TraceId::from(((self.next_u64() as u128) << 64) | self.next_u64() as u128),
                    SpanId::from(self.next_u64()),
                    SpanId::INVALID,
                )
            };
            let start = UNIX_EPOCH + Duration::from_nanos(rec.start_time_unix_nano);
            let end = start + Duration::from_nanos(rec.duration_ns.unwrap_or(0));
            let span = SpanData {
                span_context: SpanContext::new(
                    trace_id,
                    span_id,
                    TraceFlags::SAMPLED,
                    false,
                    TraceState::default(),
                ),
                parent_span_id: parent,
                parent_span_is_remote: false,
                span_kind: SpanKind::Internal,
                name: Cow::Borrowed(name),
                start_time: start,
                end_time: end,
                attributes,
                dropped_attributes_count: 0,
                events: SpanEvents::default(),
                links: SpanLinks::default(),
                status: Status::Unset,
                instrumentation_scope: self.scope.clone(),
            };
            self.pending.push_back((rec.resource.clone(), span));
        }
    }

    /// Takes up to `max` of the oldest spans, grouped by process (one export request each).
    pub fn take(&mut self, max: usize) -> Vec<(Arc<Resource>, Vec<SpanData>)> {
        let mut groups: Vec<(Arc<Resource>, Vec<SpanData>)> = Vec::new();
        let n = max.min(self.pending.len());
        for (res, span) in self.pending.drain(..n) {
            match groups
                .iter_mut()
                .find(|(r, _)| Arc::ptr_eq(r, &res) || **r == *res)
            {
                Some((_, v)) => v.push(span),
                None => groups.push((res, vec![span])),
            }
        }
        groups
    }

    /// Drops every span not yet taken; returns how many.
    pub fn clear(&mut self) -> usize {
        let n = self.pending.len();
        self.pending.clear();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(probe: &Arc<ProbeMeta>, args: Vec<Value>, returns: Option<Vec<Value>>) -> CallRecord {
        CallRecord {
            probe: probe.clone(),
            pid: 4242,
            tid: 4250,
            start_time_unix_nano: 1_763_770_000_000_000_000,
            duration_ns: returns.as_ref().map(|_| 183_000),
            args,
            returns,
            resource: Arc::new(Resource::default()),
            unfinished: false,
            span: Default::default(),
        }
    }

    fn val(name: &str, kind: ValueKind) -> Value {
        Value {
            name: name.into(),
            kind,
        }
    }

    fn meta(spec: &str, symbol: &str) -> Arc<ProbeMeta> {
        Arc::new(ProbeMeta::simple(spec, symbol, true))
    }

    #[test]
    fn spans_keep_the_ids_the_reader_gave_their_calls() {
        let mut ex = SpanBuilder::new();
        let m = meta("s", "main.step");
        let mut child = call(&m, vec![], Some(vec![]));
        child.span = crate::events::SpanIds {
            trace_id: 0xabc,
            span_id: 0x2,
            parent: Some(0x1),
        };
        let root = call(&m, vec![], Some(vec![]));
        ex.record(&[child, root]);
        let spans: Vec<SpanData> = ex.take(10).into_iter().flat_map(|(_, s)| s).collect();
        assert_eq!(spans[0].span_context.trace_id(), TraceId::from(0xabc_u128));
        assert_eq!(spans[0].span_context.span_id(), SpanId::from(2_u64));
        assert_eq!(spans[0].parent_span_id, SpanId::from(1_u64));
        // A record without ids (not from the reader): a root of its own trace.
        assert_eq!(spans[1].parent_span_id, SpanId::INVALID);
        assert_ne!(spans[1].span_context.trace_id(), TraceId::INVALID);
    }

    #[test]
    fn spans_carry_the_probe_and_values_and_retired_probes_are_pruned() {
        let mut ex = SpanBuilder::new();
        let get = meta("http-client-urls", "net/http.(*Client).Get");
        let batch = vec![
            call(
                &get,
                vec![
                    val(
                        "url",
                        ValueKind::Str {
                            text: "http://a/".into(),
                            truncated: false,
                        },
                    ),
                    val("n", ValueKind::Uint(u64::MAX)),
                ],
                Some(vec![val("err", ValueKind::Interface { nil: true })]),
            ),
            // Values out of capture order still get their own keys.
            call(
                &get,
                vec![
                    val("n", ValueKind::Uint(7)),
                    val("url", ValueKind::Pointer(0xc000)),
                ],
                Some(vec![val("err", ValueKind::Fault)]),
            ),
        ];
        ex.record(&batch);
        ex.record(&batch[..1]);
        let attrs = |i: usize| -> Vec<(String, String)> {
            ex.pending[i]
                .1
                .attributes
                .iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect()
        };
        let owned = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let first = owned(&[
            ("gprobe.probe", "http-client-urls"),
            ("code.function", "net/http.(*Client).Get"),
            ("thread.id", "4250"),
            ("gprobe.args.url", "http://a/"),
            ("gprobe.args.n", "18446744073709551615"),
        ]);
        assert_eq!(attrs(0), first);
        assert_eq!(
            attrs(1),
            owned(&[
                ("gprobe.probe", "http-client-urls"),
                ("code.function", "net/http.(*Client).Get"),
                ("thread.id", "4250"),
                ("gprobe.args.n", "7"),
                ("gprobe.args.url", "0xc000"),
                ("gprobe.returns.err", "<unreadable>"),
            ])
        );
        assert_eq!(attrs(2), first);
        assert!(ex
            .pending
            .iter()
            .all(|(_, s)| s.name == "net/http.(*Client).Get"));
        assert_eq!(
            ex.pending[0].1.end_time,
            ex.pending[0].1.start_time + Duration::from_nanos(183_000)
        );
        assert_eq!(ex.probes.len(), 1);

        // A retired probe's entry goes at the next prune; a live one stays.
        let other = meta("other", "main.other");
        ex.record(&[call(&other, vec![], None)]);
        assert_eq!(ex.probes.len(), 2);
        drop(batch);
        drop(get);
        ex.probes.prune_at = 2;
        ex.record(&[call(&other, vec![], None)]);
        assert_eq!(ex.probes.len(), 1);
        assert_eq!(ex.probes.prune_at, PRUNE_MIN);
        assert_eq!(ex.pending.back().unwrap().1.name, "main.other");
    }

    #[test]
    fn spans_are_taken_oldest_first_grouped_by_process() {
        let mut ex = SpanBuilder::new();
        let p = meta("p", "main.f");
        let (a, b) = (
            Arc::new(Resource {
                attributes: vec![("process.pid", "1".into())],
            }),
            Arc::new(Resource {
                attributes: vec![("process.pid", "2".into())],
            }),
        );
        let mut calls = Vec::new();
        for i in 0..5u32 {
            let mut c = call(&p, vec![], None);
            c.tid = i;
            c.resource = if i % 2 == 0 { a.clone() } else { b.clone() };
            calls.push(c);
        }
        ex.record(&calls);
        let g = ex.take(3);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].0.get("process.pid"), Some("1"));
        assert_eq!(g[0].1.len(), 2);
        assert_eq!(g[1].1.len(), 1);
        assert_eq!(ex.len(), 2);
        assert_eq!(ex.clear(), 2);
        assert!(ex.is_empty());
    }
}
