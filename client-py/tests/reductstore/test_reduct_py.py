"""ReductStore's own Python client (reduct-py, from PyPI) against `tsblob serve
--reductstore-listen`: every call of the drop-in table of issue 29, and records crossing
between the two APIs (written through one, read through the other)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Iterator

import pytest
from reduct import Batch, BucketSettings, Client, Permissions, QuotaType, ReductError

import tsblob
from conftest import ADMIN_TOKEN
from rs_peer import ReductServer, rclient, serve_reduct  # rclient: a fixture of their tests

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def rs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReductServer]:
    """tsblob with an admin token and the ReductStore API on a port of its own (small body
    limits, which the ReductStore routes must honour as the native ones do)."""
    with serve_reduct(tmp_path_factory.mktemp("tsblob-reduct") / "data", "--max-body", "1MiB",
                      "--max-batch-record", "256KiB") as srv:
        yield srv


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


async def test_rename_entry_and_bucket_keep_the_records(rclient: Client) -> None:
    bucket = await rclient.create_bucket(name())
    await bucket.write("e1", b"x", timestamp=5, labels={"k": "v"})
    await bucket.rename_entry("e1", "e2")
    full = await bucket.get_full_info()
    assert [(x.name, x.record_count) for x in full.entries] == [("e2", 1)]
    async with bucket.read("e2", timestamp=5) as r:
        assert (await r.read_all(), r.labels) == (b"x", {"k": "v"})
    # A taken name: refused, nothing changed (no junk record written anywhere).
    await bucket.write("e3", b"y", timestamp=6)
    with pytest.raises(ReductError) as e:
        await bucket.rename_entry("e2", "e3")
    assert e.value.status_code == 409
    new = name()
    await bucket.rename(new)
    assert bucket.name == new
    moved = await rclient.get_bucket(new)
    assert sorted(x.name for x in (await moved.get_full_info()).entries) == ["e2", "e3"]


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


async def test_write_batch_v1_and_query_through_io(rclient: Client) -> None:
    from reduct import RecordBatch

    bucket = await rclient.create_bucket(name())
    batch = Batch()
    batch.add(100, b"a", content_type="text/plain", labels={"n": "1", "note": "x y"})
    batch.add(200, b"bb", labels={"n": "2"})
    batch.add(300, b"ccc")
    assert await bucket.write_batch("e", batch) == {}
    # A second write of the same timestamps: per-record errors, nothing else.
    errors = await bucket.write_batch("e", batch)
    assert sorted(errors) == [100, 200, 300]
    assert all(e.status_code == 409 for e in errors.values())
    got = [(r.timestamp, await r.read_all(), r.labels, r.content_type) async for r in bucket.query("e")]
    assert got == [
        (100, b"a", {"n": "1", "note": "x y"}, "text/plain"),
        (200, b"bb", {"n": "2"}, "application/octet-stream"),
        (300, b"ccc", {}, "application/octet-stream"),
    ]
    got = [r.timestamp async for r in bucket.query("e", start=150, stop=300)]
    assert got == [200]
    got = [r.timestamp async for r in bucket.query("e", when={"&n": {"$gte": 2}})]
    assert got == [200]
    got = [(r.timestamp, r.size) async for r in bucket.query("e", head=True)]
    assert got == [(100, 1), (200, 2), (300, 3)]
    # Multi-entry batch (protocol v2) and a multi-entry query.
    rb = RecordBatch()
    rb.add("f/1", 150, b"x", labels={"k": "v,w"})
    rb.add("f/2", 150, b"y", labels={"k": "w"})
    rb.add("f/1", 250, b"z")
    assert await bucket.write_record_batch(rb) == {}
    got = [(r.entry, r.timestamp, await r.read_all(), r.labels) async for r in bucket.query(["f/*"])]
    assert got == [("f/1", 150, b"x", {"k": "v,w"}), ("f/2", 150, b"y", {"k": "w"}), ("f/1", 250, b"z", {})]


async def test_many_records_cross_batches(rclient: Client) -> None:
    bucket = await rclient.create_bucket(name())
    # At most ~90 records a request: HTTP servers (ReductStore's too) take 100 headers.
    for part in range(0, 300, 75):
        batch = Batch()
        for i in range(part, part + 75):
            batch.add(1_000 + i, b"%d" % i, labels={"i": str(i), "even": str(i % 2 == 0).lower()})
        assert await bucket.write_batch("many", batch) == {}
    got = [(r.timestamp, await r.read_all(), r.labels) async for r in bucket.query("many")]
    assert len(got) == 300
    assert got[299] == (1_299, b"299", {"i": "299", "even": "false"})
    assert [r.timestamp async for r in bucket.query("many", when={"&i": {"$gte": 100}, "$limit": 3})] == [
        1_100, 1_101, 1_102]


async def test_update_and_remove_batches_and_remove_query(rclient: Client) -> None:
    from reduct import RecordBatch

    bucket = await rclient.create_bucket(name())
    batch = Batch()
    for ts in (1, 2, 3, 4):
        batch.add(ts, b"p", labels={"a": "1", "b": "2"})
    await bucket.write_batch("e", batch)
    upd = Batch()
    upd.add(1, labels={"a": "10", "b": ""})
    upd.add(99, labels={"a": "x"})
    errors = await bucket.update_batch("e", upd)
    assert list(errors) == [99] and errors[99].status_code == 404
    async with bucket.read("e", timestamp=1, head=True) as r:
        assert r.labels == {"a": "10"}
    rb = RecordBatch()
    rb.add("e", 2, labels={"c": "3"})
    assert await bucket.update_record_batch(rb) == {}
    async with bucket.read("e", timestamp=2, head=True) as r:
        assert r.labels == {"a": "1", "b": "2", "c": "3"}
    rm = Batch()
    rm.add(2)
    assert await bucket.remove_batch("e", rm) == {}
    assert await bucket.remove_query("e", start=3, stop=4) == 1
    assert [r.timestamp async for r in bucket.query("e")] == [1, 4]


async def test_query_session_ends_and_continuous_polls(rs: ReductServer, rclient: Client) -> None:
    bucket = await rclient.create_bucket(name())
    await bucket.write("live", b"1", timestamp=10)
    seen = []

    async def follow() -> None:
        async for r in bucket.query("live", start=10, continuous=True, poll_interval=0.1):
            seen.append((r.timestamp, await r.read_all()))
            if len(seen) == 3:
                return

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.3)
    await bucket.write("live", b"2", timestamp=20)
    await bucket.write("live", b"3", timestamp=30)
    await asyncio.wait_for(task, 10)
    assert seen == [(10, b"1"), (20, b"2"), (30, b"3")]


async def test_tokens_work_across_both_apis(rs: ReductServer, rclient: Client) -> None:
    from reduct import Permissions

    b = name()
    await rclient.create_bucket(b)
    value = await rclient.create_token(name(), Permissions(full_access=False, read=[b], write=[]))
    # A token made through the ReductStore API reads through tsblob's own API...
    with tsblob.Client(rs.srv.url, token=ADMIN_TOKEN) as admin:
        admin.write(b, "e", b"x", ts=1)
    with tsblob.Client(rs.srv.url, token=value) as reader:
        assert reader.read(b, "e", ts=1).data == b"x"
    # ... and is held to its permissions through both.
    async with Client(rs.url, api_token=value) as limited:
        me = await limited.me()
        assert (me.permissions.full_access, me.permissions.read) == (False, [b])
        bucket = await limited.get_bucket(b)
        with pytest.raises(ReductError) as e:
            await bucket.write("e", b"y", timestamp=2)
        assert e.value.status_code == 403
    # A token made through tsblob's API works here.
    with tsblob.Client(rs.srv.url, token=ADMIN_TOKEN) as admin:
        native_value = admin.create_token(name(), full_access=True)
    async with Client(rs.url, api_token=native_value) as c:
        assert b in [x.name for x in await c.list()]
    listed = [t.name for t in await rclient.get_token_list() if t.name != "init-token"]
    tname = listed[0]
    full = await rclient.get_token(tname)
    assert full.name == tname
    await rclient.remove_token(tname)
    assert tname not in [t.name for t in await rclient.get_token_list()]


async def test_token_expiry_allowlist_and_rotation(rs: ReductServer, rclient: Client) -> None:
    """reduct-py's create_token(expires_at=, ttl=, ip_allowlist=), get_token and
    rotate_token, in ReductStore 1.21's shapes; the limits hold on both APIs."""
    from datetime import datetime, timedelta, timezone

    from reduct import Permissions

    b = name()
    await rclient.create_bucket(b)
    perms = Permissions(full_access=False, read=[b], write=[])
    at = (datetime.now(timezone.utc) + timedelta(days=1)).replace(microsecond=0)
    lim = name()
    value = await rclient.create_token(lim, perms, expires_at=at, ttl=3600, ip_allowlist=["127.0.0.0/8"])
    t = await rclient.get_token(lim)
    assert (t.expires_at, t.ttl, t.ip_allowlist, t.is_expired) == (at, 3600, ["127.0.0.0/8"], False)
    assert t.permissions.read == [b]
    async with Client(rs.url, api_token=value) as c:
        me = await c.me()
        assert me.name == lim and me.last_access is not None
    assert lim in [x.name for x in await rclient.get_token_list()]
    # Rotation: a new value, the old one refused at once, on both APIs.
    new = await rclient.rotate_token(lim)
    assert new != value
    async with Client(rs.url, api_token=value) as c:
        with pytest.raises(ReductError) as e:
            await c.me()
        assert e.value.status_code == 401
    with tsblob.Client(rs.srv.url, token=value) as c:
        with pytest.raises(tsblob.Unauthorized):
            c.me()
    async with Client(rs.url, api_token=new) as c:
        assert (await c.me()).name == lim
    # Another address than the list's: 403, saying which address was seen.
    far = name()
    far_value = await rclient.create_token(far, perms, ip_allowlist=["203.0.113.7"])
    async with Client(rs.url, api_token=far_value) as c:
        with pytest.raises(ReductError) as e:
            await c.me()
        assert e.value.status_code == 403 and "127.0.0.1" in e.value.message
    # Expired: 401 on every route; an expires_at in the past is refused at creation (422).
    brief = name()
    brief_value = await rclient.create_token(brief, perms, expires_at=datetime.now(timezone.utc) + timedelta(seconds=1))
    await asyncio.sleep(1.2)
    async with Client(rs.url, api_token=brief_value) as c:
        with pytest.raises(ReductError) as e:
            await c.get_bucket(b)
        assert e.value.status_code == 401 and "expired" in e.value.message
    assert (await rclient.get_token(brief)).is_expired
    with pytest.raises(ReductError) as e:
        await rclient.create_token(name(), perms, expires_at=datetime.now(timezone.utc) - timedelta(minutes=1))
    assert e.value.status_code == 422
    with pytest.raises(ReductError) as e:
        await rclient.rotate_token(brief)
    assert e.value.status_code == 422


