#!/usr/bin/env bash
# The demo: builds gprobe and the http-client example (a Go program that fetches URLs from
# a server it starts on loopback), then traces it with `gprobe run`, printing each call of
# net/http.(*Client).Get as a JSON line: its URL, error and latency. Needs root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
cargo build --release --locked -p gprobe-agent
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd examples/http-client &&
  GOTOOLCHAIN=local GO111MODULE=off GOCACHE="$work/gocache" GOPATH="$work/gopath" CGO_ENABLED=0 \
    go build -o "$work/http-client" .)

echo "== tracing $work/http-client with examples/http-client/probespec.yaml" >&2
target/release/gprobe run examples/http-client/probespec.yaml --output jsonl --duration 6s \
  2> >(tee "$work/gprobe.log" >&2) &
gprobe_pid=$!
# Start the example once gprobe is ready: it is then held at exec and traced from its
# first call.
for _ in $(seq 300); do
  grep -q "ready: tracing" "$work/gprobe.log" 2>/dev/null && break
  kill -0 "$gprobe_pid" 2>/dev/null || break
  sleep 0.1
done
"$work/http-client" -n 5 -interval 300ms >/dev/null
wait "$gprobe_pid"
