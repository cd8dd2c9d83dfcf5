#!/usr/bin/env python3
"""Judges the kernel matrix: reads what scripts/vm/tests.sh kept of each kernel's run
(gprobe's JSONL and summaries, the programs' own output, /proc and /sys facts) and prints
the table check x kernel, then each result's one-line reason.

    check.py NAME=RESULTS_DIR...

A check passes only on the evidence of a run that happened: a missing file is a failure,
never a pass. SKIP is for a check this kernel cannot run, with the reason. Exit status 1
when any check failed.
"""
import json
import re
import sys
from collections import Counter
from pathlib import Path

CHECKS = [
    ("a", "Go probes, Go 1.27 (register ABI): exact"),
    ("b", "Go 1.19 and a stripped Go 1.27 build"),
    ("c", "C function with its return value"),
    ("d", "USDT probe (semaphore)"),
    ("e", "latency probe"),
    ("f", "when: filter"),
    ("g", "exec and fork holds"),
    ("h", "kill -9 with processes held"),
    ("i", "a stop leaves nothing in the kernel"),
    ("j", "agent --spec-dir Ready, kernel in /readyz"),
    ("k", "traceparent write across 2 services"),
]


class Fail(Exception):
    pass


class Skip(Exception):
    pass


class Run:
    """The files one kernel's tests left."""

    def __init__(self, d: Path):
        self.d = d

    def text(self, name):
        p = self.d / name
        if not p.exists():
            raise Fail(self.why_missing(name))
        return p.read_text(errors="replace")

    def why_missing(self, name):
        e = self.d / "vm-error"
        if e.exists():
            return e.read_text().strip()[:150]
        scenario = name.split(".")[0]
        if (self.d / f"{scenario}.err").exists():
            return f"gprobe did not start: {self.last_error(scenario)}"
        return f"{name} missing: the scenario did not run (see tests.log)"

    def records(self, name):
        return [json.loads(line) for line in self.text(name + ".jsonl").splitlines() if line.strip()]

    def summary(self, name):
        return json.loads(self.text(name + ".summary.json"))

    def rc(self, name):
        return int(self.text(name + ".rc").strip() or "-1")

    def gprobe_ok(self, name, want_rc=0):
        """Fails with gprobe's own last words when its run did not end as it should."""
        rc = self.rc(name)
        if rc != want_rc:
            raise Fail(f"gprobe exit {rc}: {self.last_error(name)}")

    def last_error(self, name):
        p = self.d / (name + ".err")
        lines = [l.strip() for l in p.read_text(errors="replace").splitlines() if l.strip()] if p.exists() else []
        for l in reversed(lines):
            if re.search(r"error|fail|refus|need", l, re.I):
                return strip_log(l)[:160]
        return strip_log(lines[-1])[:160] if lines else "(no stderr)"


def strip_log(line):
    return re.sub(r"^\S*\d{4}-\d\d-\d\dT\S+\s+", "", line)


def program_lines(text, prefix):
    """The key=value lines a test program printed, starting with `prefix`."""
    out = []
    for line in text.splitlines():
        if line.startswith(prefix):
            out.append(dict(kv.split("=", 1) for kv in line[len(prefix):].split() if "=" in kv))
    return out


def values(r):
    v = dict(r.get("args") or {})
    v.update(r.get("returns") or {})
    return v


def of_symbol(records, symbol):
    return [r for r in records if r.get("symbol") == symbol]


def probe_counts(summary, symbol):
    for p in summary.get("probes", []):
        if p.get("symbol") == symbol:
            return p
    raise Fail(f"no probe {symbol} in the summary")


def go_exact(run, v):
    name = f"go-{v}"
    run.gprobe_ok(name)
    made = [l.split()[1] for l in run.text(name + ".out").splitlines() if l.startswith("GET ")]
    if len(made) != 5:
        raise Fail(f"{v}: the program made {len(made)} GETs, not 5")
    got = [values(r).get("url") for r in of_symbol(run.records(name), "net/http.(*Client).Get")]
    if Counter(got) != Counter(made):
        raise Fail(f"{v}: {len(got)} calls recorded for {len(made)} made ({got[:2]}...)")
    p = probe_counts(run.summary(name), "net/http.(*Client).Get")
    if p.get("delivered") != len(made) or p.get("lost"):
        raise Fail(f"{v}: summary delivered={p.get('delivered')} lost={p.get('lost')}")
    return len(made)


