"""histogram(): counts and bytes per time step, against a real server (sync and async)."""

from __future__ import annotations

from datetime import timedelta

import pytest

import tsblob
from tsblob import AsyncClient, Client

pytestmark = pytest.mark.server

BASE = 1_700_000_000_000_000


def fill(client: Client, bucket: str) -> None:
    # 10 records in the first second, 5 in the third, payloads of 100 bytes.
    client.write_batch(bucket, "cam", [(BASE + i * 100_000, b"x" * 100) for i in range(10)])
    client.write_batch(bucket, "cam", [(BASE + 2_000_000 + i * 1000, b"y" * 100) for i in range(5)])


def test_histogram_per_step(client: Client, bucket: str) -> None:
    fill(client, bucket)
    h = client.histogram(bucket, "cam", start=BASE, stop=BASE + 3_000_000, step=timedelta(seconds=1))
    assert (h.start, h.stop, h.step) == (BASE, BASE + 3_000_000, 1_000_000)
    assert h.counts == [10, 0, 5]
    assert h.bytes == [1000, 0, 500]
    assert h.total == 15 and h.truncated_at is None
    assert list(h.steps())[2] == (BASE + 2_000_000, 5, 500)

    # Defaults: the whole entry (oldest to latest + 1) in about 200 steps.
    h = client.histogram(bucket, "cam")
    assert h.start == BASE and h.stop == BASE + 2_004_001
    assert len(h.counts) == 200 and h.total == 15

    with pytest.raises(tsblob.BadRequest):
        client.histogram(bucket, "cam", start=0, stop=BASE, step=1)
    with pytest.raises(tsblob.InvalidInput):
        client.histogram(bucket, "cam", step=0)
    with pytest.raises(tsblob.EntryNotFound):
        client.histogram(bucket, "nope")


async def test_histogram_async(aclient: AsyncClient, client: Client, bucket: str) -> None:
    fill(client, bucket)
    h = await aclient.histogram(bucket, "cam", start=BASE, stop=BASE + 3_000_000, step=1_000_000)
    assert h.counts == [10, 0, 5]
    assert (await aclient.histogram(bucket, "cam")).total == 15
