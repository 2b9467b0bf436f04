#!/bin/bash
# run3.sh ENVSPEC OUT
b=${TSBLOB:-../../../target/release/tsblob}; envspec=$1; out=$2
d=$(mktemp -d /tmp/ab-d.XXXX); port=$((20000 + RANDOM % 20000))
env $envspec $b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
c0=$(awk '{print $14+$15}' /proc/$pid/stat)
$b bench --workload mix.toml --repeat 1 --no-progress --tsblob-url http://127.0.0.1:$port --markdown $out.md > $out.log 2>&1
c1=$(awk '{print $14+$15}' /proc/$pid/stat)
echo "$envspec server cpu s: $(echo "($c1 - $c0) / $(getconf CLK_TCK)" | bc -l)" >> $out.log
kill $pid; wait $pid 2>/dev/null; rm -rf $d
