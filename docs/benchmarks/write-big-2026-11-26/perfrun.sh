#!/bin/bash
# usage: perfrun.sh BIN WORKLOAD OUT [PATTERN [BENCH ARGS...]]: a bench of BIN, perf-recorded system-wide (-a -g) while the child matching PATTERN (default: serve) lives; prints that pid
b=$1; w=$2; out=$3; pat=${4:-serve}; shift 4 2>/dev/null
$b bench --workload $w --tsblob-bin $b --no-progress --work-dir ./work "$@" >/dev/null 2>&1 &
bp=$!
for i in $(seq 1 1000); do
  s=$(pgrep -P $bp -f -- "$pat" | head -1); [ -n "$s" ] && break; sleep 0.02
done
perf record -F 1999 -a -g -o $out -- sh -c "while kill -0 $s 2>/dev/null; do sleep 0.05; done" 2>/dev/null >/dev/null
echo $s > $out.pid
wait $bp
