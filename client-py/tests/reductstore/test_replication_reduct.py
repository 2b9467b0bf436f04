"""Replications through ReductStore's API (reduct-py 1.21: `create_replication`,
`get_replications`, `get_replication_detail`, `update_replication`, `set_replication_mode`,
`delete_replication`) on `tsblob serve --reductstore-listen`, sending to a real ReductStore
1.21.5 with its batch protocol: entry exclusions (`!`), a destination prefix, `$limit` per
entry, zstd on the wire, and the `disabled` mode."""

from __future__ import annotations

import asyncio
import time
from typing import Dict, List, Tuple

import pytest
from reduct import Client, ReductError
from reduct.msg.replication import ReplicationCompression, ReplicationMode, ReplicationSettings

from conftest import ADMIN_TOKEN
from test_same_script import reductstore, tsblob_reduct  # noqa: F401  (fixtures)

pytestmark = pytest.mark.server


async def entries_of(client: Client, bucket: str) -> Dict[str, List[Tuple[int, bytes, Dict[str, str]]]]:
    b = await client.get_bucket(bucket)
    out: Dict[str, List[Tuple[int, bytes, Dict[str, str]]]] = {}
    # ReductStore lists the parents of nested names (`robot-1`) as empty entries.
    for e in [e for e in await b.get_entry_list() if e.record_count > 0]:
        out[e.name] = [(r.timestamp, await r.read_all(), dict(r.labels)) async for r in b.query(e.name)]
    return out


