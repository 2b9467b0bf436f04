#!/usr/bin/env python3
# usage: threads.py BIN WORKLOAD [ARGS...]: runs a bench, samples the spawned server's threads' CPU (utime+stime ticks) and prints per-thread totals at the end
import subprocess, sys, time, os, glob, collections
binp, w = sys.argv[1], sys.argv[2]
extra = sys.argv[3:]
p = subprocess.Popen([binp, "bench", "--workload", w, "--tsblob-bin", binp, "--no-progress", "--json", "./threads.json", "--work-dir", "./work"] + extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
last = {}  # (pid,tid) -> (name, ticks)
def mstat():
    f=open('/proc/stat').readline().split()[1:9]; f=list(map(int,f))
    return sum(f)-f[3]-f[4], f[3]+f[4]
def own(pid):
    tot=0
    for t in glob.glob(f"/proc/{pid}/task/*/stat"):
        try:
            s=open(t).read(); f=s[s.rindex(")")+2:].split(); tot+=int(f[11])+int(f[12])
        except (OSError,ValueError): pass
    return tot
win = {}  # server pid -> [first (busy,idle,bench), last]
def children(pid):
    out=[]
    for f in glob.glob(f"/proc/{pid}/task/*/children"):
        try: out += [int(x) for x in open(f).read().split()]
        except OSError: pass
    return out
while p.poll() is None:
    for c in children(p.pid):
        try: cmd = open(f"/proc/{c}/cmdline").read()
        except OSError: continue
        if "serve" not in cmd and "limit" not in cmd: continue
        m = mstat() + (own(p.pid),)
        win.setdefault(c, [m, m])[1] = m
        for t in glob.glob(f"/proc/{c}/task/*"):
            try:
                s = open(t+"/stat").read()
                name = s[s.index("(")+1:s.rindex(")")]
                f = s[s.rindex(")")+2:].split()
                ticks = int(f[11]) + int(f[12])
                last[(c, int(t.rsplit('/',1)[1]))] = (name, ticks, cmd.split('\0')[1] if '\0' in cmd else cmd)
            except (OSError, ValueError): pass
    time.sleep(0.2)
hz = os.sysconf("SC_CLK_TCK")
by = collections.defaultdict(list)
for (pid, tid), (name, ticks, cmd) in last.items():
    by[pid].append((ticks, name, tid))
import json
r = json.load(open("./threads.json"))
for c in r["cells"]:
    s = c.get("result")
    if s and s.get("records"):
        cpu = c.get("server_cpu_s")
        print(f'{c.get("target","?")} {c["phase"]} {c["size"]} {s["records_per_s"]:.0f} rec/s cpu={cpu*1e6/s["records"] if cpu else float("nan"):.1f} us/rec')
for pid, ts in by.items():
    tot = sum(t for t,_,_ in ts)
    (b0,i0,c0),(b1,i1,c1) = win[pid]
    print(f"window: machine busy {100*(b1-b0)/max(1,(b1-b0)+(i1-i0)):.0f} %, bench (client) {(c1-c0)/hz:.2f} s")
    print(f"server pid {pid}: total {tot/hz:.2f} s")
    for t, name, tid in sorted(ts, reverse=True)[:12]:
        if t: print(f"  {name:24} tid {tid}: {t/hz:.2f} s ({100*t/max(tot,1):.0f} %)")
