"""A real ReductStore (1.21.5, from scripts/install-peers.sh) for the tests that compare
tsblob's ReductStore API with the original, the ReductStore CLI (`rcli`, reduct-cli from
crates.io, from scripts/install-tools.sh), and `tsblob serve` with its ReductStore API on a
listener of its own (`serve_reduct`) with a reduct-py client of it (the `rclient` fixture)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from contextlib import contextmanager
from typing import AsyncIterator, Iterator

import pytest
from reduct import Client

from conftest import ADMIN_TOKEN, Server, free_port


def reductstore_binary() -> Path:
    for d in [os.environ.get("TSBLOB_PEERS_BIN"), str(Path.home() / ".cache/tsblob/peers/bin")]:
        if d and (Path(d) / "reductstore").is_file():
            return Path(d) / "reductstore"
    found = shutil.which("reductstore")
    if found:
        return Path(found)
    pytest.fail("no reductstore binary: run scripts/install-peers.sh (or set TSBLOB_PEERS_BIN)")


def rcli_binary() -> Path:
    for d in [os.environ.get("TSBLOB_TOOLS_BIN"), str(Path.home() / ".cache/tsblob/tools/reduct-cli/bin")]:
        if d and (Path(d) / "rcli").is_file():
            return Path(d) / "rcli"
    found = shutil.which("rcli")
    if found:
        return Path(found)
    pytest.fail("no rcli binary: run scripts/install-tools.sh (or set TSBLOB_TOOLS_BIN)")


def run_reductstore(data: Path) -> Iterator[str]:
    """Runs ReductStore on `data` with ADMIN_TOKEN as its RS_API_TOKEN; yields its URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RS_")}
    env.update(RS_DATA_PATH=str(data), RS_HOST="127.0.0.1", RS_PORT=str(port), RS_API_TOKEN=ADMIN_TOKEN,
               RS_LOG_LEVEL="WARN")
    with open(data / "log", "wb") as log:
        proc = subprocess.Popen([str(reductstore_binary())], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "/api/v1/alive", timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"reductstore did not start: {(data / 'log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


class ReductServer:
    """A `tsblob serve` and the URL of its ReductStore API."""

    def __init__(self, srv: Server, url: str) -> None:
        self.srv = srv
        self.url = url


@contextmanager
def serve_reduct(data: Path, *args: str) -> Iterator[ReductServer]:
    """Runs `tsblob serve` on `data` with ADMIN_TOKEN, its ReductStore API on a listener of
    its own (`--reductstore-listen`) and `args`; stops it on leaving."""
    port = free_port()
    srv = Server(data, ["--token", ADMIN_TOKEN, "--reductstore-listen", f"127.0.0.1:{port}", *args],
                 ADMIN_TOKEN).start()
    try:
        yield ReductServer(srv, f"http://127.0.0.1:{port}")
    finally:
        srv.stop()


def run_tsblob_reduct(data: Path) -> Iterator[str]:
    """`serve_reduct` for a fixture that wants the URL only."""
    with serve_reduct(data) as rs:
        yield rs.url


@pytest.fixture
async def rclient(rs: ReductServer) -> AsyncIterator[Client]:
    """A reduct-py client of the module's `rs` fixture, as the admin."""
    async with Client(rs.url, api_token=ADMIN_TOKEN) as c:
        yield c
