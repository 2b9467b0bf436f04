"""Sequential single writes through the sync or async SDK: seq_writes.py URL SIZE COUNT s|a (creates bucket b if missing)."""
import asyncio, os, sys, time, resource
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../client-py/src"))
import tsblob
URL = sys.argv[1]; size = int(sys.argv[2]); n = int(sys.argv[3]); mode = sys.argv[4]
data = os.urandom(size); E = "e" + os.urandom(4).hex()
def cpu(): r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
async def amain():
    async with tsblob.AsyncClient(URL) as c:
        await c.create_bucket("b", exist_ok=True)
        for i in range(5): await c.write("b", E, data, ts=10**15 + i)
        t0 = time.perf_counter(); c0 = cpu()
        for i in range(n): await c.write("b", E, data, ts=10**15 + 100 + i)
        dt = time.perf_counter() - t0; dc = cpu() - c0
        print(f"async {size}: {n/dt:.0f} rec/s wall {dt/n*1e6:.0f} us cpu {dc/n*1e6:.0f} us")
def smain():
    with tsblob.Client(URL) as c:
        c.create_bucket("b", exist_ok=True)
        for i in range(5): c.write("b", E, data, ts=10**15 + i)
        t0 = time.perf_counter(); c0 = cpu()
        for i in range(n): c.write("b", E, data, ts=10**15 + 100 + i)
        dt = time.perf_counter() - t0; dc = cpu() - c0
        print(f"sync  {size}: {n/dt:.0f} rec/s wall {dt/n*1e6:.0f} us cpu {dc/n*1e6:.0f} us")
if mode == "a": asyncio.run(amain())
else: smain()
