#!/usr/bin/env bash
# gprobe on a real Kubernetes node of this machine: starts scripts/cluster.sh (under
# /tmp/gprobe-cluster.lock, so that two runs never share the node), runs the cluster test
# e2e/kind/run.sh through its kubeconfig (under /tmp/gprobe-bpf.lock while the agent loads BPF
# programs, like every test that does), and stops the cluster again: nothing stays running.
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
(cd "$root" && cargo build --release --locked -p gprobe-agent --bin gprobe -p gprobe-operator --bin gprobe-operator)
echo "cluster_test: builds ready in $((SECONDS - t0)) s"

exec 8>/tmp/gprobe-cluster.lock
flock 8
started=false
if ! "$cluster" status >/dev/null 2>&1; then started=true; fi
stop_cluster() {
  local rc=$?
  if $started && [[ -z "${KEEP:-}" ]]; then "$cluster" down || rc=1; fi
  exit "$rc"
}
trap stop_cluster EXIT
t0=$SECONDS
kubeconfig="$("$cluster" up | tail -n 1)"
echo "cluster_test: cluster up in $((SECONDS - t0)) s ($kubeconfig)"
KUBECONFIG="$kubeconfig" LOAD="$cluster load" KUBECTL="$("$cluster" tool kubectl)" \
  CRI_SOCKET="$("$cluster" cri-socket)" \
  flock /tmp/gprobe-bpf.lock bash "$root/e2e/kind/run.sh"
