#!/usr/bin/env bash
# What reading a handler's incoming traceparent costs per call (BENCHMARKS.md, section 8): the BPF
# program's run time per hit (kernel.bpf_stats_enabled) of a probe on bench/go/handler's
# handle(w, r *http.Request), whose r.Header gprobe searches at every call, against the
# same probe without the search, for requests of 3 to 40 headers. Needs root (BPF).
#
#   bench/traceparent.sh                   builds gprobe (release) and the Go target
#   bench/traceparent.sh --gprobe PATH     an already built gprobe (the BPF program is the
#                                          same in debug and release builds)
#   bench/traceparent.sh --rounds 7 --calls 500000
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
gprobe=""
extra=()
while (($#)); do
  case "$1" in
    --gprobe) gprobe="$2"; shift 2 ;;
    --rounds | --calls) extra+=("$1" "$2"); shift 2 ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "bench/traceparent.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$(id -u)" == 0 ]] || { echo "bench/traceparent.sh: needs root (BPF)" >&2; exit 1; }
command -v bpftool >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftool >/dev/null
if [[ -z "$gprobe" ]]; then
  (cd "$repo" && cargo build --release -p gprobe-agent --bin gprobe)
  gprobe="$repo/target/release/gprobe"
fi
go="${GO:-}"
if [[ -z "$go" ]]; then
  if [[ -x "$repo/.cache/venv/bin/go" ]]; then go="$repo/.cache/venv/bin/go"; else go=/usr/lib/go-1.19/bin/go; fi
fi
work="$(mktemp -d /tmp/gprobe-tp.XXXXXX)"
trap 'rm -rf "$work"' EXIT
(cd "$here/go/handler" && GOTOOLCHAIN=local GO111MODULE=off GOFLAGS='' CGO_ENABLED=0 \
  GOCACHE="$work/go/cache" GOPATH="$work/go/path" "$go" build -o "$work/handler" .)
echo "gprobe $("$gprobe" --version) ($(git -C "$repo" rev-parse --short HEAD)), $("$go" version | cut -d' ' -f3), kernel $(uname -r)"
python3 -B "$here/lib/traceparent_bench.py" --gprobe "$gprobe" --handler "$work/handler" "${extra[@]}"
