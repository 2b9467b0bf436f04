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
        sym=re.sub(r' \(.*\)$','',sym); sym=re.sub(r'<.*?>','<>',sym)
        cur[1].append(sym)
if cur: samples.append(cur)
N=len(samples); per=float(sys.argv[2]); pat=sys.argv[3] if len(sys.argv)>3 else 'tsblob'
c=collections.Counter()
for comm,st in samples:
    if len(sys.argv)>4 and sys.argv[4] not in comm: continue
    for f in set(st):
        if re.search(pat,f): c[f]+=1
for f,n in c.most_common(45):
    print(f'{n*100/N:5.1f}% {n/N*per:5.2f}us {f[:150]}')