async def test_browser_and_body_bounds_apply(rs: ReductServer) -> None:
    import http.client

    port = int(rs.url.rsplit(":", 1)[1])
    # DNS rebinding: a page on another name resolving here is refused, ReductStore-style.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/api/v1/list", headers={"Host": "evil.example", "Authorization": f"Bearer {ADMIN_TOKEN}"})
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 403
    assert resp.getheader("x-reduct-error")
    conn.close()

    async with Client(rs.url, api_token=ADMIN_TOKEN) as c:
        bucket = await c.create_bucket(name())
        with pytest.raises(ReductError) as e:
            await bucket.write("big", b"x" * (2 << 20), timestamp=1)
        assert e.value.status_code == 413
        # A batch record over --max-batch-record is refused from its header, before any of
        # the body is read (a client still sending gets the answer, then a closed connection).
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.putrequest("POST", f"/api/v1/b/{bucket.name}/big/batch", skip_host=True)
        for k, v in {"Host": "localhost", "Authorization": f"Bearer {ADMIN_TOKEN}",
                     "x-reduct-time-1": f"{300 << 10},application/octet-stream",
                     "Content-Length": str(300 << 10)}.items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 422
        assert "max-batch-record" in (resp.getheader("x-reduct-error") or "")
        conn.close()
        assert (await bucket.get_full_info()).entries == []


