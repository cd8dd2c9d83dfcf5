#!/usr/bin/env python3
"""Checks that no call chain of gprobe's BPF programs takes more than 512 bytes of stack.

Before Linux 6.13 all the frames of a chain (the program, its functions, a bpf_loop
callback and what it calls) share one stack of 512 bytes, and the verifier refuses a
program whose deepest chain needs more ("combined stack size of N calls is M. Too
large"); 6.13 gives large programs a private stack and loads them anyway. This machine's
kernel would not notice, so the chains are measured here, in the objects as built, the way
the verifier counts them: each frame its deepest stack slot, rounded up to 32 bytes (a
frame that uses none counts 32).

    scripts/bpf_stack.py [OBJECT.bpf.o ...]

Without arguments, the newest objects of the agent's build in ${CARGO_TARGET_DIR:-target}.
Needs llvm-objdump (llvm-19, as the build's clang). Exit 1 when a chain is over 512 bytes.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

LIMIT = 512
FUNC = re.compile(r"^([0-9a-f]+) <(\S+)>:")
SYM = re.compile(r"^([0-9a-f]+)\s.*\sF\s+(\S+)\s+[0-9a-f]+\s+(\S+)$")
SLOT = re.compile(r"r10 - 0x([0-9a-f]+)\)?")
# An instruction: its index in the section, its 8 bytes (the second: source and destination
# registers), its text.
INSN = re.compile(r"^\s*(\d+):\s+((?:[0-9a-f]{2} ){7}[0-9a-f]{2})\s+(.*)$")
RELOC = re.compile(r"R_BPF_64_(32|64)\s+(\S+)")


def objdump():
    for tool in ("llvm-objdump-19", "llvm-objdump"):
        if shutil.which(tool):
            return tool
    sys.exit("bpf_stack: llvm-objdump was not found: install llvm-19 (scripts/setup.sh --test)")


def functions(tool, obj):
    """Each function: its section, its deepest stack slot, and the functions it calls."""
    syms = subprocess.run([tool, "-t", obj], capture_output=True, text=True, check=True).stdout
    text_at, externs = {}, set()
    for line in syms.splitlines():
        m = SYM.match(line)
        if m and m.group(2) == ".text":
            text_at[int(m.group(1), 16)] = m.group(3)
        elif "*UND*" in line:
            externs.add(line.split()[-1])  # a kernel function (kfunc): no frame of ours
    dis = subprocess.run([tool, "-dr", obj], capture_output=True, text=True, check=True).stdout
    funcs, section, cur, pending = {}, None, None, None
    for line in dis.splitlines():
        if line.startswith("Disassembly of section "):
            section = line.split()[-1].rstrip(":")
            continue
        m = FUNC.match(line)
        if m:
            cur = m.group(2)
            funcs[cur] = {"section": section, "depth": 0, "calls": set()}
            continue
        if cur is None:
            continue
        f = funcs[cur]
        for off in SLOT.findall(line):
            f["depth"] = max(f["depth"], int(off, 16))
        m = INSN.match(line)
        if m:
            raw = bytes.fromhex(m.group(2).replace(" ", ""))
            imm = int.from_bytes(raw[4:8], "little", signed=True)
            # A call of a function (src 1; src 0 is a helper), or a 64-bit load (0x18) of a
            # function's address (src 4: a bpf_loop callback).
            pending = None
            if raw[0] == 0x85 and raw[1] >> 4 == 1:
                pending = ("call", int(m.group(1)), imm)
            elif raw[0] == 0x18 and raw[1] >> 4 in (0, 4):
                pending = ("func", int(m.group(1)), imm)
            if pending and pending[0] == "call" and section == ".text" and imm != -1:
                # Within .text the compiler resolved it: pc-relative, in instructions.
                f["calls"].add(text_at.get((pending[1] + 1 + imm) * 8, f"?{pending[1]}"))
            continue
        r = RELOC.search(line)
        if r and pending:
            kind, _, imm = pending
            if r.group(2) != ".text":
                if kind == "call" and r.group(2) not in externs:
                    f["calls"].add(r.group(2))
            else:
                # A static function: its call's imm + 1 instructions into .text; a callback
                # loaded with ld_imm64: its byte offset in .text.
                at = (imm + 1) * 8 if kind == "call" else imm
                f["calls"].add(text_at.get(at, f"?{at}"))
        pending = None
    return funcs


def frame(depth):
    return (max(depth, 1) + 31) // 32 * 32


def deepest(funcs, name, seen=()):
    """The chain from `name` down that takes the most stack: (bytes, [functions])."""
    best = (0, [])
    for callee in funcs[name]["calls"]:
        if callee in funcs and callee not in seen:
            best = max(best, deepest(funcs, callee, seen + (name,)))
    return frame(funcs[name]["depth"]) + best[0], [name] + best[1]


def default_objects():
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    found = {}
    for path in glob.glob(f"{target}/debug/build/gprobe-agent-*/out/*.bpf.o"):
        name = os.path.basename(path)
        if name not in found or os.path.getmtime(path) > os.path.getmtime(found[name]):
            found[name] = path
    if not found:
        sys.exit(f"bpf_stack: no BPF objects under {target}/debug/build: build the agent first")
    return sorted(found.values())


def main(argv):
    tool = objdump()
    failed = False
    for obj in argv or default_objects():
        funcs = functions(tool, obj)
        # A call whose target was not found would leave a frame out: a count too low.
        lost = {c for f in funcs.values() for c in f["calls"] if c not in funcs}
        if lost:
            sys.exit(f"bpf_stack: {os.path.basename(obj)}: calls not resolved: {sorted(lost)}")
        programs = [n for n, f in funcs.items() if f["section"] != ".text"]
        for p in sorted(programs):
            total, chain = deepest(funcs, p)
            over = total > LIMIT
            failed |= over
            frames = " + ".join(f"{n} {frame(funcs[n]['depth'])}" for n in chain)
            print(f"{'OVER' if over else 'ok'}   {os.path.basename(obj)} {p}: {total} bytes ({frames})")
    if failed:
        print(f"bpf_stack: a chain takes more than {LIMIT} bytes: kernels before 6.13 refuse it; "
              "move locals into the scratch map or split the chain", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
