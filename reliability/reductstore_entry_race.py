"""Probe of a ReductStore behaviour the replication sender works around (docs/reliability.md,
"Records into a real ReductStore"): two concurrent first writes into a new entry are both
acknowledged, and one of them is not kept.

    python reliability/reductstore_entry_race.py [rounds] [--tsblob]

Starts ReductStore from $TSBLOB_PEERS_BIN (default ~/.cache/tsblob/peers/bin), or with
`--tsblob` a `tsblob serve --reductstore-listen` from $TSBLOB_BIN, on a temporary data folder;
each round makes a bucket, writes timestamps 2000 and 2001 into its entry `e` at once with
reduct-py, and reads the entry back. Prints how many rounds lost a record."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from reduct import Client

TOKEN = "probe-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(data: Path, tsblob: bool) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RS_")}
    if tsblob:
        cmd = [os.environ.get("TSBLOB_BIN", "target/release/tsblob"), "serve", "--data", str(data),
               "--listen", f"127.0.0.1:{free_port()}", "--reductstore-listen", f"127.0.0.1:{port}",
               "--token", TOKEN]
    else:
        peers = Path(os.environ.get("TSBLOB_PEERS_BIN", Path.home() / ".cache/tsblob/peers/bin"))
        cmd = [str(peers / "reductstore")]
        env.update(RS_DATA_PATH=str(data), RS_HOST="127.0.0.1", RS_PORT=str(port), RS_API_TOKEN=TOKEN)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/api/v1/alive", timeout=1)
            return proc, url
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"{cmd[0]} did not start")
            time.sleep(0.1)


async def rounds(url: str, n: int) -> int:
    lost = 0
    async with Client(url, api_token=TOKEN) as client:
        for i in range(n):
            bucket = await client.create_bucket(f"race-{i}")
            await asyncio.gather(*(bucket.write("e", b"p%d" % ts, timestamp=ts) for ts in (2000, 2001)))
            kept = sorted([r.timestamp async for r in bucket.query("e")])
            if kept != [2000, 2001]:
                lost += 1
    return lost


def main() -> None:
    n = int(next((a for a in sys.argv[1:] if a.isdigit()), "300"))
    tsblob = "--tsblob" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start(Path(tmp) / "data", tsblob)
        try:
            lost = asyncio.run(rounds(url, n))
            print(f"{'tsblob' if tsblob else 'reductstore'}: {lost} of {n} rounds kept one of two "
                  "acknowledged records", flush=True)
        finally:
            proc.kill()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
