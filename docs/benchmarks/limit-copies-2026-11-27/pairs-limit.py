"""Old (one pool) against new (a copy per record) `limit`, alternated runs of run2.sh:
per read cell, limit's rec/s new/old per pair, and tsblob's % of limit under each."""
import collections, re, statistics as st, sys

rows = []
for line in open(sys.argv[1]):
    m = re.match(r'(\S+)\s+load=(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\d+) rec/s', line)
    if m:
        tag, load, phase, size, target, rate = m.groups()
        rows.append((tag, phase, int(size), target, float(rate)))
# A run is the rows of one tag until the tag changes.
runs, cur = [], None
for r in rows:
    if cur is None or cur[0] != r[0]:
        cur = (r[0], {})
        runs.append(cur)
    cur[1][(r[1], r[2], r[3])] = r[4]
pairs = [(runs[i][1], runs[i + 1][1]) for i in range(0, len(runs) - 1, 2)
         if runs[i][0] == 'old' and runs[i + 1][0] == 'new']
cells = sorted({(p, s) for (p, s, t) in pairs[0][0]}, key=lambda c: (c[0], c[1]))
fmt = lambda v: f'{st.median(v):.2f} ({min(v):.2f}-{max(v):.2f})'
pct = lambda v: f'{st.median(v)*100:.0f} % ({min(v)*100:.0f}-{max(v)*100:.0f})'
print(f'{len(pairs)} pairs')
print('| phase | size | limit new ÷ old | new lower in | tsblob % of old limit | tsblob % of new limit |')
print('|---|---|---|---|---|---|')
for ph, s in cells:
    ratio, lower, old_pct, new_pct = [], 0, [], []
    for o, n in pairs:
        lo, ln = o[(ph, s, 'limit')], n[(ph, s, 'limit')]
        ratio.append(ln / lo)
        lower += ln < lo
        old_pct.append(o[(ph, s, 'tsblob')] / lo)
        new_pct.append(n[(ph, s, 'tsblob')] / ln)
    print(f'| {ph} | {s} | {fmt(ratio)} | {lower} of {len(pairs)} | {pct(old_pct)} | {pct(new_pct)} |')
