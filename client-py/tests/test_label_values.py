"""One rule for label values (issue 31): ``True`` is stored as ``true`` by writes, batches
and label updates, and ``eq=``, ``ne=`` and ``when`` constants select the same records."""

from __future__ import annotations

import pytest

import tsblob
from tsblob import Client

T0 = 1_700_000_000_000_000


def test_a_bool_label_was_stored_as_True_and_eq_and_when_disagreed(client: Client, bucket: str) -> None:
    e = client.bucket(bucket).entry("alarms")
    e.write(b"a", T0, labels={"alarm": True, "n": 3, "f": 2.5})
    e.write(b"b", T0 + 1, labels={"alarm": False})
    e.write_batch([(T0 + 2, b"c", {"alarm": True}), {"ts": T0 + 3, "data": b"d", "labels": {"alarm": False}}])
    e.write(b"e", T0 + 4)
    assert e.read(T0).labels == {"alarm": "true", "n": "3", "f": "2.5"}
    assert e.read(T0 + 1).labels == {"alarm": "false"}
    by_eq = [r.ts for r in e.query(eq={"alarm": True})]
    by_when = [r.ts for r in e.query(when={"&alarm": {"$eq": True}})]
    by_text = [r.ts for r in e.query(eq={"alarm": "true"})]
    assert by_eq == by_when == by_text == [T0, T0 + 2]
    assert [r.ts for r in e.query(ne={"alarm": True})] == [T0 + 1, T0 + 3, T0 + 4]
    assert [r.ts for r in e.query(when={"&alarm": {"$eq": False}})] == [r.ts for r in e.query(eq={"alarm": False})]
    assert e.update_labels(T0 + 4, {"alarm": True}).labels == {"alarm": "true"}
    assert [r.ts for r in e.query(eq={"alarm": True})] == [T0, T0 + 2, T0 + 4]


def test_a_value_that_is_not_a_label_is_refused(client: Client, bucket: str) -> None:
    with pytest.raises(tsblob.InvalidInput, match="not a label value"):
        client.write(bucket, "x", b"a", T0, labels={"k": None})  # type: ignore[dict-item]
    with pytest.raises(tsblob.InvalidInput, match="not a label value"):
        client.write_batch(bucket, "x", [(T0, b"a", {"k": [1]})])
