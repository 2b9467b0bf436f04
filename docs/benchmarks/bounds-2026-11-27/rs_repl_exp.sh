#!/bin/bash
# usage: rs_repl_exp.sh TSBLOB_BIN REDUCTSTORE_BIN: 200 records of 1 byte with 8 KB of labels replicated from tsblob to a real ReductStore (dst_api reductstore); prints how many arrived and the task's last error
BIN=$1; RS=$2; D=${TMPDIR:-/tmp}/tsblob-rs-repl-exp; rm -rf $D; mkdir -p $D/rs
RS_DATA_PATH=$D/rs RS_HOST=127.0.0.1 RS_PORT=18396 RS_API_TOKEN=tok $RS > $D/rs.log 2>&1 &
RP=$!
$BIN serve --data $D/src --listen 127.0.0.1:18397 > $D/src.log 2>&1 &
SP=$!; sleep 2
curl -s -X POST -H "Authorization: Bearer tok" localhost:18396/api/v1/b/dst >/dev/null
python3 - <<'PY'
import http.client
c=http.client.HTTPConnection("127.0.0.1",18397)
def req(m,u,b=b"",h={}):
    c.request(m,u,body=b,headers=h); r=c.getresponse(); d=r.read(); return r.status,d
req("POST","/api/v1/b/src")
for ts in range(1,201):
    s,d=req("POST",f"/api/v1/b/src/e?ts={ts}",b"x",{"x-tsblob-label-a": f"{ts}-"+"y"*4000, "x-tsblob-label-b": "z"*4000}); assert s==201,(s,d)
PY
curl -s -X PUT localhost:18397/api/v1/replications/r -d '{"src_bucket":"src","dst_url":"http://127.0.0.1:18396","dst_bucket":"dst","dst_token":"tok","dst_api":"reductstore","from":0}' >/dev/null
for i in $(seq 1 20); do sleep 0.5; done
echo "arrived: $(curl -s -H 'Authorization: Bearer tok' localhost:18396/api/v1/b/dst | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["info"]["entry_count"] and d["entries"][0]["record_count"])')"
curl -s localhost:18397/api/v1/replications/r | python3 -c 'import json,sys; s=json.load(sys.stdin)["status"]; print({k: s.get(k) for k in ("sent_records","errors","last_error")})'
kill $RP $SP; wait 2>/dev/null
