#!/usr/bin/env bash
# What nesting and gprobe's runtime.newproc1 probe cost a Go program that starts a
# goroutine in each call (bench/go/spawn): time per goroutine alone; with a latency probe
# on handle (which brings the newproc1 probe, and nests work under handle); and with a
# probe on work only (no latency: flat spans, no newproc1 probe).
#
#   bench/spawn.sh [GPROBE_BINARY] [N]     default target/release/gprobe, 100000
#
# Needs root (BPF) and Go (scripts/setup.sh --test). Stops what it starts by pid.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
gprobe="${1:-$repo/target/release/gprobe}"
n="${2:-100000}"
go="${GO:-}"
if [[ -z "$go" ]]; then
  if [[ -x "$repo/.cache/venv/bin/go" ]]; then go="$repo/.cache/venv/bin/go"; else go=/usr/lib/go-1.19/bin/go; fi
fi
[[ -x "$gprobe" ]] || { echo "no gprobe at $gprobe: cargo build --release -p gprobe-agent" >&2; exit 1; }
tmp="$(mktemp -d)"
gp=""
stop_gprobe() {
  if [[ -n "$gp" ]]; then
    kill -INT "$gp" 2>/dev/null || true
    wait "$gp" 2>/dev/null || true
    gp=""
  fi
}
trap 'stop_gprobe; rm -rf "$tmp"' EXIT
(cd "$here/go/spawn" && GOTOOLCHAIN=local GO111MODULE=off GOFLAGS='' CGO_ENABLED=0 \
  GOCACHE="$tmp/go/cache" GOPATH="$tmp/go/path" "$go" build -o "$tmp/spawn" .)
run_with() { # NAME PROBES_YAML
  cat >"$tmp/spec.yaml" <<YAML
apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {name: spawn}
spec:
  selector: {executable: $tmp/spawn}
  limits: {eventsPerSecond: 0, maxOverheadPercent: 0}
  probes: $2
YAML
  "$gprobe" run "$tmp/spec.yaml" >/dev/null 2>"$tmp/err" &
  gp=$!
  for _ in $(seq 300); do grep -q "ready: tracing" "$tmp/err" && break; sleep 0.1; done
  echo "$1: $("$tmp/spawn" -n "$n")"
  stop_gprobe
}
echo "alone: $("$tmp/spawn" -n "$n")"
run_with "flat (work, no latency)" "[{symbol: main.work}]"
run_with "nested (handle with latency, work; newproc1 probe)" \
  "[{symbol: main.handle, latency: true}, {symbol: main.work}]"
