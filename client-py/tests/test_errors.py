"""Every documented server error code maps to its class and keeps the server's message."""

from __future__ import annotations

import json

import pytest

import tsblob
from tsblob._errors import error_from_response_body

DOCUMENTED = [  # (status, code, class) from docs/api.md
    (400, "bad_request", tsblob.BadRequest),
    (400, "malformed_batch", tsblob.MalformedBatch),
    (401, "unauthorized", tsblob.Unauthorized),
    (403, "forbidden", tsblob.Forbidden),
    (404, "bucket_not_found", tsblob.BucketNotFound),
    (404, "entry_not_found", tsblob.EntryNotFound),
    (404, "record_not_found", tsblob.RecordNotFound),
    (404, "token_not_found", tsblob.TokenNotFound),
    (404, "not_found", tsblob.NotFound),
    (409, "bucket_exists", tsblob.BucketExists),
    (409, "timestamp_exists", tsblob.TimestampExists),
    (409, "token_exists", tsblob.TokenExists),
    (405, "method_not_allowed", tsblob.MethodNotAllowed),
    (408, "request_timeout", tsblob.RequestTimeout),
    (413, "payload_too_large", tsblob.PayloadTooLarge),
    (422, "invalid_name", tsblob.InvalidInput),
    (422, "invalid_timestamp", tsblob.InvalidInput),
    (422, "invalid_label", tsblob.InvalidInput),
    (422, "invalid_settings", tsblob.InvalidInput),
    (422, "invalid_content_type", tsblob.InvalidInput),
    (500, "corrupt_record", tsblob.CorruptRecord),
    (500, "internal", tsblob.ServerError),
    (507, "quota_exceeded", tsblob.QuotaExceeded),
    (507, "disk_full", tsblob.DiskFull),
    (507, "index_full", tsblob.IndexFull),
    (507, "too_many_entries", tsblob.TooManyEntries),
]


@pytest.mark.parametrize("status,code,cls", DOCUMENTED)
def test_documented_codes(status: int, code: str, cls: type) -> None:
    body = json.dumps({"error": {"code": code, "message": f"what went wrong with {code}"}}).encode()
    err = error_from_response_body(status, body)
    assert type(err) is cls
    assert isinstance(err, tsblob.TsblobError)
    assert err.status == status and err.code == code
    assert err.message == f"what went wrong with {code}"
    assert code in str(err) and str(status) in str(err)


def test_families() -> None:
    assert issubclass(tsblob.BucketNotFound, tsblob.NotFound)
    assert issubclass(tsblob.TimestampExists, tsblob.Conflict)
    assert issubclass(tsblob.QuotaExceeded, tsblob.InsufficientStorage)
    assert issubclass(tsblob.MalformedBatch, tsblob.BadRequest)
    assert issubclass(tsblob.CorruptRecord, tsblob.ServerError)


def test_unknown_code_falls_back_on_the_status_family() -> None:
    err = error_from_response_body(404, b'{"error": {"code": "shelf_not_found", "message": "m"}}')
    assert type(err) is tsblob.NotFound and err.code == "shelf_not_found"
    assert type(error_from_response_body(503, b'{"error": {"code": "x", "message": "m"}}')) is tsblob.ServerError
    assert type(error_from_response_body(418, b'{"error": {"code": "x", "message": "m"}}')) is tsblob.TsblobError


def test_non_json_body_is_still_a_typed_error() -> None:
    err = error_from_response_body(502, b"<html>bad gateway</html>")
    assert isinstance(err, tsblob.ServerError)
    assert "bad gateway" in err.message and err.code == "http_502"


def test_malformed_batch_keeps_what_was_stored() -> None:
    doc = {"error": {"code": "malformed_batch", "message": "frame 3 is cut"}, "written": 2,
           "results": [{"ts": 1, "status": 201}, {"ts": 2, "status": 201}]}
    err = error_from_response_body(400, json.dumps(doc).encode())
    assert isinstance(err, tsblob.MalformedBatch)
    assert err.written == 2 and [r["ts"] for r in err.results] == [1, 2]
