"""ReductStore's own CLI (`rcli`, reduct-cli 0.13.0 from crates.io, built on reduct-rs 1.21,
installed by scripts/install-tools.sh) against `tsblob serve --reductstore-listen`, and
between tsblob and a real ReductStore 1.21.5 (issue 29): `alias`, `bucket`, `cp` in both
directions (every record compared byte for byte, with its labels and content type) and
`replica`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterator, Tuple

import pytest
from reduct import Client

from conftest import ADMIN_TOKEN
from rs_peer import rcli_binary, run_reductstore, run_tsblob_reduct

pytestmark = pytest.mark.server

Records = Dict[Tuple[str, int], Tuple[bytes, str, Dict[str, str]]]


@pytest.fixture(scope="module")
def reductstore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from run_reductstore(tmp_path_factory.mktemp("reductstore-rcli"))


@pytest.fixture(scope="module")
def tsblob_reduct(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from run_tsblob_reduct(tmp_path_factory.mktemp("tsblob-rcli") / "data")


class Rcli:
    """`rcli` with a configuration of its own (its aliases live in $HOME/.reduct-cli)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.binary = rcli_binary()

    def run(self, *args: str, ok: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RS_")}
        env.update(HOME=str(self.home), NO_COLOR="1")
        proc = subprocess.run([str(self.binary), *args], env=env, capture_output=True, text=True, timeout=timeout)
        if ok:
            assert proc.returncode == 0, f"rcli {' '.join(args)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def json(self, *args: str) -> object:
        return json.loads(self.run("--json", *args).stdout)


@pytest.fixture(scope="module")
def rcli(tmp_path_factory: pytest.TempPathFactory, reductstore: str, tsblob_reduct: str) -> Rcli:
    r = Rcli(tmp_path_factory.mktemp("rcli-home"))
    r.run("alias", "add", "rs", "-L", reductstore, "-t", ADMIN_TOKEN)
    r.run("alias", "add", "tsb", "-L", tsblob_reduct, "-t", ADMIN_TOKEN)
    return r


def test_alias_commands_keep_both_servers(rcli: Rcli, reductstore: str, tsblob_reduct: str) -> None:
    listed = rcli.run("alias", "ls").stdout
    assert "rs" in listed and "tsb" in listed
    rcli.run("alias", "add", "spare", "-L", tsblob_reduct, "-t", "x")
    assert "spare" in rcli.run("alias", "ls").stdout
    rcli.run("alias", "rm", "spare")
    assert "spare" not in rcli.run("alias", "ls").stdout
    # The CLI checks a server through its alias: /alive, then /info.
    rcli.run("server", "alive", "tsb")
    status = rcli.run("server", "status", "tsb").stdout
    assert "1.21" in status, status


def test_bucket_create_ls_show_rm(rcli: Rcli) -> None:
    rcli.run("bucket", "create", "tsb/rcli-bucket", "--quota-type", "FIFO", "--quota-size", "1GB",
             "--block-size", "32MB", "--block-records", "100")
    assert "rcli-bucket" in rcli.json("bucket", "ls", "tsb")  # type: ignore[operator]
    full = rcli.run("bucket", "ls", "tsb", "--full").stdout
    assert "rcli-bucket" in full
    shown = rcli.json("bucket", "show", "tsb/rcli-bucket", "--full")
    settings = shown["settings"]  # type: ignore[index]
    assert settings["quota_type"] == "FIFO"
    assert settings["quota_size"] == 1_000_000_000
    assert settings["max_block_size"] == 32_000_000
    assert settings["max_block_records"] == 100
    # Creating it again is a conflict, reported as ReductStore words it.
    again = rcli.run("bucket", "create", "tsb/rcli-bucket", ok=False)
    assert again.returncode != 0
    assert "[Conflict] Bucket 'rcli-bucket' already exists" in again.stderr
    rcli.run("bucket", "rm", "tsb/rcli-bucket", "--yes")
    assert "rcli-bucket" not in rcli.json("bucket", "ls", "tsb")  # type: ignore[operator]
    gone = rcli.run("bucket", "show", "tsb/rcli-bucket", ok=False)
    assert gone.returncode != 0
    assert "[NotFound] Bucket 'rcli-bucket' is not found" in gone.stderr


def sample() -> Records:
    """Records of several entries, sizes (one above reduct-rs's batch size, so `cp` sends it
    alone), content types and labels (values with commas and equals signs, numbers)."""
    out: Records = {}
    for i in range(40):
        size = [0, 1, 100, 10_000, 300_000][i % 5]
        data = bytes((i * 7 + j) % 251 for j in range(min(size, 251))) * (size // 251 + 1)
        out[("cam/front", 1_000_000 + i * 1_000)] = (
            data[:size], "image/jpeg", {"i": str(i), "parity": "even" if i % 2 == 0 else "odd", "note": "a,b=c"})
    for i in range(10):
        out[("lidar", 1_000_000 + i * 1_000)] = (b"L%d" % i * 1000, "application/octet-stream", {"n": str(i)})
    big = bytes(range(256)) * (9 * 4096)  # 9 MiB
    out[("lidar", 5_000_000)] = (big, "application/x-big", {"big": "yes"})
    return out


async def write_all(url: str, bucket_name: str, records: Records) -> None:
    async with Client(url, api_token=ADMIN_TOKEN) as client:
        bucket = await client.create_bucket(bucket_name, exist_ok=True)
        for (entry, ts), (data, ct, labels) in sorted(records.items()):
            await bucket.write(entry, data, timestamp=ts, labels=labels, content_type=ct)


async def read_all(url: str, bucket_name: str) -> Records:
    out: Records = {}
    async with Client(url, api_token=ADMIN_TOKEN) as client:
        bucket = await client.get_bucket(bucket_name)
        for entry in await bucket.get_entry_list():
            if entry.record_count == 0:
                continue  # ReductStore lists an empty parent (`cam`) of a nested entry
            async for r in bucket.query(entry.name):
                # One read per record: the payload is compared, not reduct-py's pairing of
                # a multi-record batch (see test_same_script.py).
                async with bucket.read(entry.name, timestamp=r.timestamp) as rec:
                    out[(entry.name, rec.timestamp)] = (await rec.read_all(), rec.content_type, dict(rec.labels))
    return out


def assert_same(got: Records, want: Records) -> None:
    assert sorted(got) == sorted(want)
    for key, (data, ct, labels) in want.items():
        g_data, g_ct, g_labels = got[key]
        assert g_data == data, f"{key}: {len(g_data)} bytes read, {len(data)} written"
        assert (g_ct, g_labels) == (ct, labels), key


def test_cp_from_reductstore_to_tsblob(rcli: Rcli, reductstore: str, tsblob_reduct: str) -> None:
    records = sample()
    asyncio.run(write_all(reductstore, "from-rs", records))
    rcli.run("cp", "rs/from-rs", "tsb/from-rs", "--quiet")
    assert_same(asyncio.run(read_all(tsblob_reduct, "from-rs")), records)
    # The destination bucket was made with the source's settings.
    assert rcli.json("bucket", "show", "tsb/from-rs", "--full")["settings"] == \
        rcli.json("bucket", "show", "rs/from-rs", "--full")["settings"]  # type: ignore[index]


def test_cp_from_tsblob_to_reductstore(rcli: Rcli, reductstore: str, tsblob_reduct: str) -> None:
    records = sample()
    asyncio.run(write_all(tsblob_reduct, "from-tsb", records))
    rcli.run("cp", "tsb/from-tsb", "rs/from-tsb", "--quiet")
    assert_same(asyncio.run(read_all(reductstore, "from-tsb")), records)
    # A time range (`stop` exclusive, as ReductStore's query) and a `when` condition select
    # the same records out of tsblob as out of ReductStore.
    select = ["--quiet", "--entries", "cam/front", "--start", "1000000", "--stop", "1020000",
              "--when", '{"&parity": {"$eq": "even"}}']
    rcli.run("cp", "tsb/from-tsb", "rs/from-tsb-even", *select)
    rcli.run("cp", "rs/from-tsb", "tsb/from-rs-even", *select)
    want = {k: v for k, v in records.items()
            if k[0] == "cam/front" and k[1] < 1_020_000 and v[2]["parity"] == "even"}
    assert len(want) == 10
    assert_same(asyncio.run(read_all(reductstore, "from-tsb-even")), want)
    assert_same(asyncio.run(read_all(tsblob_reduct, "from-rs-even")), want)


def test_replica_create_ls_show_rm(rcli: Rcli, reductstore: str, tsblob_reduct: str) -> None:
    asyncio.run(write_all(tsblob_reduct, "repl-src", {("e", 1_000): (b"x", "text/plain", {"k": "v"})}))
    rcli.run("bucket", "create", "rs/repl-dst")
    rcli.run("replica", "create", "tsb/rcli-replica", "repl-src", "rs/repl-dst", "--entries", "e", "--when",
             '{"&k": {"$eq": "v"}}')
    listed = rcli.run("replica", "ls", "tsb").stdout
    assert "rcli-replica" in listed
    shown = rcli.run("replica", "show", "tsb/rcli-replica").stdout
    assert "repl-src" in shown and "repl-dst" in shown
    # Records written from now on reach ReductStore.
    more = {("e", 2_000 + i): (b"payload-%d" % i, "text/plain", {"k": "v"}) for i in range(5)}
    asyncio.run(write_all(tsblob_reduct, "repl-src", more))
    deadline = time.monotonic() + 30
    while True:
        got = asyncio.run(read_all(reductstore, "repl-dst"))
        if all(k in got for k in more) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert_same({k: v for k, v in got.items() if k in more}, more)
    rcli.run("replica", "rm", "tsb/rcli-replica", "--yes")
    assert "rcli-replica" not in rcli.run("replica", "ls", "tsb").stdout



@pytest.mark.parametrize("alias", ["rs", "tsb"])
def test_attachment_write_ls_read_rm(rcli: Rcli, alias: str) -> None:
    """Bug "rcli sees no attachments on tsblob": reduct-rs reads them with a v1 query of
    `<entry>/$meta`, which tsblob answered 404 (read by rcli as "none", exit 0). The same
    commands against ReductStore and tsblob must show the same attachments."""
    bucket = f"{alias}/rcli-attachments"
    rcli.run("bucket", "create", bucket)
    try:
        rcli.run("write", "-q", f"{bucket}/cam", "-s", "frame", "-t", "1")
        rcli.run("attachment", "write", f"{bucket}/cam", "calib", '{"fx": 1.5}')
        rcli.run("attachment", "write", f"{bucket}/cam", "meta", '{"model": "x"}')
        listed = rcli.run("attachment", "ls", f"{bucket}/cam").stdout.split()
        assert sorted(listed) == ["calib", "meta"]
        read = rcli.run("attachment", "read", f"{bucket}/cam").stdout
        assert '"fx":1.5' in read.replace(" ", "") and '"model":"x"' in read.replace(" ", ""), read
        rcli.run("attachment", "rm", f"{bucket}/cam", "calib")
        assert rcli.run("attachment", "ls", f"{bucket}/cam").stdout.split() == ["meta"]
    finally:
        rcli.run("bucket", "rm", bucket, "-y")
