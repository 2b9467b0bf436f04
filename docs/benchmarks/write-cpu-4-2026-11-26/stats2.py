import sys,re,statistics,collections
d=collections.defaultdict(list)
for f in sys.argv[1:]:
    for l in open(f):
        m=re.search(r'(bin-\S+).*server CPU/write= ([\d.]+) us\s+writer thread CPU/write= ([\d.]+)',l)
        if m: d[m.group(1)].append((float(m.group(2)),float(m.group(3))))
for b,v in d.items():
    us=[x[0] for x in v]; wr=[x[1] for x in v]
    print(f"{b}: n={len(v)} server CPU/write median {statistics.median(us):.1f} us ({min(us)}-{max(us)}); writer thread median {statistics.median(wr):.1f} us ({min(wr)}-{max(wr)})")
