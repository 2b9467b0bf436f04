#!/bin/bash
# usage: ab.sh BIN ENVSPEC [WORKLOAD N] — BIN a release tsblob; ENVSPEC e.g. TOKIO_WORKER_THREADS=1 (X=1: none)
# usage: ab.sh BIN ENVSPEC — one bench of w1k.toml against a fresh server started with ENVSPEC env
b=$1; envspec=$2; wl=${3:-../write-1k-intel-2026-11-27/w1k.toml}; n=${4:-20000}
d=$(mktemp -d /tmp/ab-d.XXXX); port=$((20000 + RANDOM % 20000))
env $envspec $b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
c0=$(awk '{print $14+$15}' /proc/$pid/stat)
line=$($b bench --workload $wl --repeat 1 --no-progress --tsblob-url http://127.0.0.1:$port 2>&1 | grep -E "KiB.*tsblob" | head -1)
c1=$(awk '{print $14+$15}' /proc/$pid/stat)
echo "$envspec | $line | cpu/op $(echo "($c1 - $c0) * 1000000 / $(getconf CLK_TCK) / $n" | bc -l | cut -c1-6) us"
kill $pid; wait $pid 2>/dev/null; rm -rf $d
