"""Creates N entries with one 1-byte write each (one keep-alive connection) and prints the
server's resident memory before and after, from /proc/PID/status.

    python3 flood.py N SERVER_PID [PORT]
"""
import http.client
import sys
import time

n, pid = int(sys.argv[1]), int(sys.argv[2])
port = int(sys.argv[3]) if len(sys.argv) > 3 else 8383


def rss():
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "RssAnon", "RssFile")):
                out[line.split(":")[0]] = line.split()[1] + " kB"
    return out


c = http.client.HTTPConnection("127.0.0.1", port)
c.request("POST", "/api/v1/b/flood", body=b"{}", headers={"content-type": "application/json"})
r = c.getresponse()
r.read()
print("bucket", r.status)
print("before", rss())
t = time.time()
for i in range(n):
    c.request("POST", f"/api/v1/b/flood/e{i}?ts=1", body=b"x")
    r = c.getresponse()
    body = r.read()
    if r.status >= 300:
        print("stopped at", i, r.status, body[:200])
        break
print("after", n, rss(), f"{time.time() - t:.1f} s")
