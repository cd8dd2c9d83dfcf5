# shellcheck shell=bash
# The shared body of bench/paths.sh and bench/traceparent.sh, sourced by them: parses
# their arguments, builds gprobe (unless --gprobe) and the Go target bench/go/TARGET, and
# runs the Python driver against them.
#
#   bpf_cost SCRIPT HELP_LINES TARGET DRIVER TARGET_FLAG [ARGS...]
bpf_cost() {
  local script="$1" help="$2" target="$3" driver="$4" flag="$5"
  shift 5
  local here repo name gprobe="" go work
  local extra=()
  here="$(cd "$(dirname "$script")" && pwd)"
  repo="$(cd "$here/.." && pwd)"
  name="bench/$(basename "$script")"
  while (($#)); do
    case "$1" in
      --gprobe) gprobe="$2"; shift 2 ;;
      # --baseline: traceparent.sh only
      --rounds | --calls | --baseline) extra+=("$1" "$2"); shift 2 ;;
      -h | --help) sed -n "2,${help}p" "$script"; exit 0 ;;
      *) echo "$name: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
  done
  [[ "$(id -u)" == 0 ]] || { echo "$name: needs root (BPF)" >&2; exit 1; }
  command -v bpftool >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftool >/dev/null
  if [[ -z "$gprobe" ]]; then
    (cd "$repo" && cargo build --release -p gprobe-agent --bin gprobe)
    gprobe="$repo/target/release/gprobe"
  fi
  go="${GO:-}"
  if [[ -z "$go" ]]; then
    if [[ -x "$repo/.cache/venv/bin/go" ]]; then go="$repo/.cache/venv/bin/go"; else go=/usr/lib/go-1.19/bin/go; fi
  fi
  work="$(mktemp -d "/tmp/gprobe-$target.XXXXXX")"
  # shellcheck disable=SC2064 # the folder is fixed now
  trap "rm -rf '$work'" EXIT
  (cd "$here/go/$target" && GOTOOLCHAIN=local GO111MODULE=off GOFLAGS='' CGO_ENABLED=0 \
    GOCACHE="$work/go/cache" GOPATH="$work/go/path" "$go" build -o "$work/$target" .)
  echo "gprobe $("$gprobe" --version) ($(git -C "$repo" rev-parse --short HEAD))," \
    "$("$go" version | cut -d' ' -f3), kernel $(uname -r)"
  python3 -B "$here/lib/$driver" --gprobe "$gprobe" "$flag" "$work/$target" "${extra[@]}"
}
