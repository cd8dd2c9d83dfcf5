#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, for trying gprobe the way it is
# deployed (helm install, kubectl apply) and for the suite's cluster test. Needs root.
#
#   scripts/cluster.sh up              start it (building what is missing); idempotent; the
#                                      last line printed is the kubeconfig's path
#   scripts/cluster.sh down            stop everything it started (by pid), remove its state,
#                                      restore the sysctls, mounts and iptables it changed
#   scripts/cluster.sh status          what runs
#   scripts/cluster.sh load ARCHIVE... import OCI image archives into the node's containerd
#                                      (as `kind load image-archive`), e.g. scripts/images.sh's
#   scripts/cluster.sh build           only build (or find in the cache) the components
#   scripts/cluster.sh kubeconfig      print the kubeconfig's path
#   scripts/cluster.sh cri-socket      print the node's CRI socket (the chart's agent.criSocket.path)
#   scripts/cluster.sh clean-build-cache  remove the Go caches of the builds (keeps the binaries)
#   scripts/cluster.sh tool NAME       build (once) and print the path of kubectl, prometheus
#                                      or jaeger (the cluster test's receivers), or of
#                                      grafana-schema (the chart test's dashboard check)
#
# Components, every one from a package registry, pinned and built once into
# ${XDG_CACHE_HOME:-$HOME/.cache}/gprobe/<component>-<version>/ (nice'd: builds are CPU-heavy):
#   - kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and
#     kubectl from the Go module k8s.io/kubernetes (scripts/cluster/kubernetes/go.mod, whose
#     replaces point every k8s.io staging module at its published release);
#   - etcd from go.etcd.io/etcd/server/v3 (scripts/cluster/etcd/go.mod);
#   - the pod sandbox ("pause") image: scripts/cluster/pause, a static binary in a one-layer
#     OCI archive (scripts/oci-image.py), imported with ctr: no registry is needed;
#   - containerd 1.6, runc and the CNI plugins from Debian (scripts/setup.sh --test).
# Kubernetes 1.35 is the last release whose kubelet runs with containerd 1.x.
#
# What it sets up (state in $GPROBE_CLUSTER_DIR, default /var/lib/gprobe-cluster):
#   - a CA, serving and client certificates for every component, a service-account key;
#     the API server with RBAC and Node authorization, its default admission plugins
#     (ValidatingAdmissionPolicy included) plus NodeRestriction, and an audit log
#     (Metadata level) in $GPROBE_CLUSTER_DIR/log/audit.log;
#   - containerd with its own root, state, socket and config (restrict_oom_score_adj: this
#     machine forbids lowering oom_score_adj), the kubelet with the cgroupfs driver under
#     the cgroup /gprobe-cluster (cgroup v1 needs failCgroupV1: false from 1.35);
#   - a bridge of its own (gprobe0, 10.244.0.1/24) for the pods (the CNI bridge plugin;
#     pods need a CNI config even with hostNetwork), kube-proxy (iptables) for Services:
#     the API server's address is the bridge's, so pods reach it as 10.96.0.1;
#   - no DNS server: Services are reached by ClusterIP.
# Environment: GPROBE_CLUSTER_DIR, XDG_CACHE_HOME, GPROBE_CLUSTER_TIMEOUT (seconds, 120).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
k8s_version=v1.35.4
etcd_version=v3.6.16
prometheus_version=v0.316.0 # Prometheus 3
jaeger_version=v1.76.0      # Jaeger v2 (the module's v1.x tags)
pause_ref=gprobe.local/pause:3.10
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gprobe"
k8s_bin="$cache/kubernetes-$k8s_version/bin"
etcd_bin="$cache/etcd-$etcd_version/bin"
pause_tar="$cache/pause-$(sha256sum "$here/cluster/pause/pause.go" | cut -c1-12)/pause.tar"
state="${GPROBE_CLUSTER_DIR:-/var/lib/gprobe-cluster}"
pki="$state/pki"
logs="$state/log"
pids="$state/pids"
sock="$state/containerd/containerd.sock"
kubeconfig="$state/admin.kubeconfig"
timeout="${GPROBE_CLUSTER_TIMEOUT:-120}"
node=gprobe-node
bridge=gprobe0
node_ip=10.244.0.1
pod_cidr=10.244.0.0/24
service_cidr=10.96.0.0/16
cluster_cgroup=gprobe-cluster
etcd_port=23790
# Started in this order; stopped in the reverse one.
components=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
# Kernel settings the cluster changes (the kubelet sets the vm/kernel ones it wants; kube-proxy
# needs forwarding and the bridge netfilter hooks): saved at the first `up`, restored at `down`.
sysctls=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.ipv4.conf.all.route_localnet vm.overcommit_memory vm.panic_on_oom kernel.panic
  kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.netfilter.nf_conntrack_max)

