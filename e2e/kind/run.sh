#!/usr/bin/env bash
# End-to-end test of gprobe on a real Kubernetes cluster, as a user runs it: one test for
# every cluster, reached through a kubeconfig.
#   - kind (the default; needs Docker and kind): creates a cluster, or uses $KIND_CLUSTER;
#   - any other cluster: KUBECONFIG=PATH LOAD='CMD' e2e/kind/run.sh, where CMD ARCHIVE
#     imports an OCI image archive into the nodes' container runtime. scripts/cluster.sh
#     (a one-node cluster of this machine) is run that way by e2e/cluster_test.sh.
# Steps (each asserts on what the cluster shows; the first failure stops the test):
#   1. images as OCI archives, without a container engine: the agent and operator
#      (scripts/images.sh, twice: tags e2e and e2e-upgrade), the http-client example, the
#      services of e2e/testdata/services, and the
#      receivers Jaeger v2 and Prometheus 3 (built from their Go modules); loaded with $LOAD;
#   2. the receivers (receivers.yaml); `helm install` of charts/gprobe with otlp.endpoint at
#      Jaeger's OTLP port; the operator Deployment and the agent DaemonSet Ready;
#   3. the http-client example as a Deployment (http-client.yaml); `kubectl apply -f
#      examples/http-client/probespec.yaml`: the ProbeSpec becomes Ready; its calls reach
#      Jaeger exactly (every URL the pod logged between the first and the last traced one,
#      once, failures with their error), with the pod's namespace, name, container and node
#      as resource attributes; `kubectl get probespecs` and `probeattachments` show them;
#   3b. two services and their client in one pod (services.yaml, e2e/testdata/services): each
#      request's spans form one tree across services front and back in Jaeger, joined to
#      the client's trace when it sent a traceparent (as e2e/tests/services.rs checks
#      locally); where the node's kernel forbids BPF to write the traceparent (lockdown),
#      the agent says so, and the back service's spans are exact roots of their own;
#   3c. `kubectl gprobe trace` (the plugin, built by the test): a user without the rights is
#      refused before anything is created (no spec, no calls), one missing only pods/proxy on
#      the agents too; with the chart's trace roles, `--for 20s --hist` prints exactly the
#      calls of the pod's log in its window and a histogram of them; its spec is gone after,
#      and so are its uprobes within 5 s; a trace of a symbol the binary lacks names the pod
#      with the reason; two pods of one node and a pod replacing one of them are all traced;
#      the agent serves its calls to no request without
#      the trace's token; a plugin killed with -9 leaves its spec until ttlSeconds are up,
#      then the operator deletes it;
#   4. a ProbeSpec naming a symbol the binary lacks: its reason in status and in an Event;
#   5. RBAC and admission, enforced by the API server, with a token bound to the agent's pod
#      (what the kubelet mounts): creating or patching another node's ProbeAttachment, reading
#      Secrets, writing ProbeSpecs are refused with 403; its own node's ProbeAttachment is not;
#   6. every query of the chart's Grafana dashboard, against Prometheus, returns data;
#   7. deleting the workload's pod drops it from the ProbeAttachment (its replacement is
#      attached); deleting the ProbeSpec removes its ProbeAttachment and every uprobe;
#   8. `helm upgrade` to another agent image rolls the DaemonSet and tracing resumes;
#   9. `helm uninstall`: no pod of gprobe remains and, where this machine runs the node's
#      kernel (scripts/cluster.sh, kind on Linux), no BPF program of gprobe.
# Everything it created is removed on exit (the kind cluster itself when it created it),
# unless KEEP=1. Tools: kubectl (or $KUBECTL), helm (or $HELM), python3, go, curl, bpftool
# (optional). See e2e/kind/README.md.
# Environment: KUBECONFIG, LOAD, KIND_CLUSTER, KEEP, HELM, KUBECTL, TIMEOUT (seconds, 180),
#   CRI_SOCKET (the nodes' CRI socket, when not containerd's default), HELM_EXTRA (more
#   helm arguments, split on spaces), BPF_LOCK (a file flock(1)ed from `helm install` to the
#   end: the images are built and the receivers started before it is taken).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
timeout="${TIMEOUT:-180}"
release=gprobe-e2e
system_ns=gprobe-system
otel_ns=gprobe-e2e-otel
app_ns=gprobe-e2e-app
probespec=http-client-urls
agent_repo=gprobe.local/gprobe-agent
operator_repo=gprobe.local/gprobe-operator

log() { printf '\n==> %s\n' "$*"; }
die() {
  echo "run.sh: $*" >&2
  exit 1
}

# --- the cluster and the tools ------------------------------------------------------------------
helm="${HELM:-}"
if [[ -z "$helm" ]]; then
  if [[ -x "$root/.cache/helm/helm/helm" ]]; then
    helm="$root/.cache/helm/helm/helm"
  elif command -v helm >/dev/null; then
    helm="$(command -v helm)"
  else
    die "helm is not installed (or set HELM=/path/to/helm; scripts/setup.sh --test installs one under .cache/)"
  fi
