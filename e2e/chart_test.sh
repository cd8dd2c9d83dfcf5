#!/usr/bin/env bash
# Offline checks of the Helm chart charts/gprobe (no cluster needed):
#   - helm lint --strict, with the default values and with ci/all-features-values.yaml
#     (OTLP TLS + headers, dashboard, CRI-O socket, 2 operator replicas, ...);
#   - the values schema and the templates' own checks reject bad values;
#   - helm template, and kubernetes-validate --strict over every rendered built-in object
#     (against Kubernetes 1.35, and 1.27 = the chart's kubeVersion floor for the defaults);
#   - the CRDs: charts/gprobe/crds/crds.yaml must equal the generated crds/crds.yaml, be
#     valid apiextensions.k8s.io/v1 CustomResourceDefinitions, define what the RBAC names,
#     and accept the example ProbeSpecs;
#   - the Grafana dashboard JSON parses (file and rendered ConfigMap);
#   - security facts of the rendered agent DaemonSet, operator Deployment and RBAC.
# Tools: helm from .cache/helm/helm/helm (or $HELM), kubernetes-validate from
# .cache/venv/bin (or $KUBERNETES_VALIDATE); `bash scripts/setup.sh --test` installs both.
# When on PATH, shellcheck and hadolint check the e2e scripts and the Dockerfiles too.
# Usage: bash e2e/chart_test.sh        Exit status: 0 when every check passed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$root/charts/gprobe"
helm="${HELM:-$root/.cache/helm/helm/helm}"
kv="${KUBERNETES_VALIDATE:-$root/.cache/venv/bin/kubernetes-validate}"
all_values="$chart/ci/all-features-values.yaml"
k8s_latest=1.35.0
k8s_floor=1.27.0

passed=0
failed=0
skipped=0
failures=()
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

pass() { passed=$((passed + 1)); echo "ok    $1"; }
fail() {
  failed=$((failed + 1))
  failures+=("$1")
  echo "FAIL  $1" >&2
  if [[ -n "${2:-}" ]]; then sed 's/^/      /' "$2" >&2; fi
}
skip() { skipped=$((skipped + 1)); echo "skip  $1: $2"; }

# check NAME CMD...: runs CMD, passes when it exits 0, shows its output when it does not.
check() {
  local name="$1"
  shift
  if "$@" >"$tmp/out" 2>&1; then pass "$name"; else fail "$name" "$tmp/out"; fi
}

# expect_failure NAME PATTERN CMD...: CMD must fail, with PATTERN in its output.
expect_failure() {
  local name="$1" pattern="$2"
  shift 2
  if "$@" >"$tmp/out" 2>&1; then
    echo "the command succeeded; it should have failed with: $pattern" >>"$tmp/out"
    fail "$name" "$tmp/out"
  elif grep -qF -- "$pattern" "$tmp/out"; then
    pass "$name"
  else
    echo "the command failed, but without: $pattern" >>"$tmp/out"
    fail "$name" "$tmp/out"
  fi
}

# --- tools -------------------------------------------------------------------------------
if [[ ! -x "$helm" ]]; then
  echo "chart_test: helm not found at $helm: run 'bash scripts/setup.sh --test' or set HELM" >&2
  exit 1
fi
if [[ ! -x "$kv" ]]; then
  echo "chart_test: kubernetes-validate not found at $kv: run 'bash scripts/setup.sh --test'" \
    "(or '$root/.cache/venv/bin/pip install kubernetes-validate==1.37.0'), or set KUBERNETES_VALIDATE" >&2
  exit 1
fi
# A python with PyYAML and jsonschema: the one kubernetes-validate runs with has both.
py="$(dirname "$kv")/python3"
if ! "$py" -c 'import yaml, jsonschema' 2>/dev/null; then
  py="$(command -v python3 || true)"
  if [[ -z "$py" ]] || ! "$py" -c 'import yaml, jsonschema' 2>/dev/null; then
    echo "chart_test: no python3 with PyYAML and jsonschema (kubernetes-validate's venv has them)" >&2
    exit 1
  fi
fi
echo "chart_test: $("$helm" version --short), kubernetes-validate $("$kv" --version), chart $chart"

# --- lint ----------------------------------------------------------------------------------
check "helm lint --strict (default values)" "$helm" lint --strict "$chart"
check "helm lint --strict (all features: $(basename "$all_values"))" \
  "$helm" lint --strict "$chart" -f "$all_values"

# --- values the chart must refuse ------------------------------------------------------------
expect_failure "schema rejects an unknown value" "additional properties 'bogus' not allowed" \
  "$helm" template t "$chart" --set agent.bogus=1
