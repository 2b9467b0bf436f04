"""Differential check of `when` conditions: the same records and conditions sent to tsblob and
to a real ReductStore, the returned timestamps compared.

    python scripts/when_diff.py --tsblob target/release/tsblob \
        --reductstore ~/.cache/tsblob/peers/bin/reductstore

Prints one line per condition (`same`, or both answers) and exits non-zero if a condition
not listed as a known difference gives different records. Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

N = 200

# (condition as JSON text, known difference or None). Text, not dicts: key order and
# duplicate keys are part of the language.
CONDITIONS = [
    ('{"&n": {"$gt": 150}}', None),
    ('{"$gt": ["&n", 150]}', None),
    ('{"&cam": {"$eq": "a"}, "&n": {"$lt": 30}}', None),
    ('{"&n": {"$ne": 5}, "&n": {"$lte": 8}}', None),  # a repeated key: its last value
    ('{"$and": [{"&n": {"$ne": 5}}, {"&n": {"$lte": 8}}]}', None),
    ('{"$in": ["&cam", "a", "c"], "&n": {"$lt": 12}}', None),
    ('{"$nin": ["&cam", "a", "c"], "&n": {"$lt": 12}}', None),
    ('{"$or": [{"&n": {"$lt": 5}}, {"&n": {"$gte": 195}}]}', None),
    ('{"$not": [{"&n": {"$lt": 190}}]}', None),
    ('{"$and": [true, {"&n": {"$lt": 3}}]}', None),
    ('{"&val": {"$gte": 2.5}, "&n": {"$lt": 40}}', None),
    ('{"&val": {"$lt": 1}}', None),
    ('{"&flag": {"$eq": true}, "&n": {"$lt": 20}}', None),
    ('{"$not": "&flag", "&n": {"$lt": 20}}', None),
    ('{"&cam": {"$gt": "a"}, "&n": {"$lt": 9}}', None),
    ('{"$gte": ["$timestamp", 190000]}', None),
    ('{"$lt": ["$id", 3000]}', None),
    ('{"&opt": {"$eq": "x"}}', None),
    ('{"&opt": {"$ne": "x"}}', None),
    ('{"$exists": ["opt"], "&n": {"$lt": 30}}', None),
    ('{"$has": ["opt", "cam"], "&n": {"$lt": 30}}', None),
    ('{"$each_n": 7}', None),
    ('{"&cam": {"$eq": "b"}, "$each_n": 3}', None),
    ('{"$each_n": 3, "&cam": {"$eq": "b"}}', None),
    ('{"$each_t": "5ms"}', None),
    ('{"$each_t": 0.01}', None),
    ('{"&cam": {"$eq": "c"}, "$each_t": "10ms"}', None),
    ('{"&n": {"$gt": 10}, "$limit": 5}', None),
    ('{"$limit": 3, "&n": {"$gt": 10}}', None),
    ('{"&n": {"$eq": "10"}}', "tsblob reads the string constant \"10\" as a number"),
    ('{"$or": [{"&opt": {"$eq": "x"}}, {"&n": {"$lt": 3}}]}',
     "ReductStore fails the whole condition of a record without `opt`"),
    ('{"$not": [{"&opt": {"$eq": "x"}}], "&n": {"$lt": 10}}',
     "ReductStore fails the whole condition of a record without `opt`"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None
         ) -> tuple[int, dict, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, data


def wait(port: int) -> None:
    for _ in range(400):
        try:
            call(port, "GET", "/health" if port == TS_PORT else "/api/v1/alive")
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"no server on port {port}")


def labels_of(i: int) -> dict:
    labels = {"n": str(i), "cam": "abc"[i % 3], "val": f"{(i % 7) / 2}", "flag": "true" if i % 4 == 0 else "false"}
    if i % 5 == 0:
        labels["opt"] = "x" if i % 10 == 0 else "y"
    return labels


def tsblob_query(cond: str) -> list:
    status, _, body = call(TS_PORT, "GET", "/api/v1/b/b/e/query?meta=true&when=" + urllib.parse.quote(cond))
    if status != 200:
        return [f"HTTP {status}: {body[:200]!r}"]
    return [json.loads(line)["ts"] for line in body.splitlines() if line.strip()]


def reduct_query(cond: str) -> list:
    status, _, body = call(RS_PORT, "POST", "/api/v1/b/b/e/q",
                           ('{"query_type": "QUERY", "when": ' + cond + "}").encode())
    if status != 200:
        return [f"HTTP {status}: {body[:200]!r}"]
    qid = json.loads(body)["id"]
    out: list = []
    while True:
        status, hdrs, _ = call(RS_PORT, "GET", f"/api/v1/b/b/e/batch?q={qid}")
        if status == 204:
            return out
        if status != 200:
            return out + [f"HTTP {status}"]
        out.extend(sorted(int(k[len("x-reduct-time-"):]) for k in hdrs if k.startswith("x-reduct-time-")))
        if hdrs.get("x-reduct-last") == "true":
            return out


TS_PORT = RS_PORT = 0


def main() -> int:
    global TS_PORT, RS_PORT
    ap = argparse.ArgumentParser()
    ap.add_argument("--tsblob", required=True)
    ap.add_argument("--reductstore", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="when-diff-")
    TS_PORT, RS_PORT = free_port(), free_port()
    procs = [
        subprocess.Popen([args.tsblob, "serve", "--data", f"{tmp}/ts", "--listen", f"127.0.0.1:{TS_PORT}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([args.reductstore], stdout=open(f"{tmp}/rs.log", "wb"), stderr=subprocess.STDOUT,
                         env={**os.environ, "RS_DATA_PATH": f"{tmp}/rs", "RS_HOST": "127.0.0.1",
                              "RS_PORT": str(RS_PORT), "RS_LOG_LEVEL": "WARN", "RS_DISABLE_AUTH": "true"}),
    ]
    try:
        wait(TS_PORT)
        wait(RS_PORT)
        assert call(TS_PORT, "POST", "/api/v1/b/b")[0] == 201
        assert call(RS_PORT, "POST", "/api/v1/b/b", b"{}")[0] == 200
        for i in range(N):
            ts = (i + 1) * 1000
            lab = labels_of(i)
            h_ts = {f"x-tsblob-label-{k}": v for k, v in lab.items()}
            h_rs = {f"x-reduct-label-{k}": v for k, v in lab.items()}
            assert call(TS_PORT, "POST", f"/api/v1/b/b/e?ts={ts}", b"x", h_ts)[0] == 201
            st = call(RS_PORT, "POST", f"/api/v1/b/b/e?ts={ts}", b"x", {**h_rs, "content-type": "application/octet-stream"})
            assert st[0] == 200, st
        failed = 0
        for cond, known in CONDITIONS:
            a, b = tsblob_query(cond), reduct_query(cond)
            if a == b:
                print(f"same ({len(a):3} records)  {cond}")
            else:
                tag = f"KNOWN ({known})" if known else "DIFFERENT"
                failed += known is None
                short = lambda v: v if len(v) <= 12 else v[:12] + ["..."]  # noqa: E731
                print(f"{tag}  {cond}\n    tsblob {len(a)}: {short(a)}\n    reduct {len(b)}: {short(b)}")
        return 1 if failed else 0
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        if os.environ.get("KEEP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
