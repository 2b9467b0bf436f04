#!/bin/bash
# usage: run.sh BIN WORKLOAD RECORDS [perf|strace] -> server CPU us/record, the rate lines,
# and per thread group (writer / batch / runtime workers / other) the context switches
# (voluntary+involuntary, from /proc/PID/task/*/status) per record over the phase.
b=$1; w=$2; recs=$3; mode=$4
d=$(mktemp -d ./d.XXXX); port=$((20000 + RANDOM % 20000))
$b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
tck=$(getconf CLK_TCK)
cs() { for t in /proc/$pid/task/*; do n=$(cat $t/comm); v=$(awk '/ctxt_switches/{s+=$2} END{print s}' $t/status); echo "$n $v"; done | awk '{g=$1; if (g ~ /tokio-runtime/) g="workers"; s[g]+=$2} END{for (k in s) print k, s[k]}' | sort; }
cs > /tmp/cs0.$$
c0=$(awk '{print $14+$15}' /proc/$pid/stat); l=$(cut -d' ' -f1 /proc/loadavg)
pp=
case "$mode" in
 perf) perf record -F 4999 -o $w.$(basename $b).perf -p $pid 2>/dev/null & pp=$!;;
 strace) strace -c -f -o $w.$(basename $b).strace -p $pid & pp=$!;;
 strace-w) strace -f -e trace=futex,epoll_wait,sched_yield,write -o $w.$(basename $b).strace-w -p $pid & pp=$!;;
esac
sleep 0.3
out=$($b bench --workload $w --no-progress --against limit-store --tsblob-url http://127.0.0.1:$port 2>&1)
c1=$(awk '{print $14+$15}' /proc/$pid/stat)
cs > /tmp/cs1.$$
[ -n "$pp" ] && { kill -INT $pp; wait $pp; }
kill $pid; wait $pid 2>/dev/null; rm -rf $d
echo "$out" > $w.$(basename $b).last
us=$(echo "($c1 - $c0) * 1000000 / $tck / $recs" | bc -l)
csr=$(join /tmp/cs0.$$ /tmp/cs1.$$ | awk -v r=$recs '{printf "%s=%.2f ", $1, ($3-$2)/r}'); rm -f /tmp/cs0.$$ /tmp/cs1.$$
printf "%s load=%s %s %s CPU/rec=%.2fus cs/rec: %s\n" $(date -u +%H:%M:%S) $l $(basename $b) $w $us "$csr"
echo "$out" | grep -E "KiB" | grep -E 'tsblob|limit' | head -4