expect_failure "schema rejects an unknown OTLP protocol" "/otlp/protocol" \
  "$helm" template t "$chart" --set otlp.protocol=http
expect_failure "custom CRI runtime needs a socket path" "set agent.criSocket.path" \
  "$helm" template t "$chart" --set agent.criSocket.runtime=custom
expect_failure "OTLP TLS and insecure together are refused" "contradict each other" \
  "$helm" template t "$chart" --set otlp.endpoint=https://c:4317 --set otlp.insecure=true \
  --set otlp.tls.enabled=true --set otlp.tls.caSecretName=ca
expect_failure "OTLP TLS needs a CA Secret" "needs otlp.tls.caSecretName" \
  "$helm" template t "$chart" --set otlp.endpoint=https://c:4317 --set otlp.tls.enabled=true

# --- render ----------------------------------------------------------------------------------
render() { # render NAME ARGS...: helm template into $tmp/NAME.yaml
  local name="$1"
  shift
  if "$helm" template gprobe "$chart" --namespace gprobe-system "$@" >"$tmp/$name.yaml" 2>"$tmp/out"; then
    pass "helm template ($name)"
  else
    fail "helm template ($name)" "$tmp/out"
    : >"$tmp/$name.yaml"
  fi
}
render default
render all-features -f "$all_values"
render custom-socket --set agent.criSocket.runtime=custom \
  --set agent.criSocket.path=/run/k3s/containerd/containerd.sock --set otlp.endpoint=otel:4317 \
  --set otlp.insecure=true --set operator.leaderElect=false

# NOTES.txt is rendered only on install: a client-side dry run renders it without a cluster.
check "NOTES.txt renders (default values)" "$helm" install gprobe "$chart" --namespace gprobe-system --dry-run=client
check "NOTES.txt renders (all features)" "$helm" install gprobe "$chart" --namespace gprobe-system --dry-run=client -f "$all_values"

# --- kubernetes-validate over the built-in kinds ----------------------------------------------
# Our own custom resources (gprobe.dev) are left out: kubernetes-validate has no schema for
# them (the CRDs are checked below); every other object must have a schema and validate.
builtin_only() { # builtin_only IN OUT
  "$py" - "$1" "$2" <<'EOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
keep = [d for d in docs if not d.get("apiVersion", "").startswith("gprobe.dev/")]
if not keep:
    sys.exit("no objects rendered")
yaml.safe_dump_all(keep, open(sys.argv[2], "w"), sort_keys=False)
print(f"{len(keep)} objects: " + ", ".join(sorted({d['kind'] for d in keep})))
EOF
}
# kv_check FILE VERSION...: --strict validation; a warning (e.g. no schema for a kind) fails too.
kv_check() {
  local file="$1"
  shift
  local args=()
  for v in "$@"; do args+=(-k "$v"); done
  local out
  out="$("$kv" --strict --quiet "${args[@]}" "$file" 2>&1)" || { echo "$out"; return 1; }
  if [[ -n "$out" ]]; then echo "$out"; return 1; fi
}
for name in default all-features custom-socket; do
  if builtin_only "$tmp/$name.yaml" "$tmp/$name.builtin.yaml" >"$tmp/out" 2>&1; then
    versions=("$k8s_latest")
    # appArmorProfile (set by the all-features values) exists from Kubernetes 1.30 on.
    [[ "$name" != all-features ]] && versions+=("$k8s_floor")
    check "kubernetes-validate --strict ($name: $(tail -1 "$tmp/out"); k8s ${versions[*]})" \
      kv_check "$tmp/$name.builtin.yaml" "${versions[@]}"
  else
    fail "split the rendered objects ($name)" "$tmp/out"
  fi
done

# --- CRDs ------------------------------------------------------------------------------------
generated="$root/crds/crds.yaml"
copy="$chart/crds/crds.yaml"
if [[ -f "$generated" ]]; then
  if [[ ! -f "$copy" ]]; then
    echo "charts/gprobe/crds/crds.yaml is missing; Helm installs the CRDs from there." >"$tmp/out"
    echo "Fix: cp crds/crds.yaml charts/gprobe/crds/crds.yaml" >>"$tmp/out"
    fail "chart CRDs are a copy of crds/crds.yaml" "$tmp/out"
  elif ! diff -u "$generated" "$copy" >"$tmp/out" 2>&1; then
    {
      echo "charts/gprobe/crds/crds.yaml differs from the generated crds/crds.yaml (diff above)."
      echo "Fix: cp crds/crds.yaml charts/gprobe/crds/crds.yaml"
    } >>"$tmp/out"
    fail "chart CRDs are a copy of crds/crds.yaml" "$tmp/out"
  else
    pass "chart CRDs are a copy of crds/crds.yaml"
  fi
