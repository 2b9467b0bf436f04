"""What a `tsblob bench --mixed` source server waits on, per second (issue 30).

    tsblob bench --mixed --repeat 1 & python3 scripts/sched-sample.py $!

Finds the bench's first spawned `serve` (the source) and prints, every second, the CPU
time of its threads, the time they spent runnable but waiting for a CPU (`run_delay` of
/proc/PID/task/*/schedstat, summed over threads alive at both ends of the second), and
how many of the 20 ms samples found a thread running or runnable (R) or in an
uninterruptible disk wait (D). Standard library only; ends with the server.
"""
import os, sys, time, subprocess
bench = int(sys.argv[1])
src = None
while src is None:
    try:
        out = subprocess.run(["pgrep", "-P", str(bench), "-f", "serve"], capture_output=True, text=True).stdout.split()
    except Exception:
        out = []
    if out: src = int(out[0])
    else: time.sleep(0.02)
def tasks():
    d = {}
    try:
        for t in os.listdir(f"/proc/{src}/task"):
            try:
                cpu, rd, _ = open(f"/proc/{src}/task/{t}/schedstat").read().split()
                st = open(f"/proc/{src}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0]
                d[t] = (int(cpu), int(rd), st)
            except Exception: pass
    except FileNotFoundError:
        return None
    return d
t0 = time.time(); prev = tasks(); win = time.time()
states = {"R": 0, "D": 0, "S": 0}; n = 0
while True:
    cur = tasks()
    if cur is None: break
    for v in cur.values(): states[v[2]] = states.get(v[2], 0) + 1
    n += 1
    if time.time() - win >= 1.0:
        dcpu = sum(v[0] - prev[t][0] for t, v in cur.items() if t in prev)
        drd = sum(v[1] - prev[t][1] for t, v in cur.items() if t in prev)
        print(f"{time.time()-t0:5.1f}s cpu {dcpu/1e6:6.0f} ms  waiting for a CPU {drd/1e6:6.0f} ms  samples {n}: R {states.get('R',0)} D {states.get('D',0)}", flush=True)
        prev = cur; win = time.time(); states = {}; n = 0
    time.sleep(0.02)
