"""The asyncio client: the same methods as :class:`tsblob.Client`, awaited.

Built on ``aiohttp`` and the same request building (:mod:`tsblob._common`) and frame parser
(:mod:`tsblob._framing`) as the sync client. ``query()`` is not a coroutine: it returns an
async iterator, so ``async for rec in db.query(...)`` reads naturally.

Why aiohttp and not httpx: measured here, the same 1 KB write to ``tsblob serve`` took
2.7 ms through ``httpx.AsyncClient`` (anyio and httpcore layers) and 0.58 ms through
aiohttp, whose HTTP parser is compiled (``bench/transport_overhead.py``); the asyncio client
would otherwise be the slowest part of every write.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import (Any, AsyncIterable, AsyncIterator, BinaryIO, Dict, Iterable, List, Mapping, Optional,
                    Sequence, Tuple, Union)
from urllib.parse import quote

import aiohttp
from yarl import URL

from . import _common as c
from ._client import file_size, parse_json
from ._errors import ProtocolError, TransportError, TsblobError, error_from_response_body
from ._http import Response, transport_error
from ._framing import EV_END, EV_HEAD, EV_HEARTBEAT, EV_RECORD, MEDIA_TYPE, FrameParser
from ._models import (AsyncRecord, BatchResult, Bucket, EntryInfo, Health, Histogram, RecordInfo, ServerInfo, Token)
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
    """(body for aiohttp, Content-Length or None)."""
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


_AIO_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)
READ_BUFSIZE = 1 << 20
_JSON = {"content-type": "application/json"}


async def aiter_response(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The body as it arrives (aiohttp pauses the socket when its buffer is full, so a slow
    consumer does not make it grow)."""
    expected = resp.content_length if "chunked" not in resp.headers.get("transfer-encoding", "") else None
    got = 0
    try:
        async for chunk in resp.content.iter_any():
            got += len(chunk)
            yield chunk
    except _AIO_ERRORS as e:
        raise transport_error(e, "reading the answer") from e
    if expected is not None and got != expected:
        raise TransportError(f"the connection closed after {got} of {expected} bytes of the answer",
                             code="transport")


def lower_headers(resp: aiohttp.ClientResponse) -> List[Tuple[str, str]]:
    return [(k.lower(), v) for k, v in resp.headers.items()]


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
                if ev[0] == EV_HEARTBEAT:  # a live tail is idle: nothing to hand out
                    continue
                return ev
            assert self._chunks is not None
            try:
                data = await self._chunks.__anext__()
            except StopAsyncIteration:
                parser.eof()
                raise
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
                self._chunks = aiter_response(resp)
            if self._payload is not None:
                async for _ in self._payload:  # skip the unread rest of the last large record
                    pass
                self._payload = None
            ev = await self._event()
            kind = ev[0]
            if kind == EV_RECORD:
                h = ev[1]
                return AsyncRecord(h.ts, h.content_type, h.labels, h.size, ev[2], None, h.entry)
            if kind == EV_HEAD:
                h = ev[1]
                self._payload = self._stream_payload()
                return AsyncRecord(h.ts, h.content_type, h.labels, h.size, None, self._payload, h.entry)
            if kind == EV_END:
                assert self._chunks is not None
                async for rest in self._chunks:  # the HTTP end of the body: keeps the connection
                    if rest:
                        raise ProtocolError("the server sent bytes after the end of the record stream")
                await self.aclose()
                raise StopAsyncIteration
            raise TsblobError(f"unexpected frame event {kind} between records", code="protocol")
        except BaseException:
            await self.aclose()
            raise


