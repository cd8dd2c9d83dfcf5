#!/usr/bin/env python3
"""Can an instruction the kernel emulates stand for a Go function's return?

gprobe's Go return probes are uprobes on every RET; a RET is single-stepped out of line by
the kernel (4-20 us a hit) while a direct `jmp`/`jcc`/`call`, a one-byte `nop` and
`push reg` are emulated (about 1 us). This script decodes every function of a Go binary
(`objdump -d`; functions from `.gopclntab`, so stripped binaries work too) and asks, for
each function, whether a set of emulated instructions could replace its RET probes.

The model. An instruction is *straight* when execution from it reaches a RET without a
conditional branch, a call, an indirect jump or a trap: a plain instruction whose next one
is straight, a direct `jmp` to a straight one, or the RET itself. Straight instructions form
one in-tree per RET (each has one successor), the RET's *region*. Execution enters a region
only from outside it: the function's first byte, a conditional jump (either edge), the
instruction after a call (this includes `call runtime.deferreturn`, where a recovered panic
resumes), an indirect jump. Every instruction of a region runs at most once per call, and
once it ran the RET follows (unless an instruction on the way faults).

A set of sites stands for the RETs when every path from every entry of every region to its
RET crosses exactly one site: an antichain of the tree that covers every entry. Found top
down (the site nearest the RET wins): a node that is an allowed site is taken; otherwise an
entry at the node fails; otherwise all its in-region predecessors must be covered.

Allowed sites: a direct `jmp` (e9/eb), a one-byte `nop` (90), `push reg` (what this kernel
emulates, as gprobe's self-test measures). Modes:
- latency: any such site (no call can follow it: calls end regions);
- results: also no instruction after the site writes a result register of ABIInternal
  (RAX, RBX, RCX, RDI, RSI, R8-R11, X0-X14; any width) and none reads memory other than
  through RSP/RBP (a load through another pointer can fault: a panic instead of a return);
- +jcc: a conditional jump whose one edge enters a region may also stand for that edge,
  when the BPF program evaluates the jump's condition from the flags (as gprobe does at the
  stack check) and counts the hit only when the edge into the region is taken.

Functions with an indirect `jmp` (switch jump tables) are set apart: their jump targets
are not decoded, so a region's entries are not known.

Usage: ret_sites.py [--examples N] [--json FILE] BINARY...
"""

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from goelf import disassemble, go_functions, go_version  # noqa: E402
from x86ops import (  # noqa: E402
    DIRECT,
    IMPLICIT_WRITERS,
    JCC,
    NO_WRITE,
    OTHER_COND,
    RESULT_GPR,
    RESULT_REGS,
    RESULT_VEC,
    TRAPS,
    base_mnem,
    dest_operand,
    risky_memory,
    writes_result,
)


class Insn:
    __slots__ = ("addr", "len", "mnem", "ops", "kind", "target", "text")

    def __init__(self, addr, mnem, ops):
        self.addr, self.mnem, self.ops = addr, base_mnem(mnem), ops
        self.len = 0
        self.target = None
        self.text = f"{mnem} {ops}".strip()
        m = self.mnem
        if m == "ret":
            self.kind = "ret"
        elif m == "jmp":
            d = DIRECT.match(ops)
            self.kind = "jmp" if d else "ijmp"
            self.target = int(d.group(1), 16) if d else None
        elif m in JCC:
            d = DIRECT.match(ops)
            self.kind = "jcc"
            self.target = int(d.group(1), 16) if d else None
        elif m in OTHER_COND:
            d = DIRECT.match(ops)
            self.kind = "cond"
            self.target = int(d.group(1), 16) if d else None
        elif m == "call":
            self.kind = "call"
        elif m in TRAPS:
            self.kind = "trap"
        else:
            self.kind = "plain"

    def emulated_site(self):
        """A site the kernel emulates (besides jcc and call, which cannot be here)."""
        if self.kind == "jmp":
            return "jmp"
        if self.mnem == "nop" and self.len == 1:
            return "nop"
        if self.mnem == "push" and self.ops.startswith("%"):
            return "push"
        return None


def is_epilogue(x):
    """`add $N,%rsp`, `pop %rbp`, `mov N(%rsp),%rbp` (Go 1.19/1.20) or `ret`."""
    if x.kind == "ret":
        return True
    if x.mnem == "add" and x.ops.startswith("$") and x.ops.endswith(",%rsp"):
        return True
    if x.mnem == "pop" and x.ops == "%rbp":
        return True
    return x.mnem == "mov" and x.ops.endswith("(%rsp),%rbp")


