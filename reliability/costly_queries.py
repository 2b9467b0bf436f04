#!/usr/bin/env python3
"""What costly queries of one client make a server hold: the figures of the hostile probe of
2026-11-30 (docs/operations.md, "query steps" and "conditions").

    reliability/costly_queries.py BIN [--port 19601]

Starts `BIN serve` on a fresh data folder twice and prints:
  1. RSS after five ReductStore query sessions over 1,000 entries, each with a ~1 MB `when`
     of 33 parts, left unread; and the peak RSS and slowest first bytes of six such native
     queries read slowly (each entry's cursor used to copy the condition's texts);
  2. `/health` latency (p50, p90, max) and a one-record query's latency while 64 queries of
     the same client run a costly condition (300 x `$contains` of a 3 KB needle on a 4 KB
     label) for 20 s (every step used to run at once on the blocking pool).
Needs aiohttp (reduct-py's dependency: the test venv has it).
"""

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import aiohttp


def status(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def start(binary, port, data, *extra):
    p = subprocess.Popen(
        [binary, "serve", "--data", data, "--listen", f"127.0.0.1:{port}", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            subprocess.run(
                ["curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{port}/health"], check=True
            )
            return p
        except subprocess.CalledProcessError:
            time.sleep(0.05)
    p.kill()
    sys.exit(f"{binary} did not start on port {port}")


BIG = "A" * 62000
COND = {"$or": [{"&k": {"$eq": BIG + str(i)}} for i in range(16)]}


async def condition_copies(port, rs_port, pid):
    u = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as s:
        await s.post(f"{u}/api/v1/b/b")
        sem = asyncio.Semaphore(32)

        async def one(i):
            async with sem:
                async with s.post(f"{u}/api/v1/b/b/e{i:06d}?ts=1000000", data=b"x" * 16) as r:
                    assert r.status == 201, await r.text()

        await asyncio.gather(*(one(i) for i in range(1000)))
        base = status(pid, "VmRSS")
        body = json.dumps({"query_type": "QUERY", "entries": ["*"], "when": COND, "ttl": 3600})
        for _ in range(5):
            async with s.post(f"http://127.0.0.1:{rs_port}/api/v1/io/b/q", data=body) as r:
                assert r.status == 200, await r.text()
        await asyncio.sleep(1)
        print(f"rss_kB base {base}, after 5 unread ReductStore sessions {status(pid, 'VmRSS')}")
        body = json.dumps({"entries": ["**"], "when": COND, "meta": True})
        firsts = []

        async def query():
            t = time.time()
            async with s.post(f"{u}/api/v1/b/b/query", data=body) as r:
                await r.content.read(64)
                firsts.append(time.time() - t)
                await asyncio.sleep(8)

        await asyncio.gather(*(query() for _ in range(6)))
        print(
            f"6 queries read slowly: peak rss_kB {status(pid, 'VmHWM')}, "
            f"slowest first bytes {max(firsts):.2f} s"
        )


async def costly_cpu(port):
    u = f"http://127.0.0.1:{port}"
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(
        timeout=timeout, connector=aiohttp.TCPConnector(limit=0)
    ) as s:
        await s.post(f"{u}/api/v1/b/b")
        await s.post(f"{u}/api/v1/b/b/small?ts=1", data=b"v")
        sem, label = asyncio.Semaphore(32), "q" * 3990 + "%20z"

        async def fill(i):
            async with sem:
                async with s.post(
                    f"{u}/api/v1/b/b/heavy?ts={i + 1}", data=b"x", headers={"x-tsblob-label-t": label}
                ) as r:
                    assert r.status == 201, await r.text()

        await asyncio.gather(*(fill(i) for i in range(20000)))
        cond = {"$or": [{"$contains": ["&t", "q" * 3000 + "x"]} for _ in range(300)]}
        body = json.dumps({"when": cond, "meta": True})
        end = time.time() + 20
        health, victim = [], []

        async def attacker():
            while time.time() < end:
                async with s.post(f"{u}/api/v1/b/b/heavy/query", data=body) as r:
                    async for _ in r.content.iter_chunked(65536):
                        if time.time() > end:
                            break

        async def probe(path, into, pause):
            await asyncio.sleep(1)
            while time.time() < end:
                t = time.time()
                async with s.get(f"{u}{path}") as r:
                    await r.read()
                into.append((time.time() - t) * 1000)
                await asyncio.sleep(pause)

        await asyncio.gather(
            probe("/health", health, 0.25),
            probe("/api/v1/b/b/small/query?meta=true", victim, 1),
            *(attacker() for _ in range(64)),
        )
        health.sort()
        print(
            f"/health during 64 costly queries: n={len(health)} p50 {health[len(health) // 2]:.0f} ms, "
            f"p90 {health[int(len(health) * 0.9)]:.0f} ms, max {health[-1]:.0f} ms; "
            f"a one-record query: {sorted(round(v) for v in victim)} ms"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--port", type=int, default=19601)
    a = ap.parse_args()
    data = tempfile.mkdtemp(prefix="tsblob-costly-")
    try:
        p = start(a.binary, a.port, data, "--reductstore-listen", f"127.0.0.1:{a.port + 1}")
        try:
            asyncio.run(condition_copies(a.port, a.port + 1, p.pid))
        finally:
            p.kill()
            p.wait()
        shutil.rmtree(data)
        os.mkdir(data)
        p = start(a.binary, a.port, data)
        try:
            asyncio.run(costly_cpu(a.port))
        finally:
            p.kill()
            p.wait()
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
