#!/usr/bin/env python3
"""What every benchmark section of bench.py shares: processes it starts (stopped by pid),
the target and tracers (gprobe, bpftrace), statistics and the report's tables."""

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

CLK_TCK = os.sysconf("SC_CLK_TCK")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STARTED = []  # every Popen this driver started, stopped by pid in cleanup()
ARGS = argparse.Namespace()  # filled by bench.py's main (one shared object)
RESULTS = {"sections": {}}
SIG = "func(n int64, s string) int64"


# ---------------------------------------------------------------------------- processes


def spawn(args, **kw):
    p = subprocess.Popen(args, **kw)
    STARTED.append(p)
    return p


def stop(p, sig=signal.SIGINT, timeout=30.0):
    """Stops one process we started, by its pid: `sig`, then SIGKILL after `timeout`."""
    if p.poll() is None:
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    return p.returncode


def cleanup(sig=signal.SIGINT):
    """Stops every process still running that this driver started, newest first."""
    for p in reversed(STARTED):
        if p.poll() is None:
            stop(p, sig, 10.0)


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def wait_until(pred, timeout, what):
    t0 = time.monotonic()
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def cpu_ticks(pid):
    """utime + stime of a process, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def status_kib(pid, key):
    m = re.search(rf"^{key}:\s+(\d+) kB", read(f"/proc/{pid}/status"), re.M)
    return int(m.group(1)) if m else 0


class Target:
    """The Go loop program, started with -wait: it prints "ready", loops on SIGUSR1."""

    def __init__(self, args, binary=None, pinned=False):
        self.p = spawn([*pin("target", pinned), binary or ARGS.loop, "-wait", *args],
                       stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"target did not start: {line!r} {self.p.stderr.read()}")
        self.pid = self.p.pid

    def go(self):
        os.kill(self.pid, signal.SIGUSR1)

    def result(self, timeout=600):
        out, err = self.p.communicate(timeout=timeout)
        if self.p.returncode != 0:
            raise RuntimeError(f"target failed ({self.p.returncode}): {err}")
        return json.loads(out.strip().splitlines()[-1])


def pin(who, pinned):
    """taskset prefix: in the per-call measurements the target runs on one CPU and the
    tracer on the other, so that neither migrates nor preempts the other (an unpinned
    target's trap cost wanders by +-15% from run to run on this VM)."""
    if not pinned or ARGS.no_pin:
        return []
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return []
    return ["taskset", "-c", str(cpus[0] if who == "target" else cpus[1])]


def spec_yaml(name, exe, probes, max_str=64):
    lines = [
        "apiVersion: gprobe.dev/v1alpha1",
        "kind: ProbeSpec",
        f"metadata: {{name: {name}}}",
        "spec:",
        f'  selector: {{executable: "{exe}"}}',
        "  probes:",
    ]
    for sym, sig, caps, latency in probes:
        lines += [
            f"    - symbol: {sym}",
            f'      signature: "{sig}"',
            f"      capture: [{', '.join(caps)}]",
            f"      latency: {'true' if latency else 'false'}",
        ]
    lines.append(f"  limits: {{maxStringBytes: {max_str}, eventsPerSecond: 0, maxOverheadPercent: 0}}")
    return "\n".join(lines) + "\n"


GP_CONFIGS = {
    "gprobe-int": ([["n"], False], "capture: [n]"),
    "gprobe-str64": ([["s"], False], "capture: [s] (64-byte string)"),
    "gprobe-latency": ([["n"], True], "capture: [n], latency: true"),
}

SUMMARY_RE = re.compile(
    r"^\s+(\S+) / (\S+): (\d+) calls delivered, (\d+) lost \(ring buffer full\), (\d+) throttled",
    re.M)
PAIRING_RE = re.compile(r"(\d+) calls abandoned in flight \(never returned\), (\d+) returns without")


class Gprobe:
    """`gprobe run` on one spec; stdout to `out` (a path, or /dev/null)."""

    seq = 0

    def __init__(self, spec, extra=(), out=os.devnull, pinned=False):
        Gprobe.seq += 1
        base = os.path.join(ARGS.work, f"gprobe-{Gprobe.seq}")
        self.spec_path, self.err_path, self.out_path = base + ".yaml", base + ".err", out
        with open(self.spec_path, "w") as f:
            f.write(spec)
        with open(out, "wb") as o, open(self.err_path, "wb") as e:
            self.p = spawn([*pin("tracer", pinned), ARGS.gprobe, "run", self.spec_path,
                            "--output", "jsonl", *extra],
                           stdout=o, stderr=e, stdin=subprocess.DEVNULL)
        self.pid = self.p.pid
        self.wait_for(lambda s: "waiting for one to start" in s or "attached " in s, 60,
                      "gprobe to start")

    def stderr(self):
        return read(self.err_path)

    def wait_for(self, pred, timeout, what):
        def check():
            if self.p.poll() is not None:
                raise RuntimeError(f"gprobe exited ({self.p.returncode}):\n{self.stderr()}")
            return pred(self.stderr())
        return wait_until(check, timeout, what)

    def wait_attached(self, pid, n=1):
        pat = re.compile(rf"attached .*pid [0-9,]*\b{pid}\b")
        self.wait_for(lambda s: len(pat.findall(s)) >= n, 60, f"gprobe to attach to pid {pid}")

    def stop(self):
        rc = stop(self.p, signal.SIGINT, 60)
        err = self.stderr()
        if rc != 0:
            raise RuntimeError(f"gprobe exited with {rc}:\n{err}")
        s = {"delivered": 0, "lost": 0, "throttled": 0, "abandoned": 0, "orphan_returns": 0}
        for m in SUMMARY_RE.finditer(err):
            s["delivered"] += int(m.group(3))
            s["lost"] += int(m.group(4))
            s["throttled"] += int(m.group(5))
        m = PAIRING_RE.search(err)
        if m:
            s["abandoned"], s["orphan_returns"] = int(m.group(1)), int(m.group(2))
        return s


class Bpftrace:
    def __init__(self, body, out, pinned=False):
        prog = ('BEGIN { printf("ready\\n"); } '
                f'uprobe:{ARGS.loop}:"main.target" {{ {body} }}')
        self.out_path = out
        with open(out, "wb") as o:
            self.p = spawn([*pin("tracer", pinned), "bpftrace", "-e", prog], stdout=o,
                           stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL)
        self.pid = self.p.pid
        # BEGIN runs once every probe is attached.
        wait_until(lambda: self._check(), 120, "bpftrace to attach")

    def _check(self):
        if self.p.poll() is not None:
            raise RuntimeError(f"bpftrace exited ({self.p.returncode}):\n{read(self.out_path)}")
        return "ready" in read(self.out_path)

    def stop(self):
        stop(self.p, signal.SIGINT, 60)
        return read(self.out_path)


# -------------------------------------------------------------------------- statistics


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def pct(xs, p):
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def fmt(x, nd=1):
    if isinstance(x, str):
        return x
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{nd}f}"


