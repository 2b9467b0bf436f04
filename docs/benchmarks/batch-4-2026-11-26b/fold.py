import sys, re, collections
# perf script -> inclusive shares; usage: fold.py script [focus-substring]
lines=open(sys.argv[1]).read().split('\n\n')
focus=sys.argv[2] if len(sys.argv)>2 else None
total=0; incl=collections.Counter(); child=collections.Counter()
for s in lines:
    ls=[l for l in s.strip().split('\n') if l.strip()]
    if not ls: continue
    total+=1
    frames=[]
    for l in ls[1:]:
        p=l.strip().split(None,1)
        if len(p)<2: continue
        f=re.sub(r'\+0x[0-9a-f]+','',p[1]); f=re.sub(r' \(.*\)$','',f)
        f=re.sub(r'::h[0-9a-f]{16}','',f)
        frames.append(f)
    # frames: leaf first
    seen=set()
    for f in frames:
        if f not in seen: incl[f]+=1; seen.add(f)
    if focus:
        for i,f in enumerate(frames):
            if focus in f:
                c=frames[i-1] if i>0 else '[self]'
                child[c]+=1; break
print('total',total)
if focus:
    n=sum(child.values()); print('focus',focus,n, '%.2f%%'%(100*n/total))
    for c,k in child.most_common(25): print('  %.2f%%  %s'%(100*k/total,c[:150]))
else:
    for f,k in incl.most_common(250): print('%.2f%%  %s'%(100*k/total,f[:150]))