def analyse(name, insns, end):
    """Classifies one function. Returns a dict."""
    for a, b in zip(insns, insns[1:]):
        a.len = b.addr - a.addr
    if insns:
        insns[-1].len = end - insns[-1].addr
    at = {x.addr: i for i, x in enumerate(insns)}
    n = len(insns)
    rets = [i for i, x in enumerate(insns) if x.kind == "ret"]
    res = {"name": name, "rets": len(rets), "size": end - insns[0].addr if insns else 0}
    if not rets:
        res["class"] = "no-ret"
        return res
    if any(x.kind == "ijmp" for x in insns):
        res["class"] = "indirect-jmp"
        return res

    # Successor of each straight candidate (plain -> next, jmp -> target inside).
    def succ(i):
        x = insns[i]
        if x.kind == "plain":
            return i + 1 if i + 1 < n else None
        if x.kind == "jmp":
            return at.get(x.target)
        return None

    # root[i]: index of the RET that instruction i leads straight to, or -1.
    root = [None] * n
    for i in range(n):
        if root[i] is not None:
            continue
        chain, seen = [], set()
        j = i
        r = -1
        while j is not None:
            if root[j] is not None:
                r = root[j]
                break
            if j in seen:
                r = -1
                break
            seen.add(j)
            chain.append(j)
            if insns[j].kind == "ret":
                r = j
                break
            j = succ(j)
        for c in chain:
            root[c] = r

    # In-region predecessors (children) and outside entries per region node.
    children = defaultdict(list)
    entries = defaultdict(list)  # node -> ["entry" | ("jcc", i) | "call" | "cond"]
    for i, x in enumerate(insns):
        if root[i] >= 0 and x.kind != "ret":
            s = succ(i)
            children[s].append(i)
    if root[0] >= 0:
        entries[0].append("entry")
    for i, x in enumerate(insns):
        if root[i] >= 0:
            continue
        nxt = i + 1 if i + 1 < n else None
        if x.kind in ("jcc", "cond"):
            t = at.get(x.target)
            if t is not None and root[t] >= 0:
                entries[t].append((x.kind, i, "taken"))
            if nxt is not None and root[nxt] >= 0:
                entries[nxt].append((x.kind, i, "not-taken"))
        elif x.kind == "call":
            if nxt is not None and root[nxt] >= 0:
                entries[nxt].append("call")

    # dirty[i]: an instruction after i (i excluded) up to its RET writes a result register
    # or reads memory through a pointer other than RSP/RBP/RIP.
    def bad(y):
        return writes_result(y.mnem, y.ops) or risky_memory(y.mnem, y.ops)

    dirty = [None] * n
    for i in range(n):
        if root[i] < 0 or dirty[i] is not None:
            continue
        path = []
        j = i
        while dirty[j] is None and insns[j].kind != "ret":
            path.append(j)
            j = succ(j)
        if dirty[j] is None:
            dirty[j] = False
        for p in reversed(path):
            s = succ(p)
            dirty[p] = dirty[s] or bad(insns[s])

    def cover(r, results, jcc_ok):
        """Sites covering region r (a RET index), or None."""
        sites = []
        stack = [r]
        while stack:
            v = stack.pop()
            x = insns[v]
            kind = x.emulated_site()
            if kind and not (results and dirty[v]):
                sites.append((v, kind))
                continue
            for e in entries.get(v, ()):
                if jcc_ok and isinstance(e, tuple) and e[0] == "jcc":
                    # the edge's tail starts at v itself: v and everything after it
                    if results and (dirty[v] or bad(x)):
                        return None
                    sites.append((e[1], "jcc-" + e[2]))
                    continue
                return None
            stack.extend(children.get(v, ()))
        return sites

    def succs(i):
        x = insns[i]
        if x.kind in ("ret", "trap", "ijmp"):
            return ()
        if x.kind == "jmp":
            t = at.get(x.target)
            return (t,) if t is not None else ()
        out = [i + 1] if i + 1 < n else []
        if x.kind in ("jcc", "cond"):
            t = at.get(x.target)
            if t is not None:
                out.append(t)
        return out

    def in_loop(i):
        """Whether instruction i can run again in the same call (it lies on a cycle)."""
        seen, stack = set(), list(succs(i))
        while stack:
            j = stack.pop()
            if j == i:
                return True
            if j in seen:
                continue
            seen.add(j)
            stack.extend(succs(j))
        return False

    modes = {}
    for key, results, jcc_ok in (("res", True, False), ("lat", False, False),
                                 ("res+jcc", True, True), ("lat+jcc", False, True)):
        all_sites = []
        ok = True
        for r in rets:
            s = cover(r, results, jcc_ok)
            if s is None:
                ok = False
                break
            all_sites.extend(s)
        modes[key] = sorted(all_sites) if ok else None
    jl = modes["lat+jcc"] or []
    res["jcc_sites"] = len({i for i, kd in jl if kd.startswith("jcc")})
    res["jcc_in_loop"] = any(kd.startswith("jcc") and in_loop(i) for i, kd in jl)
    def label(i, kd):
        # a site whose next instruction is the RET sees the RET's registers and stack
        if not kd.startswith("jcc") and i + 1 < n and insns[i + 1].kind == "ret" and succ(i) == i + 1:
            return kd + "@ret"
        return kd
    res["modes"] = {k: [(insns[i].addr - insns[0].addr, label(i, kd)) for i, kd in v]
                    if v is not None else None for k, v in modes.items()}

    # Shared epilogue: a region entered by a direct jmp (a jmp node inside the region).
    jmp_nodes = [i for i in range(n) if root[i] >= 0 and insns[i].kind == "jmp"]
    any_emulated = [i for i in range(n) if root[i] >= 0 and insns[i].emulated_site()]
    res["shared"] = bool(jmp_nodes)
    # A jmp straight into an epilogue (the frame's teardown or the RET itself): the shared
    # epilogue proper, as against a jmp into code that still computes the results.
    res["epi_jmp"] = any(is_epilogue(insns[at[insns[i].target]]) for i in jmp_nodes)
    res["jmp_nodes"] = len(jmp_nodes)
    if root[0] >= 0:
        # Branch-free and call-free from the first byte to the RET: the entry probe already
        # marks a call that returns a fixed few instructions later.
        cls = "straight"
        res["straight_res"] = modes["res"] is not None and all(i != 0 for i, _ in modes["res"])
    elif modes["res"] is not None:
        cls = "E-res"
    elif modes["lat"] is not None:
        cls = "E-lat"
    elif modes["res+jcc"] is not None:
        cls = "J-res"
    elif modes["lat+jcc"] is not None:
        cls = "J-lat"
    elif jmp_nodes:
        cls = "jmp-partial"
    elif any_emulated:
        cls = "other-partial"
    else:
        cls = "none"
    res["class"] = cls
    # Entry kinds of the regions, for the report.
    kinds = Counter()
    for v, es in entries.items():
        for e in es:
            kinds[e if isinstance(e, str) else e[0]] += 1
    res["entry_kinds"] = dict(kinds)
    # Epilogue shape of the first RET: the instructions just before it.
    r = rets[0]
    shape = []
    j = r - 1
    while j >= 0 and len(shape) < 2 and insns[j].kind == "plain" and (
            insns[j].mnem in ("pop", "add", "mov") and ("%rsp" in insns[j].ops or "%rbp" in insns[j].ops)):
        shape.append(re.sub(r"\$0x[0-9a-f]+|0x[0-9a-f]+", "N", insns[j].text))
        j -= 1
    res["epilogue"] = "; ".join(reversed(shape + [])) + ("; ret" if shape else "ret")
    return res