def check_a(run):
    n = go_exact(run, "go127")
    return f"{n} of {n} GETs, URLs as the program printed them"


def check_b(run):
    n1 = go_exact(run, "go119")
    n2 = go_exact(run, "go127s")
    return f"Go 1.19: {n1} of {n1}; Go 1.27 stripped (signature): {n2} of {n2}"


def lacks(run, name, feature):
    """Whether the kernel lacked `feature`, as run `name`'s summary says."""
    features = dict(run.summary(name).get("kernel", {}).get("features", []))
    return features.get(feature, {}).get("state") == "missing"


def check_c(run):
    run.gprobe_ok("c")
    out, recs = run.text("c.out"), run.records("c")
    want_sub = Counter((l["a"], l["b"]) for l in program_lines(out, "sub "))
    got_sub = Counter(tuple(str(values(r).get(k)) for k in ("a", "b")) for r in of_symbol(recs, "sub"))
    if not want_sub or got_sub != want_sub:
        raise Fail(f"sub: {sum(got_sub.values())} recorded for {sum(want_sub.values())} made")
    if lacks(run, "c", "bpf_cookie"):
        # Without cookies a return probe cannot be told apart (it fires at the caller's
        # address): the probe needing add's result is refused, with the reason, alone.
        add = probe_counts(run.summary("c"), "add")
        if add.get("attached") is not False or "return cannot be probed" not in (add.get("error") or ""):
            raise Fail(f"add (r0, latency) not refused with the reason: {add.get('error')}")
        if of_symbol(recs, "add"):
            raise Fail("add: records of a refused probe")
        return (f"no BPF cookies: add (r0) refused with the reason; sub: {sum(want_sub.values())} of "
                f"{sum(want_sub.values())}, found by address, exact")
    want_add = Counter((l["a"], l["b"], l["r"]) for l in program_lines(out, "add "))
    got_add = Counter(tuple(str(values(r).get(k)) for k in ("a", "b", "r0")) for r in of_symbol(recs, "add"))
    # A call whose run was interleaved with another's on one CPU (a preemptible kernel with
    # one CPU, as these VMs are) is counted lost or unfinished instead: never a wrong value,
    # never uncounted (README: Kernel matrix).
    note = ""
    counted = probe_counts(run.summary("c"), "add")
    extra, missing = got_add - want_add, want_add - got_add
    n_missing = sum(missing.values())
    unfinished = sum(1 for r in of_symbol(recs, "add") if r.get("unfinished"))
    accounted = (counted.get("lost") or 0) + (counted.get("returns_lost") or 0)
    if want_add and not extra - Counter({k: v for k, v in extra.items() if k[2] == "None"}) \
            and n_missing and n_missing <= accounted and unfinished <= (counted.get("returns_lost") or 0):
        note = f"; {n_missing} of {sum(want_add.values())} add calls counted lost (runs interleaved on one CPU)"
    elif not want_add or got_add != want_add:
        raise Fail(f"add: {sum(got_add.values())} recorded (a, b, r0) for {sum(want_add.values())} made; "
                   f"recorded, not made: {sorted(extra)[:2]}; made, not recorded: {sorted(missing)[:2]}")
    return (f"add: {sum(want_add.values())} calls with r0 (2 threads), sub: {sum(want_sub.values())}, "
            f"every value recorded exact{note}")


def check_d(run):
    run.gprobe_ok("c")
    want = Counter((l["item"], l["qty"]) for l in program_lines(run.text("c.out"), "order "))
    got = Counter(
        (str(values(r).get("item")), str(values(r).get("qty"))) for r in run.records("c") if "qty" in values(r)
    )
    if not want or got != want:
        raise Fail(f"ctarget:order: {sum(got.values())} recorded for {sum(want.values())} made")
    return f"ctarget:order: {sum(want.values())} of {sum(want.values())}, item and qty exact"


