"""Lifecycle rules from the SDK (issue 28, item 3), sync and async (the ``client`` fixture
runs each test with both): set, list, run, remove; ``max_age`` as the shorthand rule;
``compress`` rules; the bucket handle has the same methods."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

import tsblob
from tsblob import Client

HOUR = 3_600_000_000


def test_rules_are_set_run_listed_and_removed(client: Client, bucket: str) -> None:
    old = int(time.time() * 1e6) - 2 * HOUR
    client.write(bucket, "cams/front", b"a", ts=old, labels={"kind": "raw"})
    client.write(bucket, "cams/front", b"b", ts=old + 1, labels={"kind": "jpeg"})
    client.write(bucket, "cams/back", b"c", ts=old, labels={"kind": "raw"})
    rule = client.set_lifecycle_rule(bucket, "raw", "1h", interval=timedelta(minutes=10),
                                     entries=["cams/*", "!cams/back"], when={"&kind": {"$eq": "raw"}},
                                     mode="disabled")
    assert isinstance(rule, tsblob.LifecycleRule)
    assert (rule.older_than, rule.interval, rule.mode, rule.action) == (HOUR, 600_000_000, "disabled", "remove")
    assert rule.entries == ["cams/*", "!cams/back"] and rule.when == {"&kind": {"$eq": "raw"}}
    done = client.run_lifecycle_rule(bucket, "raw")
    assert (done["removed"], done["caught_up"]) == (1, True)
    assert client.get_entry(bucket, "cams/front").record_count == 1
    assert client.get_entry(bucket, "cams/back").record_count == 1
    got = client.get_lifecycle_rule(bucket, "raw")
    assert got.status.removed == 1 and got.status.last_run is not None
    # max_age is the shorthand rule, listed first
    client.set_lifecycle_rule(bucket, "max_age", "30d")
    assert client.get_bucket(bucket).settings.max_age == 30 * 24 * HOUR
    rules = client.bucket(bucket).lifecycle_rules()
    assert [(r.name, r.shorthand) for r in rules] == [("max_age", True), ("raw", False)]
    client.remove_lifecycle_rule(bucket, "max_age")
    assert client.get_bucket(bucket).settings.max_age is None
    client.remove_lifecycle_rule(bucket, "raw")
    with pytest.raises(tsblob.NotFound) as e:
        client.get_lifecycle_rule(bucket, "raw")
    assert e.value.code == "rule_not_found"


def test_a_compress_rule_stores_old_records_compressed(client: Client, bucket: str) -> None:
    old = int(time.time() * 1e6) - 2 * HOUR
    body = b"the same reading again; " * 200
    for i in range(3):
        client.write(bucket, "logs", body + bytes([i]), ts=old + i, content_type="text/plain",
                     labels={"n": str(i)})
    rule = client.set_lifecycle_rule(bucket, "squeeze", "1h", mode="disabled", action="compress")
    assert rule.action == "compress"
    done = client.run_lifecycle_rule(bucket, "squeeze")
    assert (done["compressed"], done["removed"]) == (3, 0) and done["saved_bytes"] > 3 * 4000
    assert client.get_lifecycle_rule(bucket, "squeeze").status.compressed == 3
    for i in range(3):
        r = client.read(bucket, "logs", ts=old + i)
        assert (r.data, r.content_type, r.labels) == (body + bytes([i]), "text/plain", {"n": str(i)})


def test_bad_rules_are_refused_before_or_by_the_server(client: Client, bucket: str) -> None:
    with pytest.raises(tsblob.InvalidInput):
        client.set_lifecycle_rule(bucket, "r", "soon")
    with pytest.raises(tsblob.InvalidInput) as e:
        client.set_lifecycle_rule(bucket, "r", "1d", mode="sometimes")
    assert "mode" in str(e.value)
    with pytest.raises(tsblob.InvalidInput) as e:
        client.set_lifecycle_rule(bucket, "max_age", "1d", entries=["a"])
    assert "max_age" in str(e.value)
    assert client.lifecycle_rules(bucket) == []
