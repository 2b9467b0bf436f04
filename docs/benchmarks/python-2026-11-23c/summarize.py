#!/usr/bin/env python3
"""Summarizes alternated runs of bench_vs_reduct.py (its --json files): per run, each
client's rate is the median of its repetitions and the ratio to reduct-py is taken within
the run; across runs, the median and the range of those ratios.

    python summarize.py PREFIX VARIANT... (files PREFIX-<variant>-<run>.json)
"""
import glob
import json
import statistics
import sys
from collections import defaultdict

prefix, variants = sys.argv[1], sys.argv[2:]
SIZES = ["1KB", "10KB", "100KB", "1MB", "10MB"]
rows = defaultdict(lambda: defaultdict(list))  # (phase, client, size) -> variant -> [ratio per run]
rates = defaultdict(lambda: defaultdict(list))
for v in variants:
    for path in sorted(glob.glob(f"{prefix}-{v}-*.json")):
        res = json.load(open(path))["results"]
        by = defaultdict(list)
        for r in res:
            by[(r["phase"], r["client"], r["size"])].append(r["rate"])
        med = {k: statistics.median(x) for k, x in by.items()}
        for (phase, client, size), rate in med.items():
            rates[(phase, client, size)][v].append(rate)
            ref = med.get((phase, "reduct-py", size))
            if client != "reduct-py" and ref:
                rows[(phase, client, size)][v].append(rate / ref)


def fmt(xs, f):
    return f"{f(statistics.median(xs))} ({f(min(xs))}–{f(max(xs))})" if xs else ""


for phase in ("write", "range read"):
    print(f"\n{phase}: rec/s and ÷ reduct-py, median (range) of {len(glob.glob(f'{prefix}-{variants[0]}-*.json'))} runs\n")
    print("| size | client | " + " | ".join(f"{v} rec/s" for v in variants) + " | reduct-py rec/s | "
          + " | ".join(f"{v} ÷ reduct-py" for v in variants) + " |")
    print("|---" * (3 + 2 * len(variants)) + "|")
    for size in SIZES:
        for client in ("tsblob-sync", "tsblob-async"):
            k = (phase, client, size)
            if k not in rows:
                continue
            ref = sum((rates[(phase, "reduct-py", size)][v] for v in variants), [])
            print(f"| {size} | {client} | " + " | ".join(fmt(rates[k][v], lambda x: f"{x:,.0f}") for v in variants)
                  + f" | {fmt(ref, lambda x: f'{x:,.0f}')} | "
                  + " | ".join(fmt(rows[k][v], lambda x: f"{x:.2f}×") for v in variants) + " |")
