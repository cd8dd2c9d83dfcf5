#!/usr/bin/env bash
# The demo: builds gprobe and the http-client example (a Go program that fetches URLs from
# a server it starts on loopback), then runs it under `gprobe run -- CMD`, printing each call
# of net/http.(*Client).Get as a JSON line: its URL, error and latency. Needs root.
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
# gprobe starts the example itself, held before its first instruction until its probe is
# attached (so its first GET, made at once, is traced too), and exits with the example's
# status when it ends. The calls are JSON lines on stdout; the example's own lines go to
# stdout on a terminal, to stderr when stdout is piped.
target/release/gprobe run examples/http-client/probespec.yaml --output jsonl -- \
  "$work/http-client" -n 5 -interval 300ms -delay 0
