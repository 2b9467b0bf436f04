import sys,re,statistics,collections
d=collections.defaultdict(list)
for f in sys.argv[1:]:
    for l in open(f):
        m=re.search(r'(bin-\S+).*rec/s\(median,range\)= (\d+).*CPU/write= ([\d.]+)',l)
        if m: d[m.group(1)].append((float(m.group(3)),int(m.group(2))))
for b,v in d.items():
    us=[x[0] for x in v]; r=[x[1] for x in v]
    print(f"{b}: n={len(v)} CPU/write median {statistics.median(us):.1f} us ({min(us)}-{max(us)}), rec/s median {statistics.median(r):.0f}")
