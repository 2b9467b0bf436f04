"""Request building shared by both clients: names, label headers, batch splitting, ranges."""

from __future__ import annotations

import struct
from urllib.parse import unquote

import pytest

from tsblob import InvalidInput, Record
from tsblob import _common as c
from tsblob._framing import EV_END, EV_RECORD, FrameParser


@pytest.mark.parametrize("bucket,entry", [("b", ".."), ("b", "a/../x"), ("b", "a//b"), ("b", ""), ("..", "e"),
                                          ("a/b", "e"), ("", "e"), ("b", "x/.")])
def test_names_that_would_address_another_route_are_refused(bucket: str, entry: str) -> None:
    with pytest.raises(InvalidInput, match="client"):
        c.entry_path(bucket, entry)


def test_paths() -> None:
    assert c.entry_path("cams", "robot1/lidar") == "/api/v1/b/cams/robot1/lidar"
    assert c.bucket_path("a.b-c_d") == "/api/v1/b/a.b-c_d"


def test_kept_entry_paths_are_the_built_ones_and_bad_names_raise_every_time() -> None:
    # entry_path keeps the paths of recent names (issue 30): the kept one must be the path
    # built afresh, and a refused name must be refused again (an error is never kept).
    for _ in range(2):
        assert c.entry_path("b-x", "cam/front.1") == c._entry_path("b-x", "cam/front.1") == "/api/v1/b/b-x/cam/front.1"
        with pytest.raises(InvalidInput, match="client"):
            c.entry_path("b", "a/../x")
    with pytest.raises(InvalidInput, match="client"):
        c.entry_path("b", ["not", "a", "name"])  # type: ignore[arg-type]  # unhashable: not kept, still refused


def test_label_values_are_percent_encoded_and_round_trip() -> None:
    labels = {"plain": "front-cam 1", "utf8": "héllo ✓", "pct": "100%", "edge": " x "}
    headers: dict = {}
    c.label_headers(labels, headers)
    for v in headers.values():
        assert v.isascii() and " " not in v
    assert headers["x-tsblob-label-plain"] == "front-cam%201"
    assert c.labels_from_headers(headers.items()) == labels
    assert unquote(headers["x-tsblob-label-pct"]) == "100%"


def test_upper_case_label_keys_are_refused() -> None:
    with pytest.raises(InvalidInput, match="lower case"):
        c.label_headers({"Camera": "x"}, {})


def test_range_params() -> None:
    assert c.range_params(5, None, None) == [("ts", "5")]
    assert c.range_params(None, 10, None) == [("start", "10")]
    assert c.range_params(None, None, "1970-01-01T00:00:01Z") == [("stop", "1000000")]
    with pytest.raises(InvalidInput, match="remove_entry"):
        c.range_params(None, None, None)
    with pytest.raises(InvalidInput, match="not both"):
        c.range_params(1, 2, 3)


def test_query_params() -> None:
    p = c.query_params(1.5, "1970-01-01T00:00:02Z", {"cam": "front"}, {"bad": "1"}, ["x"], "y", 10, True)
    assert p == [("start", "1500000"), ("stop", "2000000"), ("limit", "10"), ("desc", "true"),
                 ("eq.cam", "front"), ("ne.bad", "1"), ("has", "x"), ("missing", "y")]


def decode(body: bytes) -> list:
    parser = FrameParser(1 << 30)
    parser.feed(body)
    out = []
    while (ev := parser.next_event()) is not None:
        if ev[0] == EV_RECORD:
            out.append((ev[1].ts, ev[2], ev[1].content_type, ev[1].labels))
        elif ev[0] == EV_END:
            out.append(("end", ev[1]))
    parser.eof()
    return out


def test_batches_respect_both_limits_and_keep_order() -> None:
    items = [(i, bytes([i % 256]) * 1000) for i in range(1, 101)]
    bodies = list(c.iter_batches(iter(items), max_bytes=10_000, max_records=1000))
    assert all(len(b) <= 10_000 for b, _ in bodies)
    assert sum(len(spans) for _, spans in bodies) == 100
    ts = [r[0] for b, _ in bodies for r in decode(b) if r[0] != "end"]
    assert ts == list(range(1, 101))
    bodies = list(c.iter_batches(items, max_bytes=1 << 30, max_records=7))
    assert [len(spans) for _, spans in bodies] == [7] * 14 + [2]


def test_a_record_larger_than_a_batch_travels_alone() -> None:
    bodies = list(c.iter_batches([b"a", b"x" * 5000, b"b"], max_bytes=1000, max_records=10))
    assert [len(spans) for _, spans in bodies] == [1, 1, 1]


def test_every_item_form() -> None:
    rec = Record(9, "image/png", {"k": "v"}, 3, b"rec")
    items = [b"raw", (1, b"t2"), (2, b"t3", {"a": "1"}), (3, b"t4", None, "text/plain"),
             {"data": b"d", "ts": "1970-01-01T00:00:00.000004Z", "labels": {"b": "2"}}, rec]
    (body, spans), = c.iter_batches(items, 1 << 20, 100)
    got = decode(body)
    assert len(spans) == 6 and got[-1] == ("end", 6)
    # each span locates its record's payload in the body (what a retry's CRC check reads)
    assert [(ts, bytes(body[off:off + n])) for ts, off, n in spans] == [
        (None, b"raw"), (1, b"t2"), (2, b"t3"), (3, b"t4"), (4, b"d"), (9, b"rec")]
    assert got[0][0] == 0xFFFF_FFFF_FFFF_FFFF and got[0][1] == b"raw"
    assert got[2][3] == {"a": "1"} and got[3][2] == "text/plain"
    assert got[4][0] == 4 and got[4][3] == {"b": "2"}
    assert got[5] == (9, b"rec", "image/png", {"k": "v"})
    with pytest.raises(TypeError, match="cannot use"):
        list(c.iter_batches([42], 100, 100))
    with pytest.raises(TypeError, match="bytes-like"):
        list(c.iter_batches([(1, "text")], 100, 100))


def test_end_frame_layout() -> None:
    (body, _), = c.iter_batches([b"a", b"b"], 1000, 1000)
    assert body[-9:] == struct.pack("<BQ", 0, 2)


def test_a_limit_nested_in_a_condition_made_a_tail_that_reached_it_reopen() -> None:
    """Bug (review of the session's own change, 2026-11-29): a `meta=True` tail took the end
    of its answer for a cut unless `$limit` was a top-level key of `when`; a `$limit` inside
    `$and` (an operator at any depth) reached its count, the answer ended, and the tail
    reopened with the count started over, delivering past the limit."""
    assert c.has_limit({"$limit": 3})
    assert c.has_limit({"$and": [{"&k": {"$gt": 1}}, {"$limit": 3}]})
    assert c.has_limit({"$or": [{"$not": {"$limit": 2}}]})
    assert not c.has_limit({"&k": {"$gt": 1}})
    assert not c.has_limit({"&limit": {"$eq": "$limit-like text"}})
    assert not c.has_limit(None)
