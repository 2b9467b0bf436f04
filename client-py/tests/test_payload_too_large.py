"""A body over the server's ``--max-body`` reports the server's 413, whatever its size and shape.

The bug pinned here (docs/benchmarks/python-2026-11-26b.md, "a 413 lost by the async
client"): an ``AsyncClient.write`` of 200,000 bytes to a server with ``--max-body 64KiB``
raised ``TransportError("Can not write request body")``: the head and the first 16 KiB went
out, the rest was handed to the transport, the server answered 413 and closed, the send
failed and the answer already received was never read. Every size around the client's
thresholds (``_aio.LARGE_BODY`` 64 KiB, ``HEAD_PIECE`` 16 KiB, ``BODY_PIECE`` 1 MiB) and
every body kind ``write`` takes must give ``PayloadTooLarge`` with the server's message, in
both clients, and the client must keep working afterwards.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Dict, Iterator

import pytest

import tsblob
from tsblob import AsyncClient, Client

from conftest import Server

LIMIT = 64 << 10
SIZES = [LIMIT + 1, 100_000, 200_000, 1_000_000, 3_000_000]


@pytest.fixture(scope="module")
def small_limit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("max-body-64k") / "data", ["--max-body", "64KiB"]).start()
    yield srv
    srv.stop()


def _chunks(data: bytes, size: int = 8192) -> Iterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at:at + size]


async def _achunks(data: bytes) -> AsyncIterator[bytes]:
    for chunk in _chunks(data):
        yield chunk


def _file(data: bytes, tmp: Path) -> Any:
    path = tmp / "body.bin"
    path.write_bytes(data)
    return open(path, "rb")


# (body, the size= to pass) for each kind of body write() takes
KINDS: Dict[str, Callable[[bytes, Path], Any]] = {
    "bytes": lambda d, _: (d, None),
    "bytearray": lambda d, _: (bytearray(d), None),
    "memoryview": lambda d, _: (memoryview(d), None),
    "memoryview-of-u32": lambda d, _: (memoryview(bytearray(d + bytes(-len(d) % 4))).cast("I"), None),
    "bytesio": lambda d, _: (io.BytesIO(d), None),
    "file": lambda d, tmp: (_file(d, tmp), None),
    "generator-sized": lambda d, _: (_chunks(d), len(d)),
    "generator-chunked": lambda d, _: (_chunks(d), None),
}
ASYNC_KINDS: Dict[str, Callable[[bytes, Path], Any]] = {
    **KINDS,
    "async-generator-sized": lambda d, _: (_achunks(d), len(d)),
    "async-generator-chunked": lambda d, _: (_achunks(d), None),
}


def _check(e: tsblob.PayloadTooLarge) -> None:
    assert e.status == 413 and e.code == "payload_too_large", (e.status, e.code)
    assert e.message and "Can not write" not in e.message, e.message


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", list(ASYNC_KINDS))
async def test_async_write_over_max_body_reports_413_not_a_transport_error(
        small_limit_server: Server, tmp_path: Path, kind: str, size: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    body, length = ASYNC_KINDS[kind](data[:size], tmp_path)
    async with AsyncClient(small_limit_server.url) as db:
        await db.create_bucket("a413", exist_ok=True)
        try:
            with pytest.raises(tsblob.PayloadTooLarge) as e:
                await db.write("a413", "e", body, ts=1_650_000_000_000_000 + size, size=length)
        finally:
            if hasattr(body, "close"):
                body.close()
        _check(e.value)
        assert await db.write("a413", "e", b"still works") > 0  # the client recovers


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", list(KINDS))
def test_sync_write_over_max_body_reports_413_not_a_transport_error(
        small_limit_server: Server, tmp_path: Path, kind: str, size: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    body, length = KINDS[kind](data[:size], tmp_path)
    with Client(small_limit_server.url) as db:
        db.create_bucket("s413", exist_ok=True)
        try:
            with pytest.raises(tsblob.PayloadTooLarge) as e:
                db.write("s413", "e", body, ts=1_650_000_000_000_000 + size, size=length)
        finally:
            if hasattr(body, "close"):
                body.close()
        _check(e.value)
        assert db.write("s413", "e", b"still works") > 0  # the client recovers