async def test_a_batch_holds_at_most_512000_bytes_of_labels(rs: ReductServer) -> None:
    """Bug: a read batch counted payload bytes only, so 64 records of one byte with 60 KB of
    labels each made 3.8 MB of headers, outside the memory budget. As ReductStore's
    `RS_IO_BATCH_MAX_METADATA_SIZE` (512,000 bytes by default), a batch ends before the
    record that would pass it; the next batch goes on."""
    import http.client

    bucket = name()
    labels = {f"l{i}": "x" * 4000 for i in range(15)}  # 60,030 bytes of keys and values
    with rs.srv.client() as c:
        c.create_bucket(bucket)
        for ts in range(1, 21):
            c.write(bucket, "e", b"x", ts, labels=labels)
    port = int(rs.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    conn.request("GET", f"/api/v1/b/{bucket}/e/q", headers=auth)
    resp = conn.getresponse()
    qid = json.loads(resp.read())["id"]
    counts = []
    while True:
        conn.request("GET", f"/api/v1/b/{bucket}/e/batch?q={qid}", headers=auth)
        resp = conn.getresponse()
        resp.read()
        if resp.status == 204:
            break
        assert resp.status == 200
        times = [k for k in resp.headers if k.lower().startswith("x-reduct-time-")]
        meta = sum(len(resp.headers[k]) for k in times)
        assert meta <= 512_000, meta
        counts.append(len(times))
        if resp.getheader("x-reduct-last") == "true":
            break
    conn.close()
    assert counts == [8, 8, 4]


async def test_a_label_http_cannot_carry_paired_payloads_with_the_wrong_records(
        rs: ReductServer, rclient: Client) -> None:
    """Bug (hostile probe of 2026-11-29): a record whose label value HTTP cannot carry (a line
    break, NUL, DEL: only tsblob's own API can store one) had its header left out of a batch
    answer, v1 and v2, while its payload stayed in the body: reduct-py gave every later record
    the payload of the one before it, and the last all the rest. Such values are sent
    percent-encoded, as a single read sends them; a `"` in a quoted value is encoded too (it
    read as other labels). A tab stays raw, as ReductStore sends it (parity probe of
    2026-11-29: `t%09x` copied back into a ReductStore was stored as that text)."""
    import http.client

    bucket = name()
    values = ["a\r\nx-reduct-last: true", "\x00nul", "plain", 'q"u,o=te', "\x7f", "a,b", "tab\there"]
    with rs.srv.client() as c:
        c.create_bucket(bucket)
        for i, v in enumerate(values):
            c.write(bucket, "e", b"P%d" % i, i + 1, labels={"v": v, "w": "1"})
    got = []
    b = await rclient.get_bucket(bucket)
    async for r in b.query("e", start=0):
        got.append((r.timestamp, await r.read_all(), r.labels))
    assert [(ts, data) for ts, data, _ in got] == [(i + 1, b"P%d" % i) for i in range(len(values))]
    assert all(labels["w"] == "1" for _, _, labels in got), got
    assert [labels["v"] for _, _, labels in got] == [
        "a%0D%0Ax-reduct-last:%20true", "%00nul", "plain", "q%22u,o=te", "%7F", "a,b", "tab\there"]
    # Batch protocol v1 (`GET .../batch?q=`): a header for every record whose payload is sent.
    port = int(rs.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    conn.request("POST", f"/api/v1/b/{bucket}/e/q", body=json.dumps({"query_type": "QUERY"}), headers=auth)
    qid = json.loads(conn.getresponse().read())["id"]
    conn.request("GET", f"/api/v1/b/{bucket}/e/batch?q={qid}", headers=auth)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    times = sorted(int(k.lower().removeprefix("x-reduct-time-")) for k in resp.headers
                   if k.lower().startswith("x-reduct-time-"))
    assert times == list(range(1, len(values) + 1)), resp.headers
    sizes = [int(resp.headers[f"x-reduct-time-{ts}"].split(",")[0]) for ts in times]
    assert sum(sizes) == len(body) and body == b"".join(b"P%d" % i for i in range(len(values)))


async def test_a_v1_session_was_read_through_another_entry(rs: ReductServer) -> None:
    """Bug (hostile probe of 2026-11-29): a session opened on `e` answered `GET
    /b/<bucket>/<other>/batch?q=<id>` with `e`'s records, and v1 answers name no entry, so the
    client took them for `other`'s. As ReductStore, only the session's entry reads it."""
    import http.client

    bucket = name()
    with rs.srv.client() as c:
        c.create_bucket(bucket)
        c.write(bucket, "e", b"from-e", 1)
        c.write(bucket, "e2", b"from-e2", 1)
    port = int(rs.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    conn.request("POST", f"/api/v1/b/{bucket}/e/q", body=json.dumps({"query_type": "QUERY"}), headers=auth)
    qid = json.loads(conn.getresponse().read())["id"]
    for other in ("e2", "nothing-here"):
        conn.request("GET", f"/api/v1/b/{bucket}/{other}/batch?q={qid}", headers=auth)
        resp = conn.getresponse()
        assert (resp.status, resp.read()[:0]) == (404, b""), other
        assert resp.getheader("x-reduct-error"), other
    conn.request("GET", f"/api/v1/b/{bucket}/e/batch?q={qid}", headers=auth)
    resp = conn.getresponse()
    assert (resp.status, resp.read()) == (200, b"from-e")
    conn.close()


async def test_an_upper_case_label_in_a_batch_lost_its_record(rs: ReductServer, rclient: Client) -> None:
    """Bug (hostile probe of 2026-11-29): a batch record labelled `A` (v2's x-reduct-labels,
    v1's `A=1`) was refused in its per-record error, which reduct-py's write_batch does not
    raise: the record was lost silently (ReductStore stores it). tsblob's label names are
    lower case, as HTTP gives a single write's label header: batch names are lowered too."""
    import http.client

    bucket = await rclient.create_bucket(name())
    batch = Batch()
    batch.add(1, b"v2", labels={"Camera": "Front", "n": "1"})
    assert await bucket.write_batch("e", batch) == {}
    port = int(rs.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "x-reduct-time-2": "2,text/plain,Camera=Rear"}
    conn.request("POST", f"/api/v1/b/{bucket.name}/e/batch", body=b"v1", headers=headers)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    assert resp.status == 200 and not [h for h in resp.headers if h.lower().startswith("x-reduct-error")]
    got = [(r.timestamp, await r.read_all(), r.labels) async for r in bucket.query("e")]
    assert got == [(1, b"v2", {"camera": "Front", "n": "1"}), (2, b"v1", {"camera": "Rear"})]


def _get(url: str) -> "tuple[int, dict, bytes]":
    """A plain GET without a token (what anyone holding a link does)."""

    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


async def test_query_links_as_reduct_py_makes_them(rs: ReductServer, rclient: Client) -> None:
    """reduct-py's create_query_link (API 1.19 on: record_entry and record_timestamp), the
    link downloaded without a token, as reduct-py's own tests do; altered, expired and
    revoked links refused."""
    import json
    import urllib.request
    from datetime import datetime, timedelta

    from reduct import Permissions

    bucket = await rclient.create_bucket(name())
    for i in range(1, 5):
        await bucket.write("entry-1", f"some-data-{i}".encode(), timestamp=i * 1_000_000, labels={"number": "1"})
        await bucket.write("entry-2", f"some-data-{i}".encode(), timestamp=i * 1_000_000 + 1,
                           labels={"number": "2"})
    link = await bucket.create_query_link("entry-2", record_entry="entry-2", record_timestamp=4_000_001)
    assert link.startswith(rs.url + "/api/v1/links/entry-2_4000001.bin?")
    status, headers, body = _get(link)
    assert (status, body) == (200, b"some-data-4")
    assert headers["content-type"] == "application/octet-stream"
    assert headers["x-reduct-time"] == "4000001"
    assert headers["x-reduct-entry"] == "entry-2"
    assert headers["x-reduct-label-number"] == "2"
    assert "entry-2_4000001.bin" in headers["content-disposition"]
    # Several entries, the record's entry named; the file name given.
    link = await bucket.create_query_link(["entry-1", "entry-2"], record_entry="entry-1",
                                          record_timestamp=2_000_000, file_name="data.txt")
    assert "links/data.txt?" in link
    status, headers, body = _get(link)
    assert (status, body, headers["x-reduct-entry"]) == (200, b"some-data-2", "entry-1")
    # A record the condition does not select: 404.
    link = await bucket.create_query_link("entry-1", when={"&number": {"$eq": 2}}, record_entry="entry-1",
                                          record_timestamp=1_000_000)
    assert _get(link)[0] == 404
    # Altered: refused.
    link = await bucket.create_query_link("entry-1", record_entry="entry-1", record_timestamp=1_000_000)
    status, headers, _ = _get(link.replace("sig=", "sig=A"))
    assert status == 403 and "signature" in headers["x-reduct-error"]
    # Expired.
    link = await bucket.create_query_link("entry-1", record_entry="entry-1", record_timestamp=1_000_000,
                                          expire_at=datetime.now() + timedelta(seconds=2))
    assert _get(link)[0] == 200
    await asyncio.sleep(2.2)
    status, headers, _ = _get(link)
    assert status == 410 and "expired" in headers["x-reduct-error"]
    # The link of a token that is then removed stops working.
    tname = name()
    value = await rclient.create_token(tname, Permissions(full_access=False, read=[bucket.name], write=[]))
    async with Client(rs.url, api_token=value) as reader:
        rbucket = await reader.get_bucket(bucket.name)
        link = await rbucket.create_query_link("entry-1", record_entry="entry-1", record_timestamp=3_000_000)
    assert _get(link)[:3:2] == (200, b"some-data-3")
    await rclient.remove_token(tname)
    status, headers, _ = _get(link)
    assert status == 410 and "removed" in headers["x-reduct-error"]
    # ReductStore's refusals: a REMOVE query, no record identity (API 1.19 on).
    for query, extra in [({"query_type": "REMOVE"}, {"record_entry": "entry-1", "record_timestamp": 1}),
                         ({"query_type": "QUERY"}, {})]:
        doc = {"bucket": bucket.name, "entry": "entry-1", "query": query,
               "expire_at": int(time.time()) + 60, **extra}
        req = urllib.request.Request(rs.url + "/api/v1/links/x.bin", data=json.dumps(doc).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}",
                                              "Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=10)
            raise AssertionError(f"{doc} was accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 422, e.code


async def test_errors_read_as_reductstore_words_them(rs: ReductServer, rclient: Client) -> None:
    """The texts reduct-py's own tests compare (issue 29): tsblob's messages said the same in
    other words, and those tests failed on them."""
    with pytest.raises(ReductError) as e:
        await rclient.get_bucket("NOTEXIST")
    assert str(e.value) == "Status 404: Bucket 'NOTEXIST' is not found"
    b = name()
    await rclient.create_bucket(b)
    with pytest.raises(ReductError) as e:
        await rclient.create_bucket(b)
    assert str(e.value) == f"Status 409: Bucket '{b}' already exists"
    with pytest.raises(ReductError, match="Status 404: Token 'NOTEXIST' doesn't exist"):
        await rclient.get_token("NOTEXIST")
    t = name()
    await rclient.create_token(t, Permissions(full_access=False, read=[b], write=[]))
    with pytest.raises(ReductError, match=f"Status 409: Token '{t}' already exists"):
        await rclient.create_token(t, Permissions(full_access=False, read=[b], write=[]))
    await rclient.remove_token(t)
    bucket = await rclient.get_bucket(b)
    await bucket.write("e", b"x", timestamp=1)
    with pytest.raises(ReductError) as e:
        await bucket.write("e", b"y", timestamp=1)
    assert str(e.value) == "Status 409: A record with timestamp 1 already exists"
    with pytest.raises(ReductError, match="Unknown extension 'test'"):
        async for _ in bucket.query("e", ext={"test": {}}):
            pass
    # `<entry>/$meta` of an entry without attachments (reduct-py's read_attachments) finds
    # none, as on ReductStore 1.21.5 (the v1 route reduct-rs uses answers 404 instead:
    # server/src/reduct/mod.rs).
    assert [r async for r in bucket.query("e/$meta")] == []
    await bucket.remove()


async def test_a_wrong_url_is_not_found_before_the_token_check(rs: ReductServer) -> None:
    """reduct-py's `test__bad_url_server_exists`: a client given a URL outside the API (no
    token) hears 404 `Not found`, as from ReductStore, not tsblob's 401."""
    async with Client(rs.url + "/bad-path") as c:
        with pytest.raises(ReductError) as e:
            await c.info()
    assert str(e.value) == "Status 404: Not found"


async def test_the_token_flag_is_init_token_in_me_and_the_token_list(rs: ReductServer, rclient: Client) -> None:
    """reduct-py's `test__me`: the `--token` admin token read as `admin` through the
    ReductStore API, where ReductStore calls the token of `RS_API_TOKEN` `init-token`
    (provisioned, full access, listed, not removable)."""
    me = await rclient.me()
    assert (me.name, me.is_provisioned, me.is_expired) == ("init-token", True, False)
    assert me.permissions.model_dump() == {"full_access": True, "read": [], "write": []}
    assert "init-token" in [t.name for t in await rclient.get_token_list()]
    t = await rclient.get_token("init-token")
    assert (t.name, t.is_provisioned, t.permissions.full_access) == ("init-token", True, True)
    with pytest.raises(ReductError) as e:
        await rclient.remove_token("init-token")
    assert str(e.value) == "Status 409: Can't remove provisioned token 'init-token'"
    with pytest.raises(ReductError, match="Status 409: Token 'init-token' already exists"):
        await rclient.create_token("init-token", Permissions(full_access=True))
    # It still works, and tsblob's own API keeps its name.
    assert (await rclient.me()).name == "init-token"
    with tsblob.Client(rs.srv.url, token=ADMIN_TOKEN) as admin:
        assert admin.me().name == "admin"
        assert "init-token" not in [x.name for x in admin.list_tokens()]


async def test_a_token_value_made_here_starts_with_its_name(rs: ReductServer, rclient: Client) -> None:
    """reduct-py's `test__create_token`: ReductStore's values are `<name>-<random>`, tsblob's
    were `tsb_<random>`. Through this API a value starts with its name and `-`, then the
    same 256 random bits as tsblob's own; tsblob's API still gives `tsb_` values."""
    t = name()
    value = await rclient.create_token(t, Permissions(full_access=True))
    assert value.startswith(f"{t}-tsb_") and len(value) == len(t) + 1 + 4 + 64
    rest = value[len(t) + 5:]
    assert all(c in "0123456789abcdef" for c in rest)
    other = await rclient.create_token(name(), Permissions(full_access=True))
    assert other[-64:] != rest
    async with Client(rs.url, api_token=value) as c:
        assert (await c.me()).name == t
    with tsblob.Client(rs.srv.url, token=value) as c:
        assert c.me().name == t
    rotated = await rclient.rotate_token(t)
    assert rotated.startswith(f"{t}-tsb_") and rotated != value
    # A guess of the name alone, or the name and a wrong random part, is refused.
    for guess in (f"{t}-", f"{t}-tsb_" + "0" * 64):
        async with Client(rs.url, api_token=guess) as c:
            with pytest.raises(ReductError) as e:
                await c.me()
            assert e.value.status_code == 401
    with tsblob.Client(rs.srv.url, token=ADMIN_TOKEN) as admin:
        assert admin.create_token(name(), full_access=True).startswith("tsb_")


async def test_bucket_defaults_are_reductstores_max_block_size(rs: ReductServer, rclient: Client) -> None:
    """reduct-py's `test__set_settings`, `test__create_bucket_custom_settings`, `test__info`:
    ReductStore's default `max_block_size` is 64,000,000 bytes, tsblob's 64 MiB; a bucket made
    through this API without one gets ReductStore's, and `/info` shows it."""
    info = await rclient.info()
    assert info.defaults.bucket.max_block_size == 64_000_000
    bucket = await rclient.create_bucket(name(), BucketSettings(max_block_records=10_000))
    s = (await bucket.get_settings()).model_dump()
    assert (s["max_block_size"], s["max_block_records"], s["quota_size"], s["quota_type"]) == (
        64_000_000, 10_000, 0, QuotaType.NONE)
    await bucket.set_settings(BucketSettings(max_block_records=20_000))
    assert (await bucket.get_settings()).max_block_size == 64_000_000
    # One given is kept; tsblob's own API keeps its 64 MiB default.
    given = await rclient.create_bucket(name(), BucketSettings(max_block_size=1_000_000))
    assert (await given.get_settings()).max_block_size == 1_000_000
    native = name()
    with tsblob.Client(rs.srv.url, token=ADMIN_TOKEN) as admin:
        admin.create_bucket(native)
        assert admin.get_bucket(native).settings.max_block_size == 64 << 20


@pytest.mark.parametrize("quota_type", [QuotaType.FIFO, QuotaType.HARD])
async def test_a_quota_of_zero_bytes_is_accepted(rclient: Client, quota_type: QuotaType) -> None:
    """reduct-py's `test__create_bucket_quota[FIFO|HARD]`: ReductStore accepts a FIFO or HARD
    quota without a size (0); tsblob refused it (422). 0 means a quota of no bytes, as in
    ReductStore's quota check: HARD refuses every record; FIFO gives up the older blocks
    for each write."""
    bucket = await rclient.create_bucket(name(), BucketSettings(quota_type=quota_type))
    s = await bucket.get_settings()
    assert (s.quota_type, s.quota_size) == (quota_type, 0)
    if quota_type == QuotaType.HARD:
        # (ReductStore takes an empty record: it counts bodies; tsblob counts what the block
        # stores, 88 bytes of record header, so it refuses that too.)
        with pytest.raises(ReductError) as e:
            await bucket.write("e", b"x", timestamp=2)
        assert "quota" in e.value.message.lower()
        assert (await bucket.info()).entry_count == 0
    else:
        await bucket.set_settings(BucketSettings(max_block_records=1))
        for ts in range(1, 4):
            await bucket.write("e", b"x" * 100, timestamp=ts)
        assert [r.timestamp async for r in bucket.query("e")] == [3]


async def test_the_next_batch_is_made_while_the_client_reads_the_last(rs: ReductServer, rclient: Client) -> None:
    """reduct-py read a query's batches slower from tsblob than from ReductStore at 100 KB
    records (bench_reduct_api.py): each read made its whole batch (up to 8 MiB read and
    checked) only when asked, while the client waited. The batch after the one answered is
    now made ahead; a read arriving while it is made waits for it (not 409), and the
    records, their order and bytes are the same."""
    import http.client

    bucket = await rclient.create_bucket(name())
    data = {i: bytes([i % 251]) * (100 << 10) for i in range(150)}
    for i, d in data.items():
        await bucket.write("cam", d, timestamp=1_000 + i, labels={"i": str(i)})
    got = [(r.timestamp, await r.read_all(), r.labels["i"]) async for r in bucket.query("cam")]
    assert [t for t, _, _ in got] == [1_000 + i for i in range(150)]
    assert all(d == data[t - 1_000] and i == str(t - 1_000) for t, d, i in got)
    # Raw: batch after batch with no pause, each read right after the previous answer.
    host = rs.url.removeprefix("http://")
    conn = http.client.HTTPConnection(host, timeout=30)
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    conn.request("POST", f"/api/v1/io/{bucket.name}/q",
                 body=b'{"query_type": "QUERY", "entries": ["cam"]}', headers=auth)
    resp = conn.getresponse()
    qid = json.loads(resp.read())["id"]
    seen, last = 0, "false"
    while last != "true":
        conn.request("GET", f"/api/v1/io/{bucket.name}/read", headers={**auth, "x-reduct-query-id": str(qid)})
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200, (resp.status, resp.getheader("x-reduct-error"))
        n = sum(1 for k in resp.headers.keys() if k.lower().startswith("x-reduct-0-"))
        assert len(body) == n * (100 << 10)
        seen += n
        last = resp.getheader("x-reduct-last") or "false"
    assert seen == 150
    conn.close()


async def test_a_read_walks_a_bounded_part_of_a_query_that_matches_little(rs: ReductServer,
                                                                           rclient: Client) -> None:
    """Bug "a ReductStore session read scans without a bound": a read walked the index until
    it had a batch or reached the end, on a blocking thread, so a condition matching nothing
    over a large bucket held one thread per read for the whole scan. A read now walks at most
    64 index pages (16,384 records) or 0.5 s, then answers what it found; with nothing, an
    empty batch that is not the last (as ReductStore answers when its batch timeout passes).
    reduct-py reads on through them and gets exactly the matches."""
    import http.client

    b = name()
    bucket = await rclient.create_bucket(b)
    # 469 index pages: a read and the batch made ahead after it walk 128 of them.
    n = 120_000
    with tsblob.Client(rs.srv.url, token=ADMIN_TOKEN) as native:
        native.write_batch(b, "e", ({"ts": 1_000 + i, "data": b"x",
                                     "labels": {"k": "hit" if i in (5, n - 1) else "miss"}}
                                    for i in range(n)))
    # The real client: both matches, across the empty batches between them.
    got = [(r.timestamp, await r.read_all()) async for r in bucket.query("e", when={"&k": {"$eq": "hit"}})]
    assert got == [(1_005, b"x"), (1_000 + n - 1, b"x")]
    # Raw v2 and v1 reads: the first answers the first match, then empty non-last batches,
    # then the last match with x-reduct-last: true; nothing past it.
    host = rs.url.removeprefix("http://")
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    for v2 in (True, False):
        conn = http.client.HTTPConnection(host, timeout=30)
        query = {"query_type": "QUERY", "when": {"&k": {"$eq": "hit"}}}
        url = f"/api/v1/io/{b}/q" if v2 else f"/api/v1/b/{b}/e/q"
        conn.request("POST", url, body=json.dumps({**query, "entries": ["e"]} if v2 else query).encode(),
                     headers=auth)
        resp = conn.getresponse()
        qid = json.loads(resp.read())["id"]
        answers = []
        while True:
            if v2:
                conn.request("GET", f"/api/v1/io/{b}/read", headers={**auth, "x-reduct-query-id": str(qid)})
            else:
                conn.request("GET", f"/api/v1/b/{b}/e/batch?q={qid}", headers=auth)
            resp = conn.getresponse()
            resp.read()
            prefix = "x-reduct-0-" if v2 else "x-reduct-time-"
            found = sum(1 for k in resp.headers.keys() if k.lower().startswith(prefix))
            answers.append((resp.status, found, resp.getheader("x-reduct-last")))
            if resp.status != 200 or resp.getheader("x-reduct-last") == "true":
                break
            assert len(answers) < 100, answers
        conn.close()
        assert answers[0] == (200, 1, "false"), answers
        assert answers[-1] == (200, 1, "true"), answers
        empty = answers[1:-1]
        # 119,994 records between the matches: more than two reads' worth of pages (the
        # old code answered the two matches in two reads).
        assert len(empty) >= 2 and all(a == (200, 0, "false") for a in empty), answers


async def test_a_write_only_token_could_read_what_it_could_write(rs: ReductServer, rclient: Client) -> None:
    """Bug (ReductStore parity probe of 2026-11-29): a token with `write` only (ReductStore's
    usual uploader token) could list, read, query and link every record of its buckets;
    ReductStore answers 403. It writes, and reads nothing, through both APIs."""
    b = name()
    bucket = await rclient.create_bucket(b)
    await bucket.write("e", b"secret", timestamp=1)
    value = await rclient.create_token(name(), Permissions(full_access=False, read=[], write=[b]))
    async with Client(rs.url, api_token=value) as writer:
        assert [x.name for x in await writer.list()] == []
        with pytest.raises(ReductError) as e:
            await writer.get_bucket(b)
        assert e.value.status_code == 403
        from reduct import Bucket

        # Whether the bucket exists (reduct-rs's get_bucket, a ReductStore replicating into
        # tsblob before each batch): a HEAD a token that may write the bucket may make.
        await writer._http.request_all("HEAD", f"/b/{b}")
        wb = Bucket(b, writer._http)  # what get_bucket returns, without its read
        await wb.write("e", b"more", timestamp=2)
        with pytest.raises(ReductError) as e:
            async with wb.read("e", timestamp=1) as r:
                await r.read_all()
        assert e.value.status_code == 403
        with pytest.raises(ReductError) as e:
            async for _ in wb.query("e", start=0):
                pass
        assert e.value.status_code == 403
    with tsblob.Client(rs.srv.url, token=value) as native:
        with pytest.raises(tsblob.Forbidden):
            native.read(b, "e", ts=1)
    assert [r.timestamp async for r in (await rclient.get_bucket(b)).query("e", start=0)] == [1, 2]


async def test_a_double_quote_inside_a_batch_label_value_failed_the_batch(rclient: Client) -> None:
    """Bug (ReductStore parity probe of 2026-11-29): a `"` inside a v1 batch label value
    (`screen=5"`) failed the whole batch with 422, and `say "hi"` was stored as `say hi`;
    ReductStore quotes only a value that starts with `"`. Written through a v1 batch and read
    back through both batch protocols, values are as written."""
    b = name()
    await rclient.create_bucket(b)
    values = ['5"', 'say "hi"', "t\tx", "plain"]
    bucket = await rclient.get_bucket(b)
    batch = Batch()
    for i, v in enumerate(values):
        batch.add(timestamp=i + 1, data=b"P%d" % i, labels={"v": v})
    errors = await bucket.write_batch("e", batch)
    assert errors == {}, errors
    got = [(r.timestamp, r.labels["v"]) async for r in bucket.query("e", start=0)]
    assert got == [(i + 1, v) for i, v in enumerate(values)]


async def test_a_full_hard_quota_is_400_as_on_reductstore(rclient: Client) -> None:
    """Bug (ReductStore parity probe of 2026-11-29): a full HARD quota answered 507 where
    ReductStore answers 400."""
    b = name()
    bucket = await rclient.create_bucket(b, BucketSettings(quota_type=QuotaType.HARD, quota_size=1000))
    await bucket.write("e", b"x" * 500, timestamp=1)
    with pytest.raises(ReductError) as e:
        await bucket.write("e", b"y" * 800, timestamp=2)
    assert e.value.status_code == 400, e.value
