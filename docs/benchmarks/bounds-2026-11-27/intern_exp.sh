#!/bin/bash
# usage: intern_exp.sh BIN ENTRIES: RssAnon of a fresh server before and after writing ENTRIES entries of 299 records, each with its own 60 KB label set
BIN=$1; D=${TMPDIR:-/tmp}/tsblob-intern-exp; rm -rf $D; mkdir -p $D
$BIN serve --data $D/data --listen 127.0.0.1:18393 > $D/log 2>&1 &
SP=$!; sleep 1.5
echo "before: $(grep RssAnon /proc/$SP/status)"
python3 - "$2" <<'PY'
import http.client, sys
c=http.client.HTTPConnection("127.0.0.1",18393)
def req(m,u,b=b"",h={}):
    c.request(m,u,body=b,headers=h); r=c.getresponse(); d=r.read(); return r.status,d
req("POST","/api/v1/b/intern")
for e in range(int(sys.argv[1])):
    for ts in range(1,300):
        h={f"x-tsblob-label-l{i}": f"{e}-{ts}-"+"x"*3990 for i in range(15)}
        s,d=req("POST",f"/api/v1/b/intern/e{e}?ts={ts}",b"x",h); assert s==201,(s,d)
PY
echo "after: $(grep RssAnon /proc/$SP/status) peak: $(grep VmHWM /proc/$SP/status)"
kill $SP; wait 2>/dev/null
