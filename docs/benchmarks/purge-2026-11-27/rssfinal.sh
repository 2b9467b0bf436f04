#!/bin/bash
# rssfinal.sh BIN: three pairs, the binary's own purge delay against 1,000 ms for the server
s="$(cd "$(dirname "$0")/../../../scripts" && pwd)/rss-ingest.sh"
for i in 1 2 3; do
 echo "== $i change (bin default) load $(cut -d' ' -f1 /proc/loadavg)"; "$s" "$1" 2>&1 | grep -E "VmHWM|rate="
 echo "== $i server-env-1000 load $(cut -d' ' -f1 /proc/loadavg)"; SERVER_ENV=MIMALLOC_PURGE_DELAY=1000 "$s" "$1" 2>&1 | grep -E "VmHWM|rate="
done
