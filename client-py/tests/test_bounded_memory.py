"""Large transfers keep client memory bounded: a 200 MB record streamed in and out, and a
query over 100,000 records, each measured with ``tracemalloc`` (peak of Python allocations,
which is where buffered payload bytes would live)."""

from __future__ import annotations

import hashlib
import tracemalloc
from typing import AsyncIterator, Callable, Iterator, TypeVar

import pytest

from tsblob import AsyncClient, Client

from conftest import Server

T0 = 1_600_000_000_000_000
MB = 1 << 20
BIG = 200 * MB
N_RECORDS = 100_000
# Far below the data moved (200 MB, or 100,000 x 1 KB = 100 MB) yet generous for the pools,
# buffers and objects the HTTP layers keep.
PEAK_LIMIT = 16 * MB

pytestmark = pytest.mark.slow
R = TypeVar("R")


def peak_of(fn: Callable[[], R]) -> "tuple[R, int]":
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak


def pattern_chunks(total: int, chunk: int = MB) -> Iterator[bytes]:
    """Distinct 1 MiB chunks (the chunk index is stamped in), so misordering is caught."""
    base = bytes(range(256)) * (chunk // 256)
    for i in range(total // chunk):
        yield i.to_bytes(8, "little") + base[8:]


def expected_digest(total: int) -> str:
    h = hashlib.sha256()
    for c in pattern_chunks(total):
        h.update(c)
    return h.hexdigest()


@pytest.fixture
def sync_client(server: Server) -> Iterator[Client]:
    """The sync client only: the async one has its own test below (async uploads)."""
    with server.client() as db:
        yield db


def test_200mb_record_streams_in_and_out_sync(sync_client: Client, bucket: str) -> None:
    client = sync_client
    ts, peak_in = peak_of(lambda: client.write(bucket, "big", pattern_chunks(BIG), ts=T0, size=BIG))
    assert ts == T0
    assert peak_in < PEAK_LIMIT, f"writing 200 MB peaked at {peak_in / MB:.1f} MB"

    def read_back() -> "tuple[str, int]":
        h = hashlib.sha256()
        n = 0
        with client.read_stream(bucket, "big", T0) as rec:
            assert rec.size == BIG
            for chunk in rec.iter_chunks():
                h.update(chunk)
                n += len(chunk)
        return h.hexdigest(), n

    (digest, n), peak_out = peak_of(read_back)
    assert n == BIG and digest == expected_digest(BIG)
    assert peak_out < PEAK_LIMIT, f"reading 200 MB peaked at {peak_out / MB:.1f} MB"
    print(f"\n200 MB record, sync: write peak {peak_in / MB:.2f} MB, read_stream peak {peak_out / MB:.2f} MB")

    # The same record as a query item is streamed too (it is above eager_limit).
    def query_back() -> int:
        total = 0
        for rec in client.query(bucket, "big"):
            assert not rec.loaded
            total += sum(len(c) for c in rec.iter_chunks())
        return total

    total, peak_q = peak_of(query_back)
    assert total == BIG and peak_q < PEAK_LIMIT, f"query of 200 MB peaked at {peak_q / MB:.1f} MB"
    print(f"200 MB record as a query item, sync: peak {peak_q / MB:.2f} MB")


async def test_200mb_record_streams_in_and_out_async(aclient: AsyncClient, bucket: str) -> None:
    async def agen() -> "AsyncIterator[bytes]":
        for c in pattern_chunks(BIG):
            yield c

    tracemalloc.start()
    try:
        assert await aclient.write(bucket, "big", agen(), ts=T0) == T0
        _, peak_in = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        h = hashlib.sha256()
        async with aclient.read_stream(bucket, "big", T0) as rec:
            async for chunk in rec.aiter_chunks():
                h.update(chunk)
        _, peak_out = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert h.hexdigest() == expected_digest(BIG)
    assert peak_in < PEAK_LIMIT and peak_out < PEAK_LIMIT, (peak_in / MB, peak_out / MB)
    print(f"\n200 MB record, async: write peak {peak_in / MB:.2f} MB, read_stream peak {peak_out / MB:.2f} MB")


def records(n: int) -> Iterator["tuple[int, bytes, dict]"]:
    for i in range(n):
        yield (T0 + i, i.to_bytes(4, "little") * 256, {"n": str(i % 10)})


def test_query_100k_records_bounded_memory(server: Server, bucket: str) -> None:
    # The sync client (the async one: below); not through the test bridge, whose thread hop
    # per record under tracemalloc would take a minute.
    client = server.client()
    res, peak_w = peak_of(lambda: client.write_batch(bucket, "many", records(N_RECORDS)))
    assert res.written == N_RECORDS and res.failed == 0
    # The batch writer holds one request body (8 MiB by default) plus the results list.
    assert peak_w < PEAK_LIMIT + 2 * 8 * MB, f"write_batch peaked at {peak_w / MB:.1f} MB"

    def iterate() -> int:
        count = 0
        for rec in client.query(bucket, "many"):
            assert rec.timestamp == T0 + count
            assert rec.data[:4] == count.to_bytes(4, "little") and rec.size == 1024
            count += 1
        return count

    count, peak = peak_of(iterate)
    assert count == N_RECORDS
    assert peak < PEAK_LIMIT, f"iterating 100,000 records (100 MB) peaked at {peak / MB:.1f} MB"
    client.close()
    print(f"\n100,000 x 1 KB, sync: write_batch peak {peak_w / MB:.2f} MB, query peak {peak / MB:.2f} MB")


async def test_query_100k_records_bounded_memory_async(server: Server, bucket: str) -> None:
    async with AsyncClient(server.url) as db:
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            res = await db.write_batch(bucket, "many", records(N_RECORDS))
            _, peak_w = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            count = 0
            async for rec in db.query(bucket, "many", eq={"n": "3"}):
                assert rec.timestamp == T0 + 3 + 10 * count
                count += 1
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert res.written == N_RECORDS
    # One request body (8 MiB), a copy of it in aiohttp and one in asyncio's transport buffer
    # (what the socket did not take at once), the results list.
    assert peak_w < PEAK_LIMIT + 4 * 8 * MB, f"write_batch peaked at {peak_w / MB:.1f} MB"
    assert count == N_RECORDS // 10
    assert peak < PEAK_LIMIT, peak / MB
    print(f"\n100,000 x 1 KB, async: write_batch peak {peak_w / MB:.2f} MB, "
          f"filtered query (10,000 match) peak {peak / MB:.2f} MB")
