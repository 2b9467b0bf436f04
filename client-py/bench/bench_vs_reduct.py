#!/usr/bin/env python3
"""Python SDK benchmark: tsblob's SDK against reduct-py on ReductStore, in one run.

For each record size (1 KB, 10 KB, 100 KB, 1 MB, 10 MB by default) and each client, it
writes ``count`` records one request each (sequentially: one request in flight, the way a
single camera or sensor loop writes), then reads them all back with one time-range query,
checking every byte. Write rates count the time spent in the write calls: each payload is
made before its write's clock starts (the same for every client). Clients:

- ``tsblob-sync``: ``tsblob.Client`` against ``tsblob serve``;
- ``tsblob-async``: ``tsblob.AsyncClient`` against ``tsblob serve``;
- ``reduct-py``: ``reduct.Client`` (async, aiohttp) against ReductStore, used as its
  documentation shows (``bucket.write(entry, data, timestamp)``,
  ``bucket.query(entry, start, stop)`` with ``record.read_all()``).

Both servers are spawned on fresh folders under one temporary directory (same disk) on
127.0.0.1, unless ``--tsblob-url``/``--reduct-url`` point at running ones. Sizes are
interleaved (size by size, client by client) so that drift of the machine hits every
client alike.

    python bench/bench_vs_reduct.py --markdown ../docs/benchmarks/python-$(date +%F).md

Needs ``pip install ./client-py[bench]``, a built ``tsblob`` ($TSBLOB_BIN or
target/release/tsblob) and a ``reductstore`` binary ($REDUCTSTORE_BIN, PATH, or
~/.cache/tsblob/peers/bin/reductstore from scripts/install-peers.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import urllib.error
import urllib.request

import aiohttp

import tsblob

REPO = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000_000
SIZES = {"1KB": 1_000, "10KB": 10_000, "100KB": 100_000, "1MB": 1_000_000, "10MB": 10_000_000}


@dataclass
class Phase:
    client: str
    size: str
    phase: str
    records: int
    seconds: float
    bytes: int
    latencies_ms: List[float] = field(default_factory=list, repr=False)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mbps(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds else 0.0

    def pct(self, p: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]

    def summary(self) -> Dict[str, Any]:
        d = asdict(self)
        d.pop("latencies_ms")
        d.update(rate=self.rate, mbps=self.mbps, p50_ms=self.pct(50), p99_ms=self.pct(99))
        return d


# -- servers -----------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, method: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{url}: the server exited with {proc.returncode}; log:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=1) as resp:
                if resp.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.1)
    sys.exit(f"{url} did not answer within {timeout} s; log:\n{log.read_text()[-3000:]}")


def find_tsblob() -> str:
    env = os.environ.get("TSBLOB_BIN")
    path = Path(env) if env else REPO / "target" / "release" / "tsblob"
    if not path.is_file():
        sys.exit(f"no tsblob binary at {path}: run `cargo build --release -p tsblob-server` or set TSBLOB_BIN")
    return str(path)


def find_reductstore() -> str:
    for cand in (os.environ.get("REDUCTSTORE_BIN"), shutil.which("reductstore"),
                 str(Path.home() / ".cache" / "tsblob" / "peers" / "bin" / "reductstore")):
        if cand and Path(cand).is_file():
            return cand
    sys.exit("no reductstore binary: run scripts/install-peers.sh or set REDUCTSTORE_BIN")


class Spawned:
    def __init__(self, argv: List[str], env: Dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=f, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- payloads ----------------------------------------------------------------------------

class Payloads:
    """Record i of a size is ``i`` (8 bytes LE) + a fixed pattern: unique and checkable."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.base = (bytes(range(251)) * (size // 251 + 1))[:size]

    def get(self, i: int) -> bytes:
        return i.to_bytes(8, "little") + self.base[8:] if self.size >= 8 else self.base

    def check(self, i: int, data: bytes) -> None:
        if len(data) != self.size or data[:8] != i.to_bytes(8, "little")[: min(8, self.size)] \
                or data[8:] != self.base[8:]:
            raise AssertionError(f"record {i} of {self.size} B read back wrong ({len(data)} B)")


# -- clients -----------------------------------------------------------------------------

def timed_loop(n: int, p: "Payloads", write: Callable[[int, bytes], Any]) -> "tuple[float, List[float]]":
    """Writes records 0..n-1, each made before its clock starts: the seconds are the sum of
    the write calls alone (making a 10 MB payload costs this process milliseconds of page
    faults, the same for every client, which are no client's cost)."""
    lat = []
    for i in range(n):
        data = p.get(i)
        t = time.perf_counter()
        write(i, data)
        lat.append((time.perf_counter() - t) * 1e3)
        del data
    return sum(lat) / 1e3, lat


