#!/bin/bash
# usage: rss.sh BIN WORKLOAD TAG: a manual server under one bench run; peak VmRSS / RssFile / RssAnon (kB) sampled every 20 ms
b=$1; w=$2; tag=$3
d=$(mktemp -d ./d.XXXX); port=$((20000 + RANDOM % 20000))
$b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
( while kill -0 $pid 2>/dev/null; do grep -E "^(VmRSS|RssAnon|RssFile)" /proc/$pid/status | tr -s ' ' | tr '\n' ' '; echo; sleep 0.02; done ) > ./$tag.rss &
sp=$!
$b bench --workload $w --no-progress --tsblob-url http://127.0.0.1:$port > ./$tag.out 2>&1
kill $pid; wait $pid 2>/dev/null; sleep 0.1; kill $sp 2>/dev/null; rm -rf $d
python3 - ./$tag.rss "$tag" <<'PY'
import sys
rows=[dict(zip(l.split()[0::3],map(int,l.split()[1::3]))) for l in open(sys.argv[1]) if l.strip() and len(l.split())>=9]
k=lambda n: max(r.get(n+':',0) for r in rows)
print(f"{sys.argv[2]}: samples {len(rows)} peak VmRSS {k('VmRSS')} kB, RssFile {k('RssFile')} kB, RssAnon {k('RssAnon')} kB")
PY
