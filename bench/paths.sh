#!/usr/bin/env bash
# What a capture's field path costs per pointer followed (BENCHMARKS.md, section 7): the BPF
# program's run time per hit (kernel.bpf_stats_enabled) while gprobe captures n.V through
# 0, 1, 2, 4 and 8 pointers of bench/go/chain. Prints the numbers. Needs root (BPF).
#
#   bench/paths.sh                         builds gprobe (release) and the Go target
#   bench/paths.sh --gprobe PATH           an already built gprobe (the BPF program is the
#                                          same in debug and release builds)
#   bench/paths.sh --rounds 7 --calls 500000
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
gprobe=""
extra=()
while (($#)); do
  case "$1" in
    --gprobe) gprobe="$2"; shift 2 ;;
    --rounds | --calls) extra+=("$1" "$2"); shift 2 ;;
    -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "bench/paths.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$(id -u)" == 0 ]] || { echo "bench/paths.sh: needs root (BPF)" >&2; exit 1; }
command -v bpftool >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftool >/dev/null
if [[ -z "$gprobe" ]]; then
  (cd "$repo" && cargo build --release -p gprobe-agent --bin gprobe)
  gprobe="$repo/target/release/gprobe"
fi
go="${GO:-}"
if [[ -z "$go" ]]; then
  if [[ -x "$repo/.cache/venv/bin/go" ]]; then go="$repo/.cache/venv/bin/go"; else go=/usr/lib/go-1.19/bin/go; fi
fi
work="$(mktemp -d /tmp/gprobe-paths.XXXXXX)"
trap 'rm -rf "$work"' EXIT
(cd "$here/go/chain" && GOTOOLCHAIN=local GO111MODULE=off GOFLAGS='' CGO_ENABLED=0 \
  GOCACHE="$work/go/cache" GOPATH="$work/go/path" "$go" build -o "$work/chain" .)
echo "gprobe $("$gprobe" --version) ($(git -C "$repo" rev-parse --short HEAD)), $("$go" version | cut -d' ' -f3), kernel $(uname -r)"
python3 -B "$here/lib/paths_bench.py" --gprobe "$gprobe" --chain "$work/chain" "${extra[@]}"
