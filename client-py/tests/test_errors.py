"""Every documented server error code maps to its class and keeps the server's message."""

from __future__ import annotations

import email.utils
import json
import time

import pytest

import tsblob
from tsblob._errors import error_from_json, error_from_response_body

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
    (429, "too_many_tails", tsblob.TooManyRequests),
    (429, "too_many_streams", tsblob.TooManyRequests),
    (429, "too_many_connections", tsblob.TooManyRequests),
    (503, "busy", tsblob.Unavailable),
    (503, "tier_unavailable", tsblob.Unavailable),
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
    assert type(error_from_response_body(503, b'{"error": {"code": "x", "message": "m"}}')) is tsblob.Unavailable
    assert type(error_from_response_body(429, b'{"error": {"code": "x", "message": "m"}}')) is tsblob.TooManyRequests
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


def test_429_and_503_have_classes_with_retry_after() -> None:
    """Bug: 429 had no class and a 503 ``busy`` answer was a bare ServerError (ops probe
    2026-11-29): ``TooManyRequests`` (429) and ``Unavailable`` (503, a ``ServerError`` still,
    so that ``except ServerError`` keeps catching it) carry ``retry_after``, the seconds of
    the answer's ``Retry-After`` (a delay or an HTTP date), ``None`` without one."""
    assert issubclass(tsblob.Unavailable, tsblob.ServerError)
    assert issubclass(tsblob.TooManyRequests, tsblob.TsblobError)
    assert not issubclass(tsblob.TooManyRequests, tsblob.ServerError)
    body = b'{"error": {"code": "busy", "message": "m"}}'
    err = error_from_response_body(503, body, [("content-type", "application/json"), ("retry-after", "2")])
    assert type(err) is tsblob.Unavailable and err.retry_after == 2.0
    assert error_from_response_body(503, body).retry_after is None
    assert error_from_response_body(503, b"<html>busy</html>", [("retry-after", "7")]).retry_after == 7.0
    later = email.utils.formatdate(time.time() + 60, usegmt=True)
    err = error_from_response_body(429, b'{"error": {"code": "too_many_tails", "message": "m"}}',
                                   [("retry-after", later)])
    assert type(err) is tsblob.TooManyRequests and err.retry_after is not None and 50 < err.retry_after <= 60
    past = email.utils.formatdate(time.time() - 60, usegmt=True)
    assert error_from_response_body(429, b"{}", [("retry-after", past)]).retry_after == 0.0
    assert error_from_response_body(429, b"{}", [("retry-after", "soon")]).retry_after is None
    # the error frame that ends a stream of a stopping server (no HTTP status)
    frame = error_from_json({"error": {"code": "busy", "message": "the server is stopping"}}, None)
    assert type(frame) is tsblob.Unavailable and frame.status is None
    assert {"TooManyRequests", "Unavailable"} <= set(tsblob.__all__)


@pytest.mark.parametrize("url,says", [
    ("ftp://127.0.0.1:19710", "not ftp://"),
    ("127.0.0.1:19710", "did you mean 'http://127.0.0.1:19710'"),
    ("localhost:8686", "did you mean 'http://localhost:8686'"),
    ("http://127.0.0.1:port", "http://host:port"),
    ("http://", "http://host:port"),
])
def test_a_url_of_the_wrong_form_is_invalid_input(url: str, says: str) -> None:
    """Bug: ``Client('ftp://...')`` and ``Client('127.0.0.1:19710')`` raised a plain
    ValueError (ops probe 2026-11-29), not a TsblobError as documented: now
    ``InvalidInput`` (a ValueError still), saying the form expected, for both clients."""
    for make in (tsblob.Client, tsblob.AsyncClient):
        with pytest.raises(tsblob.InvalidInput) as e:
            make(url)
        assert isinstance(e.value, ValueError)
        assert "http://host:port or https://host:port" in e.value.message and says in e.value.message


def test_a_tsblob_url_of_the_wrong_form_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: a URL of the wrong form raised a plain ValueError (ops probe 2026-11-29); from
    ``$TSBLOB_URL`` the message names the variable."""
    monkeypatch.setenv("TSBLOB_URL", "127.0.0.1:19710")
    with pytest.raises(tsblob.InvalidInput, match=r"\(from \$TSBLOB_URL\)"):
        tsblob.Client()


def test_a_bad_token_ttl_is_invalid_input() -> None:
    """Bug: ``create_token(ttl=0.5)`` raised a plain ValueError (found with the ops probe
    2026-11-29's error classes): now ``InvalidInput``, code ``invalid_ttl`` as the server's."""
    with tsblob.Client("http://127.0.0.1:1", retries=0) as db:
        with pytest.raises(tsblob.InvalidInput) as e:
            db.create_token("t", ttl=0.5)
    assert e.value.code == "invalid_ttl"
