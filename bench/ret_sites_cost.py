#!/usr/bin/env python3
"""What a uprobe costs on a Go function's RET against one on the `jmp` into its return region.

Target: bench/go/sites join (`main.join`: an if/else whose first arm ends with a `jmp` over
the second into the straight-line code that computes the result and returns), built with
each Go toolchain given. For each build, interleaved over the rounds: no probe; bpftrace
`uprobe:BIN:0xADDR { @c = count(); }` on main.join's RET; the same on the `jmp` (every call
takes it: the loop passes even arguments). The target prints its own CPU time per call
(getrusage: the trap and the BPF program run in the calling thread), pinned to CPU 0,
bpftrace to CPU 1. Each probed run must count exactly the calls made.

Run under the machine's BPF lock:
  flock /tmp/gprobe-bpf.lock bench/ret_sites_cost.py --go 1.19=/usr/lib/go-1.19/bin/go ...
"""

import argparse
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

TASKSET = os.path.realpath(shutil.which("taskset") or "/usr/bin/taskset")
HERE = os.path.dirname(os.path.abspath(__file__))


def build(go, out):
    env = dict(os.environ, GOTOOLCHAIN="local", GO111MODULE="off", CGO_ENABLED="0",
               GOCACHE=os.path.join(os.path.dirname(out), "gocache"),
               GOPATH=os.path.join(os.path.dirname(out), "gopath"))
    subprocess.run([go, "build", "-o", out, "main.go"], cwd=os.path.join(HERE, "go", "sites"),
                   env=env, check=True)


def sites(binary):
    """main.join's RET and the forward jmp into its return region: (address, text) each."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-w", binary],
                         capture_output=True, text=True, check=True).stdout
    body = out.split("<main.join>:\n", 1)[1].split("\n\n", 1)[0]
    insns = []
    for line in body.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s*(.*?)\s*$", line)
        if m:
            insns.append((int(m.group(1), 16), m.group(2)))
    rets = [(a, t) for a, t in insns if t == "ret"]
    if len(rets) != 1:
        raise SystemExit(f"{binary}: main.join has {len(rets)} RETs, expected 1")
    ret = rets[0]
    jmps = []
    for a, t in insns:
        m = re.match(r"jmp\s+([0-9a-f]+)", t)
        if m and a < int(m.group(1), 16) < ret[0]:
            jmps.append((a, t))
    if len(jmps) != 1:
        raise SystemExit(f"{binary}: {len(jmps)} forward jmps before the RET, expected 1")
    return {"ret": ret, "jmp": jmps[0], "entry": insns[0][0]}


def file_offset(binary, vaddr):
    """The file offset of virtual address `vaddr` (from the ELF program headers)."""
    with open(binary, "rb") as f:
        data = f.read()
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1 and p_vaddr <= vaddr < p_vaddr + p_filesz:
            return vaddr - p_vaddr + p_offset
    raise SystemExit(f"{binary}: {vaddr:#x} is in no loadable segment")


def probe_form(binary, addr):
    """bpftrace's `uprobe:BIN:0xN` takes N as an address or as a file offset depending on
    its version: try the address, then the offset, on a short run that must count its calls.
    bpftrace 0.17 built without offset support refuses the address and, with --unsafe,
    takes the file offset; it cannot check either is an instruction boundary (both sites
    come from objdump's decode of the function)."""
    for n in (addr, file_offset(binary, addr)):
        try:
            run(binary, 2000, n)
            return n
        except SystemExit as e:
            print(f"probe form {n:#x}: {e}", file=sys.stderr)
    raise SystemExit(f"{binary}: no probe form of {addr:#x} counted the calls")


def run(binary, calls, probe_addr):
    # bpftrace -c wants a path that names one binary
    target = [TASKSET, "-c", "0", binary, "join", str(calls)]
    if probe_addr is None:
        out = subprocess.run(target, capture_output=True, text=True, check=True).stdout
        count = None
    else:
        prog = f"uprobe:{binary}:{probe_addr:#x} {{ @c = count(); }}"
        p = subprocess.run([TASKSET, "-c", "1", "bpftrace", "--unsafe", "-e", prog, "-c", " ".join(target)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"bpftrace failed ({p.returncode}): {prog}\n{p.stderr}{p.stdout}")
        out = p.stdout
        m = re.search(r"^@c: (\d+)$", out, re.M)
        count = int(m.group(1)) if m else 0
    line = next(l for l in out.splitlines() if l.startswith("{"))
    rec = json.loads(line)
    if probe_addr is not None and count != calls:
        raise SystemExit(f"{binary} probe at {probe_addr:#x}: counted {count}, calls {calls}")
    return rec["cpu_ns_per_call"], count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--go", action="append", required=True, help="LABEL=/path/to/go")
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="write every sample here")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ret-sites-")
    builds = []
    for spec in a.go:
        label, go = spec.split("=", 1)
        b = os.path.join(work, f"sites-{label}")
        build(go, b)
        s = sites(b)
        # the number bpftrace takes for each site
        s["ret_n"] = probe_form(b, s["ret"][0])
        s["jmp_n"] = probe_form(b, s["jmp"][0])
        builds.append((label, b, s))
        print(f"{label}: main.join at {s['entry']:#x}; RET {s['ret'][0]:#x} (+{s['ret'][0] - s['entry']:#x}) "
              f"`{s['ret'][1]}`; jmp {s['jmp'][0]:#x} (+{s['jmp'][0] - s['entry']:#x}) `{s['jmp'][1]}`; "
              f"bpftrace numbers {s['ret_n']:#x}, {s['jmp_n']:#x}",
              flush=True)
    samples = {(l, c): [] for l, _, _ in builds for c in ("none", "ret", "jmp")}
    for r in range(a.rounds):
        for label, b, s in builds:
            for conf, addr in (("none", None), ("ret", s["ret_n"]), ("jmp", s["jmp_n"])):
                ns, _ = run(b, a.calls, addr)
                samples[(label, conf)].append(ns)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    print(f"\n{a.calls} calls per run, {a.rounds} rounds, medians (min-max) of ns per call; "
          "every probed run counted exactly the calls made\n")
    print("| Go | untraced | probe on RET | probe on jmp | RET added | jmp added | jmp / RET (added) |")
    print("|---|---|---|---|---|---|---|")
    for label, _, s in builds:
        med = {c: statistics.median(samples[(label, c)]) for c in ("none", "ret", "jmp")}
        rng = {c: (min(samples[(label, c)]), max(samples[(label, c)])) for c in ("none", "ret", "jmp")}
        ra, ja = med["ret"] - med["none"], med["jmp"] - med["none"]
        print(f"| {label} | {med['none']:.1f} | {med['ret']:.0f} ({rng['ret'][0]:.0f}-{rng['ret'][1]:.0f}) | "
              f"{med['jmp']:.0f} ({rng['jmp'][0]:.0f}-{rng['jmp'][1]:.0f}) | {ra:.0f} | {ja:.0f} | "
              f"{ja / ra:.3f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({f"{l} {c}": v for (l, c), v in samples.items()}, f, indent=1)


if __name__ == "__main__":
    main()
