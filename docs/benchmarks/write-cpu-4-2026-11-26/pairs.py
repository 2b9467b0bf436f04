import sys,re,statistics
for f in sys.argv[1:]:
    rows=[]
    for l in open(f):
        m=re.search(r'(bin-\S+).*server CPU/write= ([\d.]+) us\s+writer thread CPU/write= ([\d.]+)',l)
        if m: rows.append((m.group(1),float(m.group(2)),float(m.group(3))))
    ds=[];dw=[]
    for i in range(0,len(rows)-1,2):
        a,b=rows[i],rows[i+1]
        ds.append(b[1]-a[1]); dw.append(b[2]-a[2])
    print(f"{f}: {len(ds)} pairs; new-base server median {statistics.median(ds):+.1f} us (new lower in {sum(d<0 for d in ds)}); writer thread median {statistics.median(dw):+.1f} us (new lower in {sum(d<0 for d in dw)})")
