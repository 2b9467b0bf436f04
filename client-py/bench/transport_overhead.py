#!/usr/bin/env python3
"""Why the SDK does not use httpx: the same 1 KB record write sent through each HTTP
library to one real ``tsblob serve``, sequentially, one request in flight.

Every variant sends ``POST /api/v1/b/<bucket>/<entry>?ts=<µs>`` with a 1,000-byte body and
reads the ``{"ts": N}`` answer, so the server's share is the same for all of them and the
differences are the client's. Variants: ``httpx.Client``, ``httpx.AsyncClient``,
``http.client`` (stdlib), ``aiohttp``, and this SDK's ``Client`` / ``AsyncClient``.

    python bench/transport_overhead.py [--url http://127.0.0.1:8686] [--n 3000]

Without ``--url`` a ``tsblob serve`` is spawned ($TSBLOB_BIN or target/release/tsblob).
Needs ``pip install httpx`` besides the SDK (``pip install './client-py[bench]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import time
from pathlib import Path
from typing import Awaitable, Callable, Dict, List
from urllib.parse import urlsplit

import aiohttp
import httpx

import tsblob
from bench_vs_reduct import Spawned, find_tsblob, free_port, wait_ready

BODY = b"x" * 1000
BASE = 1_700_000_000_000_000  # µs (2023): a realistic timestamp, and no "looks like seconds" warning


def sync_loop(fn: Callable[[int], object], n: int, base: int) -> float:
    for i in range(100):  # warm-up: connections, caches
        fn(base - 1000 + i)
    start = time.perf_counter()
    for i in range(n):
        fn(base + i)
    return (time.perf_counter() - start) / n * 1e6


async def async_loop(fn: Callable[[int], Awaitable[object]], n: int, base: int) -> float:
    for i in range(100):
        await fn(base - 1000 + i)
    start = time.perf_counter()
    for i in range(n):
        await fn(base + i)
    return (time.perf_counter() - start) / n * 1e6


def run(url: str, n: int) -> Dict[str, float]:
    path = "/api/v1/b/transport/{entry}"
    out: Dict[str, float] = {}
    parts = urlsplit(url)

    with httpx.Client(base_url=url) as h:
        out["httpx.Client"] = sync_loop(
            lambda i: h.post(path.format(entry="httpx"), params={"ts": i}, content=BODY).json(), n, BASE)

    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80)

    def stdlib(i: int) -> object:
        conn.request("POST", path.format(entry="stdlib") + f"?ts={i}", body=BODY)
        return json.loads(conn.getresponse().read())

    out["http.client"] = sync_loop(stdlib, n, BASE)
    conn.close()

    with tsblob.Client(url) as db:
        out["tsblob.Client"] = sync_loop(lambda i: db.write("transport", "sdk-sync", BODY, ts=i), n, BASE)

    async def async_variants() -> None:
        async with httpx.AsyncClient(base_url=url) as h:
            async def hx(i: int) -> object:
                return (await h.post(path.format(entry="httpx-async"), params={"ts": i}, content=BODY)).json()
            out["httpx.AsyncClient"] = await async_loop(hx, n, BASE)
        async with aiohttp.ClientSession() as s:
            async def aio(i: int) -> object:
                async with s.post(url + path.format(entry="aiohttp"), params={"ts": i}, data=BODY) as r:
                    return await r.json()
            out["aiohttp"] = await async_loop(aio, n, BASE)
        async with tsblob.AsyncClient(url) as db:
            out["tsblob.AsyncClient"] = await async_loop(
                lambda i: db.write("transport", "sdk-async", BODY, ts=i), n, BASE)

    asyncio.run(async_variants())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url")
    ap.add_argument("--n", type=int, default=3000)
    args = ap.parse_args()
    spawned: List[Spawned] = []
    url = args.url
    tmp = Path(__import__("tempfile").mkdtemp(prefix="tsblob-transport-"))
    try:
        if not url:
            port = free_port()
            s = Spawned([find_tsblob(), "serve", "--data", str(tmp / "data"), "--listen", f"127.0.0.1:{port}"],
                        {}, tmp / "log")
            spawned.append(s)
            url = f"http://127.0.0.1:{port}"
            wait_ready(url + "/health", "GET", s.proc, s.log)
        with tsblob.Client(url) as db:
            db.create_bucket("transport", exist_ok=True)
        res = run(url, args.n)
        print(f"| client | µs per 1 KB write (n={args.n}) | writes/s |")
        print("|---|---|---|")
        for name, us in res.items():
            print(f"| {name} | {us:,.0f} | {1e6 / us:,.0f} |")
    finally:
        for s in spawned:
            s.stop()
        __import__("shutil").rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