fi
kubectl="${KUBECTL:-kubectl}"
for tool in "$kubectl" python3 go curl; do
  command -v "$tool" >/dev/null || die "$tool is not installed (see e2e/kind/README.md)"
done
tmp="$(mktemp -d)"
created_cluster=false
installed_crds=false
if [[ -n "${KUBECONFIG:-}" ]]; then
  [[ -n "${LOAD:-}" ]] ||
    die "KUBECONFIG is set: set LOAD too, the command that imports an OCI archive into the nodes" \
      "(e.g. LOAD='scripts/cluster.sh load')"
  export KUBECONFIG
  k() { "$kubectl" "$@"; }
  h() { "$helm" "$@"; }
  load() { $LOAD "$@"; }
else
  for tool in docker kind; do
    command -v "$tool" >/dev/null ||
      die "$tool is not installed; without KUBECONFIG this test runs on kind (see e2e/kind/README.md)"
  done
  docker info >/dev/null 2>&1 || die "the Docker engine does not answer (docker info failed)"
  if [[ -n "${KIND_CLUSTER:-}" ]]; then
    cluster="$KIND_CLUSTER"
    grep -qx -- "$cluster" < <(kind get clusters) || die "KIND_CLUSTER=$cluster: kind has no such cluster"
  else
    cluster="gprobe-e2e-$$"
    created_cluster=true
  fi
  k() { "$kubectl" --context "kind-$cluster" "$@"; }
  h() { "$helm" --kube-context "kind-$cluster" "$@"; }
  load() { kind load image-archive --name "$cluster" "$@"; }
fi

diagnostics() {
  echo "---- diagnostics (the test failed) ----"
  k get nodes -o wide
  k get pods -A -o wide
  k get probespecs -A -o yaml
  k get probeattachments -A -o yaml
  k get events -A --sort-by=.lastTimestamp | tail -40
  echo "---- agent logs ----"
  k logs -n "$system_ns" -l app.kubernetes.io/component=agent --all-containers --tail=100 --prefix
  echo "---- operator logs ----"
  k logs -n "$system_ns" -l app.kubernetes.io/component=operator --all-containers --tail=60 --prefix
  echo "---- receivers logs ----"
  k logs -n "$otel_ns" deploy/receivers --all-containers --tail=40 --prefix
}

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  ((rc != 0)) && k version >/dev/null 2>&1 && diagnostics >&2
  if [[ -n "${KEEP:-}" ]]; then
    echo "KEEP is set: leaving the cluster as it is" >&2
  elif [[ "$created_cluster" == true ]]; then
    log "deleting kind cluster $cluster"
    kind delete cluster --name "$cluster"
  elif k version >/dev/null 2>&1; then
    log "removing what the test installed"
    k delete namespace "$app_ns" --ignore-not-found --wait=true --timeout=60s
    h status "$release" -n "$system_ns" >/dev/null 2>&1 && h uninstall "$release" -n "$system_ns" --wait --timeout 2m
    k delete namespace "$otel_ns" "$system_ns" --ignore-not-found --wait=true --timeout=60s
    if [[ "$installed_crds" == true ]]; then
      # Helm never deletes the CRDs it installed from crds/; the test installed them, so it does.
      k delete -f "$root/charts/gprobe/crds/crds.yaml" --ignore-not-found
    fi
  fi
  rm -rf "$tmp"
  if ((rc == 0)); then echo "cluster e2e: 1 passed, 0 failed"; else echo "cluster e2e: 0 passed, 1 failed" >&2; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ "$created_cluster" == true ]]; then
  log "creating kind cluster $cluster"
  kind create cluster --name "$cluster" --wait 180s
fi
k get nodes -o wide
if ! k get crd probespecs.gprobe.dev >/dev/null 2>&1; then installed_crds=true; fi
node="$(k get nodes -o jsonpath='{.items[0].metadata.name}')"

# until_ok WHAT CMD...: runs CMD every 2 s until it succeeds, for at most $timeout seconds.
until_ok() {
  local what="$1" deadline=$((SECONDS + timeout))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || die "$what: not seen in ${timeout}s"
    sleep 2
  done
}

# --- 1. images -----------------------------------------------------------------------------------
log "building the images (OCI archives, no container engine)"
"$root/scripts/images.sh" --tag e2e --out "$tmp/images" | tee "$tmp/images.txt"
"$root/scripts/images.sh" --tag e2e-upgrade --out "$tmp/images" --no-build | tee -a "$tmp/images.txt"
(cd "$root/examples/http-client" &&
  CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -o "$tmp/http-client" main.go)
# kubectl gprobe: on PATH, where kubectl finds its plugins.
(cd "$root" && cargo build --release --locked -p kubectl-gprobe --bin kubectl-gprobe)
mkdir -p "$tmp/bin"
cp "${CARGO_TARGET_DIR:-$root/target}/release/kubectl-gprobe" "$tmp/bin/"
export PATH="$tmp/bin:$PATH"
oci() { python3 "$root/scripts/oci-image.py" "$@" | tee -a "$tmp/images.txt"; }
oci --ref gprobe.local/http-client:e2e --out "$tmp/images/http-client.tar" \
  --file "$tmp/http-client:/app/http-client" --entrypoint /app/http-client
