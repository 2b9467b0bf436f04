#!/usr/bin/env bash
# Installs the pinned client tools the tests drive (issue 29: ReductStore's own clients
# against tsblob) from the package registries into a cache folder outside the clone, so a
# warm machine skips rebuilding them.
#
#   scripts/install-tools.sh            # installs into ${TSBLOB_CACHE:-~/.cache/tsblob}/tools
#   eval "$(scripts/install-tools.sh --print-path)"   # puts them on PATH
#
# reduct-cli: `cargo install` of the pinned crate; its binary is `reduct-cli`, linked as `rcli`
# (the name ReductStore's documentation uses). 0.13.0 is built on reduct-rs
# 1.21.0, the client of ReductStore 1.21 (the API level tsblob's adapter speaks and the
# version of the ReductStore peer, scripts/install-peers.sh).
set -euo pipefail

REDUCT_CLI_VERSION="0.13.0"

cache="${TSBLOB_CACHE:-$HOME/.cache/tsblob}"
tools="$cache/tools"
rcli_root="$tools/reduct-cli"
bin="$rcli_root/bin"

if [ "${1:-}" = "--print-path" ]; then
  echo "export PATH=\"$bin:\$PATH\""
  exit 0
fi

mkdir -p "$tools"

# A stamp file records the pinned version, so a changed pin rebuilds.
stamp="$tools/reduct-cli.version"
if [ -x "$bin/reduct-cli" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$REDUCT_CLI_VERSION" ]; then
  echo "reduct-cli $REDUCT_CLI_VERSION: cached in $bin"
else
  echo "reduct-cli $REDUCT_CLI_VERSION: cargo install (this takes a few minutes the first time)"
  # A target dir of its own keeps the tool's build out of the project's target/. --locked
  # first (the crate's own lock file is what its authors tested); a registry mirror that
  # lacks a version it pins: resolve afresh within its Cargo.toml's ranges, and say so.
  rcli_install() {
    CARGO_TARGET_DIR="$tools/reduct-cli-target" cargo install reduct-cli \
      --version "$REDUCT_CLI_VERSION" --root "$rcli_root" "$@"
  }
  if ! rcli_install --locked; then
    echo "reduct-cli: its Cargo.lock does not resolve against this registry; retrying without --locked" >&2
    rcli_install
  fi
  echo "$REDUCT_CLI_VERSION" >"$stamp"
  rm -rf "$tools/reduct-cli-target"
fi
ln -sf reduct-cli "$bin/rcli"

echo "tools ready in $bin"
