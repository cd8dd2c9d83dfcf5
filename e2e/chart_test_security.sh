# shellcheck shell=bash
# shellcheck disable=SC2154 # py, tmp, have_cel: set by chart_test.sh, which sources this
# The chart checks of the security facts of the rendered objects and of the agent's
# admission policy: sourced by e2e/chart_test.sh, whose check/fail helpers, $py,
# $tmp and $root they use.

# --- security facts --------------------------------------------------------------------------
for name in default all-features custom-socket floor; do
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
want = {"BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH", "KILL", "SYS_NICE"}
# all-features sets agent.traceparentWrites: SYS_ADMIN (bpf_probe_write_user) and, as
# Kubernetes requires with it, allowPrivilegeEscalation; no other render has either.
writes = name == "all-features"
if writes:
    want.add("SYS_ADMIN")
# all-features also sets agent.raiseMemlock (kernels before 5.11): SYS_RESOURCE, only there.
if name == "all-features":
    want.add("SYS_RESOURCE")
if caps.get("drop") != ["ALL"]: err(f"agent: capabilities.drop is {caps.get('drop')}, not [ALL]")
added = caps.get("add", [])
if sorted(added) != sorted(want):
    err(f"agent: capabilities.add is {sorted(added)}, not exactly {sorted(want)}")