def table(title, header, rows):
    """Prints a table and returns it as markdown."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    print(f"\n== {title}")
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    md = [f"### {title}", "", f"| {' | '.join(map(str, header))} |",
          f"|{'|'.join('---' for _ in header)}|"]
    md += [f"| {' | '.join(map(str, r))} |" for r in rows]
    return "\n".join(md)


def met(ok):
    return "met" if ok else "**missed**"


def record_section(name, md, target=None, **data):
    """Keeps a section's table and raw figures for the report; prints its target line."""
    RESULTS["sections"][name] = {"md": md, **data}
    if target is not None:
        RESULTS["sections"][name]["target"] = target
        print("  target:", target)


# ------------------------------------------------------------------------- 1. cost/call


def one_run(cfg, calls, stats_fn=None):
    """Runs the target for `calls` calls under `cfg`; returns (target result, extra)."""
    extra = {}
    if cfg == "none":
        t = Target(["-n", str(calls)], pinned=True)
        t.go()
        return t.result(), extra
    if cfg.startswith("bpftrace"):
        body = {"bpftrace-count": "@c = count();", "bpftrace-empty": ""}.get(
            cfg, 'printf("%d\\n", reg("ax"));')
        bt = Bpftrace(body, os.path.join(ARGS.work, f"{cfg}.out"), pinned=True)
        t = Target(["-n", str(calls)], pinned=True)
        t.go()
        r = t.result()
        if stats_fn:
            extra["bpf"] = stats_fn(bt.pid, None)
        out = bt.stop()
        if cfg == "bpftrace-count":
            m = re.search(r"@c: (\d+)", out)
            extra["seen"] = int(m.group(1)) if m else -1
        elif cfg == "bpftrace-empty":
            extra["seen"] = extra["bpf"]["run_cnt"] if "bpf" in extra else None
        else:
            extra["seen"] = sum(1 for ln in out.splitlines() if ln.isdigit())
            lost = re.findall(r"Lost (\d+) events", out)
            extra["lost"] = sum(map(int, lost))
        return r, extra
    caps, latency = GP_CONFIGS[cfg][0]
    t = Target(["-n", str(calls)], pinned=True)
    g = Gprobe(spec_yaml(cfg, ARGS.loop, [("main.target", SIG, caps, latency)]), pinned=True)
    g.wait_attached(t.pid)
    t.go()
    r = t.result()
    if stats_fn:
        extra["bpf"] = stats_fn(g.pid, "gprobe_uprobe")
    extra.update(g.stop())
    extra["seen"] = extra["delivered"]
    return r, extra
