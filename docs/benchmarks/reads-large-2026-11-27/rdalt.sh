#!/bin/bash
# usage: rdalt.sh BIN N SIZE "ENV1" "ENV2" ...: per env a fresh server, 300 records of SIZE written,
# then 2 x 1,500 point reads (rd.py, two threads); server CPU per read from /proc. PY: a Python
# with the SDK's dependencies.
b=$1; n=$2; size=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd); P=${PY:-python3}
for i in $(seq 1 $n); do
for envs in "$@"; do
  d=$(mktemp -d "${TMPDIR:-/tmp}/rdalt.XXXX"); port=$((20000 + RANDOM % 20000))
  env $envs $b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
  for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
  PYTHONPATH=$here/../../../client-py/src $P - $port $size <<'PY'
import sys, os; import tsblob
c=tsblob.Client(f'http://127.0.0.1:{sys.argv[1]}'); c.create_bucket('b'); size=int(sys.argv[2])
d=os.urandom(size)
for i in range(300): c.write('b','r', d[:-8]+i.to_bytes(8,'big'), ts=i)
PY
  sleep 1.5
  c0=$(awk '{print $14+$15}' /proc/$pid/stat)
  r=$($P $here/rd.py $port r 1500 0 300)
  c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  echo "$i [$envs] $r cpu/read $(( (c1-c0)*1000000/$(getconf CLK_TCK)/3000 )) us load $(cut -d' ' -f1 /proc/loadavg)"
  kill $pid; wait $pid 2>/dev/null; rm -rf $d
done; done
