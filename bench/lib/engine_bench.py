#!/usr/bin/env python3
"""The engine's costs: what a probe costs a process it does not select, how many
short-lived processes are traced from their first call and how long they are held at exec,
and how long stopping takes with many uprobes. Called by bench/run.sh (sections `blast`,
`shortlived`, `shutdown`); standard library only. Every process it starts is stopped by
its pid.

  engine_bench.py --gprobe target/release/gprobe --lifecycle BIN --work DIR [--only S,...]
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cleanup, spawn, stop  # noqa: E402


def spec(path, name, probes):
    lines = [
        "apiVersion: gprobe.dev/v1alpha1",
        "kind: ProbeSpec",
        f"metadata: {{name: {name}}}",
        "spec:",
        f"  selector: {{executable: \"{path}\"}}",
        "  probes:",
    ]
    for sym, extra in probes:
        lines.append(f"    - {{symbol: {sym}{extra}}}")
    lines.append("  limits: {eventsPerSecond: 0, maxOverheadPercent: 0}")
    return "\n".join(lines) + "\n"


class Gprobe:
    """`gprobe run` on one spec, JSONL to /dev/null, log and summary in the work dir."""

    def __init__(self, a, name, text, debug=False):
        self.dir = os.path.join(a.work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.spec = os.path.join(self.dir, "spec.yaml")
        with open(self.spec, "w") as f:
            f.write(text)
        self.log = os.path.join(self.dir, "stderr")
        self.summary = os.path.join(self.dir, "summary.json")
        args = [a.gprobe]
        if debug:
            args += ["--log-level", "debug"]
        args += ["run", self.spec, "--output", "none", "--summary-file", self.summary]
        self.p = spawn(args, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        self.wait_log("ready: tracing", 30)

    def text(self):
        with open(self.log) as f:
            return f.read()

    def wait_log(self, needle, timeout):
        t0 = time.monotonic()
        while needle not in self.text():
            if time.monotonic() - t0 > timeout or self.p.poll() is not None:
                raise SystemExit(f"gprobe never logged {needle!r}:\n{self.text()}")
            time.sleep(0.02)

    def stop(self):
        t0 = time.monotonic()
        stop(self.p)
        took = time.monotonic() - t0
        with open(self.summary) as f:
            return took, json.load(f)


def run_out(args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def ns_per_call(out):
    return float(re.search(r"ns_per_call=([0-9.]+)", out).group(1))


def blast(a, res):
    """A process running the same file as a selected one, but not selected itself."""
    d = os.path.join(a.work, "blast")
    os.makedirs(os.path.join(d, "a"), exist_ok=True)
    os.makedirs(os.path.join(d, "b"), exist_ok=True)
    sa, sb = os.path.join(d, "a", "lifecycle"), os.path.join(d, "b", "lifecycle")
    for p in (sa, sb):
        if os.path.exists(p):
            os.unlink(p)
    subprocess.run(["cp", a.lifecycle, sa], check=True)
    os.link(sa, sb)
    loop = ["-mode", "loop", "-duration", "2s"]
    alone = [ns_per_call(run_out([sb] + loop)) for _ in range(a.rounds)]
    g = Gprobe(a, "blast", spec(sa, "blast", [("main.work", "")]))
    beside = []
    for _ in range(a.rounds):
        pa = spawn([sa] + loop, stdout=subprocess.PIPE, text=True)
        pb = spawn([sb] + loop, stdout=subprocess.PIPE, text=True)
        beside.append(ns_per_call(pb.communicate()[0]))
        traced = ns_per_call(pa.communicate()[0])
    g.stop()
    r = {
        "unselected_ns_per_call_alone_median": statistics.median(alone),
        "unselected_ns_per_call_beside_traced_median": statistics.median(beside),
        "selected_ns_per_call_last": traced,
        "rounds": a.rounds,
    }
    res["blast"] = r
    print(f"blast: unselected process {r['unselected_ns_per_call_beside_traced_median']:.1f} ns/call "
          f"beside a traced one (alone {r['unselected_ns_per_call_alone_median']:.1f}); "
          f"the traced one {traced:.0f} ns/call")


def shortlived(a, res):
    """150 processes living about 40 ms, three at a time."""
    g = Gprobe(a, "short", spec(a.lifecycle, "short", [("main.work", "")]), debug=True)
    n, made = 0, 0
    t0 = time.monotonic()
    for _ in range(50):
        kids = [spawn([a.lifecycle, "-mode", "short", "-calls", "5", "-sleep", "8ms"],
                      stdout=subprocess.DEVNULL) for _ in range(3)]
        for k in kids:
            k.wait()
            n += 1
            made += 5
    wall = time.monotonic() - t0
    text = g.text()
    _, s = g.stop()
    holds = sorted(int(m) / 1000 for m in re.findall(r"resumed (\d+) µs after", text))
    q = lambda f: holds[min(len(holds) - 1, int(f * len(holds)))] if holds else None
    pr = s["processes"]
    delivered = sum(p["delivered"] for p in s["probes"])
    r = {
        "processes": n, "matched": pr["matched"], "traced": pr["traced"],
        "missed": pr["missed_total"], "calls_made": made, "calls_delivered": delivered,
        "hold_ms_p50": q(0.5), "hold_ms_p90": q(0.9), "hold_ms_max": holds[-1] if holds else None,
        "wall_s": wall,
    }
    res["shortlived"] = r
    print(f"shortlived: {pr['traced']}/{n} processes traced from their first call, "
          f"{delivered}/{made} calls; held at exec p50 {r['hold_ms_p50']:.1f} ms, "
          f"p90 {r['hold_ms_p90']:.1f} ms, max {r['hold_ms_max']:.1f} ms; {wall:.1f} s in all")


def shutdown(a, res):
    """Stopping with 150 uprobes: 30 processes x 5 functions."""
    probes = [(f, "") for f in ("main.work", "main.rec", "main.block", "main.main", "main.visit")]
    g = Gprobe(a, "shutdown", spec(a.lifecycle, "many", probes))
    kids = [spawn([a.lifecycle, "-mode", "block"], stdout=subprocess.DEVNULL) for _ in range(30)]
    t0 = time.monotonic()
    while g.text().count("attached many / ") < 150:
        if time.monotonic() - t0 > 60:
            raise SystemExit("not all 150 uprobes attached:\n" + g.text())
        time.sleep(0.05)
    attach_s = time.monotonic() - t0
    took, _ = g.stop()
    m = re.search(r"every uprobe detached in (\d+) ms", g.text())
    for k in kids:
        stop(k, signal.SIGKILL)
    r = {"uprobes": 150, "attach_s": attach_s, "stop_s": took,
         "detach_ms": int(m.group(1)) if m else None}
    res["shutdown"] = r
    print(f"shutdown: 150 uprobes attached in {attach_s:.2f} s (30 processes started at once); "
          f"stopping took {took:.2f} s, detaching {r['detach_ms']} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gprobe", required=True)
    ap.add_argument("--lifecycle", required=True, help="e2e/testdata/lifecycle, built")
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", default="blast,shortlived,shutdown")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    res = {}
    try:
        for name in a.only.split(","):
            {"blast": blast, "shortlived": shortlived, "shutdown": shutdown}[name](a, res)
    finally:
        cleanup(signal.SIGKILL)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
