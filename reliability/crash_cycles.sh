#!/usr/bin/env bash
# The HTTP crash harness (server/tests/it/reliability_crash.rs) for many SIGKILL cycles against
# a release build of `tsblob serve` (target/release/tsblob): every acknowledged record must
# read back byte-identical after every restart. CI runs 50 cycles through `cargo test`.
#   reliability/crash_cycles.sh [cycles=1000] [seed]
set -euo pipefail
cd "$(dirname "$0")/.."
cycles="${1:-1000}"
export TSBLOB_CRASH_CYCLES="$cycles"
if [ -n "${2:-}" ]; then
  export TSBLOB_CRASH_SEED="$2"
fi
cargo build --release --locked -p tsblob-server --bin tsblob
# --release: the test's CARGO_BIN_EXE_tsblob is then target/release/tsblob.
cargo test --release --locked -p tsblob-server --test it -- --nocapture reliability_crash::
