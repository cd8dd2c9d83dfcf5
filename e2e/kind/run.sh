#!/usr/bin/env bash
# End-to-end test of gprobe on a real Kubernetes cluster (kind):
#   1. creates a kind cluster (or uses the existing one named by $KIND_CLUSTER);
#   2. builds the agent, operator and http-client images and loads them into kind;
#   3. installs an OpenTelemetry Collector (e2e/kind/collector.yaml);
#   4. installs the chart (charts/gprobe) with otlp.endpoint pointing at the collector;
#   5. runs the http-client example as a pod and applies charts/gprobe/examples/probespec.yaml;
#   6. waits for the ProbeSpec's Ready condition, then asserts that spans named
#      net/http.(*Client).Get, with the fetched URL in gprobe.args.url and the pod's
#      k8s.pod.name, and the gprobe.calls metric reach the collector;
#   7. impersonating the agent's ServiceAccount, checks the chart's admission policy: a
#      ProbeAttachment of another node, or one written without a node claim, is denied; one
#      of the agent's own node is admitted.
# Everything it created is removed on exit (the cluster itself when it created it), unless
# KEEP=1. Needs: an x86-64 Linux Docker engine whose kernel has BTF (/sys/kernel/btf/vmlinux),
# kind, kubectl, helm (or $HELM) and python3. See e2e/kind/README.md.
# Usage: e2e/kind/run.sh       Environment: KIND_CLUSTER, KEEP, HELM, TIMEOUT (seconds, 180).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
timeout="${TIMEOUT:-180}"
tag=e2e
agent_image="gprobe-agent:$tag"
operator_image="gprobe-operator:$tag"
app_image="gprobe.local/http-client:$tag"
release=gprobe-e2e
system_ns=gprobe-system
otel_ns=gprobe-e2e-otel
app_ns=gprobe-e2e-app
probespec=http-client-urls
span_name='net/http.(*Client).Get'

log() { printf '\n==> %s\n' "$*"; }
die() {
  echo "run.sh: $*" >&2
  exit 1
}

# --- prerequisites -----------------------------------------------------------------------------
for tool in docker kind kubectl python3; do
  command -v "$tool" >/dev/null || die "$tool is not installed; this test needs docker, kind, kubectl, helm and python3 (see e2e/kind/README.md)"
done
helm="${HELM:-}"
if [[ -z "$helm" ]]; then
  if command -v helm >/dev/null; then
    helm="$(command -v helm)"
  elif [[ -x "$root/.cache/helm/helm/helm" ]]; then
    helm="$root/.cache/helm/helm/helm"
  else
    die "helm is not installed (or set HELM=/path/to/helm; scripts/setup.sh --test installs one under .cache/)"
  fi
fi
docker info >/dev/null 2>&1 || die "the Docker engine does not answer (docker info failed)"
arch="$(docker info --format '{{.Architecture}}')"
[[ "$arch" == x86_64 || "$arch" == amd64 ]] ||
  die "the Docker engine is $arch; gprobe's BPF programs and the chart's agent nodeSelector are x86-64 only"
export DOCKER_BUILDKIT=1

# --- cluster -----------------------------------------------------------------------------------
created_cluster=false
installed_crds=false
tmp="$(mktemp -d)"
if [[ -n "${KIND_CLUSTER:-}" ]]; then
  cluster="$KIND_CLUSTER"
  grep -qx -- "$cluster" < <(kind get clusters) || die "KIND_CLUSTER=$cluster: kind has no such cluster"
else
  cluster="gprobe-e2e-$$"
fi
ctx="kind-$cluster"
k() { kubectl --context "$ctx" "$@"; }

