# shellcheck shell=bash
# shellcheck disable=SC2154 # the variables are set by scripts/cluster.sh, which sources this
# Sourced by scripts/cluster.sh: `cluster.sh down`, which stops what `up` started (by pid),
# removes the pods' network namespaces, mounts, cgroups, iptables chains and the bridge,
# restores the sysctls and removes the state. Uses cluster.sh's variables and its pid_of,
# stop, kubectl_, restore_sysctls, log and die.

# The network namespaces (/run/netns/cni-*) of the node's pod sandboxes.
sandbox_netns() {
  local id
  for id in $(ctr -a "$sock" -n k8s.io containers ls -q 2>/dev/null); do
    ctr -a "$sock" -n k8s.io containers info "$id" 2>/dev/null |
      jq -r '.Spec.linux.namespaces[]? | select(.type == "network") | .path // empty' 2>/dev/null
  done | sort -u
}

# Unmounts every mount point under $1 (deepest first).
unmount_under() {
  local m
  awk -v p="$1" '{ gsub(/\\040/, " ", $5); if ($5 == p || index($5, p "/") == 1) print $5 }' /proc/self/mountinfo |
    sort -r | while IFS= read -r m; do umount -l "$m" 2>/dev/null || true; done
}

remove_cgroups() {
  local d
  for d in /sys/fs/cgroup/*/"$cluster_cgroup" /sys/fs/cgroup/unified/"$cluster_cgroup"; do
    [[ -d "$d" ]] || continue
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [[ -d "$d" ]] && log "could not remove cgroup $d (processes still in it?)"
  done
  return 0
}

remove_iptables() {
  if [[ -x "$k8s_bin/kube-proxy" ]]; then "$k8s_bin/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  # What remains of the kubelet's and kube-proxy's chains (KUBE-*), in both iptables backends.
  local ipt table chain
  for ipt in iptables ip6tables iptables-legacy ip6tables-legacy; do
    command -v "$ipt" >/dev/null || continue
    for table in filter nat mangle; do
      "$ipt-save" -t "$table" 2>/dev/null | grep -q ':KUBE-' || continue
      "$ipt-save" -t "$table" 2>/dev/null | awk '/^-A / && / -j KUBE-/' | sed 's/^-A /-D /' |
        while IFS= read -r rule; do eval "$ipt -t $table $rule" 2>/dev/null || true; done
      for chain in $("$ipt-save" -t "$table" 2>/dev/null | awk -F'[: ]' '/^:KUBE-/ {print $2}'); do
        "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$ipt-save" -t "$table" 2>/dev/null | awk -F'[: ]' '/^:KUBE-/ {print $2}'); do
        "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

down() {
  [[ $EUID -eq 0 ]] || die "needs root"
  [[ -d "$state" ]] || {
    log "down: nothing to stop ($state does not exist)"
    return 0
  }
  exec 9>"$state/.lock"
  flock 9
  # The pods first, while the kubelet runs: it stops their sandboxes through the CRI, which
  # runs CNI DEL (veth, IP) and removes their network namespaces.
  if pid_of kube-apiserver >/dev/null && pid_of kubelet >/dev/null; then
    stop kube-controller-manager
    stop kube-scheduler
    kubectl_ delete pods --all --all-namespaces --grace-period=2 --wait=false >/dev/null 2>&1 || true
    local deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)) && [[ -n "$(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null)" ]]; do sleep 0.5; done
  fi
  local netns c
  netns="$(sandbox_netns)"
  for c in kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done
  # Whatever still runs in containerd: kill its tasks (the shims then exit), remove it.
  if pid_of containerd >/dev/null; then
    for c in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
    done
    local deadline=$((SECONDS + 20))
    while ((SECONDS < deadline)) && ctr -a "$sock" -n k8s.io tasks ls 2>/dev/null | grep -q RUNNING; do sleep 0.2; done
    for c in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1 || true
    done
    for c in $(ctr -a "$sock" -n k8s.io containers ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io containers delete "$c" >/dev/null 2>&1 || true
    done
  fi
  stop containerd
  for c in $netns; do
    [[ "$c" == /var/run/netns/* || "$c" == /run/netns/* ]] || continue
    umount -l "$c" 2>/dev/null || true
    rm -f "$c"
  done
  unmount_under "$state"
  remove_cgroups
  remove_iptables
  if ip link show "$bridge" >/dev/null 2>&1; then ip link delete "$bridge"; fi
  restore_sysctls
  # The kubelet's links to the pods' logs (it keeps them in /var/log/containers).
  find /var/log/containers -maxdepth 1 -type l -lname "$state/*" -delete 2>/dev/null || true
  exec 9>&-
  rm -rf "$state"
  log "down: stopped and removed $state"
}
