#!/usr/bin/env python3
# usage: summary.py runs-X.txt... -> per binary and cell: server CPU us/record and tsblob/limit rec/s, median (range)
import sys, statistics as st, collections
cells = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    run = {}
    for line in open(f):
        p = line.split()
        if len(p) < 9 or p[0].startswith('#'): continue
        binary, phase, size, target, rate = p[0], p[2], p[3], p[4], float(p[5])
        cpu = float(line.split('cpu=')[1].split()[0])
        key = (phase, size)
        if target == 'tsblob':
            run[key] = (rate, cpu)
        else:
            t = run.pop(key)
            c = cells[key][binary]
            c.append((t[1], t[0] / rate, t[0], rate, cpu))
def fmt(xs, d=2):
    return f"{st.median(xs):.{d}f} ({min(xs):.{d}f}–{max(xs):.{d}f})"
for key in sorted(cells, key=lambda k: (int(k[1]), k[0])):
    for b, rs in sorted(cells[key].items()):
        print(f"{key[0]:12} {key[1]:>8} {b:9} n={len(rs)} cpu {fmt([r[0] for r in rs])} us/rec  ratio {fmt([r[1] for r in rs])}  tsblob {fmt([r[2] for r in rs],0)}  limit {fmt([r[3] for r in rs],0)} rec/s  limit cpu {fmt([r[4] for r in rs])}")
