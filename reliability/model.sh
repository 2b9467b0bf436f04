#!/usr/bin/env bash
# Soak run of the engine's model-based tester (storage/tests/it/model.rs) on a release test
# build: reliability/model.sh [HISTORIES] (default 20000). TSBLOB_MODEL_KILLS (default: one
# history in 50), TSBLOB_MODEL_FIRST_SEED (default: random, printed) and
# TSBLOB_MODEL_OP_TIMEOUT_SECS are passed through. Prints the summary line; a failing seed
# prints the line that reproduces it.
set -euo pipefail
cd "$(dirname "$0")/.."
histories="${1:-20000}"
first="${TSBLOB_MODEL_FIRST_SEED:-$(( (RANDOM << 15 | RANDOM) + 1 ))}"
kills="${TSBLOB_MODEL_KILLS:-$(( histories / 50 ))}"
echo "model soak: $histories histories from seed $first, $kills killed"
TSBLOB_MODEL_HISTORIES="$histories" TSBLOB_MODEL_FIRST_SEED="$first" TSBLOB_MODEL_KILLS="$kills" \
    cargo test --release -p tsblob-storage --test it -- --nocapture model::model_histories 2>&1 |
    grep -E '^(model:|races set up|VIOLATION|reproduce:|test result)'