(cd "$root/e2e/testdata/services" &&
  CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -o "$tmp/services" main.go)
oci --ref gprobe.local/services:e2e --out "$tmp/images/services.tar" \
  --file "$tmp/services:/app/services" --entrypoint /app/services
jaeger="$("$root/scripts/cluster.sh" tool jaeger)"
prometheus="$("$root/scripts/cluster.sh" tool prometheus)"
oci --ref gprobe.local/jaeger:e2e --out "$tmp/images/jaeger.tar" --file "$jaeger:/bin/jaeger" \
  --dir /tmp --entrypoint /bin/jaeger
oci --ref gprobe.local/prometheus:e2e --out "$tmp/images/prometheus.tar" \
  --file "$prometheus:/bin/prometheus" --dir /tmp --entrypoint /bin/prometheus
log "loading them into the cluster"
while read -r archive _; do load "$archive"; done <"$tmp/images.txt"

# --- 2. receivers, helm install --------------------------------------------------------------------
log "starting the receivers (Jaeger v2, Prometheus 3)"
k apply -f "$here/receivers.yaml"
k rollout status -n "$otel_ns" deploy/receivers --timeout="${timeout}s"
# The agents reach Jaeger by the Service's address: not every cluster runs a DNS server.
otlp_ip="$(k get service -n "$otel_ns" receivers -o jsonpath='{.spec.clusterIP}')"
proxy() { # proxy PORT PATH: GET through the API server's proxy to the receivers' Service
  k get --raw "/api/v1/namespaces/$otel_ns/services/receivers:$1/proxy$2"
}

# From here on the agent loads BPF programs on the node: where this machine's kernel is the
# node's, tests that load BPF take turns through $BPF_LOCK (a flock file), held until exit.
if [[ -n "${BPF_LOCK:-}" ]]; then
  log "waiting for $BPF_LOCK"
  exec 9>"$BPF_LOCK"
  flock 9
fi

log "helm install"
cri_args=()
[[ -n "${CRI_SOCKET:-}" ]] && cri_args=(--set agent.criSocket.path="$CRI_SOCKET")
helm_values=(
  --set images.agent.repository="$agent_repo" --set images.agent.pullPolicy=Never
  --set images.operator.repository="$operator_repo" --set images.operator.tag=e2e
  --set images.operator.pullPolicy=Never
  --set otlp.endpoint="http://$otlp_ip:4317" --set otlp.protocol=grpc
  --set agent.metricsInterval=5s "${cri_args[@]}" ${HELM_EXTRA:+$HELM_EXTRA}
)
h install "$release" "$root/charts/gprobe" --namespace "$system_ns" --create-namespace \
  "${helm_values[@]}" --set images.agent.tag=e2e --wait --timeout "${timeout}s"
k rollout status -n "$system_ns" "daemonset/$release-agent" --timeout="${timeout}s"
k rollout status -n "$system_ns" "deployment/$release-operator" --timeout="${timeout}s"
k get pods -n "$system_ns" -o wide

# --- 3. the workload, kubectl apply, spans ---------------------------------------------------------
log "the http-client example as a Deployment"
k apply -f "$here/http-client.yaml"
k rollout status -n "$app_ns" deploy/http-client --timeout="${timeout}s"
app_pod() {
  k get pods -n "$app_ns" -l app=http-client --field-selector=status.phase=Running \
    -o jsonpath='{.items[0].metadata.name}'
}
pod="$(app_pod)"

log "kubectl apply -f examples/http-client/probespec.yaml"
k apply -n "$app_ns" -f "$root/examples/http-client/probespec.yaml"
k wait -n "$app_ns" "probespec/$probespec" --for=condition=Ready --timeout="${timeout}s"

# spans_exact POD MIN [SINCE_US]: Jaeger's spans of POD against its log.
spans_exact() {
  proxy query "/api/traces?service=http-client&limit=100000&lookback=2h" >"$tmp/traces.json" || return 1
  k logs -n "$app_ns" "$1" >"$tmp/app.log" || return 1
  python3 "$here/check_spans.py" "$tmp/traces.json" "$tmp/app.log" "$1" "$app_ns" "$node" "$2" "${3:-}"
  local rc=$?
  ((rc == 2)) && die "a span in Jaeger is wrong (above)"
  return "$rc"
}
log "waiting for the pod's calls in Jaeger"
until_ok "30 exact spans of pod $pod in Jaeger" spans_exact "$pod" 30

log "kubectl get probespecs, probeattachments"
k get -n "$app_ns" probespecs -o wide | tee "$tmp/specs.txt"
k get -n "$app_ns" probeattachments -o wide | tee "$tmp/attachments.txt"
read -r nodes attached < <(k get -n "$app_ns" probespec "$probespec" \
  -o jsonpath='{.status.nodes} {.status.probesAttached}{"\n"}')
