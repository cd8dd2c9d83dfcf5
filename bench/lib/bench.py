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

CLK_TCK = os.sysconf("SC_CLK_TCK")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STARTED = []  # every Popen this driver started, stopped by pid in cleanup()
ARGS = None
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


def cleanup():
    for p in reversed(STARTED):
        if p.poll() is None:
            stop(p, signal.SIGINT, 10.0)


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
    lines.append(f"  limits: {{maxStringBytes: {max_str}, eventsPerSecond: 0}}")
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


COST_CONFIGS = ["none", "bpftrace-count", "bpftrace-printf", "gprobe-int", "gprobe-str64",
                "gprobe-latency"]
COST_LABEL = {
    "none": "no probe",
    "bpftrace-empty": "bpftrace `{ }` (empty program: dispatch and bpf_stats only)",
    "bpftrace-count": "bpftrace `@c = count()`",
    "bpftrace-printf": 'bpftrace `printf("%d\\n", reg("ax"))`',
    "gprobe-int": "gprobe capture: [n] (int64)",
    "gprobe-str64": "gprobe capture: [s] (64-byte string)",
    "gprobe-latency": "gprobe capture: [n], latency: true",
}


def section_cost():
    calls, rounds = ARGS.calls, ARGS.rounds
    wall = {c: [] for c in COST_CONFIGS}
    cpu = {c: [] for c in COST_CONFIGS}
    checks = []
    for rnd in range(rounds):
        for cfg in COST_CONFIGS:
            # The no-probe loop runs 2 ns a call: give it enough calls to time.
            n = calls * 100 if cfg == "none" else calls
            r, extra = one_run(cfg, n)
            wall[cfg].append(r["ns_per_call"])
            cpu[cfg].append(r["cpu_ns_per_call"])
            if cfg != "none" and extra.get("seen") != r["calls"]:
                checks.append(f"round {rnd + 1} {cfg}: {r['calls']} calls, tracer saw "
                              f"{extra.get('seen')} ({extra})")
            print(f"  round {rnd + 1}/{rounds} {cfg:16} {r['ns_per_call']:9.1f} ns/call wall "
                  f"{r['cpu_ns_per_call']:9.1f} ns/call CPU", flush=True)

    def added(d, c):
        return [x - b for x, b in zip(d[c], d["none"])]

    res = {}
    for kind, d in (("cpu", cpu), ("wall", wall)):
        bt = added(d, "bpftrace-count")
        res[kind] = {c: {"median": median(d[c]), "added": median(added(d, c)),
                         "ratio": median(added(d, c)) / median(bt),
                         "round_ratio": median([a / b for a, b in zip(added(d, c), bt)])}
                     for c in COST_CONFIGS}
    rows = []
    for c in COST_CONFIGS:
        g = c.startswith("gprobe")
        rc, rw = res["cpu"][c], res["wall"][c]
        rows.append([COST_LABEL[c], fmt(rc["median"], 1),
                     fmt(rc["added"], 1) if c != "none" else "-",
                     fmt(rc["ratio"], 3) if g else "-", fmt(rc["round_ratio"], 3) if g else "-",
                     fmt(rw["median"], 1), fmt(rw["ratio"], 3) if g else "-",
                     " ".join(f"{x:.0f}" for x in cpu[c])])
    md = table(f"1. Added cost per call (median of {rounds} rounds, configurations interleaved "
               f"in each round; {calls:,} calls per traced run, {calls * 100:,} without probe)",
               ["configuration", "CPU ns/call", "added CPU ns/call", "x bpftrace count()",
                "median of per-round ratios", "wall ns/call", "x bpftrace count() (wall)",
                "CPU ns/call per round"], rows)
    ratio_int = res["cpu"]["gprobe-int"]["ratio"]
    for c in checks:
        print("  CHECK:", c)
    record_section(
        "cost", md,
        f"gprobe int capture <= 1.1x bpftrace count(), same run: {ratio_int:.3f}x "
        f"(CPU time; wall {res['wall']['gprobe-int']['ratio']:.3f}x), {met(ratio_int <= 1.1)}",
        cpu_ns_per_call=cpu, wall_ns_per_call=wall, summary=res, checks=checks)


