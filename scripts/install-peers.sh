#!/usr/bin/env bash
# Installs the pinned comparison peers (MinIO, ReductStore) and the tier's second S3 engine
# (SeaweedFS) from the package registries into a
# cache folder outside the clone, so a warm machine skips rebuilding them.
#
#   scripts/install-peers.sh            # installs into ${TSBLOB_CACHE:-~/.cache/tsblob}/peers
#   eval "$(scripts/install-peers.sh --print-path)"   # puts them on PATH
#
# MinIO publishes source only: `go install` of the pinned module version.
# ReductStore: `cargo install` of the pinned crate, without default features.
# SeaweedFS publishes source only too; its go.mod has a replace directive, which
# `go install module@version` refuses: the pinned module is downloaded and its `weed`
# command built inside it (its go.mod and go.sum as its authors tested them). It needs the
# Go its go.mod names (1.26.6); with an older Go, set GOTOOLCHAIN (e.g. go1.27.3) to fetch one.
set -euo pipefail

MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"
REDUCTSTORE_VERSION="1.21.5"
SEAWEEDFS_VERSION="v0.0.0-20261109003541-7506e5f91cd6"

cache="${TSBLOB_CACHE:-$HOME/.cache/tsblob}"
peers="$cache/peers"
bin="$peers/bin"

if [ "${1:-}" = "--print-path" ]; then
  echo "export PATH=\"$bin:\$PATH\""
  exit 0
fi

mkdir -p "$bin"

# A stamp file per peer records the pinned version, so a changed pin rebuilds.
minio_stamp="$peers/minio.version"
if [ -x "$bin/minio" ] && [ "$(cat "$minio_stamp" 2>/dev/null)" = "$MINIO_VERSION" ]; then
  echo "minio $MINIO_VERSION: cached in $bin"
else
  echo "minio $MINIO_VERSION: go install (this takes several minutes the first time)"
  GOBIN="$bin" GOFLAGS="${GOFLAGS:-} -trimpath" go install "github.com/minio/minio@$MINIO_VERSION"
  echo "$MINIO_VERSION" >"$minio_stamp"
fi

rs_stamp="$peers/reductstore.version"
if [ -x "$bin/reductstore" ] && [ "$(cat "$rs_stamp" 2>/dev/null)" = "$REDUCTSTORE_VERSION" ]; then
  echo "reductstore $REDUCTSTORE_VERSION: cached in $bin"
else
  echo "reductstore $REDUCTSTORE_VERSION: cargo install (this takes several minutes the first time)"
  # A target dir of its own keeps the peer's build out of the project's target/.
  # --locked first: the crate's own lock file is what its authors tested. A registry mirror
  # may lack a version that lock pins (a yanked or not yet mirrored crate): then resolve
  # afresh within the semver ranges of its Cargo.toml, and say so.
  rs_install() {
    CARGO_TARGET_DIR="$peers/target" cargo install reductstore --version "$REDUCTSTORE_VERSION" \
      --no-default-features --features fs-backend --root "$peers" "$@"
  }
  if ! rs_install --locked; then
    echo "reductstore: its Cargo.lock does not resolve against this registry; retrying without --locked" >&2
    rs_install
  fi
  echo "$REDUCTSTORE_VERSION" >"$rs_stamp"
  rm -rf "$peers/target"
fi

weed_stamp="$peers/seaweedfs.version"
if [ -x "$bin/weed" ] && [ "$(cat "$weed_stamp" 2>/dev/null)" = "$SEAWEEDFS_VERSION" ]; then
  echo "seaweedfs $SEAWEEDFS_VERSION: cached in $bin"
else
  echo "seaweedfs $SEAWEEDFS_VERSION: go build (this takes several minutes the first time)"
  weed_src=$(go mod download -json "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [ -z "$weed_src" ] || [ ! -d "$weed_src/weed" ]; then
    echo "seaweedfs: go mod download did not give the module's folder" >&2
    exit 1
  fi
  (cd "$weed_src" && GOFLAGS="${GOFLAGS:-} -trimpath -mod=readonly" go build -o "$bin/weed.partial" ./weed)
  mv "$bin/weed.partial" "$bin/weed"
  echo "$SEAWEEDFS_VERSION" >"$weed_stamp"
fi

echo "peers ready in $bin"
