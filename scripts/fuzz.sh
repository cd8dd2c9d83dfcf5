#!/usr/bin/env bash
# Runs each fuzz target of gprobe's parsers of binary input for a fixed time (GPROBE_FUZZ_SECONDS,
# 20 s by default): USDT notes (stapsdt), Go's tables (go_tables: pclntab, module data, build
# info) and DWARF (dwarf); then each of the parsers of text a user writes for a shorter time
# (GPROBE_FUZZ_TEXT_SECONDS, 3 s by default: they run a hundred times as many inputs a second):
# `when:` (when), Go signatures (go_signature), C prototypes (c_signature), capture entries and
# field paths (capture), `gprobe trace` expressions (oneliner). See fuzz/README.md.
#
# The fuzzers start from seeds made of real binaries' sections (written by the test
# agent/tests/fuzz_inputs.rs) and of the examples' ProbeSpecs and the README's expressions
# (crds/tests/fuzz_text.rs), plus the corpus they grew before. An input that crashes a
# target is left in fuzz/artifacts/<target>/ and the script fails: fix the parser, then keep
# the input in fuzz/regressions/<target>/, where every `cargo test` replays it.
#
# cargo-fuzz (scripts/setup.sh --test installs it) builds with coverage instrumentation and
# without a sanitizer (`--sanitizer none`: Rust's own bounds and overflow checks find the
# bugs; the sanitizers need a nightly compiler, this machine has stable Rust). The build
# folder is kept outside the checkout (GPROBE_FUZZ_TARGET_DIR, ~/.cache/gprobe/fuzz-target by
# default) so that a new checkout of the same machine does not build everything again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs="${GPROBE_FUZZ_SECONDS:-20}"
text_secs="${GPROBE_FUZZ_TEXT_SECONDS:-3}"
target_dir="${GPROBE_FUZZ_TARGET_DIR:-$HOME/.cache/gprobe/fuzz-target}"
corpus="${GPROBE_FUZZ_CORPUS:-$HOME/.cache/gprobe/fuzz-corpus}"
targets=(stapsdt go_tables dwarf)
text_targets=(when go_signature c_signature capture oneliner)

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz is not installed: run scripts/setup.sh --test" >&2
  exit 1
fi
# Seeds: sections of real binaries, checked to reach the parsers (the test fails if not).
GPROBE_FUZZ_SEEDS="$corpus" cargo test -q -p gprobe-agent --locked --test fuzz_inputs
GPROBE_FUZZ_SEEDS="$corpus" cargo test -q -p gprobe-crds --locked --test fuzz_text

# -a: debug assertions and overflow checks, as in the test builds.
build=(--sanitizer none -a --codegen-units 16 --target-dir "$target_dir" --fuzz-dir fuzz)
cargo fuzz build "${build[@]}"

failed=()
for t in "${targets[@]}" "${text_targets[@]}"; do
  t_secs="$secs"
  if [[ " ${text_targets[*]} " == *" $t "* ]]; then
    t_secs="$text_secs"
  fi
  mkdir -p "$corpus/$t" "fuzz/artifacts/$t"
  echo "fuzz: $t for ${t_secs}s ($(find "$corpus/$t" -type f | wc -l) inputs to start from)"
  if ! cargo fuzz run "${build[@]}" "$t" "$corpus/$t" -- \
    -max_total_time="$t_secs" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="fuzz/artifacts/$t/" 2>"fuzz/artifacts/$t.log"; then
    tail -40 "fuzz/artifacts/$t.log" >&2
    failed+=("$t")
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "fuzz/artifacts/$t.log" | tr '\n' ' '
    echo
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: crashes in ${failed[*]}: inputs in fuzz/artifacts/<target>/ (replay one with" \
    "cargo fuzz run --sanitizer none -a <target> FILE); fix the parser and keep the input in" \
    "fuzz/regressions/<target>/" >&2
  exit 1
fi
