#!/usr/bin/env bash
# schemathesis against the OpenAPI document a real `tsblob serve` serves
# (reliability/schemathesis/test_schema.py): no 5xx, every answer as documented.
# Installs schemathesis into a virtualenv under ~/.cache/tsblob (never into the repo).
#   reliability/run_schemathesis.sh [examples per operation=60]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache="${TSBLOB_CACHE:-$HOME/.cache/tsblob}"
venv="$cache/schemathesis-venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# pytest 9 breaks schemathesis 4's pytest plugin (AttributeError: _nodeid).
"$venv/bin/python" -m pip install --quiet 'schemathesis>=4.30,<5' 'pytest>=8,<9'
if [ -z "${TSBLOB_BIN:-}" ]; then
  cargo build --release --locked -p tsblob-server --bin tsblob
  export TSBLOB_BIN="$root/target/release/tsblob"
fi
export TSBLOB_ST_EXAMPLES="${1:-${TSBLOB_ST_EXAMPLES:-60}}"
"$venv/bin/python" -m pytest -q -p no:cacheprovider reliability/schemathesis/test_schema.py
