#!/usr/bin/env python3
"""Cost per call of gprobe's C probes against bpftrace's one-liners, in one run.

bench/c/loop.c calls a noinline C function `target(long n, const char *s)` in a tight loop
and passes the USDT probe site cbench:tick on every iteration. Each configuration traces
one of them; the loop prints its own CPU time per call (the trap and the BPF program run in
the calling thread). Configurations run interleaved, one run each per round, the target
pinned to one CPU and the tracer to the other; the table gives medians over the rounds and
the added cost over the untraced loop, as a ratio to bpftrace's equivalent.

  sudo bench/c/cost.py [--rounds 7] [--calls 200000] [--gprobe target/release/gprobe]
                       [--out results.md]

Every tracer must see exactly the calls made (checked: gprobe's summary file, bpftrace's
count map). Every process it starts is stopped by its pid. Needs root, cc, systemtap-sdt-dev
(sys/sdt.h) and bpftrace.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tracerproc import pin, spawn, stop, stop_all, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# name -> (tracer, what it runs, what it is the equivalent of)
CONFIGS = {
    "none": ("none", None, None),
    "bpftrace-uprobe": ("bpftrace", "uprobe:{bin}:target {{ @[probe] = count(); }}", None),
    "gprobe-uprobe": ("gprobe", {"symbol": "target",
                                 "signature": "long target(long n, const char *s)",
                                 "capture": ["n"]}, "bpftrace-uprobe"),
    "bpftrace-uretprobe": ("bpftrace", "uretprobe:{bin}:target {{ @[probe] = count(); }}",
                           None),
    "gprobe-uretprobe": ("gprobe", {"symbol": "target",
                                    "signature": "long target(long n, const char *s)",
                                    "capture": ["r0"]}, "bpftrace-uretprobe"),
    "bpftrace-latency": ("bpftrace",
                         "uprobe:{bin}:target {{ @s[tid] = nsecs; }} "
                         "uretprobe:{bin}:target /@s[tid]/ {{ @ns = hist(nsecs - @s[tid]); "
                         "delete(@s[tid]); @[probe] = count(); }}", None),
    "gprobe-latency": ("gprobe", {"symbol": "target",
                                  "signature": "long target(long n, const char *s)",
                                  "capture": ["n", "r0"], "latency": True},
                       "bpftrace-latency"),
    "bpftrace-usdt": ("bpftrace", "usdt:{bin}:cbench:tick {{ @[probe] = count(); }}", None),
    "gprobe-usdt": ("gprobe", {"usdt": "cbench:tick", "signature": "(long n, const char *s)",
                               "capture": ["n"]}, "bpftrace-usdt"),
}

DESCRIBE = {
    "none": "no probe",
    "bpftrace-uprobe": "bpftrace `uprobe:BIN:target { @[probe] = count(); }`",
    "gprobe-uprobe": "gprobe `symbol: target`, `capture: [n]`",
    "bpftrace-uretprobe": "bpftrace `uretprobe:BIN:target { @[probe] = count(); }`",
    "gprobe-uretprobe": "gprobe `capture: [r0]` (entry uprobe + uretprobe)",
    "bpftrace-latency": "bpftrace uprobe `@s[tid] = nsecs` + uretprobe `hist(nsecs - @s[tid])`",
    "gprobe-latency": "gprobe `capture: [n, r0]`, `latency: true`",
    "bpftrace-usdt": "bpftrace `usdt:BIN:cbench:tick { @[probe] = count(); }`",
    "gprobe-usdt": "gprobe `usdt: cbench:tick`, `capture: [n]`",
}

def run_target(binary, calls):
    out = subprocess.run([*pin("target"), binary, str(calls)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def one_run(cfg, binary, calls, work, gprobe):
    tracer, what, _ = CONFIGS[cfg]
    if tracer == "none":
        return run_target(binary, calls)["cpu_ns_per_call"], calls
    log = os.path.join(work, f"{cfg}.log")
    if tracer == "bpftrace":
        prog = 'BEGIN { printf("ready\\n"); } ' + what.format(bin=binary)
        with open(log, "wb") as o:
            p = spawn([*pin("tracer"), "bpftrace", "-e", prog], stdout=o,
                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(log, "ready", p, "bpftrace")
        r = run_target(binary, calls)
        stop(p)
        with open(log) as f:
            seen = sum(int(n) for n in re.findall(r"^@\[[^\]]*\]: (\d+)$", f.read(), re.M))
        return r["cpu_ns_per_call"], seen
    spec = os.path.join(work, "spec.yaml")
    summary = os.path.join(work, "summary.json")
    probe = dict(what)
    with open(spec, "w") as f:
        json.dump({"apiVersion": "gprobe.dev/v1alpha1", "kind": "ProbeSpec",
                   "metadata": {"name": "cbench"},
                   "spec": {"selector": {"executable": binary}, "probes": [probe],
                            "limits": {"eventsPerSecond": 0, "maxStringBytes": 64, "maxOverheadPercent": 0}}}, f)
    with open(log, "wb") as o:
        # A ring that holds a whole run: a USDT hit costs so little that the loop
        # outruns the reader (calls that find the ring full are counted as lost).
        p = spawn([*pin("tracer"), gprobe, "run", spec, "--output", "jsonl",
                   "--ring-buffer-size", "64MiB", "--summary-file", summary], stdout=subprocess.DEVNULL, stderr=o,
                  stdin=subprocess.DEVNULL)
    wait_for(log, "ready: tracing", p, "gprobe")
    # Started after gprobe: held at exec until attached, so every call is traced.
    r = run_target(binary, calls)
    stop(p)
    with open(summary) as f:
        probes = json.load(f)["probes"]
    seen = sum(pr["delivered"] for pr in probes)
    lost = sum(pr["lost"] + pr["throttled"] for pr in probes)
    if lost:
        raise RuntimeError(f"{cfg}: {seen} calls delivered, {lost} lost or throttled")
    if seen != calls:
        print(f"  {cfg}: summary {json.dumps(probes)}", file=sys.stderr, flush=True)
    return r["cpu_ns_per_call"], seen


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200000)
    default = os.path.join(REPO, "target/release/gprobe")
    if not os.path.exists(default):
        default = os.path.join(REPO, "target/debug/gprobe")
    ap.add_argument("--gprobe", default=default)
    ap.add_argument("--only", default=",".join(CONFIGS),
                    help="configurations, comma-separated: " + ",".join(CONFIGS))
    ap.add_argument("--out", help="also write the table (markdown) and the samples (.json)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/c/cost.py: needs root (loads BPF programs)")
    configs = [c for c in args.only.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            sys.exit(f"unknown configuration {c}")
    if "none" not in configs:
        configs.insert(0, "none")

    with tempfile.TemporaryDirectory(prefix="gprobe-cbench-") as work:
        binary = os.path.join(work, "loop")
        subprocess.run(["cc", "-O2", "-o", binary, os.path.join(HERE, "loop.c")], check=True)
        load = os.getloadavg()[0]
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        samples = {c: [] for c in configs}
        try:
            for rnd in range(args.rounds):
                for c in configs:
                    for attempt in range(3):
                        ns, seen = one_run(c, binary, args.calls, work, args.gprobe)
                        if seen == args.calls:
                            break
                        # bpftrace sometimes exits without printing its maps: run again.
                        print(f"  {c}: the tracer reported {seen} of {args.calls} calls; "
                              "running again", file=sys.stderr, flush=True)
                    else:
                        raise RuntimeError(f"{c}: the tracer saw {seen} of {args.calls} calls")
                    samples[c].append(ns)
                    print(f"round {rnd + 1}/{args.rounds} {c:20s} {ns:9.1f} ns/call",
                          file=sys.stderr, flush=True)
        finally:
            stop_all()

    med = {c: statistics.median(v) for c, v in samples.items()}
    base = med["none"]
    lines = [
        f"bench/c/cost.py --rounds {args.rounds} --calls {args.calls}: {started}, "
        f"1-minute load {load:.2f} at start, gprobe {os.path.relpath(args.gprobe, REPO)}",
        "",
        "| configuration | CPU ns/call (median) | min-max | added ns/call | gprobe / bpftrace (added) |",
        "|---|---|---|---|---|",
    ]
    for c in configs:
        added = med[c] - base
        ref = CONFIGS[c][2]
        ratio = f"**{added / (med[ref] - base):.2f}x**" if ref in med else ""
        lines.append(f"| {DESCRIBE[c]} | {med[c]:,.1f} | {min(samples[c]):,.1f}-"
                     f"{max(samples[c]):,.1f} | {added:,.1f} | {ratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump({"started": started, "load": load, "rounds": args.rounds,
                       "calls": args.calls, "samples": samples}, f, indent=1)


if __name__ == "__main__":
    main()
