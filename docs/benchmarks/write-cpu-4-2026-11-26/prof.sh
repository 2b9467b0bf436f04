#!/bin/bash
# usage: prof.sh BIN OUT  — a fresh serve, perf record (dwarf) over one bench --repeat 1 of w1k.toml
b=$1; out=$2
d=$(mktemp -d /tmp/wcpu3-d.XXXX); port=$((20000 + RANDOM % 20000))
./$b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
perf record -F 1999 --call-graph dwarf,16384 -p $pid -o $out.data 2>/dev/null & ppid=$!
sleep 0.5
c0=$(awk '{print $14+$15}' /proc/$pid/stat)
./$b bench --workload w1k.toml --repeat 1 --no-progress --tsblob-url http://127.0.0.1:$port 2>&1 | grep -E "^│ [0-9]+ KiB ┆ tsblob" | head -1
c1=$(awk '{print $14+$15}' /proc/$pid/stat)
kill -INT $ppid; wait $ppid
echo "server CPU/write: $(echo "($c1 - $c0) * 1000000 / $(getconf CLK_TCK) / 20000" | bc -l)"
kill $pid; wait $pid 2>/dev/null; rm -rf $d
