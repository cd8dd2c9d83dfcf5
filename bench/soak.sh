#!/usr/bin/env bash
# `gprobe agent --spec-dir` under spec and process churn for a long time (not part of the
# test suite): pods of e2e/testdata/churn on a private containerd, steady ones calling five
# functions all along and spawners starting short-lived copies of it, while a ProbeSpec
# selecting all of them is rewritten every 1.5 s and a second one comes and goes
# (e2e/examples/soak/). Prints the slopes of the agent's RSS, anonymous memory, fds,
# threads and uprobe links after warm-up, the calls checked against what the programs
# recorded themselves, and how long the stop took and what it left in the kernel. Exit
# status 1 if a check failed.
#
#   bench/soak.sh [--minutes N] [--debug] [--gprobe PATH] [SOAK ARGS...]
#
# --minutes: how long the churn lasts (default 60); then 60 s without changes. --debug: the
# debug builds instead of the release ones. --gprobe: the binary to soak (default:
# target/release/gprobe, or target/debug/gprobe with --debug, built first). Other arguments go to
# the soak driver (`--spec-every 1.5s`, `--steady 4`, `--spawners 2`, `--spawn-every 500ms`,
# `--warmup 2m`, ...; `--help`). Needs root (BPF, containerd) and Go (scripts/setup.sh
# --test). Stops what it starts by pid, and removes its pods.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
minutes=60
gprobe=""
profile=release
pass=()
while (($#)); do
  case "$1" in
    --minutes) minutes="${2:?--minutes N}"; shift 2 ;;
    --gprobe) gprobe="${2:?--gprobe PATH}"; shift 2 ;;
    --debug) profile=debug; shift ;;
    *) pass+=("$1"); shift ;;
  esac
done
[[ "$minutes" =~ ^[0-9]+$ ]] && ((minutes > 0)) || { echo "--minutes takes a whole number above 0" >&2; exit 2; }
cd "$repo"
flags=(--locked)
[[ "$profile" == release ]] && flags+=(--release)
target="${CARGO_TARGET_DIR:-$repo/target}/$profile"
if [[ -z "$gprobe" ]]; then
  cargo build "${flags[@]}" -p gprobe-agent
  gprobe="$target/gprobe"
fi
[[ -x "$gprobe" ]] || { echo "no gprobe at $gprobe" >&2; exit 1; }
cargo build "${flags[@]}" -p gprobe-e2e --example soak
soak="$target/examples/soak"
echo "bench/soak.sh: $gprobe ($profile build), ${minutes} min of churn," \
  "commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
exec "$soak" --gprobe "$gprobe" --duration "${minutes}m" "${pass[@]}"
