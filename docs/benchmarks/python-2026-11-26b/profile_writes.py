"""cProfile of N writes (sync or async) against a running tsblob serve.
Usage: profile_writes.py URL sync|async SIZE N (prints by internal time, then cumulative)."""
import asyncio, cProfile, pstats, sys, time, io
import tsblob
url, mode, size, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
T0 = 1_700_000_000_000_000
data = bytes(range(251)) * (size // 251) + b"z" * (size % 251)
pr = cProfile.Profile()
tag = str(time.time_ns())
if mode == "sync":
    with tsblob.Client(url) as db:
        db.create_bucket("prof", exist_ok=True)
        for i in range(50):
            db.write("prof", "warm" + tag, data, ts=T0 + i)
        pr.enable()
        for i in range(n):
            db.write("prof", "w" + tag, data, ts=T0 + i)
        pr.disable()
else:
    async def main():
        async with tsblob.AsyncClient(url) as db:
            await db.create_bucket("prof", exist_ok=True)
            for i in range(50):
                await db.write("prof", "warm" + tag, data, ts=T0 + i)
            pr.enable()
            for i in range(n):
                await db.write("prof", "w" + tag, data, ts=T0 + i)
            pr.disable()
    asyncio.run(main())
s = io.StringIO()
st = pstats.Stats(pr, stream=s)
st.sort_stats("tottime").print_stats(45)
st.sort_stats("cumtime").print_stats(60)
print(s.getvalue())
