#!/usr/bin/env python3
"""The SDK's own cost: CPU time of the client process per operation, for SDK versions side by
side (A/B), alternated in one run against one ``tsblob serve``.

Wall-clock rates (``bench_vs_reduct.py``) swing by 2-5x on a shared 2-core machine; the CPU
time the client process spends per call (``time.process_time``: its own threads, not the
server's nor other processes') moves much less, and it is what a change of the SDK changes.
Each variant runs in a fresh process (``PYTHONPATH`` set to its source folder), ``rounds``
times, alternating; each figure is the median over rounds, with the range.

Operations: one write with a timestamp of each ``--write-sizes`` size (1 KB by default; at
most ``--writes`` of them, and at most 100 MB a size: 100 writes of 1 MB, 10 of 10 MB), sync
and async, and a time-range query of 2,000 records of 1 KB, every payload touched (sync and
async), per record.

    python bench/sdk_cpu.py --variant before=/tmp/old/client-py/src --variant after=src --rounds 5
    python bench/sdk_cpu.py --variant before=... --variant after=src --write-sizes 1KB,1MB,10MB

Without ``--variant`` it measures the installed ``tsblob`` alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

from bench_vs_reduct import SIZES, Spawned, find_tsblob, free_port, wait_ready

T0 = 1_700_000_000_000_000
WORKER = r'''
import asyncio, json, sys, time
import tsblob
url, bucket, n_write, n_query, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
sizes = json.loads(sys.argv[6])  # [[name, bytes], ...]
T0 = 1_700_000_000_000_000
body = b"x" * 1000
out = {}

def count(size):
    return max(10, min(n_write, 100_000_000 // size))

def measure(name, n, fn):
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    out[name] = ((time.process_time() - c0) / n * 1e6, (time.perf_counter() - w0) / n * 1e6)

with tsblob.Client(url) as db:
    for i in range(50):  # warm-up: connection, caches
        db.write(bucket, f"warm-{tag}", body, ts=T0 + i)
    for name, size in sizes:
        data, n = bytes(range(251)) * (size // 251) + b"z" * (size % 251), count(size)
        measure(f"sync write {name}", n,
                lambda: [db.write(bucket, f"w-{name}-{tag}", data, ts=T0 + i) for i in range(n)])
    def q():
        for rec in db.query(bucket, "q", start=T0, stop=T0 + n_query):
            rec.data
    measure("sync query, per 1 KB record", n_query, q)

async def main():
    async with tsblob.AsyncClient(url) as db:
        for i in range(50):
            await db.write(bucket, f"awarm-{tag}", body, ts=T0 + i)
        for name, size in sizes:
            data, n = bytes(range(251)) * (size // 251) + b"z" * (size % 251), count(size)
            c0, w0 = time.process_time(), time.perf_counter()
            for i in range(n):
                await db.write(bucket, f"aw-{name}-{tag}", data, ts=T0 + i)
            out[f"async write {name}"] = ((time.process_time() - c0) / n * 1e6, (time.perf_counter() - w0) / n * 1e6)
        c0, w0 = time.process_time(), time.perf_counter()
        async for rec in db.query(bucket, "q", start=T0, stop=T0 + n_query):
            await rec.read()
        out["async query, per 1 KB record"] = ((time.process_time() - c0) / n_query * 1e6, (time.perf_counter() - w0) / n_query * 1e6)

asyncio.run(main())
print(json.dumps(out))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", default=[], help="name=path of an SDK source folder (repeat)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--write-sizes", default="1KB", help="comma-separated, of " + ",".join(SIZES))
    args = ap.parse_args()
    sizes = json.dumps([[s, SIZES[s]] for s in args.write_sizes.split(",") if s])
    variants = dict(v.split("=", 1) for v in args.variant) or {"installed": ""}
    tmp = Path(tempfile.mkdtemp(prefix="tsblob-sdkcpu-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    srv = Spawned([find_tsblob(), "serve", "--data", str(tmp / "data"), "--listen", f"127.0.0.1:{port}"], {},
                  tmp / "tsblob.log")
    try:
        wait_ready(url + "/health", "GET", srv.proc, srv.log)
        import tsblob  # the installed SDK fills the query entry (any version writes the same records)

        with tsblob.Client(url) as db:
            db.create_bucket("sdkcpu", exist_ok=True)
            db.write_batch("sdkcpu", "q", [(T0 + i, b"y" * 1000) for i in range(args.records)])
        results: Dict[str, Dict[str, List[List[float]]]] = {v: {} for v in variants}
        for r in range(args.rounds):
            for name, path in variants.items():
                env = dict(os.environ)
                if path:
                    env["PYTHONPATH"] = str(Path(path).resolve())
                out = subprocess.run([sys.executable, "-c", WORKER, url, "sdkcpu", str(args.writes),
                                      str(args.records), f"{name}-{r}", sizes], env=env, capture_output=True, text=True,
                                     check=True)
                for op, figs in json.loads(out.stdout.strip().splitlines()[-1]).items():
                    results[name].setdefault(op, []).append(figs)
                print(f"round {r + 1}/{args.rounds} {name} done", file=sys.stderr, flush=True)
        names = list(variants)
        head = "| operation | " + " | ".join(f"{n} CPU µs/op" for n in names) + " | " + \
               " | ".join(f"{n} wall µs/op" for n in names) + " |"
        print(f"\nMedian (range) of {args.rounds} alternated rounds; CPU = the client process's CPU time.\n")
        print(head)
        print("|---" * (1 + 2 * len(names)) + "|")
        for op in results[names[0]]:
            cells = []
            for k in (0, 1):
                for n in names:
                    xs = [f[k] for f in results[n][op]]
                    cells.append(f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})")
            print(f"| {op} | " + " | ".join(cells) + " |")
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
