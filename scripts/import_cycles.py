#!/usr/bin/env python3
"""Finds import cycles between the source files of a Rust module tree (agent/src/resolve by
default) and exits non-zero when an error module is part of one.

Errors sit at the bottom of the module tree: a module's error type must not import the
modules that import it, so every file of error types (`error.rs`, `*_error.rs`, or a file
given with --error-file) must be in no cycle. Other cycles are listed; with --all they fail
too (CI runs it so: the agent has none).

An edge A -> B means that A names an item defined in B: through a `use` (with groups,
`self`, globs and renames), or a path written in the code (`crate::...`, `super::...`,
`self::...`, or a child module's name). A name re-exported with `pub use` is followed to
the file that defines it; the file that re-exports it gets an edge of its own. Comments,
doc comments and string literals are skipped; edges from a file to itself are ignored.
Unit tests (modules under `#[cfg(test)]`, inline or in files of their own) are left out
unless --with-tests: a test imports what it tests, and the code under test never imports
it back, so its imports say nothing about how the program's modules depend on each other.

Usage: scripts/import_cycles.py [--root agent/src] [--tree resolve] [--all] [--with-tests] [--dot]
  --all   exit non-zero on any cycle, not only on one through an error module
  --dot   print the edges in Graphviz form
"""

import argparse
import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# `#[cfg(test)]` right before a `mod` (other attributes and `pub` may come between).
CFG_TEST_BEFORE = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?\Z")
# `#[path = "plan_tests.rs"] mod tests;`: read before strings are blanked.
PATH_ATTR = re.compile(
    r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(' + IDENT + r")\s*;"
)


def strip(src):
    """The source with comments, strings and char literals blanked (line breaks kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("".join("\n" if ch == "\n" else " " for ch in src[i:j]))
            i = j
            continue
        m = re.match(r'b?r(#*)"', src[i:i + 300])
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src[i:j].count("\n"))
            i = j
            continue
        if c == '"' or (c == "b" and src.startswith('b"', i)):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append('""' + "\n" * src[i:j].count("\n"))
            i = j
            continue
        if c == "'":
            # A char literal ('a', '\n', '\u{..}'), not a lifetime ('a).
            m = re.match(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", src[i:i + 12])
            if m:
                out.append("' '")
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


class Module:
    """A module: a file, or an inline `mod name { ... }` inside one."""

    def __init__(self, path, file, children, span, test):
        self.path = path  # tuple of names below the crate root
        self.file = file
        self.children = children  # names of submodules
        self.span = span  # (start, end) in the file's text of an inline module, else None
        self.test = test  # under #[cfg(test)]: compiled only into the unit tests


def parse_use_tree(text):
    """Paths of a use tree (`a::{b, c::{self, d as e}, f::*}`) as (segments, alias)."""
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s*(::|[{},])\s*", r"\1", text)
    results = []

    def walk(prefix, s):
        # Split s at top-level commas.
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        for p in parts:
            if not p:
                continue
            brace = p.find("{")
            if brace >= 0:
                head = p[:brace].rstrip(":")
                segs = [x for x in head.split("::") if x] if head else []
                walk(prefix + segs, p[brace + 1:p.rfind("}")])
                continue
            alias = None
            if " as " in p:
                p, alias = p.rsplit(" as ", 1)
            segs = [x for x in p.split("::") if x]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            results.append((prefix + segs, alias))

    walk([], text)
    return results


class Tree:
    def __init__(self, root):
        self.root = root
        self.modules = {}  # module path tuple -> Module
        self.sources = {}  # file -> stripped source
        self.path_attrs = {}  # file -> {module name: its #[path]}
        self._load((), os.path.join(root, "lib.rs"), False)

    def _load(self, path, file, test):
        raw = open(file, encoding="utf-8").read()
        src = strip(raw)
        self.sources[file] = src
        self.path_attrs[file] = {m.group(2): m.group(1) for m in PATH_ATTR.finditer(raw)}
        self._scan(path, file, src, 0, len(src), None, test)

    def _scan(self, path, file, src, start, end, span, test):
        children = []
        mod = Module(path, file, children, span, test)
        self.modules[path] = mod
        base = os.path.dirname(file) if os.path.basename(file) in ("mod.rs", "lib.rs", "main.rs") \
            else os.path.splitext(file)[0]
        pos = start
        decl = re.compile(r"\bmod\s+(" + IDENT + r")\s*([;{])")
        while True:
            m = decl.search(src, pos, end)
            if not m:
                break
            name = m.group(1)
            children.append(name)
            child_test = test or bool(CFG_TEST_BEFORE.search(src[max(start, m.start() - 200):m.start()]))
            if m.group(2) == ";":
                cands = [os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")]
                if name in self.path_attrs[file] and span is None:
                    cands = [os.path.join(os.path.dirname(file), self.path_attrs[file][name])]
                for cand in cands:
                    if os.path.exists(cand):
                        self._load(path + (name,), cand, child_test)
                        break
                pos = m.end()
            else:
                close = matching_brace(src, m.end() - 1)
                self._scan(path + (name,), file, src, m.end(), close, (m.end(), close), child_test)
                pos = close + 1

    def module_at(self, file, offset):
        """The innermost module of `file` whose text holds `offset`."""
        best = None
        for mod in self.modules.values():
            if mod.file != file:
                continue
            if best is None or len(mod.path) > len(best.path):
                if mod.span is None or mod.span[0] <= offset < mod.span[1]:
                    best = mod
        return best

    def absolute(self, mod, segs):
        """Segments of a path written in module `mod`, made absolute (None: another crate)."""
        if not segs:
            return None
        if segs[0] == "crate":
            return tuple(segs[1:])
        cur = list(mod.path)
        i = 0
        if segs[0] == "self":
            i = 1
        while i < len(segs) and segs[i] == "super":
            cur.pop()
            i += 1
        if i > 0:
            return tuple(cur) + tuple(segs[i:])
        if segs[0] in mod.children:
            return tuple(cur) + tuple(segs)
        return None

    def named_file(self, path):
        """The file of the module a path names its item through (`go::types` for
        `go::types::PathError`, even when go/types/error.rs defines it)."""
        for k in range(len(path), -1, -1):
            if path[:k] in self.modules:
                return self.modules[path[:k]].file
        return None

    def defining_file(self, path, seen=None):
        """The file that defines the item at absolute `path` (following `pub use`)."""
        seen = seen or set()
        if path in seen:
            return None
        seen.add(path)
        # Longest prefix that is a module.
        for k in range(len(path), -1, -1):
            if path[:k] in self.modules:
                mod = self.modules[path[:k]]
                break
        else:
            return None
        rest = path[k:]
        if not rest:
            return mod.file
        name = rest[0]
        src = self._module_text(mod)
        if re.search(r"\b(?:struct|enum|union|trait|type|fn|const|static|macro_rules!)\s+" + name + r"\b", src):
            return mod.file
        for uses, public in self._uses(mod, src):
            if not public:
                continue
            for segs, alias in uses:
                leaf = alias or (segs[-1] if segs else None)
                target = None
                if leaf == name:
                    target = self.absolute(mod, segs)
                elif segs and segs[-1] == "*":
                    base = self.absolute(mod, segs[:-1])
                    target = base + (name,) if base is not None else None
                if target is not None:
                    f = self.defining_file(target + rest[1:], seen)
                    if f is not None:
                        return f
        return mod.file

    def _module_text(self, mod):
        src = self.sources[mod.file]
        return src[mod.span[0]:mod.span[1]] if mod.span else src

    @staticmethod
    def _uses(mod, src):
        for m in re.finditer(r"(\bpub(?:\([^)]*\))?\s+)?\buse\s+([^;]*);", src):
            yield parse_use_tree(m.group(2)), bool(m.group(1))


def matching_brace(src, open_at):
    depth = 0
    for i in range(open_at, len(src)):
        if src[i] == "{":
            depth += 1
        elif src[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(src)


def edges_of(tree, tree_prefix, with_tests=False):
    edges = defaultdict(set)
    test_files = {m.file for m in tree.modules.values() if m.test and m.span is None}
    for file, src in tree.sources.items():
        rel = os.path.relpath(file, tree.root)
        if not rel.startswith(tree_prefix) or (file in test_files and not with_tests):
            continue
        found = []
        for m in re.finditer(r"\buse\s+([^;]*);", src):
            mod = tree.module_at(file, m.start())
            for segs, _ in parse_use_tree(m.group(1)):
                found.append((mod, [s for s in segs if s != "*"]))
        path_re = re.compile(r"(?<![:\w])((?:" + IDENT + r")(?:::" + IDENT + r")+)")
        for m in path_re.finditer(src):
            mod = tree.module_at(file, m.start())
            found.append((mod, m.group(1).split("::")))
        for mod, segs in found:
            if mod.test and not with_tests:
                continue
            target = tree.absolute(mod, segs)
            if target is None:
                continue
            for dest in (tree.named_file(target), tree.defining_file(target)):
                if dest is None or dest == file or (dest in test_files and not with_tests):
                    continue
                drel = os.path.relpath(dest, tree.root)
                if drel.startswith(tree_prefix):
                    edges[rel].add(drel)
    return edges


def strongly_connected(edges):
    """Tarjan's algorithm: the components with more than one file."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    nodes = set(edges) | {d for ds in edges.values() for d in ds}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def shortest_cycle_through(edges, start, within):
    """A shortest cycle from `start` back to it inside the component `within`."""
    from collections import deque

    prev = {start: None}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(edges.get(v, ())):
            if w not in within:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", "agent", "src"))
    ap.add_argument("--tree", default="resolve", help="the module folder to check, below --root")
    ap.add_argument("--error-file", action="append", default=[],
                    help="another file (relative to --root) that must be in no cycle")
    ap.add_argument("--all", action="store_true", help="fail on any cycle")
    ap.add_argument("--with-tests", action="store_true",
                    help="count the imports of #[cfg(test)] modules too")
    ap.add_argument("--dot", action="store_true", help="print the edges as a Graphviz graph")
    args = ap.parse_args()
    root = os.path.normpath(args.root)
    tree = Tree(root)
    edges = edges_of(tree, args.tree, args.with_tests)
    if args.dot:
        print("digraph imports {")
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")
    comps = strongly_connected(edges)
    error_files = {f for f in tree.sources if re.fullmatch(r"(.+_)?error\.rs", os.path.basename(f))}
    error_files = {os.path.relpath(f, root) for f in error_files}
    error_files |= set(args.error_file)
    bad = []
    n_edges = sum(len(v) for v in edges.values())
    print(f"{len(edges)} files with imports, {n_edges} edges within {args.tree}/; "
          f"{len(comps)} cycle(s) (strongly connected sets of files)")
    for comp in comps:
        errs = sorted(set(comp) & error_files)
        mark = "  <- error module(s) in it: " + ", ".join(errs) if errs else ""
        print(f"\ncycle of {len(comp)} files{mark}")
        for f in comp:
            print(f"  {f}")
        for f in errs or comp[:1]:
            cyc = shortest_cycle_through(edges, f, set(comp))
            if cyc:
                print("  e.g. " + " -> ".join(cyc))
        if errs:
            bad.append(comp)
    if bad or (args.all and comps):
        print(f"\nFAIL: {len(bad)} cycle(s) through error modules" if bad else "\nFAIL: cycles")
        return 1
    print("\nok: no error module is in an import cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