# ------------------------------------------------------------------------ 2. BPF stats


def prog_names():
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"]: p.get("name", "") for p in json.loads(out)}


def fd_prog_stats(pid, name):
    """run_time_ns and run_cnt of the BPF programs `pid` holds (from /proc/PID/fdinfo)."""
    names = prog_names()
    progs = {}
    for fd in glob.glob(f"/proc/{pid}/fdinfo/*"):
        info = dict(ln.split(":", 1) for ln in read(fd).splitlines() if ":" in ln)
        if "prog_id" not in info or "run_cnt" not in info:
            continue
        pid_ = int(info["prog_id"])
        progs[pid_] = {"id": pid_, "name": names.get(pid_, "?"),
                       "run_time_ns": int(info["run_time_ns"]), "run_cnt": int(info["run_cnt"])}
    sel = [p for p in progs.values()
           if (p["name"] == name if name else p["run_cnt"] > 0 and p["name"] not in
               ("BEGIN", "END", "BEGIN_trigger", "END_trigger"))]
    # bpftrace: the uprobe program is the busy one.
    sel.sort(key=lambda p: -p["run_cnt"])
    return sel[0] if sel else None


class BpfStats:
    """kernel.bpf_stats_enabled=1 inside the block, the previous value restored after."""

    path = "/proc/sys/kernel/bpf_stats_enabled"

    def __enter__(self):
        self.old = read(self.path).strip() or "0"
        with open(self.path, "w") as f:
            f.write("1")

    def __exit__(self, *exc):
        with open(self.path, "w") as f:
            f.write(self.old)


BPFSTATS_CONFIGS = ["bpftrace-empty", "bpftrace-count", "bpftrace-printf", "gprobe-int",
                   "gprobe-str64", "gprobe-latency"]


def section_bpfstats():
    """Run time per hit of each tracer's uprobe program; the configurations interleaved run
    by run, so drift falls on all alike; ratios to bpftrace count() per round too."""
    vals = {c: [] for c in BPFSTATS_CONFIGS}
    with BpfStats():
        for rnd in range(ARGS.stat_runs):
            for cfg in BPFSTATS_CONFIGS:
                r, extra = one_run(cfg, ARGS.calls, stats_fn=fd_prog_stats)
                p = extra["bpf"]
                vals[cfg].append((p["run_time_ns"] / max(p["run_cnt"], 1),
                                  p["run_cnt"] / r["calls"], p["name"]))
            print(f"  round {rnd + 1}/{ARGS.stat_runs}: " + "  ".join(
                f"{c} {vals[c][-1][0]:.0f}" for c in BPFSTATS_CONFIGS), flush=True)
    rows, data = [], {}
    count = [v[0] for v in vals["bpftrace-count"]]
    for cfg in BPFSTATS_CONFIGS:
        ns = [v[0] for v in vals[cfg]]
        ratios = [a / b for a, b in zip(ns, count)]
        per_hit = median(ns)
        data[cfg] = {"ns_per_hit": per_hit, "quartiles": (pct(ns, 25), pct(ns, 75)),
                     "round_ratio": median(ratios), "runs": vals[cfg]}
        rows.append([COST_LABEL[cfg], vals[cfg][0][2], fmt(per_hit, 0),
                     f"{fmt(pct(ns, 25), 0)}-{fmt(pct(ns, 75), 0)}",
                     fmt(per_hit / median(count), 2), fmt(median(ratios), 2),
                     fmt(median([v[1] for v in vals[cfg]]), 2), " ".join(f"{x:.0f}" for x in ns)])
        print(f"  {cfg:16} {per_hit:7.0f} ns per hit", flush=True)
    md = table(f"2. BPF program run time per hit (kernel.bpf_stats_enabled=1; median of "
               f"{ARGS.stat_runs} runs of {ARGS.calls:,} calls, configurations interleaved)",
               ["configuration", "program", "ns per hit", "quartiles", "x bpftrace count()",
                "median of per-round ratios", "hits per call", "per run"], rows)
    bt = data["bpftrace-count"]["ns_per_hit"]
    r_int = data["gprobe-int"]["ns_per_hit"] / bt
    r_s64 = data["gprobe-str64"]["ns_per_hit"] / bt
    record_section("bpfstats", md,
                   f"per hit, same run, vs bpftrace count() ({bt:.0f} ns; empty program "
                   f"{data['bpftrace-empty']['ns_per_hit']:.0f} ns): int capture <= 1.3x: "
                   f"{r_int:.2f}x, {met(r_int <= 1.3)}; 64-byte string <= 2x: {r_s64:.2f}x, "
                   f"{met(r_s64 <= 2)}", data=data)


