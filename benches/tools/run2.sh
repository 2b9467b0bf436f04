#!/bin/bash
# usage: run2.sh BIN WORKLOAD AGAINST TAG -> per cell: rec/s, server CPU us/record
# (run from a scratch folder: the bench's data goes to ./work). SERVER_BIN, when set, is the
# tsblob the bench starts as its server (BIN stays the bench client), e.g. a wrapper that
# sets an environment variable for the server alone and execs BIN.
b=$1; w=$2; ag=$3; tag=$4
out=./r2-$tag-$(date +%H%M%S).json
l=$(cut -d' ' -f1 /proc/loadavg)
$b bench --workload $w ${ag:+--against $ag} --tsblob-bin ${SERVER_BIN:-$b} --no-progress --json $out --work-dir ./work >/dev/null 2>&1 || echo FAILED
python3 - $out "$tag" "$l" <<'PY'
import json,sys
r=json.load(open(sys.argv[1]))
for c in r["cells"]:
    s=c.get("result")
    if not s: continue
    cpu=c.get("server_cpu_s")
    us = cpu*1e6/s["records"] if cpu is not None and s["records"] else float('nan')
    print(f'{sys.argv[2]:8} load={sys.argv[3]:5} {c["phase"]:12} {c["size"]:>8} {c["target"]:12} {s["records_per_s"]:>10.0f} rec/s  cpu={us:6.2f} us/rec')
PY