async def timed_loop_async(n: int, p: "Payloads", write: Callable[[int, bytes], Any]) -> "tuple[float, List[float]]":
    """:func:`timed_loop` for a coroutine ``write``."""
    lat = []
    for i in range(n):
        data = p.get(i)
        t = time.perf_counter()
        await write(i, data)
        lat.append((time.perf_counter() - t) * 1e3)
        del data
    return sum(lat) / 1e3, lat


def run_tsblob_sync(url: str, bucket: str, size_name: str, n: int, p: Payloads, rep: int) -> List[Phase]:
    entry = f"sync-{size_name}-{rep}"
    with tsblob.Client(url) as db:
        secs, lat = timed_loop(n, p, lambda i, data: db.write(bucket, entry, data, ts=T0 + i))
        w = Phase("tsblob-sync", size_name, "write", n, secs, n * p.size, lat)
        start = time.perf_counter()
        count = 0
        for rec in db.query(bucket, entry, start=T0, stop=T0 + n):
            p.check(rec.timestamp - T0, rec.data)
            count += 1
        r = Phase("tsblob-sync", size_name, "range read", count, time.perf_counter() - start, count * p.size)
    assert count == n, f"tsblob-sync read {count} of {n}"
    return [w, r]


async def run_tsblob_async(url: str, bucket: str, size_name: str, n: int, p: Payloads, rep: int) -> List[Phase]:
    entry = f"async-{size_name}-{rep}"
    async with tsblob.AsyncClient(url) as db:
        secs, lat = await timed_loop_async(n, p, lambda i, data: db.write(bucket, entry, data, ts=T0 + i))
        w = Phase("tsblob-async", size_name, "write", n, secs, n * p.size, lat)
        start = time.perf_counter()
        count = 0
        async for rec in db.query(bucket, entry, start=T0, stop=T0 + n):
            p.check(rec.timestamp - T0, await rec.read())
            count += 1
        r = Phase("tsblob-async", size_name, "range read", count, time.perf_counter() - start, count * p.size)
    assert count == n, f"tsblob-async read {count} of {n}"
    return [w, r]


async def run_reduct(url: str, bucket_name: str, size_name: str, n: int, p: Payloads, rep: int) -> List[Phase]:
    from reduct import Client as ReductClient

    entry = f"reduct-{size_name}-{rep}"
    async with ReductClient(url) as client:
        bucket = await client.create_bucket(bucket_name, exist_ok=True)
        secs, lat = await timed_loop_async(n, p, lambda i, data: bucket.write(entry, data, timestamp=T0 + i))
        w = Phase("reduct-py", size_name, "write", n, secs, n * p.size, lat)
        start = time.perf_counter()
        count = 0
        async for rec in bucket.query(entry, start=T0, stop=T0 + n):
            p.check(rec.timestamp - T0, await rec.read_all())
            count += 1
        r = Phase("reduct-py", size_name, "range read", count, time.perf_counter() - start, count * p.size)
    assert count == n, f"reduct-py read {count} of {n}"
    return [w, r]


# -- report ------------------------------------------------------------------------------

