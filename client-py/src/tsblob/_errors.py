"""Exceptions: one base class, one subclass per family of server error.

The server answers every error with a status code and
``{"error": {"code": "...", "message": "..."}}``. :func:`error_from_response_body` turns that
into the most specific class below; the server's message is kept verbatim because it already
says what was wrong and how to fix it. Catch :class:`TsblobError` to catch everything the SDK
raises, including transport failures and malformed answers.
"""

from __future__ import annotations

import json
import re
import time
from email.utils import parsedate_to_datetime
from typing import Any, Dict, Iterable, List, Optional, Tuple, Type

__all__ = [
    "TsblobError",
    "TransportError",
    "ProtocolError",
    "BadRequest",
    "MalformedBatch",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "BucketNotFound",
    "EntryNotFound",
    "RecordNotFound",
    "TokenNotFound",
    "Conflict",
    "BucketExists",
    "TimestampExists",
    "TokenExists",
    "MethodNotAllowed",
    "RequestTimeout",
    "PayloadTooLarge",
    "TooManyRequests",
    "InvalidInput",
    "BatchError",
    "ServerError",
    "Unavailable",
    "CorruptRecord",
    "InsufficientStorage",
    "QuotaExceeded",
    "DiskFull",
]


class TsblobError(Exception):
    """Base of every error the SDK raises.

    ``status`` is the HTTP status (``None`` when the error was found on the client side),
    ``code`` the server's machine-readable code (``bucket_not_found``...), ``message`` its
    human-readable explanation.
    """

    #: Earlier attempts of the call that failed and were retried before this error (see
    #: :class:`tsblob.Retry`); 0 when the call was sent once.
    attempts = 0

    def __init__(self, message: str, *, code: str = "error", status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def __str__(self) -> str:
        where = f"{self.status} " if self.status is not None else ""
        return f"{where}{self.code}: {self.message}"

    def _gave_up(self, retries: int) -> "TsblobError":
        """Records that the call was sent ``retries + 1`` times (``attempts``), and says so
        in the message when it was retried."""
        self.attempts = retries
        if retries:
            self.message += f" (gave up after {retries + 1} attempts: the first and {retries} retries)"
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, message={self.message!r})"


class TransportError(TsblobError):
    """The server could not be reached, or the connection failed or timed out mid-request.

    The underlying exception (``OSError``, ``http.client`` or ``aiohttp`` error) is the ``__cause__``.
    ``request_sent`` is False when no connection could be made (the server saw nothing).
    """

    request_sent = True


class ProtocolError(TsblobError):
    """The server's answer did not follow the documented format (a truncated query stream,
    an unknown frame kind, a record count that does not match the end frame...), or was
    larger than the client reads of it (a JSON answer over 64 MiB, an error answer over
    64 KiB, a frame's labels over 1 MiB...: cut off, its connection closed)."""


class BadRequest(TsblobError):
    """400: a malformed query string, JSON body or header."""


class MalformedBatch(BadRequest):
    """400 ``malformed_batch``: a batch body the server could not parse.

    ``results`` lists what the server stored before the fault (one dict per record frame it
    read: ``{"ts": ..., "status": ...}``), so the caller knows exactly what was kept.
    """

    def __init__(self, message: str, *, code: str = "malformed_batch", status: Optional[int] = 400,
                 results: Optional[List[Dict[str, Any]]] = None, written: int = 0) -> None:
        super().__init__(message, code=code, status=status)
        self.results: List[Dict[str, Any]] = list(results or [])
        self.written = written


class Unauthorized(TsblobError):
    """401: no bearer token, or one the server does not know. Pass ``token=`` to the client."""


class TokenExpired(Unauthorized):
    """401 ``token_expired``: the token is past its ``expires_at``, or was not used for
    longer than its ``ttl``. An administrator can rotate it (``rotate_token``; not past
    ``expires_at``) or create a new one. A stream whose token expires ends with it."""


class Forbidden(TsblobError):
    """403: the token is valid but may not do this (read or write on this bucket)."""


class IpNotAllowed(Forbidden):
    """403 ``ip_not_allowed``: the token's ``ip_allowlist`` does not include the address the
    request came from (the message says which address the server saw)."""


class NotFound(TsblobError):
    """404: the bucket, entry, record or token does not exist."""


class BucketNotFound(NotFound):
    """404 ``bucket_not_found``."""


class EntryNotFound(NotFound):
    """404 ``entry_not_found``."""


class RecordNotFound(NotFound):
    """404 ``record_not_found``."""


class TokenNotFound(NotFound):
    """404 ``token_not_found``."""


class AttachmentNotFound(NotFound):
    """404 ``attachment_not_found``: the entry has no attachment of that name."""


class Conflict(TsblobError):
    """409: the thing already exists (bucket, timestamp in the entry, token)."""


