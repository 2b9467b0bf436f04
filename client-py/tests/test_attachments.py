"""Entry attachments (issue 28), with both clients: small JSON documents kept with an entry
under a name (``…/{entry}/attachments``), never records; kept across renames, gone with the
entry, bounded."""

from __future__ import annotations

import pytest

import tsblob
from tsblob import Client

T0 = 1_700_000_000_000_000


def test_attachments_are_written_read_and_removed(client: Client, bucket: str) -> None:
    e = client.bucket(bucket).entry("cam/front")
    written = e.write_attachments({"schema": {"fps": 30, "fields": ["x", "y"]}, "$plugin": [1, None]})
    assert sorted(written) == ["$plugin", "schema"] and all(ts > 0 for ts in written.values())
    assert e.read_attachments() == {"schema": {"fps": 30, "fields": ["x", "y"]}, "$plugin": [1, None]}
    assert e.read_attachment("$plugin") == [1, None]
    e.write_attachments({"schema": {"fps": 60}})
    assert e.read_attachment("schema") == {"fps": 60}
    assert e.info().record_count == 0  # never records
    assert list(e.query()) == []
    e.write(b"frame", T0)
    client.rename_entry(bucket, "cam/front", "cam/left")
    left = client.bucket(bucket).entry("cam/left")
    assert left.read_attachments() == {"schema": {"fps": 60}, "$plugin": [1, None]}
    assert left.remove_attachments(["schema", "nope"]) == ["schema"]
    with pytest.raises(tsblob.AttachmentNotFound):
        left.read_attachment("schema")
    assert left.remove_attachments() == ["$plugin"]
    assert left.read_attachments() == {}


def test_attachment_errors(client: Client, bucket: str) -> None:
    e = client.bucket(bucket).entry("e")
    with pytest.raises(tsblob.EntryNotFound):
        e.read_attachments()
    with pytest.raises(tsblob.BucketNotFound):
        client.write_attachments(bucket + "-missing", "e", {"a": 1})
    with pytest.raises(tsblob.PayloadTooLarge) as big:
        e.write_attachments({"big": "x" * 70_000})
    assert big.value.code == "attachment_too_large" and "--max-attachment-size" in str(big.value)
    with pytest.raises(tsblob.InvalidInput) as many:
        e.write_attachments({f"n{i}": i for i in range(65)})
    assert many.value.code == "too_many_attachments"
    with pytest.raises(tsblob.InvalidInput):
        e.write_attachments({"a b": 1})
    # The route's word is no entry segment: the client refuses such names before sending...
    for name in ("e/attachments", "attachments/e"):
        with pytest.raises(tsblob.InvalidInput) as bad:
            client.write(bucket, name, b"x", T0)
        assert bad.value.code == "invalid_name" and bad.value.status is None
    # ... and the server reads the path as the attachments route, not a record.
    with pytest.raises(tsblob.MethodNotAllowed):
        client._send("POST", f"/api/v1/b/{bucket}/e/attachments", [("ts", str(T0))], content=b"x")
    with pytest.raises(tsblob.InvalidInput) as bad:
        client._send("POST", f"/api/v1/b/{bucket}/attachments/e", [("ts", str(T0))], content=b"x")
    assert bad.value.status == 422
    with pytest.raises(tsblob.EntryNotFound):  # nothing refused made the entry
        e.read_attachments()


async def test_async_client_attachments(aclient: tsblob.AsyncClient, bucket: str) -> None:
    await aclient.write_attachments(bucket, "e", {"calib": {"k": [0.1, 0.2]}})
    assert await aclient.read_attachments(bucket, "e") == {"calib": {"k": [0.1, 0.2]}}
    assert await aclient.bucket(bucket).entry("e").read_attachment("calib") == {"k": [0.1, 0.2]}
    assert await aclient.remove_attachments(bucket, "e", "calib") == ["calib"]
    with pytest.raises(tsblob.AttachmentNotFound):
        await aclient.read_attachment(bucket, "e", "calib")
