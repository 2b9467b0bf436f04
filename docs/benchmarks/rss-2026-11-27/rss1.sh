#!/bin/bash
# usage: rss1.sh BIN SIZE COUNT [ENV...]: fresh server, one loadgen phase over 16 conns; VmHWM, threads
b=$1; size=$2; count=$3; shift 3
d=$(mktemp -d "${TMPDIR:-/tmp}/rss1.XXXX"); port=$((20000 + RANDOM % 20000))
env "$@" $b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
TSBLOB_URL=http://127.0.0.1:$port $b loadgen --server-pid $pid --mode post --bucket big --size $size --conns 16 --count $count 2>&1 | grep -E "rate="
echo "[$*] $size: VmHWM $(awk '/^VmHWM:/ {printf "%.1f MB", $2*1024/1e6}' /proc/$pid/status) RssAnon $(awk '/^RssAnon:/ {printf "%.1f MB", $2*1024/1e6}' /proc/$pid/status) threads $(ls /proc/$pid/task | wc -l)"
kill $pid; wait $pid 2>/dev/null; rm -rf $d