diagnostics() {
  echo "---- diagnostics (the test failed) ----"
  k get nodes -o wide
  k get pods -A -o wide
  k get probespecs -A -o yaml
  k get probeattachments -A -o yaml
  k get events -n "$app_ns" --sort-by=.lastTimestamp
  k get events -n "$system_ns" --sort-by=.lastTimestamp
  echo "---- agent logs ----"
  k logs -n "$system_ns" -l app.kubernetes.io/component=agent --all-containers --tail=200 --prefix
  echo "---- operator logs ----"
  k logs -n "$system_ns" -l app.kubernetes.io/component=operator --all-containers --tail=200 --prefix
  echo "---- collector logs ----"
  k logs -n "$otel_ns" deploy/otel-collector -c collector --tail=100
  echo "---- http-client logs ----"
  k logs -n "$app_ns" http-client --tail=20
}

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if ((rc != 0)) && kubectl config get-contexts "$ctx" >/dev/null 2>&1; then
    diagnostics >&2
  fi
  if [[ -n "${KEEP:-}" ]]; then
    echo "KEEP is set: leaving cluster $cluster (context $ctx) as it is" >&2
  elif [[ "$created_cluster" == true ]]; then
    log "deleting kind cluster $cluster"
    kind delete cluster --name "$cluster"
  elif kubectl config get-contexts "$ctx" >/dev/null 2>&1; then
    log "removing what the test installed in $cluster"
    k delete namespace "$app_ns" --ignore-not-found --wait=true --timeout=60s
    "$helm" --kube-context "$ctx" uninstall "$release" -n "$system_ns" --wait --timeout 2m
    k delete namespace "$otel_ns" "$system_ns" --ignore-not-found --wait=true --timeout=60s
    if [[ "$installed_crds" == true ]]; then
      # Helm never deletes the CRDs it installed from crds/; the test installed them, so it does.
      k delete -f "$root/charts/gprobe/crds/crds.yaml" --ignore-not-found
    fi
  fi
  rm -rf "$tmp"
  if ((rc == 0)); then echo "kind e2e: 1 passed, 0 failed"; else echo "kind e2e: 0 passed, 1 failed" >&2; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -z "${KIND_CLUSTER:-}" ]]; then
  log "creating kind cluster $cluster"
  created_cluster=true
  kind create cluster --name "$cluster" --wait 180s
fi
k get nodes -o wide
if ! k get crd probespecs.gprobe.dev >/dev/null 2>&1; then installed_crds=true; fi

# --- images ------------------------------------------------------------------------------------
log "building images"
docker build -f "$root/docker/agent.Dockerfile" -t "$agent_image" "$root"
docker build -f "$root/docker/operator.Dockerfile" -t "$operator_image" "$root"
docker build -f "$here/http-client.Dockerfile" -t "$app_image" "$root"
log "loading images into kind"
kind load docker-image --name "$cluster" "$agent_image" "$operator_image" "$app_image"

# --- OpenTelemetry Collector -------------------------------------------------------------------
log "installing the OpenTelemetry Collector"
k apply -f "$here/collector.yaml"
k rollout status -n "$otel_ns" deploy/otel-collector --timeout="${timeout}s"

# --- gprobe ------------------------------------------------------------------------------------
log "installing the gprobe chart"
"$helm" --kube-context "$ctx" install "$release" "$root/charts/gprobe" \
  --namespace "$system_ns" --create-namespace \
  --set images.agent.repository="${agent_image%:*}" --set images.agent.tag="$tag" \
  --set images.agent.pullPolicy=Never \
  --set images.operator.repository="${operator_image%:*}" --set images.operator.tag="$tag" \
  --set images.operator.pullPolicy=Never \
  --set otlp.endpoint="http://otel-collector.$otel_ns.svc.cluster.local:4317" \
  --set otlp.protocol=grpc \
  --set agent.metricsInterval=5s \
  --set agent.logLevel=debug --set operator.logLevel=debug
k rollout status -n "$system_ns" "daemonset/$release-agent" --timeout="${timeout}s"
k rollout status -n "$system_ns" "deployment/$release-operator" --timeout="${timeout}s"

# --- the traced workload -----------------------------------------------------------------------
log "starting the http-client pod"
k apply -f "$here/http-client.yaml"
k wait -n "$app_ns" pod/http-client --for=condition=Ready --timeout="${timeout}s"

log "applying the example ProbeSpec"
k apply -n "$app_ns" -f "$root/charts/gprobe/examples/probespec.yaml"
# The operator sets the Ready condition once an agent attached the probe and none failed.
# (--for=condition reads .status.conditions like --for=jsonpath='{.status.conditions[?(@.type=="Ready")].status}'=True,
# and also waits for the condition's observedGeneration to catch up.)
k wait -n "$app_ns" "probespec/$probespec" --for=condition=Ready --timeout="${timeout}s"
k get -n "$app_ns" probespecs,probeattachments -o wide
[[ -n "$(k get probeattachments -n "$app_ns" -o name)" ]] || die "the ProbeSpec is Ready but no ProbeAttachment exists"