class BucketExists(Conflict):
    """409 ``bucket_exists``: use ``exist_ok=True`` to accept an existing bucket."""


class TimestampExists(Conflict):
    """409 ``timestamp_exists``: records are never silently overwritten."""


class TokenExists(Conflict):
    """409 ``token_exists``."""


class MethodNotAllowed(TsblobError):
    """405: the route exists, the method does not (an SDK/server version mismatch)."""


class RequestTimeout(TsblobError):
    """408: a streamed request body sent nothing for the server's ``--idle-timeout``; nothing
    of it was kept. Make the source keep up, or write it to a file first."""


class PayloadTooLarge(TsblobError):
    """413: the body is over the server's configured limit."""


class TooManyRequests(TsblobError):
    """429: a bound the server keeps per client is spent right now: ``too_many_tails`` (live
    tails past ``--max-tails`` or ``--max-tails-per-token``: close one first),
    ``too_many_streams`` (query streams past ``--max-streams-per-token``),
    ``too_many_connections`` (connections from one address past
    ``--max-connections-per-ip``). ``retry_after``: the seconds the server asked to wait
    (its ``Retry-After``), or ``None`` when it named none."""

    retry_after: Optional[float] = None


class BatchError(TsblobError):
    """``write_batch`` stored some records but not all. ``result`` is the
    :class:`~tsblob.BatchResult` (which records failed and why); ``errors`` its failed
    records; the first failure is the ``__cause__``. Pass ``raise_errors=False`` to get the
    result without this exception."""

    def __init__(self, message: str, *, result: Any, code: str = "batch_failed", status: Optional[int] = None) -> None:
        super().__init__(message, code=code, status=status)
        self.result = result

    @property
    def errors(self) -> List[Any]:
        return list(self.result.errors)


class InvalidInput(TsblobError, ValueError):
    """422: an invalid name, timestamp, label, bucket setting or content type. Also a
    ``ValueError``: the SDK raises it before sending for a value it can check itself (a
    size such as ``"24MiB"``, a duration such as ``"30d"``, a label key...)."""


class ServerError(TsblobError):
    """500 (and any other 5xx without a class of its own)."""


class Unavailable(ServerError):
    """503: the server cannot take the call now: ``busy`` (a bound of the whole server is
    spent: ``--memory-budget``, ``--max-streams``, ``--max-connections``), ``tier_unavailable``
    (the object store is out of reach). Retried by the calls that retry (see :class:`Retry`);
    raised once the retries ran out. Also the ``busy`` error frame that ends a query or live
    tail when the server is stopping (``status`` ``None``), raised once the iterator's
    reconnections ran out. ``retry_after``: the seconds the server asked to wait (its
    ``Retry-After``), or ``None``."""

    retry_after: Optional[float] = None


class CorruptRecord(ServerError):
    """500 ``corrupt_record``: the stored bytes fail their checksum; the server refuses to
    return wrong bytes."""


class InsufficientStorage(TsblobError):
    """507: the server will not store more."""


class QuotaExceeded(InsufficientStorage):
    """507 ``quota_exceeded``: the bucket's HARD quota is full."""


class DiskFull(InsufficientStorage):
    """507 ``disk_full``: the server's free-space guard refused the write; reads still work."""


class IndexFull(InsufficientStorage):
    """507 ``index_full``: the server's index map (``--index-map-size``) is full; the write
    was not made and reads still work."""


class TooManyEntries(InsufficientStorage):
    """507 ``too_many_entries``: a write into a new entry past the server's
    ``--max-entries``; nothing was created, and writes into existing entries still work."""


_BY_CODE: Dict[str, Type[TsblobError]] = {
    "bad_request": BadRequest,
    "malformed_batch": MalformedBatch,
    "unauthorized": Unauthorized,
    "token_expired": TokenExpired,
    "forbidden": Forbidden,
    "ip_not_allowed": IpNotAllowed,
    "invalid_expiry": InvalidInput,
    "invalid_ttl": InvalidInput,
    "invalid_ip_allowlist": InvalidInput,
    "expired_not_rotatable": InvalidInput,
    "not_found": NotFound,
    "bucket_not_found": BucketNotFound,
    "entry_not_found": EntryNotFound,
    "record_not_found": RecordNotFound,
    "token_not_found": TokenNotFound,
    "attachment_not_found": AttachmentNotFound,
    "bucket_exists": BucketExists,
    "timestamp_exists": TimestampExists,
    "token_exists": TokenExists,
    "method_not_allowed": MethodNotAllowed,
    "request_timeout": RequestTimeout,
    "payload_too_large": PayloadTooLarge,
    "attachment_too_large": PayloadTooLarge,
    "invalid_name": InvalidInput,
    "invalid_timestamp": InvalidInput,
    "invalid_label": InvalidInput,
    "invalid_settings": InvalidInput,
    "invalid_content_type": InvalidInput,
    "invalid_attachment": InvalidInput,
    "too_many_attachments": InvalidInput,
    "missing_label": InvalidInput,
    "corrupt_record": CorruptRecord,
    "internal": ServerError,
    "busy": Unavailable,
    "tier_unavailable": Unavailable,
    "too_many_tails": TooManyRequests,
    "too_many_streams": TooManyRequests,
    "too_many_connections": TooManyRequests,
    "quota_exceeded": QuotaExceeded,
    "disk_full": DiskFull,
    "index_full": IndexFull,
    "too_many_entries": TooManyEntries,
}