# ---------------------------------------------------------------- 2b. BPF program variants


def section_bpfvariants():
    """gprobe.bpf.c with one part removed at a time (bench/bpf-variants), same loader."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("variants", ARGS.variants_file)
    variants = importlib.util.module_from_spec(spec)
    sys.dont_write_bytecode = True
    spec.loader.exec_module(variants)

    inc = os.path.join(REPO, "agent-ebpf", "include")
    original = read(os.path.join(REPO, "agent-ebpf", "src", "gprobe.bpf.c"))
    vdir = os.path.join(ARGS.work, "bpf-variants")
    os.makedirs(vdir, exist_ok=True)
    loader = os.path.join(vdir, "loader")
    subprocess.run(["cc", "-O2", "-Wall", "-I", inc,
                    os.path.join(REPO, "bench", "bpf-variants", "loader.c"), "-lbpf", "-o",
                    loader], check=True)
    sym = subprocess.run([ARGS.gprobe, "symbols", ARGS.loop, "--filter", r"^main\.target$",
                          "--verbose"], capture_output=True, text=True, check=True).stdout
    offset = re.search(r"body=(0x[0-9a-f]+)", sym).group(1)
    # The RET instructions of main.target, as file offsets, for the latency mode.
    m = re.search(r"^0x([0-9a-f]+)\s+(\d+) main\.target .*entry=(0x[0-9a-f]+)", sym, re.M)
    addr, size, entry = int(m.group(1), 16), int(m.group(2)), int(m.group(3), 16)
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={addr:#x}",
                          f"--stop-address={addr + size:#x}", ARGS.loop],
                         capture_output=True, text=True, check=True).stdout
    rets = [int(a, 16) - addr + entry
            for a in re.findall(r"^\s*([0-9a-f]+):\s+ret", dis, re.M)]
    if not rets:
        raise RuntimeError(f"no RET found in main.target:\n{dis}")
    ret_args = [a for r in rets for a in ("-R", hex(r))]
    modes = tuple(os.environ.get("GPROBE_BENCH_MODES", "int,str64,lat").split(","))
    chosen = [v for v in variants.VARIANTS
              if not ARGS.variants or v[0] in ARGS.variants.split(",")]
    objs = {}
    for name, _what, patches, _opts in chosen:
        src = os.path.join(vdir, f"{name}.bpf.c")
        objs[name] = os.path.join(vdir, f"{name}.bpf.o")
        with open(src, "w") as f:
            f.write(variants.source(original, patches))
        subprocess.run(["clang-19", "-O2", "-g", "-target", "bpf", "-mcpu=v3",
                        "-D__TARGET_ARCH_x86", "-Wall", "-I", inc,
                        "-I/usr/include/x86_64-linux-gnu", "-c", src, "-o", objs[name]],
                       check=True)

    # Variants that write records of their own, or none, are not checked against the counts.
    unchecked = set(getattr(variants, "UNCHECKED", ()))

    def one(name, opts, mode):
        """ns per hit (bpf_stats) and the target's CPU ns per call, one run."""
        t = Target(["-n", str(ARGS.calls)], pinned=True)
        # stderr to a file: a verifier log can fill a pipe and block the loader while we
        # wait for its "ready" line.
        errf = open(os.path.join(vdir, f"{name}.{mode}.stderr"), "w+")
        lp = spawn([*pin("tracer", True), loader, *opts, *(ret_args if mode == "lat" else []),
                    objs[name], ARGS.loop, offset, str(t.pid), mode],
                   stdout=subprocess.PIPE, stderr=errf, text=True)
        if lp.stdout.readline().strip() != "ready":
            stop(lp)
            stop(t.p)
            errf.seek(0)
            raise RuntimeError(f"loader failed on {name}: {errf.read()[-4000:]}")
        errf.close()
        t.go()
        r = t.result()
        stop(lp, signal.SIGINT, 30)
        st = json.loads(lp.stdout.read().strip().splitlines()[-1])
        # Hits: one per call, two with latency (entry and RET). Every hit counted once; what
        # was emitted was read, and read right.
        n = r["calls"] * (2 if mode == "lat" else 1)
        if st["run_cnt"] != n or (name not in unchecked and (
                st["hits"] not in (0, n) or st["bad_events"]
                or (st["hits"] and st["emitted"] + st["lost"] + st["throttled"] + st["unpaired"]
                    + st["too_deep"] != n)
                or st["events"] != st["emitted"])):
            raise RuntimeError(f"{name} {mode}: {st} for {n} calls")
        if os.environ.get("GPROBE_BENCH_DEBUG"):
            print(f"    {name} {mode}: {st}", flush=True)
        return st["run_time_ns"] / max(st["run_cnt"], 1), r["cpu_ns_per_call"]

    # Rounds of every variant one after the other, so drift over the minutes of the
    # section (and any first-run effect) falls on all variants alike.
    # bpftrace's `@c = count()` on the same function runs in every round too (once per
    # mode): the reference of section 2's targets, same run.
    ref = ("bpftrace-count", "bpftrace `uprobe:...{ @c = count(); }` (reference)", [], [])

    def one_ref():
        r, extra = one_run("bpftrace-count", ARGS.calls, stats_fn=fd_prog_stats)
        if extra["bpf"]["run_cnt"] != r["calls"] or extra["seen"] not in (r["calls"], -1):
            raise RuntimeError(f"bpftrace count(): {extra} for {r['calls']} calls")
        if extra["seen"] == -1:
            # The program's run count was read before; only bpftrace's exit print is missing
            # (seen on a loaded machine).
            print(f"  note: bpftrace printed no count at exit ({extra})", flush=True)
        return extra["bpf"]["run_time_ns"] / extra["bpf"]["run_cnt"], r["cpu_ns_per_call"]

    samples = {(v[0], m): [] for v in [ref, *chosen] for m in modes}
    with BpfStats():
        for rnd in range(ARGS.stat_runs):
            for name, _what, _, opts in chosen:
                for mode in modes:
                    samples[(name, mode)].append(one(name, opts, mode))
            for mode in modes:
                samples[(ref[0], mode)].append(one_ref())
            print(f"  round {rnd + 1}/{ARGS.stat_runs} done", flush=True)
    rows, data = [], {}
    for name, what, _, _ in [ref, *chosen]:
        res = {}
        for mode in modes:
            vals = [v for v, _ in samples[(name, mode)]]
            res[mode] = median(vals)
            res[mode + "_iqr"] = (pct(vals, 25), pct(vals, 75))
            res[mode + "_call"] = median([c for _, c in samples[(name, mode)]])
            res[mode + "_runs"] = [round(v) for v in vals]
        data[name] = res

    def cell(name, mode):
        r = data[name]
        return f"{fmt(r[mode], 0)} ({fmt(r[mode + '_iqr'][0], 0)}-{fmt(r[mode + '_iqr'][1], 0)})"

    heads = {"int": "capture [n]", "str64": "capture [s] (64 B)",
             "lat": "capture [n] + latency (2 hits per call)"}
    for name, what, _, _ in [ref, *chosen]:
        res = data[name]
        rows.append([name, what] + [c for m in modes for c in (
            cell(name, m), fmt(res[m] / data[ref[0]][m], 2))] + [fmt(res[modes[0] + "_call"], 0)])
        print(f"  {name:14} " + "  ".join(f"{m} {res[m]:6.0f} ns {res[m + '_runs']}"
                                          for m in modes), flush=True)
    md = table(f"2b. gprobe_uprobe variants, same libbpf loader (bench/bpf-variants; "
               f"median and quartiles of {ARGS.stat_runs} interleaved runs of {ARGS.calls:,} "
               "calls; bpf_stats on)",
               ["variant", "what changes"] + [h for m in modes for h in (
                   f"ns per hit, {heads[m]}", "x count()")]
               + [f"target CPU ns/call, {heads[modes[0]]}"], rows)
    record_section("bpfvariants", md, data=data)


