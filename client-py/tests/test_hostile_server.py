"""A hostile (or broken) server cannot make the client hold unbounded memory.

Each test puts a real local HTTP server (:class:`Hostile`, raw sockets in a thread) in
place of ``tsblob serve`` and has it answer with something endless or absurd: an error
answer whose chunked body never ends, a JSON answer announcing ``Content-Length: 10**12``
then trickling filler, a query stream whose frame announces 0xFFFFFFFF bytes of labels,
NDJSON without a line break, skipped-record reports without end. Every test runs with the
sync ``Client`` and with the ``AsyncClient`` (through :class:`bridge.Bridge`).

How "the client stopped reading" is measured: the server sends what the client should
need to see that the answer is too large (twice the client's bound), then stops and waits
(``PAUSE``) for the client to close the connection. A bounded client has closed it by
then: the server saw it close after at most that many bytes, whatever the kernel's socket
buffers hold. An unbounded one keeps waiting, the server goes on past the pause (up to a
ceiling, then ends the answer normally) and the test fails. The client's Python allocations
are measured too (``tracemalloc`` peak).
"""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time
import tracemalloc
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

import tsblob
from tsblob import ProtocolError
from tsblob._common import MetaParser
from tsblob._framing import FrameParser

from bridge import Bridge, Loop

KiB = 1 << 10
MiB = 1 << 20
# The bounds, as documented (docs/python.md) and as the Rust client has them:
ERROR_BODY_MAX = 64 * KiB  # tsblob._common.ERROR_BODY_MAX; proto/src/outbound.rs ERROR_BODY_MAX
JSON_MAX = 64 * MiB  # tsblob._common.JSON_MAX; proto/src/client.rs JSON_MAX
MAX_META_LEN = 1 * MiB  # tsblob._framing.MAX_META_LEN; proto/src/framing.rs MAX_META_LEN
META_LINE_MAX = 2 * MiB  # tsblob._common.META_LINE_MAX
MAX_SKIPPED_LISTED = 1000  # tsblob._common.MAX_SKIPPED_LISTED; proto/src/client.rs MAX_SKIPPED_LISTED
PAUSE = 5.0
"""Seconds the server waits, once it has sent enough, for the client to give up."""
PIECE = 64 * KiB
FILLER = b"x" * PIECE
ZEROS = bytes(PIECE)
CHUNK_OF_FILLER = b"%x\r\n" % PIECE + FILLER + b"\r\n"
CHUNK_OF_ZEROS = b"%x\r\n" % PIECE + ZEROS + b"\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def head(status: str, content_type: str, length: Optional[int] = None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{framing}\r\n\r\n".encode()


class Script:
    """One answer: ``first`` (the head and the start of the body), then ``piece`` again and
    again. Once ``enough`` bytes of body are sent the server waits up to ``PAUSE`` for the
    client to close (sending ``trickle`` every 50 ms meanwhile, if given); a client still
    there gets pieces up to ``ceiling`` bytes of body, then ``last``."""

    def __init__(self, first: bytes, piece: bytes, enough: int, ceiling: int, last: bytes = b"",
                 trickle: bytes = b"", body_in_piece: int = PIECE) -> None:
        self.first = first
        self.piece = piece
        self.enough = enough
        self.ceiling = ceiling
        self.last = last
        self.trickle = trickle
        self.body_in_piece = body_in_piece  # (a chunk's framing is not body)


