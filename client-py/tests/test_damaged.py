"""A damaged record in a query (issue 27, item 5): the server used to end the whole query
with an error at the first record whose stored bytes fail their check, so the records
after it were out of reach. It now skips it and reports it: the iterator's ``skipped``
names it once the iteration is over, and every other record arrives."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import tsblob
from tsblob import SkippedRecord

from conftest import Server

T0 = 1_700_000_000_000_000


def _payload(ts: int) -> bytes:
    return (b"<rec %d>" % ts) * 40


def _corrupt(data: Path, ts: int) -> None:
    """Flips a byte of record ``ts``'s stored payload in its block file (its CRC then fails)."""
    needle = _payload(ts)
    for path in sorted(data.rglob("*.blk")):
        raw = bytearray(path.read_bytes())
        at = raw.find(needle)
        if at >= 0:
            raw[at + 10] ^= 0xFF
            path.write_bytes(bytes(raw))
            return
    raise AssertionError(f"record {ts} not found in any block file under {data}")


def test_damaged_record_is_skipped_and_listed_in_skipped(
        make_client: Callable[..., tsblob.Client], server: Server, bucket: str) -> None:
    db = make_client()
    db.remove_bucket(bucket)
    db.create_bucket(bucket, max_block_records=4)  # several blocks
    for i in range(12):
        db.write(bucket, "cam", _payload(T0 + i), ts=T0 + i)
    _corrupt(server.data / bucket, T0 + 6)

    it = db.query(bucket, "cam")
    got = [(r.timestamp, r.data) for r in it]
    assert [ts for ts, _ in got] == [T0 + i for i in range(12) if i != 6]
    assert all(data == _payload(ts) for ts, data in got)
    assert it.skipped == [SkippedRecord(None, T0 + 6, "corrupt_record")]
    assert it.skipped_count == 1

    # Multi-entry: the skipped record is named with its entry.
    it = db.query(bucket, entries=["cam"])
    assert len(list(it)) == 11
    assert it.skipped == [SkippedRecord("cam", T0 + 6, "corrupt_record")]

    # Nothing damaged in range, and meta=True (reads no payload): nothing skipped.
    it = db.query(bucket, "cam", start=T0 + 7)
    assert len(list(it)) == 5 and it.skipped == [] and it.skipped_count == 0
    it = db.query(bucket, "cam", meta=True)
    assert len(list(it)) == 12 and it.skipped == []
