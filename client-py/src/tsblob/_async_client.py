"""The asyncio client: the same methods as :class:`tsblob.Client`, awaited.

Built on ``httpx.AsyncClient`` and the same request building (:mod:`tsblob._common`) and
frame parser (:mod:`tsblob._framing`) as the sync client. ``query()`` is not a coroutine: it
returns an async iterator, so ``async for rec in db.query(...)`` reads naturally.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import (Any, AsyncIterable, AsyncIterator, BinaryIO, Dict, Iterable, List, Mapping, Optional,
                    Sequence, Tuple, Union)
from urllib.parse import quote

import httpx

from . import _common as c
from ._client import file_size, transport_error
from ._errors import TsblobError, error_from_response_body
from ._framing import EV_END, EV_HEAD, EV_RECORD, MEDIA_TYPE, FrameParser
from ._models import (AsyncRecord, BatchResult, Bucket, EntryInfo, Health, RecordInfo, ServerInfo, Token)
from ._timestamps import Timestamp

__all__ = ["AsyncClient", "AsyncQueryIterator"]

AsyncData = Union[bytes, bytearray, memoryview, BinaryIO, Iterable[bytes], AsyncIterable[bytes]]


async def _file_chunks(f: Any) -> AsyncIterator[bytes]:
    # Reads block the event loop for one chunk at a time (1 MiB): short on local files; for
    # slow sources pass an async iterator instead.
    while True:
        chunk = f.read(c.STREAM_CHUNK)
        if not chunk:
            return
        yield chunk


async def _sync_chunks(it: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in it:
        yield chunk


def prepare_async_body(data: Any, size: Optional[int]) -> Tuple[Any, Optional[int]]:
    """(content for httpx.AsyncClient, Content-Length or None)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data) if not isinstance(data, bytes) else data, None
    if isinstance(data, str):
        raise TypeError("write() takes bytes, a binary file or an iterator of bytes; encode str first")
    if hasattr(data, "read"):
        return _file_chunks(data), size if size is not None else file_size(data)
    if hasattr(data, "__aiter__"):
        return data, size
    if isinstance(data, Iterable):
        return _sync_chunks(data), size
    raise TypeError(f"write() cannot send a {type(data).__name__}: give bytes, a binary file or an "
                    "(async) iterator of bytes")


class AsyncQueryIterator(AsyncIterator[AsyncRecord]):
    """Records of a query for ``async for``; ``async with`` (or ``await it.aclose()``) releases
    the connection when you stop early. Same memory behaviour as the sync iterator."""

    def __init__(self, client: "AsyncClient", path: str, params: c.Params) -> None:
        self._client = client
        self._path = path
        self._params = params
        self._cm: Any = None
        self._chunks: Optional[AsyncIterator[bytes]] = None
        self._parser = FrameParser(client.eager_limit)
        self._payload: Optional[AsyncIterator[bytes]] = None
        self._done = False

    def __aiter__(self) -> "AsyncQueryIterator":
        return self

    async def __aenter__(self) -> "AsyncQueryIterator":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._done = True
        cm, self._cm = self._cm, None
        if cm is not None:
            await cm.__aexit__(None, None, None)

    async def _event(self) -> Tuple[Any, ...]:
        parser = self._parser
        while True:
            ev = parser.next_event()
            if ev is not None:
                return ev
            assert self._chunks is not None
            try:
                data = await self._chunks.__anext__()
            except StopAsyncIteration:
                parser.eof()
                raise
            except httpx.HTTPError as e:
                raise transport_error(e) from e
            parser.feed(data)

    async def _stream_payload(self) -> AsyncIterator[bytes]:
        while True:
            ev = await self._event()
            yield ev[1]
            if ev[2]:
                return

    async def __anext__(self) -> AsyncRecord:
        if self._done:
            raise StopAsyncIteration
        try:
            if self._cm is None:
                cm = self._client._stream("GET", self._path, self._params)
                resp = await cm.__aenter__()
                self._cm = cm
                self._chunks = resp.aiter_bytes()
            if self._payload is not None:
                async for _ in self._payload:  # skip the unread rest of the last large record
                    pass
                self._payload = None
            ev = await self._event()
            kind = ev[0]
            if kind == EV_RECORD:
                h = ev[1]
                return AsyncRecord(h.ts, h.content_type, h.labels, h.size, ev[2])
            if kind == EV_HEAD:
                h = ev[1]
                self._payload = self._stream_payload()
                return AsyncRecord(h.ts, h.content_type, h.labels, h.size, None, self._payload)
            if kind == EV_END:
                await self.aclose()
                raise StopAsyncIteration
            raise TsblobError(f"unexpected frame event {kind} between records", code="protocol")
        except BaseException:
            await self.aclose()
            raise