[[ "$nodes" == 1 && "$attached" -ge 1 ]] ||
  die "the ProbeSpec's roll-up says nodes=$nodes probesAttached=$attached (want 1 node, >= 1 probe)"
grep -q "$probespec .*$node" "$tmp/attachments.txt" ||
  die "kubectl get probeattachments shows no attachment of $probespec on node $node"

# --- 3b. one trace across two services -----------------------------------------------------------
log "two services in one pod (e2e/kind/services.yaml): their traces in Jaeger, whole"
k apply -f "$here/services.yaml"
k rollout status -n "$app_ns" deploy/services --timeout="${timeout}s"
k wait -n "$app_ns" probespec/services --for=condition=Ready --timeout="${timeout}s"
services_pod="$(k get pods -n "$app_ns" -l app=services --field-selector=status.phase=Running \
  -o jsonpath='{.items[0].metadata.name}')"
# Where the kernel forbids BPF programs to write to a process's memory, the agent says so
# once per process, and the front span cannot travel with the requests.
propagation_mode() {
  if k logs -n "$system_ns" -l app.kubernetes.io/component=agent --tail=-1 |
    grep -q "carry no traceparent: "; then
    echo refused
  else
    echo written
  fi
}
# trees_exact MIN: Jaeger's traces of the services pod against its client's log.
trees_exact() {
  proxy query "/api/traces?service=front&limit=100000&lookback=2h" >"$tmp/front-traces.json" || return 1
  proxy query "/api/traces?service=back&limit=100000&lookback=2h" >"$tmp/back-traces.json" || return 1
  k logs -n "$app_ns" "$services_pod" -c client >"$tmp/client.log" || return 1
  python3 "$here/check_trees.py" "$tmp/front-traces.json,$tmp/back-traces.json" "$tmp/client.log" \
    "$services_pod" "$1" "$(propagation_mode)"
  local rc=$?
  ((rc == 2)) && die "a trace in Jaeger is wrong (above)"
  return "$rc"
}
until_ok "20 whole requests of pod $services_pod in Jaeger" trees_exact 20
log "propagation on this node: $(propagation_mode)"
k delete -n "$app_ns" probespec services
k delete -n "$app_ns" deploy/services --wait=false

# --- 3c. kubectl gprobe trace ------------------------------------------------------------------
gprobe_progs() { # the number of BPF programs of gprobe loaded in this machine's kernel
  bpftool -j prog show 2>/dev/null | python3 -c '
import json, sys
print(sum(1 for p in json.load(sys.stdin) if p.get("name", "").startswith("gprobe")))'
}
uprobes() { # the uprobe links in this machine's kernel: perf_event ones, and uprobe_multi
  # ones (link type 12, which bpftool before 7.3 shows as a number)
  bpftool -j link show 2>/dev/null | python3 -c '
import json, sys
print(sum(1 for l in json.load(sys.stdin)
          if (l.get("type") == "perf_event" and "uprobe" in json.dumps(l)) or l.get("type") in ("uprobe_multi", 12)))'
}
same_kernel=false
if [[ $EUID -eq 0 ]] && command -v bpftool >/dev/null &&
  [[ "$(k get node "$node" -o jsonpath='{.status.nodeInfo.kernelVersion}')" == "$(uname -r)" ]] &&
  [[ "$(gprobe_progs)" -gt 0 ]]; then
  same_kernel=true
fi
probe='net/http.(*Client).Get(url) -> err'
trace_specs() { k get -n "$app_ns" probespecs -l gprobe.dev/trace -o name; }
# refused AS WANT: `kubectl gprobe trace` as user AS fails, naming the right WANT, and prints
# no call; no spec is left.
refused() {
  local rc=0
  k gprobe trace deploy/http-client "$probe" -n "$app_ns" --gprobe-namespace "$system_ns" \
    --for 5s --as "$1" >"$tmp/refused.out" 2>"$tmp/refused.err" || rc=$?
  sed 's/^/  /' "$tmp/refused.err"
  ((rc != 0)) || die "kubectl gprobe trace as $1: exit status 0, expected a refusal"
  grep -q "refused: $1 may not $2" "$tmp/refused.err" || die "as $1: no refusal naming '$2'"
  [[ ! -s "$tmp/refused.out" ]] || die "as $1: something was printed on stdout"
  [[ -z "$(trace_specs)" ]] || die "as $1: a trace's ProbeSpec exists: $(trace_specs)"
}
log "kubectl gprobe trace: refused without the rights"
refused e2e-nobody "create probespecs.gprobe.dev in namespace $app_ns"
# The chart's roles, one at a time: the tracer role in the app's namespace only...
k create rolebinding -n "$app_ns" e2e-tracer --clusterrole "$release-tracer" --user e2e-tracer
refused e2e-tracer "get pods/proxy in namespace $system_ns"
# ...then the agents' pod proxy too: a trace goes through.
k create rolebinding -n "$system_ns" e2e-tracer --role "$release-trace-stream" --user e2e-tracer

