import asyncio, os, sys, time, resource
import tsblob
URL = sys.argv[1]; N = int(sys.argv[2]); SIZE = int(sys.argv[3])
async def main():
    async with tsblob.AsyncClient(URL) as c:
        bk = "x%d" % os.getpid()
        await c.create_bucket(bk)
        data = os.urandom(SIZE)
        r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.process_time(); w0 = time.perf_counter()
        for i in range(N):
            await c.write(bk, "e", data, 1_700_000_000_000_000 + i)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        print("user", (r1.ru_utime - r0.ru_utime) / N * 1e6, "sys", (r1.ru_stime - r0.ru_stime) / N * 1e6)
        print("cpu us/op", (time.process_time() - t0) / N * 1e6, "wall", (time.perf_counter() - w0) / N * 1e6)
asyncio.run(main())
