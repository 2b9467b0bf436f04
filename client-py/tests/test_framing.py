"""The frame encoder and the incremental parser, without a server: every split of a stream
into chunks must give the same records, and every malformed stream a clear error."""

from __future__ import annotations

import json
import random
import struct
from typing import Any, List, Tuple

import pytest

from tsblob import BucketNotFound, ProtocolError, TsblobError
from tsblob._framing import (EV_CHUNK, EV_END, EV_HEAD, EV_RECORD, SERVER_TS, FrameParser, encode_end,
                             encode_record)


def stream(records: List[Tuple[int, bytes, str, dict]]) -> bytes:
    parts: List[Any] = []
    for ts, data, ct, labels in records:
        parts.extend(encode_record(ts, data, ct, labels))
    parts.append(encode_end(len(records)))
    return b"".join(bytes(p) for p in parts)


def parse(body: bytes, chunk_sizes: List[int], eager_limit: int) -> List[Any]:
    """Feeds ``body`` in chunks of the given sizes (cycled) and collects whole records."""
    parser = FrameParser(eager_limit)
    out: List[Any] = []
    current: Any = None
    pos, i = 0, 0
    while pos < len(body):
        n = chunk_sizes[i % len(chunk_sizes)]
        i += 1
        parser.feed(body[pos:pos + n])
        pos += n
        while True:
            ev = parser.next_event()
            if ev is None:
                break
            if ev[0] == EV_RECORD:
                h = ev[1]
                out.append((h.ts, ev[2], h.content_type, h.labels, "eager"))
            elif ev[0] == EV_HEAD:
                current = [ev[1], []]
            elif ev[0] == EV_CHUNK:
                current[1].append(ev[1])
                if ev[2]:
                    h = current[0]
                    out.append((h.ts, b"".join(current[1]), h.content_type, h.labels, "streamed"))
                    current = None
            elif ev[0] == EV_END:
                out.append(("end", ev[1]))
    parser.eof()
    return out


RECORDS = [
    (1, b"", "", {}),
    (2, b"x" * 100, "image/jpeg", {"camera": "front", "note": "héllo wörld ✓"}),
    (3, bytes(range(256)) * 40, "application/octet-stream", {"a": ""}),
    (2**63, b"y" * 5000, "text/plain", {}),
]


@pytest.mark.parametrize("chunks", [[1], [7], [25], [26, 3], [4096], [1 << 20], [13, 1, 2000]])
@pytest.mark.parametrize("eager_limit", [0, 150, 1 << 20])
def test_any_split_gives_the_same_records(chunks: List[int], eager_limit: int) -> None:
    body = stream(RECORDS)
    got = parse(body, chunks, eager_limit)
    assert got[-1] == ("end", len(RECORDS))
    for (ts, data, ct, labels), rec in zip(RECORDS, got):
        assert rec[0] == ts and rec[1] == data and rec[3] == labels
        assert rec[2] == (ct or "application/octet-stream")
        # Records above the eager limit are streamed, the others come whole.
        assert rec[4] == ("eager" if len(data) <= eager_limit else "streamed")


def test_random_records_random_splits() -> None:
    rng = random.Random(7)
    recs = [(i, rng.randbytes(rng.choice([0, 1, 10, 1000, 70000])), rng.choice(["", "a/b"]),
             {f"k{j}": "v" * rng.randint(0, 30) for j in range(rng.randint(0, 4))}) for i in range(200)]
    body = stream(recs)
    for _ in range(5):
        sizes = [rng.randint(1, 100_000) for _ in range(50)]
        got = parse(body, sizes, rng.choice([0, 500, 65536]))
        assert [(r[0], r[1], r[3]) for r in got[:-1]] == [(t, d, lab) for t, d, _, lab in recs]


def test_server_assigned_timestamp_is_all_ones() -> None:
    head = bytes(encode_record(None, b"abc", None, None)[0])
    assert struct.unpack_from("<BQ", head)[1] == SERVER_TS


