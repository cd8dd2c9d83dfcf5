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
# shellcheck source=bench/lib/bpf_cost.sh
source "$here/lib/bpf_cost.sh"
bpf_cost "$0" 9 chain paths_bench.py --chain "$@"
