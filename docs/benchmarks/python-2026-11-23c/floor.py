#!/usr/bin/env python3
"""Per-write latency of one large POST, one payload object reused: the sync SDK and a raw
socket client against tsblob, reduct-py and a raw socket client against ReductStore,
alternated in rounds; median per round and the median of the rounds.

    PYTHONPATH=client-py/src python floor.py --ts TSBLOB_URL --rs REDUCT_URL --size 1000000 --n 60 --rounds 5
"""
import argparse, asyncio, socket, statistics, sys, time, os, subprocess, json
sys.path.insert(0, os.path.join(os.path.dirname(__file__)))

def raw_post(sock, host, path, body):
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode()
    sock.sendall(head)
    sock.sendall(body)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(65536)
    h, _, rest = buf.partition(b"\r\n\r\n")
    cl = 0
    for line in h.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            cl = int(v)
    while len(rest) < cl:
        rest += sock.recv(65536)
    status = int(h.split(b" ")[1])
    if status >= 300:
        raise SystemExit(f"{path}: {status} {rest!r}")
    return status

def conn(url):
    from urllib.parse import urlsplit
    p = urlsplit(url)
    s = socket.create_connection((p.hostname, p.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s, f"{p.hostname}:{p.port}"

def timeit(fn, n):
    lat = []
    for i in range(n):
        t = time.perf_counter(); fn(i); lat.append(time.perf_counter() - t)
    return lat

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ts", required=True); ap.add_argument("--rs", required=True)
    ap.add_argument("--size", type=int, default=1_000_000); ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="sdk,raw-ts,reduct-py,raw-rs")
    a = ap.parse_args()
    import tsblob
    body = bytes(range(251)) * (a.size // 251 + 1)
    body = body[:a.size]
    base = 1_700_000_000_000_000 + int(time.time()) * 1000
    results = {}
    k = [0]
    def nxt():
        k[0] += 1; return base + k[0]
    if "sdk" in a.only or "raw-ts" in a.only:
        with tsblob.Client(a.ts) as db:
            db.create_bucket("floor", exist_ok=True)
    import urllib.request
    try:
        urllib.request.urlopen(urllib.request.Request(a.rs + "/api/v1/b/floor", method="POST", data=b"{}"))
    except Exception as e:
        pass
    for r in range(a.rounds):
        for who in a.only.split(","):
            if who == "sdk":
                with tsblob.Client(a.ts) as db:
                    db.write("floor", "sdk", body, ts=nxt())
                    lat = timeit(lambda i: db.write("floor", "sdk", body, ts=nxt()), a.n)
            elif who == "raw-ts":
                s, host = conn(a.ts)
                raw_post(s, host, f"/api/v1/b/floor/raw?ts={nxt()}", body)
                lat = timeit(lambda i: raw_post(s, host, f"/api/v1/b/floor/raw?ts={nxt()}", body), a.n)
                s.close()
            elif who == "raw-rs":
                s, host = conn(a.rs)
                raw_post(s, host, f"/api/v1/b/floor/raw?ts={nxt()}", body)
                lat = timeit(lambda i: raw_post(s, host, f"/api/v1/b/floor/raw?ts={nxt()}", body), a.n)
                s.close()
            elif who == "reduct-py":
                from reduct import Client as RC
                async def go():
                    async with RC(a.rs) as c:
                        b = await c.get_bucket("floor")
                        await b.write("rpy", body, timestamp=nxt())
                        lat = []
                        for i in range(a.n):
                            t = time.perf_counter(); await b.write("rpy", body, timestamp=nxt()); lat.append(time.perf_counter() - t)
                        return lat
                lat = asyncio.run(go())
            med = statistics.median(lat) * 1e3
            results.setdefault(who, []).append(med)
            print(f"round {r} {who:10} median {med:8.3f} ms  min {min(lat)*1e3:8.3f}", flush=True)
    print(json.dumps({k: [round(x, 3) for x in v] for k, v in results.items()}))
    rp = statistics.median(results.get("reduct-py", [float("nan")]))
    for k2, v in results.items():
        print(f"{k2:10} median-of-medians {statistics.median(v):8.3f} ms  reduct-py/this {rp/statistics.median(v):.2f}x")

main()
