#!/usr/bin/env python3
"""ReductStore's own client against both servers: reduct-py on a real ReductStore and on
tsblob's ReductStore listener (``tsblob serve --reductstore-listen``), in one run (issue 29).

The same code drives both: for each record size (1 KB, 10 KB, 100 KB, 1 MB, 10 MB by
default) it writes ``count`` records one request each (``bucket.write(entry, data,
timestamp, labels)``, sequentially: one request in flight, the way a camera or sensor loop
writes), then reads them all back with one time-range query (``bucket.query(entry, start,
stop)`` and ``record.read_all()``), checking every byte and label. Write rates count the
time spent in the write calls (each payload is made before its clock starts). Both servers
run with a token (ReductStore's ``RS_API_TOKEN``, tsblob's ``--token``) on fresh folders
under one temporary directory (same disk), on 127.0.0.1.

Rounds are interleaved size by size, and the order of the servers alternates from round to
round, so drift of the machine hits both alike. The table gives, per size and phase, the
median rate of the rounds and their range (min–max), tsblob's median over ReductStore's,
and the CPU time each server process spent per record (user + system, from
``/proc/<pid>/stat``): the client is the same Python code for both, so on a busy machine or
with large records the rates are bounded by the client, while the servers' own CPU shows
what each costs. The client's CPU time per record (this process, ``time.process_time``) is
measured too, and two ceilings follow (see ``table``): what a server costing nothing could
reach over ReductStore through this client with idle cores, and with every core busy.

    python bench/bench_reduct_api.py --rounds 3 --markdown ../docs/benchmarks/reduct-api.md

Needs ``pip install ./client-py[bench]``, a release ``tsblob`` ($TSBLOB_BIN or
target/release/tsblob) and a ``reductstore`` binary ($REDUCTSTORE_BIN, PATH, or
~/.cache/tsblob/peers/bin/reductstore from scripts/install-peers.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_vs_reduct import (  # noqa: E402  (the sibling benchmark's servers and payloads)
    SIZES,
    T0,
    Payloads,
    Phase,
    Spawned,
    find_reductstore,
    find_tsblob,
    free_port,
    wait_ready,
)

TOKEN = "bench-token-0123456789"
SERVERS = ("reductstore", "tsblob")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its threads (Linux), 0.0 elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


async def timed_writes(n: int, p: Payloads, write: Any) -> Tuple[float, List[float], float]:
    """n writes, one at a time: their wall seconds, latencies (ms) and this process's CPU
    seconds spent in the write calls (the client's cost; making payloads is outside)."""
    lat: List[float] = []
    cpu = 0.0
    for i in range(n):
        data = p.get(i)
        c, t = time.process_time(), time.perf_counter()
        await write(i, data)
        lat.append((time.perf_counter() - t) * 1e3)
        cpu += time.process_time() - c
        del data
    return sum(lat) / 1e3, lat, cpu


async def run_round(server: str, url: str, pid: int, size_name: str, n: int, p: Payloads, rnd: int,
                    cpu: Dict[Tuple[str, str, str], List[float]],
                    client_cpu: Dict[Tuple[str, str, str], List[float]]) -> List[Phase]:
    """One round of one size against one server: n writes, then one range query; the
    server's CPU seconds per record of each phase go to `cpu`, the client's (this
    process: reduct-py, aiohttp and the byte checks of the reads) to `client_cpu`."""
    from reduct import Client

    bucket_name = f"bench-{size_name.lower()}-{rnd}"
    entry = "cam"
    labels = {"size": size_name, "round": str(rnd)}
    async with Client(url, api_token=TOKEN, timeout=600) as client:
        bucket = await client.create_bucket(bucket_name, exist_ok=True)
        cpu0 = cpu_seconds(pid)
        secs, lat, client_w = await timed_writes(
            n, p, lambda i, data: bucket.write(entry, data, timestamp=T0 + i, labels=labels,
                                               content_type="application/octet-stream"))
        w = Phase(server, size_name, "write", n, secs, n * p.size, lat)
        cpu1 = cpu_seconds(pid)
        cpu.setdefault((server, size_name, "write"), []).append((cpu1 - cpu0) / n)
        client_cpu.setdefault((server, size_name, "write"), []).append(client_w / n)
        client_r0 = time.process_time()
        start = time.perf_counter()
        count = 0
        async for rec in bucket.query(entry, start=T0, stop=T0 + n):
            data = await rec.read_all()
            p.check(rec.timestamp - T0, data)
            if rec.labels != labels:
                raise AssertionError(f"{server}: record {rec.timestamp} has labels {rec.labels}, wrote {labels}")
            count += 1
        r = Phase(server, size_name, "range read", count, time.perf_counter() - start, count * p.size)
        client_cpu.setdefault((server, size_name, "range read"), []).append((time.process_time() - client_r0) / n)
        cpu.setdefault((server, size_name, "range read"), []).append((cpu_seconds(pid) - cpu1) / n)
        if count != n:
            raise AssertionError(f"{server}: read {count} of {n} records of {size_name}")
        await bucket.remove()  # the disk is shared: keep at most one size's data
    return [w, r]


def fmt_rate(xs: List[float]) -> str:
    return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}–{max(xs):,.0f})"