CLASS_TEXT = {
    "straight": "straight-line: no branch and no call from the first byte to the RET (one path)",
    "E-res": "emulated sites stand for every return, results final (jmp/nop/push)",
    "E-lat": "emulated sites stand for every return, latency only (a result register or a pointer load follows)",
    "J-res": "only with flag-checked jcc sites, results final",
    "J-lat": "only with flag-checked jcc sites, latency only",
    "jmp-partial": "a jmp enters a return region but some path arrives without an emulated site (useless alone)",
    "other-partial": "an emulated nop/push in a region but some path arrives without one",
    "none": "no emulated instruction in any return region",
    "indirect-jmp": "indirect jmp (jump table): regions' entries unknown",
    "no-ret": "no RET",
}
ORDER = list(CLASS_TEXT)


def run(path, examples, want_names):
    """Analyses every function; keeps the instructions of a few per class for the report."""
    funcs = go_functions(path)
    results = []
    kept = Counter()
    text_of = {}
    fi = 0
    cur = []

    def finish(f, insns):
        r = analyse(f[2], insns, f[1])
        r["addr"] = f[0]
        results.append(r)
        keep = f[2] in want_names or (
            r["size"] < 600 and kept[(r["class"], f[2].startswith("main."))] < 4 * examples)
        if keep:
            kept[(r["class"], f[2].startswith("main."))] += 1
            text_of[f[2]] = insns

    for addr, mnem, ops in disassemble(path):
        while fi < len(funcs) and addr >= funcs[fi][1]:
            if cur:
                finish(funcs[fi], cur)
            cur = []
            fi += 1
        if fi >= len(funcs):
            break
        if addr >= funcs[fi][0]:
            cur.append(Insn(addr, mnem, ops))
    if cur and fi < len(funcs):
        finish(funcs[fi], cur)
    return results, text_of


