#!/usr/bin/env python3
# usage: stacks.py SCRIPT PATTERN [DEPTH] -> the caller chains (DEPTH frames above the first frame matching PATTERN) of the samples whose stack has it, counted
# or:    stacks.py SCRIPT --incl PAT1,PAT2,...  -> share of samples with each pattern anywhere in their stack
import sys, collections
def samples(path):
    st=[]
    for line in open(path, errors='replace'):
        if not line.strip():
            if st: yield st
            st=[]; continue
        if line.startswith((' ','\t')):
            p=line.strip().split(None,1)
            st.append(p[1] if len(p)>1 else p[0])
    if st: yield st
path=sys.argv[1]
if sys.argv[2]=='--incl':
    pats=sys.argv[3].split(',')
    n=0; c=collections.Counter()
    for s in samples(path):
        n+=1
        for p in pats:
            if any(p in f for f in s): c[p]+=1
    print(f"{n} samples")
    for p in pats: print(f"{100*c[p]/n:6.2f}%  {p}")
    sys.exit()
pat=sys.argv[2]; depth=int(sys.argv[3]) if len(sys.argv)>3 else 4
n=0; hit=0; c=collections.Counter()
for s in samples(path):
    n+=1
    for i,f in enumerate(s):
        if pat in f:
            hit+=1
            c[' <- '.join(x.split('(')[0][:70] for x in s[i:i+depth])]+=1
            break
print(f"{n} samples, {hit} ({100*hit/n:.2f}%) with {pat}")
for k,v in c.most_common(15): print(f"{100*v/n:6.2f}%  {k}")
