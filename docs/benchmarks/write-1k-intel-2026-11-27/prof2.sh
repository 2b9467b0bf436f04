#!/bin/bash
# usage: prof2.sh BIN tsblob|limit-store OUT — perf record (dwarf) of a fresh server over one
# bench --repeat 1 of w1k.toml (20,000 single 1 KiB writes, 16 users); prints server CPU/write
b=$1; kind=$2; out=$3
d=$(mktemp -d /tmp/prof2-d.XXXX); port=$((20000 + RANDOM % 20000))
case $kind in
  tsblob) $b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!;;
  limit-store) $b bench-limit --store --listen 127.0.0.1:$port --data $d --workload w1k.toml >/dev/null 2>&1 & pid=$!;;
esac
for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
perf record -F 2999 --call-graph dwarf,16384 -p $pid -o $out.data 2>/dev/null & ppid=$!
sleep 0.5
c0=$(awk '{print $14+$15}' /proc/$pid/stat)
$b bench --workload w1k.toml --repeat 1 --no-progress --tsblob-url http://127.0.0.1:$port 2>&1 | grep -E "KiB.*tsblob" | head -1
c1=$(awk '{print $14+$15}' /proc/$pid/stat)
kill -INT $ppid; wait $ppid
echo "$kind server CPU/write: $(echo "($c1 - $c0) * 1000000 / $(getconf CLK_TCK) / 20000" | bc -l) us"
kill $pid; wait $pid 2>/dev/null; rm -rf $d
