#!/bin/bash
# ab.sh DATA BUCKET ROUNDS BIN...: for each binary in turn, serve DATA, warm up with one
# round, then print the server's CPU seconds (user + system, /proc/PID/stat) and the wall
# time of ROUNDS rounds of q.sh. Binaries are $BINS/bin-<name>/tsblob.
DATA=$1 B=$2 R=$3; shift 3
here=$(dirname "$0")
for bin in "$@"; do
  "${BINS:-.}"/bin-$bin/tsblob serve --data "$DATA" --listen 127.0.0.1:18101 --log warn &
  P=$!; sleep 1; "$here/q.sh" 18101 "$B" 1
  c0=$(awk '{print $14+$15}' /proc/$P/stat); t0=$(date +%s.%N)
  "$here/q.sh" 18101 "$B" "$R"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$P/stat)
  echo "$bin cpu=$(echo "($c1 - $c0)/100" | bc -l | cut -c1-5) wall=$(echo "$t1 - $t0" | bc | cut -c1-5) load=$(cut -d' ' -f1 /proc/loadavg)"
  kill $P; wait $P 2>/dev/null
done