def test_streamed_chunks_do_not_accumulate() -> None:
    """A 10 MB payload fed in 64 KiB chunks leaves at most one chunk buffered."""
    payload = b"z" * (10 << 20)
    body = stream([(1, payload, "", {})])
    parser = FrameParser(eager_limit=1 << 20)
    peak = total = 0
    for pos in range(0, len(body), 65536):
        parser.feed(body[pos:pos + 65536])
        peak = max(peak, parser.buffered())
        while (ev := parser.next_event()) is not None:
            if ev[0] == EV_CHUNK:
                total += len(ev[1])
    parser.eof()
    assert total == len(payload)
    assert peak <= 65536


def test_end_frame_count_mismatch() -> None:
    body = b"".join(bytes(p) for p in encode_record(1, b"a", None, None)) + encode_end(2)
    with pytest.raises(ProtocolError, match="counts 2 records but 1"):
        parse(body, [1000], 100)


def test_truncated_stream() -> None:
    body = stream(RECORDS)
    with pytest.raises(ProtocolError, match="connection was cut"):
        parse(body[:-20], [1000], 1 << 20)
    with pytest.raises(ProtocolError, match="before its end frame"):
        parse(body[:-9], [1000], 1 << 20)


def test_error_frame_raises_the_servers_error() -> None:
    err = json.dumps({"error": {"code": "bucket_not_found", "message": "bucket \"x\" does not exist"}}).encode()
    body = b"".join(bytes(p) for p in encode_record(1, b"a", None, None)) + struct.pack("<BI", 2, len(err)) + err
    with pytest.raises(BucketNotFound, match="does not exist") as info:
        parse(body, [3], 100)
    assert info.value.code == "bucket_not_found"


def test_unknown_kind_and_trailing_bytes() -> None:
    with pytest.raises(ProtocolError, match="unknown frame kind 9"):
        parse(b"\x09" + b"\x00" * 30, [100], 100)
    with pytest.raises(ProtocolError, match="after the end"):
        parse(encode_end(0) + b"\x01", [100], 100)


def test_bad_labels_are_a_protocol_error() -> None:
    # A label block whose announced length disagrees with its contents.
    head = struct.pack("<BQHHIQ", 1, 5, 0, 1, 3, 0) + b"\x05\x00k"
    with pytest.raises(TsblobError):
        parse(head + encode_end(1), [100], 100)


def test_heartbeats_and_records_with_their_entry() -> None:
    """Frame kind 3 (heartbeat) and kind 4 (a record naming its entry), fed a byte at a time."""
    from tsblob._framing import EV_HEARTBEAT

    entry = "cams/front".encode()
    labels = struct.pack("<H", 1) + b"k" + struct.pack("<H", 1) + b"v"
    head4 = struct.pack("<BQHHIQ", 4, 9, 3, 1, len(labels), 2) + struct.pack("<H", len(entry)) + entry
    body = (struct.pack("<BQ", 3, 42) + head4 + b"a/b" + labels + b"hi"
            + stream([(10, b"", "", {})])[:-9] + struct.pack("<BQ", 3, 43) + encode_end(2))
    p = FrameParser(eager_limit=1 << 20)
    events = []
    for i in range(len(body)):
        p.feed(body[i:i + 1])
        while True:
            ev = p.next_event()
            if ev is None:
                break
            events.append(ev)
    assert events[0] == (EV_HEARTBEAT, 42)
    assert events[1][0] == EV_RECORD and events[1][2] == b"hi"
    h = events[1][1]
    assert (h.entry, h.ts, h.content_type, h.labels) == ("cams/front", 9, "a/b", {"k": "v"})
    assert events[2][0] == EV_RECORD and events[2][1].entry is None and events[2][1].ts == 10
    assert events[3] == (EV_HEARTBEAT, 43)
    assert events[4] == (EV_END, 2)
