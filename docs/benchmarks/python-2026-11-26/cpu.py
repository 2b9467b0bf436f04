"""Per-write wall and client CPU (process_time) for tsblob sync/async and reduct-py, alternated, against
running servers (tsblob on 127.0.0.1:18777, ReductStore on :18778). Usage: cpu.py sync,async,reduct ROUNDS [1MB,10MB]"""
import asyncio, sys, time, statistics, os
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3] / "client-py" / "bench"))
import tsblob
from bench_vs_reduct import Payloads, T0
TS, RS = "http://127.0.0.1:18777", "http://127.0.0.1:18778"
SZ = {"1MB": 1_000_000, "10MB": 10_000_000}
N = {"1MB": 100, "10MB": 20}
base = int(time.time()) * 10**6 * 0  # entries unique per round
def loop(n, p, w):
    wall = cpu = 0.0
    for i in range(n):
        d = p.get(i)
        t, c = time.perf_counter(), time.process_time()
        w(i, d)
        wall += time.perf_counter() - t; cpu += time.process_time() - c
        del d
    return wall / n * 1e3, cpu / n * 1e3
async def aloop(n, p, w):
    wall = cpu = 0.0
    for i in range(n):
        d = p.get(i)
        t, c = time.perf_counter(), time.process_time()
        await w(i, d)
        wall += time.perf_counter() - t; cpu += time.process_time() - c
        del d
    return wall / n * 1e3, cpu / n * 1e3
def sync(sz, n, p, tag):
    with tsblob.Client(TS) as db:
        db.create_bucket("cpu", exist_ok=True)
        return loop(n, p, lambda i, d: db.write("cpu", tag, d, ts=T0 + i))
async def asy(sz, n, p, tag):
    async with tsblob.AsyncClient(TS) as db:
        await db.create_bucket("cpu", exist_ok=True)
        return await aloop(n, p, lambda i, d: db.write("cpu", tag, d, ts=T0 + i))
async def red(sz, n, p, tag):
    from reduct import Client
    async with Client(RS) as c:
        b = await c.create_bucket("cpu", exist_ok=True)
        return await aloop(n, p, lambda i, d: b.write(tag, d, timestamp=T0 + i))
clients = sys.argv[1].split(",") if len(sys.argv) > 1 else ["sync", "async", "reduct"]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
sizes = sys.argv[3].split(",") if len(sys.argv) > 3 else list(SZ)
run = os.getpid()
res = {}
for sz in sizes:
    p = Payloads(SZ[sz])
    for r in range(rounds):
        for c in clients:
            tag = f"{c}-{sz}-{run}-{r}"
            if c == "sync": x = sync(sz, N[sz], p, tag)
            elif c == "async": x = asyncio.run(asy(sz, N[sz], p, tag))
            else: x = asyncio.run(red(sz, N[sz], p, tag))
            res.setdefault((sz, c), []).append(x)
for (sz, c), xs in res.items():
    w = [x[0] for x in xs]; u = [x[1] for x in xs]
    rw = [x[0] for x in res[(sz, "reduct")]] if (sz, "reduct") in res else None
    ratio = "" if not rw or c == "reduct" else " ratio(wall reduct/this) med %.2f per-round %s" % (
        statistics.median([a / b for a, b in zip(rw, w)]), ",".join("%.2f" % (a / b) for a, b in zip(rw, w)))
    print(f"{sz:5} {c:7} wall ms med {statistics.median(w):7.3f} ({min(w):.3f}-{max(w):.3f})  cpu ms med {statistics.median(u):7.3f} ({min(u):.3f}-{max(u):.3f}){ratio}")