class Hostile:
    """A local HTTP/1.1 server answering every request with its :class:`Script`."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.sent: List[int] = []  # bytes sent on each connection, counted when it ended
        self.gave_up: List[bool] = []  # for each: the client closed it before the pause was over
        self.ended = threading.Semaphore(0)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        sent = 0
        gave_up = True  # until the pause is over: a close before then is the client giving up
        s = self.script
        try:
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    got = conn.recv(64 * KiB)
                    if not got:
                        return
                    request += got
                conn.sendall(s.first)
                sent = len(s.first)
                body = 0
                while body < s.enough:
                    conn.sendall(s.piece)
                    sent += len(s.piece)
                    body += s.body_in_piece
                if self._closed_within(conn, PAUSE):
                    return
                gave_up = False
                while body < s.ceiling:  # an unbounded client: it gets the rest, then the end
                    conn.sendall(s.piece)
                    sent += len(s.piece)
                    body += s.body_in_piece
                conn.sendall(s.last)
                sent += len(s.last)
                self._closed_within(conn, PAUSE)
        except OSError:  # the client closed the connection (reset) while we were sending
            pass
        finally:
            self.sent.append(sent)
            self.gave_up.append(gave_up)
            self.ended.release()

    def _closed_within(self, conn: socket.socket, seconds: float) -> bool:
        """True once the client closes ``conn`` (end of stream or reset) within ``seconds``."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if select.select([conn], [], [], min(left, 0.05))[0]:
                try:
                    if not conn.recv(64 * KiB):
                        return True
                except OSError:
                    return True
            elif self.script.trickle:
                try:
                    conn.sendall(self.script.trickle)
                except OSError:
                    return True

    def wait(self) -> Tuple[int, bool]:
        """(bytes sent, whether the client gave up during the pause) of the first connection."""
        assert self.ended.acquire(timeout=4 * PAUSE), "the connection did not end"
        return self.sent[0], self.gave_up[0]

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(params=["sync", "async"])
def make(request: pytest.FixtureRequest) -> Iterator[Callable[[Script], Tuple[tsblob.Client, Hostile]]]:
    """Starts a :class:`Hostile` server and makes a client of it (sync, or async bridged),
    without retries (each test sees one answer)."""
    servers: List[Hostile] = []
    clients: List[tsblob.Client] = []
    loop = Loop() if request.param == "async" else None

    def make(script: Script) -> Tuple[tsblob.Client, Hostile]:
        srv = Hostile(script)
        servers.append(srv)
        if loop is None:
            db = tsblob.Client(srv.url, retries=0, timeout=4 * PAUSE)
        else:
            db = Bridge(tsblob.AsyncClient(srv.url, retries=0, timeout=4 * PAUSE), loop)  # type: ignore[assignment]
        clients.append(db)
        return db, srv

    yield make
    for db in clients:
        db.close()
    for srv in servers:
        srv.close()
    if loop is not None:
        loop.stop()


