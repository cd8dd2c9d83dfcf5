# promql_url.py JSON_LINE: the path of Prometheus's HTTP API that runs the line's query (a
# line of dashboard_queries.py), label_values(METRIC, LABEL) as a label values request.
import json, re, sys, urllib.parse
q = json.loads(sys.argv[1])["query"]
m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
if m:
    print(f"/api/v1/label/{m.group(2)}/values?" + urllib.parse.urlencode({"match[]": m.group(1)}))
else:
    print("/api/v1/query?" + urllib.parse.urlencode({"query": q}))
