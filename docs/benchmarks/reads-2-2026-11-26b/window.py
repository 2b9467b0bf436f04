#!/usr/bin/env python3
# usage: perf script -F time,ip,sym -i X.perf | window.py [PATTERN] -> "start,stop" of samples with PATTERN (Producer) in their stack
# (a sample's header is its time alone, "  856.140514:", indented like the stack lines: told apart by its form)
import sys, re
pat = sys.argv[1] if len(sys.argv) > 1 else 'Producer'
head = re.compile(r'^\s*(\d+\.\d+):\s*$')
first = last = None; t = None; hit = False
def done():
    global first, last
    if hit and t is not None:
        if first is None: first = t
        last = t
for line in sys.stdin:
    m = head.match(line)
    if m:
        done(); hit = False; t = float(m.group(1)); continue
    if pat in line: hit = True
done()
print(f"{first},{last}")
