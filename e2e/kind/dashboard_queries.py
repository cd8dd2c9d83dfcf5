# dashboard_queries.py DASHBOARD QUERIES_OUT: writes each PromQL query of the dashboard (panels and
# template variables) with Grafana's variables replaced, one JSON object per line.
import json, sys
d = json.load(open(sys.argv[1]))
subst = {"$__rate_interval": "1m", "$__range": "10m", "$__interval": "15s", "$probe": ".*", "$symbol": ".*"}
def fill(q):
    for k in sorted(subst, key=len, reverse=True):
        q = q.replace(k, subst[k])
    return q
out = open(sys.argv[2], "w")
for v in d.get("templating", {}).get("list", []):
    q = v.get("query")
    q = q.get("query") if isinstance(q, dict) else q
    if v.get("type") == "query" and q:
        out.write(json.dumps({"what": f"variable {v['name']}", "query": fill(q)}) + "\n")
def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels", []))
for p in panels(d.get("panels", [])):
    for t in p.get("targets", []):
        if t.get("expr"):
            out.write(json.dumps({"what": f"panel {p.get('title')!r} {t.get('refId')}",
                                  "query": fill(t["expr"])}) + "\n")
