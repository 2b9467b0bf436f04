"""Every method of the client against a real ``tsblob serve``, run once with ``Client`` and
once with ``AsyncClient`` (the ``client``/``make_client`` fixtures of conftest.py)."""

from __future__ import annotations

import io
import uuid
from datetime import datetime, timedelta, timezone

import pytest

import tsblob
from tsblob import Client

T0 = 1_700_000_000_000_000  # µs


def test_health_and_info(client: Client) -> None:
    h = client.health()
    assert h.ok and h.version and h.disk == "ok" and h.index == "ok"
    info = client.info()
    assert info.version == h.version
    assert info.uptime_s >= 0 and info.bucket_count >= 0 and info.sync


def test_bucket_lifecycle(client: Client) -> None:
    name = f"life-{uuid.uuid4().hex[:8]}"
    b = client.create_bucket(name, quota_type="fifo", quota_size=10 << 20, max_block_size=1 << 20,
                             max_block_records=1000, compression="zstd:3")
    assert b.name == name
    assert b.settings.quota_type == "fifo" and b.settings.quota_size == 10 << 20
    assert b.settings.max_block_size == 1 << 20 and b.settings.max_block_records == 1000
    assert b.settings.compression.startswith("zstd")
    assert b.info.record_count == 0 and b.info.oldest is None

    with pytest.raises(tsblob.BucketExists):
        client.create_bucket(name)
    with pytest.warns(tsblob.SettingsMismatch, match="compression 'none' asked"):
        again = client.create_bucket(name, exist_ok=True, compression="none")
    assert again.settings.compression.startswith("zstd")  # exist_ok never changes settings

    assert name in [x.name for x in client.list_buckets()]
    upd = client.update_bucket(name, quota_type="hard", quota_size=1 << 30)
    assert upd.settings.quota_type == "hard" and upd.settings.quota_size == 1 << 30
    assert upd.settings.max_block_records == 1000  # untouched

    client.write(name, "e", b"x" * 100, ts=T0)
    got = client.get_bucket(name)
    assert got.info.record_count == 1 and got.info.entry_count == 1
    assert got.info.oldest == T0 and got.info.latest == T0
    assert [e.name for e in got.entries] == ["e"]

    client.remove_bucket(name)
    with pytest.raises(tsblob.BucketNotFound):
        client.get_bucket(name)


def test_write_and_read_bytes_with_labels(client: Client, bucket: str) -> None:
    labels = {"camera": "front", "note": "héllo wörld 100% ✓", "empty": ""}
    ts = client.write(bucket, "robot1/cam", b"\x00jpeg\xff", ts=T0, labels=labels, content_type="image/jpeg")
    assert ts == T0
    rec = client.read(bucket, "robot1/cam", T0)
    assert rec.timestamp == T0 and rec.ts == T0
    assert rec.datetime == datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)
    assert rec.data == b"\x00jpeg\xff" and rec.size == 6 and rec.loaded
    assert rec.content_type == "image/jpeg"
    assert rec.labels == labels
    head = client.head(bucket, "robot1/cam", T0)
    assert head == tsblob.RecordInfo(T0, "image/jpeg", labels, 6)


def test_write_without_ts_gets_now_and_read_latest(client: Client, bucket: str) -> None:
    before = int(datetime.now(timezone.utc).timestamp() * 1e6)
    t1 = client.write(bucket, "e", b"one")
    t2 = client.write(bucket, "e", b"two")
    assert before - 5_000_000 < t1 < t2  # unique and monotonic per entry
    latest = client.read(bucket, "e")
    assert latest.timestamp == t2 and latest.data == b"two"


def test_timestamps_in_every_form(client: Client, bucket: str) -> None:
    dt = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    us = 1_714_564_800_123_456
    forms = [us + 1, (us + 2) / 1e6, dt + timedelta(microseconds=3), "2024-05-01T12:00:00.123460Z",
             datetime(2024, 5, 1, 14, 0, 0, 123461, tzinfo=timezone(timedelta(hours=2)))]
    written = [client.write(bucket, "ts", str(i).encode(), ts=f) for i, f in enumerate(forms)]
    assert written == [us + 1, us + 2, us + 3, us + 4, us + 5]
    # The same forms work for reading and for query bounds.
    assert client.read(bucket, "ts", dt + timedelta(microseconds=1)).data == b"0"
    assert client.read(bucket, "ts", "2024-05-01T12:00:00.123458Z").data == b"1"
    got = [r.timestamp for r in client.query(bucket, "ts", start=(us + 2) / 1e6, stop="2024-05-01T12:00:00.123461Z")]
    assert got == [us + 2, us + 3, us + 4]


