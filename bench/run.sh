#!/usr/bin/env bash
# gprobe's benchmarks, side by side with bpftrace, in one run: builds gprobe (release),
# the criterion benches and the Go targets, then runs the six measurements of
# BENCHMARKS.md and writes bench/results/latest.md (and latest.json). Needs root (BPF).
#
#   bench/run.sh                      everything (about 12 minutes on a quiet 2-core VM)
#   bench/run.sh --only cost,attach   some sections: cost bpfstats bpfvariants throughput
#                                     userspace resolve attach rss
#   bench/run.sh --quiet-wait 1200    first wait up to 20 minutes for a quiet machine
#                                     (1-minute load average below 0.5, no cargo/rustc)
#   bench/run.sh --rounds 7 --calls 500000 --out /tmp/x.md   (more options: bench/lib/bench.py --help)
#
# Every process it starts is stopped by its pid; no uprobe is left behind (checked).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
cd "$repo"

command_line="bench/run.sh${*:+ $*}" # before the arguments are shifted away below
only="cost,bpfstats,bpfvariants,throughput,userspace,resolve,attach,rss"
out="$here/results/latest.md"
quiet_wait=0
extra=()
while (($#)); do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --quiet-wait) quiet_wait="$2"; shift 2 ;;
    --rounds | --calls | --stat-runs | --tp-seconds | --resolve-runs | --starts | --variants \
    | --variants-file)
      extra+=("$1" "$2"); shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bench/run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [[ "$(id -u)" != 0 ]]; then
  echo "bench/run.sh: needs root (loads BPF programs, sets kernel.bpf_stats_enabled)" >&2
  exit 1
fi

# Tools: bpftrace (the comparison) and bpftool (program names, leftover check).
missing=()
for t in bpftrace bpftool; do command -v "$t" >/dev/null || missing+=("$t"); done
if ((${#missing[@]})); then
  echo "== installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

go="${GO:-}"
if [[ -z "$go" ]]; then
  if [[ -x "$repo/.cache/venv/bin/go" ]]; then go="$repo/.cache/venv/bin/go"; else go=/usr/lib/go-1.19/bin/go; fi
fi
[[ -x "$go" ]] || { echo "bench/run.sh: no Go toolchain ($go): run scripts/setup.sh --test" >&2; exit 1; }

work="$(mktemp -d /tmp/gprobe-bench.XXXXXX)"
driver_pid=""
cleanup() {
  local rc=$?
  if [[ -n "$driver_pid" ]] && kill -0 "$driver_pid" 2>/dev/null; then
    kill -TERM "$driver_pid" 2>/dev/null || true
    wait "$driver_pid" 2>/dev/null || true
  fi
  if [[ "${BENCH_KEEP:-0}" == 1 ]]; then echo "work folder kept: $work" >&2; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== building gprobe (release) and the benches" >&2
cargo build --release -p gprobe-agent
cargo bench -p gprobe-agent --bench userspace --bench resolve --no-run --message-format=json \
  >"$work/cargo-bench.json"
exe_of() {
  python3 -c 'import json,sys
for ln in open(sys.argv[1]):
    try: m = json.loads(ln)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[2]:
        print(m["executable"])' "$work/cargo-bench.json" "$1" | tail -n 1
}
userspace_bin="$(exe_of userspace)"
resolve_bin="$(exe_of resolve)"
[[ -x "$userspace_bin" && -x "$resolve_bin" ]] || { echo "bench executables not found" >&2; exit 1; }
gprobe="$repo/target/release/gprobe"

echo "== building the Go targets with $("$go" version)" >&2
go_build() { # SRC OUT [FLAGS...]
  local src="$1" dst="$2"
  shift 2
  (cd "$src" && GOTOOLCHAIN=local GO111MODULE=off GOFLAGS='' CGO_ENABLED=0 \
    GOCACHE="$work/go/cache" GOPATH="$work/go/path" "$go" build -o "$dst" "$@" .)
}
go_build "$here/go/loop" "$work/loop"
go_build "$here/go/many" "$work/many"
if [[ ",$only," == *,resolve,* ]]; then
  go_build "$here/go/dwarf" "$work/dwarf"
fi

resolve_targets=()
if kubectl_path="$(command -v kubectl)"; then
  kdir="$(dirname "$(readlink -f "$kubectl_path")")"
  for k in "$kdir"/kubectl "$kdir"/kubectl.1.*; do
    [[ -f "$k" ]] && resolve_targets+=("$k")
  done
fi
[[ -f "$work/dwarf" ]] && resolve_targets+=("$work/dwarf")

if ((quiet_wait > 0)); then
  echo "== waiting up to ${quiet_wait}s for a quiet machine (load < 0.5, no cargo/rustc)" >&2
  deadline=$((SECONDS + quiet_wait))
  while ((SECONDS < deadline)); do
    load="$(cut -d' ' -f1 /proc/loadavg)"
    busy="$(ps -eo comm= | awk '$1 ~ /^(cargo|rustc|cc1|go|compile|link)$/ { n++ } END { print n + 0 }')"
    if [[ "$busy" == 0 ]] && awk -v l="$load" 'BEGIN { exit !(l < 0.5) }'; then break; fi
    echo "   load $load, $busy compiler processes: waiting" >&2
    sleep 30
  done
fi

mkdir -p "$(dirname "$out")"
dirty="$(git -C "$repo" diff --quiet HEAD -- agent agent-ebpf crds || echo ', with uncommitted changes')"
python3 -B "$here/lib/bench.py" \
  --gprobe "$gprobe" --loop "$work/loop" --many "$work/many" \
  --userspace "$userspace_bin" --resolve "$resolve_bin" \
  --resolve-targets "${resolve_targets[@]}" \
  --work "$work" --out "$out" --only "$only" \
  --command "$command_line" \
  --gprobe-version "$("$gprobe" --version) ($(git -C "$repo" rev-parse --short HEAD)$dirty)" \
  --bpftrace-version "$(bpftrace --version)" \
  --go-version "$("$go" version | cut -d' ' -f3)" \
  "${extra[@]}" &
driver_pid=$!
wait "$driver_pid"
driver_pid=""
