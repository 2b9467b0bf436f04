#!/bin/bash
# usage: alt.sh WORKLOAD PAIRS BIN_A BIN_B ...: alternates the binaries, prints rec/s and server CPU us/record per run
w=$1; n=$2; shift 2
for i in $(seq 1 $n); do for b in "$@"; do
out=./alt-$(basename $b)-$i.json
l=$(cut -d' ' -f1 /proc/loadavg)
$b bench --workload $w --tsblob-bin $b --no-progress --json $out --work-dir ./work >/dev/null 2>&1 || echo FAILED
python3 - $out "$(basename $b)" "$l" <<'PY'
import json,sys
r=json.load(open(sys.argv[1]))
for c in r["cells"]:
    s=c.get("result")
    if not s or not s.get("records"): continue
    cpu=c.get("server_cpu_s")
    us = cpu*1e6/s["records"] if cpu is not None else float('nan')
    print(f'{sys.argv[2]:12} load={sys.argv[3]:5} {c["phase"]:12} {c["size"]:>8} {s["records_per_s"]:>10.0f} rec/s  cpu={us:6.2f} us/rec')
PY
done; done
