"""Every error class the server can be made to produce, caused for real (sync and async).

Servers with special settings are started for the faults that need them: tokens
(Unauthorized, Forbidden), a small body limit (PayloadTooLarge), an impossible free-space
reserve (DiskFull), a block file damaged on disk (CorruptRecord), a server killed in the
middle of a stream (TransportError), a stalled upload (RequestTimeout). ``ServerError``
(``internal``, an I/O failure) cannot be caused from outside; its mapping is covered by
``test_errors.py``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest

import tsblob
from tsblob import AsyncClient, Client

from conftest import Server, free_port

T0 = 1_650_000_000_000_000


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def limited_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("limited") / "data", ["--max-body", "1MiB"]).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def full_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # A reserve larger than any disk: the free-space guard refuses every write.
    srv = Server(tmp_path_factory.mktemp("full") / "data", ["--free-space-reserve", str(10**18)]).start()
    yield srv
    srv.stop()


def test_not_found_family(client: Client, bucket: str) -> None:
    with pytest.raises(tsblob.BucketNotFound) as e:
        client.get_bucket(uniq("missing"))
    assert e.value.status == 404 and e.value.code == "bucket_not_found" and e.value.message
    with pytest.raises(tsblob.BucketNotFound):
        client.write(uniq("missing"), "e", b"x")
    with pytest.raises(tsblob.EntryNotFound):
        client.get_entry(bucket, "nope")
    client.write(bucket, "e", b"x", ts=T0)
    with pytest.raises(tsblob.RecordNotFound):
        client.read(bucket, "e", T0 + 1)
    with pytest.raises(tsblob.NotFound):  # the family catches all of them
        client.head(bucket, "e", T0 + 1)


def test_conflicts(client: Client, bucket: str) -> None:
    with pytest.raises(tsblob.BucketExists):
        client.create_bucket(bucket)
    client.write(bucket, "e", b"first", ts=T0)
    with pytest.raises(tsblob.TimestampExists) as e:
        client.write(bucket, "e", b"second", ts=T0)
    assert e.value.status == 409 and e.value.code == "timestamp_exists"
    assert client.read(bucket, "e", T0).data == b"first"


def test_invalid_input(client: Client, bucket: str) -> None:
    with pytest.raises(tsblob.InvalidInput) as e:  # the server's name rules, checked before sending
        client.create_bucket("bad name!")
    assert e.value.code == "invalid_name" and e.value.status is None
    with pytest.raises(tsblob.InvalidInput) as e:  # and by the server
        client._json("POST", "/api/v1/b/bad%20name!")
    assert e.value.code == "invalid_name" and e.value.status == 422
    with pytest.raises(tsblob.InvalidInput) as e:
        client.create_bucket(uniq("b"), compression="lz4")
    assert e.value.code == "invalid_settings"
    with pytest.raises(tsblob.InvalidInput) as e:
        client.update_bucket(bucket, max_block_size=10)
    assert e.value.code == "invalid_settings"
    with pytest.raises(tsblob.InvalidInput) as e:
        client.write(bucket, "e", b"x", labels={"k" * 300: "v"})  # over the 128-byte limit
    assert e.value.code == "invalid_label" and e.value.status == 422
    with pytest.raises(tsblob.InvalidInput) as e:  # not even a header name: refused before sending
        client.write(bucket, "e", b"x", labels={"bad key": "v"})
    assert e.value.status is None
    # In a batch, a bad label fails that record only.
    res = client.write_batch(bucket, "e", [(T0, b"ok"), (T0 + 1, b"bad", {"Bad Key": "v"})], raise_errors=False)
    assert res.results[0].ok and isinstance(res.results[1].error, tsblob.InvalidInput)


def test_bad_request_and_malformed_batch(client: Client, bucket: str) -> None:
    # The public methods validate their arguments, so speak to the routes directly.
    with pytest.raises(tsblob.BadRequest) as e:
        client._json("GET", f"/api/v1/b/{bucket}/e/query", [("limit", "-1")])
    assert e.value.code == "bad_request" and "limit" in e.value.message
    from tsblob._framing import encode_end, encode_record

    good = b"".join(bytes(p) for i in range(3) for p in encode_record(T0 + i, b"x", None, None))
    with pytest.raises(tsblob.MalformedBatch) as mb:  # no end frame: a truncated upload
        client._json("POST", f"/api/v1/b/{bucket}/e/batch", content=good + b"\x01\x02",
                     headers={"content-type": "application/x-tsblob-records"})
    assert isinstance(mb.value, tsblob.BadRequest) and mb.value.status == 400
    assert isinstance(mb.value.results, list)
    ok = client._json("POST", f"/api/v1/b/{bucket}/e2/batch", content=good + encode_end(3),
                      headers={"content-type": "application/x-tsblob-records"})
    assert ok["written"] == 3


def test_method_not_allowed(client: Client, bucket: str) -> None:
    with pytest.raises(tsblob.MethodNotAllowed) as e:
        client._json("PATCH", f"/api/v1/b/{bucket}")
    assert e.value.status == 405


def test_request_timeout(tmp_path: Path) -> None:
    srv = Server(tmp_path / "data", ["--idle-timeout", "1s"]).start()
    try:
        with srv.client() as db:
            db.create_bucket("b")

            def stalled() -> Iterator[bytes]:
                yield b"first part"
                time.sleep(2.5)  # longer than the server's idle timeout
                yield b"too late"

            with pytest.raises(tsblob.RequestTimeout) as e:
                db.write("b", "e", stalled(), ts=T0)
            assert e.value.status == 408
            with pytest.raises(tsblob.NotFound):  # nothing of it was kept
                db.read("b", "e", T0)
    finally:
        srv.stop()


def test_quota_exceeded(client: Client) -> None:
    name = uniq("hard")
    client.create_bucket(name, quota_type="hard", quota_size=64 << 10, max_block_size=16 << 10)
    try:
        with pytest.raises(tsblob.QuotaExceeded) as e:
            for i in range(100):
                client.write(name, "e", os.urandom(8 << 10), ts=T0 + i)
        assert e.value.status == 507 and isinstance(e.value, tsblob.InsufficientStorage)
        assert client.get_bucket(name).info.record_count < 100
    finally:
        client.remove_bucket(name)


def test_payload_too_large(limited_server: Server) -> None:
    with limited_server.client() as db:
        db.create_bucket("b", exist_ok=True)
        db.write("b", "e", b"x" * 1000)
        with pytest.raises(tsblob.PayloadTooLarge) as e:
            db.write("b", "e", b"x" * (2 << 20))
        assert e.value.status == 413
        db.write("b", "e", b"still works")  # the client recovers its connection


async def test_request_timeout_async(tmp_path: Path) -> None:
    srv = Server(tmp_path / "data", ["--idle-timeout", "1s"]).start()
    try:
        async with AsyncClient(srv.url) as db:
            await db.create_bucket("b")

            async def stalled() -> "AsyncIterator[bytes]":
                yield b"first part"
                await asyncio.sleep(2.5)
                yield b"too late"

            with pytest.raises(tsblob.RequestTimeout):
                await db.write("b", "e", stalled(), ts=T0)
    finally:
        srv.stop()


async def test_payload_too_large_async(limited_server: Server) -> None:
    async with AsyncClient(limited_server.url) as db:
        await db.create_bucket("ab", exist_ok=True)
        with pytest.raises(tsblob.PayloadTooLarge):
            await db.write("ab", "e", b"x" * (2 << 20))


def test_disk_full(full_server: Server) -> None:
    with full_server.client() as db:
        db.create_bucket("b", exist_ok=True)
        with pytest.raises(tsblob.DiskFull) as e:
            db.write("b", "e", b"x")
        assert e.value.status == 507 and e.value.code == "disk_full"
        assert db.list_buckets()  # reads keep working
        assert db.health().disk == "full"  # and /health says why writes fail


def test_unauthorized_and_forbidden(auth_server: Server) -> None:
    with Client(auth_server.url) as anon:
        assert anon.health().ok  # health never needs a token
        with pytest.raises(tsblob.Unauthorized) as e:
            anon.list_buckets()
        assert e.value.status == 401
    with Client(auth_server.url, token="wrong") as bad:
        with pytest.raises(tsblob.Unauthorized):
            bad.info()
    with auth_server.client() as admin:
        b = uniq("sec")
        admin.create_bucket(b)
        admin.write(b, "e", b"x", ts=T0)
        name = uniq("reader")
        value = admin.create_token(name, read=[b])
        assert name in [t.name for t in admin.list_tokens()]
        with pytest.raises(tsblob.TokenExists):
            admin.create_token(name)
        with Client(auth_server.url, token=value) as reader:
            assert reader.read(b, "e", T0).data == b"x"
            assert reader.me().read == [b]
            with pytest.raises(tsblob.Forbidden) as f:
                reader.write(b, "e", b"y")
            assert f.value.status == 403
        admin.remove_token(name)
        with pytest.raises(tsblob.TokenNotFound):
            admin.remove_token(name)
        with Client(auth_server.url, token=value) as revoked:
            with pytest.raises(tsblob.Unauthorized):
                revoked.read(b, "e", T0)


async def test_unauthorized_and_forbidden_async(auth_server: Server) -> None:
    async with AsyncClient(auth_server.url) as anon:
        with pytest.raises(tsblob.Unauthorized):
            await anon.list_buckets()
    async with AsyncClient(auth_server.url, token=auth_server.token) as admin:
        b = uniq("asec")
        await admin.create_bucket(b)
        name = uniq("w")
        value = await admin.create_token(name, write=["other-*"])
        assert name in [t.name for t in await admin.list_tokens()]
        async with AsyncClient(auth_server.url, token=value) as w:
            me = await w.me()
            assert me.write == ["other-*"] and not me.full_access
            with pytest.raises(tsblob.Forbidden):
                await w.write(b, "e", b"x")
            with pytest.raises(tsblob.Forbidden):
                [r async for r in w.query(b, "e")]
        await admin.remove_token(name)
        with pytest.raises(tsblob.TokenNotFound):
            await admin.remove_token(name)


async def test_async_error_classes(aclient: AsyncClient, bucket: str) -> None:
    with pytest.raises(tsblob.BucketNotFound):
        await aclient.get_bucket(uniq("nope"))
    await aclient.write(bucket, "e", b"x", ts=T0)
    with pytest.raises(tsblob.TimestampExists):
        await aclient.write(bucket, "e", b"x", ts=T0)
    with pytest.raises(tsblob.RecordNotFound):
        await aclient.read(bucket, "e", T0 + 1)
    with pytest.raises(tsblob.EntryNotFound):
        [r async for r in aclient.query(bucket, "nope")]
    with pytest.raises(tsblob.InvalidInput):
        await aclient.create_bucket("bad name!")
    with pytest.raises(tsblob.BucketExists):
        await aclient.create_bucket(bucket)


def test_corrupt_record_is_refused(tmp_path: Path) -> None:
    srv = Server(tmp_path / "data", []).start()
    try:
        marker = b"CORRUPT-ME-" + uuid.uuid4().hex.encode()
        with srv.client() as db:
            db.create_bucket("b")
            db.write("b", "e", marker * 100, ts=T0)
            db.write("b", "e", b"neighbour", ts=T0 + 1)
            # Flip one byte of the stored payload, wherever the engine put it.
            hits = 0
            for path in (tmp_path / "data").rglob("*"):
                if path.is_file():
                    raw = path.read_bytes()
                    at = raw.find(marker)
                    if at >= 0:
                        with open(path, "r+b") as f:
                            f.seek(at + 3)
                            f.write(b"#")
                        hits += 1
            assert hits == 1
            with pytest.raises(tsblob.CorruptRecord) as e:
                db.read("b", "e", T0)
            assert e.value.status == 500 and isinstance(e.value, tsblob.ServerError)
            assert db.read("b", "e", T0 + 1).data == b"neighbour"
            # A query skips the damaged record and reports it (issue 27): the good ones
            # all arrive.
            it = db.query("b", "e")
            assert [r.data for r in it] == [b"neighbour"]
            assert it.skipped == [tsblob.SkippedRecord(None, T0, "corrupt_record")]
    finally:
        srv.stop()


def test_transport_errors(tmp_path: Path) -> None:
    with Client(f"http://127.0.0.1:{free_port()}", timeout=2) as nobody:
        with pytest.raises(tsblob.TransportError) as e:
            nobody.health()
        assert isinstance(e.value.__cause__, OSError)
    # A server killed in the middle of a stream: the reader learns it, never gets short data.
    srv = Server(tmp_path / "data", []).start()
    try:
        with srv.client() as db:
            db.create_bucket("b")
            db.write("b", "e", b"z" * (64 << 20), ts=T0)
            with pytest.raises((tsblob.TransportError, tsblob.ProtocolError)):
                with db.read_stream("b", "e", T0) as rec:
                    got = 0
                    for chunk in rec.iter_chunks():
                        got += len(chunk)
                        if srv.proc is not None and got > (1 << 20):
                            srv.proc.kill()
                            srv.proc.wait()
                            srv.proc = None
    finally:
        srv.stop()


async def test_transport_error_async() -> None:
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", timeout=2) as nobody:
        with pytest.raises(tsblob.TransportError):
            await nobody.info()


async def test_server_killed_mid_stream_async(tmp_path: Path) -> None:
    srv = Server(tmp_path / "data", []).start()
    try:
        async with AsyncClient(srv.url) as db:
            await db.create_bucket("b")
            await db.write("b", "e", b"z" * (64 << 20), ts=T0)
            with pytest.raises((tsblob.TransportError, tsblob.ProtocolError)):
                async with db.read_stream("b", "e", T0) as rec:
                    got = 0
                    async for chunk in rec.aiter_chunks():
                        got += len(chunk)
                        if srv.proc is not None and got > (1 << 20):
                            srv.proc.kill()
                            srv.proc.wait()
                            srv.proc = None
    finally:
        srv.stop()


def _limited(folder: Path, *flags: str) -> Server:
    folder.mkdir(exist_ok=True)
    srv = Server(folder / "data", list(flags)).start()
    with srv.client() as db:
        db.create_bucket("b")
        db.write("b", "e", b"x", ts=T0)
    return srv


def _held_connection(port: int) -> socket.socket:
    """A kept-alive connection the server has taken (it answered a request on it: it counts
    in --max-connections-per-ip; one opened while the server had not yet seen the close of
    an earlier one is refused, and tried again)."""
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        if s.recv(65536).startswith(b"HTTP/1.1 200"):
            return s
        s.close()
        time.sleep(0.1)
    raise AssertionError("the server took no connection")


def test_too_many_tails_is_too_many_requests(make_client: Any, tmp_path: Path) -> None:
    """Bug: a 429 had no class of its own (ops probe 2026-11-29; ``_BY_STATUS`` lacked it):
    a tail past ``--max-tails`` is ``TooManyRequests`` with the answer's Retry-After."""
    srv = _limited(tmp_path, "--max-tails", "1")
    try:
        db = make_client(srv.url)
        first = db.tail("b", "e", heartbeat=1)
        assert next(first).timestamp == T0
        with pytest.raises(tsblob.TooManyRequests) as e:
            next(db.tail("b", "e", heartbeat=1))
        assert e.value.status == 429 and e.value.code == "too_many_tails" and e.value.retry_after == 1.0
        assert e.value.attempts == 0  # (a 429 is not retried: close a tail first)
        first.close()
    finally:
        srv.stop()