def table(results: List[Phase], phase: str, cpu: Dict[Tuple[str, str, str], List[float]],
          client_cpu: Dict[Tuple[str, str, str], List[float]]) -> Tuple[str, Dict[str, float]]:
    """The table of a phase, and tsblob's median over ReductStore's per size.

    Two ceilings of what any server could reach through this client (its CPU measured in
    the rounds against tsblob), one per regime of the machine:
    - idle cores: reduct-py runs on one thread, so no server lets it take less than its own
      CPU time per record: ReductStore's time per record over it;
    - every core busy (a shared machine): each record costs the client's CPU plus the
      server's, and the rate follows the sum: ReductStore's sum over the client's CPU
      alone (a server costing nothing). "CPU ratio" is the sum's ratio with tsblob's own
      server CPU, what the rates should show in that regime."""
    lines = ["| size | records | ReductStore 1.21.5 rec/s, median (range) | tsblob rec/s, median (range) "
             "| ReductStore MB/s | tsblob MB/s | tsblob / ReductStore | server CPU µs/record, "
             "ReductStore / tsblob | client CPU µs/record, ReductStore / tsblob | CPU ratio "
             "| ceiling, idle cores | ceiling, busy cores |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios: Dict[str, float] = {}
    for size in SIZES:
        rates = {s: [r.rate for r in results if (r.client, r.size, r.phase) == (s, size, phase)] for s in SERVERS}
        mbps = {s: [r.mbps for r in results if (r.client, r.size, r.phase) == (s, size, phase)] for s in SERVERS}
        if not all(rates.values()):
            continue
        n = next(r.records for r in results if (r.size, r.phase) == (size, phase))
        ratio = statistics.median(rates["tsblob"]) / statistics.median(rates["reductstore"])
        ratios[size] = ratio
        used = {s: statistics.median(cpu.get((s, size, phase), [0.0])) * 1e6 for s in SERVERS}
        client = {s: statistics.median(client_cpu.get((s, size, phase), [0.0])) * 1e6 for s in SERVERS}
        rs_us = 1e6 / statistics.median(rates["reductstore"])
        c_ts = client["tsblob"]
        idle = f"{rs_us / c_ts:.2f}x" if c_ts > 0 else "-"
        busy = f"{(client['reductstore'] + used['reductstore']) / c_ts:.2f}x" if c_ts > 0 else "-"
        both = c_ts + used["tsblob"]
        cpu_ratio = f"{(client['reductstore'] + used['reductstore']) / both:.2f}x" if both > 0 else "-"
        lines.append(f"| {size} | {n} | {fmt_rate(rates['reductstore'])} | {fmt_rate(rates['tsblob'])} "
                     f"| {statistics.median(mbps['reductstore']):,.1f} | {statistics.median(mbps['tsblob']):,.1f} "
                     f"| {ratio:.2f}x | {used['reductstore']:,.0f} / {used['tsblob']:,.0f} "
                     f"| {client['reductstore']:,.0f} / {c_ts:,.0f} | {cpu_ratio} | {idle} | {busy} |")
    return "\n".join(lines), ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(SIZES), help="comma-separated subset of " + ",".join(SIZES))
    ap.add_argument("--max-records", type=int, default=2000, help="records per size and round at most")
    ap.add_argument("--budget-mb", type=float, default=100, help="payload MB per size and round at most")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per size and server (at least 3)")
    ap.add_argument("--target", type=float, default=2.0,
                    help="exit 1 unless tsblob's median is at least this many times ReductStore's everywhere")
    ap.add_argument("--markdown", type=Path, help="write the report here")
    ap.add_argument("--json", type=Path, help="write raw figures here")
    args = ap.parse_args()
    if args.rounds < 3:
        sys.exit("--rounds must be at least 3 (medians of fewer say little)")
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        sys.exit(f"unknown sizes {unknown}: pick from {','.join(SIZES)}")

    tmp = Path(tempfile.mkdtemp(prefix="tsblob-reduct-api-bench-"))
    spawned: List[Spawned] = []
    try:
        ts_port, rs_api_port = free_port(), free_port()
        ts = Spawned([find_tsblob(), "serve", "--data", str(tmp / "tsblob"), "--listen", f"127.0.0.1:{ts_port}",
                      "--reductstore-listen", f"127.0.0.1:{rs_api_port}", "--token", TOKEN],
                     {"TSBLOB_LOG": "warn"}, tmp / "tsblob.log")
        spawned.append(ts)
        urls = {"tsblob": f"http://127.0.0.1:{rs_api_port}"}
        wait_ready(urls["tsblob"] + "/api/v1/alive", "GET", ts.proc, ts.log)
        rs_port = free_port()
        (tmp / "reduct").mkdir()
        rs = Spawned([find_reductstore()], {"RS_DATA_PATH": str(tmp / "reduct"), "RS_PORT": str(rs_port),
                                            "RS_HOST": "127.0.0.1", "RS_LOG_LEVEL": "WARNING",
                                            "RS_API_TOKEN": TOKEN}, tmp / "reduct.log")
        spawned.append(rs)
        urls["reductstore"] = f"http://127.0.0.1:{rs_port}"
        wait_ready(urls["reductstore"] + "/api/v1/alive", "HEAD", rs.proc, rs.log)

        import reduct

        env: Dict[str, Any] = {"cpu": cpu_model(), "cpus": os.cpu_count(), "machine": platform.machine(),
                               "python": platform.python_version(), "reduct_py": reduct.__version__,
                               "load_at_start": os.getloadavg()[0]}
        for s, u in urls.items():
            async def version(url: str = u) -> str:
                async with reduct.Client(url, api_token=TOKEN) as c:
                    return (await c.info()).version
            env[f"{s}_version"] = asyncio.run(version())
        print("settings:", json.dumps(env), flush=True)

        results: List[Phase] = []
        cpu: Dict[Tuple[str, str, str], List[float]] = {}
        client_cpu: Dict[Tuple[str, str, str], List[float]] = {}
        pids = {"tsblob": ts.proc.pid, "reductstore": rs.proc.pid}
        for size_name in sizes:
            size = SIZES[size_name]
            n = max(5, min(args.max_records, int(args.budget_mb * 1e6 // size)))
            p = Payloads(size)
            for rnd in range(args.rounds):
                order = SERVERS if rnd % 2 == 0 else tuple(reversed(SERVERS))
                for s in order:
                    got = asyncio.run(run_round(s, urls[s], pids[s], size_name, n, p, rnd, cpu, client_cpu))
                    for ph in got:
                        print(f"{ph.client:11} {ph.size:>6} #{rnd} {ph.phase:10} {ph.records:6} rec "
                              f"{ph.rate:10,.0f} rec/s {ph.mbps:9,.1f} MB/s", flush=True)
                    results.extend(got)
        env["load_at_end"] = os.getloadavg()[0]

        writes, w_ratio = table(results, "write", cpu, client_cpu)
        reads, r_ratio = table(results, "range read", cpu, client_cpu)
        report = "\n\n".join([
            f"reduct-py {env['reduct_py']} against ReductStore {env['reductstore_version']} and tsblob's "
            f"ReductStore API, {args.rounds} interleaved rounds per size; every record read back and compared. "
            f"CPU: {env['cpu']} ({env['cpus']} cores); load average {env['load_at_start']:.1f} at start, "
            f"{env['load_at_end']:.1f} at end.",
            "### Writes, one record per request (sequential)", writes,
            "### Time-range query of the same records, every byte checked", reads,
            "Settings: `" + json.dumps(env) + "`",
        ])
        print("\n" + report)
        if args.markdown:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(report + "\n")
        if args.json:
            args.json.write_text(json.dumps({"settings": env, "results": [r.summary() for r in results],
                                             "server_cpu_s_per_record": {" ".join(k): v for k, v in cpu.items()},
                                             "client_cpu_s_per_record": {" ".join(k): v for k, v in client_cpu.items()}},
                                            indent=1))
        missed = [f"{phase} {size} ({ratio:.2f}x)" for phase, ratios in (("write", w_ratio), ("read", r_ratio))
                  for size, ratio in ratios.items() if ratio < args.target]
        if missed:
            print(f"below {args.target}x ReductStore: {', '.join(missed)}", file=sys.stderr)
            sys.exit(1)
    finally:
        for s in spawned:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