# ------------------------------------------------------------------------ 3. throughput


THROUGHPUT_RUNS = [
    # (label, config, gprobe extra args, target extra args)
    ("int, 1 MiB ring (default)", "gprobe-int", [], []),
    ("64-byte string, 1 MiB ring", "gprobe-str64", [], []),
    ("int + latency, 1 MiB ring", "gprobe-latency", [], []),
    ("int, 8 MiB ring", "gprobe-int", ["--ring-buffer-size", "8MiB"], []),
    ("int, 16 KiB ring", "gprobe-int", ["--ring-buffer-size", "16KiB", "--wakeup-size", "8KiB"], []),
    ("int + latency, 16 KiB ring", "gprobe-latency",
     ["--ring-buffer-size", "16KiB", "--wakeup-size", "8KiB"], []),
    ("int, 1 MiB ring, 2 goroutines", "gprobe-int", [], ["-goroutines", "2"]),
    ("64-byte string, 1 MiB ring, 2 goroutines", "gprobe-str64", [], ["-goroutines", "2"]),
]


def section_throughput():
    rows, data = [], []
    dur = ARGS.tp_seconds
    for label, cfg, gargs, targs in THROUGHPUT_RUNS:
        caps, latency = GP_CONFIGS[cfg][0]
        t = Target(["-n", "0", "-duration", f"{dur}s", *targs])
        g = Gprobe(spec_yaml(cfg, ARGS.loop, [("main.target", SIG, caps, latency)]), gargs)
        g.wait_attached(t.pid)
        c0, t0 = cpu_ticks(g.pid), time.monotonic()
        t.go()
        r = t.result()
        time.sleep(0.5)  # the reader polls every 25 ms: let it drain what is left
        c1 = cpu_ticks(g.pid)
        hwm = status_kib(g.pid, "VmHWM")
        s = g.stop()
        loop_s = r["loop_ns"] / 1e9
        cores = (c1 - c0) / CLK_TCK / loop_s
        rate = r["calls"] / loop_s
        accounted = s["delivered"] + s["lost"] + s["throttled"]
        exact = accounted == r["calls"]
        d = {"label": label, "calls": r["calls"], "rate": rate, "agent_cores": cores,
             "hwm_kib": hwm, "exact": exact, "wall_s": time.monotonic() - t0, **s}
        data.append(d)
        rows.append([label, f"{r['calls']:,}", fmt(rate / 1e3, 0), f"{s['delivered']:,}",
                     f"{s['lost']:,}", f"{s['abandoned']:,}/{s['orphan_returns']:,}",
                     "yes" if exact else f"**no** ({accounted - r['calls']:+,})",
                     fmt(cores, 3), fmt(hwm / 1024, 1)])
        print(f"  {label:32} {rate / 1e3:7.0f} k calls/s  delivered {s['delivered']:,} "
              f"lost {s['lost']:,}  exact={exact}  agent {cores:.3f} cores  "
              f"VmHWM {hwm / 1024:.1f} MiB", flush=True)
    md = table(f"3a. End-to-end throughput (target calling as fast as it can for {dur} s; "
               "JSONL to /dev/null; eventsPerSecond: 0)",
               ["run", "produced calls", "k calls/s", "delivered", "lost (counted)",
                "abandoned/orphan returns", "produced == delivered + lost",
                "agent cores", "agent VmHWM MiB"], rows)
    # The target's highest rate with gprobe's defaults (several goroutines beat one).
    main = max((d for d, run in zip(data, THROUGHPUT_RUNS) if not run[2]),
               key=lambda d: d["rate"])
    ok = main["lost"] == 0 and main["exact"] and main["agent_cores"] < 0.25
    record_section("throughput", md,
                   f"zero loss at {main['rate'] / 1e3:.0f} k calls/s ({main['label']}) with the "
                   f"agent under 0.25 core: lost {main['lost']}, {main['agent_cores']:.3f} "
                   f"cores, {met(ok)}", data=data)


