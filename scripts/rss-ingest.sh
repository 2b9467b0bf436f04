#!/usr/bin/env bash
# Release RSS while ingesting (issue 30's memory target: ≤ 100 MB at peak over 10 GB).
# Starts a release `tsblob serve` on a fresh folder, writes GB gigabytes (default 10) with
# the hidden `tsblob loadgen` over CONNS connections (default 16): half as 1 MiB single
# writes, then half as 100 KiB single writes. A sampler reads the server's /proc status
# every 0.2 s; printed: VmHWM (the kernel's peak), the sampled peak with its anonymous and
# file parts, and /proc/PID/smaps_rollup at the sampled peak. The data is deleted at exit.
#
#   scripts/rss-ingest.sh [path/to/tsblob] [-- extra serve flags...]
#
# SERVER_ENV="NAME=VALUE ..." is set for the server alone (not for `tsblob loadgen`), e.g.
# SERVER_ENV=MIMALLOC_PURGE_DELAY=1000 for mimalloc's own default purge delay.
set -euo pipefail
bin="${1:-target/release/tsblob}"
shift || true
[ "${1:-}" = "--" ] && shift
gb="${GB:-10}"
conns="${CONNS:-16}"
port="${PORT:-18731}"
data="$(mktemp -d "${TMPDIR:-/tmp}/tsblob-rss.XXXXXX")"
url="http://127.0.0.1:$port"
export TSBLOB_URL="$url"
unset TSBLOB_TOKEN
# shellcheck disable=SC2086 # SERVER_ENV is a list of NAME=VALUE words
env ${SERVER_ENV:-} "$bin" serve --data "$data" --listen "127.0.0.1:$port" --log warn "$@" &
pid=$!
sampler=
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT
for _ in $(seq 100); do curl -sf "$url/health" >/dev/null && break; sleep 0.1; done
peak_file="$data.peak"
(
  peak=0
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    if [ "${rss:-0}" -gt "$peak" ]; then
      peak=$rss
      { grep -E '^(VmRSS|RssAnon|RssFile|RssShmem):' "/proc/$pid/status"
        echo "-- smaps_rollup"; cat "/proc/$pid/smaps_rollup"; } > "$peak_file" 2>/dev/null || true
    fi
    sleep 0.2
  done
) &
sampler=$!
half=$(( gb * 1024 / 2 ))                # MiB per half
echo "ingest ${gb} GB over $conns connections into $data (load $(cut -d' ' -f1-3 /proc/loadavg))"
"$bin" loadgen --server-pid "$pid" --mode post --bucket big --size 1MiB --conns "$conns" --count "$half"
"$bin" loadgen --server-pid "$pid" --mode post --bucket small --size 100KiB --conns "$conns" \
  --count $(( half * 1024 / 100 ))
sleep 1
echo "== VmHWM: $(awk '/^VmHWM:/ {printf "%.1f MB", $2*1024/1e6}' /proc/$pid/status); now $(awk '/^VmRSS:/ {printf "%.1f MB", $2*1024/1e6}' /proc/$pid/status)"
echo "== sampled peak:"
cat "$peak_file"
rm -f "$peak_file"
