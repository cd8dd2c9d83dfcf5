#!/usr/bin/env bash
# The operator and the API server under the load of a large cluster's agents, on the real
# one-node cluster of scripts/cluster.sh: operator/src/bin/attachment-load.rs writes the
# ProbeAttachments of NODES simulated agents (SPECS ProbeSpecs each; every status changes
# once per PERIOD) while this script samples the operator's CPU time and RSS
# (/proc/PID/stat, /proc/PID/status of its container's process) and counts the requests of
# the operator's ServiceAccount in the API server's audit log over the same window.
# Prints the load tool's roll-up latency and these figures (BENCHMARKS.md records them).
#
#   bench/cluster-load.sh     Environment: NODES (1000), SPECS (10), PERIOD (30s),
#                             DURATION (120s), CONCURRENCY (64), OPERATOR_BINARY (another
#                             build of gprobe-operator to measure instead of target/release's)
# Starts the cluster when it is not up (and stops it at the end), installs the chart
# (from scripts/images.sh; the agent DaemonSet selects no node: the simulated agents are the
# load, and no BPF program is loaded), uninstalls it at the end. Needs root.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cluster="$root/scripts/cluster.sh"
nodes="${NODES:-1000}" specs="${SPECS:-10}" period="${PERIOD:-30s}" duration="${DURATION:-120s}"
release=gprobe-load
ns=gprobe-system
helm="${HELM:-$root/.cache/helm/helm/helm}"

(cd "$root" && cargo build --release --locked -p gprobe-operator --bins)
exec 8>/tmp/gprobe-cluster.lock
flock 8
started=false
"$cluster" status >/dev/null 2>&1 || started=true
kubeconfig="$("$cluster" up | tail -n 1)"
export KUBECONFIG="$kubeconfig"
kubectl="$("$cluster" tool kubectl)"
tmp="$(mktemp -d)"
cleanup() {
  set +e
  "$helm" uninstall "$release" -n "$ns" --wait >/dev/null 2>&1
  "$kubectl" delete namespace gprobe-load --ignore-not-found --wait=false >/dev/null 2>&1
  $started && "$cluster" down
  rm -rf "$tmp"
}
trap cleanup EXIT
"$root/scripts/images.sh" --tag load --out "$tmp" --no-build >"$tmp/images.txt"
if [[ -n "${OPERATOR_BINARY:-}" ]]; then
  # Another build of the operator (e.g. an older commit's, to compare).
  python3 "$root/scripts/oci-image.py" --ref gprobe.local/gprobe-operator:load --out "$tmp/operator-other.tar" \
    --file "$OPERATOR_BINARY:/usr/local/bin/gprobe-operator" --libs-of /usr/local/bin/gprobe-operator \
    --entrypoint /usr/local/bin/gprobe-operator --user 65532:65532 \
    --label "org.opencontainers.image.version=$(sha256sum "$OPERATOR_BINARY" | cut -c1-12)" >"$tmp/other.txt"
  grep -v gprobe-operator "$tmp/images.txt" >"$tmp/agent.txt"
  cat "$tmp/agent.txt" "$tmp/other.txt" >"$tmp/images.txt"
fi
while read -r archive _; do "$cluster" load "$archive"; done <"$tmp/images.txt"
"$helm" install "$release" "$root/charts/gprobe" -n "$ns" --create-namespace \
  --set images.agent.repository=gprobe.local/gprobe-agent --set images.agent.tag=load \
  --set images.agent.pullPolicy=Never --set images.operator.repository=gprobe.local/gprobe-operator \
  --set images.operator.tag=load --set images.operator.pullPolicy=Never \
  --set agent.criSocket.path="$("$cluster" cri-socket)" \
  --set-string agent.nodeSelector.gprobe-load-no-agent=true --wait --timeout 180s >/dev/null

# The operator's process on the node, from its container's id.
cid="$("$kubectl" get pods -n "$ns" -l app.kubernetes.io/component=operator \
  -o jsonpath='{.items[0].status.containerStatuses[0].containerID}')"
cid="${cid#containerd://}"
pid="$(ctr -a "$("$cluster" cri-socket)" -n k8s.io tasks ls | awk -v id="$cid" '$1 == id {print $2}')"
[[ -n "$pid" && -d "/proc/$pid" ]] || { echo "cluster-load: no process for the operator's container $cid" >&2; exit 1; }
apiserver_pid="$(cat "$(dirname "$kubeconfig")/pids/kube-apiserver.pid")"
etcd_pid="$(cat "$(dirname "$kubeconfig")/pids/etcd.pid")"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
hz="$(getconf CLK_TCK)"
audit="$(dirname "$kubeconfig")/log/audit.log"

# Sample once a second while the load tool runs.
"${CARGO_TARGET_DIR:-$root/target}/release/attachment-load" --nodes "$nodes" --specs "$specs" --period "$period" \
  --duration "$duration" --concurrency "${CONCURRENCY:-64}" >"$tmp/load.out" 2>"$tmp/load.err" &
load_pid=$!
t0="$(date +%s.%N)"
c0="$(cpu_ticks "$pid")" a0="$(cpu_ticks "$apiserver_pid")" e0="$(cpu_ticks "$etcd_pid")"
max_rss=0
while kill -0 "$load_pid" 2>/dev/null; do
  r="$(rss_kib "$pid")"
  ((r > max_rss)) && max_rss=$r
  sleep 1
done
wait "$load_pid" || { cat "$tmp/load.err" >&2; exit 1; }
t1="$(date +%s.%N)"
c1="$(cpu_ticks "$pid")" a1="$(cpu_ticks "$apiserver_pid")" e1="$(cpu_ticks "$etcd_pid")"
cat "$tmp/load.out"
python3 - "$audit" "$t0" "$t1" <<PY
import json, sys, datetime
audit, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
wall = t1 - t0
op = "system:serviceaccount:$ns:$release-operator"
n_op, n_all, by = 0, 0, {}
for line in open(audit):
    e = json.loads(line)
    if e.get("stage") != "ResponseComplete":
        continue
    ts = datetime.datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
    if not t0 <= ts <= t1:
        continue
    n_all += 1
    if e["user"]["username"] == op:
        n_op += 1
        k = (e["verb"] + " " + e.get("objectRef", {}).get("resource", "")
             + ("/" + e["objectRef"]["subresource"] if e.get("objectRef", {}).get("subresource") else ""))
        by[k] = by.get(k, 0) + 1
print(f"window {wall:.0f} s: operator CPU {($c1 - $c0) / $hz / wall:.3f} cores, RSS max {$max_rss / 1024:.0f} MiB; "
      f"kube-apiserver CPU {($a1 - $a0) / $hz / wall:.3f} cores, etcd CPU {($e1 - $e0) / $hz / wall:.3f} cores")
print(f"API requests (audit log): {n_all / wall:.1f}/s in all, {n_op / wall:.2f}/s by the operator: "
      + ", ".join(f"{k} {v / wall:.2f}/s" for k, v in sorted(by.items())))
PY
