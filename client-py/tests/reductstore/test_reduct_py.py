"""ReductStore's own Python client (reduct-py, from PyPI) against `tsblob serve
--reductstore-listen`: every call of the drop-in table of issue 29, and records crossing
between the two APIs (written through one, read through the other)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import AsyncIterator, Iterator

import pytest
from reduct import Batch, BucketSettings, Client, QuotaType, ReductError

import tsblob
from conftest import ADMIN_TOKEN, Server, free_port

pytestmark = pytest.mark.server


class ReductServer:
    def __init__(self, srv: Server, url: str) -> None:
        self.srv = srv
        self.url = url


@pytest.fixture(scope="module")
def rs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReductServer]:
    """tsblob with an admin token and the ReductStore API on a port of its own."""
    port = free_port()
    srv = Server(tmp_path_factory.mktemp("tsblob-reduct") / "data",
                 ["--token", ADMIN_TOKEN, "--reductstore-listen", f"127.0.0.1:{port}"], ADMIN_TOKEN).start()
    yield ReductServer(srv, f"http://127.0.0.1:{port}")
    srv.stop()


@pytest.fixture
async def rclient(rs: ReductServer) -> AsyncIterator[Client]:
    async with Client(rs.url, api_token=ADMIN_TOKEN) as c:
        yield c


def name() -> str:
    return "rs-" + uuid.uuid4().hex[:10]


async def test_info_list_and_bucket_settings(rclient: Client) -> None:
    b = name()
    await rclient.create_bucket(b, BucketSettings(quota_type=QuotaType.FIFO, quota_size=10_000_000))
    await rclient.create_bucket(b, exist_ok=True)
    with pytest.raises(ReductError) as e:
        await rclient.create_bucket(b)
    assert e.value.status_code == 409
    info = await rclient.info()
    assert info.bucket_count >= 1
    assert info.defaults.bucket.quota_type == QuotaType.NONE
    assert b in [x.name for x in await rclient.list()]
    bucket = await rclient.get_bucket(b)
    settings = await bucket.get_settings()
    assert (settings.quota_type, settings.quota_size) == (QuotaType.FIFO, 10_000_000)
    await bucket.set_settings(BucketSettings(quota_size=20_000_000))
    assert (await bucket.get_settings()).quota_size == 20_000_000
    await bucket.remove()
    with pytest.raises(ReductError) as e:
        await rclient.get_bucket(b)
    assert e.value.status_code == 404


async def test_write_with_labels_read_head_update_remove(rclient: Client) -> None:
    bucket = await rclient.create_bucket(name())
    await bucket.write("cam/front", b"frame-1", timestamp=1_000, labels={"robot": "r1", "score": "0.5"},
                       content_type="image/jpeg")
    await bucket.write("cam/front", b"frame-2", timestamp=2_000, labels={"robot": "r2"})
    async with bucket.read("cam/front", timestamp=1_000) as rec:
        assert await rec.read_all() == b"frame-1"
        assert rec.timestamp == 1_000
        assert rec.labels == {"robot": "r1", "score": "0.5"}
        assert rec.content_type == "image/jpeg"
        assert rec.size == 7
    async with bucket.read("cam/front") as rec:  # the latest
        assert (rec.timestamp, await rec.read_all()) == (2_000, b"frame-2")
    async with bucket.read("cam/front", timestamp=1_000, head=True) as rec:
        assert (rec.size, rec.labels["robot"]) == (7, "r1")
    with pytest.raises(ReductError) as e:
        await bucket.write("cam/front", b"again", timestamp=1_000)
    assert e.value.status_code == 409
    await bucket.update("cam/front", 1_000, {"robot": "r9", "score": ""})
    async with bucket.read("cam/front", timestamp=1_000, head=True) as rec:
        assert rec.labels == {"robot": "r9"}
    await bucket.remove_record("cam/front", 1_000)
    with pytest.raises(ReductError) as e:
        async with bucket.read("cam/front", timestamp=1_000):
            pass
    assert e.value.status_code == 404
    full = await bucket.get_full_info()
    assert [(x.name, x.record_count, x.oldest_record, x.latest_record) for x in full.entries] == [
        ("cam/front", 1, 2_000, 2_000)]
    assert full.info.entry_count == 1
    await bucket.remove_entry("cam/front")
    assert (await bucket.get_full_info()).entries == []


async def test_errors_carry_x_reduct_error(rs: ReductServer) -> None:
    async with Client(rs.url, api_token="not-a-token") as bad:
        with pytest.raises(ReductError) as e:
            await bad.list()
        assert e.value.status_code == 401
        assert "token" in e.value.message
    async with Client(rs.url, api_token=ADMIN_TOKEN) as c:
        with pytest.raises(ReductError) as e:
            await c.get_bucket("no-such-bucket")
        assert e.value.status_code == 404
        assert "no-such-bucket" in e.value.message


async def test_rename_entry_is_refused_without_a_fake_success(rclient: Client) -> None:
    bucket = await rclient.create_bucket(name())
    await bucket.write("e1", b"x", timestamp=5)
    with pytest.raises(ReductError) as e:
        await bucket.rename_entry("e1", "e2")
    assert e.value.status_code == 422
    assert "not supported" in e.value.message
    # Nothing changed: no junk record, no entry e2.
    full = await bucket.get_full_info()
    assert [(x.name, x.record_count) for x in full.entries] == [("e1", 1)]


async def test_a_record_crosses_between_the_two_apis(rs: ReductServer, rclient: Client) -> None:
    b = name()
    bucket = await rclient.create_bucket(b)
    await bucket.write("e", b"from-reduct", timestamp=10, labels={"k": "v w", "pct": "100%"})
    with tsblob.Client(rs.srv.url, token=ADMIN_TOKEN) as native:
        rec = native.read(b, "e", ts=10)
        assert rec.data == b"from-reduct"
        assert rec.labels == {"k": "v w", "pct": "100%"}
        native.write(b, "e", b"from-tsblob", ts=20, labels={"a": "ü"})
    async with bucket.read("e", timestamp=20) as r:
        assert await r.read_all() == b"from-tsblob"
        assert r.labels["a"] in ("ü", "%C3%BC")  # HTTP headers carry ASCII: sent encoded


async def test_probes_need_no_token(rs: ReductServer) -> None:
    import urllib.request

    for path in ("/api/v1/alive", "/api/v1/ready"):
        with urllib.request.urlopen(rs.url + path, timeout=5) as resp:
            assert resp.status == 200
            assert resp.headers["x-reduct-api"] == "1.21"
