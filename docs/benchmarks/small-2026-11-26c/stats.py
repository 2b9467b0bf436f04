# usage: stats.py RUNS.txt NAME_A NAME_B -> medians/ranges of CPU/rec and rec/s, pairs won by B
import sys, re, statistics as st
rows = [l for l in open(sys.argv[1]) if 'CPU/rec' in l]
A, B = sys.argv[2], sys.argv[3]
def parse(l):
    v = float(re.search(r'CPU/rec=([\d.]+)', l).group(1))
    t = re.search(r' tsblob=(\d+)', l); s = re.search(r'limit-store=(\d+)', l)
    return v, int(t.group(1)) if t else None, int(s.group(1)) if s else None
a = [parse(l) for l in rows if f' {A} ' in l]; b = [parse(l) for l in rows if f' {B} ' in l]
pairs = list(zip(a, b))
print('pairs', len(pairs))
for name, x in ((A, a), (B, b)):
    c = [v for v, _, _ in x]; r = [t for _, t, _ in x]; q = [t / s for _, t, s in x]
    print('%-10s CPU/rec median %.2f (%.2f-%.2f)  rec/s median %d (%d-%d)  %% of limit-store median %.0f (%.0f-%.0f)'
          % (name, st.median(c), min(c), max(c), st.median(r), min(r), max(r), 100 * st.median(q), 100 * min(q), 100 * max(q)))
cr = [y[0] / x[0] for x, y in pairs]; rr = [y[1] / x[1] for x, y in pairs]
print('%s/%s CPU per pair median %.3f (%.3f-%.3f), lower in %d of %d' % (B, A, st.median(cr), min(cr), max(cr), sum(r < 1 for r in cr), len(cr)))
print('%s/%s rec/s per pair median %.3f (%.3f-%.3f), higher in %d of %d' % (B, A, st.median(rr), min(rr), max(rr), sum(r > 1 for r in rr), len(rr)))