def median_phases(results: List[Phase], phase: str) -> Dict[Any, Phase]:
    """Per (client, size), the repetition with the median rate (noisy machines: see the doc)."""
    groups: Dict[Any, List[Phase]] = {}
    for r in results:
        if r.phase == phase:
            groups.setdefault((r.client, r.size), []).append(r)
    return {k: sorted(v, key=lambda r: r.rate)[len(v) // 2] for k, v in groups.items()}


def table(results: List[Phase], phase: str) -> str:
    clients = [c for c in ("tsblob-sync", "tsblob-async", "reduct-py") if any(r.client == c for r in results)]
    by = median_phases(results, phase)
    head = ["size", "records"] + [f"{c} rec/s" for c in clients] + [f"{c} MB/s" for c in clients]
    if "reduct-py" in clients:
        head += [f"{c} / reduct-py" for c in clients if c != "reduct-py"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in SIZES:
        rows = [by.get((c, size)) for c in clients]
        if not any(rows):
            continue
        n = next(r.records for r in rows if r)
        cells = [size, str(n)]
        cells += [f"{r.rate:,.0f}" if r else "" for r in rows]
        cells += [f"{r.mbps:,.1f}" if r else "" for r in rows]
        ref = by.get(("reduct-py", size))
        if "reduct-py" in clients:
            for c in clients:
                if c != "reduct-py":
                    mine = by.get((c, size))
                    cells.append(f"{mine.rate / ref.rate:.2f}x" if mine and ref and ref.rate else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def latency_table(results: List[Phase]) -> str:
    lines = ["| client | size | write p50 ms | write p99 ms |", "|---|---|---|---|"]
    for (client, size), r in sorted(median_phases(results, "write").items(),
                                    key=lambda kv: (list(SIZES).index(kv[0][1]), kv[0][0])):
        lines.append(f"| {client} | {size} | {r.pct(50):.3f} | {r.pct(99):.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tsblob-url", help="a running tsblob (default: spawn one)")
    ap.add_argument("--reduct-url", help="a running ReductStore (default: spawn one)")
    ap.add_argument("--sizes", default=",".join(SIZES), help="comma-separated subset of " + ",".join(SIZES))
    ap.add_argument("--clients", default="tsblob-sync,tsblob-async,reduct-py")
    ap.add_argument("--max-records", type=int, default=2000, help="records per size at most")
    ap.add_argument("--budget-mb", type=float, default=100, help="payload MB per size and client at most")
    ap.add_argument("--repeat", type=int, default=3,
                    help="repetitions (interleaved across clients); tables show the median")
    ap.add_argument("--markdown", type=Path, help="write the report here")
    ap.add_argument("--json", type=Path, help="write raw figures here")
    args = ap.parse_args()

    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="tsblob-pybench-"))
    spawned: List[Spawned] = []
    try:
        ts_url = args.tsblob_url
        if not ts_url and any(c.startswith("tsblob") for c in clients):
            port = free_port()
            s = Spawned([find_tsblob(), "serve", "--data", str(tmp / "tsblob"), "--listen", f"127.0.0.1:{port}"],
                        {}, tmp / "tsblob.log")
            spawned.append(s)
            ts_url = f"http://127.0.0.1:{port}"
            wait_ready(ts_url + "/health", "GET", s.proc, s.log)
        rs_url = args.reduct_url
        if not rs_url and "reduct-py" in clients:
            port = free_port()
            (tmp / "reduct").mkdir()
            s = Spawned([find_reductstore()], {"RS_DATA_PATH": str(tmp / "reduct"), "RS_PORT": str(port),
                                               "RS_HOST": "127.0.0.1", "RS_LOG_LEVEL": "WARNING",
                                               "RS_DISABLE_AUTH": "true"},  # 1.21 refuses to start otherwise
                        tmp / "reduct.log")
            spawned.append(s)
            rs_url = f"http://127.0.0.1:{port}"
            wait_ready(rs_url + "/api/v1/alive", "HEAD", s.proc, s.log)

        env: Dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(),
                               "cpus": os.cpu_count(), "tsblob_sdk": tsblob.__version__,
                               "aiohttp": aiohttp.__version__}
        if ts_url:
            with tsblob.Client(ts_url) as db:
                info = db.info()
                env.update(tsblob_server=info.version, tsblob_sync=info.sync)
                db.create_bucket("pybench", exist_ok=True)
        if rs_url:
            import reduct

            env["reduct_py"] = reduct.__version__
            with urllib.request.urlopen(rs_url + "/api/v1/info", timeout=5) as resp:
                env["reductstore"] = json.loads(resp.read()).get("version")
        print("settings:", json.dumps(env), flush=True)

        results: List[Phase] = []
        for size_name in sizes:
            size = SIZES[size_name]
            n = max(5, min(args.max_records, int(args.budget_mb * 1e6 // size)))
            p = Payloads(size)
            for rep in range(args.repeat):
                for c in clients:
                    if c == "tsblob-sync":
                        got = run_tsblob_sync(ts_url, "pybench", size_name, n, p, rep)
                    elif c == "tsblob-async":
                        got = asyncio.run(run_tsblob_async(ts_url, "pybench", size_name, n, p, rep))
                    elif c == "reduct-py":
                        got = asyncio.run(run_reduct(rs_url, "pybench", size_name, n, p, rep))
                    else:
                        sys.exit(f"unknown client {c}")
                    for ph in got:
                        print(f"{ph.client:13} {ph.size:>6} #{rep} {ph.phase:10} {ph.records:6} rec "
                              f"{ph.rate:10,.0f} rec/s {ph.mbps:9,.1f} MB/s", flush=True)
                    results.extend(got)

        report = "\n\n".join([
            f"Median of {args.repeat} interleaved repetitions per size and client.",
            "### Writes, one record per request (sequential)", table(results, "write"),
            "### Time-range read of the same records (one query, every byte checked)", table(results, "range read"),
            "### Write latency", latency_table(results),
            "Settings: `" + json.dumps(env) + "`",
        ])
        print("\n" + report)
        if args.markdown:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(report + "\n")
        if args.json:
            args.json.write_text(json.dumps({"settings": env, "results": [r.summary() for r in results]}, indent=1))
    finally:
        for s in spawned:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
