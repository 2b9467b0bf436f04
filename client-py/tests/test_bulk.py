"""Label updates and removals of many records in one request (issue 28: ReductStore's batch
label updates and batch removes), through both clients: ``update_labels_where`` (one query),
``update_labels_batch`` and ``remove_batch`` (a list of timestamps, each answered alone)."""

from __future__ import annotations

import pytest

import tsblob
from tsblob import Client

T0 = 1_700_000_000_000_000


def _write(client: Client, bucket: str, n: int = 10) -> None:
    client.bucket(bucket).entry("cam").write_batch(
        [(T0 + i, b"x%d" % i, {"i": str(i), "side": "left" if i % 2 else "right"}) for i in range(n)])


def _labels(client: Client, bucket: str) -> dict:
    return {r.ts - T0: r.labels for r in client.query(bucket, "cam", meta=True)}


def test_update_labels_where_changes_only_the_selection(client: Client, bucket: str) -> None:
    _write(client, bucket)
    n = client.update_labels_where(bucket, "cam", {"reviewed": "yes", "side": None},
                                   start=T0 + 2, stop=T0 + 9, when={"&side": {"$eq": "left"}}, limit=2)
    assert n == 2
    labels = _labels(client, bucket)
    assert labels[3] == {"i": "3", "reviewed": "yes"}
    assert labels[5] == {"i": "5", "reviewed": "yes"}
    # Outside the range, not matching, or past the limit: untouched.
    for i in (1, 2, 4, 7, 9):
        assert "reviewed" not in labels[i] and "side" in labels[i], (i, labels[i])
    # The condition saw the labels before the update: a second pass finds the rest.
    assert client.update_labels_where(bucket, "cam", {"reviewed": "yes"}, when={"&side": {"$eq": "left"}}) == 3


def test_update_labels_where_refuses_an_empty_change(client: Client, bucket: str) -> None:
    _write(client, bucket, 2)
    with pytest.raises(tsblob.BadRequest, match="labels is empty"):
        client.update_labels_where(bucket, "cam", {})
    with pytest.raises(tsblob.InvalidInput):
        client.update_labels_where(bucket, "cam", {"k": "v"}, limit=-1)


def test_update_labels_batch_answers_each_record(client: Client, bucket: str) -> None:
    _write(client, bucket, 4)
    result = client.update_labels_batch(bucket, "cam", {T0: {"a": "1"}, T0 + 2: {"i": None}},
                                        raise_errors=False)
    assert (result.written, result.failed) == (2, 0)
    labels = _labels(client, bucket)
    assert labels[0] == {"i": "0", "side": "right", "a": "1"}
    assert labels[2] == {"side": "right"}
    # A missing record fails alone; the others are still updated.
    with pytest.raises(tsblob.BatchError) as err:
        client.update_labels_batch(bucket, "cam", {T0 + 1: {"b": "2"}, T0 + 999: {"b": "2"}})
    failed = err.value.result.errors
    assert [(r.ts, r.status) for r in failed] == [(T0 + 999, 404)]
    assert _labels(client, bucket)[1]["b"] == "2"


def test_remove_batch_removes_only_the_listed_records(client: Client, bucket: str) -> None:
    _write(client, bucket, 5)
    result = client.remove_batch(bucket, "cam", [T0 + 1, T0 + 3, T0 + 77], raise_errors=False)
    assert (result.written, result.failed) == (2, 1)
    assert [r.status for r in result.results] == [200, 200, 404]
    assert sorted(_labels(client, bucket)) == [0, 2, 4]
    # Removed records stay removed: removing them again is a 404 each.
    again = client.remove_batch(bucket, "cam", [T0 + 1], raise_errors=False)
    assert [r.status for r in again.results] == [404]
