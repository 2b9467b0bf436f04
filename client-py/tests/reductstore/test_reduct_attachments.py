"""reduct-py's entry attachments (``write_attachments``, ``read_attachments``,
``remove_attachments``: records of ``<entry>/$meta`` on ReductStore) against ``tsblob serve
--reductstore-listen``, and attachments crossing between the two APIs."""

from __future__ import annotations

import json
import uuid
from typing import Iterator

import pytest
from reduct import Client
from reduct.batch.batch_v2 import RecordBatch

import tsblob
from conftest import ADMIN_TOKEN
from rs_peer import ReductServer, rclient, serve_reduct  # rclient: a fixture of their tests

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def rs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReductServer]:
    with serve_reduct(tmp_path_factory.mktemp("tsblob-reduct-attach") / "data") as srv:
        yield srv


def name() -> str:
    return "rs-" + uuid.uuid4().hex[:10]


async def test_write_read_and_remove_attachments(rclient: Client) -> None:
    bucket = await rclient.create_bucket(name())
    # Before any record: the entry is created, as on ReductStore.
    await bucket.write_attachments("cam", {"schema": {"fps": 30, "fields": ["x", "y"]}, "$plugin": {"v": 1}})
    assert await bucket.read_attachments("cam") == {"schema": {"fps": 30, "fields": ["x", "y"]},
                                                   "$plugin": {"v": 1}}
    # A key written again is replaced (ReductStore's upsert by key).
    await bucket.write_attachments("cam", {"schema": {"fps": 60}})
    assert (await bucket.read_attachments("cam"))["schema"] == {"fps": 60}
    # Never records: the entry lists none.
    await bucket.write("cam", b"frame", timestamp=1_000)
    full = await bucket.get_full_info()
    assert [(e.name, e.record_count) for e in full.entries] == [("cam", 1)]
    # Removal by key (a `$` key escaped by reduct-py as `$$`), then all.
    await bucket.remove_attachments("cam", ["$plugin"])
    assert await bucket.read_attachments("cam") == {"schema": {"fps": 60}}
    await bucket.write_attachments("cam", {"a": 1, "b": [2]})
    await bucket.remove_attachments("cam", ["a", "missing"])
    assert await bucket.read_attachments("cam") == {"schema": {"fps": 60}, "b": [2]}
    await bucket.remove_attachments("cam")
    assert await bucket.read_attachments("cam") == {}
    # Kept across a rename; gone with the entry.
    await bucket.write_attachments("cam", {"k": "v"})
    await bucket.rename_entry("cam", "cam2")
    assert await bucket.read_attachments("cam2") == {"k": "v"}
    await bucket.remove_entry("cam2")
    # An entry without attachments, or without the entry, reads as none (as on ReductStore
    # 1.21.5, where it is a query of a `$meta` entry that does not exist).
    assert await bucket.read_attachments("cam2") == {}


async def test_attachments_cross_between_the_two_apis(rs: ReductServer, rclient: Client) -> None:
    b = name()
    bucket = await rclient.create_bucket(b)
    await bucket.write_attachments("robot/lidar", {"calib": {"k": [0.1, 0.2]}})
    with tsblob.Client(rs.srv.url, token=ADMIN_TOKEN) as native:
        assert native.read_attachments(b, "robot/lidar") == {"calib": {"k": [0.1, 0.2]}}
        native.write_attachments(b, "robot/lidar", {"from_tsblob": {"n": 123456789012345678901234567890}})
    got = await bucket.read_attachments("robot/lidar")
    assert got["from_tsblob"] == {"n": 123456789012345678901234567890}
    assert got["calib"] == {"k": [0.1, 0.2]}
    await bucket.remove_attachments("robot/lidar", ["calib"])
    with tsblob.Client(rs.srv.url, token=ADMIN_TOKEN) as native:
        assert list(native.read_attachments(b, "robot/lidar")) == ["from_tsblob"]


async def test_attachment_errors_through_reductstore(rclient: Client) -> None:
    bucket = await rclient.create_bucket(name())
    assert await bucket.read_attachments("no-such-entry") == {}
    # reduct-py's write_attachments drops the per-record errors of batch protocol v2 (as on
    # ReductStore): a refused attachment is simply not there. The errors, as sent:
    await bucket.write_attachments("e", {"big": "x" * 70_000, "bad key": 1})
    assert await bucket.read_attachments("e") == {}
    assert [x.name for x in (await bucket.get_full_info()).entries] == []  # not even the entry
    batch = RecordBatch()
    batch.add("e/$meta", timestamp=1, data=json.dumps("x" * 70_000).encode(), labels={"key": "big"})
    batch.add("e/$meta", timestamp=2, data=b"not json", labels={"key": "doc"})
    batch.add("e/$meta", timestamp=3, data=b"{}", labels={"nokey": "x"})
    batch.add("e/$meta", timestamp=4, data=b"{}", labels={"key": "ok"})
    errors = await bucket.write_record_batch(batch)
    assert {ts: err.status_code for ts, err in errors["e/$meta"].items()} == {1: 413, 2: 422, 3: 422}
    assert await bucket.read_attachments("e") == {"ok": {}}
    # A missing bucket fails each record with 404, as ReductStore answers a batch into it
    # (so reduct-py's write_attachments, which drops per-record errors, raises nothing there
    # either).
    missing = await rclient.create_bucket(name())
    await missing.remove()
    await missing.write_attachments("e", {"a": 1})
    lost = RecordBatch()
    lost.add("e/$meta", timestamp=1, data=b"{}", labels={"key": "a"})
    errors = await missing.write_record_batch(lost)
    assert {ts: err.status_code for ts, err in errors["e/$meta"].items()} == {1: 404}
