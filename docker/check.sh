#!/usr/bin/env bash
# Validates docker/ without a Docker engine (images can be neither pulled nor built where CI
# runs):
#   1. compose.yml against the Compose Specification: `docker compose config` when the
#      compose plugin exists, otherwise the Compose Specification's own validator
#      (compose-go, the loader `docker compose` is built on), installed once with `go install`
#      into ${TSBLOB_CACHE:-~/.cache/tsblob}/tools.
#   2. the Dockerfile says what the image promises (non-root user, /data volume, health
#      check, listening on all interfaces) and builds with the same cargo command as
#      scripts/serve.sh, so that the binary CI builds and tests is the one the image ships.
# Exits non-zero on the first problem.
set -euo pipefail
cd "$(dirname "$0")/.."

COMPOSE_GO_VERSION="v2.16.2"
cache="${TSBLOB_CACHE:-$HOME/.cache/tsblob}"
fail() { echo "docker/check: $*" >&2; exit 1; }

# Interpolation needs no real secrets: compose.yml has defaults for every variable.
echo "-- docker/compose.yml"
if docker compose version >/dev/null 2>&1; then
  docker compose -f docker/compose.yml config --quiet || fail "docker compose config refused docker/compose.yml"
  echo "valid (docker compose config)"
else
  tools="$cache/tools"
  validator="$tools/compose-spec"
  stamp="$tools/compose-spec.version"
  if [ ! -x "$validator" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$COMPOSE_GO_VERSION" ]; then
    echo "no docker compose plugin: installing the Compose Specification validator (compose-go $COMPOSE_GO_VERSION)"
    mkdir -p "$tools/gobin"
    GOBIN="$tools/gobin" GOFLAGS="${GOFLAGS:-} -trimpath" \
      go install "github.com/compose-spec/compose-go/v2/cmd@$COMPOSE_GO_VERSION"
    mv "$tools/gobin/cmd" "$validator"
    echo "$COMPOSE_GO_VERSION" >"$stamp"
  fi
  # Run from docker/ so relative paths resolve as `docker compose -f docker/compose.yml` would.
  (cd docker && "$validator" compose.yml >/dev/null) || fail "docker/compose.yml does not follow the Compose Specification"
  echo "valid (compose-go $COMPOSE_GO_VERSION validator)"
fi

# Every image is pinned: a tag that is neither `latest` nor missing.
grep -E '^\s+image:' docker/compose.yml | grep -v 'tsblob:local' | while read -r _ image; do
  case "$image" in
    *:latest | *:*latest* ) fail "image $image is not pinned" ;;
    *:* ) ;;
    * ) fail "image $image has no tag" ;;
  esac
done

echo "-- docker/Dockerfile"
df=docker/Dockerfile
build_cmd='cargo build --release --locked -p tsblob-server --bin tsblob'
grep -qF "$build_cmd" scripts/serve.sh || fail "scripts/serve.sh no longer runs \`$build_cmd\`: update docker/Dockerfile and this check"
grep -qF "$build_cmd" "$df" || fail "$df does not build with \`$build_cmd\` (the command CI tests)"
[ "$(grep -c '^FROM ' "$df")" -ge 2 ] || fail "$df is not multi-stage"
grep -qE '^USER +[a-z]' "$df" || fail "$df does not switch to a named non-root user"
grep -qE '^USER +root' "$df" && fail "$df runs as root"
grep -qE '^VOLUME +\[?"?/data' "$df" || fail "$df has no /data volume"
grep -qE '^HEALTHCHECK .*' "$df" || fail "$df has no HEALTHCHECK"
grep -qE 'TSBLOB_LISTEN=0\.0\.0\.0:8686' "$df" || fail "$df does not listen on all interfaces"
grep -qE '^CMD \["serve"\]' "$df" || fail "$df does not run tsblob serve"
echo "ok"
