"""Raw-socket sequential POSTs of SIZE bytes to running servers, alternated: latency, the
server's CPU per write (/proc/PID/stat) and its minor faults, the client's CPU.

    python server_cpu.py SIZE N ROUNDS name=port=pid=path[,name=port=pid=path...]
    (path: /api/v1/b/BUCKET/ENTRY for tsblob and ReductStore; the bucket must exist)
"""
import sys, time, socket, statistics, os
size = int(sys.argv[1]); n = int(sys.argv[2]); rounds = int(sys.argv[3])
targets = [t.split("=") for t in sys.argv[4].split(",")]  # name=port=pid
body = (bytes(range(251)) * (size // 251 + 1))[:size]
base = 1_700_000_000_000_000 + int(time.time() * 1e6) % 10**12
k = [0]
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def flt(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[7])
def read_answer(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
    h, _, rest = buf.partition(b"\r\n\r\n")
    cl = int([l.split(b":")[1] for l in h.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
    while len(rest) < cl:
        rest += s.recv(65536)
    assert h.split(b" ")[1] in (b"200", b"201"), h + rest
res = {}
for r in range(rounds):
    for name, port, pid, path in targets:
        s = socket.create_connection(("127.0.0.1", int(port))); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        def one():
            k[0] += 1
            s.sendall(f"POST {path}?ts={base + k[0]} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode()); s.sendall(body); read_answer(s)
        one()
        lat = []; c0 = cpu(pid); p0 = time.process_time(); m0 = flt(pid)
        for i in range(n):
            t = time.perf_counter(); one(); lat.append(time.perf_counter() - t)
        c1 = cpu(pid); p1 = time.process_time(); m1 = flt(pid)
        s.close()
        res.setdefault(name, []).append((statistics.median(lat) * 1e3, (c1 - c0) / n * 1e3, (p1 - p0) / n * 1e3, (m1 - m0) / n))
for name, v in res.items():
    print(f"{name:8} latency median ms {[round(x[0],3) for x in v]}  server cpu ms/write {[round(x[1],3) for x in v]}  client cpu {[round(x[2],3) for x in v]}  server minflt/write {[round(x[3]) for x in v]}")
