import sys, re, collections
# perf script -> what a frame's direct children cost (inclusive), over every stack holding it
# usage: fold2.py script FRAME [PARENT]   (PARENT: only stacks where FRAME is called from PARENT)
blocks=open(sys.argv[1]).read().split('\n\n')
focus=sys.argv[2]; parent=sys.argv[3] if len(sys.argv)>3 else None
total=0; child=collections.Counter(); n=0
for s in blocks:
    ls=[l for l in s.strip().split('\n') if l.strip()]
    if not ls: continue
    total+=1
    fr=[]
    for l in ls[1:]:
        p=l.strip().split(None,1)
        if len(p)<2: continue
        f=re.sub(r'\+0x[0-9a-f]+','',p[1]); f=re.sub(r' \(.*\)$','',f); f=re.sub(r'::h[0-9a-f]{16}','',f)
        fr.append(f)
    for i,f in enumerate(fr):
        if focus in f and (parent is None or (i+1<len(fr) and parent in fr[i+1])):
            n+=1; child[fr[i-1] if i>0 else '[self]']+=1; break
print('total',total,'focus',focus,'from',parent,n,'%.2f%%'%(100*n/total))
for c,k in child.most_common(20): print('  %.2f%%  %s'%(100*k/total,c[:150]))
