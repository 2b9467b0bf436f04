#!/bin/bash
# usage: run.sh BIN WORKLOAD RECORDS [perf] -> server CPU us/record, rate table line
b=$1; w=$2; recs=$3; mode=$4
d=$(mktemp -d ./d.XXXX); port=$((20000 + RANDOM % 20000))
$b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
tck=$(getconf CLK_TCK)
c0=$(awk '{print $14+$15}' /proc/$pid/stat); l=$(cut -d' ' -f1 /proc/loadavg)
case "$mode" in
 perf) perf record -F 500 --call-graph dwarf,16384 -o $w.$(basename $b).perf -p $pid 2>/dev/null & pp=$!;;
 strace) strace -c -f -o $w.$(basename $b).strace -p $pid & pp=$!;;
esac
sleep 0.3
out=$($b bench --workload $w --no-progress --tsblob-url http://127.0.0.1:$port 2>&1)
c1=$(awk '{print $14+$15}' /proc/$pid/stat)
[ -n "$pp" ] && { kill -INT $pp; wait $pp; }
kill $pid; wait $pid 2>/dev/null; rm -rf $d
echo "$out" > $w.$(basename $b).last
us=$(echo "($c1 - $c0) * 1000000 / $tck / $recs" | bc -l)
printf "%s load=%s %s %s CPU/rec=%.2fus\n" $(date -u +%H:%M:%S) $l $(basename $b) $w $us
echo "$out" | grep -E "KiB" | grep -E 'tsblob|limit' | head -4
