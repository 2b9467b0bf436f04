#!/bin/bash
# usage: strace1.sh BIN — a fresh serve, strace of the writer thread's page writes over one bench --repeat 1 of w1k.toml
b=$1
d=$(mktemp -d /tmp/wcpu5-d.XXXX); port=$((20000 + RANDOM % 20000))
./$b serve --data $d --listen 127.0.0.1:$port --log warn >/dev/null 2>&1 & pid=$!
for k in $(seq 1 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
wt=$(grep -l "^tsblob-writer" /proc/$pid/task/*/comm | head -1 | xargs dirname | xargs basename)
strace -f -p $wt -e trace=pwrite64,pwritev,writev,lseek,fdatasync -o /tmp/strace-$b.txt & spid=$!
sleep 0.5
./$b bench --workload w1k.toml --repeat 1 --no-progress --tsblob-url http://127.0.0.1:$port >/dev/null 2>&1
kill -INT $spid; wait $spid 2>/dev/null
kill $pid; wait $pid 2>/dev/null; rm -rf $d
f=/tmp/strace-$b.txt
# `strace -f` follows every thread: count the writer thread's lines only (the tid with
# the most pwrite64 calls); the meta page (offset < 8 KiB) is one per commit.
python3 - /tmp/strace-$b.txt $b <<'PY'
import sys,re,collections
L=open(sys.argv[1]).read().splitlines()
tid=collections.Counter(l.split()[0] for l in L if 'pwrite64(' in l).most_common(1)[0][0]
pages=0;meta=0;calls=0;frames=0;lseek=0
for l in L:
    if l.split()[0]!=tid: continue
    if 'pwritev(' in l: frames+=1; continue
    m=re.search(r'pwrite64\(\d+, .*?, (\d+), (\d+)\)',l)
    if m:
        n=int(m.group(1)); off=int(m.group(2)); calls+=1
        if off<8192 and n<=4096: meta+=1
        else: pages+=n//4096
        continue
    m=re.search(r' writev\(\d+, \[(.*)\], (\d+)\)',l)
    if m:
        calls+=1; pages+=len(re.findall(r'iov_len=(\d+)',m.group(1)))
    if 'lseek(' in l: lseek+=1
print(f"{sys.argv[2]}: frames pwritev={frames} commits={meta} index pages={pages} pages/commit={pages/meta:.2f} page-write calls/commit (incl. meta)={calls/meta:.2f} lseek/commit={lseek/meta:.2f} writes/commit={20000/meta:.2f}")
PY
