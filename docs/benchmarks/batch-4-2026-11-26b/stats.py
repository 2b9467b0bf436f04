import sys,re,statistics as st
rows=[l for l in open(sys.argv[1]) if 'CPU/rec' in l]
b=[];n=[]
for l in rows:
    v=float(re.search(r'CPU/rec=([\d.]+)',l).group(1)); t=re.search(r'tsblob=(\d+)',l); ls=re.search(r'limit-store=(\d+)',l)
    r=(v, int(t.group(1))/int(ls.group(1)) if t and ls else None)
    (b if 'bin-base' in l else n).append(r)
pairs=list(zip(b,n))
print('pairs',len(pairs))
for name,x in (('base',b),('new',n)):
    c=[v for v,_ in x]; q=[r for _,r in x if r]
    print(name,'CPU/rec median %.2f (%.2f-%.2f)'%(st.median(c),min(c),max(c)),' tsblob/limit-store median %.2f'%st.median(q))
rat=[y[0]/x[0] for x,y in pairs]
print('new/base per pair median %.3f (%.3f-%.3f), new lower in %d of %d'%(st.median(rat),min(rat),max(rat),sum(r<1 for r in rat),len(rat)))
