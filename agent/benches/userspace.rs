//! The userspace path alone: ring buffer records (built with the layout of
//! agent/src/abi/mod.rs) -> `events::reader::Processor::process` -> JSONL or OTLP spans.
//! Single-threaded, so elements per second are calls per second per core.
//!
//!     cargo bench -p gprobe-agent --bench userspace
//!
//! bench/run.sh runs it and reads criterion's estimates (CRITERION_HOME).

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use gprobe_agent::abi::{GpEvent, GpValue, EV_CALL, EV_ENTRY, EV_RETURN};
use gprobe_agent::events::reader::{Processor, Registry};
use gprobe_agent::events::{CallRecord, Clock, ProbeMeta, Resource};
use gprobe_agent::export::jsonl::write_record;
use gprobe_agent::export::otlp::SpanBuilder;
use gprobe_agent::plan::Decode;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records per batch: the reader's batch limit (events/reader.rs `drain`).
const BATCH: usize = 4096;
const PID: u32 = 4242;

const INT_CFG: u32 = 1;
const STR_CFG: u32 = 2;
const LAT_ENTRY_CFG: u32 = 3;
const LAT_RET_CFG: u32 = 4;

fn int64() -> Decode {
    Decode::Int {
        size: 8,
        signed: true,
    }
}

fn registry() -> Arc<Registry> {
    let reg = Arc::new(Registry::default());
    let meta = |latency, caps: Vec<(&str, Decode)>| {
        let mut m = ProbeMeta::simple("bench", "main.target", latency);
        m.captures = caps.into_iter().map(|(n, d)| (Arc::from(n), d)).collect();
        Some(Arc::new(m))
    };
    reg.set_probe(INT_CFG, meta(false, vec![("n", int64())]));
    reg.set_probe(
        STR_CFG,
        meta(false, vec![("n", int64()), ("s", Decode::Str)]),
    );
    reg.set_probe(LAT_ENTRY_CFG, meta(true, vec![("n", int64())]));
    reg.set_probe(LAT_RET_CFG, meta(true, vec![("r0", int64())]));
    // The resource `gprobe run` gives a process (local.rs `resource_of`).
    reg.set_process(
        PID,
        Some(Arc::new(Resource {
            attributes: vec![
                ("service.name", "loop".into()),
                ("process.pid", PID.to_string()),
                ("process.executable.path", "/tmp/gprobe-bench/loop".into()),
                ("host.name", "bench-host".into()),
            ],
        })),
    );
    reg
}