if sc.get("readOnlyRootFilesystem") is not True: err("agent: readOnlyRootFilesystem is not true")
if sc.get("allowPrivilegeEscalation") is not writes:
    err(f"agent: allowPrivilegeEscalation is {sc.get('allowPrivilegeEscalation')}, not {writes}")
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
probes = (c.get("livenessProbe", {}).get("httpGet", {}).get("path"),
          c.get("readinessProbe", {}).get("httpGet", {}).get("path"))
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
agent_roles = [d for d in docs
               if d["kind"] == "ClusterRole" and d["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"]
if len(agent_roles) != 1: err(f"expected one agent ClusterRole, found {len(agent_roles)}")
else:
    got = {(g, r): sorted(rule["verbs"])
           for rule in agent_roles[0]["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    # What agent/src/cluster/api.rs needs (checked against the source below), nothing more.
    want = {("gprobe.dev", "probespecs"): ["list", "watch"],
            ("gprobe.dev", "probeattachments"): ["create", "patch"],
            ("gprobe.dev", "probeattachments/status"): ["patch"],
            ("gprobe.dev", "probespecs/finalizers"): ["update"]}
    if got != want: err(f"agent ClusterRole is {got}, want {want}")

if errors:
    sys.exit("\n".join(errors))
print("ok")
EOF
done

# --- the agent's admission policy ------------------------------------------------------------
check "admission policy: rendered where on (default, all-features), absent where off" \
  "$py" - "$tmp" <<'EOF'
import sys, yaml
want = {"default": True, "all-features": True, "custom-socket": False, "floor": False}
for name, on in want.items():
    docs = [d for d in yaml.safe_load_all(open(f"{sys.argv[1]}/{name}.yaml")) if d]
    kinds = sorted(d["kind"] for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy"))
    expect = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] if on else []
    if kinds != expect:
        sys.exit(f"{name}: rendered {kinds}, want {expect}")
    for d in docs:
        if d["kind"].startswith("ValidatingAdmissionPolicy") and d["apiVersion"] != "admissionregistration.k8s.io/v1":
            sys.exit(f"{name}: {d['kind']} is {d['apiVersion']}, not admissionregistration.k8s.io/v1")
print("ok")
EOF
for name in default all-features; do
  # Structure: who and what the policy applies to, how it fails, that its binding denies,
  # and that its expressions compare the token's node claim with spec.nodeName.
  check "admission policy ($name): scoped to the agent's ServiceAccount and ProbeAttachment writes" \
    "$py" - "$tmp/$name.yaml" <<'EOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
(ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
user = f"system:serviceaccount:{ds['metadata']['namespace']}:{ds['spec']['template']['spec']['serviceAccountName']}"
(vap,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
(binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
spec = vap["spec"]
assert spec["failurePolicy"] == "Fail", spec["failurePolicy"]
assert binding["spec"]["policyName"] == vap["metadata"]["name"], binding["spec"]
assert binding["spec"]["validationActions"] == ["Deny"], binding["spec"]["validationActions"]
assert "matchResources" not in binding["spec"], "the binding narrows the policy's match"
(rule,) = spec["matchConstraints"]["resourceRules"]
assert rule["apiGroups"] == ["gprobe.dev"], rule
assert sorted(rule["operations"]) == ["CREATE", "DELETE", "UPDATE"], rule
assert sorted(rule["resources"]) == ["probeattachments", "probeattachments/status"], rule
(cond,) = spec["matchConditions"]
assert cond["expression"] == f"request.userInfo.username == '{user}'", cond["expression"]
text = yaml.safe_dump(spec)
for needle in ("request.userInfo.extra", "'authentication.kubernetes.io/node-name'",
               "object.spec.nodeName", "oldObject.spec.nodeName"):
    assert needle in text, f"no {needle} in the policy's expressions"
for v in spec["validations"]:
    assert v.get("message") and "\n" not in v["message"], f"a validation without a one-line message: {v}"
print(user)
EOF
  if $have_cel; then
    check "admission policy ($name): CEL on sample requests (own node allowed, other node and no claim denied)" \
      "$py" - "$tmp/$name.yaml" <<'EOF'
# Evaluates the policy the way the API server does: a request matching the resource rules and
# every matchCondition is admitted only if every validation is true; the variables are
# computed first. cel-python stands in for the API server's cel-go.
import sys, yaml, celpy
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
(ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
ns = ds["metadata"]["namespace"]
agent = f"system:serviceaccount:{ns}:{ds['spec']['template']['spec']['serviceAccountName']}"
(vap,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
spec = vap["spec"]
env = celpy.Environment()
def program(expr):
    return env.program(env.compile(expr))
conds = [(c["name"], program(c["expression"])) for c in spec.get("matchConditions", [])]
variables = [(v["name"], program(v["expression"])) for v in spec.get("variables", [])]
checks = [(program(v["expression"]), v.get("message", ""),
           program(v["messageExpression"]) if "messageExpression" in v else None)
          for v in spec["validations"]]

def run(prog, act, what):
    try:
        return prog.evaluate(act)
    except Exception as e:  # the API server would deny (failurePolicy: Fail); here it is a bug
        sys.exit(f"{what}: CEL error: {e}")

def admit(op, user, extra, obj=None, old=None, resource="probeattachments", sub=""):
    rules = spec["matchConstraints"]["resourceRules"]
    res = resource + (f"/{sub}" if sub else "")
    if not any(op in r["operations"] and res in r["resources"] and "gprobe.dev" in r["apiGroups"] for r in rules):
        return "not matched", []
    info = {"username": user, "groups": ["system:serviceaccounts", "system:authenticated"]}
    if extra is not None:
        info["extra"] = extra
    name = ((obj or old) or {}).get("metadata", {}).get("name", "")
    req = {"operation": op, "userInfo": info, "name": name, "namespace": "shop",
           "resource": {"group": "gprobe.dev", "version": "v1alpha1", "resource": resource},
           "subResource": sub}
    act = {"request": celpy.json_to_cel(req), "object": celpy.json_to_cel(obj),
           "oldObject": celpy.json_to_cel(old)}
    for cname, c in conds:
        if not bool(run(c, act, f"matchCondition {cname}")):
            return "not concerned", []
    vals = {}
    for vname, v in variables:
        act["variables"] = celpy.json_to_cel(vals)
        vals[vname] = str(run(v, act, f"variable {vname}"))
    act["variables"] = celpy.json_to_cel(vals)
    failed = []
    for prog, msg, msg_expr in checks:
        if not bool(run(prog, act, "validation")):
            failed.append(str(run(msg_expr, act, "messageExpression")) if msg_expr else msg)
    return ("denied" if failed else "allowed"), failed

def att(node):
    return {"apiVersion": "gprobe.dev/v1alpha1", "kind": "ProbeAttachment",
            "metadata": {"name": f"urls-{node}", "namespace": "shop"},
            "spec": {"probeSpec": "urls", "nodeName": node}}
claim = lambda node: {"authentication.kubernetes.io/node-name": [node],
                      "authentication.kubernetes.io/pod-name": ["gprobe-agent-x7k2p"]}
A, B = att("node-a"), att("node-b")
no_claim = "no authentication.kubernetes.io/node-name"
cases = [
    # (what, request, outcome, text every denial message must hold)
    ("create own node", admit("CREATE", agent, claim("node-a"), obj=A), "allowed", None),
    ("create another node's", admit("CREATE", agent, claim("node-a"), obj=B), "denied", "node 'node-b'"),
    ("create without extra", admit("CREATE", agent, None, obj=A), "denied", no_claim),
    ("create without node claim",
     admit("CREATE", agent, {"authentication.kubernetes.io/pod-name": ["p"]}, obj=A), "denied", no_claim),
    ("create with an empty node claim",
     admit("CREATE", agent, {"authentication.kubernetes.io/node-name": []}, obj=A), "denied", no_claim),
    ("apply own", admit("UPDATE", agent, claim("node-a"), obj=A, old=A), "allowed", None),
    ("status of own", admit("UPDATE", agent, claim("node-a"), obj=A, old=A, sub="status"), "allowed", None),
    ("status of another node's",
     admit("UPDATE", agent, claim("node-a"), obj=B, old=B, sub="status"), "denied", "node 'node-b'"),
    ("status without node claim", admit("UPDATE", agent, None, obj=A, old=A, sub="status"), "denied", no_claim),
    ("take over another node's", admit("UPDATE", agent, claim("node-a"), obj=A, old=B), "denied", "node 'node-b'"),
    ("give own away", admit("UPDATE", agent, claim("node-a"), obj=B, old=A), "denied", "node 'node-b'"),
    ("delete own", admit("DELETE", agent, claim("node-a"), old=A), "allowed", None),
    ("delete another node's", admit("DELETE", agent, claim("node-a"), old=B), "denied", "node 'node-b'"),
    ("delete without node claim", admit("DELETE", agent, None, old=A), "denied", no_claim),
    ("operator writes any",
     admit("CREATE", f"system:serviceaccount:{ns}:gprobe-operator", None, obj=B), "not concerned", None),
    ("garbage collector deletes",
     admit("DELETE", "system:serviceaccount:kube-system:generic-garbage-collector", None, old=B),
     "not concerned", None),
    ("same name, other namespace",
     admit("CREATE", agent.replace(f":{ns}:", ":elsewhere:"), claim("node-a"), obj=B), "not concerned", None),
    ("agent and ProbeSpecs", admit("CREATE", agent, None, obj=A, resource="probespecs"), "not matched", None),
]
bad = []
for what, (outcome, msgs), want, text in cases:
    if outcome != want:
        bad.append(f"{what}: {outcome} {msgs}, want {want}")
    elif want == "denied" and not all(text in m for m in msgs):
        bad.append(f"{what}: denied with {msgs}, each should say {text!r}")
    elif text == no_claim and len(msgs) != 1:
        bad.append(f"{what}: {len(msgs)} messages {msgs}, want only the one about the claim")
if bad:
    sys.exit("\n".join(bad))
print(f"{len(cases)} requests as expected; e.g. {cases[1][1][1][0]!r}")
EOF
  else
    fail "admission policy ($name): CEL on sample requests" \
      <(echo "cel-python is not installed in $(dirname "$py"): run 'bash scripts/setup.sh --test'")
  fi
done