log() { printf 'cluster: %s\n' "$*" >&2; }
die() {
  printf 'cluster: %s\n' "$*" >&2
  exit 1
}

# --- building (scripts/cluster/build.sh) ------------------------------------------------------
# shellcheck source=scripts/cluster/build.sh
source "$here/cluster/build.sh"

# --- processes --------------------------------------------------------------------------------
pid_of() { # pid_of NAME: the pid of a running component, or nothing
  local f="$pids/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ -n "$pid" && -d "/proc/$pid" ]] || return 1
  # The pid file names the process we started: check it is still that program.
  [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$(cat "$pids/$1.exe" 2>/dev/null)" ]] || return 1
  echo "$pid"
}

start() { # start NAME BINARY ARGS...: runs BINARY in the background, logs in $logs/NAME.log
  local name="$1" bin="$2"
  shift 2
  if pid_of "$name" >/dev/null; then return; fi
  # Without the locks' descriptors (9: this script's state lock; 8: e2e/cluster_test.sh's):
  # a daemon holding one would keep it locked as long as the cluster runs (KEEP=1).
  setsid "$bin" "$@" >>"$logs/$name.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"$pids/$name.pid"
  readlink -f "$bin" >"$pids/$name.exe"
}

stop() { # stop NAME: SIGTERM, then SIGKILL after 20 s
  local name="$1" pid i
  pid="$(pid_of "$name")" || {
    rm -f "$pids/$name.pid" "$pids/$name.exe"
    return 0
  }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 200; i++)); do
    [[ -d "/proc/$pid" ]] || break
    sleep 0.1
  done
  if [[ -d "/proc/$pid" ]]; then
    log "$name (pid $pid) did not stop on SIGTERM: killing it"
    kill -KILL "$pid" 2>/dev/null || true
    while [[ -d "/proc/$pid" ]]; do sleep 0.1; done
  fi
  rm -f "$pids/$name.pid" "$pids/$name.exe"
}

wait_for() { # wait_for WHAT CMD...: until CMD succeeds, at most $timeout seconds
  local what="$1" deadline=$((SECONDS + timeout))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what did not come up in ${timeout}s (logs: $logs)"
    sleep 0.2
  done
}

