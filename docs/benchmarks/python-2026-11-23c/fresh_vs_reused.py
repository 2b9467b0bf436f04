"""One 1 MB write loop per client, with a fresh payload per write (made before the clock, as
bench_vs_reduct.py does) or one payload object reused: write latency, the client process's CPU
and minor page faults per write (CPU and faults include making the payload).

    PYTHONPATH=client-py/src python fresh_vs_reused.py SIZE N TSBLOB_URL REDUCT_URL
"""
import os, sys, time, statistics, asyncio, resource
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../client-py/bench"))
import bench_vs_reduct as b
from reduct import Client as RC
import tsblob
size = int(sys.argv[1]); n = int(sys.argv[2]); TS, RS = sys.argv[3], sys.argv[4]
p = b.Payloads(size)
fixed = p.get(0)
def flt(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
async def rpy(mode):
    async with RC(RS) as c:
        bk = await c.create_bucket("floor", exist_ok=True)
        e = f"r{time.time_ns()}"; lat = []; c0 = time.process_time(); f0 = flt()
        for i in range(n):
            data = p.get(i) if mode == "fresh" else fixed
            t = time.perf_counter(); await bk.write(e, data, timestamp=b.T0 + i); lat.append(time.perf_counter() - t)
            del data
        return statistics.median(lat) * 1e3, (time.process_time() - c0) / n * 1e3, (flt() - f0) / n
def sdk(mode):
    with tsblob.Client(TS) as db:
        e = f"s{time.time_ns()}"; lat = []; c0 = time.process_time(); f0 = flt()
        for i in range(n):
            data = p.get(i) if mode == "fresh" else fixed
            t = time.perf_counter(); db.write("floor", e, data, ts=b.T0 + i); lat.append(time.perf_counter() - t)
            del data
        return statistics.median(lat) * 1e3, (time.process_time() - c0) / n * 1e3, (flt() - f0) / n
for r in range(3):
    for mode in ("fresh", "reused"):
        for who in ("reduct-py", "tsblob-sync"):
            lat, cpu, fl = asyncio.run(rpy(mode)) if who == "reduct-py" else sdk(mode)
            print(f"{who:11} {mode:6} p50 {lat:.3f} ms  client cpu/write {cpu:.3f} ms  minflt/write {fl:.0f}")