def check_e(run):
    n, note = 0, ""
    for name, symbol in (("go-go127", "net/http.(*Client).Get"), ("c", "add")):
        run.gprobe_ok(name)
        if name == "c" and lacks(run, "c", "bpf_cookie"):
            # A C function's return cannot be probed without cookies: check c judges the
            # refusal; Go's latency (probes on its RET instructions) is measured as anywhere.
            note += "; no BPF cookies: C latency refused (check c)"
            continue
        recs = of_symbol(run.records(name), symbol)
        if not recs:
            raise Fail(f"{symbol}: no calls recorded")
        p = probe_counts(run.summary(name), symbol)
        # A return interleaved with another run on one CPU (check c) is counted in
        # returns_lost and its entry delivered unfinished: counted, not a missing duration.
        interleaved = (p.get("returns_lost") or 0) if name == "c" else 0
        unfinished = [r for r in recs if r.get("unfinished")]
        bad = [r for r in recs if not (r.get("duration_ns") or 0) > 0 and not r.get("unfinished")]
        if bad or len(unfinished) > interleaved:
            raise Fail(f"{symbol}: {len(bad) + len(unfinished)} of {len(recs)} calls without a duration")
        if (p.get("returns_lost") or 0) > interleaved or (p.get("unfinished") or 0) > interleaved:
            raise Fail(f"{symbol}: returns_lost={p.get('returns_lost')} unfinished={p.get('unfinished')}")
        n += len(recs) - len(unfinished)
        note += f"; {len(unfinished)} C return(s) counted lost (runs interleaved on one CPU)" if unfinished else ""
    how = "Go RET probes" if "refused" in note else "Go RET probes, C uretprobe"
    return f"{n} calls ({how}), each with its duration{note}"


def check_f(run):
    run.gprobe_ok("when")
    out = run.text("when.out")
    failed = [l.split()[1] for l in out.splitlines() if l.startswith("GET ") and "-> error" in l]
    made = [l for l in out.splitlines() if l.startswith("GET ")]
    recs = of_symbol(run.records("when"), "net/http.(*Client).Get")
    got = [values(r).get("url") for r in recs]
    if len(made) != 10 or len(failed) != 3:
        raise Fail(f"the program made {len(made)} GETs, {len(failed)} failing (want 10, 3)")
    if Counter(got) != Counter(failed) or any(values(r).get("err") is None for r in recs):
        raise Fail(f"{len(got)} kept for the {len(failed)} failed GETs")
    p = probe_counts(run.summary("when"), "net/http.(*Client).Get")
    if p.get("filtered") != len(made) - len(failed) or p.get("delivered") != len(failed):
        raise Fail(f"summary delivered={p.get('delivered')} filtered={p.get('filtered')} (want 3, 7)")
    return "err != nil: the 3 failed GETs kept, the 7 others counted as filtered"


def check_g(run):
    run.gprobe_ok("holds")
    recs = run.records("holds")
    subs = program_lines(run.text("holds-exec.out"), "sub ")
    got_sub = [r for r in of_symbol(recs, "sub")]
    if len(subs) != 3 or len(got_sub) != 3:
        raise Fail(f"exec: {len(got_sub)} of {len(subs)} first calls of a new process traced")
    fork = run.text("holds-fork.out")
    made = Counter((l["pid"], l["x"]) for l in program_lines(fork, "work "))
    got = Counter((str(r.get("pid")), str(values(r).get("x"))) for r in of_symbol(recs, "work"))
    summary = run.summary("holds")
    missed = summary.get("processes", {}).get("missed") or []
    features = dict(summary.get("kernel", {}).get("features", []))
    if len(made) == 10 and features.get("task_kfuncs", {}).get("state") == "missing":
        # Without task kfuncs a forked child is not held: its first calls may be missed,
        # and gprobe must say so for each child it did not trace from its first call.
        untraced = {pid for pid, x in made if got[(pid, x)] != made[(pid, x)]}
        named = {str(m.get("pid")) for m in missed}
        if untraced - named:
            raise Fail(f"fork: children {sorted(untraced - named)} missed without a word")
        if named - {pid for pid, _ in made}:
            raise Fail(f"missed processes that are not forked children: {sorted(named)}")
        return (f"exec: 3 of 3 first calls; fork (not held without task kfuncs): "
                f"{10 - len(untraced)} of 10 children traced from their first call, "
                f"the {len(untraced)} others named missed")
    if len(made) != 10 or got != made:
        raise Fail(f"fork: {sum(got.values())} of {len(made)} children's first calls traced")
    if missed:
        raise Fail(f"{len(missed)} processes missed: {missed[0].get('reason')}")
    return "exec: 3 of 3 first calls; fork: 10 of 10 children from their first call; none missed"


