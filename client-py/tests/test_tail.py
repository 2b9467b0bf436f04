"""Live tails (``Client.tail`` / ``AsyncClient.tail``) against a real ``tsblob serve``: one
writer and three tailers, a reconnection after a dropped connection, heartbeats keeping an
idle tail open past the client's timeout, and ``meta=True``."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path
from typing import List, Optional

import pytest

import tsblob
from tsblob import AsyncClient, Client

from bridge import Bridge, Loop
from conftest import Server
from proxy import Cut, Proxy

N = 200


def _tail_n(server: Server, bucket: str, n: int, out: List[int], **kw: object) -> None:
    with server.client() as db:
        for rec in db.tail(bucket, "cam", start=0, heartbeat=1, **kw):
            out.append(rec.timestamp)
            assert rec.data == b"p%d" % rec.timestamp
            if len(out) == n:
                break


def test_one_writer_three_tailers(server: Server, client: Client, bucket: str) -> None:
    client.write(bucket, "cam", b"p1", ts=1)  # a tail needs the entry to exist
    seen: List[List[int]] = [[], [], []]
    threads = [threading.Thread(target=_tail_n, args=(server, bucket, N, seen[i])) for i in range(3)]
    for t in threads:
        t.start()
    for ts in range(2, N + 1):
        client.write(bucket, "cam", b"p%d" % ts, ts=ts)
        if ts % 40 == 0:
            time.sleep(0.05)
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    for got in seen:
        assert got == list(range(1, N + 1))


def test_a_dropped_connection_resumes_from_the_last_timestamp(make_client, client: Client, bucket: str,  # type: ignore[no-untyped-def]
                                                              proxy: Proxy) -> None:
    """A real cut (the test proxy closes the connection in the middle of the stream): the
    tail reopens from the last timestamp and hands out every record once."""
    for ts in range(1, 41):
        client.write(bucket, "cam", b"p%03d" % ts * 100, ts=ts)
    proxy.plan(Cut(7_777), Cut(9_999))
    got: List[int] = []
    with make_client(proxy.url) as db:
        for rec in db.tail(bucket, "cam", heartbeat=1, backoff=0.01):
            assert rec.data == b"p%03d" % rec.timestamp * 100
            got.append(rec.timestamp)
            if len(got) == 40:
                break
    assert got == list(range(1, 41))
    assert proxy.connections == 3


def test_heartbeats_keep_an_idle_tail_open_past_the_client_timeout(make_client, client: Client,  # type: ignore[no-untyped-def]
                                                                   bucket: str, proxy: Proxy) -> None:
    client.write(bucket, "cam", b"p1", ts=1)
    got: List[int] = []

    def writer() -> None:
        time.sleep(3.5)
        client.write(bucket, "cam", b"p2", ts=2)

    t = threading.Thread(target=writer)
    t.start()
    with make_client(proxy.url, timeout=2.0) as db:
        for rec in db.tail(bucket, "cam", heartbeat=1):
            got.append(rec.timestamp)
            if len(got) == 2:
                break
    t.join()
    assert got == [1, 2]
    # idle for 3.5 s with a 2 s read timeout: heartbeats kept the one connection open
    assert proxy.connections == 1


def test_meta_tail_and_limit(client: Client, bucket: str) -> None:
    for ts in range(1, 11):
        client.write(bucket, "cam", b"p%d" % ts, ts=ts, labels={"k": "x" if ts % 2 else "y"})
    infos = list(client.tail(bucket, "cam", meta=True, heartbeat=1,
                             when={"&k": {"$eq": "x"}, "$limit": 3}))
    assert [i.timestamp for i in infos] == [1, 3, 5]
    assert all(isinstance(i, tsblob.RecordInfo) and i.labels["k"] == "x" for i in infos)
    with pytest.raises(tsblob.BadRequest):
        list(client.tail(bucket, "cam", heartbeat=0))


async def test_async_tail(server: Server, aclient: AsyncClient, bucket: str) -> None:
    await aclient.write(bucket, "cam", b"p1", ts=1)

    async def writer() -> None:
        async with AsyncClient(server.url) as w:
            for ts in range(2, 51):
                await w.write(bucket, "cam", b"p%d" % ts, ts=ts)

    task = asyncio.create_task(writer())
    got: List[int] = []
    async for rec in aclient.tail(bucket, "cam", heartbeat=1):
        assert rec.data == b"p%d" % rec.timestamp
        got.append(rec.timestamp)
        if len(got) == 50:
            break
    await task
    assert got == list(range(1, 51))


def test_multi_entry_query(client: Client, bucket: str) -> None:
    for ts in range(12):
        entry = ["cams/front", "cams/rear", "imu"][ts % 3]
        client.write(bucket, entry, b"p%d" % ts, ts=ts, labels={"odd": str(ts % 2)})
    client.write(bucket, "imu", b"tie", ts=3)  # same ts as cams/front
    got = [(r.entry, r.timestamp, r.data) for r in client.query(bucket, entries=["cams/*", "imu"])]
    assert got[:5] == [("cams/front", 0, b"p0"), ("cams/rear", 1, b"p1"), ("imu", 2, b"p2"),
                       ("cams/front", 3, b"p3"), ("imu", 3, b"tie")]
    assert len(got) == 13
    infos = list(client.query(bucket, entries=["**"], meta=True, when={"&odd": {"$eq": 1}, "$limit": 2}))
    # (the tie at imu 3 has no label: it does not match); $limit counts per entry, as in
    # ReductStore (issue 28): each entry's first 2 odd records
    assert [(i.entry, i.timestamp) for i in infos] == [("cams/rear", 1), ("cams/front", 3), ("imu", 5),
                                                       ("cams/rear", 7), ("cams/front", 9), ("imu", 11)]
    infos = list(client.query(bucket, entries=["**"], meta=True, when={"&odd": {"$eq": 1}, "$limit": 1}))
    assert [(i.entry, i.timestamp) for i in infos] == [("cams/rear", 1), ("cams/front", 3), ("imu", 5)]
    # single-entry records carry no entry
    assert [r.entry for r in client.query(bucket, "imu", stop=3)] == [None]
    with pytest.raises(tsblob.InvalidInput):
        client.query(bucket)
    with pytest.raises(tsblob.EntryNotFound):
        list(client.query(bucket, entries=["nope"]))
    tail = client.tail(bucket, entries=["cams/*"], start=9, heartbeat=1)
    assert [(r.entry, r.timestamp) for r in (next(tail), next(tail))] == [("cams/front", 9), ("cams/rear", 10)]
    tail.close()


async def test_async_multi_entry_query(aclient: AsyncClient, bucket: str) -> None:
    for ts in range(6):
        await aclient.write(bucket, "a" if ts % 2 else "b", b"p%d" % ts, ts=ts)
    got = [(r.entry, r.timestamp) async for r in aclient.query(bucket, entries=["a", "b"])]
    assert got == [("b", 0), ("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5)]


def _both(flavour: str, url: str, loop: "Optional[Loop]") -> Client:
    """A ``Client``, or an ``AsyncClient`` driven through :class:`bridge.Bridge`."""
    if loop is None:
        return Client(url)
    return Bridge(AsyncClient(url), loop)  # type: ignore[return-value]


@pytest.mark.parametrize("meta", [False, True], ids=["frames", "meta"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_tail_survives_a_server_restart(flavour: str, meta: bool, tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """Bug: a tail ended at the server's restart (ops probe 2026-11-29). On SIGTERM the server
    ends a live tail with a last error frame ``busy`` ("the server is stopping: follow again
    once it is back"); ``tail()`` raised it (``TsblobError``, status None) instead of
    reopening as it does after a dropped connection. Now the tail reopens from the last
    record, through the refused connections of the restart (within ``retries``), and hands
    out every record once, in order."""
    srv = Server(tmp_path / "data", []).start()
    loop = Loop() if flavour == "async" else None
    db = _both(flavour, srv.url, loop)
    got: List[int] = []
    errors: List[BaseException] = []

    def follow() -> None:
        try:
            for rec in db.tail("b", "cam", heartbeat=1, meta=meta):
                if not meta:
                    assert rec.data == b"p%d" % rec.timestamp
                got.append(rec.timestamp)
                if len(got) == 40:
                    break
        except BaseException as e:  # (reported by the test thread)
            errors.append(e)

    try:
        with srv.client() as w:
            w.create_bucket("b")
            for ts in range(1, 21):
                w.write("b", "cam", b"p%d" % ts, ts=ts)
        t = threading.Thread(target=follow)
        with caplog.at_level("WARNING", logger="tsblob"):
            t.start()
            deadline = time.monotonic() + 10
            while len(got) < 20 and time.monotonic() < deadline and not errors:
                time.sleep(0.02)
            assert got == list(range(1, 21)) and not errors
            port = srv.port
            srv.terminate()  # SIGTERM: the tail gets its last frame, busy
            time.sleep(1.0)  # the tail's first reopening finds no server: refused
            srv.start(port=port)
            with srv.client() as w:
                for ts in range(21, 41):
                    w.write("b", "cam", b"p%d" % ts, ts=ts)
            t.join(timeout=60)
        assert not t.is_alive()
        assert not errors, errors
        assert got == list(range(1, 41))
        said = " ".join(r.getMessage() for r in caplog.records)
        assert "busy" in said and "reopening from the last record" in said
    finally:
        db.close()
        if loop is not None:
            loop.stop()
        srv.stop()


class _EndingTail:
    """A server whose live tail answers (``meta=True``: NDJSON, chunked) end cleanly, as a
    proxy may end a stream that its upstream dropped: each connection gets the next list of
    timestamps of ``answers``, then the chunked body's last chunk. ``targets``: the
    requests' targets."""

    def __init__(self, answers: List[List[int]]) -> None:
        self.answers = answers
        self.targets: List[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        for answer in self.answers:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536)
                self.targets.append(head.split(b" ")[1].decode())
                body = b"".join(b'{"ts": %d, "size": 1, "content_type": "x", "labels": {}}\n' % ts for ts in answer)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                             b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                             + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
        self.sock.close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_meta_tail_whose_answer_ends_reopens(flavour: str) -> None:
    """Bug: a tail ended at the server's restart (ops probe 2026-11-29), the ``meta=True``
    side: NDJSON has no end line, so a live tail's answer that ended (a cut a proxy passed on
    as a clean end) was taken for the end of the tail, and the iteration stopped without a
    word. A tail never ends but with a ``$limit``: it reopens just after the last record."""
    srv = _EndingTail([[1, 2], [3]])
    loop = Loop() if flavour == "async" else None
    db = _both(flavour, srv.url, loop)
    try:
        it = db.tail("b", "cam", meta=True, backoff=0.01)
        assert [next(it).timestamp for _ in range(3)] == [1, 2, 3]
        it.close()
        assert "start=3" in srv.targets[1] and "follow=true" in srv.targets[1]
    finally:
        db.close()
        if loop is not None:
            loop.stop()