class AsyncClient:
    """The asyncio twin of :class:`tsblob.Client` (same arguments, same methods, awaited).
    ``async with AsyncClient() as db: ...`` closes its connections at the end. The
    connection pool (``pool_size`` connections at most) is opened on first use, inside the
    running event loop."""

    def __init__(self, url: str = c.DEFAULT_URL, token: Optional[str] = None,
                 timeout: Optional[float] = c.DEFAULT_TIMEOUT, *, eager_limit: int = c.DEFAULT_EAGER_LIMIT,
                 batch_max_bytes: int = c.DEFAULT_BATCH_BYTES, batch_max_records: int = c.DEFAULT_BATCH_RECORDS,
                 pool_size: int = 100, ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self.url = url.rstrip("/")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {url!r} must look like http://host:port or https://host:port")
        self.eager_limit = eager_limit
        self.batch_max_bytes = batch_max_bytes
        self.batch_max_records = batch_max_records
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        self._pool_size = pool_size
        self._ssl = ssl_context
        self._session: Optional[aiohttp.ClientSession] = None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    close = aclose

    def __repr__(self) -> str:
        return f"AsyncClient({self.url!r})"

    # -- plumbing ------------------------------------------------------------------------

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._pool_size, ssl=self._ssl if self._ssl else True)
            # A larger read buffer than aiohttp's 64 KiB lets large payloads stream without pausing
            # the socket every 128 KiB; memory stays bounded by twice this size.
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout, connector=connector,
                                                  read_bufsize=READ_BUFSIZE)
        return self._session

    def _url(self, path: str, params: Optional[c.Params]) -> URL:
        return URL(self.url + c.target(path, params), encoded=True)

    async def _send(self, method: str, path: str, params: Optional[c.Params] = None, *, json_body: Any = None,
                    content: Any = None, headers: Optional[Dict[str, str]] = None) -> Response:
        if json_body is not None:
            content, headers = json.dumps(json_body).encode(), _JSON
        try:
            async with self._sess().request(method, self._url(path, params), data=content, headers=headers) as r:
                resp = Response(r.status, lower_headers(r), await r.read())
        except _AIO_ERRORS as e:
            raise transport_error(e, f"{method} {path}") from e
        if resp.status >= 400:
            raise error_from_response_body(resp.status, resp.body)
        return resp

    async def _json(self, method: str, path: str, params: Optional[c.Params] = None, *, json_body: Any = None,
                    content: Any = None, headers: Optional[Dict[str, str]] = None) -> Any:
        return parse_json(await self._send(method, path, params, json_body=json_body, content=content,
                                           headers=headers))

    @asynccontextmanager
    async def _stream(self, method: str, path: str, params: Optional[c.Params] = None
                      ) -> AsyncIterator[aiohttp.ClientResponse]:
        try:
            async with self._sess().request(method, self._url(path, params)) as resp:
                if resp.status >= 400:
                    raise error_from_response_body(resp.status, await resp.read())
                yield resp
        except _AIO_ERRORS as e:
            raise transport_error(e, f"{method} {path}") from e

    # -- service -------------------------------------------------------------------------

    async def health(self) -> Health:
        d = (await self._json("GET", "/health"))
        return Health(status=str(d.get("status", "")), version=str(d.get("version", "")))

    async def info(self) -> ServerInfo:
        return ServerInfo.from_json((await self._json("GET", f"{c.API}/info")))

    # -- buckets -------------------------------------------------------------------------

    async def create_bucket(self, name: str, *, quota_type: Optional[str] = None, quota_size: Optional[int] = None,
                            max_block_size: Optional[int] = None, max_block_records: Optional[int] = None,
                            compression: Optional[str] = None, exist_ok: bool = False) -> Bucket:
        path = c.bucket_path(name)
        body = c.settings_json(quota_type, quota_size, max_block_size, max_block_records, compression)
        try:
            return Bucket.from_json((await self._json("POST", path, json_body=body)))
        except TsblobError as e:
            if exist_ok and e.code == "bucket_exists":
                return await self.get_bucket(name)
            raise

    async def get_bucket(self, name: str) -> Bucket:
        return Bucket.from_json((await self._json("GET", c.bucket_path(name))))

    async def list_buckets(self) -> List[Bucket]:
        doc = (await self._json("GET", f"{c.API}/b"))
        return [Bucket.from_json(b) for b in doc.get("buckets", [])]

    async def update_bucket(self, name: str, *, quota_type: Optional[str] = None, quota_size: Optional[int] = None,
                            max_block_size: Optional[int] = None, max_block_records: Optional[int] = None,
                            compression: Optional[str] = None) -> Bucket:
        body = c.settings_json(quota_type, quota_size, max_block_size, max_block_records, compression)
        return Bucket.from_json((await self._json("PUT", c.bucket_path(name), json_body=body)))

    async def remove_bucket(self, name: str) -> None:
        await self._send("DELETE", c.bucket_path(name))

    # -- entries -------------------------------------------------------------------------

    async def get_entry(self, bucket: str, entry: str) -> EntryInfo:
        return EntryInfo.from_json((await self._json("GET", c.entry_path(bucket, entry) + "/info")))

    async def histogram(self, bucket: str, entry: str, start: Optional[Timestamp] = None,
                  stop: Optional[Timestamp] = None, step: Optional[Union[int, timedelta]] = None) -> Histogram:
        """Records and payload bytes per time step of an entry over ``[start, stop)`` (default: the
        whole entry), from the server's index (no payload read). ``step``: µs or a timedelta;
        default about 200 steps; at most 10,000 steps (more is a :class:`BadRequest`)."""
        params = c.histogram_params(start, stop, step)
        return Histogram.from_json(await self._json("GET", c.entry_path(bucket, entry) + "/histogram", params))

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
        return int((await self._json("POST", path, c.ts_params(ts), content=content, headers=headers))["ts"])

    async def write_batch(self, bucket: str, entry: str, records: Iterable[c.BatchItem]) -> BatchResult:
        """See :meth:`tsblob.Client.write_batch`."""
        path = c.entry_path(bucket, entry) + "/batch"
        result = BatchResult()
        headers = {"content-type": MEDIA_TYPE}
        for body, _count in c.iter_batches(records, self.batch_max_bytes, self.batch_max_records):
            result._add((await self._json("POST", path, content=body, headers=headers)))
        return result

    async def read(self, bucket: str, entry: str, ts: Optional[Timestamp] = None) -> AsyncRecord:
        resp = await self._send("GET", c.entry_path(bucket, entry), c.ts_params(ts))
        t, ct, labels, _ = c.info_from_headers(resp.headers)
        return AsyncRecord(t, ct, labels, len(resp.body), resp.body)

    @asynccontextmanager
    async def read_stream(self, bucket: str, entry: str, ts: Optional[Timestamp] = None) -> AsyncIterator[AsyncRecord]:
        """``async with db.read_stream(b, e, ts) as rec: async for chunk in rec.aiter_chunks()``."""
        async with self._stream("GET", c.entry_path(bucket, entry), c.ts_params(ts)) as resp:
            t, ct, labels, size = c.info_from_headers(lower_headers(resp))
            yield AsyncRecord(t, ct, labels, size, None, aiter_response(resp))

    async def head(self, bucket: str, entry: str, ts: Optional[Timestamp] = None) -> RecordInfo:
        resp = await self._send("HEAD", c.entry_path(bucket, entry), c.ts_params(ts))
        return RecordInfo(*c.info_from_headers(resp.headers))

    def query(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None,
              stop: Optional[Timestamp] = None,
              labels: Optional[Mapping[str, str]] = None, limit: Optional[int] = None, reverse: bool = False, *,
              exclude: Optional[Mapping[str, str]] = None, has: Optional[Sequence[str]] = None,
              missing: Optional[Sequence[str]] = None, when: Optional[Mapping[str, Any]] = None,
              strict: bool = False, meta: bool = False,
              entries: Optional[Sequence[str]] = None) -> Union[AsyncQueryIterator, AsyncIterator[RecordInfo]]:
        """See :meth:`tsblob.Client.query`; use with ``async for``."""
        params = c.query_params(start, stop, labels, exclude, has, missing, limit, reverse, when, strict, meta)
        path = c.query_path(bucket, entry, entries, params)
        if meta:
            return self._iter_meta(path, params)
        return AsyncQueryIterator(self, path, params)

    async def _iter_meta(self, path: str, params: c.Params) -> AsyncIterator[RecordInfo]:
        async with self._stream("GET", path, params) as resp:
            rest = b""
            async for chunk in aiter_response(resp):
                lines, rest = c.split_lines(rest, chunk)
                for line in lines:
                    info = c.meta_line(line)
                    if info is not None:
                        yield info
            if rest.strip():
                info = c.meta_line(rest)
                if info is not None:
                    yield info

    async def tail(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None, *,
                   when: Optional[Mapping[str, Any]] = None, strict: bool = False, meta: bool = False,
                   heartbeat: Optional[int] = None, settle_ms: Optional[int] = None,
                   retries: int = c.TAIL_RETRIES, backoff: float = c.TAIL_BACKOFF,
                   entries: Optional[Sequence[str]] = None) -> AsyncIterator[Any]:
        """See :meth:`tsblob.Client.tail`; use with ``async for`` (``await gen.aclose()`` or
        breaking out of the loop stops it)."""
        extra: c.Params = []
        path = c.query_path(bucket, entry, entries, extra)
        cursor = None if start is None else c.to_micros(start)
        failures = 0
        while True:
            params = c.tail_params(cursor, when, strict, meta, heartbeat, settle_ms) + extra
            it: Any = self._iter_meta(path, params) if meta else AsyncQueryIterator(self, path, params)
            try:
                async for rec in it:
                    failures = 0
                    cursor = rec.timestamp + 1
                    yield rec
                return  # the stream ended: its limit was reached
            except (TransportError, ProtocolError):
                failures += 1
                if failures > retries:
                    raise
            finally:
                await it.aclose()
            await asyncio.sleep(c.tail_delay(failures, backoff))

    async def remove_query(self, bucket: str, entry: str, start: Optional[Timestamp] = None,
                           stop: Optional[Timestamp] = None, *, when: Optional[Mapping[str, Any]] = None,
                           strict: bool = False, limit: Optional[int] = None) -> int:
        """See :meth:`tsblob.Client.remove_query`."""
        params = c.query_params(start, stop, None, None, None, None, limit, False, when, strict)
        doc = await self._json("DELETE", c.entry_path(bucket, entry) + "/query", params)
        return int(doc.get("removed", 0))

    async def update_labels(self, bucket: str, entry: str, ts: Timestamp,
                            labels: Mapping[str, Optional[str]]) -> RecordInfo:
        doc = await self._json("PATCH", c.entry_path(bucket, entry), c.ts_params(ts),
                               json_body=c.labels_patch(labels))
        return RecordInfo.from_json(doc)

    async def remove(self, bucket: str, entry: str, ts: Optional[Timestamp] = None, *,
                     start: Optional[Timestamp] = None, stop: Optional[Timestamp] = None) -> int:
        params = c.range_params(ts, start, stop)
        return int((await self._json("DELETE", c.entry_path(bucket, entry), params)).get("removed", 0))

    # -- tokens --------------------------------------------------------------------------

    async def create_token(self, name: str, *, full_access: bool = False, read: Sequence[str] = (),
                           write: Sequence[str] = ()) -> str:
        body = {"full_access": full_access, "read": list(read), "write": list(write)}
        doc = (await self._json("POST", f"{c.API}/tokens/{quote(name, safe='')}", json_body=body))
        return str(doc["value"])

    async def list_tokens(self) -> List[Token]:
        doc = (await self._json("GET", f"{c.API}/tokens"))
        return [Token.from_json(t) for t in doc.get("tokens", [])]

    async def remove_token(self, name: str, disable_auth: bool = False) -> None:
        """Removes a stored token. Removing the last one of a server without an admin token
        switches authentication off, so the server refuses it (409 ``last_token``) unless
        ``disable_auth=True``."""
        params: c.Params = [("disable_auth", "true")] if disable_auth else []
        await self._send("DELETE", f"{c.API}/tokens/{quote(name, safe='')}", params or None)

    async def me(self) -> Token:
        return Token.from_json((await self._json("GET", f"{c.API}/me")))

    # -- replication ---------------------------------------------------------------------

    async def put_replication(self, name: str, src_bucket: str, dst_url: str, dst_bucket: str, *,
                              dst_token: Optional[str] = None, entries: Sequence[str] = (),
                              when: Optional[Mapping[str, Any]] = None, mode: str = "enabled",
                              from_ts: Optional[int] = None) -> Dict[str, Any]:
        body = c.replication_body(src_bucket, dst_url, dst_bucket, dst_token, entries, when, mode, from_ts)
        return dict(await self._json("PUT", c.replication_path(name), json_body=body))

    async def get_replication(self, name: str) -> Dict[str, Any]:
        return dict(await self._json("GET", c.replication_path(name)))

    async def list_replications(self) -> List[Dict[str, Any]]:
        return list((await self._json("GET", f"{c.API}/replications")).get("replications", []))

    async def remove_replication(self, name: str) -> None:
        await self._send("DELETE", c.replication_path(name))

