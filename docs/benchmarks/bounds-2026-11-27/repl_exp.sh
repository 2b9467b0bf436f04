#!/bin/bash
# usage: repl_exp.sh BIN ; prints source's RSS before and peak during replicating 3000 records of 1 B + 60 KB labels
BIN=$1; D=${TMPDIR:-/tmp}/tsblob-repl-exp; rm -rf $D; mkdir -p $D
$BIN serve --data $D/src --listen 127.0.0.1:18391 > $D/src.log 2>&1 &
SP=$!
$BIN serve --data $D/dst --listen 127.0.0.1:18392 > $D/dst.log 2>&1 &
DP=$!
sleep 1.5
python3 - <<'PY'
import http.client
c=http.client.HTTPConnection("127.0.0.1",18391)
def req(m,u,b=b"",h={}):
    c.request(m,u,body=b,headers=h); r=c.getresponse(); d=r.read(); return r.status,d
req("POST","/api/v1/b/lab2")
for ts in range(1,3001):
    h={f"x-tsblob-label-l{i}": f"{ts}-"+"x"*3990 for i in range(15)}
    s,d=req("POST",f"/api/v1/b/lab2/e?ts={ts}",b"x",h); assert s==201,(s,d)
PY
curl -s -X POST localhost:18392/api/v1/b/dst2 >/dev/null
echo "before: $(grep VmHWM /proc/$SP/status)"
curl -s -X PUT localhost:18391/api/v1/replications/r1 -d '{"src_bucket":"lab2","dst_url":"http://127.0.0.1:18392","dst_bucket":"dst2","from":0}' >/dev/null
for i in $(seq 1 120); do
  n=$(curl -s localhost:18392/api/v1/b/dst2 | python3 -c 'import json,sys; print(json.load(sys.stdin)["info"]["record_count"])')
  [ "$n" = 3000 ] && break; sleep 0.5
done
echo "replicated $n; peak: $(grep VmHWM /proc/$SP/status); dst peak: $(grep VmHWM /proc/$DP/status)"
kill $SP $DP; wait 2>/dev/null