def check_h(run):
    def states(name):
        return [l.split(":")[1] for l in run.text(name).split() if ":" in l]

    at_kill, after = states("kill.at-kill"), states("kill.after")
    if run.rc("kill") != 137:
        raise Fail(f"gprobe ended with {run.rc('kill')}, not killed: {run.last_error('kill')}")
    held = at_kill.count("T")
    if held == 0:
        raise Fail(f"no process seen held before the kill ({len(at_kill)} running): nothing tested")
    if "T" in after:
        raise Fail(f"{after.count('T')} processes still stopped 3 s after gprobe was killed")
    return f"{held} of {len(at_kill)} processes held at kill -9; none stopped 3 s later ({len(after)} left running)"


def section(text, name):
    m = re.search(rf"^{re.escape(name)}:\n(.*?)(?=^[a-z ]+:$|\Z)", text, re.M | re.S)
    return [l for l in (m.group(1) if m else "").splitlines() if l.strip()]


def check_i(run):
    run.gprobe_ok("holds")
    pid = run.text("holds.pid").strip()
    before, during, after = (run.text(f"state-{w}") for w in ("before", "during", "after"))
    vm = run.text("where").strip() == "vm"
    pins = [l for l in section(during, "bpffs") if f"held_{pid}_" in l]
    if not pins:
        raise Fail(f"no pin of gprobe {pid} seen while it ran: the check cannot see its state")
    if [l for l in section(after, "bpffs") if f"held_{pid}_" in l]:
        raise Fail(f"pin left: {pins[0]}")
    new_uprobes = set(section(after, "uprobe_events")) - set(section(before, "uprobe_events"))
    if new_uprobes:
        raise Fail(f"uprobe_events after the stop: {sorted(new_uprobes)[0]}")
    if vm:
        if section(after, "bpffs"):
            raise Fail(f"bpffs not empty: {section(after, 'bpffs')[0]}")
        fds_during, fds_after = section(during, "bpf fds"), section(after, "bpf fds")
        if not fds_during:
            raise Fail("no BPF object open while gprobe ran: the check cannot see them")
        if fds_after:
            raise Fail(f"BPF objects still open after the stop: {fds_after[0]}")
        return f"no uprobe_events, bpffs empty, no BPF fd open (while running: {len(fds_during)} fds, a pin)"
    return "no uprobe_events, gprobe's pin removed (other programs' BPF state on this machine left aside)"


def check_j(run):
    status = run.text("agent.readyz").strip()
    body = (run.d / "agent.readyz.body").read_text(errors="replace").strip() if (
        run.d / "agent.readyz.body").exists() else ""
    if status != "200":
        code = re.search(r"HTTP/1\.1 (\d+)", status)
        said = f"answered {code.group(1)}" if code else "never answered"
        # A kernel gprobe cannot trace on: the agent must stay up (no crash loop), not
        # ready, saying why, and end cleanly when stopped.
        err = run.text("agent.err")
        why = re.search(r"lacks what gprobe's uprobe programs need: [^;]*|"
                        r"loading BPF program gprobe_uprobe[^:]*: [^.]*", err)
        if (said == "answered 503" and why and "the agent stays up, not ready" in err
                and run.rc("agent") == 0):
            return f"503, up and not ready: {why.group(0)[:80]}"
        raise Fail(f"/readyz {said}: {run.last_error('agent')}")
    one = " ".join(body.split())[:90]
    if "kernel" not in body.lower():
        raise Fail(f"Ready (200), but /readyz says nothing of the kernel: {one!r}")
    return f"200: {one}"


