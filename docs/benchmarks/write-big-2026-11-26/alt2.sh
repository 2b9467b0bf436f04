#!/bin/bash
# usage: alt2.sh WORKLOAD PAIRS LABEL=BIN[:WRITER_MAX] ...: alternates the variants; each run is
# tsblob then limit-store in one bench; prints rec/s, server CPU us/record and tsblob/limit-store
w=$1; n=$2; shift 2
for i in $(seq 1 $n); do for v in "$@"; do
lab=${v%%=*}; rest=${v#*=}; b=${rest%%:*}; wm=${rest#*:}; [ "$wm" = "$rest" ] && wm=
out=./alt-$lab-$i.json
l=$(cut -d' ' -f1 /proc/loadavg)
if [ -n "$wm" ]; then export TSBLOB_EXP_WRITER_MAX=$wm; else unset TSBLOB_EXP_WRITER_MAX; fi
$b bench --workload $w --tsblob-bin $b --against limit-store --no-progress --json $out --work-dir ./work >/dev/null 2>&1 || echo FAILED
python3 - $out "$lab" "$l" <<'PY'
import json,sys
r=json.load(open(sys.argv[1]))
rows={}
for c in r["cells"]:
    s=c.get("result")
    if not s or not s.get("records"): continue
    cpu=c.get("server_cpu_s")
    rows[(c["phase"],c["size"],c.get("target"))]=(s["records_per_s"], cpu*1e6/s["records"] if cpu is not None else float('nan'))
for (ph,sz,t),(rate,us) in rows.items():
    if t=="limit-store": continue
    ls=rows.get((ph,sz,"limit-store"),(float('nan'),float('nan')))
    print(f'{sys.argv[2]:8} load={sys.argv[3]:5} {ph:12} {sz:>8} {rate:>8.0f} rec/s cpu={us:7.1f} us/rec | limit-store {ls[0]:8.0f} rec/s cpu={ls[1]:6.1f} | ratio {100*rate/ls[0]:5.1f} %')
PY
done; done
