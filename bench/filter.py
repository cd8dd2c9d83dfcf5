#!/usr/bin/env python3
"""What a probe's `when:` saves the agent, and what it costs in the kernel, in one run.

Part 1, agent CPU and events into userspace. bench/go/filterload calls `main.tick(i)` at a
steady rate (default 100,000 calls a second) for a set time (default 10 s), its argument
cycling 0..99, so `when: "i < 1"` keeps 1% of the calls and `"i < 10"` 10%. Variants, run
one after the other in each round (so that drift falls on all alike; median of the rounds):

  none       no gprobe: the target's own rate, the load the others must match
  all        `capture: [i]`, no `when:`: every call read by gprobe, JSONL to /dev/null
  all-none   the same with `--output none`: every call read, nothing written
  keep0      `when: "i < 0"`: every call traps and is decided in BPF, none is kept
  keep1      `when: "i < 1"`: 1% kept
  keep10     `when: "i < 10"`: 10% kept

gprobe runs with `eventsPerSecond: 0` (no rate limit; the summary's `throttled` is checked
to be 0) and `maxOverheadPercent: 0` (no budget: at 100,000 traps a second the default 2%
would take the probe off). Agent CPU = delta of utime+stime (/proc/PID/stat) of the gprobe
process from the target's start signal (SIGUSR1) to 0.5 s after it exits (the reader polls
every 25 ms: the drain is in the window), divided by that window's wall time: cores.
Events/s into userspace = the summary's `delivered` (one record per call: no latency) over
the target's loop time; `filtered` likewise. Every run checks calls made = delivered + lost
+ throttled + too_deep + filtered + sampled_out. The machine's other load during each run
(busy CPU from /proc/stat minus gprobe's and the target's) is printed beside it.

Part 2, BPF run time per call of gprobe's uprobe program (kernel.bpf_stats_enabled=1, set
for the part and restored after; run_time_ns / run_cnt of `gprobe_uprobe` from the gprobe
process's fdinfo), the target calling as fast as it can (--stat-calls calls), with:
no `when:`; 1, 4 and 16 terms keeping 1% (`i != 1000 && ... && i < 1`: every term before
the last is true, so each is evaluated, and the last decides); and 1, 4 and 16 terms keeping
every call (`... && i >= 0`). ns per term = the least-squares slope over 1, 4 and 16 terms
(and (16 - 1) / 15), per kept share.

  sudo flock /tmp/gprobe-bpf.lock bench/filter.py [--gprobe PATH] [--rounds 5]
       [--seconds 10] [--rate 100000] [--stat-rounds 5] [--stat-calls 200000]
       [--only cpu,terms] [--out FILE.md]

Without --gprobe it builds one (`cargo build --release -p gprobe-agent`, CARGO_TARGET_DIR
respected). Go: $GO, else .cache/venv/bin/go, else /usr/lib/go-1.19/bin/go. Target pinned to
one CPU, gprobe to the other. Needs root and bpftool. Every process it starts is stopped by
its pid; at the end it checks that no gprobe program is left loaded.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from tracerproc import pin, spawn, stop, stop_all, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CLK_TCK = os.sysconf("SC_CLK_TCK")
STATS = "/proc/sys/kernel/bpf_stats_enabled"

# (name, when, gprobe output args, label)
CPU_VARIANTS = [
    ("none", None, None, "(d) no probe: the target alone"),
    ("all", None, ["--output", "jsonl"], "(a) no when: (JSONL to /dev/null)"),
    ("all-none", None, ["--output", "none"], "(a') no when:, --output none"),
    ("keep0", "i < 0", ["--output", "jsonl"], 'when: "i < 0" (0% kept)'),
    ("keep1", "i < 1", ["--output", "jsonl"], '(b) when: "i < 1" (1% kept)'),
    ("keep10", "i < 10", ["--output", "jsonl"], '(c) when: "i < 10" (10% kept)'),
]


def terms(n, last):
    """n terms: n - 1 always true (i cycles 0..99), then `last`."""
    return " && ".join([f"i != {1000 + k}" for k in range(n - 1)] + [last])


TERM_VARIANTS = [("no when:", None, None)] + [
    (f"{n} term{'s' if n > 1 else ''}, {share} kept", terms(n, last), (n, share))
    for share, last in (("1%", "i < 1"), ("100%", "i >= 0")) for n in (1, 4, 16)]


def spec(target, when):
    w = f'\n      when: "{when}"' if when else ""
    return f"""apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {{name: filter-bench}}
