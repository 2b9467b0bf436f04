"""Conditional queries (``when``), ``meta=True`` and ``remove_query`` against a real
``tsblob serve``, with ``Client`` and ``AsyncClient``."""

from __future__ import annotations

from typing import List

import pytest

import tsblob
from tsblob import AsyncClient, Client

T0 = 1_700_000_000_000_000


def seed(client: Client, bucket: str, entry: str, n: int = 30) -> None:
    client.write_batch(bucket, entry, [
        (T0 + i * 1000, f"p{i}".encode(), {"n": str(i), "cam": "abc"[i % 3]}) for i in range(n)
    ])


def rel(ts: List[int]) -> List[int]:
    return [(t - T0) // 1000 for t in ts]


def test_query_when(client: Client, bucket: str) -> None:
    seed(client, bucket, "w")
    got = list(client.query(bucket, "w", when={"&n": {"$gte": 25}}))
    assert rel([r.timestamp for r in got]) == [25, 26, 27, 28, 29]
    assert got[0].data == b"p25"
    q = {"&cam": {"$in": ["a", "c"]}, "&n": {"$lt": 7}}
    assert rel([r.timestamp for r in client.query(bucket, "w", when=q)]) == [0, 2, 3, 5, 6]
    # with the other filters and ReductStore's aggregation operators
    assert rel([r.timestamp for r in client.query(bucket, "w", when={"$each_n": 10})]) == [9, 19, 29]
    assert rel([r.timestamp for r in client.query(bucket, "w", when={"$each_t": "10ms"}, desc=True,
                                                   eq={"cam": "a"})]) == [15, 3]
    assert rel([r.timestamp for r in client.query(bucket, "w", when={"&n": {"$gt": 3}, "$limit": 2})]) == [4, 5]


def test_query_meta_and_errors(client: Client, bucket: str) -> None:
    seed(client, bucket, "m", 12)
    metas = list(client.query(bucket, "m", when={"&n": {"$gte": 10}}, meta=True))
    assert [type(m) for m in metas] == [tsblob.RecordInfo, tsblob.RecordInfo]
    assert metas[0] == tsblob.RecordInfo(T0 + 10_000, "application/octet-stream", {"n": "10", "cam": "b"}, 3)
    assert len(list(client.query(bucket, "m", meta=True))) == 12
    with pytest.raises(tsblob.BadRequest, match=r"\$regex"):
        list(client.query(bucket, "m", when={"&n": {"$regex": "1"}}))
    with pytest.raises(tsblob.InvalidInput):
        list(client.query(bucket, "m", when="not a dict"))  # type: ignore[arg-type]
    client.write(bucket, "m", b"x", ts=T0 + 50_000)
    # strict: before any record, a status; after records, the error at the end of the stream
    with pytest.raises(tsblob.InvalidInput, match="cam"):
        list(client.query(bucket, "m", start=T0 + 40_000, when={"&cam": {"$eq": "a"}}, strict=True))
    seen = []
    with pytest.raises(tsblob.InvalidInput, match="cam"):
        for m in client.query(bucket, "m", when={"&cam": {"$eq": "a"}}, strict=True, meta=True):
            seen.append(m.timestamp)
    assert rel(seen) == [0, 3, 6, 9]
    # not strict: the unlabelled record does not match
    assert len(list(client.query(bucket, "m", when={"&cam": {"$eq": "a"}}, meta=True))) == 4


def test_remove_query(client: Client, bucket: str) -> None:
    seed(client, bucket, "r")
    assert client.remove_query(bucket, "r", when={"&cam": {"$eq": "b"}}, start=T0 + 3000, stop=T0 + 27_000) == 8
    assert client.remove_query(bucket, "r", when={"&cam": {"$eq": "a"}}, limit=2) == 2
    left = rel([m.timestamp for m in client.query(bucket, "r", meta=True)])
    assert len(left) == 20 and 1 in left and 4 not in left and 0 not in left
    assert client.remove_query(bucket, "r") == 20


async def test_async_when_meta_and_remove(aclient: AsyncClient, client: Client, bucket: str) -> None:
    seed(client, bucket, "a")
    got = [r async for r in aclient.query(bucket, "a", when={"&n": {"$gte": 27}})]
    assert rel([r.timestamp for r in got]) == [27, 28, 29]
    assert got[0].data == b"p27"
    metas = [m async for m in aclient.query(bucket, "a", when={"&cam": {"$eq": "c"}}, meta=True, limit=3)]
    assert rel([m.timestamp for m in metas]) == [2, 5, 8]
    assert metas[0].labels == {"n": "2", "cam": "c"}
    assert await aclient.remove_query(bucket, "a", when={"&n": {"$lt": 10}}) == 10
    assert len([m async for m in aclient.query(bucket, "a", meta=True)]) == 20
    with pytest.raises(tsblob.BadRequest, match="needs an operator"):
        [m async for m in aclient.query(bucket, "a", when={"&n": 1}, meta=True)]
