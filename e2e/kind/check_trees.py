# check_trees.py TRACES_JSON,... CLIENT_LOG POD MIN MODE: checks the trees of the services pod's
# requests in Jaeger's answers (the traces of services front and back) against what its
# client sent. A request: the front handler's span (service front), in the client's trace
# under the client's span when the client sent a valid traceparent, else a root; work and
# async under it; the two requests it makes to the back service (its own and its
# goroutine's), each a back handler span (service back) with one lookup under it. MODE
# "written": the front span's traceparent went out with them, so each back span is under
# the front span, in its trace (one tree across the services); "refused": the kernel does
# not let BPF write it (the agent said so), so each back span is a root of a trace of its
# own. Exits 0 when at least MIN requests are whole and every request between the first
# and the last whole one is exact; 1 when not yet; 2 on a wrong span, or a request with a
# part missing between whole ones.
import json, re, sys
traces, log, pod, want, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
def wrong(msg):
    print(msg)
    sys.exit(2)
sent = {}  # request id -> (trace id, parent span id) of a valid traceparent, or None
for line in open(log):
    m = re.match(r"sent id=(\d+) traceparent=(\S+) valid=(\d)", line.strip())
    if m:
        f = m.group(2).split("-")
        sent[int(m.group(1))] = (int(f[1], 16), int(f[2], 16)) if m.group(3) == "1" else None
spans = {}
for t in [t for f in traces.split(",") for t in json.load(open(f)).get("data") or []]:
    procs = t.get("processes", {})
    for s in t["spans"]:
        res = {kv["key"]: kv["value"] for kv in procs.get(s["processID"], {}).get("tags", [])}
        if res.get("k8s.pod.name") != pod:
            continue
        parents = [int(r["spanID"], 16) for r in s.get("references", []) if r.get("refType") == "CHILD_OF"]
        spans[int(s["spanID"], 16)] = {
            "op": s["operationName"], "trace": int(s["traceID"], 16), "parent": parents[0] if parents else None,
            "service": procs[s["processID"]]["serviceName"], "container": res.get("k8s.container.name"),
            "tags": {kv["key"]: str(kv["value"]) for kv in s.get("tags", [])}, "id": s["spanID"],
        }
children, fronts, backs = {}, {}, {}
for sid, s in spans.items():
    if s["service"] != s["container"]:
        wrong(f"span {s['id']} ({s['op']}): service.name {s['service']!r} in container {s['container']!r}")
    children.setdefault(s["parent"], []).append(sid)
    query = s["tags"].get("gprobe.args.r.URL.RawQuery", "")
    if s["op"] == "main.frontHandler":
        m = re.fullmatch(r"id=(\d+)", query)
        if not m or s["service"] != "front":
            wrong(f"front span {s['id']}: service {s['service']}, tags {s['tags']}")
        if int(m.group(1)) in fronts:
            wrong(f"request {m.group(1)}: two front spans")
        fronts[int(m.group(1))] = sid
    elif s["op"] == "main.backHandler":
        if s["service"] != "back":
            wrong(f"back span {s['id']}: service {s['service']}")
        backs.setdefault(query, []).append(s)
def tree(n):  # what is wrong with request n's spans, or None when they are whole and exact
    if n not in fronts:
        return "no front span"
    f = spans[fronts[n]]
    kids = [spans[c] for c in children.get(fronts[n], [])]
    tp = sent.get(n)
    if tp is not None and (f["trace"], f["parent"]) != tp:
        return f"front span {f['id']} not in the client's trace {tp[0]:032x} under its span {tp[1]:016x}"
    if tp is None and f["parent"] is not None:
        return f"front span {f['id']} has a parent, but the client sent no valid traceparent"
    for op in ("main.work", "main.async"):
        got = [c for c in kids if c["op"] == op]
        if len(got) != 1 or got[0]["tags"].get("gprobe.args.id") != str(n) or got[0]["trace"] != f["trace"]:
            return f"{len(got)} {op} spans under the front span, not one with id {n} in its trace"
    for q in (f"id={n}", f"id={n}&from=goroutine"):
        got = backs.get(q, [])
        if len(got) != 1:
            return f"{len(got)} back handler spans of {q}"
        b = got[0]
        if mode == "written" and (b["parent"], b["trace"]) != (fronts[n], f["trace"]):
            return f"back span {b['id']} of {q} is not under the front span {f['id']} in its trace"
        if mode == "refused" and (b["parent"] is not None or b["trace"] == f["trace"]):
            return f"back span {b['id']} of {q} is not a root of a trace of its own (nothing carried the front span)"
        looks = [spans[c] for c in children.get(int(b["id"], 16), []) if spans[c]["op"] == "main.lookup"]
        if len(looks) != 1 or looks[0]["tags"].get("gprobe.args.id") != str(n) or looks[0]["trace"] != b["trace"]:
            return f"{len(looks)} lookup spans under back span {b['id']} of {q}, not one with id {n} in its trace"
    return None
whole = [n for n in sorted(fronts) if tree(n) is None]
if len(whole) < want:
    print(f"{len(whole)} whole requests of pod {pod} so far (waiting for {want})")
    sys.exit(1)
lo, hi = whole[0], whole[-1]
for n in range(lo, hi + 1):
    if n not in sent:
        print(f"request {n}: traced, but not yet in the client's log")
        sys.exit(1)
    problem = tree(n)
    if problem:
        wrong(f"request {n} (between whole ones {lo} and {hi}): {problem}")
joined = sum(1 for n in range(lo, hi + 1) if sent[n] is not None)
shape = ("one tree of 7 spans across services front and back" if mode == "written"
         else "a tree of 3 spans in service front and two of 2 in service back"
              " (the kernel refused the traceparent write)")
print(f"exact: requests {lo}..{hi} of pod {pod}: {hi - lo + 1} requests, each {shape};"
      f" {joined} in the client's own trace")
