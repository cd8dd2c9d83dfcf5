#!/usr/bin/env bash
# Sets up this machine (idempotently) and runs every check and test of gprobe: formatting,
# clippy, unit and end-to-end tests (real uprobes on real Go programs, real OTLP receivers,
# real containers through containerd's CRI), the Helm chart checks, and gprobe installed
# with Helm on a real one-node Kubernetes cluster (e2e/cluster_test.sh). Needs root.
#
# Every step runs even when an earlier one failed, and every crate's tests run even when
# another's fail (cargo test --no-fail-fast); the script exits non-zero at the end, naming
# the steps that failed.
#
# The tests run with `cargo test`, not cargo-nextest: cargo runs the test binaries one after
# another, so the e2e tests' lock (one `gprobe` at a time: 2 cores, latency checks) holds
# across binaries; nextest would run tests of several binaries at once.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
scripts/setup.sh --test || { echo "FAILED: scripts/setup.sh --test" >&2; exit 1; }

# A checkout without a target folder of its own (a fresh clone, as CI makes one for every
# run) builds in one shared under the cache, named by the compiler's version: the
# dependencies (about two thirds of a cold build on 2 cores) are built once per machine, and
# the workspace's own crates are rebuilt from this checkout's sources (cargo names their
# artifacts by their path relative to the workspace, so each clone replaces the last one's
# instead of adding to them). CARGO_TARGET_DIR, when set, wins.
if [[ -z "${CARGO_TARGET_DIR:-}" && ! -d target ]]; then
  CARGO_TARGET_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/gprobe/cargo-target-$(rustc -V | cut -d' ' -f2)"
  export CARGO_TARGET_DIR
  echo "== building in $CARGO_TARGET_DIR (shared by checkouts without a target folder)"
fi

failed=()
step() {
  local name="$1"
  shift
  echo "== $name"
  if ! "$@"; then
    echo "FAILED: $name" >&2
    failed+=("$name")
  fi
}

step "cargo fmt --check" cargo fmt --all --check
step "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
# The import graph of all of the agent's code (unit tests left out): no error module in a
# cycle; the other cycles are listed, as information.
step "no import cycle in the agent" python3 scripts/import_cycles.py --tree "" --all
step "no lines over 120 characters" python3 scripts/check_lines.py
# The e2e tests run the gprobe that this same `cargo test` builds (it builds the agent's
# binary for the agent's own integration tests); without GPROBE_BIN each test binary would
# run `cargo build -p gprobe-agent`, whose features differ from the whole workspace's build.
export GPROBE_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/gprobe"
step "cargo test" cargo test --workspace --locked --no-fail-fast
# Every call chain of the BPF programs as built within the 512 bytes of stack that kernels
# before 6.13 give it (this machine's kernel would load a deeper one).
step "BPF call chains within 512 bytes of stack" python3 scripts/bpf_stack.py
# gprobe on Debian's 5.10, 6.1, 6.12 and newest kernels, each booted under QEMU, and on
# this machine's (scripts/vm.sh): the table check x kernel (README, "Kernel matrix").
step "kernel matrix" scripts/vm.sh matrix
# Each fuzz target of the parsers of binary input for a fixed time (scripts/fuzz.sh).
step "fuzz" scripts/fuzz.sh
step "Helm chart" bash e2e/chart_test.sh
# gprobe on a real one-node Kubernetes cluster of this machine (scripts/cluster.sh): helm
# install, kubectl apply, spans in Jaeger, metrics in Prometheus, RBAC and admission. It
# starts the cluster and stops it again; the components are built once into the cache
# (about 8 min on 2 cores the first time: Kubernetes, etcd, Jaeger, Prometheus).
step "cluster e2e" bash e2e/cluster_test.sh

if ((${#failed[@]})); then
  echo "== FAILED steps: ${failed[*]}" >&2
  exit 1
fi
echo "== all steps passed"