log "kubectl gprobe trace deploy/http-client '$probe' --for 20s --hist (as e2e-tracer)"
# The uprobes before it: those of http-client-urls, once step 3b's pod and spec are gone
# and the count has settled (the agent detaches on threads of its own).
k wait --for=delete -n "$app_ns" pod -l app=services --timeout="${timeout}s"
settled_uprobes() { # the count once unchanged for 2 s (at most $timeout s)
  local last="" n same=0 deadline=$((SECONDS + timeout))
  while ((same < 10)); do
    ((SECONDS < deadline)) || die "the uprobe link count did not settle in ${timeout}s"
    n="$(uprobes)"
    if [[ "$n" == "$last" ]]; then same=$((same + 1)); else same=0 last="$n"; fi
    sleep 0.2
  done
  echo "$last"
}
$same_kernel && uprobes_before="$(settled_uprobes)"
trace_start_us=$(($(date +%s%N) / 1000))
k gprobe trace deploy/http-client "$probe" -n "$app_ns" --gprobe-namespace "$system_ns" \
  --for 20s --hist --as e2e-tracer >"$tmp/trace.jsonl" 2>"$tmp/trace.err" &
trace_pid=$!
# Its own uprobes are there while it runs (counted once its first call is out).
uprobes_during=n/a
until [[ -s "$tmp/trace.jsonl" ]] || ! kill -0 "$trace_pid" 2>/dev/null; do sleep 0.1; done
$same_kernel && uprobes_during="$(uprobes)"
wait "$trace_pid" || { cat "$tmp/trace.err"; die "kubectl gprobe trace failed"; }
trace_end_us=$(($(date +%s%N) / 1000))
if $same_kernel; then
  # From the plugin's exit: the uprobe link count every 0.2 s until it is back to before
  # (for at most 30 s, to say how long it took if over 5 s).
  ended_ms=$(($(date +%s%N) / 1000000))
  timeline=""
  while :; do
    n="$(uprobes)" at=$(($(date +%s%N) / 1000000 - ended_ms))
    timeline+="${at}ms:$n "
    [[ "$n" == "$uprobes_before" ]] && break
    ((at < 30000)) || break
    sleep 0.2
  done
  echo "uprobe links before the trace $uprobes_before, during it $uprobes_during; after it: $timeline"
  ((uprobes_during > uprobes_before)) ||
    die "uprobe links during the trace: $uprobes_during, before it: $uprobes_before (not counted?)"
  [[ "$n" == "$uprobes_before" ]] || die "the trace's uprobe links were not gone 30 s after its end"
  ((at <= 5000)) || die "the trace's uprobe links were gone only $at ms after its end (over 5 s)"
fi
cat "$tmp/trace.err"
k logs -n "$app_ns" "$pod" >"$tmp/app.log"
python3 "$here/check_trace.py" "$tmp/trace.jsonl" "$tmp/app.log" "$pod" 60 "$tmp/trace.err" ||
  die "kubectl gprobe trace did not print exactly the pod's calls (above)"
[[ -z "$(trace_specs)" ]] || die "the trace's ProbeSpec is still there: $(trace_specs)"
echo "trace window: ${trace_start_us}..${trace_end_us} us (cluster_test.sh counts its API requests)"
echo "$trace_start_us $trace_end_us" >"${TRACE_WINDOW_FILE:-/dev/null}"

log "kubectl gprobe trace of a symbol the binary lacks: the pod is named with the reason"
k gprobe trace deploy/http-client main.noSuchFunction -n "$app_ns" --gprobe-namespace "$system_ns" \
  --for 4s >"$tmp/nosym.out" 2>"$tmp/nosym.err" || { cat "$tmp/nosym.err"; die "the trace failed"; }
cat "$tmp/nosym.err"
grep -q "not attached: pod $pod (node $node): main.noSuchFunction: symbol main.noSuchFunction not found" \
  "$tmp/nosym.err" || die "the trace of main.noSuchFunction did not name pod $pod with the reason"
[[ ! -s "$tmp/nosym.out" ]] || die "the trace of main.noSuchFunction printed calls"

log "kubectl gprobe trace killed with -9: the operator deletes its spec when ttlSeconds are up"
plugin="$tmp/bin/kubectl-gprobe"
"$plugin" trace deploy/http-client "$probe" -n "$app_ns" --gprobe-namespace "$system_ns" \
  --for 10s --expiry-margin 5s >"$tmp/killed.jsonl" 2>"$tmp/killed.err" &
plugin_pid=$!
# Killed at its first call, well within its 10 s.
started_ms=$(($(date +%s%N) / 1000000))
until [[ -s "$tmp/killed.jsonl" ]]; do
  (($(date +%s%N) / 1000000 - started_ms < 8000)) || die "no call of the trace to be killed within 8 s"
  sleep 0.1
