"""tsblob: the Python SDK of the tsblob store for timestamped blobs.

``Client`` (sync) and ``AsyncClient`` (asyncio) have the same methods::

    from tsblob import Client

    with Client("http://127.0.0.1:8686") as db:
        db.create_bucket("cams", exist_ok=True)
        ts = db.write("cams", "front", jpeg_bytes, labels={"robot": "r1"})
        for rec in db.query("cams", "front", start=ts):
            print(rec.timestamp, rec.size, rec.labels)

Every error is a :class:`TsblobError`; see ``docs/python.md`` for the guide.
"""

from ._async_client import AsyncClient, AsyncQueryIterator
from ._client import Client, QueryIterator
from ._errors import (BadRequest, BucketExists, BucketNotFound, Conflict, CorruptRecord, DiskFull,
                      EntryNotFound, Forbidden, InsufficientStorage, InvalidInput, MethodNotAllowed,
                      MalformedBatch, NotFound, PayloadTooLarge, ProtocolError, QuotaExceeded,
                      RecordNotFound, RequestTimeout, ServerError, TimestampExists, TokenExists, TokenNotFound,
                      TransportError, TsblobError, Unauthorized)
from ._models import (AsyncRecord, BatchResult, Bucket, BucketInfo, BucketSettings, EntryInfo, Health, Histogram,
                      Record, RecordInfo, RecordResult, ServerInfo, Token)
from ._timestamps import Timestamp, from_micros, to_micros

__version__ = "0.1.0"

__all__ = [
    "Client", "AsyncClient", "QueryIterator", "AsyncQueryIterator",
    "Record", "AsyncRecord", "RecordInfo", "RecordResult", "BatchResult",
    "Bucket", "BucketInfo", "BucketSettings", "EntryInfo", "Health", "Histogram", "ServerInfo", "Token",
    "Timestamp", "to_micros", "from_micros",
    "TsblobError", "TransportError", "ProtocolError", "BadRequest", "MalformedBatch", "Unauthorized",
    "Forbidden", "NotFound", "BucketNotFound", "EntryNotFound", "RecordNotFound", "TokenNotFound",
    "Conflict", "BucketExists", "TimestampExists", "TokenExists", "MethodNotAllowed", "RequestTimeout",
    "PayloadTooLarge",
    "InvalidInput", "ServerError", "CorruptRecord", "InsufficientStorage", "QuotaExceeded", "DiskFull",
    "__version__",
]
