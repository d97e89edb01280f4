#!/bin/sh
# Runs every fuzz target for SECONDS each (default 60), seeded from the
# spec's vectors and the fixtures. Not part of CI.
#
# With a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`):
# libFuzzer, coverage-guided. Otherwise, or with FUZZ_ENGINE=replay: the
# same target bodies under the stable replay runner (seeds, then random
# mutations of them). Crashes are written to fuzz/artifacts/<target>/.
set -eu
cd "$(dirname "$0")"
SECONDS_EACH="${1:-60}"
TARGETS="wire_feed gate_request capture_reader binaryfile_reader fills_events iex_tops_feed nasdaq_itch_feed soupbin_glimpse rerequest_answers cme_sbe cboe_pitch"
engine="${FUZZ_ENGINE:-}"
if [ -z "$engine" ]; then
    if cargo +nightly fuzz --version >/dev/null 2>&1; then engine=libfuzzer; else engine=replay; fi
fi
if [ "$engine" = replay ]; then
    exec cargo run --release --bin replay -- --seconds "$SECONDS_EACH" $TARGETS
fi
# FUZZ_SANITIZER=none skips AddressSanitizer (several times faster; the
# targets' panics and aborts are still caught). Each run builds only its
# own target: a bare `cargo fuzz build` would also instrument the stable
# `replay` runner, which does not link libFuzzer, and fail to link.
sanitizer="${FUZZ_SANITIZER:-address}"
cargo run --release --bin replay -- --write-seeds corpus $TARGETS
for t in $TARGETS; do
    cargo +nightly fuzz run -O -s "$sanitizer" --features libfuzzer "$t" "corpus/$t" -- \
        -max_total_time="$SECONDS_EACH" -print_final_stats=1 2>&1 | tail -n 12
done
