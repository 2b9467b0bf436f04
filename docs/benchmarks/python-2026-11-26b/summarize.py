"""Median (range) of write rates and ratios to reduct-py over runs of bench_vs_reduct.py.

python summarize.py <dir> <tag> old new: reads <tag>-<variant>-<run>.json; each run's rate is
the median of its repetitions (per client and size), its ratio that rate / reduct-py's in the
same run."""
import json, statistics, sys
from pathlib import Path
d, tag, variants = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
SIZES = ["1KB", "10KB", "100KB", "1MB", "10MB"]
def med_range(xs, fmt):
    return f"{fmt(statistics.median(xs))} ({fmt(min(xs))}–{fmt(max(xs))})" if xs else ""
runs = {}
for v in variants:
    for f in sorted(d.glob(f"{tag}-{v}-*.json")):
        res = json.loads(f.read_text())["results"]
        rates = {}
        for r in res:
            if r["phase"] == "write":
                rates.setdefault((r["client"], r["size"]), []).append(r["rate"])
        runs.setdefault(v, []).append({k: statistics.median(x) for k, x in rates.items()})
sizes = [s for s in SIZES if any((("reduct-py", s) in run) for rs in runs.values() for run in rs)]
print("| size | client | " + " | ".join(f"{v} rec/s" for v in variants) + " | reduct-py rec/s | "
      + " | ".join(f"{v} ÷ reduct-py" for v in variants) + " |")
print("|---|---|" + "---|" * (2 * len(variants) + 1))
for s in sizes:
    for c in ("tsblob-sync", "tsblob-async"):
        cells = [med_range([run[(c, s)] for run in runs[v] if (c, s) in run], lambda x: f"{x:,.0f}") for v in variants]
        ref = [run[("reduct-py", s)] for v in variants for run in runs[v]]
        ratios = [med_range([run[(c, s)] / run[("reduct-py", s)] for run in runs[v] if (c, s) in run],
                            lambda x: f"{x:.2f}×") for v in variants]
        print(f"| {s} | {c} | " + " | ".join(cells) + f" | {med_range(ref, lambda x: f'{x:,.0f}')} | "
              + " | ".join(ratios) + " |")
