import http.client, sys, time, threading, json
port=int(sys.argv[1]); n=int(sys.argv[2]); pid=sys.argv[3]; conc=int(sys.argv[4])
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) // 1024
def hwm():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmHWM"): return int(l.split()[1]) // 1024
c=http.client.HTTPConnection("127.0.0.1",port); c.request("POST","/api/v1/b/many"); c.getresponse().read()
t=time.time()
def fill(lo,hi):
    c=http.client.HTTPConnection("127.0.0.1",port)
    for i in range(lo,hi):
        c.request("POST",f"/api/v1/b/many/entry-with-a-longish-name-{i:07d}?ts=1",body=b"x"); r=c.getresponse(); r.read()
th=[threading.Thread(target=fill,args=(k*n//4,(k+1)*n//4)) for k in range(4)]
[x.start() for x in th]; [x.join() for x in th]
print(f"{n} entries in {time.time()-t:.0f}s; rss {rss()} MB hwm {hwm()} MB")
c=http.client.HTTPConnection("127.0.0.1",port); t=time.time(); c.request("GET","/api/v1/b/many"); b=c.getresponse().read(); print(f"one GET: {len(b)} B in {time.time()-t:.2f}s")
def get():
    c=http.client.HTTPConnection("127.0.0.1",port); c.request("GET","/api/v1/b/many"); r=c.getresponse(); r.read(); res.append(r.status)
res=[]
t=time.time()
th=[threading.Thread(target=get) for _ in range(conc)]
[x.start() for x in th]; [x.join() for x in th]
print(f"{conc} concurrent GETs in {time.time()-t:.1f}s statuses {sorted(set(res))}; rss {rss()} MB hwm {hwm()} MB")
