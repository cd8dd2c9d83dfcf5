#!/usr/bin/env python3
"""What reading a handler's incoming traceparent costs: the BPF program's own run time per
call (kernel.bpf_stats_enabled) of a probe on bench/go/handler's handle(w, r), capturing
the pointer r, with r typed `*http.Request` (gprobe then searches r.Header for a
traceparent at every call) against the same probe with r typed `*main.notARequest` in the
signature (the same register word, no search), for requests of 3, 12, 40 and 150 headers,
with and without a traceparent; and what `propagate: true` adds to a latency probe (its span
kept per goroutine in BPF). With --baseline, another gprobe build runs each configuration
right after this one, in the same rounds, so that the two are compared under the same
load. Run by bench/traceparent.sh; standard library only; every process it starts is
stopped by its pid."""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paths_bench import STARTED, traced_run  # noqa: E402
from sections_kernel import BpfStats  # noqa: E402

# (label, request type in the signature, headers, with a traceparent, probe fields)
CONFIGS = [
    ("no search (r: *main.notARequest)", None, 3, False, ""),
    ("3 headers, none a traceparent", "*http.Request", 3, False, ""),
    ("3 headers + traceparent", "*http.Request", 3, True, ""),
    ("12 headers, none a traceparent", "*http.Request", 12, False, ""),
    ("40 headers, none a traceparent", "*http.Request", 40, False, ""),
    ("150 headers, none a traceparent", "*http.Request", 150, False, ""),
    ("150 headers + traceparent", "*http.Request", 150, True, ""),
    ("latency, 3 headers + traceparent", "*http.Request", 3, True, "latency: true"),
    ("latency + propagate, same", "*http.Request", 3, True,
     "latency: true\n      propagate: true"),
]


def spec(handler, req_type, fields):
    # The same layout as DWARF's, so that the signature's type of r is the one used.
    sig = f"func(w http.ResponseWriter, r {req_type or '*main.notARequest'}) int"
    cap = "r"
    return f"""apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {{name: traceparent}}
spec:
  selector: {{executable: "{handler}"}}
  limits: {{eventsPerSecond: 0, maxOverheadPercent: 0}}
  probes:
    - symbol: main.handle
      signature: "{sig}"
      capture: ["{cap}"]
      {fields}
"""


def one_run(args, gprobe, work, cfg):
    label, req_type, headers, tp, fields = cfg
    cmd = [args.handler, "-n", str(args.calls), "-headers", str(headers)]
    if tp:
        cmd.append("-traceparent")
    st, calls = traced_run(gprobe, work, spec(args.handler, req_type, fields), cmd, label)
    # Per call: a latency probe's call is two hits (entry and RET).
    return st["run_time_ns"] / calls


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gprobe", required=True)
    ap.add_argument("--baseline", help="another gprobe, measured in the same rounds")
    ap.add_argument("--handler", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200000)
    args = ap.parse_args()
    builds = [("", args.gprobe)] + ([("baseline ", args.baseline)] if args.baseline else [])
    keys = [b + c[0] for b, _ in builds for c in CONFIGS]
    ns = {k: [] for k in keys}
    with tempfile.TemporaryDirectory(prefix="gprobe-tp.") as work, BpfStats():
        try:
            for r in range(args.rounds):
                for c in CONFIGS:
                    for b, gprobe in builds:
                        ns[b + c[0]].append(one_run(args, gprobe, work, c))
                print(f"round {r + 1}/{args.rounds}: " + "  ".join(
                    f"{ns[k][-1]:.0f}" for k in keys), flush=True)
        finally:
            for p in STARTED:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    med = {k: statistics.median(v) for k, v in ns.items()}
    # The peer of every row, measured in the same rounds: the probe without the search.
    peer = CONFIGS[0][0]
    print(f"\nBPF run time per call, median of {args.rounds} runs of {args.calls:,} calls"
          " (x: against the probe without the search, same build, same rounds):")
    if args.baseline:
        print(f"  {'':40} {'this':>16}  {'baseline':>16}  this/baseline")
        for c in CONFIGS:
            t, b = med[c[0]], med["baseline " + c[0]]
            print(f"  {c[0]:40} {t:7.0f} ns {t / med[peer]:5.2f}x"
                  f"  {b:7.0f} ns {b / med['baseline ' + peer]:5.2f}x  {t / b:5.2f}")
    else:
        for c in CONFIGS:
            t = med[c[0]]
            print(f"  {c[0]:40} {t:7.0f} ns {t / med[peer]:5.2f}x")
    print(json.dumps({"ns_per_hit": med, "runs": ns}))


if __name__ == "__main__":
    main()
