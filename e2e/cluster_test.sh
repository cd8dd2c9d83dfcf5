#!/usr/bin/env bash
# gprobe on a real Kubernetes node of this machine: starts scripts/cluster.sh (under
# /tmp/gprobe-cluster.lock, so that two runs never share the node), runs the cluster test
# e2e/kind/run.sh through its kubeconfig (under /tmp/gprobe-bpf.lock from its helm install on,
# while the agent loads BPF programs, like every test that does), and stops the cluster again: nothing stays running.
# A cluster that was already up is used and left up. Needs root; builds what it needs first
# (the components once, into the cache: see scripts/cluster.sh).
# Usage: bash e2e/cluster_test.sh     Environment: GPROBE_CLUSTER_DIR, TIMEOUT, KEEP.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cluster="$root/scripts/cluster.sh"
[[ $EUID -eq 0 ]] || { echo "cluster_test: needs root" >&2; exit 1; }

# Build everything before taking any lock: the Kubernetes components, etcd, the receivers
# and the release binaries of the images (run.sh then only packs them).
t0=$SECONDS
"$cluster" build
"$cluster" tool jaeger >/dev/null
"$cluster" tool prometheus >/dev/null
(cd "$root" && cargo build --release --locked -p gprobe-agent --bin gprobe -p gprobe-operator --bin gprobe-operator \
  -p kubectl-gprobe --bin kubectl-gprobe)
echo "cluster_test: builds ready in $((SECONDS - t0)) s"

exec 8>/tmp/gprobe-cluster.lock
flock 8
started=false
if ! "$cluster" status >/dev/null 2>&1; then started=true; fi
stop_cluster() {
  local rc=$?
  rm -f "${trace_window:-}"
  if $started && [[ -z "${KEEP:-}" ]]; then "$cluster" down || rc=1; fi
  exit "$rc"
}
trap stop_cluster EXIT
t0=$SECONDS
kubeconfig="$("$cluster" up | tail -n 1)"
# The chart as the README installs it: no extra flags (the agent raises RLIMIT_MEMLOCK only on
# kernels that charge BPF memory to it, and the chart grants CAP_SYS_RESOURCE only when asked).
helm_extra=""
echo "cluster_test: cluster up in $((SECONDS - t0)) s ($kubeconfig)"
trace_window="$(mktemp)"
KUBECONFIG="$kubeconfig" LOAD="$cluster load" KUBECTL="$("$cluster" tool kubectl)" TRACE_WINDOW_FILE="$trace_window" \
  CRI_SOCKET="$("$cluster" cri-socket)" HELM_EXTRA="$helm_extra" BPF_LOCK=/tmp/gprobe-bpf.lock \
  bash "$root/e2e/kind/run.sh"

# What the agents asked the API server, from its audit log (Metadata level): every request
# of the agent's ServiceAccount, by verb, resource and query. An agent may read pods only
# with a field selector on its own node (spec.nodeName=NODE); the chart's agent learns pods
# from the node's CRI and should make no pod request at all.
audit="$(dirname "$kubeconfig")/log/audit.log"
python3 - "$audit" <<'PY'
import collections, json, re, sys, urllib.parse
agent = "system:serviceaccount:gprobe-system:gprobe-e2e-agent"
seen, pods, bad = collections.Counter(), 0, []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("user", {}).get("username") != agent or e.get("stage") != "ResponseComplete":
        continue
    ref = e.get("objectRef", {})
    uri = urllib.parse.urlsplit(e["requestURI"])
    q = urllib.parse.parse_qs(uri.query)
    shown = {k: v[0] for k, v in q.items() if k in ("watch", "fieldSelector", "labelSelector", "fieldManager")}
    seen[(e["verb"],
          ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource") else ""),
          json.dumps(shown, sort_keys=True),
          e.get("responseStatus", {}).get("code"))] += 1
    if ref.get("resource") == "pods":
        pods += 1
        fs = q.get("fieldSelector", [""])[0]
        node = (e.get("user", {}).get("extra", {}).get("authentication.kubernetes.io/node-name") or [""])[0]
        if e["verb"] in ("list", "watch") and fs != f"spec.nodeName={node}":
            bad.append(e["requestURI"])
if not seen:
    sys.exit(f"cluster_test: no request of {agent} in the audit log {sys.argv[1]}")
print(f"requests of the agent ({agent}) in the API server's audit log:")
for (verb, res, query, code), n in sorted(seen.items()):
    print(f"  {n:5d}  {verb:6s} {res:28s} {query}  -> {code}")
if bad:
    sys.exit("cluster_test: the agent listed or watched pods beyond its node: " + ", ".join(bad[:5]))
print(f"pod requests of the agent: {pods} "
      f"({'all with fieldSelector=spec.nodeName=<its node>' if pods else 'none: pods come from the node CRI'})")
PY

# What one `kubectl gprobe trace --for 20s` cost the API server (run.sh's step 3c, as the
# impersonated user e2e-tracer, in the window it wrote): its requests by verb and resource.
python3 - "$audit" "$trace_window" <<'PY'
import collections, datetime, json, sys
start_us, end_us = (int(x) for x in open(sys.argv[2]).read().split())
def us(ts):
    return int(datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1e6)
seen, total = collections.Counter(), 0
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("impersonatedUser", {}).get("username") != "e2e-tracer" or e.get("stage") != "ResponseComplete":
        continue
    if not start_us <= us(e["requestReceivedTimestamp"]) <= end_us:
        continue
    ref = e.get("objectRef", {})
    res = ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource") else "")
    seen[(e["verb"], res, e.get("responseStatus", {}).get("code"))] += 1
    total += 1
if not total:
    sys.exit("cluster_test: no request of the trace (user e2e-tracer) in the audit log")
print(f"requests of one kubectl gprobe trace --for 20s (user e2e-tracer): {total}")
for (verb, res, code), n in sorted(seen.items()):
    print(f"  {n:5d}  {verb:6s} {res:36s} -> {code}")
PY