/// One ring buffer record: a `GpEvent` header and its values, each a `GpValue` and its
/// bytes padded to 8, exactly as gprobe.bpf.c writes them.
fn record(kind: u16, probe_id: u32, seq: u64, values: &[&[u8]]) -> Vec<u8> {
    let mut data = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let hdr = GpValue {
            cap: i as u8,
            flags: 0,
            len: v.len() as u16,
            full_len: v.len() as u32,
        };
        data.push(hdr.cap);
        data.push(hdr.flags);
        data.extend_from_slice(&hdr.len.to_ne_bytes());
        data.extend_from_slice(&hdr.full_len.to_ne_bytes());
        data.extend_from_slice(v);
        data.resize(data.len().div_ceil(8) * 8, 0);
    }
    let ev = GpEvent {
        ts_ns: 1_000_000_000 + seq * 4_000,
        call_id: if kind == EV_CALL { 0 } else { (seq << 10) | 1 },
        goroutine: 0x00c0_0000_6000,
        duration_ns: if kind == EV_RETURN { 900 } else { 0 },
        pid: PID,
        tid: PID + 1,
        probe_id,
        kind,
        data_len: data.len() as u16,
    };
    let mut out = Vec::with_capacity(48 + data.len());
    for w in [ev.ts_ns, ev.call_id, ev.goroutine, ev.duration_ns] {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    for w in [ev.pid, ev.tid, ev.probe_id] {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    out.extend_from_slice(&ev.kind.to_ne_bytes());
    out.extend_from_slice(&ev.data_len.to_ne_bytes());
    assert_eq!(out.len(), std::mem::size_of::<GpEvent>());
    out.extend_from_slice(&data);
    out
}

/// A batch of records for `BATCH` calls, and how many records that is.
fn workload(name: &str) -> Vec<Vec<u8>> {
    let s64 = [b'x'; 64];
    (0..BATCH as u64)
        .flat_map(|i| {
            let n = (i as i64).to_le_bytes();
            match name {
                "int" => vec![record(EV_CALL, INT_CFG, i, &[&n])],
                "str64" => vec![record(EV_CALL, STR_CFG, i, &[&n, &s64])],
                "latency" => vec![
                    record(EV_ENTRY, LAT_ENTRY_CFG, i, &[&n]),
                    record(EV_RETURN, LAT_RET_CFG, i, &[&(i as i64 + 64).to_le_bytes()]),
                ],
                _ => unreachable!(),
            }
        })
        .collect()
}

/// What `reader::drain` does per batch: reset the caches, process every record.
fn process_batch(p: &mut Processor, recs: &[Vec<u8>], out: &mut Vec<CallRecord>) {
    p.new_batch();
    for r in recs {
        if let Some(c) = p.process(r) {
            out.push(c);
        }
    }
}

fn bench_jsonl(c: &mut Criterion) {
    let mut g = c.benchmark_group("jsonl");
    g.throughput(Throughput::Elements(BATCH as u64));
    for name in ["int", "str64", "latency"] {
        let recs = workload(name);
        let mut p = Processor::new(registry(), Clock::new(), 65_536);
        let mut calls = Vec::with_capacity(BATCH);
        let mut out = Vec::with_capacity(BATCH * 512);
        // Sanity: every call comes out, none is lost or unpaired.
        process_batch(&mut p, &recs, &mut calls);
        assert_eq!(calls.len(), BATCH, "{name}");
        write_record(&calls[0], &mut out);
        assert!(out.starts_with(b"{\"probe\":\"bench\""), "{name}");
        g.bench_function(BenchmarkId::new("process+encode", name), |b| {
            b.iter(|| {
                calls.clear();
                out.clear();
                process_batch(&mut p, &recs, &mut calls);
                for c in &calls {
                    write_record(c, &mut out);
                }
                black_box(out.len())
            })
        });
        g.bench_function(BenchmarkId::new("process", name), |b| {
            b.iter(|| {
                calls.clear();
                process_batch(&mut p, &recs, &mut calls);
                black_box(calls.len())
            })
        });
        assert_eq!(p.stats.malformed + p.stats.unknown_probe, 0);
        assert_eq!(
            p.stats.pairing.orphan_returns + p.stats.pairing.abandoned,
            0
        );
    }
    g.finish();
}

fn bench_otlp(c: &mut Criterion) {
    // Span building alone (what the OTLP task does per call); nothing is exported.
    let exporter = SpanBuilder::new;
    let mut g = c.benchmark_group("otlp");
    g.throughput(Throughput::Elements(BATCH as u64))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for name in ["int", "str64", "latency"] {
        let recs = workload(name);
        let mut p = Processor::new(registry(), Clock::new(), 65_536);
        let mut calls = Vec::with_capacity(BATCH);
        g.bench_function(BenchmarkId::new("process+spans", name), |b| {
            // Spans pile up until a flush that never comes, so each sample gets a fresh
            // builder, built and dropped outside the timed part. In the agent, `pending`
            // keeps its capacity across flushes; here untimed batches first grow it so
            // that the timed ones never reallocate it.
            b.iter_custom(|iters| {
                let mut ex = exporter();
                let mut m = 1;
                while m <= iters {
                    m *= 2;
                }
                for _ in 0..=m {
                    calls.clear();
                    process_batch(&mut p, &recs, &mut calls);
                    ex.record(&calls);
                }
                let mut dt = Duration::ZERO;
                for _ in 0..iters {
                    calls.clear();
                    let t0 = Instant::now();
                    process_batch(&mut p, &recs, &mut calls);
                    ex.record(&calls);
                    dt += t0.elapsed();
                }
                drop(ex);
                dt
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_jsonl, bench_otlp
}
criterion_main!(benches);
