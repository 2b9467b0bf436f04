import re,sys,collections,statistics as st
d=collections.defaultdict(lambda: collections.defaultdict(list))
keys=[]
for f in sys.argv[1:]:
  for l in open(f):
    m=re.match(r'(pd\w+)-(\d)\s+load=\S+\s+(\S+)\s+(\d+)\s+tsblob\s+(\d+) rec/s\s+cpu=\s*([\d.]+)',l)
    if not m: continue
    pd,i,ph,sz,r,c=m.groups()
    if pd not in keys: keys.append(pd)
    d[(ph,int(sz))][pd].append((int(r),float(c)))
print('| phase | size | ' + ' | '.join(f'{k} rec/s median (range) | {k} CPU µs/rec' for k in keys)+' |')
for k in sorted(d, key=lambda k:(k[1],k[0])):
    row=[k[0], str(k[1])]
    for pd in keys:
        v=d[k][pd]
        row.append(f'{st.median([x[0] for x in v]):,.0f} ({min(x[0] for x in v):,}–{max(x[0] for x in v):,})')
        row.append(f'{st.median([x[1] for x in v]):,.1f}')
    print('| '+' | '.join(row)+' |')