def report(path, results, text_of, examples, show):
    total = len(results)
    with_ret = [r for r in results if r["class"] != "no-ret"]
    c = Counter(r["class"] for r in results)
    print(f"== {path}: {total} functions, {len(with_ret)} with a RET, "
          f"{sum(r['rets'] for r in with_ret)} RETs")
    multi = sum(1 for r in with_ret if r["rets"] > 1)
    print(f"   functions with more than one RET: {multi} ({100.0 * multi / max(1, len(with_ret)):.1f}%)")
    shared = [r for r in with_ret if r.get("shared")]
    print(f"   (i) a return region entered by a direct jmp (shared epilogue): {len(shared)} "
          f"({100.0 * len(shared) / max(1, len(with_ret)):.2f}%)")
    for k in ORDER:
        if k == "no-ret":
            continue
        print(f"   {k:14s} {c[k]:7d} {100.0 * c[k] / max(1, len(with_ret)):6.2f}%  {CLASS_TEXT[k]}")
    ex = Counter()
    for r in with_ret:
        for e, v in r.get("entry_kinds", {}).items():
            ex[e] += v
    print("   region entries by kind: " + ", ".join(f"{k} {v}" for k, v in ex.most_common()))
    shapes = Counter(r.get("epilogue", "?") for r in with_ret)
    print("   epilogue shapes (first RET): " + "; ".join(f"[{k}] {v}" for k, v in shapes.most_common(4)))
    for k in ("J-res", "J-lat"):
        js = [r for r in with_ret if r["class"] == k]
        loop = sum(1 for r in js if r.get("jcc_in_loop"))
        sizes = Counter(min(r.get("jcc_sites", 0), 4) for r in js if not r.get("jcc_in_loop"))
        print(f"   {k}: {loop} of {len(js)} have a jcc site inside a loop (it traps on every turn); "
              "the others by jcc sites (each traps when reached, taken or not): "
              + ", ".join(f"{'4+' if n == 4 else n}: {sizes[n]}" for n in sorted(sizes)))
    epi = [r for r in with_ret if r.get("epi_jmp")]
    print(f"   of which a jmp lands on the epilogue itself (add/pop/mov-rbp/ret): {len(epi)} "
          f"({100.0 * len(epi) / max(1, len(with_ret)):.2f}%), by class: "
          + ", ".join(f"{k} {v}" for k, v in Counter(r["class"] for r in epi).most_common()))
    xs = Counter(r["class"] for r in shared)
    print("   (i) by class: " + ", ".join(f"{k} {xs[k]}" for k in ORDER if xs[k]))
    sk = Counter()
    for r in with_ret:
        if r["class"] in ("E-res", "E-lat"):
            key = "res" if r["class"] == "E-res" else "lat"
            for _, kd in r["modes"][key]:
                sk[kd] += 1
    if sk:
        print("   site kinds in E-res/E-lat functions (@ret: the RET is next): "
              + ", ".join(f"{k} {v}" for k, v in sk.most_common()))
    for k in ("E-res", "E-lat"):
        key = "res" if k == "E-res" else "lat"
        es = [r for r in with_ret if r["class"] == k]
        jm = sum(1 for r in es if any(kd.startswith("jmp") for _, kd in r["modes"][key]))
        allret = sum(1 for r in es if all(kd.endswith("@ret") for _, kd in r["modes"][key]))
        print(f"   {k}: {jm} of {len(es)} use a jmp site; {allret} have every site right before a RET")
    names = set(show)
    st = [r for r in with_ret if r["class"] == "straight"]
    print(f"   straight: {sum(1 for r in st if r.get('straight_res'))} of {len(st)} have an "
          "emulated site after the entry with results final")
    for k in ("E-res", "E-lat", "J-res", "J-lat", "jmp-partial", "other-partial", "none"):
        picks = [r for r in with_ret if r["class"] == k]
        # prefer main-package and small examples
        picks.sort(key=lambda r: (not r["name"].startswith("main."), r["size"]))
        picks = [r for r in picks if r["name"] in text_of]
        for r in picks[:examples]:
            names.add(r["name"])
    for r in with_ret:
        if r["name"] not in names:
            continue
        ins = text_of.get(r["name"])
        print(f"\n-- {r['class']}: {r['name']} @ {r['addr']:#x} ({r['size']} bytes, {r['rets']} RET)")
        if r.get("modes"):
            for m, s in r["modes"].items():
                print(f"   {m:8s}: " + ("no" if s is None else ", ".join(f"+{o:#x} {kd}" for o, kd in s)))
        if ins is None:
            continue
        while len(ins) > 1 and ins[-1].kind == "trap" and ins[-2].kind == "trap":
            ins = ins[:-1]
        lines = ins if len(ins) <= 80 else ins[-60:]
        if len(ins) > 80:
            print("   ... (last 60 instructions)")
        for x in lines:
            print(f"   +{x.addr - ins[0].addr:#06x}  {x.text}")