done
first_ms=$(($(date +%s%N) / 1000000 - started_ms))
# (The shell's own "Killed" notice is not shown: the kill is the test's.)
{ kill -9 "$plugin_pid" && wait "$plugin_pid"; } 2>/dev/null || true
echo "first call of this trace on stdout $first_ms ms after its start (polled every 0.1 s)"
spec_name="$(trace_specs)"
[[ -n "$spec_name" ]] || die "no ProbeSpec left by the killed trace"
# Nobody but the plugin reads its calls: the agent answers a request without its token 403.
agent_pod="$(k get pods -n "$system_ns" -l app.kubernetes.io/component=agent -o jsonpath='{.items[0].metadata.name}')"
if k get --raw "/api/v1/namespaces/$system_ns/pods/$agent_pod:9090/proxy/traces/$app_ns/${spec_name#*/}" \
  >"$tmp/stolen.out" 2>"$tmp/stolen.err"; then
  die "the agent served trace $spec_name without its token"
fi
grep -q "does not hold the token" "$tmp/stolen.err" || { cat "$tmp/stolen.err"; die "no token refusal"; }
echo "  without the token: $(head -c 200 "$tmp/stolen.err")"
read -r created ttl < <(k get -n "$app_ns" "$spec_name" \
  -o jsonpath='{.metadata.creationTimestamp} {.spec.ttlSeconds}{"\n"}')
expires=$(($(date -d "$created" +%s) + ttl))
((ttl == 15)) || die "$spec_name: ttlSeconds $ttl, expected 15 (--for 10s + --expiry-margin 5s)"
[[ -n "$(trace_specs)" ]] || die "$spec_name was deleted before its expiry (the plugin was killed)"
spec_gone() { [[ -z "$(trace_specs)" ]]; }
until_ok "the operator deleting $spec_name after its expiry" spec_gone
gone_at=$(date +%s)
((gone_at >= expires)) || die "$spec_name was gone at $gone_at, before its expiry at $expires"
echo "$spec_name: expired at $expires, gone at $gone_at ($((gone_at - expires)) s after)"

log "kubectl gprobe trace follows several pods of one node, and a pod that replaces another"
k scale -n "$app_ns" deploy/http-client --replicas=2
k rollout status -n "$app_ns" deploy/http-client --timeout="${timeout}s"
other="$(k get pods -n "$app_ns" -l app=http-client --field-selector=status.phase=Running \
  -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | grep -vx "$pod" | head -n 1)"
[[ -n "$other" ]] || die "no second pod of http-client"
k gprobe trace deploy/http-client "$probe" -n "$app_ns" --gprobe-namespace "$system_ns" \
  --for 15s >"$tmp/pods.jsonl" 2>"$tmp/pods.err" &
