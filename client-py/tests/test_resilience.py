"""Retries and resumed queries, against real network faults: a TCP proxy (proxy.py) between
the client and a real ``tsblob serve`` drops connections mid-stream, loses answers after the
server processed the request, and answers 503 itself. Every test runs with both clients."""

from __future__ import annotations

import time
from typing import Callable, List, Tuple

import pytest

import tsblob
from tsblob import Client, Retry

from proxy import Cut, LoseAnswer, Proxy, Refuse, Status

T0 = 1_700_000_000_000_000
FAST = Retry(attempts=3, backoff=0.01)


def test_a_query_resumes_after_cut_connections(make_client: Callable[..., Client], client: Client, bucket: str,
                                               proxy: Proxy) -> None:
    client.write_batch(bucket, "cam", [(T0 + i, b"%05d" % i * 200, {"i": str(i)}) for i in range(300)])
    # The stream of 300 records of 1 KB is cut twice, each time in the middle of a record.
    proxy.plan(Cut(100_003), Cut(150_017))
    db = make_client(proxy.url, retries=FAST)
    got = [(r.timestamp, r.data[:5], r.labels["i"]) for r in db.query(bucket, "cam")]
    assert got == [(T0 + i, b"%05d" % i, str(i)) for i in range(300)]  # each once, in order
    assert proxy.connections == 3


def test_a_newest_first_query_with_a_limit_resumes(make_client: Callable[..., Client], client: Client,
                                                   bucket: str, proxy: Proxy) -> None:
    client.write_batch(bucket, "cam", [(T0 + i, b"x" * 1000) for i in range(300)])
    proxy.plan(Cut(60_000))
    db = make_client(proxy.url, retries=FAST)
    got = [r.timestamp - T0 for r in db.query(bucket, "cam", start=T0 + 10, desc=True, limit=250)]
    assert got == list(range(299, 49, -1))
    assert proxy.connections == 2


def test_a_multi_entry_query_resumes_inside_ties(make_client: Callable[..., Client], client: Client,
                                                 bucket: str, proxy: Proxy) -> None:
    """Three entries with the same 150 timestamps: a cut falls between records of one
    timestamp, and the resumed query must hand out the rest of that timestamp only."""
    for e in ("a", "b", "c"):
        client.write_batch(bucket, e, [(T0 + i, e.encode() * 500) for i in range(150)])
    proxy.plan(Cut(70_001), Cut(50_007), Cut(40_111))
    db = make_client(proxy.url, retries=FAST)
    got: List[Tuple[str, int]] = [(r.entry, r.timestamp - T0) for r in db.query(bucket, entries=["*"])]
    assert got == [(e, i) for i in range(150) for e in ("a", "b", "c")]
    assert proxy.connections == 4
    # meta=True (NDJSON) resumes too.
    proxy.plan(Cut(9_000))
    infos = [(i.entry, i.timestamp - T0) for i in db.query(bucket, entries=["*"], meta=True)]
    assert infos == got


def test_a_query_reopens_after_a_gateway_error(make_client: Callable[..., Client], client: Client, bucket: str,
                                              proxy: Proxy) -> None:
    client.write_batch(bucket, "cam", [(T0 + i, b"x" * 1000) for i in range(50)])
    proxy.plan(Status(503), Cut(20_000), Status(504))
    got = [r.timestamp - T0 for r in make_client(proxy.url, retries=FAST).query(bucket, "cam")]
    assert got == list(range(50)) and proxy.connections == 4


def test_a_query_gives_up_after_its_retries(make_client: Callable[..., Client], client: Client, bucket: str,
                                            proxy: Proxy) -> None:
    client.write_batch(bucket, "cam", [(T0 + i, b"x" * 1000) for i in range(100)])
    proxy.plan(Cut(20_000), Cut(100), Cut(100))
    db = make_client(proxy.url, retries=Retry(attempts=1, backoff=0.01))
    seen = []
    with pytest.raises((tsblob.TransportError, tsblob.ProtocolError)) as e:
        for r in db.query(bucket, "cam"):
            seen.append(r.timestamp)
    assert e.value.attempts == 1 and len(seen) < 100
    # retries=0: the first cut ends it.
    proxy.plan(Cut(20_000))
    with pytest.raises((tsblob.TransportError, tsblob.ProtocolError)):
        list(make_client(proxy.url, retries=0).query(bucket, "cam"))


