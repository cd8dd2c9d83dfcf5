//! Forgetting a process's entries in the BPF hash maps that outlive its probes: the span
//! contexts, requests and connections of trace-context propagation, and the calls still in
//! flight in probes whose returns were taken off (their returns will not be seen).

use crate::abi;
use crate::engine::CfgId;
use aya::maps::HashMap as BpfHashMap;
use aya::Ebpf;

/// Removes process `pid`'s span contexts, requests and connections.
pub(super) fn spans(ebpf: &mut Ebpf, pid: u32) {
    forget_pid::<abi::GpSpanKey, abi::GpSpanCtx>(ebpf, "spanctx", pid, |k| k.tgid);
    forget_pid::<abi::GpSpanKey, abi::GpOut>(ebpf, "requests", pid, |k| k.tgid);
    forget_pid::<abi::GpOutKey, u64>(ebpf, "conns", pid, |k| k.tgid);
}

/// Removes the calls of process `pid` to `func_ids` still in flight.
pub(super) fn calls(ebpf: &mut Ebpf, pid: u32, func_ids: &[CfgId]) {
    let Some(map) = ebpf.map_mut("inflight") else {
        return;
    };
    let Ok(mut m) = BpfHashMap::<_, abi::GpInflightKey, abi::GpInflight>::try_from(map) else {
        return;
    };
    let stale: Vec<abi::GpInflightKey> = m
        .keys()
        .filter_map(Result::ok)
        .filter(|k| k.tgid == pid && func_ids.contains(&k.func_id))
        .collect();
    for k in stale {
        let _ = m.remove(&k);
    }
}

/// Removes the entries of process `pid` from the BPF hash map `name` (keys: `tgid` tells
/// their process).
fn forget_pid<K: aya::Pod, V: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &str,
    pid: u32,
    tgid: impl Fn(&K) -> u32,
) {
    let Some(map) = ebpf.map_mut(name) else {
        return;
    };
    let Ok(mut m) = BpfHashMap::<_, K, V>::try_from(map) else {
        return;
    };
    let stale: Vec<K> = m
        .keys()
        .filter_map(Result::ok)
        .filter(|k| tgid(k) == pid)
        .collect();
    for k in stale {
        let _ = m.remove(&k);
    }
}
