import sys, re, collections
# perf script output: header line "comm", then frames "ip sym", blank line separates
samples=[]
cur=None
for line in open(sys.argv[1], errors='replace'):
    line=line.rstrip('\n')
    if not line.strip():
        if cur: samples.append(cur); cur=None
        continue
    if not line.startswith(('\t',' ')):
        cur=[line.strip(),[]]
    else:
        parts=line.strip().split(' ',1)
        sym=parts[1] if len(parts)>1 else parts[0]
        sym=re.sub(r'\+0x[0-9a-f]+$','',sym)
        cur[1].append(sym)
if cur: samples.append(cur)
N=len(samples)
print("samples",N)
def share(pred):
    return sum(1 for s in samples if pred(s))*100.0/N
targets=sys.argv[2:]
for t in targets:
    # breakdown by the child frame directly below t (leaf-first stacks)
    kids=collections.Counter(); tot=0
    for comm,st in samples:
        for i,f in enumerate(st):
            if t in f:
                tot+=1
                kids[st[i-1] if i>0 else '<self>']+=1
                break
    print(f"\n== {t}: {tot*100.0/N:.2f}%")
    for k,c in kids.most_common(14):
        print(f"   {c*100.0/N:5.2f}%  {k[:150]}")