async def wait_for(cond, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = await cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def test_replication_to_a_real_reductstore(reductstore: str, tsblob_reduct: str) -> None:  # noqa: F811
    async with Client(tsblob_reduct, api_token=ADMIN_TOKEN) as src, \
            Client(reductstore, api_token=ADMIN_TOKEN) as dst:
        bucket = await src.create_bucket("repl-src", exist_ok=True)
        settings = ReplicationSettings(
            src_bucket="repl-src", dst_bucket="repl-dst", dst_host=reductstore, dst_token=ADMIN_TOKEN,
            entries=["cam*", "!cam-debug"], dst_prefix="robot-1", when={"$limit": 3},
            compression=ReplicationCompression.ZSTD)
        # The destination bucket does not exist yet: the sender creates it, as ReductStore's does.
        await src.create_replication("to-rs", settings)
        with pytest.raises(ReductError) as e:
            await src.create_replication("to-rs", settings)
        assert e.value.status_code == 409
        for ts in range(1, 6):
            for entry in ["cam-1", "cam-2", "cam-debug", "imu"]:
                await bucket.write(entry, f"{entry}-{ts}".encode() * 50, timestamp=ts,
                                   labels={"n": str(ts), "note": "a,b"})

        async def arrived():
            try:
                got = await entries_of(dst, "repl-dst")
            except ReductError:
                return None
            return got if sum(len(v) for v in got.values()) >= 6 else None

        try:
            got = await wait_for(arrived, "the records at ReductStore")
        except AssertionError:
            raise AssertionError(f"{await src.get_replication_detail('to-rs')}")
        # `$limit: 3` counts per entry; `!cam-debug` and `imu` are not sent; names get the prefix.
        assert sorted(got) == ["robot-1/cam-1", "robot-1/cam-2"]
        for entry in ["cam-1", "cam-2"]:
            assert got[f"robot-1/{entry}"] == [
                (ts, f"{entry}-{ts}".encode() * 50, {"n": str(ts), "note": "a,b"}) for ts in (1, 2, 3)]

        infos = await src.get_replications()
        assert [(i.name, i.mode, i.is_provisioned) for i in infos] == [("to-rs", ReplicationMode.ENABLED, False)]
        detail = await src.get_replication_detail("to-rs")
        assert detail.info.pending_records == 0
        assert detail.settings.dst_token is None  # never answered
        assert (detail.settings.entries, detail.settings.dst_prefix, detail.settings.compression) == (
            ["cam*", "!cam-debug"], "robot-1", ReplicationCompression.ZSTD)
        assert detail.diagnostics.hourly.ok >= 6

        # An update keeps the token when none is given; the mode alone changes with PATCH.
        await src.update_replication("to-rs", ReplicationSettings(
            src_bucket="repl-src", dst_bucket="repl-dst", dst_host=reductstore, entries=["imu"],
            compression=ReplicationCompression.GZIP))
        assert (await src.get_replication_detail("to-rs")).settings.compression == ReplicationCompression.GZIP
        await bucket.write("imu", b"late", timestamp=100)
        got = await wait_for(lambda: _has(dst, "imu", 100), "the update's record")
        assert got
        await src.set_replication_mode("to-rs", ReplicationMode.DISABLED)
        detail = await src.get_replication_detail("to-rs")
        assert (detail.info.mode, detail.info.is_active, detail.settings.entries) == (
            ReplicationMode.DISABLED, False, ["imu"])
        # Disabled: written meanwhile, never sent (not even once enabled again).
        await bucket.write("imu", b"while-disabled", timestamp=200)
        await src.set_replication_mode("to-rs", ReplicationMode.ENABLED)
        await bucket.write("imu", b"after", timestamp=300)
        assert await wait_for(lambda: _has(dst, "imu", 300), "the record after enabling")
        assert not await _has(dst, "imu", 200)

        with pytest.raises(ReductError) as e:
            await src.update_replication("no-such", settings)
        assert e.value.status_code == 404
        with pytest.raises(ReductError) as e:
            await src.create_replication("bad", ReplicationSettings(
                src_bucket="repl-src", dst_bucket="x", dst_host="not a url"))
        assert e.value.status_code == 422
        with pytest.raises(ReductError) as e:
            await src.create_replication("bad", ReplicationSettings(
                src_bucket="no-such-bucket", dst_bucket="x", dst_host=reductstore))
        assert e.value.status_code == 404
        await src.delete_replication("to-rs")
        assert await src.get_replications() == []
        with pytest.raises(ReductError) as e:
            await src.get_replication_detail("to-rs")
        assert e.value.status_code == 404


async def _has(client: Client, entry: str, ts: int) -> bool:
    b = await client.get_bucket("repl-dst")
    try:
        async with b.read(entry, timestamp=ts, head=True):
            return True
    except ReductError:
        return False


async def test_records_with_7_kb_of_labels_reach_a_real_reductstore(reductstore: str,  # noqa: F811
                                                                    tsblob_reduct: str) -> None:  # noqa: F811
    """Bug: requests to ReductStore were cut at 80 records whatever their labels; 80 records
    with 7 KB of labels made 560 KB of headers, ReductStore 1.21.5 answered 431, and the task
    sent the same request again for ever (none arrived). They are cut by header bytes too."""
    async with Client(tsblob_reduct, api_token=ADMIN_TOKEN) as src, \
            Client(reductstore, api_token=ADMIN_TOKEN) as dst:
        bucket = await src.create_bucket("labelled-src", exist_ok=True)
        # A task sends what is written after it is made, as ReductStore's; paused meanwhile,
        # so that the records go in full pages once it is enabled.
        await src.create_replication("labelled", ReplicationSettings(
            src_bucket="labelled-src", dst_bucket="labelled-dst", dst_host=reductstore, dst_token=ADMIN_TOKEN,
            mode=ReplicationMode.PAUSED))
        for ts in range(1, 201):
            await bucket.write("e", b"x", timestamp=ts, labels={"a": f"{ts:04}" + "y" * 3496, "b": "z" * 3500})
        await src.set_replication_mode("labelled", ReplicationMode.ENABLED)

        async def arrived():
            try:
                entries = await (await dst.get_bucket("labelled-dst")).get_entry_list()
            except ReductError:
                return None
            return sum(e.record_count for e in entries) == 200

        try:
            await wait_for(arrived, "the labelled records at ReductStore")
        except AssertionError:
            raise AssertionError(f"{await src.get_replication_detail('labelled')}")
        async with (await dst.get_bucket("labelled-dst")).read("e", timestamp=137, head=True) as rec:
            assert rec.labels["a"] == "0137" + "y" * 3496
        await src.delete_replication("labelled")


@pytest.mark.parametrize("compression", [ReplicationCompression.ZSTD, ReplicationCompression.GZIP])
async def test_a_real_reductstore_replicates_into_tsblob_compressed(reductstore: str,  # noqa: F811
                                                                   tsblob_reduct: str,  # noqa: F811
                                                                   compression: ReplicationCompression) -> None:
    """ReductStore 1.21.5's own replication, `compression: zstd` or `gzip`, into tsblob's
    ReductStore listener: tsblob decodes the compressed batches (it once refused them: 415)."""
    async with Client(reductstore, api_token=ADMIN_TOKEN) as rs, \
            Client(tsblob_reduct, api_token=ADMIN_TOKEN) as ts:
        src = await rs.create_bucket(f"rs-src-{compression.value}", exist_ok=True)
        await ts.create_bucket(f"from-rs-{compression.value}", exist_ok=True)
        await rs.create_replication("into-tsblob", ReplicationSettings(
            src_bucket=src.name, dst_bucket=f"from-rs-{compression.value}", dst_host=tsblob_reduct,
            dst_token=ADMIN_TOKEN, compression=compression))
        for ts_ in range(1, 21):
            await src.write("imu", f"reading {ts_} ".encode() * 100, timestamp=ts_, labels={"k": str(ts_)})

        async def arrived():
            got = await entries_of(ts, f"from-rs-{compression.value}")
            return got if len(got.get("imu", [])) == 20 else None

        try:
            got = await wait_for(arrived, "ReductStore's records at tsblob")
        except AssertionError:
            raise AssertionError(f"{await rs.get_replication_detail('into-tsblob')}")
        assert got["imu"] == [(t, f"reading {t} ".encode() * 100, {"k": str(t)}) for t in range(1, 21)]
        await rs.delete_replication("into-tsblob")


async def test_replication_lost_the_first_record_of_a_new_entry_when_two_pages_raced(  # noqa: F811
        reductstore: str, tsblob_reduct: str) -> None:
    """Bug: ReductStore 1.21.5 acknowledges two concurrent first writes into a new entry and
    keeps one of them; the sender had two feed pages in flight, so the first record of a new
    entry (written alone, its own page) and the next one raced, and one was lost with no
    error (CI: `test_replica_create_ls_show_rm`). A delivery into an entry the sender has not
    reached yet now runs alone. Many new entries, the records of each written at once, so
    they often land in commits (and feed pages) of their own that follow each other closely."""
    entries, per_entry = 60, 3
    async with Client(tsblob_reduct, api_token=ADMIN_TOKEN) as src, \
            Client(reductstore, api_token=ADMIN_TOKEN) as dst:
        bucket = await src.create_bucket("race-src", exist_ok=True)
        await dst.create_bucket("race-dst", exist_ok=True)
        await src.create_replication("race", ReplicationSettings(
            src_bucket="race-src", dst_bucket="race-dst", dst_host=reductstore, dst_token=ADMIN_TOKEN))
        want = {f"e{n}": [(ts, b"r-%d-%d" % (n, ts), {}) for ts in range(1, per_entry + 1)]
                for n in range(entries)}
        for n in range(entries):
            await asyncio.gather(*(bucket.write(f"e{n}", data, timestamp=ts) for ts, data, _ in want[f"e{n}"]))

        async def arrived():
            got = await entries_of(dst, "race-dst")
            return got if sum(len(v) for v in got.values()) >= entries * per_entry else None

        try:
            await wait_for(arrived, "every record at ReductStore", timeout=60)
        except AssertionError:
            got = await entries_of(dst, "race-dst")
            missing = {e: [r[0] for r in recs if r not in got.get(e, [])] for e, recs in want.items()}
            raise AssertionError(f"missing at ReductStore: { {e: m for e, m in missing.items() if m} }; "
                                 f"{await src.get_replication_detail('race')}")
        assert await entries_of(dst, "race-dst") == want
        await src.delete_replication("race")
