"""What only ``AsyncClient`` has: async iterators as uploads, ``await record.read()`` for a
streamed payload (``data`` refuses to block), ``async with``/``async for``, and tasks
sharing one client. Everything else runs against both clients in test_client.py and the
other files (the ``client`` fixture)."""

from __future__ import annotations

import asyncio
import io
from typing import AsyncIterator

import pytest

import tsblob
from tsblob import AsyncClient

T0 = 1_700_000_000_000_000


async def test_write_streams(aclient: AsyncClient, bucket: str) -> None:
    payload = bytes(range(256)) * 4000

    async def agen() -> AsyncIterator[bytes]:
        for i in range(0, len(payload), 10_000):
            await asyncio.sleep(0)
            yield payload[i:i + 10_000]

    t1 = await aclient.write(bucket, "s", agen(), ts=T0)
    t2 = await aclient.write(bucket, "s", io.BytesIO(payload), ts=T0 + 1)
    t3 = await aclient.write(bucket, "s", [payload[:5], payload[5:]], ts=T0 + 2, size=len(payload))
    for t in (t1, t2, t3):
        assert (await aclient.read(bucket, "s", t)).data == payload
    async with aclient.read_stream(bucket, "s", T0) as rec:
        assert rec.size == len(payload) and not rec.loaded
        with pytest.raises(tsblob.TsblobError, match="await record.read"):
            rec.data
        assert b"".join([c async for c in rec.aiter_chunks()]) == payload


async def test_query_streams_large_records(bucket: str, server) -> None:  # type: ignore[no-untyped-def]
    async with AsyncClient(server.url, eager_limit=100) as db:
        for i in range(3):
            await db.write(bucket, "big", bytes([i]) * 200_000, ts=T0 + i)
        sizes = []
        async for rec in db.query(bucket, "big"):
            if rec.timestamp == T0 + 1:
                sizes.append(len(await rec.read()))
            elif rec.timestamp == T0 + 2:
                sizes.append(sum([len(c) async for c in rec.aiter_chunks()]))
            else:
                sizes.append(-1)  # left unread: skipped by the iterator
        assert sizes == [-1, 200_000, 200_000]


async def test_concurrent_writes_share_one_client(aclient: AsyncClient, bucket: str) -> None:
    ts = await asyncio.gather(*(aclient.write(bucket, "c", b"%d" % i, ts=T0 + i) for i in range(50)))
    assert sorted(ts) == [T0 + i for i in range(50)]
    assert len([r async for r in aclient.query(bucket, "c")]) == 50


async def test_async_write_went_to_a_thread_twice_per_request_for_proxy_and_netrc(aclient: AsyncClient,
                                                                                   bucket: str) -> None:
    """Regression (issue 30): aiohttp's ``trust_env=True`` looked the proxy variables and the
    netrc file up again for every request, each in a trip to a thread pool (two per write).
    The client reads them once, when its session opens: a write runs on the event loop alone."""
    await aclient.write(bucket, "env", b"first", ts=T0)  # opens the session
    loop = asyncio.get_running_loop()
    calls = []
    real = loop.run_in_executor

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args)
        return real(*args, **kwargs)

    loop.run_in_executor = counting  # type: ignore[method-assign]
    try:
        for i in range(1, 6):
            await aclient.write(bucket, "env", b"x" * 100, ts=T0 + i)
        assert [r.data async for r in aclient.query(bucket, "env", start=T0 + 1)] == [b"x" * 100] * 5
    finally:
        del loop.run_in_executor
    assert calls == []


async def test_async_large_write_copied_the_whole_body(aclient: AsyncClient, bucket: str) -> None:
    """Regression (issue 30): aiohttp joined the request's head to a bytes body (a fresh
    buffer of the body's size) and asyncio copied what the socket did not take at once into
    its own buffer. A 10 MB write now allocates far less than its body (traced by
    ``tracemalloc``: the old path peaked above 10 MB), and the record arrives intact,
    whatever the buffer type."""
    import array
    import tracemalloc

    body = bytes(range(251)) * 39_841  # 9,999,991 B
    ints = array.array("q", range(1_250_000))  # 10 MB of 8-byte items
    await aclient.write(bucket, "big", b"warm", ts=T0)  # the session and its connection
    for i, (data, want) in enumerate([(body, body), (bytearray(body), body), (memoryview(body)[3:], body[3:]),
                                      (memoryview(ints), ints.tobytes())], start=1):
        tracemalloc.start()
        try:
            await aclient.write(bucket, "big", data, ts=T0 + i)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4_000_000, (i, peak)
        rec = await aclient.read(bucket, "big", T0 + i)
        assert rec.size == len(want) and rec.data == want, i
