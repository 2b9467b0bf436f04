import sys, re, statistics as st, collections
rows=collections.defaultdict(list)
for line in open(sys.argv[1]):
    m=re.match(r'(plain|crc)(\d+)\s+load=\S+\s+(\S+)\s+(\d+)\s+(\S+)\s+(\d+) rec/s\s+cpu=\s*([\d.]+)',line)
    if not m: continue
    kind,i,phase,size,target,rate,cpu=m.groups()
    rows[(phase,int(size),target,kind)].append((int(i),int(rate),float(cpu)))
def med(xs): return st.median(xs)
print("| phase | size | limit rec/s | limit+CRC rec/s | limit+CRC ÷ limit (median, range) | limit CPU us | limit+CRC CPU us | tsblob rec/s | tsblob ÷ limit | tsblob ÷ limit+CRC |")
print("|---|---|---|---|---|---|---|---|---|---|")
for phase in ["range-whole","range-sub","point-read"]:
  for size in [102400,1048576,10485760]:
    p=dict((i,(r,c)) for i,r,c in rows[(phase,size,"limit","plain")])
    c=dict((i,(r,c)) for i,r,c in rows[(phase,size,"limit","crc")])
    tp=dict((i,r) for i,r,_ in rows[(phase,size,"tsblob","plain")])
    tc=dict((i,r) for i,r,_ in rows[(phase,size,"tsblob","crc")])
    ks=sorted(set(p)&set(c))
    if not ks: continue
    ratio=[c[k][0]/p[k][0] for k in ks]
    ts_l=[tp[k]/p[k][0] for k in ks if k in tp]
    ts_c=[tc[k]/c[k][0] for k in ks if k in tc]
    print(f"| {phase} | {size//1024} KiB | {med([p[k][0] for k in ks]):,.0f} | {med([c[k][0] for k in ks]):,.0f} | {med(ratio):.2f} ({min(ratio):.2f}–{max(ratio):.2f}), lower in {sum(r<1 for r in ratio)} of {len(ratio)} | {med([p[k][1] for k in ks]):.0f} | {med([c[k][1] for k in ks]):.0f} | {med(list(tp.values())+list(tc.values())):,.0f} | {med(ts_l):.2f} | {med(ts_c):.2f} |")