kubectl_() { "$k8s_bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }

# --- certificates (scripts/cluster/pki.sh) ----------------------------------------------------
# shellcheck source=scripts/cluster/pki.sh
source "$here/cluster/pki.sh"

# --- host settings ----------------------------------------------------------------------------
save_sysctls() {
  [[ -f "$state/sysctls.saved" ]] && return
  local s f
  : >"$state/sysctls.saved.tmp"
  for s in "${sysctls[@]}"; do
    f="/proc/sys/${s//.//}"
    [[ -f "$f" ]] && printf '%s=%s\n' "$s" "$(cat "$f")" >>"$state/sysctls.saved.tmp"
  done
  mv "$state/sysctls.saved.tmp" "$state/sysctls.saved"
}

restore_sysctls() {
  [[ -f "$state/sysctls.saved" ]] || return 0
  local line s v
  while IFS= read -r line; do
    s="${line%%=*}" v="${line#*=}"
    [[ "$(cat "/proc/sys/${s//.//}" 2>/dev/null)" == "$v" ]] && continue
    echo "$v" >"/proc/sys/${s//.//}" 2>/dev/null || log "could not restore $s=$v"
  done <"$state/sysctls.saved"
}

setup_network() {
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add "$node_ip/24" dev "$bridge"
  fi
  ip link set "$bridge" up
  echo 1 >/proc/sys/net/ipv4/ip_forward
  mkdir -p "$state/cni/net.d" "$state/cni/ipam"
  cat >"$state/cni/net.d/10-gprobe.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "gprobe-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$state/cni/ipam",
        "ranges": [[{"subnet": "$pod_cidr", "rangeStart": "10.244.0.10", "gateway": "$node_ip"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
}

# --- the components ---------------------------------------------------------------------------
overlay_works() {
  local d="$state/overlay-check"
  mkdir -p "$d"/{l,u,w,m}
  if mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m" 2>/dev/null; then
    umount "$d/m"
    rm -rf "$d"
    return 0
  fi
  rm -rf "$d"
  return 1
}

start_containerd() {
  local snapshotter=native
  overlay_works && snapshotter=overlayfs
  mkdir -p "$state/containerd"
  cat >"$state/containerd/config.toml" <<EOF
version = 2
root = "$state/containerd/root"
state = "$state/containerd/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
]

[grpc]
  address = "$sock"

[ttrpc]
  address = "$sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$state/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_ref"
  # root here may not lower oom_score_adj (no CAP_SYS_RESOURCE): clamp instead of failing
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$snapshotter"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$state/containerd/runc"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$state/cni/net.d"
EOF
  echo "$snapshotter" >"$state/containerd/snapshotter"
  start containerd "$(command -v containerd)" --config "$state/containerd/config.toml"
  wait_for containerd ctr -a "$sock" version
  if ! ctr -a "$sock" -n k8s.io images ls -q | grep -qxF "$pause_ref"; then
    ctr -a "$sock" -n k8s.io images import --snapshotter "$snapshotter" "$pause_tar" >/dev/null
  fi
}

start_etcd() {
  mkdir -p "$state/etcd"
  chmod 700 "$state/etcd"
  start etcd "$etcd_bin/etcd" --name "$node" --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
    --initial-cluster "$node=http://127.0.0.1:$((etcd_port + 1))" \
    --listen-metrics-urls "" --log-level warn --quota-backend-bytes 2147483648
  wait_for etcd curl -sf "http://127.0.0.1:$etcd_port/health"
}

start_apiserver() {
  cat >"$state/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
# Who asked for what (user, verb, resource, the request's URI with its field selector):
# Metadata level, for every request but the API server's own health checks.
omitStages: [RequestReceived]
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version"]
  - level: Metadata
EOF
  # The node's name resolves nowhere (no DNS entry for it): the API server reaches the kubelet
  # (kubectl logs, exec, port-forward) at its InternalIP, which the kubelet's certificate names.
  start kube-apiserver "$k8s_bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$node_ip" --advertise-address "$node_ip" --secure-port 6443 \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --api-audiences https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range "$service_cidr" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true --profiling=false \
    --audit-policy-file "$state/audit-policy.yaml" --audit-log-path "$logs/audit.log" \
    --audit-log-maxsize 200 --audit-log-maxbackup 2 \
    --event-ttl 1h
  wait_for kube-apiserver kubectl_ get --raw /readyz
}

start_controllers() {
  start kube-controller-manager "$k8s_bin/kube-controller-manager" \
    --kubeconfig "$state/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$state/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$state/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --service-cluster-ip-range "$service_cidr" --allocate-node-cidrs=false \
    --profiling=false
  start kube-scheduler "$k8s_bin/kube-scheduler" \
    --kubeconfig "$state/scheduler.kubeconfig" \
    --authentication-kubeconfig "$state/scheduler.kubeconfig" \
    --authorization-kubeconfig "$state/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false
}

# The kubelet's cgroup root must exist in every hierarchy (cgroup v1: one per controller).
make_cgroup_root() {
  local d c
  for d in /sys/fs/cgroup/*/; do
    [[ -f "$d/cgroup.procs" ]] || continue
    c="$d$cluster_cgroup"
    mkdir -p "$c"
    if [[ -f "$c/cpuset.cpus" && -z "$(cat "$c/cpuset.cpus")" ]]; then
      cat "$d/cpuset.cpus" >"$c/cpuset.cpus"
      cat "$d/cpuset.mems" >"$c/cpuset.mems"
    fi
  done
}

start_kubelet() {
  mkdir -p "$state/kubelet" "$logs/pods"
  make_cgroup_root
  cat >"$state/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine: cgroup v1 (kept working from 1.35 by failCgroupV1: false), no systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
# Pods' cgroups under a root of their own (not the host's /kubepods).
cgroupRoot: /$cluster_cgroup
containerRuntimeEndpoint: unix://$sock
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# The kubelet may not lower its own oom_score_adj here (the default is -999).
oomScoreAdj: 0
failSwapOn: false
podLogsDir: $logs/pods
# Images come from \`cluster.sh load\`, not a registry: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%}
maxPods: 60
EOF
  start kubelet "$k8s_bin/kubelet" --config "$state/kubelet-config.yaml" \
    --kubeconfig "$state/kubelet.kubeconfig" --root-dir "$state/kubelet" \
    --hostname-override "$node" --node-ip "$node_ip"
  wait_for "the node $node" node_ready
}

node_ready() {
  [[ "$(kubectl_ get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

start_kube_proxy() {
  local conf="$state/kube-proxy-config.yaml"
  # kube-proxy exits when its config file changes under it: written once.
  [[ -f "$conf" ]] || cat >"$conf" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $state/kube-proxy.kubeconfig}
hostnameOverride: $node
clusterCIDR: $pod_cidr
bindAddress: $node_ip
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# Leave the host's conntrack table as it is.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
# No NodePorts on 127.0.0.1 (that needs route_localnet).
iptables: {localhostNodePorts: false}
nodePortAddresses: ["$node_ip/32"]
EOF
  start kube-proxy "$k8s_bin/kube-proxy" --config "$conf"
  wait_for kube-proxy curl -sf http://127.0.0.1:10256/healthz
}

up() {
  [[ $EUID -eq 0 ]] || die "needs root (containerd, the kubelet and kube-proxy run as root)"
  for tool in containerd containerd-shim-runc-v2 runc ctr iptables openssl curl python3; do
    command -v "$tool" >/dev/null || die "$tool is missing: run scripts/setup.sh --test"
  done
  [[ -x /usr/lib/cni/bridge ]] || die "the CNI plugins are missing (/usr/lib/cni/bridge): run scripts/setup.sh --test"
  build_all
  mkdir -p "$state" "$logs" "$pids"
  exec 9>"$state/.lock"
  flock 9
  save_sysctls
  make_pki
  setup_network
  start_containerd
  start_etcd
  start_apiserver
  start_controllers
  start_kubelet
  start_kube_proxy
  # Service-account tokens are minted for "default": wait for it, so that the first pods work.
  wait_for "the default ServiceAccount" kubectl_ get serviceaccount default -n default
  log "up: node $node Ready (kubectl --kubeconfig $kubeconfig)"
  echo "$kubeconfig"
}

# --- down (scripts/cluster/down.sh) -----------------------------------------------------------
# shellcheck source=scripts/cluster/down.sh
source "$here/cluster/down.sh"

# --- status, load ------------------------------------------------------------------------------
status() {
  local c pid any=false
  for c in "${components[@]}"; do
    if pid="$(pid_of "$c")"; then
      any=true
      printf '%-24s running  pid %-8s rss %s MiB\n' "$c" "$pid" \
        "$(($(awk '/^VmRSS/ {print $2}' "/proc/$pid/status") / 1024))"
    else
      printf '%-24s stopped\n' "$c"
    fi
  done
  if $any && pid_of kube-apiserver >/dev/null; then
    kubectl_ get nodes -o wide 2>&1 || true
    kubectl_ get pods -A -o wide 2>&1 || true
    echo "kubeconfig: $kubeconfig"
  fi
  $any
}

load() {
  (($#)) || die "usage: cluster.sh load ARCHIVE..."
  pid_of containerd >/dev/null || die "the cluster is not up (scripts/cluster.sh up)"
  local snapshotter a
  snapshotter="$(cat "$state/containerd/snapshotter")"
  for a in "$@"; do
    [[ -f "$a" ]] || die "load: $a is not a file"
    ctr -a "$sock" -n k8s.io images import --snapshotter "$snapshotter" "$a" >&2 || die "load: ctr could not import $a"
  done
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
load) shift && load "$@" ;;
build) build_all ;;
tool)
  case "${2:-}" in
  prometheus) build_prometheus ;;
  jaeger) build_jaeger ;;
  kubectl) build_kubernetes && echo "$k8s_bin/kubectl" ;;
  grafana-schema) build_grafana_schema ;;
  *) die "usage: cluster.sh tool prometheus|jaeger|kubectl|grafana-schema (builds it once, prints its path)" ;;
  esac
  ;;
kubeconfig) echo "$kubeconfig" ;;
cri-socket) echo "$sock" ;;
clean-build-cache) chmod -R u+w "$cache/go" 2>/dev/null; rm -rf "$cache/go" ;;
*)
  sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
