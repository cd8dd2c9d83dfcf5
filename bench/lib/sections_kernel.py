#!/usr/bin/env python3
"""Benchmark sections on the kernel side: added cost per call against bpftrace (cost), the
BPF programs' own run time per hit (bpfstats), and variants of the BPF program (bpfvariants)."""

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

from common import *  # noqa: F401,F403  (the shared helpers and state)

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
                        # The headers the pasted ones include (filter.h, propagate/...).
                        "-I", os.path.join(REPO, "agent-ebpf", "src"),
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
