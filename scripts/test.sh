#!/usr/bin/env bash
# Sets up this machine (idempotently) and runs every check and test of gprobe: formatting,
# clippy, unit and end-to-end tests (real uprobes on real Go programs, real OTLP receivers,
# real containers through containerd's CRI), and the Helm chart checks. Needs root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh --test

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== Helm chart"
bash e2e/chart_test.sh
