# check_trace.py TRACE_JSONL LOG POD MIN SUMMARY: checks what `kubectl gprobe trace
# deploy/http-client 'net/http.(*Client).Get(url) -> err' --hist` printed against the pod's
# log: the calls (JSON lines) are exactly the GETs the pod logged from the first traced one
# to the last (every one, once, with its URL and error; nothing else, from no other pod), at
# least MIN of them; and the histogram in SUMMARY (its stderr) counts exactly those calls.
# Exits 0 when exact, 1 with what is wrong.
import json, re, sys
trace, log, pod, want, summary = sys.argv[1:6]
want = int(want)
def wrong(msg):
    print(f"check_trace: {msg}")
    sys.exit(1)
logged = {}  # item number -> (url, failed)
for line in open(log):
    m = re.match(r"GET (\S+) -> (.*)", line.strip())
    if m:
        n = int(re.search(r"/item/(\d+)", m.group(1)).group(1))
        logged[n] = (m.group(1), m.group(2).startswith("error"))
calls, unfinished = {}, set()
for i, line in enumerate(open(trace)):
    rec = json.loads(line)
    if "gprobe" in rec:
        wrong(f"line {i + 1}: a notice on stdout: {line.strip()}")
    res = rec.get("resource", {})
    if res.get("k8s.pod.name") != pod:
        wrong(f"line {i + 1}: a call of pod {res.get('k8s.pod.name')!r}, not {pod!r}")
    if rec.get("symbol") != "net/http.(*Client).Get":
        wrong(f"line {i + 1}: symbol {rec.get('symbol')!r}")
    url = rec["args"].get("url", "")
    m = re.search(r"/item/(\d+)", url)
    if not m:
        wrong(f"line {i + 1}: url {url!r}")
    n = int(m.group(1))
    if n in calls:
        wrong(f"item {n}: printed twice")
    # The trace may end in the middle of a call: that one is unfinished (no return).
    if rec.get("unfinished"):
        unfinished.add(n)
    elif not rec.get("duration_ns", 0) > 0:
        wrong(f"item {n}: duration {rec.get('duration_ns')!r}")
    calls[n] = (url, rec.get("returns", {}).get("err"))
if len(calls) < want:
    wrong(f"{len(calls)} calls printed, want at least {want}")
lo, hi = min(calls), max(calls)
for n in range(lo, hi + 1):
    if n not in logged:
        wrong(f"item {n}: printed, but not in the pod's log")
    if n not in calls:
        wrong(f"item {n} ({logged[n][0]}): logged by the pod between traced calls, but not printed")
    url, failed = logged[n]
    if calls[n][0] != url:
        wrong(f"item {n}: printed url {calls[n][0]!r}, the pod fetched {url!r}")
    if n in unfinished:
        if n != hi:
            wrong(f"item {n}: unfinished, but the pod made calls after it")
        continue
    if failed != (calls[n][1] is not None):
        wrong(f"item {n}: the pod's GET {'failed' if failed else 'succeeded'}, err is {calls[n][1]!r}")
text = open(summary).read()
m = re.search(r"@ns\[net/http\.\(\*Client\)\.Get\]: (\d+) calls?\n", text)
if not m:
    wrong(f"no histogram in the summary:\n{text}")
rows = [int(r) for r in re.findall(r"^\[[^)]*\)\s+(\d+) \|", text[m.end():], re.M)]
timed = len(calls) - len(unfinished)
if int(m.group(1)) != timed or sum(rows) != timed:
    wrong(f"the histogram counts {m.group(1)} calls (rows: {sum(rows)}); {timed} printed returned")
m = re.search(r"^(\d+) calls delivered", text, re.M)
if not m or int(m.group(1)) != len(calls):
    wrong(f"the summary's delivered calls are not the {len(calls)} printed:\n{text}")
errs = sum(1 for n in range(lo, hi + 1) if logged[n][1])
print(f"exact: items {lo}..{hi} of pod {pod}: {len(calls)} calls printed, as logged "
      f"({errs} failed GETs with their error); the histogram counts {sum(rows)}")
