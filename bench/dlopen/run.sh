#!/usr/bin/env bash
# What gprobe's dynamic loader hook costs: a program that dlopens and dlcloses libcrypt in
# a loop, timed alone and then while gprobe traces it with a probe on that library (the
# process is stopped at each change of its list of objects until the probes are attached).
#
#   bench/dlopen/run.sh [GPROBE_BINARY] [PAIRS]     default target/release/gprobe, 300
#
# Needs root (BPF), gcc and libcrypt1. Stops what it starts by pid.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
gprobe="${1:-$repo/target/release/gprobe}"
pairs="${2:-300}"
[[ -x "$gprobe" ]] || { echo "no gprobe at $gprobe: cargo build --release -p gprobe-agent" >&2; exit 1; }
tmp="$(mktemp -d)"
gp=""
cleanup() { [[ -n "$gp" ]] && kill -INT "$gp" 2>/dev/null && wait "$gp" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
gcc -O1 -o "$tmp/dl" "$here/dl.c"
cat >"$tmp/spec.yaml" <<YAML
apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {name: dlopen}
spec:
  selector: {executable: $tmp/dl}
  probes:
  - symbol: crypt
    library: "libcrypt.so*"
YAML
echo "alone:        $("$tmp/dl" "$pairs")"
"$gprobe" run "$tmp/spec.yaml" >"$tmp/out.jsonl" 2>"$tmp/err" &
gp=$!
for _ in $(seq 300); do grep -q "ready: tracing" "$tmp/err" && break; sleep 0.1; done
grep -q "ready: tracing" "$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
echo "with gprobe:  $("$tmp/dl" "$pairs")"
