#!/usr/bin/env python3
"""gprobe's benchmarks: the measurements behind BENCHMARKS.md.

bench/run.sh builds everything and calls this driver; run it directly only with the paths
run.sh passes (see --help). Standard library only. Every process it starts is tracked and
stopped by its pid (SIGINT, then SIGKILL), on success, error, or SIGINT/SIGTERM.

Sections (--only to pick some):
  cost        added cost per call of a noinline Go function: no probe, bpftrace count(),
              bpftrace printf of an int argument, gprobe int / 64-byte string / latency
  bpfstats    the BPF programs' own run time per hit (kernel.bpf_stats_enabled)
  bpfvariants the same for variants of gprobe.bpf.c with one part removed at a time
  throughput  end to end: target as fast as it can, agent CPU and peak RSS, and
              produced == delivered + lost exactly (also with a 16 KiB ring buffer)
  userspace   decode + pair + JSONL / OTLP, fed recorded events (criterion bench)
  resolve     time and peak RSS to resolve every function and RET (one process per binary)
  attach      exec of a matching process -> its first delivered event, p50/p99 over 20
  rss         agent RSS with 100 probes attached across 10 idle processes
"""

import argparse
import glob
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time


from common import *  # noqa: F401,F403
from sections_agent import *  # noqa: F401,F403
from sections_kernel import *  # noqa: F401,F403

def write_report(sections, started, load_before, load_after):
    lines = [
        "# gprobe benchmark results",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(started))}, "
        f"{time.time() - started:.0f} s",
        f"- command: `{ARGS.command}`",
        f"- machine: {os.uname().release}, {os.cpu_count()} CPUs; "
        f"load average before: {load_before}; after: {load_after}",
        f"- gprobe: {ARGS.gprobe_version}; bpftrace: {ARGS.bpftrace_version}; "
        f"Go: {ARGS.go_version}",
        "",
    ]
    targets = []
    for name in sections:
        s = RESULTS["sections"].get(name)
        if not s:
            continue
        lines += [s["md"], ""]
        if s.get("checks"):
            lines += ["Checks that failed:", ""] + [f"- {c}" for c in s["checks"]] + [""]
        if s.get("target"):
            lines += [f"Target: {s['target']}", ""]
            targets.append(f"- {name}: {s['target']}")
    lines = lines[:7] + ["## Targets", ""] + targets + ["", "## Measurements", ""] + lines[7:]
    os.makedirs(os.path.dirname(ARGS.out), exist_ok=True)
    with open(ARGS.out, "w") as f:
        f.write("\n".join(lines))
    raw = {k: {kk: vv for kk, vv in v.items() if kk != "md"}
           for k, v in RESULTS["sections"].items()}
    with open(os.path.splitext(ARGS.out)[0] + ".json", "w") as f:
        json.dump(raw, f, indent=1, default=str)


def loadavg():
    return " ".join(read("/proc/loadavg").split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gprobe", required=True)
    ap.add_argument("--loop", required=True, help="bench/go/loop, built with symbols")
    ap.add_argument("--many", required=True, help="bench/go/many")
    ap.add_argument("--userspace", required=True, help="criterion bench executable")
    ap.add_argument("--resolve", required=True, help="resolve bench executable")
    ap.add_argument("--resolve-targets", nargs="+", default=[])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="cost,bpfstats,bpfvariants,throughput,userspace,resolve,"
                                      "attach,rss")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--no-pin", action="store_true",
                    help="do not pin target and tracer to separate CPUs in cost/bpf sections")
    ap.add_argument("--stat-runs", type=int, default=5)
    ap.add_argument("--variants", default="",
                    help="bpfvariants: only these variants (comma-separated names)")
    ap.add_argument("--variants-file",
                    default=os.path.join(REPO, "bench", "bpf-variants", "variants.py"),
                    help="bpfvariants: the variants (a Python file with VARIANTS and source())")
    ap.add_argument("--tp-seconds", type=int, default=5)
    ap.add_argument("--resolve-runs", type=int, default=3)
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--command", default=" ".join(sys.argv))
    ap.add_argument("--gprobe-version", default="?")
    ap.add_argument("--bpftrace-version", default="?")
    ap.add_argument("--go-version", default="?")
    vars(ARGS).update(vars(ap.parse_args()))
    ARGS.work = os.path.abspath(ARGS.work)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sections = [s.strip() for s in ARGS.only.split(",") if s.strip()]
    fns = {"cost": section_cost, "bpfstats": section_bpfstats,
           "bpfvariants": section_bpfvariants,
           "throughput": section_throughput, "userspace": section_userspace,
           "resolve": section_resolve, "attach": section_attach, "rss": section_rss}
    started, load_before = time.time(), loadavg()
    try:
        for s in sections:
            print(f"\n### {s} (load average {loadavg()})", flush=True)
            t0 = time.monotonic()
            fns[s]()
            print(f"  ({time.monotonic() - t0:.0f} s)", flush=True)
    finally:
        cleanup()
    left = leftover_uprobes()
    if left:
        print("LEFTOVER uprobes:", left, file=sys.stderr)
        sys.exit(1)
    write_report(sections, started, load_before, loadavg())
    print(f"\nwrote {ARGS.out}")


if __name__ == "__main__":
    main()
