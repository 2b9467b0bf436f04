#!/bin/bash
# rssabc.sh BIN ROUNDS: per round three 10 GB ingests (scripts/rss-ingest.sh): A the binary's
# own purge delay; B MIMALLOC_PURGE_DELAY=50 for the server only; C the same for the server
# and the loadgen client.
s="$(cd "$(dirname "$0")/../../../scripts" && pwd)/rss-ingest.sh"
b=$1; n=$2
for i in $(seq 1 $n); do
  echo "== $i A code-default load $(cut -d' ' -f1 /proc/loadavg)"; "$s" $b 2>&1 | grep -E "VmHWM|rate="
  echo "== $i B server-env-50 load $(cut -d' ' -f1 /proc/loadavg)"; SERVER_ENV=MIMALLOC_PURGE_DELAY=50 "$s" $b 2>&1 | grep -E "VmHWM|rate="
  echo "== $i C both-env-50 load $(cut -d' ' -f1 /proc/loadavg)"; MIMALLOC_PURGE_DELAY=50 "$s" $b 2>&1 | grep -E "VmHWM|rate="
done
