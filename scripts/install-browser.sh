#!/usr/bin/env bash
# Installs the browser the web console's tests drive: Debian's Chromium (/usr/bin/chromium).
# Playwright's own browser download needs a CDN that edge and CI machines may not reach, so
# the tests launch this one (executable_path). As root, installs it with apt-get when it is
# missing; otherwise says how and leaves it (the tests then fail under scripts/test.sh,
# which requires them, and skip elsewhere).
set -euo pipefail
chromium="${TSBLOB_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$chromium" ]; then
  echo "browser: $("$chromium" --version 2>/dev/null || echo "$chromium")"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "browser: no Chromium at $chromium and not root: skipping the install" >&2
  echo "         install it with: sudo apt-get update && sudo apt-get install -y chromium" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "browser: no Chromium at $chromium and no apt-get: install Chromium and set TSBLOB_CHROMIUM" >&2
  exit 0
fi
echo "browser: installing Debian's chromium"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
echo "browser: $("$chromium" --version 2>/dev/null || echo "$chromium")"
