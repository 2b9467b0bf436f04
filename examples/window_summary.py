#!/usr/bin/env python3
"""Pulls one time window of an entry from tsblob and summarises it: how many records, how
many bytes, sizes, the frame rate actually recorded, the longest gap, and the values of each
label. Optionally saves the payloads as files.

    pip install ./client-py
    python examples/window_summary.py --last 10s                       # the newest 10 s of cams/front
    python examples/window_summary.py --start 2024-05-01T12:00:00Z --stop 2024-05-01T12:05:00Z
    python examples/window_summary.py --last 1m --label motion=yes --save ./motion

The query is one streaming request: records are summarised as they arrive, so memory stays
small however long the window. ``--last`` counts back from the entry's newest record (not
from the clock), so it works on old recordings too. Exits 1 if the window is empty.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from collections import Counter, defaultdict
from typing import Dict, List, Optional, Sequence

from tsblob import Client, TsblobError, Unauthorized, from_micros, to_micros

_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_span(text: str) -> int:
    """``10s``, ``5m``, ``250ms``, ``1h`` -> microseconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: use e.g. 250ms, 10s, 5m, 1h")
    return int(round(float(m.group(1)) * _SECONDS[m.group(2)] * 1_000_000))


def parse_label(text: str) -> tuple:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"label filter {text!r} must be key=value")
    return key, value


def iso(us: int) -> str:
    return from_micros(us).isoformat().replace("+00:00", "Z")


def summarise(db: Client, bucket: str, entry: str, start: int, stop: int,
              labels: Dict[str, str], save: Optional[str]) -> Dict[str, object]:
    count = total = 0
    sizes: List[int] = []
    first = last = prev = None
    longest_gap = 0
    values: Dict[str, Counter] = defaultdict(Counter)
    if save:
        os.makedirs(save, exist_ok=True)
    # `with`: the connection is handed back at once even if the loop stops early.
    with db.query(bucket, entry, start=start, stop=stop, eq=labels or None) as records:
        for rec in records:
            count += 1
            total += rec.size
            sizes.append(rec.size)  # one int per record: fine for windows of millions
            first = rec.timestamp if first is None else first
            if prev is not None:
                longest_gap = max(longest_gap, rec.timestamp - prev)
            prev = last = rec.timestamp
            for k, v in rec.labels.items():
                values[k][v] += 1
            if save:
                ext = {"image/jpeg": ".jpg", "image/png": ".png"}.get(rec.content_type, ".bin")
                with open(os.path.join(save, f"{rec.timestamp}{ext}"), "wb") as out:
                    for chunk in rec.iter_chunks():
                        out.write(chunk)
    return {"count": count, "bytes": total, "sizes": sizes, "first": first, "last": last,
            "longest_gap": longest_gap, "labels": values}


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("TSBLOB_URL", "http://127.0.0.1:8686"))
    p.add_argument("--token", default=os.environ.get("TSBLOB_TOKEN"))
    p.add_argument("--bucket", default="cams")
    p.add_argument("--entry", default="front")
    w = p.add_mutually_exclusive_group()
    w.add_argument("--last", type=parse_span, help="the newest span of the entry, e.g. 10s or 5m")
    w.add_argument("--start", help="window start (inclusive): µs, or ISO 8601 like 2024-05-01T12:00:00Z")
    p.add_argument("--stop", help="window end (exclusive), with --start; default: after the newest record")
    p.add_argument("--label", type=parse_label, action="append", default=[],
                   help="only records whose label equals this, key=value (repeatable)")
    p.add_argument("--save", metavar="DIR", help="also write each payload to DIR/<timestamp>.<ext>")
    a = p.parse_args(argv)
    if a.stop and a.last:
        p.error("--stop goes with --start, not with --last")

    try:
        with Client(a.url, token=a.token) as db:
            info = db.get_entry(a.bucket, a.entry)
            if info.latest is None:
                print(f"{a.bucket}/{a.entry} is empty", file=sys.stderr)
                return 1
            stop = to_micros(a.stop) if a.stop else info.latest + 1
            if a.start is not None:
                start = int(a.start) if a.start.isdigit() else to_micros(a.start)
            else:
                start = max(0, stop - (a.last or parse_span("10s")))
            s = summarise(db, a.bucket, a.entry, start, stop, dict(a.label), a.save)
    except Unauthorized as e:
        # (the SDK's advice names its own `token=`: this script's is --token)
        print(f"error: {e}\n(give this script a token with --token or TSBLOB_TOKEN)", file=sys.stderr)
        return 1
    except TsblobError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    where = f"{a.bucket}/{a.entry} [{iso(start)}, {iso(stop)})"
    if a.label:
        where += " where " + " and ".join(f"{k}={v}" for k, v in a.label)
    print(where)
    if not s["count"]:
        print("  no records in this window")
        return 1
    sizes = s["sizes"]
    span = (s["last"] - s["first"]) / 1e6
    print(f"  records   {s['count']}  ({iso(s['first'])} .. {iso(s['last'])}, {span:.3f} s)")
    print(f"  bytes     {s['bytes']}  ({s['bytes'] / 1e6:.2f} MB)")
    print(f"  size      min {min(sizes)}  median {int(statistics.median(sizes))}  max {max(sizes)}")
    if s["count"] > 1 and span > 0:
        print(f"  rate      {(s['count'] - 1) / span:.2f} records/s, longest gap {s['longest_gap'] / 1e3:.1f} ms")
    for key, counter in sorted(s["labels"].items()):
        if len(counter) > 10 and len(counter) > s["count"] // 2:  # an id or a sequence number
            print(f"  label {key:<10} {len(counter)} distinct values")
            continue
        top = counter.most_common(4)
        more = f" (+{len(counter) - len(top)} more values)" if len(counter) > len(top) else ""
        print(f"  label {key:<10} " + ", ".join(f"{v}: {n}" for v, n in top) + more)
    if a.save:
        print(f"  saved     {s['count']} files in {a.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
