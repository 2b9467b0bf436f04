#!/usr/bin/env python3
# usage: pairs.py runs-X.txt -> per cell: server CPU us/record of each binary (median, range), pairs where the second is lower, and tsblob/limit rec/s
import sys, statistics as st, collections
rows = collections.defaultdict(list)   # (phase,size) -> [(binary, cpu, ratio, limit_cpu)]
for f in sys.argv[1:]:
    t = {}
    for line in open(f):
        p = line.split()
        if len(p) < 9: continue
        b, ph, size, tg, rate = p[0], p[2], p[3], p[4], float(p[5])
        cpu = float(line.split('cpu=')[1].split()[0])
        if tg == 'tsblob': t[(ph, size)] = (rate, cpu)
        else:
            r, c = t.pop((ph, size)); rows[(ph, size)].append((b, c, r / rate, cpu))
fm = lambda xs: f"{st.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"
for k, rs in rows.items():
    names = list(dict.fromkeys(r[0] for r in rs))
    a, b = names[0], names[1]
    A = [r for r in rs if r[0] == a]; B = [r for r in rs if r[0] == b]
    wins = sum(1 for x, y in zip(A, B) if y[1] < x[1])
    print(f"{k[0]} {k[1]}: {a} cpu {fm([r[1] for r in A])}  {b} cpu {fm([r[1] for r in B])}  {b} lower in {wins} of {min(len(A),len(B))}; "
          f"tsblob/limit {a} {fm([r[2] for r in A])} {b} {fm([r[2] for r in B])}; limit cpu {fm([r[3] for r in rs])}")
