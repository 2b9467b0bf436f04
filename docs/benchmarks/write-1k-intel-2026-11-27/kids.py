import sys, re, collections
samples=[];cur=None
for line in open(sys.argv[1], errors='replace'):
    line=line.rstrip('\n')
    if not line.strip():
        if cur: samples.append(cur); cur=None
        continue
    if not line.startswith(('\t',' ')):
        cur=[line.split()[0],[]]
    else:
        parts=line.strip().split(' ',1)
        sym=parts[1] if len(parts)>1 else parts[0]
        sym=re.sub(r' \(.*\)$','',sym); sym=re.sub(r'\+0x[0-9a-f]+$','',sym)
        cur[1].append(sym)
if cur: samples.append(cur)
N=len(samples)
for t in sys.argv[2:]:
    kids=collections.Counter(); tot=0
    for comm,st in samples:
        idx=[i for i,f in enumerate(st) if t in f]
        if not idx: continue
        i=max(idx)  # outermost occurrence
        tot+=1
        kids[st[i-1] if i>0 else '<self>']+=1
    print(f"\n== {t}: {tot*100.0/N:.2f}%")
    for k,c in kids.most_common(16):
        print(f"   {c*100.0/N:5.2f}%  {k[:140]}")
