#!/usr/bin/env bash
# The engine's costs (bench/lib/engine_bench.py): what a probe costs a process it does not
# select, how many short-lived processes are traced from their first call and how long
# they are held at exec, and how long stopping takes with 150 uprobes.
#
#   bench/engine.sh [--only blast,shortlived,shutdown] [--rounds N] [--json FILE]
#
# Needs root (BPF) and Go (scripts/setup.sh --test). Stops what it starts by pid.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
go="${GO:-}"
if [[ -z "$go" ]]; then
  if [[ -x "$repo/.cache/venv/bin/go" ]]; then go="$repo/.cache/venv/bin/go"; else go=/usr/lib/go-1.19/bin/go; fi
fi
[[ -x "$go" ]] || { echo "bench/engine.sh: no Go toolchain ($go): run scripts/setup.sh --test" >&2; exit 1; }
work="$(mktemp -d /tmp/gprobe-engine-bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cargo build --release -p gprobe-agent
(cd "$repo/e2e/testdata/lifecycle" && GOTOOLCHAIN=local GO111MODULE=off GOFLAGS='' CGO_ENABLED=0 \
  GOCACHE="$work/go/cache" GOPATH="$work/go/path" "$go" build -o "$work/lifecycle" .)
python3 -B "$here/lib/engine_bench.py" --gprobe "$repo/target/release/gprobe" \
  --lifecycle "$work/lifecycle" --work "$work" "$@"
