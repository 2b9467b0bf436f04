#!/bin/bash
# usage: cpuenv.sh WORKLOAD RECORDS_PER_RUN ROUNDS "label:BIN:ENV" ...
w=$1; recs=$2; n=$3; shift 3
tck=$(getconf CLK_TCK)
for i in $(seq 1 $n); do for spec in "$@"; do
  IFS=: read -r label b envs <<< "$spec"
  d=$(mktemp -d <tmp>/d.XXXX); port=$((20000 + RANDOM % 20000))
  env $envs $b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
  for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); l=$(cut -d' ' -f1 /proc/loadavg)
  out=$($b bench --workload $w --repeat 3 --no-progress --tsblob-url http://127.0.0.1:$port 2>&1 | grep -E "^│ [0-9]+ [KM]iB +┆ tsblob" | head -1)
  c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  kill $pid; wait $pid 2>/dev/null; rm -rf $d
  rate=$(echo "$out" | awk -F'┆' '{gsub(/ /,"",$4); gsub(/ /,"",$15); print $4, $15}')
  us=$(echo "($c1 - $c0) * 1000000 / $tck / (3 * $recs)" | bc -l)
  printf "%s load=%s %-10s %s rec/s(median,range)= %s  server CPU/write= %.1f us\n" $(date -u +%H:%M:%S) $l $label $w "$rate" $us
done; done
