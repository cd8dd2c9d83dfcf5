#!/usr/bin/env python3
"""What a field path costs per pointer followed: the BPF program's own run time per hit
(kernel.bpf_stats_enabled) while gprobe captures n.V, n.Next.V, ... (0 to 8 hops) of
bench/go/chain, and the flat pointer `n` for reference. The per-hop cost is the slope of
a least-squares line through the medians. Run by bench/paths.sh; standard library only;
every process it starts is stopped by its pid."""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sections_kernel import BpfStats, fd_prog_stats  # noqa: E402

STARTED = []


def capture(hops):
    return "n" if hops is None else "n." + "Next." * hops + "V"


def spec(chain, hops):
    return f"""apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {{name: paths}}
spec:
  selector: {{executable: "{chain}"}}
  limits: {{eventsPerSecond: 0, maxOverheadPercent: 0}}
  probes:
    - symbol: main.walk
      signature: "func(n *main.node) int64"
      capture: ["{capture(hops)}"]
"""


def wait_for(path, text, timeout=60.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        with open(path) as f:
            if text in f.read():
                return
        time.sleep(0.05)
    raise SystemExit(f"gprobe did not print {text!r} within {timeout}s; see {path}")


def traced_run(gprobe, work, spec_text, target_cmd, label):
    """Runs `target_cmd` (a program that prints its number of calls last, as JSON) under
    `gprobe run` with `spec_text`; returns gprobe's uprobe program statistics and the
    calls. Shared with traceparent_bench.py."""
    spec_path = os.path.join(work, "spec.yaml")
    with open(spec_path, "w") as f:
        f.write(spec_text)
    err_path = os.path.join(work, "stderr")
    with open(err_path, "w") as err, open(os.devnull, "w") as out:
        g = subprocess.Popen([gprobe, "run", spec_path, "--output", "jsonl"],
                             stdout=out, stderr=err)
    STARTED.append(g)
    try:
        wait_for(err_path, "ready: tracing")
        res = subprocess.run(target_cmd, capture_output=True, text=True, check=True)
        calls = json.loads(res.stdout.strip().splitlines()[-1])["calls"]
        st = fd_prog_stats(g.pid, "gprobe_uprobe")
    finally:
        g.send_signal(signal.SIGINT)
        g.wait(60)
    if not st or st["run_cnt"] < calls:
        raise SystemExit(f"{label}: {st} for {calls} calls; see {err_path}")
    return st, calls


def one_run(args, work, hops):
    """ns per hit of gprobe's uprobe program over one run of the chain program."""
    st, _ = traced_run(args.gprobe, work, spec(args.chain, hops),
                       [args.chain, "-n", str(args.calls)], capture(hops))
    return st["run_time_ns"] / st["run_cnt"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gprobe", required=True)
    ap.add_argument("--chain", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200000)
    args = ap.parse_args()
    configs = [None, 0, 1, 2, 4, 8]
    ns = {c: [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="gprobe-paths.") as work, BpfStats():
        try:
            for r in range(args.rounds):
                # Interleaved, so that drift falls on every configuration alike.
                for c in configs:
                    ns[c].append(one_run(args, work, c))
                print(f"round {r + 1}/{args.rounds}: " + "  ".join(
                    f"{capture(c)}={ns[c][-1]:.0f}" for c in configs), flush=True)
        finally:
            for p in STARTED:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    med = {c: statistics.median(v) for c, v in ns.items()}
    print(f"\nBPF run time per hit, median of {args.rounds} runs of {args.calls:,} calls:")
    for c in configs:
        label = capture(c) + ("  (flat register word)" if c is None else f"  ({c} hops)")
        print(f"  {label:45} {med[c]:7.0f} ns")
    xs = [c for c in configs if c is not None]
    mx, my = statistics.mean(xs), statistics.mean(med[c] for c in xs)
    slope = sum((x - mx) * (med[x] - my) for x in xs) / sum((x - mx) ** 2 for x in xs)
    print(f"per hop (least-squares slope over 0-8 hops): {slope:.1f} ns; "
          f"8 hops - 0 hops: {(med[8] - med[0]) / 8:.1f} ns per hop; "
          f"a 0-hop path over the flat word: {med[0] - med[None]:.0f} ns")
    print(json.dumps({"ns_per_hit": med, "per_hop_ns": slope, "runs": ns}, default=str))


if __name__ == "__main__":
    main()
