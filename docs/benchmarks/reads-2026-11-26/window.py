#!/usr/bin/env python3
# usage: perf script -F time,ip,sym -i X.perf | window.py -> "start,stop" of samples with Producer in their stack
import sys
pat = sys.argv[1] if len(sys.argv) > 1 else 'Producer'
first=last=None; t=None; hit=False
def done():
    global first,last
    if hit and t is not None:
        if first is None: first=t
        last=t
for line in sys.stdin:
    s=line.strip()
    if not s: continue
    if not line.startswith((' ','\t')):
        done(); hit=False
        try: t=float(s.split()[-1].rstrip(':'))
        except ValueError: t=None
    elif pat in s: hit=True
done()
print(f"{first},{last}")
