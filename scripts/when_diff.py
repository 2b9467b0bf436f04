"""Differential check of `when` conditions: the same records and conditions sent to tsblob and
to a real ReductStore, the returned timestamps compared.

    python scripts/when_diff.py --tsblob target/release/tsblob \
        --reductstore ~/.cache/tsblob/peers/bin/reductstore

Prints one line per condition (`same`, or both answers) and exits non-zero if a condition
not listed as a known difference gives different records. Every condition runs twice: on
one entry, and as a multi-entry query over three (where aggregates count per entry). Besides the hand-written cases, a
seeded generator (`--generated`, `--seed`) writes conditions over every operator, labels
that some records lack and numeric strings. An answer that is an HTTP error counts as
`error` on both sides (the status and message differ by design). Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
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
    # `$has` with a computed name: the label named by the operand's value
    ('{"$has": [{"$add": ["c", "am"]}], "&n": {"$lt": 30}}', None),
    ('{"$has": ["&cam"], "&n": {"$lt": 30}}', None),
    ('{"$not": [{"$has": ["&opt"]}], "&n": {"$lt": 60}}', None),
    ('{"$each_n": 7}', None),
    ('{"&cam": {"$eq": "b"}, "$each_n": 3}', None),
    ('{"$each_n": 3, "&cam": {"$eq": "b"}}', None),
    ('{"$each_t": "5ms"}', None),
    ('{"$each_t": 0.01}', None),
    ('{"&cam": {"$eq": "c"}, "$each_t": "10ms"}', None),
    ('{"&n": {"$gt": 10}, "$limit": 5}', None),
    ('{"$limit": 3, "&n": {"$gt": 10}}', None),
    ('{"&n": {"$eq": "10"}}', None),  # a string constant stays text
    ('{"$or": [{"&opt": {"$eq": "x"}}, {"&n": {"$lt": 3}}]}', None),  # a missing label fails all
    ('{"$not": [{"&opt": {"$eq": "x"}}], "&n": {"$lt": 10}}', None),
    ('{"$not": "&opt"}', None),
    ('{"$nin": ["&opt", "x"]}', None),
    ('{"$timestamp": {"$gt": 150000}}', None),
    ('true', None),
    ('{"$each_n": "&k"}', None),
    ('{"$limit": [{"$add": ["&k", 1]}]}', None),
    ('{"$limit": {"$add": ["&k", 1]}}',
     "an object under an aggregate: ReductStore reads it as object notation on `$limit` (422); tsblob as the operand"),
    ('{"$eq": [{"$add": ["&opt", "&cam"]}, "xa"]}', None),  # $add joins two texts
    ('{"&s": {"$ne": "$$cam"}, "&n": {"$lt": 3}}', None),  # "$$" escapes a "$"
    ('{"$gate": ["5ms", "&flag"]}', None),
    ('{"$gate": ["3ms", {"&cam": {"$eq": "a"}}]}', None),
    ('{"$gate": [0.004, {"&opt": {"$eq": "x"}}]}', None),
    ('{"$gate": ["&k", {"$eq": [{"$rem": ["&n", 10]}, 3]}]}', None),
    ('{"&cam": {"$ne": "b"}, "$gate": ["2ms", "&flag"]}', None),
    ('{"&n": {"$gate": "5ms"}}', None),
    ('{"$each_t": "1001us"}', "ReductStore converts durations through float seconds and keeps a record every 1000 us"),
    # An object under a logical operator: an error on both (tsblob's selected every record).
    ('{"$and": {}}', None),
    ('{"$not": {}}', None),
    ('{"$or": {"&n": {"$lt": 5}, "&cam": {"$eq": "a"}}}', None),
]

# The generator's vocabulary: labels every record has, one most lack (`opt`), one that is
# text (`s`), constants of every JSON type including numeric strings.
LABELS = ["&n", "&cam", "&val", "&flag", "&opt", "&s", "&k"]
CONSTS = [0, 1, 2, 3, 10, 150, -1, 2.5, 0.5, True, False, "a", "b", "x", "10", "2.5", "true",
          "", "abc", "cam-1", "5ms", "1s"]
CMP = ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]


def g_value(r: random.Random, depth: int):
    k = r.randrange(10 if depth > 0 else 7)
    if k < 3:
        return r.choice(LABELS)
    if k < 6:
        return r.choice(CONSTS)
    if k == 6:
        return "$timestamp"
    op = r.choice(["$add", "$sub", "$mult", "$div", "$div_num", "$rem", "$abs", "$cast", "$ref",
                   "$second", "$minute", "$hour", "$day", "$month", "$year", "$weekday"])
    if op in ("$add", "$mult"):
        return {op: [g_value(r, depth - 1) for _ in range(r.randrange(1, 4))]}
    if op in ("$sub", "$div", "$div_num"):
        return {op: [g_value(r, depth - 1), g_value(r, depth - 1)]}
    if op == "$rem":  # ReductStore panics on an integer remainder by 0: a non-zero divisor
        return {op: [r.choice(["&n", "&k", "&val"]), r.choice([2, 3, 7, 2.5])]}
    if op == "$abs":
        return {op: [g_value(r, depth - 1)]}
    if op == "$cast":
        return {op: [g_value(r, depth - 1), r.choice(["int", "float", "string", "bool"])]}
    if op == "$ref":
        return {op: [r.choice(["n", "cam", "opt", "s"])]}
    return {op: ["$timestamp"]}


def g_leaf(r: random.Random, depth: int):
    k = r.randrange(9)
    if k < 3:  # object notation on a label
        return {r.choice(LABELS): {r.choice(CMP): g_value(r, depth)}}
    if k < 5:  # array notation
        return {r.choice(CMP): [g_value(r, depth), g_value(r, depth)]}
    if k == 5:
        return {r.choice(["$in", "$nin"]): [r.choice(LABELS)] + [r.choice(CONSTS) for _ in range(r.randrange(1, 4))]}
    if k == 6:
        return {r.choice(["$exists", "$has"]): [r.choice(["opt", "n", "cam", "nope"])]}
    if k == 7:
        return {r.choice(["$contains", "$starts_with", "$ends_with"]): [r.choice(LABELS), r.choice(["a", "1", "cam", "x", ""])]}
    return {r.choice(["$timestamp", "$id"]): {r.choice(CMP): r.randrange(0, 201000, 1000)}}


def g_cond(r: random.Random, depth: int):
    if depth == 0 or r.randrange(3) == 0:
        return g_leaf(r, 1)
    op = r.choice(["$and", "$or", "$not", "$xor", "$all_of", "$any_of", "$none_of", "$one_of"])
    return {op: [g_cond(r, depth - 1) for _ in range(r.randrange(1, 4))]}


def generated(seed: int, count: int) -> list:
    r = random.Random(seed)
    out = []
    for _ in range(count):
        c = g_cond(r, 3)
        # an aggregate after (or before) the condition, in some cases
        k = r.randrange(6)
        if k == 0:
            c = {**c, "$each_n": r.choice([2, 3, 7, "&k"])} if "$each_n" not in c else c
        elif k == 1:
            c = {**c, "$limit": r.choice([0, 1, 5, 40])} if "$limit" not in c else c
        elif k == 2:
            c = {**c, "$each_t": r.choice(["5ms", "10ms", 0.02])} if "$each_t" not in c else c
        elif k == 3:
            c = {**c, "$gate": [r.choice(["2ms", "7ms", 0.003, "&k"]), g_cond(r, 1)]} if "$gate" not in c else c
        out.append((json.dumps(c), None))
    return out


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
    labels = {"n": str(i), "cam": "abc"[i % 3], "val": f"{(i % 7) / 2}", "flag": "true" if i % 4 == 0 else "false",
              "s": f"cam-{i % 4}", "k": str(1 + i % 3)}
    if i % 5 == 0:
        labels["opt"] = "x" if i % 10 == 0 else "y"
    return labels


# Multi-entry queries (ReductStore's `POST /api/v1/io/{bucket}/q` with `entries`, tsblob's
# `GET /api/v1/b/{bucket}/query?entries=`): `e` and two more entries, `f` between `e`'s
# timestamps and `g` on them (ties), with other labels. Aggregates count per entry in both.
MULTI = {"f": (500, 7), "g": (0, 3)}  # entry: (timestamp offset, label index offset)


def tsblob_multi(cond: str) -> list:
    status, _, body = call(TS_PORT, "GET", "/api/v1/b/b/query?entries=e,f,g&meta=true&when="
                           + urllib.parse.quote(cond))
    if status != 200:
        return ["error"]
    lines = [json.loads(line) for line in body.splitlines() if line.strip()]
    return sorted((m["ts"], m["entry"]) for m in lines)


def reduct_multi(cond: str) -> list:
    status, _, body = call(RS_PORT, "POST", "/api/v1/io/b/q",
                           ('{"query_type": "QUERY", "entries": ["e", "f", "g"], "when": ' + cond + "}").encode())
    if status != 200:
        return ["error"]
    qid = json.loads(body)["id"]
    out: list = []
    while True:
        status, hdrs, _ = call(RS_PORT, "GET", "/api/v1/io/b/read", headers={"x-reduct-query-id": str(qid)})
        if status == 204:
            break
        if status != 200:
            return ["error"]
        entries = hdrs.get("x-reduct-entries", "").split(",")
        start = int(hdrs.get("x-reduct-start-ts", "0"))
        for k in hdrs:
            parts = k.split("-")
            if len(parts) == 4 and parts[:2] == ["x", "reduct"] and parts[2].isdigit() and parts[3].isdigit():
                out.append((start + int(parts[3]), entries[int(parts[2])]))
        if hdrs.get("x-reduct-last") == "true":
            break
    return sorted(out)


def tsblob_query(cond: str) -> list:
    status, _, body = call(TS_PORT, "GET", "/api/v1/b/b/e/query?meta=true&when=" + urllib.parse.quote(cond))
    if status != 200:
        return ["error"]
    return [json.loads(line)["ts"] for line in body.splitlines() if line.strip()]


def reduct_query(cond: str) -> list:
    status, _, body = call(RS_PORT, "POST", "/api/v1/b/b/e/q",
                           ('{"query_type": "QUERY", "when": ' + cond + "}").encode())
    if status != 200:
        return ["error"]
    qid = json.loads(body)["id"]
    out: list = []
    while True:
        status, hdrs, _ = call(RS_PORT, "GET", f"/api/v1/b/b/e/batch?q={qid}")
        if status == 204:
            return out
        if status != 200:
            return ["error"]
        out.extend(sorted(int(k[len("x-reduct-time-"):]) for k in hdrs if k.startswith("x-reduct-time-")))
        if hdrs.get("x-reduct-last") == "true":
            return out


TS_PORT = RS_PORT = 0


def main() -> int:
    global TS_PORT, RS_PORT
    ap = argparse.ArgumentParser()
    ap.add_argument("--tsblob", required=True)
    ap.add_argument("--reductstore", required=True)
    ap.add_argument("--generated", type=int, default=600, help="generated conditions")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--quiet", action="store_true", help="print differences only")
    ap.add_argument("--no-multi", action="store_true",
                    help="skip the multi-entry pass (each condition over entries e, f, g)")
    ap.add_argument("--only", action="append", metavar="WHEN",
                    help="check this condition (JSON text) instead of the corpus; repeatable")
    args = ap.parse_args()
    if args.only:
        conditions = [(c, None) for c in args.only]
    else:
        conditions = CONDITIONS + generated(args.seed, args.generated)
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
            for entry, (dt, dl) in MULTI.items():
                lab = labels_of(i + dl)
                h_ts = {f"x-tsblob-label-{k}": v for k, v in lab.items()}
                h_rs = {f"x-reduct-label-{k}": v for k, v in lab.items()}
                assert call(TS_PORT, "POST", f"/api/v1/b/b/{entry}?ts={ts + dt}", b"x", h_ts)[0] == 201
                st = call(RS_PORT, "POST", f"/api/v1/b/b/{entry}?ts={ts + dt}", b"x",
                          {**h_rs, "content-type": "application/octet-stream"})
                assert st[0] == 200, st
        failed = agree = 0
        checks = [(c, k, "") for c, k in conditions]
        if not args.no_multi:
            checks += [(c, k, "entries=e,f,g ") for c, k in conditions]
        for cond, known, mode in checks:
            if mode:
                a, b = tsblob_multi(cond), reduct_multi(cond)
            else:
                a, b = tsblob_query(cond), reduct_query(cond)
            if a == b:
                agree += 1
                if not args.quiet:
                    print(f"same ({len(a):3} records)  {mode}{cond}")
            else:
                tag = f"KNOWN ({known})" if known else "DIFFERENT"
                failed += known is None
                short = lambda v: v if len(v) <= 12 else v[:12] + ["..."]  # noqa: E731
                print(f"{tag}  {mode}{cond}\n    tsblob {len(a)}: {short(a)}\n    reduct {len(b)}: {short(b)}")
        print(f"{agree} of {len(checks)} queries agree ({len(conditions)} conditions, on one entry"
              f"{'' if args.no_multi else ' and on three'}); {failed} unexpected differences")
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