class AsyncClient:
    """The asyncio twin of :class:`tsblob.Client` (same arguments, same methods, awaited).
    ``async with AsyncClient() as db: ...`` closes its connections at the end."""

    def __init__(self, url: str = c.DEFAULT_URL, token: Optional[str] = None,
                 timeout: Optional[float] = c.DEFAULT_TIMEOUT, *, eager_limit: int = c.DEFAULT_EAGER_LIMIT,
                 batch_max_bytes: int = c.DEFAULT_BATCH_BYTES, batch_max_records: int = c.DEFAULT_BATCH_RECORDS,
                 **httpx_options: Any) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.eager_limit = eager_limit
        self.batch_max_bytes = batch_max_bytes
        self.batch_max_records = batch_max_records
        self._http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout, **httpx_options)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    close = aclose

    def __repr__(self) -> str:
        return f"AsyncClient({self.url!r})"

    # -- plumbing ------------------------------------------------------------------------

    async def _send(self, method: str, path: str, params: Optional[c.Params] = None, *, json: Any = None,
                    content: Any = None, headers: Optional[Dict[str, str]] = None) -> httpx.Response:
        try:
            resp = await self._http.request(method, path, params=params or None, json=json, content=content,
                                            headers=headers)
        except httpx.HTTPError as e:
            raise transport_error(e) from e
        if resp.status_code >= 400:
            raise error_from_response_body(resp.status_code, resp.content)
        return resp

    @asynccontextmanager
    async def _stream(self, method: str, path: str, params: Optional[c.Params] = None) -> AsyncIterator[httpx.Response]:
        try:
            async with self._http.stream(method, path, params=params or None) as resp:
                if resp.status_code >= 400:
                    raise error_from_response_body(resp.status_code, await resp.aread())
                yield resp
        except httpx.HTTPError as e:
            raise transport_error(e) from e

    # -- service -------------------------------------------------------------------------

    async def health(self) -> Health:
        d = (await self._send("GET", "/health")).json()
        return Health(status=str(d.get("status", "")), version=str(d.get("version", "")))

    async def info(self) -> ServerInfo:
        return ServerInfo.from_json((await self._send("GET", f"{c.API}/info")).json())

    # -- buckets -------------------------------------------------------------------------

    async def create_bucket(self, name: str, *, quota_type: Optional[str] = None, quota_size: Optional[int] = None,
                            max_block_size: Optional[int] = None, max_block_records: Optional[int] = None,
                            compression: Optional[str] = None, exist_ok: bool = False) -> Bucket:
        path = c.bucket_path(name)
        body = c.settings_json(quota_type, quota_size, max_block_size, max_block_records, compression)
        try:
            return Bucket.from_json((await self._send("POST", path, json=body)).json())
        except TsblobError as e:
            if exist_ok and e.code == "bucket_exists":
                return await self.get_bucket(name)
            raise

    async def get_bucket(self, name: str) -> Bucket:
        return Bucket.from_json((await self._send("GET", c.bucket_path(name))).json())

    async def list_buckets(self) -> List[Bucket]:
        doc = (await self._send("GET", f"{c.API}/b")).json()
        return [Bucket.from_json(b) for b in doc.get("buckets", [])]

    async def update_bucket(self, name: str, *, quota_type: Optional[str] = None, quota_size: Optional[int] = None,
                            max_block_size: Optional[int] = None, max_block_records: Optional[int] = None,
                            compression: Optional[str] = None) -> Bucket:
        body = c.settings_json(quota_type, quota_size, max_block_size, max_block_records, compression)
        return Bucket.from_json((await self._send("PUT", c.bucket_path(name), json=body)).json())

    async def remove_bucket(self, name: str) -> None:
        await self._send("DELETE", c.bucket_path(name))

    # -- entries -------------------------------------------------------------------------

    async def get_entry(self, bucket: str, entry: str) -> EntryInfo:
        return EntryInfo.from_json((await self._send("GET", c.entry_path(bucket, entry) + "/info")).json())

    async def remove_entry(self, bucket: str, entry: str) -> None:
        await self._send("DELETE", c.entry_path(bucket, entry))

    # -- records -------------------------------------------------------------------------

    async def write(self, bucket: str, entry: str, data: AsyncData, ts: Optional[Timestamp] = None,
                    labels: Optional[Mapping[str, str]] = None, content_type: Optional[str] = None, *,
                    size: Optional[int] = None) -> int:
        """See :meth:`tsblob.Client.write`; ``data`` may also be an async iterator of bytes."""
        path = c.entry_path(bucket, entry)
        content, length = prepare_async_body(data, size)
        headers = c.write_headers(content_type, labels, length)
        resp = await self._send("POST", path, c.ts_params(ts), content=content, headers=headers)
        return int(resp.json()["ts"])

    async def write_batch(self, bucket: str, entry: str, records: Iterable[c.BatchItem]) -> BatchResult:
        """See :meth:`tsblob.Client.write_batch`."""
        path = c.entry_path(bucket, entry) + "/batch"
        result = BatchResult()
        headers = {"content-type": MEDIA_TYPE}
        for body, _count in c.iter_batches(records, self.batch_max_bytes, self.batch_max_records):
            result._add((await self._send("POST", path, content=body, headers=headers)).json())
        return result

    async def read(self, bucket: str, entry: str, ts: Optional[Timestamp] = None) -> AsyncRecord:
        resp = await self._send("GET", c.entry_path(bucket, entry), c.ts_params(ts))
        t, ct, labels, _ = c.info_from_headers(resp.headers)
        data = resp.content
        return AsyncRecord(t, ct, labels, len(data), data)

    @asynccontextmanager
    async def read_stream(self, bucket: str, entry: str, ts: Optional[Timestamp] = None) -> AsyncIterator[AsyncRecord]:
        """``async with db.read_stream(b, e, ts) as rec: async for chunk in rec.aiter_chunks()``."""
        async with self._stream("GET", c.entry_path(bucket, entry), c.ts_params(ts)) as resp:
            t, ct, labels, size = c.info_from_headers(resp.headers)
            yield AsyncRecord(t, ct, labels, size, None, resp.aiter_bytes())

    async def head(self, bucket: str, entry: str, ts: Optional[Timestamp] = None) -> RecordInfo:
        resp = await self._send("HEAD", c.entry_path(bucket, entry), c.ts_params(ts))
        return RecordInfo(*c.info_from_headers(resp.headers))

    def query(self, bucket: str, entry: str, start: Optional[Timestamp] = None, stop: Optional[Timestamp] = None,
              labels: Optional[Mapping[str, str]] = None, limit: Optional[int] = None, reverse: bool = False, *,
              exclude: Optional[Mapping[str, str]] = None, has: Optional[Sequence[str]] = None,
              missing: Optional[Sequence[str]] = None) -> AsyncQueryIterator:
        """See :meth:`tsblob.Client.query`; use with ``async for``."""
        params = c.query_params(start, stop, labels, exclude, has, missing, limit, reverse)
        return AsyncQueryIterator(self, c.entry_path(bucket, entry) + "/query", params)

    async def update_labels(self, bucket: str, entry: str, ts: Timestamp,
                            labels: Mapping[str, Optional[str]]) -> RecordInfo:
        resp = await self._send("PATCH", c.entry_path(bucket, entry), c.ts_params(ts), json=c.labels_patch(labels))
        return RecordInfo.from_json(resp.json())

    async def remove(self, bucket: str, entry: str, ts: Optional[Timestamp] = None, *,
                     start: Optional[Timestamp] = None, stop: Optional[Timestamp] = None) -> int:
        params = c.range_params(ts, start, stop)
        return int((await self._send("DELETE", c.entry_path(bucket, entry), params)).json().get("removed", 0))

    # -- tokens --------------------------------------------------------------------------

    async def create_token(self, name: str, *, full_access: bool = False, read: Sequence[str] = (),
                           write: Sequence[str] = ()) -> str:
        body = {"full_access": full_access, "read": list(read), "write": list(write)}
        doc = (await self._send("POST", f"{c.API}/tokens/{quote(name, safe='')}", json=body)).json()
        return str(doc["value"])

    async def list_tokens(self) -> List[Token]:
        doc = (await self._send("GET", f"{c.API}/tokens")).json()
        return [Token.from_json(t) for t in doc.get("tokens", [])]

    async def remove_token(self, name: str) -> None:
        await self._send("DELETE", f"{c.API}/tokens/{quote(name, safe='')}")

    async def me(self) -> Token:
        return Token.from_json((await self._send("GET", f"{c.API}/me")).json())