def test_write_from_file_and_iterator(client: Client, bucket: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    payload = bytes(range(256)) * 5000
    path = tmp_path / "blob.bin"
    path.write_bytes(payload)
    with open(path, "rb") as f:
        t1 = client.write(bucket, "f", f, ts=T0)
    t2 = client.write(bucket, "f", iter([payload[:1000], payload[1000:]]), ts=T0 + 1)
    t3 = client.write(bucket, "f", (payload[i:i + 7000] for i in range(0, len(payload), 7000)), ts=T0 + 2,
                      size=len(payload))
    t4 = client.write(bucket, "f", io.BytesIO(payload), ts=T0 + 3)
    for t in (t1, t2, t3, t4):
        assert client.read(bucket, "f", t).data == payload
    with pytest.raises(TypeError, match="encode"):
        client.write(bucket, "f", "text")  # type: ignore[arg-type]


def test_write_buffers_round_trip_above_every_chunk_size(client: Client, bucket: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Regression (issue 15, python part): the sync transport sends a request's head and a
    bytes-like body with one ``sendmsg`` instead of joining them (a copy of the whole record),
    for bodies of any size. Every buffer type must arrive byte-identical and with the right
    Content-Length: above the 1 MiB chunk size, the 1 MiB old join limit and what one
    ``sendmsg`` takes (the rest goes out through ``sendall`` from an offset), a memoryview
    slice with a non-zero start, and a memoryview of 4-byte items (length in bytes)."""
    import array

    big = bytes(range(251)) * (3 * 4177 + 1)  # 3,145,878 B: no power of two, above 3 MiB
    ints = array.array("i", range(300_000))  # 1.2 MB of 4-byte items
    path = tmp_path / "big.bin"
    path.write_bytes(big)
    cases = [
        ("bytes", big, big),
        ("bytearray", bytearray(big), big),
        ("memoryview", memoryview(big), big),
        ("slice", memoryview(big)[12_345:], big[12_345:]),
        ("ints", memoryview(ints), ints.tobytes()),
        ("small-bytearray", bytearray(b"x" * 100), b"x" * 100),
        ("empty-memoryview", memoryview(b""), b""),
    ]
    for i, (name, body, want) in enumerate(cases):
        t = client.write(bucket, "buf", body, ts=T0 + i)
        rec = client.read(bucket, "buf", t)
        assert rec.size == len(want) and rec.data == want, name
    with open(path, "rb") as f:
        f.seek(7)  # sent from the current position
        t = client.write(bucket, "buf", f, ts=T0 + 100)
    assert client.read(bucket, "buf", t).data == big[7:]


def test_file_body_sends_exactly_its_size(server, bucket: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Regression (issue 15, python part): the sync client sends a regular file with
    ``sendfile`` and never more than the Content-Length it declared: ``size=`` smaller than
    the file sends that many bytes (before, the rest of the file followed on the connection
    and broke the next request), and a file with fewer bytes left than ``size=`` raises at
    once (before, the server waited for bytes that never came) and leaves the client usable."""
    payload = bytes(range(251)) * 9000  # 2,259,000 B
    path = tmp_path / "f.bin"
    path.write_bytes(payload)
    with server.client(pool_size=1) as db:  # one connection: the next request reuses it
        with open(path, "rb") as f:
            t = db.write(bucket, "file", f, ts=T0, size=1_500_000)
            assert f.tell() == 1_500_000  # the file is left after what was sent
        assert db.read(bucket, "file", t).data == payload[:1_500_000]
        assert db.write(bucket, "file", b"next", ts=T0 + 1) == T0 + 1
        with open(path, "rb") as f, pytest.raises(tsblob.InvalidInput, match="2259000 bytes left"):
            db.write(bucket, "file", f, ts=T0 + 2, size=len(payload) + 10)
        assert db.write(bucket, "file", b"after", ts=T0 + 3) == T0 + 3
        with pytest.raises(tsblob.NotFound):
            db.read(bucket, "file", T0 + 2)


def test_read_stream(client: Client, bucket: str) -> None:
    payload = b"abc" * 1_000_000
    client.write(bucket, "big", payload, ts=T0, labels={"k": "v"}, content_type="video/mp4")
    with client.read_stream(bucket, "big", T0) as rec:
        assert not rec.loaded and rec.size == len(payload)
        assert rec.labels == {"k": "v"} and rec.content_type == "video/mp4"
        chunks = list(rec.iter_chunks())
        # Bug (docs walkthrough): the async client raised a bare TsblobError here, the sync
        # client's other payload_consumed an InvalidInput.
        with pytest.raises(tsblob.InvalidInput, match="already read") as e:
            list(rec.iter_chunks())
        assert e.value.code == "payload_consumed"
    assert len(chunks) > 1 and b"".join(chunks) == payload
    with client.read_stream(bucket, "big") as rec:  # latest, loaded through .data
        assert rec.data == payload


def test_write_batch_any_iterable_and_per_record_results(make_client, client: Client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    def gen():  # type: ignore[no-untyped-def]
        for i in range(250):
            yield (T0 + i, f"rec{i}".encode(), {"i": str(i), "even": str(i % 2 == 0).lower()})

    small = make_client(batch_max_records=100)
    res = small.write_batch(bucket, "b", gen())
    assert res.written == 250 and res.failed == 0 and res.batches == 3
    assert [r.ts for r in res.results] == [T0 + i for i in range(250)]
    assert all(r.ok and r.status == 201 for r in res.results)

    # A duplicate timestamp fails alone; the others of the batch are stored, and the call
    # raises at the end (a logger that forgets to look at the result loses nothing silently).
    with pytest.raises(tsblob.BatchError) as e:
        client.write_batch(bucket, "b", [(T0 + 5, b"dup"), {"ts": T0 + 1000, "data": b"new"}, b"server-ts"])
    res = e.value.result
    assert isinstance(e.value.__cause__, tsblob.TimestampExists) and "1 of 3 records" in str(e.value)
    assert (res.written, res.failed) == (2, 1) and e.value.errors == [res.results[0]]
    assert isinstance(res.results[0].error, tsblob.TimestampExists) and res.results[0].status == 409
    assert res.results[1].ok and res.results[2].ok and res.results[2].ts is not None
    assert res.results[2].ts > T0 + 1000
    assert client.read(bucket, "b", T0 + 5).data == b"rec5"  # never overwritten
    # raise_errors=False hands the result back instead; raise_for_errors() raises then.
    res = client.write_batch(bucket, "b", [(T0 + 6, b"dup"), (T0 + 1001, b"new")], raise_errors=False)
    assert (res.written, res.failed) == (1, 1)
    with pytest.raises(tsblob.BatchError):
        res.raise_for_errors()

    # Records read from one entry can be written to another as they are.
    copied = client.write_batch(bucket, "copy", list(client.query(bucket, "b", stop=T0 + 10)))
    assert copied.written == 10
    assert [r.labels["i"] for r in client.query(bucket, "copy")] == [str(i) for i in range(10)]


def test_query_filters_limit_reverse(client: Client, bucket: str) -> None:
    client.write_batch(bucket, "q", [(T0 + i, bytes([i]), {"cam": "front" if i % 2 else "back", **({"flag": "1"} if i % 3 == 0 else {})})
                                     for i in range(30)])
    all_ts = [r.timestamp for r in client.query(bucket, "q")]
    assert all_ts == [T0 + i for i in range(30)]
    assert [r.timestamp for r in client.query(bucket, "q", start=T0 + 10, stop=T0 + 13)] == [T0 + 10, T0 + 11, T0 + 12]
    assert [r.timestamp for r in client.query(bucket, "q", limit=3, desc=True)] == [T0 + 29, T0 + 28, T0 + 27]
    front = list(client.query(bucket, "q", eq={"cam": "front"}))
    assert [r.data for r in front] == [bytes([i]) for i in range(1, 30, 2)]
    assert len(list(client.query(bucket, "q", ne={"cam": "front"}))) == 15
    assert [r.timestamp - T0 for r in client.query(bucket, "q", has=["flag"])] == list(range(0, 30, 3))
    assert len(list(client.query(bucket, "q", missing=["flag"], eq={"cam": "back"}))) == 10
    assert list(client.query(bucket, "q", start=T0 + 100)) == []


def test_query_large_records_stream_and_skip(make_client, client: Client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    big = [bytes([i]) * 300_000 for i in range(4)]
    for i, data in enumerate(big):
        client.write(bucket, "mix", data, ts=T0 + 2 * i)
        client.write(bucket, "mix", b"small", ts=T0 + 2 * i + 1)
    with make_client(eager_limit=1000) as db:
        seen = []
        for rec in db.query(bucket, "mix"):
            if rec.size > 1000:
                assert not rec.loaded
                if rec.timestamp == T0:  # read the first large one in chunks
                    assert b"".join(rec.iter_chunks()) == big[0]
                elif rec.timestamp == T0 + 2:  # the second through .data
                    assert rec.data == big[1]
                # the others are left unread: the iterator skips them
            else:
                assert rec.loaded and rec.data == b"small"
            seen.append(rec.timestamp)
        assert seen == [T0 + i for i in range(8)]
        # Breaking out early and closing releases the connection for the next request.
        with db.query(bucket, "mix") as it:
            first = next(it)
            assert first.timestamp == T0
        assert db.read(bucket, "mix", T0 + 1).data == b"small"


def test_update_labels(client: Client, bucket: str) -> None:
    client.write(bucket, "l", b"x", ts=T0, labels={"keep": "1", "gone": "2"})
    info = client.update_labels(bucket, "l", T0, {"new": "ü", "gone": None})
    assert info.labels == {"keep": "1", "new": "ü"} and info.timestamp == T0 and info.size == 1
    assert client.read(bucket, "l", T0).labels == {"keep": "1", "new": "ü"}


def test_remove_record_range_entry(client: Client, bucket: str) -> None:
    client.write_batch(bucket, "r", [(T0 + i, b"x") for i in range(10)])
    assert client.remove(bucket, "r", T0 + 9) == 1
    with pytest.raises(tsblob.RecordNotFound):
        client.read(bucket, "r", T0 + 9)
    assert client.remove(bucket, "r", start=T0 + 2, stop=T0 + 5) == 3
    assert [r.timestamp - T0 for r in client.query(bucket, "r")] == [0, 1, 5, 6, 7, 8]
    assert client.remove(bucket, "r", start=T0 + 7) == 2
    assert client.get_entry(bucket, "r").record_count == 4
    e = client.get_entry(bucket, "r")
    assert e.name == "r" and e.oldest == T0 and e.latest == T0 + 6
    with pytest.raises(tsblob.InvalidInput, match="remove_entry"):
        client.remove(bucket, "r")
    client.remove_entry(bucket, "r")
    with pytest.raises(tsblob.EntryNotFound):
        client.get_entry(bucket, "r")


def test_one_client_shared_by_threads(client: Client, bucket: str) -> None:
    """The connection pool serves several threads at once without mixing answers."""
    from concurrent.futures import ThreadPoolExecutor

    def work(t: int) -> None:
        for i in range(50):
            ts = T0 + t * 1000 + i
            assert client.write(bucket, "threads", b"%d-%d" % (t, i), ts=ts) == ts
            assert client.read(bucket, "threads", ts).data == b"%d-%d" % (t, i)
        assert len(list(client.query(bucket, "threads", start=T0 + t * 1000, stop=T0 + t * 1000 + 50))) == 50

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert client.get_entry(bucket, "threads").record_count == 400


def test_connections_are_reused_after_queries_and_streams(server, bucket: str) -> None:  # type: ignore[no-untyped-def]
    """Regression: a query stopped reading at the end frame, before the HTTP end of the
    body, so every query closed its connection instead of returning it to the pool. (The
    sync client's own pool; aiohttp keeps the async one.)"""
    with Client(server.url, pool_size=1) as db:
        db.write_batch(bucket, "reuse", [(T0 + i, b"x" * 10) for i in range(10)])
        db.write(bucket, "big", b"y" * (3 << 20), ts=T0)
        socks = set()
        for _ in range(3):
            assert len(list(db.query(bucket, "reuse"))) == 10
            with db.read_stream(bucket, "big", T0) as rec:
                assert sum(len(c) for c in rec.iter_chunks()) == 3 << 20
            socks.update(id(conn.sock) for conn in db._t._idle)
        assert len(socks) == 1
