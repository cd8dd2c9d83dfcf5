#!/usr/bin/env bash
# What reading a handler's incoming traceparent costs per call (BENCHMARKS.md, section 8): the BPF
# program's run time per hit (kernel.bpf_stats_enabled) of a probe on bench/go/handler's
# handle(w, r *http.Request), whose r.Header gprobe searches at every call, against the
# same probe without the search, for requests of 3 to 150 headers. Needs root (BPF).
#
#   bench/traceparent.sh                   builds gprobe (release) and the Go target
#   bench/traceparent.sh --gprobe PATH     an already built gprobe (the BPF program is the
#                                          same in debug and release builds)
#   bench/traceparent.sh --rounds 7 --calls 500000
#   bench/traceparent.sh --gprobe NEW --baseline OLD   two builds, each configuration run by
#                                          both in turn, in the same rounds
#   GO=/usr/lib/go-1.19/bin/go bench/traceparent.sh   the target built by another Go
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bench/lib/bpf_cost.sh
source "$here/lib/bpf_cost.sh"
bpf_cost "$0" 13 handler traceparent_bench.py --handler "$@"
