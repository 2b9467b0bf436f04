#!/usr/bin/env bash
# Quick start, command 2: installs what the tests need and runs every test.
#   - the comparison peers (MinIO, ReductStore) and the tier's second S3 engine (SeaweedFS),
#     pinned, cached in ~/.cache/tsblob/peers (the tier, restore and read-replica tests run
#     against MinIO and against a SeaweedFS cluster: `cargo test ... seaweedfs` runs those)
#   - a Python virtualenv for the SDK tests, cached in ~/.cache/tsblob/venv
#   - the Rust workspace tests (engine, server, comparison mode against the real peers)
#   - the Python SDK tests against a real `tsblob serve`
#   - the web console's tests in Debian's Chromium (scripts/install-browser.sh), driven by
#     Playwright for Python (installed into the venv)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache="${TSBLOB_CACHE:-$HOME/.cache/tsblob}"

echo "== import cycles"
# Module-level import cycles inside a crate (scripts/import-cycles.py): none in storage/
# or server/ (issue 26): a new one fails the run.
python3 scripts/import-cycles.py --self-test
python3 scripts/import-cycles.py storage
python3 scripts/import-cycles.py server

echo "== code map"
# docs/architecture.md's code map names every module (scripts/check-code-map.py).
python3 scripts/check-code-map.py --self-test
python3 scripts/check-code-map.py

echo "== peers"
scripts/install-peers.sh
export TSBLOB_PEERS_BIN="$cache/peers/bin"
export PATH="$TSBLOB_PEERS_BIN:$PATH"

echo "== build"
cargo build --release --locked -p tsblob-server --bin tsblob
export TSBLOB_BIN="$root/target/release/tsblob"

# `when` against a real ReductStore (issue 28): the hand-written cases and 600 seeded
# generated conditions, on one entry and over three; any disagreement not listed in
# docs/api.md's table fails the run (about 10 s).
echo "== when: differential test against ReductStore"
python3 scripts/when_diff.py --quiet --tsblob "$TSBLOB_BIN" --reductstore "$TSBLOB_PEERS_BIN/reductstore"

echo "== rust tests"
cargo test --workspace --locked

echo "== python tests"
venv="$cache/venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -e "$root/client-py[test]"
# The console tests (client-py/tests/ui): playwright (its pip package carries its driver; the
# browser is Debian's, not a download), required here so that a missing one fails the run.
"$venv/bin/python" -m pip install --quiet "playwright>=1.40,<2"
scripts/install-browser.sh
export TSBLOB_UI_TESTS=required
# pytest exits 5 when it collects no test: that is a failure here, and set -e makes it one.
(cd client-py && "$venv/bin/python" -m pytest -q tests)
# The SDK tests again on the oldest supported CPython (3.10) and the newest the machine has,
# each in a virtualenv of its own (the console tests and the slow memory tests ran above).
# Interpreters: python3.N on PATH, or pyenv's builds (~/.pyenv/versions/3.N.*).
python_of() {
  local c
  for c in "$(command -v "python$1" || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python"$1"; do
    if [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import sys' >/dev/null 2>&1; then
      echo "$c"
      return
    fi
  done
}
main_py=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
oldest=""
newest=""
for v in 3.10 3.11 3.12 3.13 3.14 3.15; do
  if [ -n "$(python_of "$v")" ]; then
    oldest="${oldest:-$v}"
    newest="$v"
  fi
done
ran="$main_py"
for v in $oldest $newest; do
  if [[ " $ran " == *" $v "* ]]; then
    continue
  fi
  echo "== python tests on python$v"
  pv="$cache/venv-py$v"
  if [ ! -x "$pv/bin/python" ]; then
    "$(python_of "$v")" -m venv "$pv"
  fi
  "$pv/bin/python" -m pip install --quiet --upgrade pip
  "$pv/bin/python" -m pip install --quiet -e "$root/client-py[test]"
  (cd client-py && "$pv/bin/python" -m pytest -q --ignore=tests/ui -m "not slow" tests)
  ran="$ran $v"
done
echo "== python SDK tests ran on CPython $ran"

# Reliability (issue #7), step 1 of 2: schemathesis against the OpenAPI document served by
# the release binary built above (no 5xx; every answer as documented).
echo "== reliability: schemathesis"
reliability/run_schemathesis.sh
# Reliability (issue #7), step 2 of 2: 30 s of each cargo-fuzz target (block parser, batch
# framing). The crash, disk-full, quota, bad-input, token and soak tests ran with the Rust tests.
echo "== reliability: fuzz"
reliability/fuzz.sh 30