spec:
  selector: {{executable: "{target}"}}
  limits: {{eventsPerSecond: 0, maxOverheadPercent: 0}}
  probes:
    - symbol: main.tick
      signature: "func(i int64) int64"
      capture: [i]{w}
"""


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def run_ns(pid):
    """ns on a CPU of the live threads of `pid` (/proc/PID/task/*/schedstat): finer than
    utime+stime's clock ticks, but blind to a thread that exits in between."""
    tot = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                tot += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return tot


def machine_busy():
    """Busy jiffies of all CPUs (everything but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4]


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def prog_stats(pid, name="gprobe_uprobe"):
    """run_time_ns and run_cnt of the program `name` that `pid` holds (its fdinfo)."""
    names = {p["id"]: p.get("name", "") for p in json.loads(subprocess.run(
        ["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout)}
    best = None
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = dict(ln.split(":", 1) for ln in f.read().splitlines() if ":" in ln)
        except OSError:
            continue
        if "prog_id" not in info or "run_cnt" not in info:
            continue
        pid_ = int(info["prog_id"])
        if names.get(pid_) != name:
            continue
        st = {"run_time_ns": int(info["run_time_ns"]), "run_cnt": int(info["run_cnt"])}
        if best is None or st["run_cnt"] > best["run_cnt"]:
            best = st
    return best


class Target:
    """filterload started with -wait: prints "ready", calls on SIGUSR1."""

    def __init__(self, binary, args):
        self.p = spawn([*pin("target"), binary, "-wait", *args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"target did not start: {line!r} {self.p.stderr.read()}")
        self.pid = self.p.pid

    def go(self):
        os.kill(self.pid, signal.SIGUSR1)

    def result(self, timeout=600):
        out, err = self.p.communicate(timeout=timeout)
        stop(self.p)
        if self.p.returncode != 0:
            raise RuntimeError(f"target failed ({self.p.returncode}): {err}")
        return json.loads(out.strip().splitlines()[-1])


class Gprobe:
    seq = 0

    def __init__(self, gprobe, work, spec_text, out_args):
        Gprobe.seq += 1
        base = os.path.join(work, f"gprobe-{Gprobe.seq}")
        self.spec, self.err, self.summary = base + ".yaml", base + ".err", base + ".sum.json"
        with open(self.spec, "w") as f:
            f.write(spec_text)
        with open(os.devnull, "wb") as o, open(self.err, "wb") as e:
            self.p = spawn([*pin("tracer"), gprobe, "run", self.spec, *out_args,
                            "--summary-file", self.summary],
                           stdout=o, stderr=e, stdin=subprocess.DEVNULL)
        self.pid = self.p.pid
        wait_for(self.err, "ready", self.p, "gprobe")

    def wait_attached(self, pid, timeout=60):
        t0 = time.monotonic()
        while True:
            with open(self.err, errors="replace") as f:
                for ln in f:
                    if "attached" in ln and str(pid) in ln:
                        return
            if self.p.poll() is not None:
                raise RuntimeError(f"gprobe exited ({self.p.returncode}): {open(self.err).read()}")
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"gprobe did not attach to {pid}: {open(self.err).read()}")
            time.sleep(0.02)

    def stop(self):
        stop(self.p, signal.SIGINT)
        if self.p.returncode != 0:
            raise RuntimeError(f"gprobe exited with {self.p.returncode}: {open(self.err).read()}")
        with open(self.summary) as f:
            s = json.load(f)
        probes = s["probes"]
        tot = {k: sum(p.get(k, 0) for p in probes) for k in
               ("delivered", "lost", "throttled", "too_deep", "filtered", "sampled_out")}
        return tot


def cpu_run(args, work, variant):
    name, when, out_args, _ = variant
    targs = ["-rate", str(args.rate), "-duration", f"{args.seconds}s"]
    g = None
    if out_args is not None:
        g = Gprobe(args.gprobe, work, spec(args.target, when), out_args)
    t = Target(args.target, targs)
    if g:
        g.wait_attached(t.pid)
    b0, c0, n0, w0 = (machine_busy(), cpu_ticks(g.pid) if g else 0, run_ns(g.pid) if g else 0,
                      time.monotonic())
    t.go()
    r = t.result()
    time.sleep(0.5)  # the reader polls every 25 ms: let it drain what is left
    b1, c1, n1, w1 = (machine_busy(), cpu_ticks(g.pid) if g else 0, run_ns(g.pid) if g else 0,
                      time.monotonic())
    window = w1 - w0
    loop_s = r["loop_ns"] / 1e9
    s = g.stop() if g else {}
    agent = (c1 - c0) / CLK_TCK / window
    target_cores = r["cpu_ns"] / 1e9 / window
    other = (b1 - b0) / CLK_TCK / window - agent - target_cores
    d = {"calls": r["calls"], "rate": r["calls"] / loop_s, "agent_cores": agent,
         "agent_ticks": c1 - c0, "agent_cores_ns": (n1 - n0) / 1e9 / window,
         "target_cores": target_cores, "other_cores": other,
         "window_s": window, "max_behind": r["max_behind"], **s}
    if g:
        d["delivered_per_s"] = s["delivered"] / loop_s
        d["filtered_per_s"] = s["filtered"] / loop_s
        acc = sum(s.values())
        d["exact"] = acc == r["calls"]
        if not d["exact"]:
            print(f"  CHECK {name}: {r['calls']} calls made, {acc} accounted {s}", flush=True)
        if s["throttled"] or s["lost"]:
            print(f"  CHECK {name}: throttled {s['throttled']}, lost {s['lost']}", flush=True)
    return d


def terms_run(args, work, variant):
    _, when, _ = variant
    g = Gprobe(args.gprobe, work, spec(args.target, when), ["--output", "jsonl"])
    try:
        t = Target(args.target, ["-rate", "0", "-duration", "0", "-n", str(args.stat_calls)])
        g.wait_attached(t.pid)
        # gprobe's start-up measurement of the uprobe sites runs the same program: only
        # what the target's calls add counts.
        st0 = prog_stats(g.pid) or {"run_time_ns": 0, "run_cnt": 0}
        t.go()
        r = t.result()
        st1 = prog_stats(g.pid)
    finally:
        s = g.stop()
    cnt = st1["run_cnt"] - st0["run_cnt"] if st1 else 0
    if cnt != r["calls"]:
        raise RuntimeError(f"{variant[0]}: program statistics {st0} -> {st1} for "
                           f"{r['calls']} calls")
    return {"ns": (st1["run_time_ns"] - st0["run_time_ns"]) / cnt, "calls": r["calls"], **s}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def show_table(title, header, rows, md):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    print(f"\n== {title}")
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    md += ["", f"**{title}**", "", f"| {' | '.join(map(str, header))} |",
           f"|{'|'.join('---' for _ in header)}|"]
    md += [f"| {' | '.join(map(str, r))} |" for r in rows]


def part_cpu(args, work, md, res):
    runs = {v[0]: [] for v in CPU_VARIANTS}
    for rnd in range(args.rounds):
        for v in CPU_VARIANTS:
            d = cpu_run(args, work, v)
            runs[v[0]].append(d)
            print(f"  round {rnd + 1}/{args.rounds} {v[0]:9} {d['rate']:9,.0f} calls/s  "
                  f"agent {d['agent_cores']:.4f} cores ({d['agent_ticks']} ticks; "
                  f"schedstat {d['agent_cores_ns']:.4f})  "
                  f"delivered/s {d.get('delivered_per_s', 0):9,.0f}  "
                  f"filtered/s {d.get('filtered_per_s', 0):9,.0f}  "
                  f"throttled {d.get('throttled', '-')}  target {d['target_cores']:.3f}  "
                  f"others {d['other_cores']:.3f} cores  load {loadavg()}", flush=True)
    m = {k: {f: med([d[f] for d in v]) for f in v[0] if isinstance(v[0][f], (int, float))}
         for k, v in runs.items()}
    a = m["all"]["agent_cores"]
    rows = []
    for name, _, _, label in CPU_VARIANTS:
        x = m[name]
        g = name != "none"
        rows.append([label, f"{x['rate']:,.0f}",
                     f"{x['agent_cores']:.4f}" if g else "-",
                     f"{x['agent_cores'] / a:.3f}" if g else "-",
                     f"{x['agent_cores_ns']:.4f}" if g else "-",
                     f"{x['delivered_per_s']:,.0f}" if g else "-",
                     f"{x['filtered_per_s']:,.0f}" if g else "-",
                     f"{int(x['throttled'])}/{int(x['lost'])}" if g else "-",
                     "yes" if not g or all(d["exact"] for d in runs[name]) else "**no**",
                     f"{x['target_cores']:.3f}", f"{x['other_cores']:.3f}",
                     " ".join(f"{d['agent_cores']:.3f}" for d in runs[name]) if g else "-"])
    show_table(f"Agent CPU and events into userspace: {args.rate:,} calls/s for {args.seconds} s "
               f"(median of {args.rounds} rounds, variants interleaved)",
               ["variant", "target calls/s", "agent cores", "x (a)",
                "agent cores (schedstat)", "events/s into userspace",
                "filtered/s", "throttled/lost", "calls accounted", "target cores",
                "others' cores", "agent cores per round"], rows, md)
    b = m["keep1"]["agent_cores"]
    c = m["keep10"]["agent_cores"]
    ok = b <= 0.02
    an, bn = m["all"]["agent_cores_ns"], m["keep1"]["agent_cores_ns"]
    lines = [f"(b)/(a) = {b / a:.3f}, (c)/(a) = {c / a:.3f}; (a) - (b) = {a - b:.4f} cores",
             f"by schedstat: (a) {an:.4f}, (b) {bn:.4f} cores, (b)/(a) = {bn / an:.3f}",
             f"goal: agent <= 0.02 core at 1% kept of {args.rate:,} calls/s: "
             f"{b:.4f} cores, {'met' if ok else 'MISSED'}",
             f"target rate, (b) against (d): {m['keep1']['rate'] / m['none']['rate']:.4f}; "
             f"(a) against (d): {m['all']['rate'] / m['none']['rate']:.4f}"]
    for ln in lines:
        print("  " + ln)
    md += [""] + [f"- {ln}" for ln in lines]
    res["cpu"] = {"median": m, "runs": runs, "goal_met": ok}


def part_terms(args, work, md, res):
    ns = {v[0]: [] for v in TERM_VARIANTS}
    old = open(STATS).read().strip() or "0"
    with open(STATS, "w") as f:
        f.write("1")
    try:
        for rnd in range(args.stat_rounds):
            for v in TERM_VARIANTS:
                ns[v[0]].append(terms_run(args, work, v)["ns"])
            print(f"  round {rnd + 1}/{args.stat_rounds}: " + "  ".join(
                f"{k}={x[-1]:.0f}" for k, x in ns.items()) + f"  load {loadavg()}", flush=True)
    finally:
        with open(STATS, "w") as f:
            f.write(old)
    m = {k: med(v) for k, v in ns.items()}
    base = m["no when:"]
    rows = [[k, f"{m[k]:.0f}", f"{m[k] - base:+.0f}", " ".join(f"{x:.0f}" for x in ns[k])]
            for k in ns]
    show_table(f"BPF run time per call of gprobe_uprobe (kernel.bpf_stats_enabled; median of "
               f"{args.stat_rounds} runs of {args.stat_calls:,} calls)",
               ["when:", "ns per call", "against no when:", "per run"], rows, md)
    slopes = {}
    lines = []
    for share in ("1%", "100%"):
        pts = [(v[2][0], m[v[0]]) for v in TERM_VARIANTS if v[2] and v[2][1] == share]
        xs = [p[0] for p in pts]
        mx, my = statistics.mean(xs), statistics.mean(p[1] for p in pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x in xs)
        d = dict(pts)
        end = (d[16] - d[1]) / 15
        # Per-round slopes too: the spread of the estimate.
        per_round = []
        for r in range(args.stat_rounds):
            k1 = [v[0] for v in TERM_VARIANTS if v[2] == (1, share)][0]
            k16 = [v[0] for v in TERM_VARIANTS if v[2] == (16, share)][0]
            per_round.append((ns[k16][r] - ns[k1][r]) / 15)
        slopes[share] = {"slope": slope, "end": end, "per_round": per_round}
        lines.append(f"{share} kept: {slope:.1f} ns per term (least squares over 1, 4, 16 "
                     f"terms); (16 - 1) / 15 = {end:.1f} ns; per round "
                     + " ".join(f"{x:.1f}" for x in per_round))
    k1 = m["1 term, 1% kept"]
    lines.append(f"1 term keeping 1% against no when: (every call written): {k1 - base:+.0f} ns "
                 "per call")
    worst = max(s["slope"] for s in slopes.values())
    lines.append(f"goal: <= 40 ns per term: {worst:.1f} ns (the larger slope), "
                 f"{'met' if worst <= 40 else 'MISSED'}")
    for ln in lines:
        print("  " + ln)
    md += [""] + [f"- {ln}" for ln in lines]
    res["terms"] = {"median": m, "runs": ns, "slopes": slopes, "goal_met": worst <= 40}


def build_gprobe():
    out = subprocess.run(["cargo", "build", "--release", "-p", "gprobe-agent", "--bin", "gprobe",
                          "--message-format=json-render-diagnostics"], cwd=REPO,
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    exe = None
    for ln in out.splitlines():
        try:
            msg = json.loads(ln)
        except ValueError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            exe = msg["executable"]
    if not exe:
        raise SystemExit("bench/filter.py: cargo built no gprobe")
    return exe


def build_target(work):
    go = os.environ.get("GO") or next(
        (p for p in (os.path.join(REPO, ".cache/venv/bin/go"), "/usr/lib/go-1.19/bin/go")
         if os.access(p, os.X_OK)), None)
    if not go:
        raise SystemExit("bench/filter.py: no Go toolchain (set GO)")
    env = dict(os.environ, GOTOOLCHAIN="local", GO111MODULE="off", GOFLAGS="", CGO_ENABLED="0",
               GOCACHE=os.path.join(work, "go/cache"), GOPATH=os.path.join(work, "go/path"))
    dst = os.path.join(work, "filterload")
    subprocess.run([go, "build", "-o", dst, "."], cwd=os.path.join(HERE, "go/filterload"),
                   env=env, check=True)
    ver = subprocess.run([go, "version"], capture_output=True, text=True).stdout.split()[2]
    return dst, ver


def leftover_programs():
    progs = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True,
                                      text=True, check=True).stdout)
    return [f"{p['id']} {p.get('name', '')}" for p in progs
            if p.get("name", "").startswith("gprobe")]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gprobe")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rate", type=int, default=100000)
    ap.add_argument("--stat-rounds", type=int, default=5)
    ap.add_argument("--stat-calls", type=int, default=200000)
    ap.add_argument("--only", default="cpu,terms")
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/filter.py: needs root (BPF, kernel.bpf_stats_enabled)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    left = leftover_programs()
    if left:
        print(f"note: gprobe programs loaded before the run: {left}", flush=True)
    if not args.gprobe:
        args.gprobe = build_gprobe()
    only = set(args.only.split(","))
    md = []
    res = {}
    with tempfile.TemporaryDirectory(prefix="gprobe-filter.") as work:
        args.target, gover = build_target(work)
        ver = subprocess.run([args.gprobe, "--version"], capture_output=True, text=True).stdout
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        intro = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {ver.strip()} ({head}), "
                 f"{gover}, kernel {os.uname().release}, {os.cpu_count()} CPUs, "
                 f"load average {loadavg()} at the start")
        print(intro, flush=True)
        md.append(intro)
        try:
            if "cpu" in only:
                part_cpu(args, work, md, res)
            if "terms" in only:
                part_terms(args, work, md, res)
        finally:
            stop_all()
        end = f"load average {loadavg()} at the end"
        print(end)
        md += ["", end]
    left = leftover_programs()
    print(f"gprobe programs left loaded: {left or 'none'}")
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(md) + "\n")
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump(res, f, default=str)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