def fails_bounded(call: Callable[[], Any]) -> Tuple[ProtocolError, float, int]:
    """(the ProtocolError ``call`` raised, seconds it took, peak of Python allocations)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        t0 = time.monotonic()
        with pytest.raises(ProtocolError) as info:
            call()
        took = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return info.value, took, peak


# -- answers read whole: JSON answers and error bodies -------------------------------------

CALLS: Dict[str, Callable[[Any], Any]] = {
    # an error answer read whole by the transport (request)
    "get_bucket": lambda db: db.get_bucket("b"),
    # an error answer to a streamed request, read whole to raise it (Stream.read)
    "query": lambda db: list(db.query("b", "e")),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_an_endless_error_body_was_read_whole(make: Any, call: str) -> None:
    """Bug "an endless error body is read whole": a 500 whose chunked body never ends was
    read to its end (never) into memory; now an error body is read up to ERROR_BODY_MAX
    (64 KiB, as the Rust CLI) and its connection closed."""
    db, srv = make(Script(head("500 Internal Server Error", "application/json"), CHUNK_OF_FILLER,
                          enough=2 * ERROR_BODY_MAX, ceiling=64 * MiB, last=b"0\r\n\r\n"))
    err, took, peak = fails_bounded(lambda: CALLS[call](db))
    assert "error answer (500)" in err.message and f"over {ERROR_BODY_MAX} bytes" in err.message, err
    sent, gave_up = srv.wait()
    assert gave_up and took < PAUSE, f"the client was still reading after {sent} bytes"
    assert sent < 2 * ERROR_BODY_MAX + 1024
    assert peak < 8 * MiB, f"the client's allocations peaked at {peak / MiB:.1f} MiB"


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_huge_error_content_length_was_waited_for(make: Any, call: str) -> None:
    """Bug "an endless error body is read whole": a 500 announcing Content-Length 10**12,
    then trickling filler, was read until the server stopped; now it is refused at once,
    from its head."""
    db, srv = make(Script(head("500 Internal Server Error", "application/json", 10 ** 12), b"", enough=0,
                          ceiling=0, trickle=b"x" * 1024))
    err, took, peak = fails_bounded(lambda: CALLS[call](db))
    assert f"over {ERROR_BODY_MAX} bytes" in err.message, err
    sent, gave_up = srv.wait()
    assert gave_up and took < PAUSE
    assert sent < 64 * KiB
    assert peak < 8 * MiB


def test_an_endless_json_answer_was_read_whole(make: Any) -> None:
    """Bug "an endless JSON answer is read whole": a 200 whose chunked body never ends was
    read into memory to its end; now a JSON answer is read up to JSON_MAX (64 MiB, the Rust
    client's) and its connection closed."""
    db, srv = make(Script(head("200 OK", "application/json"), CHUNK_OF_FILLER, enough=2 * JSON_MAX,
                          ceiling=2 * JSON_MAX + 16 * MiB, last=b"0\r\n\r\n"))
    err, took, peak = fails_bounded(db.list_buckets)
    assert "answer (200) to GET /api/v1/b" in err.message and f"over {JSON_MAX} bytes" in err.message, err
    sent, gave_up = srv.wait()
    assert gave_up and took < PAUSE, f"the client was still reading after {sent} bytes"
    assert sent < 2 * JSON_MAX + 1024
    # the answer up to the bound, and the transport's buffers: not the 144 MiB sent to an unbounded client
    assert peak < JSON_MAX + 16 * MiB, f"the client's allocations peaked at {peak / MiB:.1f} MiB"


def test_a_json_answer_of_a_terabyte_was_waited_for(make: Any) -> None:
    """Bug "an endless JSON answer is read whole": a 200 announcing Content-Length 10**12,
    followed by slow filler, was read as it came (the sync client even asked Python for a
    buffer of that size); now it is refused at once, from its head."""
    db, srv = make(Script(head("200 OK", "application/json", 10 ** 12), b"", enough=0, ceiling=0,
                          trickle=b"x" * 1024))
    err, took, peak = fails_bounded(db.list_buckets)
    assert f"over {JSON_MAX} bytes" in err.message, err
    sent, gave_up = srv.wait()
    assert gave_up and took < PAUSE
    assert sent < 64 * KiB
    assert peak < 8 * MiB


@pytest.mark.parametrize("chunked", [True, False])
def test_a_json_answer_under_the_bound_is_read_whole(make: Any, chunked: bool) -> None:
    """The bound changes nothing for an answer under it: 3 MiB of JSON, chunked or with a
    Content-Length, are read whole."""
    doc = json.dumps({"buckets": [{"name": f"b{i}", "pad": "p" * 3000} for i in range(1000)]}).encode()
    answer = (head("200 OK", "application/json") + chunk(doc[:MiB]) + chunk(doc[MiB:]) + b"0\r\n\r\n" if chunked
              else head("200 OK", "application/json", len(doc)) + doc)
    db, srv = make(Script(answer, b"", enough=-1, ceiling=0))
    assert [b.name for b in db.list_buckets()] == [f"b{i}" for i in range(1000)]


def test_a_record_read_whole_is_not_bounded_as_json_is(make: Any) -> None:
    """A record's payload is no JSON answer: ``read()`` takes one over JSON_MAX whole (it
    asked for it), and ``head()`` a record of 10**12 bytes (a HEAD answer's Content-Length
    is the record's; no body follows)."""
    size = JSON_MAX + 4 * MiB
    record = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nx-tsblob-ts: 7\r\n"
    db, _ = make(Script(f"{record}Content-Length: {size}\r\n\r\n".encode(), FILLER, enough=size, ceiling=0))
    rec = db.read("b", "e", 7)
    assert rec.timestamp == 7 and len(rec.data) == size
    db, _ = make(Script(f"{record}Content-Length: {10 ** 12}\r\n\r\n".encode(), b"", enough=-1, ceiling=0))
    info = db.head("b", "e", 7)
    assert info.timestamp == 7 and info.size == 10 ** 12


# -- query streams -------------------------------------------------------------------------

RECORDS = "application/x-tsblob-records"
FRAMES = {
    # a record frame: kind 1, ts, content type length 0, 1 label, labels length 0xFFFFFFFF, payload 0
    "labels": (struct.pack("<BQHHIQ", 1, 1, 0, 1, 0xFFFF_FFFF, 0), "labels length 4294967295"),
    "skipped": (struct.pack("<BI", 5, 0xFFFF_FFFF), "skipped frame of 4294967295 bytes"),
    "error": (struct.pack("<BI", 2, 0xFFFF_FFFF), "error frame of 4294967295 bytes"),
}


@pytest.mark.parametrize("frame", sorted(FRAMES))
def test_a_frame_announcing_4_gib_was_buffered(make: Any, frame: str) -> None:
    """Bug "a frame announcing 4 GiB is buffered": a query stream whose frame announces
    0xFFFFFFFF bytes of labels (or of a skipped or error frame's JSON), followed by zeros, was
    buffered up to 4 GiB before being parsed; now a length over MAX_META_LEN (1 MiB, the Rust
    decoder's) is refused as soon as it is read."""
    first, said = FRAMES[frame]
    db, srv = make(Script(head("200 OK", RECORDS) + chunk(first), CHUNK_OF_ZEROS, enough=2 * MAX_META_LEN,
                          ceiling=48 * MiB, last=b"0\r\n\r\n"))
    err, took, peak = fails_bounded(lambda: list(db.query("b", "e")))
    assert said in err.message and f"{MAX_META_LEN}-byte limit" in err.message, err
    sent, gave_up = srv.wait()
    assert gave_up and took < PAUSE, f"the client was still reading after {sent} bytes"
    assert peak < 8 * MiB, f"the client's allocations peaked at {peak / MiB:.1f} MiB"


def test_a_metadata_line_without_end_was_buffered(make: Any) -> None:
    """Bug "a metadata line without end is buffered": a meta=True query answered with bytes
    and never a line break grew the parser's line buffer without bound (copying it whole at
    each chunk); now a line over META_LINE_MAX (2 MiB) raises."""
    db, srv = make(Script(head("200 OK", "application/x-ndjson"), CHUNK_OF_FILLER, enough=2 * META_LINE_MAX,
                          ceiling=24 * MiB, last=b"0\r\n\r\n"))
    err, took, peak = fails_bounded(lambda: list(db.query("b", "e", meta=True)))
    assert f"over {META_LINE_MAX} bytes" in err.message, err
    sent, gave_up = srv.wait()
    assert gave_up and took < PAUSE, f"the client was still reading after {sent} bytes"
    assert peak < 16 * MiB, f"the client's allocations peaked at {peak / MiB:.1f} MiB"


def test_skipped_reports_grew_for_ever(make: Any) -> None:
    """Bug "skipped reports grow for ever": every skipped-record report of a query (a live
    tail sends one at each catch-up) was appended to ``skipped``; now at most 1000 stay
    listed in all (the Rust client's MAX_SKIPPED_LISTED) and ``skipped_count`` counts all."""
    reports = 30
    frames = []
    for n in range(reports):
        doc = json.dumps({"skipped": [{"ts": n * 1000 + i, "code": "corrupt_record"} for i in range(1000)],
                          "skipped_count": 1000}).encode()
        frames.append(struct.pack("<BI", 5, len(doc)) + doc)
    body = b"".join(frames) + struct.pack("<BQ", 0, 0)
    db, srv = make(Script(head("200 OK", RECORDS, len(body)) + body, b"", enough=-1, ceiling=0))
    it = db.query("b", "e")
    assert list(it) == []
    assert it.skipped_count == reports * 1000
    assert len(it.skipped) == MAX_SKIPPED_LISTED == 1000
    assert [s.ts for s in it.skipped] == list(range(1000))  # the first ones, in stream order
    assert it.skipped[0].code == "corrupt_record"


# -- the parsers alone -----------------------------------------------------------------------


def test_a_metadata_line_was_copied_whole_at_each_chunk() -> None:
    """Bug "a metadata line without end is buffered": each chunk copied the whole line
    buffer (quadratic: a 1.5 MiB line in 64-byte pieces copied some 18 GB); now only the new
    bytes are scanned for the line break."""
    line = json.dumps({"ts": 1, "size": 0, "content_type": "x", "labels": {"k": "v" * (3 * MiB // 2)}}).encode()
    p = MetaParser()
    t0 = time.monotonic()
    for at in range(0, len(line), 64):
        p.feed(line[at:at + 64])
    p.feed(b"\n")
    took = time.monotonic() - t0
    info = p.next_event()
    assert info is not None and info.timestamp == 1 and len(info.labels["k"]) == 3 * MiB // 2
    assert took < 1.0, f"{took:.2f} s to parse one line of 1.5 MiB"
    with pytest.raises(ProtocolError, match="over 2097152 bytes"):
        p.feed(b"y" * (META_LINE_MAX + 1))
    with pytest.raises(ProtocolError, match="over 2097152 bytes"):  # a whole line in one chunk
        MetaParser().feed(b"z" * (META_LINE_MAX + 1) + b"\n")


@pytest.mark.parametrize("frame", sorted(FRAMES))
def test_a_frame_length_over_the_limit_is_refused_before_its_bytes(frame: str) -> None:
    """Bug "a frame announcing 4 GiB is buffered": the decoder waited for the bytes a frame
    announced, however many; now it refuses a length over MAX_META_LEN from the frame's head,
    and takes one of MAX_META_LEN exactly."""
    first, said = FRAMES[frame]
    p = FrameParser(1 << 20)
    p.feed(first)
    with pytest.raises(ProtocolError, match=said):
        p.next_event()
    # a length of exactly the limit is waited for (the Rust rule: over it is refused)
    ok = bytearray(first)
    if frame == "labels":
        struct.pack_into("<I", ok, 13, MAX_META_LEN)
    else:
        struct.pack_into("<I", ok, 1, MAX_META_LEN)
    p = FrameParser(1 << 20)
    p.feed(bytes(ok))
    assert p.next_event() is None


def test_the_bounds_are_the_documented_ones() -> None:
    from tsblob import _common, _framing

    assert (_common.ERROR_BODY_MAX, _common.JSON_MAX, _framing.MAX_META_LEN, _common.META_LINE_MAX,
            _common.MAX_SKIPPED_LISTED) == (ERROR_BODY_MAX, JSON_MAX, MAX_META_LEN, META_LINE_MAX, MAX_SKIPPED_LISTED)


async def test_a_compressed_json_answer_was_inflated_whole() -> None:
    """Bug "an endless JSON answer is read whole" (async client: aiohttp asks for gzip and
    inflates it): 70 KiB of gzip with a Content-Length inflated to 70 MiB of answer; now the
    inflated bytes are counted against JSON_MAX."""
    import gzip

    bomb = gzip.compress(b" " * (JSON_MAX + 6 * MiB), 9)
    assert len(bomb) < 1 * MiB
    answer = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
              f"Content-Length: {len(bomb)}\r\n\r\n").encode() + bomb
    srv = Hostile(Script(answer, b"", enough=-1, ceiling=0))
    try:
        async with tsblob.AsyncClient(srv.url, retries=0, timeout=4 * PAUSE) as db:
            with pytest.raises(ProtocolError, match=f"over {JSON_MAX} bytes"):
                await db.list_buckets()
    finally:
        srv.close()
