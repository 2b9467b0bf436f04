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
thr=collections.Counter(s[0] for s in samples)
print("samples",N, {k:round(v*100/N,1) for k,v in thr.most_common(6)})
filt=sys.argv[2] if len(sys.argv)>2 else None
inc=collections.Counter()
for comm,st in samples:
    if filt and filt not in comm: continue
    for f in set(st): inc[f]+=1
for k,c in inc.most_common(int(sys.argv[3]) if len(sys.argv)>3 else 70):
    print(f"{c*100/N:6.2f}% {k[:140]}")
