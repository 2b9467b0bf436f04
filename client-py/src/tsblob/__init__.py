"""tsblob: the Python SDK of the tsblob store for timestamped blobs.

``Client`` (sync, standard library only) and ``AsyncClient`` (asyncio, the extra
``tsblob[async]``) have the same methods: the client is written once (see
``tsblob/_async/client.py``)::

    from tsblob import Client

    with Client("http://127.0.0.1:8686") as db:
        db.create_bucket("cams", exist_ok=True)
        cam = db.bucket("cams").entry("robot1/front")
        ts = cam.write(jpeg_bytes, labels={"robot": "r1"})
        for rec in cam.query(start=ts):
            print(rec.timestamp, rec.size, rec.labels)

``import tsblob`` does not import aiohttp: ``AsyncClient`` (and its record and iterator
classes) are loaded on first use. Every error is a :class:`TsblobError`.
"""

import logging
from typing import TYPE_CHECKING, Any, List

from ._common import Retry, SettingsMismatch, SettingsMismatchError
from ._errors import (AttachmentNotFound, BadRequest, BatchError, BucketExists, BucketNotFound, Conflict, CorruptRecord, DiskFull,
                      EntryNotFound, Forbidden, IndexFull, InsufficientStorage, InvalidInput, MalformedBatch, MethodNotAllowed,
                      NotFound, PayloadTooLarge, ProtocolError, QuotaExceeded, RecordNotFound, RequestTimeout,
                      ServerError, TimestampExists, TokenExists, TokenNotFound, TooManyEntries, TooManyRequests,
                      TransportError, TsblobError, Unauthorized, Unavailable, TokenExpired, IpNotAllowed)
from ._models import (BatchResult, Bucket, BucketInfo, BucketSettings, EntryInfo, Health, Histogram, LifecycleRule,
                      LifecycleStatus, RecordInfo, RecordResult, ServerInfo, SkippedRecord, Token)
from ._timestamps import Timestamp, TimestampWarning, from_micros, to_micros
from ._version import __version__
from ._frames import to_pandas

try:
    from ._sync.client import Client, QueryIterator, Record
    from ._sync.handles import BucketHandle, EntryHandle
except ImportError as e:  # pragma: no cover - a source checkout that was never built
    raise ImportError(
        "tsblob/_sync/client.py is missing: it is generated from tsblob/_async/client.py when the package is "
        "built; install it (pip install -e client-py) or run `python client-py/hatch_build.py`") from e

# A library configures no output of its own: retries are logged as WARNINGs on "tsblob", shown
# only by a handler the program sets up (logging.basicConfig()...). Without this one, Python's
# last-resort handler would print them to stderr.
logging.getLogger("tsblob").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from ._async.client import AsyncClient, AsyncQueryIterator, AsyncRecord
    from ._async.handles import AsyncBucketHandle, AsyncEntryHandle

_ASYNC = ("AsyncClient", "AsyncQueryIterator", "AsyncRecord", "AsyncBucketHandle", "AsyncEntryHandle")


def __getattr__(name: str) -> Any:
    # The async client is imported on first use only: it needs aiohttp (tsblob[async]).
    if name in _ASYNC:
        from ._async import client, handles

        return getattr(handles if name.endswith("Handle") else client, name)
    raise AttributeError(f"module 'tsblob' has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_ASYNC))


__all__ = [
    "Client", "AsyncClient", "QueryIterator", "AsyncQueryIterator", "Retry",
    "Record", "AsyncRecord", "RecordInfo", "RecordResult", "SkippedRecord", "BatchResult", "BucketHandle", "EntryHandle",
    "AsyncBucketHandle", "AsyncEntryHandle",
    "Bucket", "BucketInfo", "BucketSettings", "EntryInfo", "Health", "Histogram", "ServerInfo", "Token",
    "LifecycleRule", "LifecycleStatus",
    "Timestamp", "TimestampWarning", "to_micros", "from_micros", "SettingsMismatch", "SettingsMismatchError",
    "TsblobError", "TransportError", "ProtocolError", "BadRequest", "MalformedBatch", "Unauthorized",
    "TokenExpired", "Forbidden", "IpNotAllowed", "NotFound", "BucketNotFound", "EntryNotFound", "RecordNotFound", "TokenNotFound",
    "AttachmentNotFound", "Conflict", "BucketExists", "TimestampExists", "TokenExists", "MethodNotAllowed", "RequestTimeout",
    "PayloadTooLarge", "TooManyRequests", "BatchError",
    "InvalidInput", "ServerError", "Unavailable", "CorruptRecord", "InsufficientStorage", "QuotaExceeded", "DiskFull", "IndexFull", "TooManyEntries",
    "to_pandas", "__version__",
]
