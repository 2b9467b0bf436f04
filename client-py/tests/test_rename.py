"""Renaming entries and buckets (issue 28), with both clients: ReductStore's ``PUT …/rename``.
Records stay under the new name; a taken name is a :class:`Conflict`; the old name is gone."""

from __future__ import annotations

import pytest

import tsblob
from tsblob import Client

T0 = 1_700_000_000_000_000


def test_rename_entry_and_bucket_keep_records(client: Client, bucket: str) -> None:
    b = client.bucket(bucket)
    b.entry("cam/front").write_batch([(T0 + i, b"x%d" % i, {"i": str(i)}) for i in range(5)])
    b.entry("imu").write(b"i", T0)
    info = client.rename_entry(bucket, "cam/front", "cam/left")
    assert (info.name, info.record_count) == ("cam/left", 5)
    assert b.entry("cam/left").read(T0 + 3).data == b"x3"
    assert b.entry("cam/left").read(T0 + 3).labels == {"i": "3"}
    with pytest.raises(tsblob.EntryNotFound):
        b.entry("cam/front").info()
    with pytest.raises(tsblob.Conflict):
        b.rename_entry("cam/left", "imu")
    with pytest.raises(tsblob.InvalidInput):
        b.rename_entry("cam/left", "cam/rename")

    new = bucket + "-renamed"
    renamed = client.rename_bucket(bucket, new)
    assert renamed.name == new
    assert {e.name for e in renamed.entries} == {"cam/left", "imu"}
    assert client.bucket(new).entry("imu").read(T0).data == b"i"
    with pytest.raises(tsblob.BucketNotFound):
        client.get_bucket(bucket)
    client.create_bucket(bucket)
    with pytest.raises(tsblob.BucketExists):
        client.rename_bucket(new, bucket)
    client.remove_bucket(bucket)
    client.rename_bucket(new, bucket)  # back, for the fixture's clean-up