else
  skip "chart CRDs are a copy of crds/crds.yaml" "crds/crds.yaml does not exist (not generated yet)"
fi
crd_files=()
for f in "$generated" "$copy"; do [[ -f "$f" ]] && crd_files+=("$f"); done
if ((${#crd_files[@]})); then
  for f in "${crd_files[@]}"; do
    rel="${f#"$root"/}"
    check "kubernetes-validate --strict $rel (apiextensions.k8s.io/v1)" kv_check "$f" "$k8s_latest" "$k8s_floor"
  done
  crd="${crd_files[-1]}"
  check "CRDs define gprobe.dev probespecs and probeattachments (the RBAC's resources)" \
    "$py" - "$crd" <<'EOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
bad = [f"{d.get('apiVersion')}/{d.get('kind')}" for d in docs
       if (d.get("apiVersion"), d.get("kind")) != ("apiextensions.k8s.io/v1", "CustomResourceDefinition")]
if bad:
    sys.exit(f"objects that are not apiextensions.k8s.io/v1 CustomResourceDefinitions: {bad}")
plurals = {d["spec"]["names"]["plural"] for d in docs if d["spec"]["group"] == "gprobe.dev"}
missing = {"probespecs", "probeattachments"} - plurals
if missing:
    sys.exit(f"the chart's RBAC grants access to gprobe.dev {sorted(missing)}, which no CRD defines (defined: {sorted(plurals)})")
for d in docs:
    if d["spec"]["names"]["plural"] == "probespecs":
        served = [v["name"] for v in d["spec"]["versions"] if v.get("served")]
        if "v1alpha1" not in served:
            sys.exit(f"probespecs does not serve v1alpha1 (serves {served})")
        if not any("status" in (v.get("subresources") or {}) for v in d["spec"]["versions"]):
            sys.exit("probespecs has no status subresource: the operator's RBAC grants probespecs/status")
EOF
  for ex in "$chart/examples/probespec.yaml" "$root/examples/http-client/probespec.yaml"; do
    [[ -f "$ex" ]] || continue
    check "${ex#"$root"/} validates against the ProbeSpec CRD schema" "$py" - "$crd" "$ex" <<'EOF'
import sys, yaml, jsonschema
crds = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for obj in (d for d in yaml.safe_load_all(open(sys.argv[2])) if d):
    group, version = obj["apiVersion"].split("/")
    crd = next((c for c in crds if c["spec"]["group"] == group and c["spec"]["names"]["kind"] == obj["kind"]), None)
    if crd is None:
        sys.exit(f"no CRD for {obj['apiVersion']} {obj['kind']}")
    v = next((v for v in crd["spec"]["versions"] if v["name"] == version), None)
    if v is None:
        sys.exit(f"the {obj['kind']} CRD has no version {version}")
    schema = v["schema"]["openAPIV3Schema"]
    # The CRD's schema describes apiVersion/kind/metadata loosely; check spec strictly.
    jsonschema.validate(obj.get("spec", {}), schema["properties"]["spec"])
    print(f"{obj['kind']}/{obj['metadata']['name']} ok")
EOF
  done
else
  skip "CRD validation" "neither crds/crds.yaml nor charts/gprobe/crds/crds.yaml exists yet"
fi

# --- dashboard -------------------------------------------------------------------------------
check "dashboards/gprobe.json is valid JSON" "$py" -m json.tool "$chart/dashboards/gprobe.json"
check "rendered dashboard ConfigMap holds the dashboard, labelled for Grafana" "$py" - "$tmp/all-features.yaml" <<'EOF'
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cms = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
assert len(cms) == 1, f"expected one dashboard ConfigMap, found {len(cms)}"
cm = cms[0]
assert cm["metadata"]["labels"].get("grafana_dashboard") == "1", cm["metadata"]["labels"]
assert cm["metadata"]["namespace"] == "monitoring", cm["metadata"]["namespace"]
dash = json.loads(cm["data"]["gprobe.json"])
exprs = " ".join(t["expr"] for p in dash["panels"] for t in p.get("targets", []))
for metric in ("gprobe_calls_total", "gprobe_call_duration_seconds_bucket",
               "gprobe_call_duration_seconds_sum", "gprobe_call_duration_seconds_count",
               "gprobe_events_lost_total"):
    assert metric in exprs, f"no panel queries {metric}"
for q in ("0.5", "0.95", "0.99"):
    assert f"histogram_quantile({q}," in exprs, f"no p{q} latency query"
assert "by (reason)" in exprs, "lost events are not broken down by reason"
assert any(p["type"] == "table" for p in dash["panels"]), "no table panel"
ids = [p["id"] for p in dash["panels"]]
assert len(ids) == len(set(ids)), f"duplicate panel ids {ids}"
print(f"{len(dash['panels'])} panels")
EOF
check "dashboard is off by default" "$py" -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
assert not [d for d in docs if d["kind"] == "ConfigMap"], "a ConfigMap is rendered by default"
' "$tmp/default.yaml"

# --- security facts --------------------------------------------------------------------------
for name in default all-features custom-socket; do
  check "security of the rendered objects ($name)" "$py" - "$tmp/$name.yaml" "$name" <<'EOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
name = sys.argv[2]
errors = []
def err(msg): errors.append(msg)

def walk(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "privileged" and v is True:
                err(f"privileged: true at {path}.{k}")
            walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            walk(v, f"{path}[{i}]")
for d in docs:
    walk(d, f"{d['kind']}/{d['metadata']['name']}")

def one(kind, component):
    found = [d for d in docs if d["kind"] == kind
             and d["metadata"]["labels"].get("app.kubernetes.io/component") == component]
    if len(found) != 1:
        sys.exit(f"expected one {kind} for the {component}, found {len(found)}")
    return found[0]

# The agent DaemonSet.
ds = one("DaemonSet", "agent")
pod = ds["spec"]["template"]["spec"]
if pod.get("hostPID") is not True: err("agent: hostPID is not true")
for k in ("hostNetwork", "hostIPC"):
    if pod.get(k): err(f"agent: {k} is set")
(c,) = [c for c in pod["containers"] if c["name"] == "agent"]
sc = c.get("securityContext", {})
caps = sc.get("capabilities", {})
want = {"BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH", "SYS_RESOURCE"}
if caps.get("drop") != ["ALL"]: err(f"agent: capabilities.drop is {caps.get('drop')}, not [ALL]")
added = caps.get("add", [])
if sorted(added) != sorted(want):
    err(f"agent: capabilities.add is {sorted(added)}, not exactly {sorted(want)}")
if sc.get("readOnlyRootFilesystem") is not True: err("agent: readOnlyRootFilesystem is not true")
if sc.get("allowPrivilegeEscalation") is not False: err("agent: allowPrivilegeEscalation is not false")
if sc.get("runAsUser") != 0: err(f"agent: runAsUser is {sc.get('runAsUser')}, not 0")
if sc.get("privileged") is not False: err("agent: privileged is not explicitly false")
if "seccompProfile" not in sc: err("agent: no seccompProfile")
if name == "default" and sc["seccompProfile"].get("type") != "RuntimeDefault":
    err(f"agent: default seccompProfile is {sc['seccompProfile']}, not RuntimeDefault")
env = {e["name"]: e for e in c.get("env", [])}
if env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "spec.nodeName":
    err("agent: NODE_NAME does not come from spec.nodeName")
if "POD_NAMESPACE" not in env: err("agent: no POD_NAMESPACE")
h = env.get("OTEL_EXPORTER_OTLP_HEADERS")
if h is not None and "value" in h: err("agent: OTLP headers are a literal env value, not from a Secret")
args = c.get("args", [])
if args[:1] != ["agent"]: err(f"agent: args do not start with the agent subcommand: {args}")
# hostPath volumes: only the CRI socket's directory and /sys/kernel/btf, mounted read-only.
host = {v["name"]: v["hostPath"]["path"] for v in pod.get("volumes", []) if "hostPath" in v}
cri = next((a.split("=", 1)[1] for a in args if a.startswith("--cri-socket=")), None)
if cri is None: err("agent: no --cri-socket")
else:
    cri_dir = cri.rsplit("/", 1)[0]
    if sorted(host.values()) != sorted([cri_dir, "/sys/kernel/btf"]):
        err(f"agent: hostPath volumes are {sorted(host.values())}, want {[cri_dir, '/sys/kernel/btf']}")
for m in c.get("volumeMounts", []):
    if m["name"] in host and m.get("readOnly") is not True:
        err(f"agent: hostPath {host[m['name']]} is mounted read-write")
if name == "default":
    if {"operator": "Exists"} not in pod.get("tolerations", []): err("agent: does not tolerate every taint by default")
    if ds["spec"]["updateStrategy"] != {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}:
        err(f"agent: updateStrategy is {ds['spec']['updateStrategy']}")
    if pod.get("priorityClassName"): err("agent: a priorityClassName is set by default")
    res = c.get("resources", {})
    if res != {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}:
        err(f"agent: default resources are {res}")
if name == "all-features":
    if env.get("OTEL_EXPORTER_OTLP_CERTIFICATE", {}).get("value") != "/etc/gprobe/otlp-tls/ca.crt":
        err("agent: OTEL_EXPORTER_OTLP_CERTIFICATE is not the mounted CA")
    if not any(m["mountPath"] == "/etc/gprobe/otlp-tls" for m in c.get("volumeMounts", [])):
        err("agent: the OTLP CA is not mounted")
    if "OTEL_EXPORTER_OTLP_HEADERS" not in env: err("agent: no OTEL_EXPORTER_OTLP_HEADERS")
    if cri != "/var/run/crio/crio.sock": err(f"agent: CRI-O socket is {cri}")

# The operator Deployment.
dep = one("Deployment", "operator")
pod = dep["spec"]["template"]["spec"]
(c,) = pod["containers"]
sc = c.get("securityContext", {})
psc = pod.get("securityContext", {})
if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")): err("operator: not runAsNonRoot")
if name != "all-features" and psc.get("runAsUser") != 65532: err(f"operator: runAsUser is {psc.get('runAsUser')}")
if sc.get("readOnlyRootFilesystem") is not True: err("operator: readOnlyRootFilesystem is not true")
if sc.get("allowPrivilegeEscalation") is not False: err("operator: allowPrivilegeEscalation is not false")
if sc.get("capabilities") != {"drop": ["ALL"]}: err(f"operator: capabilities are {sc.get('capabilities')}")
if sc.get("seccompProfile", {}).get("type") != "RuntimeDefault": err("operator: seccomp is not RuntimeDefault")
probes = (c.get("livenessProbe", {}).get("httpGet", {}).get("path"), c.get("readinessProbe", {}).get("httpGet", {}).get("path"))
if probes != ("/healthz", "/readyz"): err(f"operator: probes are {probes}")
env = {e["name"] for e in c.get("env", [])}
if not {"POD_NAME", "POD_NAMESPACE"} <= env: err("operator: POD_NAME/POD_NAMESPACE missing")
replicas = dep["spec"]["replicas"]
if replicas > 1 and "--leader-elect" not in c["args"]:
    err(f"operator: {replicas} replicas without --leader-elect")

# RBAC: least privilege.
for d in docs:
    if d["kind"] not in ("ClusterRole", "Role"):
        continue
    for r in d["rules"]:
        where = f"{d['kind']}/{d['metadata']['name']}"
        if "*" in r.get("verbs", []) or "*" in r.get("resources", []) or "*" in r.get("apiGroups", []):
            err(f"{where}: wildcard rule {r}")
        for res in r.get("resources", []):
            if res in ("secrets", "pods/exec", "pods/attach", "nodes/proxy"):
                err(f"{where}: grants {res}")
        if "escalate" in r.get("verbs", []) or "bind" in r.get("verbs", []) or "impersonate" in r.get("verbs", []):
            err(f"{where}: grants {r['verbs']}")
agent_roles = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"]
if len(agent_roles) != 1: err(f"expected one agent ClusterRole, found {len(agent_roles)}")
else:
    got = {(g, r): sorted(rule["verbs"]) for rule in agent_roles[0]["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    want = {("gprobe.dev", "probespecs"): ["get", "list", "watch"],
            ("gprobe.dev", "probeattachments"): sorted(["get", "list", "watch", "create", "patch", "update", "delete"]),
            ("gprobe.dev", "probeattachments/status"): ["get", "patch", "update"],
            ("gprobe.dev", "probespecs/finalizers"): ["update"],
            ("", "nodes"): ["get"]}
    if got != want: err(f"agent ClusterRole is {got}, want {want}")

if errors:
    sys.exit("\n".join(errors))
print("ok")
EOF
done

# --- scripts and Dockerfiles -------------------------------------------------------------------
if command -v shellcheck >/dev/null; then
  check "shellcheck e2e/chart_test.sh e2e/kind/run.sh" shellcheck "$root/e2e/chart_test.sh" "$root/e2e/kind/run.sh"
else
  skip "shellcheck" "shellcheck is not installed (apt-get install shellcheck)"
fi
if command -v hadolint >/dev/null; then
  check "hadolint docker/*.Dockerfile e2e/kind/*.Dockerfile" hadolint "$root"/docker/*.Dockerfile "$root"/e2e/kind/*.Dockerfile
else
  skip "hadolint" "hadolint is not installed"
fi

echo
if ((failed)); then
  echo "chart_test: these checks failed:" >&2
  printf '  - %s\n' "${failures[@]}" >&2
fi
echo "chart_test: $passed passed, $failed failed, $skipped skipped"
((failed == 0))
