#!/bin/bash
# usage: stracerun.sh BIN WORKLOAD TAG: a manual server under strace -c (write syscalls), the bench against it
b=$1; w=$2; tag=$3
d=$(mktemp -d ./d.XXXX); port=$((20000 + RANDOM % 20000))
strace -c -f -e trace=writev,write,sendmsg,sendto -o ./$tag.strace $b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
for k in $(seq 1 100); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
$b bench --workload $w --no-progress --tsblob-url http://127.0.0.1:$port > ./$tag.out 2>&1
kill -INT $(pgrep -P $pid); wait $pid 2>/dev/null; rm -rf $d
