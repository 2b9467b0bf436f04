import http.client, sys, time, json, threading
port=int(sys.argv[1]); entry=sys.argv[2]; n=int(sys.argv[3]); ts0=int(sys.argv[4]); cnt=int(sys.argv[5]); bucket=sys.argv[6] if len(sys.argv)>6 else "b"
def work(k, out):
    c=http.client.HTTPConnection("127.0.0.1", port)
    tot=0
    for i in range(n):
        c.request("GET", f"/api/v1/b/{bucket}/{entry}?ts={ts0 + (i*7+k) % cnt}")
        r=c.getresponse(); b=r.read(); assert r.status==200, (r.status, b[:200]); tot+=len(b)
    out.append(tot)
out=[]; t=time.time()
th=[threading.Thread(target=work,args=(k,out)) for k in range(2)]
[x.start() for x in th]; [x.join() for x in th]
dt=time.time()-t; print(f"{2*n/dt:.0f} reads/s {sum(out)/dt/1e6:.0f} MB/s")
