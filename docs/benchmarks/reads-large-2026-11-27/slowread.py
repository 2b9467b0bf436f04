import socket, sys, time, os
port=int(sys.argv[1]); n=int(sys.argv[2]); path=sys.argv[3]; pid=int(sys.argv[4])
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith(("VmRSS","RssAnon")): print("   ", l.strip())
rss()
socks=[]
for i in range(n):
    s=socket.create_connection(("127.0.0.1",port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    socks.append(s)
time.sleep(3)
print("after", n, "unread GETs:"); rss()
# a bystander
t=time.time(); b=socket.create_connection(("127.0.0.1",port)); b.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); print("bystander:", b.recv(200)[:20], f"{(time.time()-t)*1000:.1f} ms")
for s in socks: s.close()
time.sleep(2); print("closed:"); rss()