pods_pid=$!
traced_pods() { python3 -c '
import json, sys
print("\n".join(sorted({json.loads(l)["resource"]["k8s.pod.name"] for l in open(sys.argv[1]) if l.strip()})))' \
  "$tmp/pods.jsonl"; }
both_traced() { traced_pods | grep -qx "$pod" && traced_pods | grep -qx "$other"; }
until_ok "calls of both pods $pod and $other" both_traced
k delete pod -n "$app_ns" "$other" --wait=false
replacement_traced() { [[ "$(traced_pods | grep -vx "$pod" | grep -vcx "$other")" -ge 1 ]]; }
until_ok "calls of the pod replacing $other" replacement_traced
wait "$pods_pid" || { cat "$tmp/pods.err"; die "the trace of two pods failed"; }
sed -n '/calls delivered/,$p' "$tmp/pods.err"
echo "pods traced: $(traced_pods | tr '\n' ' ')"
summary_row() { grep -Eq "^$1 +[^ ]+ +[1-9][0-9]*  $2\$" "$tmp/pods.err"; }
summary_row "$other" "attached, then gone" || die "the summary does not say that pod $other is gone"
summary_row "$pod" "attached" || die "the summary does not say that pod $pod is attached"
k scale -n "$app_ns" deploy/http-client --replicas=1
one_pod() { [[ "$(k get pods -n "$app_ns" -l app=http-client -o name | wc -l)" == 1 ]]; }
until_ok "one pod of http-client again" one_pod
k rollout status -n "$app_ns" deploy/http-client --timeout="${timeout}s"
pod="$(app_pod)"

k delete rolebinding -n "$app_ns" e2e-tracer
k delete rolebinding -n "$system_ns" e2e-tracer

# --- 4. an unknown symbol ----------------------------------------------------------------------------
log "a ProbeSpec naming a symbol the binary lacks"
k apply -n "$app_ns" -f - <<'EOF'
apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata:
  name: no-such-symbol
spec:
  selector:
    executable: "**/http-client"
  probes:
    - symbol: main.noSuchFunction
EOF
spec_error() {
  k get -n "$app_ns" probespec no-such-symbol -o jsonpath='{.status.errors}' | grep -q 'main.noSuchFunction'
}
until_ok "the reason of no-such-symbol in its status" spec_error
k get -n "$app_ns" probespec no-such-symbol -o jsonpath='{.status.errors}{"\n"}'
spec_event() {
  k get events -n "$app_ns" --field-selector involvedObject.kind=ProbeSpec,involvedObject.name=no-such-symbol \
    -o jsonpath='{range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}' >"$tmp/events.txt" &&
    grep -q 'main.noSuchFunction' "$tmp/events.txt"
}
until_ok "an Event about no-such-symbol's symbol" spec_event
cat "$tmp/events.txt"
k delete -n "$app_ns" probespec no-such-symbol

# --- 5. RBAC and admission as the agent ---------------------------------------------------------------
log "RBAC and admission, with the agent pod's own kind of token"
agent_pod="$(k get pods -n "$system_ns" -l app.kubernetes.io/component=agent -o jsonpath='{.items[0].metadata.name}')"
# A token bound to the agent's pod: what the kubelet mounts into it, node claim included.
token="$(k create token "$release-agent" -n "$system_ns" --bound-object-kind Pod --bound-object-name "$agent_pod" \
  --duration 10m)"
server="$(k config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')"
k config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$tmp/ca.crt"
[[ -s "$tmp/ca.crt" ]] ||
  cp "$(k config view --minify -o jsonpath='{.clusters[0].cluster.certificate-authority}')" "$tmp/ca.crt"
as_agent() { # as_agent METHOD PATH [BODY] [CONTENT-TYPE]: prints the HTTP status
  curl -sS -o "$tmp/answer.json" -w '%{http_code}' --cacert "$tmp/ca.crt" -H "Authorization: Bearer $token" \
    -X "$1" ${3:+-H "Content-Type: ${4:-application/json}"} ${3:+--data-binary "$3"} "$server$2"
}
attachment_json() { # attachment_json NAME NODE
  printf '{"apiVersion":"gprobe.dev/v1alpha1","kind":"ProbeAttachment",'
  printf '"metadata":{"name":"%s","namespace":"%s"},' "$1" "$app_ns"
  printf '"spec":{"probeSpec":"%s","nodeName":"%s"}}' "$probespec" "$2"
}
pa="/apis/gprobe.dev/v1alpha1/namespaces/$app_ns/probeattachments"
# Another node's ProbeAttachment, made by the admin, that the agent will try to change.
attachment_json rbac-other-node other-node | k create -f - >/dev/null
expect() { # expect WANT WHAT METHOD PATH [BODY] [CONTENT-TYPE]
  local want="$1" what="$2" got
  shift 2
  got="$(as_agent "$@")"
  printf '  %-58s HTTP %s %s\n' "$what" "$got" "$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(d.get("reason", ""), "-", d.get("message", "")[:150])' "$tmp/answer.json" 2>/dev/null)"
  [[ "$got" == "$want" ]] || die "$what: HTTP $got, expected $want"
}
expect 403 "create a ProbeAttachment of node other-node" POST "$pa" "$(attachment_json rbac-forged other-node)"
# (spec.nodeName itself is immutable: the CRD's rule would answer 422 before admission.)
expect 403 "patch node other-node's ProbeAttachment" PATCH "$pa/rbac-other-node" \
  '{"metadata":{"labels":{"forged":"yes"}}}' application/merge-patch+json
expect 403 "patch node other-node's ProbeAttachment status" PATCH "$pa/rbac-other-node/status" \
  '{"status":{"processesMatched":7}}' application/merge-patch+json
expect 403 "list Secrets in $system_ns" GET "/api/v1/namespaces/$system_ns/secrets"
expect 403 "get a Secret in kube-system" GET "/api/v1/namespaces/kube-system/secrets/anything"
forged_spec='{"apiVersion":"gprobe.dev/v1alpha1","kind":"ProbeSpec","metadata":{"name":"forged"},'
forged_spec+='"spec":{"selector":{"executable":"/x"},"probes":[{"symbol":"main.main"}]}}'
expect 403 "create a ProbeSpec" POST "/apis/gprobe.dev/v1alpha1/namespaces/$app_ns/probespecs" "$forged_spec"
expect 403 "patch a ProbeSpec" PATCH "/apis/gprobe.dev/v1alpha1/namespaces/$app_ns/probespecs/$probespec" \
  '{"spec":{"probes":[{"symbol":"main.main"}]}}' application/merge-patch+json
expect 403 "delete a ProbeSpec" DELETE "/apis/gprobe.dev/v1alpha1/namespaces/$app_ns/probespecs/$probespec"
expect 201 "create a ProbeAttachment of its own node ($node)" POST "$pa" "$(attachment_json rbac-own-node "$node")"
k delete -n "$app_ns" probeattachment rbac-other-node rbac-own-node >/dev/null

# --- 6. the dashboard's queries against Prometheus ------------------------------------------------------
log "the Grafana dashboard's queries against Prometheus"
python3 "$here/dashboard_queries.py" "$root/charts/gprobe/dashboards/gprobe.json" "$tmp/queries.jsonl"
# query_has_data JSON_LINE: 0 when the query (or label_values(METRIC, LABEL)) returns data.
query_has_data() {
  proxy prometheus "$(python3 "$here/promql_url.py" "$1")" >"$tmp/prom.json" 2>"$tmp/prom.err" || return 1
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))["data"]
r = d["result"] if isinstance(d, dict) else d
sys.exit(0 if r else 1)' "$tmp/prom.json"
}
# The error panel needs failed calls with their err as a metric label, and latency panels need
# a window of calls: this spec labels http-client's calls by err (it makes every 5th GET fail).
k apply -n "$app_ns" -f - <<'EOF'
apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata:
  name: http-client-errors
