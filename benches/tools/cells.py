#!/usr/bin/env python3
# usage: cells.py report.md... -> per cell: tsblob % of limit-store (writes) / % of limit (reads) per run
import sys, re
PH = ['write-single', 'write-batch', 'range-whole', 'range-sub', 'point-read']
SZ = ['1 KiB', '10 KiB', '100 KiB', '1 MiB', '10 MiB']
def cells(p):
    out = {}; phase = None
    for line in open(p):
        if not line.startswith('| ') or line.startswith('| phase') : continue
        c = [x.strip() for x in line.strip().strip('|').split('|')]
        if len(c) < 13: continue
        if c[0]: phase = c[0]
        pl, pls = c[9], c[10]
        pct = pls if phase.startswith('write') else pl
        if phase in PH and c[1] in SZ and (phase, c[1]) not in out and pct.endswith('%'):
            out[(phase, c[1])] = (pct, c[12])
    return out
runs = [cells(p) for p in sys.argv[1:]]
phases = ['write-single', 'write-batch', 'range-whole', 'range-sub', 'point-read']
sizes = ['1 KiB', '10 KiB', '100 KiB', '1 MiB', '10 MiB']
def b(p):
    try: return f"**{p}**" if int(p.rstrip(' %')) >= 80 else p
    except: return p
print('| phase | ' + ' | '.join(sizes) + ' |'); print('|---|' + '---|' * len(sizes))
for ph in phases:
    row = []
    for s in sizes:
        row.append(' / '.join(b(r.get((ph, s), ('–',))[0]) for r in runs))
    print(f'| {ph} | ' + ' | '.join(row) + ' |')
both = [k for k in runs[0] if all(int(r[k][0].rstrip(' %')) >= 80 for r in runs if k in r)]
print('\n>=80 in all runs:', both)
print('cpu us/rec single 1 KiB:', [r[('write-single','1 KiB')][1] for r in runs])