def test_too_many_streams_and_connections_are_too_many_requests(make_client: Any, tmp_path: Path) -> None:
    """Bug: a 429 had no class of its own (ops probe 2026-11-29): ``too_many_streams`` (past
    ``--max-streams-per-token``) and ``too_many_connections`` (past
    ``--max-connections-per-ip``) are ``TooManyRequests``, ``retry_after`` 1 s."""
    srv = _limited(tmp_path / "streams", "--max-streams-per-token", "1")
    try:
        db = make_client(srv.url, retries=0)
        first = db.tail("b", "e", heartbeat=1)
        next(first)
        with pytest.raises(tsblob.TooManyRequests) as e:
            list(db.query("b", "e"))
        assert e.value.code == "too_many_streams" and e.value.retry_after == 1.0
        first.close()
    finally:
        srv.stop()
    srv = Server(tmp_path / "data", ["--max-connections-per-ip", "1"]).start()
    try:
        held = _held_connection(srv.port)
        try:
            with pytest.raises(tsblob.TooManyRequests) as e:
                make_client(srv.url, retries=0).info()
            assert e.value.code == "too_many_connections" and e.value.retry_after == 1.0
        finally:
            held.close()
    finally:
        srv.stop()


def test_busy_is_unavailable_and_still_a_server_error(make_client: Any, tmp_path: Path) -> None:
    """Bug: a 503 ``busy`` answer was a bare ServerError (ops probe 2026-11-29): it is
    ``Unavailable`` (a ``ServerError``: ``except ServerError`` still catches it) with the
    answer's Retry-After, for a query and for a tail past ``--max-streams``."""
    srv = _limited(tmp_path, "--max-streams", "1")
    try:
        db = make_client(srv.url, retries=0)
        first = db.tail("b", "e", heartbeat=1)
        next(first)
        with pytest.raises(tsblob.ServerError) as e:
            list(db.query("b", "e"))
        assert type(e.value) is tsblob.Unavailable
        assert e.value.status == 503 and e.value.code == "busy" and e.value.retry_after == 1.0
        with pytest.raises(tsblob.Unavailable) as e:
            next(db.tail("b", "e", heartbeat=1, retries=0))
        assert e.value.retry_after == 1.0
        first.close()
    finally:
        srv.stop()


def test_a_tail_whose_server_stops_for_good_raises_after_its_retries(make_client: Any, tmp_path: Path) -> None:
    """Bug: a tail ended at the server's restart (ops probe 2026-11-29) with a bare
    TsblobError. The ``busy`` frame of a stopping server is now ``Unavailable`` (status
    ``None``: an error frame), raised when the tail may not reopen (``retries=0``); with
    retries, the tail reopens and raises the last failure once they ran out (here the
    refused connection of a server that does not come back: ``TransportError``)."""
    srv = _limited(tmp_path)
    try:
        db = make_client(srv.url)
        tail = db.tail("b", "e", heartbeat=1, retries=0)
        assert next(tail).timestamp == T0
        patient = db.tail("b", "e", heartbeat=1, retries=2, backoff=0.05)
        assert next(patient).timestamp == T0
        srv.terminate()
        with pytest.raises(tsblob.Unavailable) as e:
            next(tail)
        assert e.value.code == "busy" and e.value.status is None and "stopping" in e.value.message
        with pytest.raises(tsblob.TransportError) as t:
            next(patient)
        assert t.value.attempts == 2
    finally:
        srv.stop()
