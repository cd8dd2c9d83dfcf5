# check_spans.py TRACES_JSON LOG POD NAMESPACE NODE MIN [SINCE_US]: checks the Jaeger query API's
# answer against the pod's log: exits 0 when at least MIN spans of the pod (started after
# SINCE_US) are there and they are exact; 1 (with what is missing) when not yet; 2 on a
# wrong span.
import json, re, sys
traces, log, pod, ns, node, want = sys.argv[1:7]
since = int(sys.argv[7]) if len(sys.argv) > 7 and sys.argv[7] else 0
want = int(want)
def wrong(msg):  # a wrong span: exit 2, at once
    print(msg)
    sys.exit(2)
logged = {}  # item number -> (url, error or None)
for line in open(log):
    m = re.match(r"GET (\S+) -> (.*)", line.strip())
    if m:
        url = m.group(1)
        n = int(re.search(r"/item/(\d+)", url).group(1))
        logged[n] = (url, m.group(2).startswith("error"))
spans = {}
for t in json.load(open(traces)).get("data") or []:
    procs = t.get("processes", {})
    for s in t["spans"]:
        if s["operationName"] != "net/http.(*Client).Get" or s["startTime"] < since:
            continue
        res = {kv["key"]: kv["value"] for kv in procs.get(s["processID"], {}).get("tags", [])}
        if res.get("k8s.pod.name") != pod:
            continue
        tags = {kv["key"]: kv["value"] for kv in s.get("tags", [])}
        for key, value in (("k8s.namespace.name", ns), ("k8s.container.name", "http-client"), ("k8s.node.name", node)):
            if res.get(key) != value:
                wrong(f"span {s['spanID']}: resource {key}={res.get(key)!r}, not {value!r}")
        url = tags.get("gprobe.args.url", "")
        m = re.search(r"/item/(\d+)", url)
        if not m:
            wrong(f"span {s['spanID']}: gprobe.args.url={url!r}")
        n = int(m.group(1))
        if n in spans:
            wrong(f"item {n}: two spans ({url})")
        if s["duration"] <= 0:
            wrong(f"item {n}: duration {s['duration']}")
        spans[n] = (url, tags.get("gprobe.returns.err"))
if len(spans) < want:
    print(f"{len(spans)} spans of pod {pod} so far (waiting for {want})")
    sys.exit(1)
lo, hi = min(spans), max(spans)
for n in range(lo, hi + 1):
    if n not in logged:
        print(f"item {n}: a span, but not yet in the pod's log")
        sys.exit(1)
    if n not in spans:
        wrong(f"item {n} ({logged[n][0]}): logged by the pod between traced calls, but no span")
    url, failed = logged[n]
    if spans[n][0] != url:
        wrong(f"item {n}: span url {spans[n][0]!r}, the pod fetched {url!r}")
    err = spans[n][1]
    if failed != (err not in (None, "", "null", "nil")):
        wrong(f"item {n}: the pod's GET {'failed' if failed else 'succeeded'}, the span's err is {err!r}")
errs = sum(1 for n in range(lo, hi + 1) if logged[n][1])
print(f"exact: items {lo}..{hi} of pod {pod}: {hi - lo + 1} calls, {hi - lo + 1} spans"
      f" ({errs} failed GETs with their error), resource k8s.namespace.name={ns} k8s.pod.name={pod}"
      f" k8s.container.name=http-client k8s.node.name={node}")