# ------------------------------------------------------------------------- 3b. userspace


def section_userspace():
    home = os.path.join(ARGS.work, "criterion")
    env = dict(os.environ, CRITERION_HOME=home)
    p = spawn([ARGS.userspace, "--bench"], env=env, stdout=subprocess.PIPE,
              stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate()
    if p.returncode != 0:
        raise RuntimeError(f"userspace bench failed:\n{out}")
    rows, data = [], {}
    for bj in sorted(glob.glob(f"{home}/**/new/benchmark.json", recursive=True)):
        b = json.load(open(bj))
        est = json.load(open(os.path.join(os.path.dirname(bj), "estimates.json")))
        ns = est["median"]["point_estimate"]
        elems = (b.get("throughput") or {}).get("Elements", 4096)
        calls_s = elems / (ns / 1e9)
        wl = b["value_str"]
        recs = 2 if wl == "latency" else 1
        key = f"{b['group_id']}/{b['function_id']}/{wl}"
        data[key] = {"ns_per_batch": ns, "calls_per_s": calls_s, "records_per_s": calls_s * recs}
        rows.append([b["group_id"], b["function_id"], wl, fmt(ns / elems, 0),
                     fmt(calls_s / 1e6, 2), fmt(calls_s * recs / 1e6, 2)])
    md = table("3b. Userspace path per core (criterion, median; batches of 4096 calls)",
               ["group", "stage", "workload", "ns per call", "M calls/s", "M records/s"], rows)
    full = data.get("jsonl/process+encode/int", {}).get("records_per_s", 0)
    otlp = data.get("otlp/process+spans/int", {}).get("records_per_s", 0)
    record_section("userspace", md,
                   f">= 2,000,000 events/s per core: JSONL {full / 1e6:.2f} M/s "
                   f"{met(full >= 2e6)}; OTLP spans {otlp / 1e6:.2f} M/s {met(otlp >= 2e6)}",
                   data=data)


# --------------------------------------------------------------------------- 4. resolve


def section_resolve():
    rows, data = [], []
    for b in ARGS.resolve_targets:
        runs, ones = [], []
        for _ in range(ARGS.resolve_runs):
            out = subprocess.run([ARGS.resolve, b], capture_output=True, text=True, check=True)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            out = subprocess.run([ARGS.resolve, "--symbol", "main.main", b], capture_output=True,
                                 text=True, check=True)
            ones.append(json.loads(out.stdout.strip().splitlines()[-1]))
        if "error" in runs[0]:
            rows.append([os.path.basename(b), "-", "-", "-", runs[0]["error"]] + ["-"] * 6)
            continue
        r0 = runs[0]
        med = {k: median([r[k] for r in runs]) for k in
               ("open_ms", "functions_ms", "sites_ms", "dwarf_ms", "resolve_ms", "sites_seq_ms")}
        hwm = max(r["hwm_kib"] for r in runs) * 1024
        one_ms = median([o["one_ms"] for o in ones])
        one_rss = max(o["rss_kib"] for o in ones) * 1024
        d = {"path": b, "size": r0["size"], "functions": r0["functions"], "rets": r0["rets"],
             "dwarf": r0["dwarf"], "signatures": r0["signatures"], "go": r0["go_version"],
             "hwm_bytes": hwm, "runs": runs, "one_symbol": ones, "one_ms": one_ms,
             "one_rss_bytes": one_rss, **med}
        data.append(d)
        rows.append([os.path.basename(b), fmt(r0["size"] / 1e6, 1), r0["go_version"],
                     f"{r0['functions']:,}", f"{r0['rets']:,}",
                     f"{r0['signatures']:,}" if r0["dwarf"] else "no DWARF",
                     fmt(med["open_ms"], 1), fmt(med["functions_ms"], 1),
                     fmt(med["sites_ms"], 1), fmt(med["dwarf_ms"], 1) if r0["dwarf"] else "-",
                     fmt(med["resolve_ms"], 1), fmt(hwm / 1e6, 1),
                     fmt(hwm / r0["size"], 2), fmt(med["sites_seq_ms"], 1), fmt(one_ms, 1),
                     fmt(one_rss / 1e6, 1)])
    md = table(f"4. Resolution (one process per binary, median of {ARGS.resolve_runs}; "
               "peak = max VmHWM)",
               ["binary", "MB", "Go", "functions", "RETs", "DWARF signatures", "open ms",
                "functions() ms", "all_probe_sites() ms", "dwarf ms", "total ms",
                "peak RSS MB", "peak / size", "probe_sites() per fn, 1 thread ms",
                "one symbol (main.main) ms", "RSS after one symbol MB"], rows)
    stripped = [d for d in data if not d["dwarf"]]
    big = max(stripped, key=lambda d: d["size"]) if stripped else None
    tgt = "no stripped binary"
    if big:
        ok = big["resolve_ms"] <= 150 and big["hwm_bytes"] < 2 * big["size"]
        tgt = (f"{os.path.basename(big['path'])} ({big['size'] / 1e6:.1f} MB) <= 150 ms and "
               f"peak < 2x size: {big['resolve_ms']:.0f} ms, peak "
               f"{big['hwm_bytes'] / big['size']:.2f}x, {met(ok)}")
    record_section("resolve", md, tgt, data=data)


# ---------------------------------------------------------------------- 5. attach latency


def section_attach():
    exe = os.path.join(ARGS.work, "attach-loop")
    shutil.copy(ARGS.loop, exe)
    out = os.path.join(ARGS.work, "attach.jsonl")
    g = Gprobe(spec_yaml("attach", exe, [("main.target", SIG, ["n"], False)]), out=out)
    starts = []
    for _ in range(ARGS.starts):
        p = spawn([exe, "-n", "0", "-duration", "1s", "-sleep", "100us"],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        o, e = p.communicate(timeout=60)
        if p.returncode != 0:
            raise RuntimeError(f"attach target failed: {e}")
        starts.append(json.loads(o.strip().splitlines()[-1]))
        time.sleep(0.2)  # gprobe sees the exit and detaches: each start attaches afresh
    time.sleep(0.5)
    g.stop()
    first = {}
    with open(out) as f:
        for ln in f:
            r = json.loads(ln)
            pid = r["pid"]
            if pid not in first or r["start_time_unix_nano"] < first[pid][0]:
                first[pid] = (r["start_time_unix_nano"], r["args"].get("n"))
    lat, missing, skipped = [], 0, []
    for s in starts:
        if s["pid"] not in first:
            missing += 1
            continue
        t, n = first[s["pid"]]
        lat.append((t - s["start_unix_nano"]) / 1e6)
        skipped.append(n)
    if missing:
        lat += [float("inf")] * missing  # never attached within the 1 s run
    p50, p99 = pct(lat, 50), pct(lat, 99)
    rows = [[len(starts), missing, fmt(min(lat), 1), fmt(p50, 1), fmt(p99, 1), fmt(max(lat), 1),
             fmt(median(skipped), 0) if skipped else "-"]]
    md = table(f"5. Attach latency: process start (Go package init) -> its first delivered "
               f"call ({ARGS.starts} starts of a fresh process; each start resolves and "
               "attaches anew)",
               ["starts", "never traced", "min ms", "p50 ms", "p99 ms", "max ms",
                "median calls missed before attach"], rows)
    record_section("attach", md, f"p99 <= 100 ms: {p99:.1f} ms, {met(p99 <= 100)}",
                   latencies_ms=lat, p50=p50, p99=p99, missing=missing)


# ------------------------------------------------------------------------------- 6. RSS


def smaps_rss(pid, work):
    """Resident KiB by what is mapped: BPF maps (the ring buffers), the traced binaries
    (files under `work`), gprobe's own executable, and everything else."""
    out = {"bpf": 0, "traced": 0, "exe": 0}
    exe = os.path.realpath(f"/proc/{pid}/exe")
    name = ""
    for ln in read(f"/proc/{pid}/smaps").splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", ln):
            f = ln.split(None, 5)
            name = f[5].strip() if len(f) > 5 else ""
        elif ln.startswith("Rss:"):
            kib = int(ln.split()[1])
            if name.startswith("anon_inode:bpf"):
                out["bpf"] += kib
            elif name.startswith(work):
                out["traced"] += kib
            elif name == exe:
                out["exe"] += kib
    return out


def section_rss():
    d = os.path.join(ARGS.work, "many-copies")
    os.makedirs(d, exist_ok=True)
    exes = []
    for i in range(10):
        e = os.path.join(d, f"many-{i}")
        shutil.copy(ARGS.many, e)
        exes.append(e)
    probes = [(f"main.f{i}", "func(n int64) int64", ["n"], False) for i in range(10)]
    spec = spec_yaml("rss", os.path.join(d, "many-*"), probes)
    keys = ("VmRSS", "RssAnon", "RssFile", "VmHWM")

    def measure(g):
        m = {k: status_kib(g.pid, k) for k in keys}
        m.update(smaps_rss(g.pid, ARGS.work))
        return m

    # Baseline: the agent loaded, nothing attached.
    g0 = Gprobe(spec)
    time.sleep(2)
    base = measure(g0)
    g0.stop()
    procs = []
    for e in exes:
        p = spawn([e], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if not p.stdout.readline().startswith("ready"):
            raise RuntimeError(f"{e} did not start")
        procs.append(p)
    states = []
    for label, extra in (("100 probes, 10 idle processes", []),
                         ("same, --ring-buffer-size 8MiB", ["--ring-buffer-size", "8MiB"])):
        g = Gprobe(spec, extra)
        g.wait_for(lambda s: s.count("attached rss / ") >= 100, 120, "100 probes to attach")
        time.sleep(3)  # idle
        m = measure(g)
        m["uprobes"] = sum(int(x) for x in
                           re.findall(r"attached rss / .*?\((\d+) uprobes?;", g.stderr()))
        g.stop()
        states.append((label, m))
    for p in procs:
        stop(p, signal.SIGTERM, 10)
    cols = ("VmRSS", "RssAnon", "RssFile", "bpf", "traced", "exe", "VmHWM")
    rows = [["loaded, nothing attached", 0, 0] + [fmt(base[k] / 1024, 1) for k in cols]]
    rows += [[label, 100, m["uprobes"]] + [fmt(m[k] / 1024, 1) for k in cols]
             for label, m in states]
    md = table("6. Agent memory, idle (10 copies of a Go binary x 10 probes; MiB)",
               ["state", "probes", "uprobes", "VmRSS", "RssAnon", "RssFile",
                "of which BPF map mmaps (ring buffers)", "of which traced binaries",
                "of which gprobe's executable", "VmHWM"], rows)
    idle = states[0][1]
    rss = idle["VmRSS"] / 1024
    record_section("rss", md,
                   f"RSS <= 32 MiB idle with 100 probes: {rss:.1f} MiB, {met(rss <= 32)} "
                   f"(with --ring-buffer-size 8MiB: {states[1][1]['VmRSS'] / 1024:.1f} MiB)",
                   base=base, idle=idle, idle_8mib_ring=states[1][1])


# ------------------------------------------------------------------------------- report


def leftover_uprobes():
    """Perf-event BPF attachments (uprobes) on files under our work folder."""
    out = subprocess.run(["bpftool", "-j", "perf", "list"], capture_output=True, text=True)
    try:
        items = json.loads(out.stdout or "[]")
    except json.JSONDecodeError:
        return []
    return [i for i in items if str(i.get("filename", "")).startswith(ARGS.work)
            or i.get("pid") in {p.pid for p in STARTED}]


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
    global ARGS
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
    ARGS = ap.parse_args()
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
