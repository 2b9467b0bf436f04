"""Client CPU per write of the full clients by size, with variants of _aio.LARGE_BODY (async@N: the
threshold N; async-nolarge: never), alternated in one process against a running tsblob serve.
Usage: large_body.py URL ROUNDS SIZES VARIANTS, e.g. large_body.py URL 12 65536,100000 async@65536,async@1048577"""
import asyncio, time, statistics, sys
import tsblob, tsblob._aio as aio
url = sys.argv[1]; R = int(sys.argv[2]); sizes = [int(x) for x in sys.argv[3].split(",")]
variants = sys.argv[4].split(",")  # e.g. sync,async,async-nolarge
T0 = 1_700_000_000_000_000
def count(size): return max(300, min(2000, 200_000_000 // size // 10))
async def arun(size, tag):
    async with tsblob.AsyncClient(url) as db:
        data = bytes(range(251)) * (size // 251) + b"z" * (size % 251)
        for i in range(50): await db.write("sz", "w" + tag, data, ts=T0 + i)
        n = count(size); c0 = time.process_time()
        for i in range(100, 100 + n): await db.write("sz", "w" + tag, data, ts=T0 + i)
        return (time.process_time() - c0) / n * 1e6
def srun(size, tag):
    with tsblob.Client(url) as db:
        data = bytes(range(251)) * (size // 251) + b"z" * (size % 251)
        for i in range(50): db.write("sz", "w" + tag, data, ts=T0 + i)
        n = count(size); c0 = time.process_time()
        for i in range(100, 100 + n): db.write("sz", "w" + tag, data, ts=T0 + i)
        return (time.process_time() - c0) / n * 1e6
with tsblob.Client(url) as db: db.create_bucket("sz", exist_ok=True)
res = {}
for r in range(R):
    for size in sizes:
        for v in variants:
            tag = f"{v.replace('@', '-')}-{size}-{r}-{time.time_ns()}"
            if v == "sync": x = srun(size, tag)
            else:
                aio.LARGE_BODY = (1 << 62) if v == "async-nolarge" else int(v.split("@")[1]) if "@" in v else (64 << 10)
                x = asyncio.run(arun(size, tag))
            res.setdefault((size, v), []).append(x)
for (size, v), xs in sorted(res.items()):
    print(f"{size:>9} {v:15s} {statistics.median(xs):7.1f} ({min(xs):.1f}-{max(xs):.1f}) µs CPU/write")