def check_k(run):
    summ = run.summary("prop")
    prop = summ.get("propagation") or {}
    err = prop.get("error")
    if err and "bpf_probe_write_user" in err:
        raise Skip("this kernel forbids bpf_probe_write_user (lockdown): nothing can be written")
    run.gprobe_ok("prop")
    if err:
        raise Fail(f"propagation error: {err[:120]}")
    client = program_lines(run.text("prop.client"), "sent ")
    sent = {l["id"]: l["traceparent"] for l in client}
    if len(sent) != 12:
        raise Fail(f"client: {len(sent)} of 12 requests answered 200 ({run.text('prop.client').strip()[-80:]})")
    # The front answers work(id) = id+1 and what the back answered it, lookup(id) = id*7.
    wrong = [l for l in client if l.get("answer") != f"{int(l['id']) + 1}/{int(l['id']) * 7}"]
    if wrong:
        raise Fail(f"request {wrong[0]['id']} got the answer {wrong[0].get('answer')!r}")
    front_saw = {l["id"]: l["traceparent"] for l in program_lines(run.text("prop.front"), "front ")}
    if front_saw != sent:
        raise Fail("the front service did not get the traceparents the client sent")
    back_saw = {l["id"]: l["traceparent"] for l in program_lines(run.text("prop.back"), "back ")}
    recs = run.records("prop")
    # Without bpf_loop Go maps are not searched: a handler cannot read the traceparent it
    # was sent, so its span starts a trace (README: Kernels). The write is checked the same.
    joins = not lacks(run, "prop", "bpf_loop")

    def one(symbol, query):
        hits = [r for r in recs if r.get("symbol") == symbol and values(r).get("r.URL.RawQuery") == query]
        if len(hits) != 1:
            raise Fail(f"{len(hits)} spans of {symbol} for {query}")
        return hits[0]

    for i in sent:
        f = one("main.frontHandler", f"id={i}")
        for query, line in ((f"id={i}", i), (f"id={i}&from=goroutine", f"{i}/goroutine")):
            b = one("main.backHandler", query)
            want = f"00-{f['trace_id']}-{f['span_id']}-01"
            if back_saw.get(line) != want:
                raise Fail(f"request {line} carried {back_saw.get(line)}, not the front span's {want}")
            if joins and (b.get("trace_id"), b.get("parent_span_id")) != (f["trace_id"], f["span_id"]):
                raise Fail(f"back span of {query} is not the child of the front span that sent it")
    headers = program_lines(run.text("prop.headers"), "sent ")
    own = {l["id"]: l["traceparent"] for l in headers}
    if len(own) != 3 or any(back_saw.get(i) != tp for i, tp in own.items()):
        raise Fail("a request with a traceparent of its own, sent inside a propagating span, was changed")
    if any(l.get("answer") != str(int(l["id"]) * 7) for l in headers):
        raise Fail("a request with a traceparent of its own got a wrong answer")
    if prop.get("written") != 24:
        raise Fail(f"summary: written={prop.get('written')}, not 24")
    if not joins:
        return ("24 of 24 requests carry their front span's traceparent, exact bytes, 12 answers right; "
                "3 own traceparents kept (no bpf_loop: back spans cannot read it, start traces)")
    return ("24 of 24 back spans under the front span that sent them, exact bytes, 12 answers right; "
            "3 own traceparents kept")


def judge(run, key):
    try:
        if (run.d / "vm-error").exists() and not (run.d / "kernel").exists():
            raise Fail((run.d / "vm-error").read_text().strip()[:150])
        return "PASS", globals()[f"check_{key}"](run)
    except Skip as e:
        return "SKIP", str(e)
    except Fail as e:
        return "FAIL", str(e)
    except Exception as e:  # a result file that does not parse: the run went wrong
        return "FAIL", f"{type(e).__name__}: {e}"[:160]


def main(argv):
    cols = [a.split("=", 1) for a in argv]
    results = {(name, k): judge(Run(Path(d)), k) for name, d in cols for k, _ in CHECKS}
    kernels = {}
    for name, d in cols:
        p = Path(d) / "kernel"
        secs = Path(d) / "seconds"
        kernels[name] = (p.read_text().strip() if p.exists() else "?",
                         secs.read_text().strip() if secs.exists() else "?")
    width = max(len(t) for _, t in CHECKS) + 4
    heads = [n.split()[0] for n, _ in cols]
    print("| check".ljust(width + 2) + "".join(f"| {h:<6}" for h in heads) + "|")
    print("|" + "-" * (width + 1) + "".join("|-------" for _ in heads) + "|")
    for k, title in CHECKS:
        print(f"| {k} {title}".ljust(width + 2) + "".join(f"| {results[(n, k)][0]:<6}" for n, _ in cols) + "|")
    print()
    for name, _ in cols:
        rel, secs = kernels[name]
        print(f"{name.split()[0]}: {rel} ({secs} s)")
        # Checks in a row with the same result and reason (a gprobe that did not start) share
        # one line.
        groups = []
        for k, _ in CHECKS:
            if groups and groups[-1][1] == results[(name, k)]:
                groups[-1][0].append(k)
            else:
                groups.append(([k], results[(name, k)]))
        for keys, (status, why) in groups:
            label = keys[0] if len(keys) == 1 else f"{keys[0]}-{keys[-1]}"
            print(f"  {label} {status} {why}")
    return 1 if any(s == "FAIL" for s, _ in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