# --- the agent's own-node admission policy -------------------------------------------------------
# The agent wrote its ProbeAttachment above (the policy admitted its own node). Now, as the
# agent's ServiceAccount with the node claim its bound token would carry (kubectl 1.35+
# impersonates user extras), try another node's, one without a claim, and its own.
check_own_node_policy() {
  local node out claim
  log "checking that an agent may write only its own node's ProbeAttachments"
  node="$(k get nodes -o jsonpath='{.items[0].metadata.name}')"
  attachment() { # attachment NODE: a ProbeAttachment on $probespec, as the agent of NODE writes it
    cat <<YAML
apiVersion: gprobe.dev/v1alpha1
kind: ProbeAttachment
metadata:
  name: policy-check-$1
  namespace: $app_ns
spec:
  probeSpec: $probespec
  nodeName: $1
YAML
  }
  as_agent() { k --as="system:serviceaccount:$system_ns:$release-agent" "$@"; }
  claim="authentication.kubernetes.io/node-name=$node"
  if out="$(attachment other-node | as_agent --as-user-extra="$claim" create -f - 2>&1)"; then
    die "the agent of node $node created a ProbeAttachment of node other-node"
  fi
  grep -qF "may write only its own node's ProbeAttachments" <<<"$out" || die "unexpected denial: $out"
  if out="$(attachment "$node" | as_agent create -f - 2>&1)"; then
    die "a request of the agent without a node claim created a ProbeAttachment"
  fi
  grep -qF "names no node" <<<"$out" || die "unexpected denial: $out"
  attachment "$node" | as_agent --as-user-extra="$claim" create -f - ||
    die "the agent of node $node could not create a ProbeAttachment of its own node"
  k delete -n "$app_ns" probeattachment "policy-check-$node"
}
if kubectl options 2>/dev/null | grep -q -- '--as-user-extra'; then
  check_own_node_policy
else
  log "skipping the admission policy check: this kubectl has no --as-user-extra (kubectl 1.35+)"
fi

# --- what reached the collector ----------------------------------------------------------------
# spans.py FILE: exits 0 when FILE (OTLP JSON lines from the file exporter) holds a span named
# $span_name with gprobe.args.url and k8s.pod.name=http-client (resource or span attribute).
cat >"$tmp/spans.py" <<'EOF'
import json, sys
path, span_name, pod, namespace = sys.argv[1:5]

def attrs(kvs):
    out = {}
    for kv in kvs or []:
        v = kv.get("value", {})
        out[kv["key"]] = next(iter(v.values()), None) if v else None
    return out

found, other = [], 0
for line in open(path):
    line = line.strip()
    if not line:
        continue
    for rs in json.loads(line).get("resourceSpans", []):
        res = attrs(rs.get("resource", {}).get("attributes"))
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                if span.get("name") != span_name:
                    other += 1
                    continue
                a = {**res, **attrs(span.get("attributes"))}
                url = a.get("gprobe.args.url") or ""
                if a.get("k8s.pod.name") == pod and url.startswith("http://127.0.0.1:") and "/item/" in url:
                    dur = int(span.get("endTimeUnixNano", 0)) - int(span.get("startTimeUnixNano", 0))
                    found.append((url, dur, a.get("k8s.namespace.name")))
if not found:
    print(f"no {span_name} span with gprobe.args.url and k8s.pod.name={pod} yet ({other} other spans)")
    sys.exit(1)
url, dur, ns = found[-1]
print(f"{len(found)} {span_name} spans from pod {pod}; last: url={url} duration={dur}ns namespace={ns}")
if ns not in (None, namespace):
    sys.exit(f"k8s.namespace.name is {ns}, not {namespace}")
if not any(d > 0 for _, d, _ in found):
    sys.exit("no span has a duration, though the probe has latency: true")
EOF
cat >"$tmp/metrics.py" <<'EOF'
import json, sys
names = set()
for line in open(sys.argv[1]):
    if line.strip():
        for rm in json.loads(line).get("resourceMetrics", []):
            for sm in rm.get("scopeMetrics", []):
                names.update(m["name"] for m in sm.get("metrics", []))
print("metrics:", ", ".join(sorted(names)) or "none")
sys.exit(0 if "gprobe.calls" in names else 1)
EOF

log "waiting for spans at the collector"
collector_cat() { k exec -n "$otel_ns" deploy/otel-collector -c reader -- cat "$1" 2>/dev/null || true; }
deadline=$((SECONDS + timeout))
until collector_cat /data/traces.jsonl >"$tmp/traces.jsonl" &&
  python3 "$tmp/spans.py" "$tmp/traces.jsonl" "$span_name" http-client "$app_ns"; do
  ((SECONDS < deadline)) || die "no $span_name span from pod http-client reached the collector in ${timeout}s"
  sleep 5
done
log "waiting for the gprobe.calls metric at the collector"
deadline=$((SECONDS + timeout))
until collector_cat /data/metrics.jsonl >"$tmp/metrics.jsonl" && python3 "$tmp/metrics.py" "$tmp/metrics.jsonl"; do
  ((SECONDS < deadline)) || die "the gprobe.calls metric did not reach the collector in ${timeout}s"
  sleep 5
done
# The debug exporter's log shows the same spans in readable form.
k logs -n "$otel_ns" deploy/otel-collector -c collector --tail=400 | grep -F -m 3 -- "$span_name" || true

log "kind e2e passed"
