#!/bin/bash
# usage: cpu2.sh WORKLOAD RECORDS_PER_RUN ROUNDS BIN...
# As write-cpu-2-2026-11-23/cpu.sh (a fresh `serve` per run, one `bench --repeat 3`, server
# CPU ÷ records written), plus the CPU of the server's writer thread alone
# (/proc/PID/task/TID/stat of the thread named tsblob-writer).
w=$1; recs=$2; n=$3; shift 3
tck=$(getconf CLK_TCK)
for i in $(seq 1 $n); do for b in "$@"; do
  d=$(mktemp -d /tmp/wcpu4-d.XXXX); port=$((20000 + RANDOM % 20000))
  ../$b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
  for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
  wt=$(grep -l '^tsblob-writer' /proc/$pid/task/*/comm | head -1 | xargs dirname)
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); w0=$(awk '{print $14+$15}' $wt/stat); l=$(cut -d' ' -f1 /proc/loadavg)
  ../$b bench --workload $w --repeat 3 --no-progress --tsblob-url http://127.0.0.1:$port >/dev/null 2>&1
  c1=$(awk '{print $14+$15}' /proc/$pid/stat); w1=$(awk '{print $14+$15}' $wt/stat)
  kill $pid; wait $pid 2>/dev/null; rm -rf $d
  us=$(echo "($c1 - $c0) * 1000000 / $tck / (3 * $recs)" | bc -l)
  wus=$(echo "($w1 - $w0) * 1000000 / $tck / (3 * $recs)" | bc -l)
  printf "%s load=%s %-10s %s server CPU/write= %.1f us  writer thread CPU/write= %.1f us\n" $(date -u +%H:%M:%S) $l $b $w $us $wus
done; done
