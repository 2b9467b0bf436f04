"""User and system CPU of one AsyncClient writing N records of SIZE bytes, one at a time.

    PYTHONPATH=client-py/src python async-write-cpu.py URL N SIZE
"""
import asyncio
import os
import resource
import sys
import time

import tsblob


async def main(url: str, n: int, size: int) -> None:
    async with tsblob.AsyncClient(url) as c:
        bucket = "x%d" % os.getpid()
        await c.create_bucket(bucket)
        data = os.urandom(size)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0, w0 = time.process_time(), time.perf_counter()
        for i in range(n):
            await c.write(bucket, "e", data, 1_700_000_000_000_000 + i)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        per = 1e6 / n
        print(f"user {(r1.ru_utime - r0.ru_utime) * per:.1f} µs, sys {(r1.ru_stime - r0.ru_stime) * per:.1f} µs")
        print(f"cpu {(time.process_time() - t0) * per:.1f} µs/write, wall {(time.perf_counter() - w0) * per:.1f} µs/write")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
