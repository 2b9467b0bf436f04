#!/bin/bash
# usage: perfrun.sh BIN WORKLOAD TAG: a manual server, perf (dwarf) over the whole bench run
b=$1; w=$2; tag=$3
d=$(mktemp -d ./d.XXXX); port=$((20000 + RANDOM % 20000))
$b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
perf record -F 2999 --call-graph dwarf,16384 -o ./$tag.perf -p $pid 2>/dev/null & pp=$!
sleep 0.5
$b bench --workload $w --no-progress --tsblob-url http://127.0.0.1:$port > ./$tag.out 2>&1
kill -INT $pp; wait $pp
kill $pid; wait $pid 2>/dev/null; rm -rf $d