def test_a_query_with_when_does_not_resume_once_started(make_client: Callable[..., Client], client: Client,
                                                       bucket: str, proxy: Proxy) -> None:
    """Its aggregations (``$each_n``...) would start over: handing out a different stream."""
    client.write_batch(bucket, "cam", [(T0 + i, b"x" * 1000) for i in range(100)])
    proxy.plan(Cut(20_000))
    db = make_client(proxy.url, retries=FAST)
    with pytest.raises((tsblob.TransportError, tsblob.ProtocolError)):
        list(db.query(bucket, "cam", when={"$each_n": 2}))


def test_idempotent_calls_retry_on_gateway_errors_and_resets(make_client: Callable[..., Client], client: Client,
                                                             bucket: str, proxy: Proxy) -> None:
    client.write(bucket, "cam", b"hello", ts=T0)
    proxy.plan(Status(503), Refuse(), Status(502))
    db = make_client(proxy.url, retries=Retry(attempts=3, backoff=0.05))
    start = time.monotonic()
    assert db.read(bucket, "cam", T0).data == b"hello"
    # Waits of 0.05, 0.1 (and 0.2) s, each drawn in its upper half. (aiohttp itself sends a
    # GET again at once after a reset, so the async client may wait only twice.)
    assert time.monotonic() - start >= 0.075
    assert proxy.connections == 4
    proxy.plan(Status(504), Status(504))
    with pytest.raises(tsblob.ServerError) as e:
        make_client(proxy.url, retries=Retry(attempts=1, backoff=0.01)).head(bucket, "cam", T0)
    assert e.value.status == 504 and e.value.attempts == 1
    proxy.plan(Status(503))
    with pytest.raises(tsblob.ServerError):  # retries=0: sent once
        make_client(proxy.url, retries=0).get_entry(bucket, "cam")


def test_a_write_with_a_timestamp_whose_answer_was_lost_succeeds(make_client: Callable[..., Client],
                                                                 client: Client, bucket: str, proxy: Proxy) -> None:
    """The server stores the record, the answer is lost, the retry meets 409: the stored
    record has the same CRC, so the write succeeded."""
    db = make_client(proxy.url, retries=FAST)
    proxy.plan(LoseAnswer())
    assert db.write(bucket, "cam", b"frame-1" * 1000, ts=T0) == T0
    assert proxy.connections >= 2
    assert client.read(bucket, "cam", T0).data == b"frame-1" * 1000
    assert client.get_entry(bucket, "cam").record_count == 1
    # A different record at that timestamp is a real conflict, retry or not.
    proxy.plan(LoseAnswer())
    with pytest.raises(tsblob.TimestampExists) as e:
        make_client(proxy.url, retries=FAST).write(bucket, "cam", b"frame-2" * 1000, ts=T0)
    assert e.value.attempts == 1
    # The same payload written again without a lost answer is a conflict too (no retry).
    with pytest.raises(tsblob.TimestampExists):
        db.write(bucket, "cam", b"frame-1" * 1000, ts=T0)


def test_a_batch_whose_answer_was_lost_succeeds(make_client: Callable[..., Client], client: Client, bucket: str,
                                                proxy: Proxy) -> None:
    client.write(bucket, "cam", b"other", ts=T0 + 5)  # a real conflict inside the batch
    db = make_client(proxy.url, retries=FAST)
    proxy.plan(LoseAnswer())
    res = db.write_batch(bucket, "cam", [(T0 + i, b"r%d" % i) for i in range(10)], raise_errors=False)
    assert (res.written, res.failed) == (9, 1)
    assert [r.ok for r in res.results] == [i != 5 for i in range(10)]
    assert isinstance(res.results[5].error, tsblob.TimestampExists)
    assert [r.data for r in client.query(bucket, "cam")] == [b"other" if i == 5 else b"r%d" % i for i in range(10)]


def test_non_idempotent_calls_are_not_retried(make_client: Callable[..., Client], client: Client, bucket: str,
                                              proxy: Proxy) -> None:
    db = make_client(proxy.url, retries=FAST)
    proxy.plan(LoseAnswer())
    with pytest.raises(tsblob.TransportError) as e:
        db.write(bucket, "cam", b"no ts: the server picks it")  # sent again, it would be stored twice
    assert e.value.attempts == 0 and proxy.connections == 1
    assert client.get_entry(bucket, "cam").record_count == 1
    proxy.plan(LoseAnswer())
    with pytest.raises(tsblob.TransportError):
        db.write(bucket, "cam", iter([b"streamed ", b"payload"]), ts=T0)  # cannot be sent again
    proxy.plan(Status(503))
    with pytest.raises(tsblob.ServerError):
        db.remove(bucket, "cam", T0)