spec:
  selector:
    executable: "**/http-client"
  probes:
    - symbol: "net/http.(*Client).Get"
      signature: "func(c *Client, url string) (resp *Response, err error)"
      capture: [err]
      latency: true
      metrics: {labels: [err]}
EOF
k wait -n "$app_ns" probespec/http-client-errors --for=condition=Ready --timeout="${timeout}s"
while IFS= read -r line; do
  what="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["what"])' "$line")"
  until_ok "data for the dashboard's $what" query_has_data "$line"
  printf '  %-70s %s series\n' "$what" "$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))["data"]
print(len(d["result"] if isinstance(d, dict) else d))' "$tmp/prom.json")"
done <"$tmp/queries.jsonl"
k delete -n "$app_ns" probespec http-client-errors

# --- 7. pod and ProbeSpec deletion ------------------------------------------------------------------------
attachment_pods() {
  k get -n "$app_ns" probeattachments \
    -o jsonpath='{range .items[*]}{range .status.containers[*]}{.pod}{"\n"}{end}{end}'
}
log "deleting the workload's pod $pod"
k delete -n "$app_ns" pod "$pod" --wait=true
old_gone() { ! attachment_pods | grep -qx "$pod"; }
until_ok "pod $pod leaving the ProbeAttachment" old_gone
k rollout status -n "$app_ns" deploy/http-client --timeout="${timeout}s"
pod="$(app_pod)"
new_in() { attachment_pods | grep -qx "$pod"; }
until_ok "the new pod $pod in the ProbeAttachment" new_in
echo "the ProbeAttachment lists $(attachment_pods | tr '\n' ' ')(not the deleted pod)"

log "deleting the ProbeSpec"
k delete -n "$app_ns" probespec "$probespec" --wait=true
no_attachments() { [[ -z "$(k get -n "$app_ns" probeattachments -o name)" ]]; }
until_ok "the ProbeAttachments of the deleted ProbeSpec gone" no_attachments
if $same_kernel; then
  # The agent keeps its exec/exit programs; its uprobes (perf_event links) go with the spec.
  no_uprobes() { [[ "$(uprobes)" == 0 ]]; }
  until_ok "no uprobe link left after the ProbeSpec's deletion" no_uprobes
  echo "uprobe links in the kernel: $(uprobes)"
fi

# --- 8. helm upgrade ----------------------------------------------------------------------------------------
log "helm upgrade to agent image $agent_repo:e2e-upgrade"
old_agent="$(k get pods -n "$system_ns" -l app.kubernetes.io/component=agent -o jsonpath='{.items[0].metadata.uid}')"
h upgrade "$release" "$root/charts/gprobe" --namespace "$system_ns" "${helm_values[@]}" \
  --set images.agent.tag=e2e-upgrade --wait --timeout "${timeout}s"
k rollout status -n "$system_ns" "daemonset/$release-agent" --timeout="${timeout}s"
read -r new_agent image < <(k get pods -n "$system_ns" -l app.kubernetes.io/component=agent \
  -o jsonpath='{.items[0].metadata.uid} {.items[0].spec.containers[0].image}{"\n"}')
[[ "$new_agent" != "$old_agent" && "$image" == "$agent_repo:e2e-upgrade" ]] ||
  die "the DaemonSet did not roll: pod $new_agent runs $image"
k apply -n "$app_ns" -f "$root/examples/http-client/probespec.yaml"
k wait -n "$app_ns" "probespec/$probespec" --for=condition=Ready --timeout="${timeout}s"
since_us=$(($(date +%s) * 1000000))
until_ok "tracing after the upgrade: 10 exact spans of pod $pod" spans_exact "$pod" 10 "$since_us"

# --- 9. helm uninstall --------------------------------------------------------------------------------------
log "helm uninstall"
k delete -n "$app_ns" probespec "$probespec" --wait=true
h uninstall "$release" -n "$system_ns" --wait --timeout "${timeout}s"
no_pods() { [[ -z "$(k get pods -n "$system_ns" -o name)" ]]; }
until_ok "no pod of gprobe" no_pods
if $same_kernel; then
  no_progs() { [[ "$(gprobe_progs)" == 0 ]]; }
  until_ok "no BPF program of gprobe in the kernel" no_progs
  echo "BPF programs of gprobe in the kernel: $(gprobe_progs); uprobe links: $(uprobes)"
else
  echo "(the node's kernel is not this machine's: BPF state not checked)"
fi

log "cluster e2e passed"
