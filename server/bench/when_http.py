"""Records evaluated per second by a `when` condition over HTTP with `meta=true`.

Starts `tsblob serve` (the binary given with --bin) on a temporary data folder, writes N
records of 64 bytes labelled like the engine figure (`benches/benches/figures.rs`,
`when_query`: 4 cameras x 50 scores), then times `GET .../query?meta=true&when=...` with the
same three-clause condition (15 % of the records match, their metadata is sent as NDJSON),
and with a condition that matches nothing (a pure index scan). Best of 3 each.

    python server/bench/when_http.py --bin target/release/tsblob --records 1000000

Needs the SDK importable (`pip install -e client-py`) for loading the records.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import tsblob

COND = {"$and": [{"&cam": {"$eq": "front"}}, {"&score": {"$gte": 10}}, {"&score": {"$lt": 40}}]}
NONE = {"$and": [{"&cam": {"$eq": "front"}}, {"&score": {"$gte": 10}}, {"&score": {"$lt": 0}}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed_query(port: int, when: dict) -> tuple[float, int, int]:
    path = "/api/v1/b/b/e/query?meta=true&when=" + urllib.parse.quote(json.dumps(when))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t = time.perf_counter()
    conn.request("GET", path)
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()[:300]
    body = resp.read()
    elapsed = time.perf_counter() - t
    conn.close()
    return elapsed, body.count(b"\n"), len(body)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.records
    data = Path(tempfile.mkdtemp(prefix="tsblob-when-"))
    port = free_port()
    proc = subprocess.Popen([args.bin, "serve", "--data", str(data / "d"), "--listen", f"127.0.0.1:{port}",
                             "--sync", "never"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        db = tsblob.Client(f"http://127.0.0.1:{port}")
        db.create_bucket("b")
        payload = bytes(64)
        t = time.perf_counter()
        step = 20_000
        for lo in range(0, n, step):
            db.write_batch("b", "e", [
                (i * 1000, payload, {"cam": ("front", "rear", "left", "right")[i % 4], "score": str((i // 4) % 50)})
                for i in range(lo, min(n, lo + step))
            ])
        print(f"loaded {n} records in {time.perf_counter() - t:.1f} s")
        want = sum(1 for i in range(n) if i % 4 == 0 and 10 <= (i // 4) % 50 < 40)
        for name, when, expect in [("3 clauses, 15 % match", COND, want), ("3 clauses, no match", NONE, 0)]:
            best = None
            for _ in range(3):
                elapsed, lines, size = timed_query(port, when)
                assert lines == expect, (lines, expect)
                best = elapsed if best is None else min(best, elapsed)
            assert best is not None
            print(f"| meta=true, {name} | {n / best / 1e6:.2f} M records evaluated/s "
                  f"({best * 1e3:.0f} ms, {expect} lines, {size / 1e6:.1f} MB NDJSON) |")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