def table_row(label, version, results):
    w = [r for r in results if r["class"] != "no-ret"]
    n = max(1, len(w))
    c = Counter(r["class"] for r in w)
    loop = Counter(r["class"] for r in w if r.get("jcc_in_loop"))

    def pc(k):
        return f"{c[k]} ({100.0 * c[k] / n:.1f}%)"
    multi = sum(1 for r in w if r["rets"] > 1)
    shared = sum(1 for r in w if r.get("shared"))
    epi = sum(1 for r in w if r.get("epi_jmp"))
    print(f"| {label} | {version} | {len(w)} | {100.0 * multi / n:.1f}% | {shared} "
          f"({100.0 * shared / n:.1f}%) ({epi}, {100.0 * epi / n:.1f}%) | {pc('straight')} | "
          f"{pc('E-res')} | {pc('E-lat')} | {pc('J-res')} | "
          f"{pc('J-lat')} ({loop['J-lat'] + loop['J-res']}) | {pc('jmp-partial')} | "
          f"{pc('other-partial')} | {pc('none')} | {pc('indirect-jmp')} |")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--examples", type=int, default=2, help="example functions per class")
    ap.add_argument("--show", action="append", default=[], help="print this function too")
    ap.add_argument("--json", help="write per-binary counts here")
    ap.add_argument("--merge", metavar="LABEL",
                    help="with --table: one row for all the binaries together (each function "
                         "name counted once), labelled LABEL")
    ap.add_argument("--table", action="store_true",
                    help="one Markdown table row per binary (all functions, then main.*) instead "
                         "of the full report")
    a = ap.parse_args()
    summary = {}
    merged, versions = {}, set()
    for b in a.binaries:
        results, text_of = run(b, a.examples, a.show)
        if a.table and a.merge:
            versions.add(go_version(b))
            for r in results:
                # main.* of different programs are different functions; the rest repeat
                merged.setdefault((b, r["name"]) if r["name"].startswith("main.") else r["name"], r)
            if b != a.binaries[-1]:
                continue
            b = f"{a.merge} ({len(a.binaries)} binaries)"
            results = list(merged.values())
            v = ", ".join(sorted(versions))
            a.binaries = [b]
        if a.table:
            if not summary:
                print("| binary | Go | functions with RET | >1 RET | (i) jmp into a return region "
                      "(into the epilogue itself) | straight | "
                      "E-res | E-lat | J-res | J-lat (jcc in loop) | jmp-partial | other-partial | "
                      "none | indirect jmp |")
                print("|---" * 14 + "|")
            if not a.merge:
                v = go_version(b)
            table_row(b, v, results)
            table_row(b + " (main.*)", v, [r for r in results if r["name"].startswith("main.")])
        else:
            report(b, results, text_of, a.examples, a.show)
        with_ret = [r for r in results if r["class"] != "no-ret"]
        if a.merge and not a.table:
            raise SystemExit("--merge needs --table")
        summary[b] = {
            "functions": len(results),
            "with_ret": len(with_ret),
            "rets": sum(r["rets"] for r in with_ret),
            "multi_ret": sum(1 for r in with_ret if r["rets"] > 1),
            "shared": sum(1 for r in with_ret if r.get("shared")),
            "epi_jmp": sum(1 for r in with_ret if r.get("epi_jmp")),
            "shared_classes": dict(Counter(r["class"] for r in with_ret if r.get("shared"))),
            "jcc_in_loop": dict(Counter(r["class"] for r in with_ret if r.get("jcc_in_loop"))),
            "classes": dict(Counter(r["class"] for r in results)),
            "examples": {k: [r["name"] for r in with_ret if r["class"] == k][:20]
                         for k in ("E-res", "E-lat", "J-res", "J-lat", "jmp-partial")},
        }
        if not a.table:
            print()
        sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