# A code this SDK does not know yet (a newer server) still maps to the right family.
_BY_STATUS: Dict[int, Type[TsblobError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    405: MethodNotAllowed,
    408: RequestTimeout,
    413: PayloadTooLarge,
    422: InvalidInput,
    429: TooManyRequests,
    503: Unavailable,
    507: InsufficientStorage,
}


def error_class(code: str, status: Optional[int]) -> Type[TsblobError]:
    """The class for a server error code, falling back on the status family."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    if status is not None:
        if status in _BY_STATUS:
            return _BY_STATUS[status]
        if status >= 500:
            return ServerError
    return TsblobError


# The server's advice is written for an HTTP client ("confirm with DELETE /api/v1/tokens/x?...");
# an SDK user calls a method instead. Each pattern is a piece of a server message (a name
# in it: the group) and what to say in its place. As the CLI does (server/src/cli/client.rs,
# ``cli_advice``); the rest of the message is kept.
_SDK_ADVICE = [
    (re.compile(r"confirm with DELETE /api/v1/tokens/([^?\s]*)\?disable_auth=true"),
     lambda m: f"confirm with remove_token({m.group(1)!r}, disable_auth=True)"),
    (re.compile(r"\(POST /api/v1/tokens/([^/\s]*)/rotate\)"),
     lambda m: f"(rotate_token({m.group(1)!r}))"),
    (re.compile(r"list them with GET /api/v1/replications\b"), lambda m: "list them with list_replications()"),
    (re.compile(r"send `Authorization: Bearer <token>`"),
     lambda m: "pass token= to the client (or set TSBLOB_TOKEN)"),
]


def sdk_advice(message: str) -> str:
    """The server's message with its HTTP advice put as the SDK's (see ``_SDK_ADVICE``)."""
    for pattern, advice in _SDK_ADVICE:
        message = pattern.sub(advice, message, count=1)
    return message


def retry_after(headers: Optional[Iterable[Tuple[str, str]]]) -> Optional[float]:
    """The seconds a ``Retry-After`` header among ``headers`` (lower-case names) asks to wait:
    its delay in seconds, or the time until its HTTP date (0 when past); ``None`` without one
    or when it does not parse."""
    for name, value in headers or ():
        if name != "retry-after":
            continue
        value = value.strip()
        if value.isdigit():
            return float(value)
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None or when.tzinfo is None:
            return None
        return max(0.0, when.timestamp() - time.time())
    return None


def _with_retry_after(err: TsblobError, headers: Optional[Iterable[Tuple[str, str]]]) -> TsblobError:
    if isinstance(err, (TooManyRequests, Unavailable)):
        err.retry_after = retry_after(headers)
    return err


def error_from_json(doc: Any, status: Optional[int],
                    headers: Optional[Iterable[Tuple[str, str]]] = None) -> TsblobError:
    """Builds the exception for a parsed error document ``{"error": {...}, ...}``
    (``headers``: the answer's, lower-case names, for ``Retry-After``)."""
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict):
        return _with_retry_after(error_class("", status)(
            f"the server answered {status} with an unexpected body: {str(doc)[:300]}",
            code=f"http_{status}", status=status,
        ), headers)
    code = str(err.get("code") or f"http_{status}")
    message = sdk_advice(str(err.get("message") or "(no message)"))
    cls = error_class(code, status)
    if cls is MalformedBatch:
        results = doc.get("results") if isinstance(doc.get("results"), list) else []
        written = doc.get("written") if isinstance(doc.get("written"), int) else 0
        return MalformedBatch(message, code=code, status=status, results=results, written=written)
    return _with_retry_after(cls(message, code=code, status=status), headers)


def error_from_response_body(status: int, body: bytes,
                             headers: Optional[Iterable[Tuple[str, str]]] = None) -> TsblobError:
    """Builds the exception for an error answer, whatever its body looks like (``headers``:
    the answer's, lower-case names, for ``Retry-After``)."""
    try:
        doc = json.loads(body)
    except ValueError:
        text = body[:300].decode("utf-8", "replace").strip() or "(empty body)"
        return _with_retry_after(error_class("", status)(
            f"the server answered {status} without an error document: {text}",
            code=f"http_{status}", status=status,
        ), headers)
    return error_from_json(doc, status, headers)
