"""The client, written once: this asyncio version is the source, and the sync one
(``tsblob/_sync/client.py``: ``Client``, ``QueryIterator``, ``Record``) is generated from it
by unasync when the package is built (``client-py/hatch_build.py``): ``async``/``await``
removed, ``Async*`` names and ``_aio`` (aiohttp) replaced by their sync twins and ``_http``
(``http.client``). Edit this file, never the generated one; ``tests/test_packaging.py``
fails when the generated file is stale.

Everything that differs between the two clients lives in the transports (``_aio.py``,
``_http.py``: sending, streaming bodies, sleeping, what ``Record.data`` may do); request
building and answer parsing live in ``_common.py`` (no I/O). Docstrings here say nothing
of ``await`` so that they read right in both clients.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import zlib
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import (TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, Iterable, List, Literal, Mapping, Optional, Sequence,
                    Tuple, TypeVar, Union, cast, overload)
from urllib.parse import quote

from .. import _common as c
from .._aio import POOL_SIZE, AsyncTransport, FileBase, Stream, load_rest, prepare_body, sleep
from .._errors import (InvalidInput, ProtocolError, TimestampExists, TransportError, TsblobError,
                       error_from_response_body)
from .._framing import EV_END, EV_HEAD, EV_HEARTBEAT, EV_RECORD, EV_SKIPPED, MEDIA_TYPE, FrameParser
from .. import _frames
from .._models import (BatchResult, Bucket, EntryInfo, Health, Histogram, LifecycleRule, RecordInfo, ServerInfo,
                      SkippedRecord, Token)
from .._timestamps import Timestamp, to_micros

if TYPE_CHECKING:
    import numpy.typing
    import pandas
from .handles import AsyncBucketHandle

__all__ = ["AsyncClient", "AsyncQueryIterator", "AsyncRecord"]

log = logging.getLogger("tsblob")
"""Retries and resumptions are logged here (WARNING), with what failed and the wait."""

Progress = Callable[[int, int], Any]
"""``progress(bytes done, bytes in all)``, called after each chunk of a download."""
Item = TypeVar("Item", bound=RecordInfo)
"""What a query iterator hands out: records (:class:`Record`), or :class:`RecordInfo` with ``meta=True``."""


class AsyncRecord(RecordInfo, FileBase):
    """A record: its metadata (see :class:`RecordInfo`) and its payload, readable as a binary
    file object (``read(n)``, ``readinto``, ``seek``/``tell`` when loaded), so that
    ``shutil.copyfileobj(record, f)``, ``PIL.Image.open(record)`` or ``numpy.load(record)``
    take it as it is.

    Small records arrive with their payload (``loaded``: ``data`` is ready, the record is
    seekable). A large record (``read_stream``, or a query item above the client's
    ``eager_limit``) streams its payload from the open answer: read it with ``read(n)``,
    ``iter_chunks()`` or ``download(path)`` (bounded memory), before the query moves on (the
    rest is skipped then). ``data`` loads what is left whole (the sync client reads it then;
    the async one needs ``read()`` first).
    """

    __slots__ = ("_data", "_source", "_pos", "_rest", "_roff", "_closed")

    def __init__(self, timestamp: int, content_type: str, labels: Dict[str, str], size: int,
                 data: Optional[bytes] = None, source: Optional[AsyncIterator[bytes]] = None,
                 entry: Optional[str] = None) -> None:
        super().__init__(timestamp, content_type, labels, size, entry)
        self._data = data
        self._pos = 0
        self._closed = False
        if data is None:  # a streamed payload (set only then: a query makes many records)
            self._source = source
            self._rest = b""
            self._roff = 0

    @property
    def loaded(self) -> bool:
        """True when ``data`` is in memory (no network read needed)."""
        return self._data is not None

    @property
    def data(self) -> bytes:
        """The whole payload (a streamed record is read to its end first, from its start)."""
        if self._data is None:
            self._data = load_rest(self)
            self._pos = 0
        return self._data

    async def _pull(self, limit: int) -> bytes:
        """At most ``limit`` bytes of the payload from the current position (``b""`` at its end)."""
        if self._roff >= len(self._rest):
            if self._source is None:
                return b""
            try:
                self._rest = await self._source.__anext__()
            except StopAsyncIteration:
                self._source = None
                return b""
            self._roff = 0
        rest, off = self._rest, self._roff
        chunk = rest if (off == 0 and len(rest) <= limit) else rest[off:off + limit]
        self._roff = off + len(chunk)
        self._pos += len(chunk)
        return chunk

    async def read(self, size: Optional[int] = -1) -> bytes:
        """Up to ``size`` bytes from the current position (all that is left by default), as a
        file's ``read``; ``b""`` at the end."""
        if self._closed:
            raise ValueError("I/O operation on a closed record")
        if self._data is not None:
            end = len(self._data) if size is None or size < 0 else min(self._pos + size, len(self._data))
            start, self._pos = self._pos, max(self._pos, end)
            return self._data if (start == 0 and end == len(self._data)) else self._data[start:end]
        whole = self._pos == 0
        limit = -1 if size is None or size < 0 else size
        parts: List[bytes] = []
        got = 0
        while limit < 0 or got < limit:
            chunk = await self._pull(c.STREAM_CHUNK if limit < 0 else limit - got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        out = parts[0] if len(parts) == 1 else b"".join(parts)
        if whole and limit < 0:
            self._data = out  # read whole: keep it for data (and seeking)
        return out

    async def readinto(self, buffer: Any) -> int:
        """Reads into a writable buffer (``bytearray``, ``memoryview``); returns the bytes read."""
        view = memoryview(buffer).cast("B")
        data = await self.read(len(view))
        view[:len(data)] = data
        return len(data)

    async def aiter_chunks(self) -> AsyncIterator[bytes]:
        """The payload piece by piece as it comes off the network, from the current position
        (a loaded record: all of it, in one piece). A streamed record can be gone through once:
        a second pass raises."""
        if self._data is not None:
            yield self._data
            return
        if self._source is None and self._roff >= len(self._rest) and self._pos:
            raise InvalidInput("this record's payload was already read (a streamed record is gone through once): "
                               "read the record again", code="payload_consumed")
        while True:
            chunk = await self._pull(c.STREAM_CHUNK)
            if not chunk:
                return
            yield chunk

    async def download(self, path: Any, *, progress: Optional[Progress] = None) -> int:
        """Writes the payload (from the current position) into the file at ``path``, a chunk at
        a time, calling ``progress(bytes done, size)`` after each; returns the bytes written."""
        done = 0
        with open(path, "wb") as f:
            async for chunk in self.aiter_chunks():
                f.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, self.size)
        return done

    async def to_numpy(self, dtype: Any = None, shape: Union[None, int, Sequence[int]] = None
                       ) -> "numpy.typing.NDArray[Any]":
        """The payload as a numpy array (needs numpy: ``tsblob[pandas]``): a ``.npy`` payload
        as it was saved, anything else as raw values of ``dtype`` (default ``uint8``),
        reshaped to ``shape`` if given. A streamed record is read whole first."""
        data = self._data if self._data is not None else await self.read()
        return _frames.payload_array(data, dtype, shape)

    async def readline(self, size: Optional[int] = -1) -> bytes:
        """The payload up to and including the next ``b"\\n"`` (at most ``size`` bytes), as a
        file's ``readline``; ``b""`` at the end."""
        if self._closed:
            raise ValueError("I/O operation on a closed record")
        limit = -1 if size is None or size < 0 else size
        if self._data is not None:
            data, start = self._data, self._pos
            end = data.find(b"\n", start) + 1 or len(data)
            end = max(start, end if limit < 0 else min(end, start + limit))
            self._pos = end
            return data[start:end]
        parts: List[bytes] = []
        got = 0
        while limit < 0 or got < limit:
            chunk = await self._pull(c.STREAM_CHUNK if limit < 0 else limit - got)
            if not chunk:
                break
            nl = chunk.find(b"\n")
            if nl >= 0:
                back = len(chunk) - nl - 1  # handed back: the next read starts after the newline
                self._roff -= back
                self._pos -= back
                parts.append(chunk[:nl + 1])
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    async def readlines(self, hint: int = -1) -> List[bytes]:
        """The remaining lines of the payload (stops once ``hint`` bytes were read, if given)."""
        lines: List[bytes] = []
        got = 0
        while hint is None or hint <= 0 or got < hint:
            line = await self.readline()
            if not line:
                break
            lines.append(line)
            got += len(line)
        return lines

    def __aiter__(self) -> AsyncRecord:
        return self

    async def __anext__(self) -> bytes:
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line

    @property
    def mode(self) -> str:
        """``"rb"``: a record is a binary file open for reading."""
        return "rb"

    @property
    def name(self) -> str:
        """``<entry>@<timestamp>`` (the entry when known), as a file's name."""
        return f"{self.entry or ''}@{self.timestamp}"

    def fileno(self) -> int:
        """Raises ``io.UnsupportedOperation``: a record is no file descriptor."""
        raise io.UnsupportedOperation("a record has no file descriptor")

    def flush(self) -> None:
        """Does nothing (nothing is ever written)."""

    def isatty(self) -> bool:
        """False."""
        return False

    def write(self, data: Any) -> int:
        """Raises ``io.UnsupportedOperation``: records are never overwritten."""
        raise io.UnsupportedOperation("records are never overwritten: write a new record with the client")

    def writelines(self, lines: Any) -> None:
        """Raises ``io.UnsupportedOperation``: records are never overwritten."""
        raise io.UnsupportedOperation("records are never overwritten: write a new record with the client")

    def truncate(self, size: Optional[int] = None) -> int:
        """Raises ``io.UnsupportedOperation``: records are never overwritten."""
        raise io.UnsupportedOperation("records are never overwritten")

    def readable(self) -> bool:
        """True: a record is a file open for reading."""
        return True

    def writable(self) -> bool:
        """False: records are never overwritten."""
        return False

    def seekable(self) -> bool:
        """True when the payload is in memory (``loaded``); a streamed one only goes forward."""
        return self._data is not None

    def seek(self, offset: int, whence: int = 0) -> int:
        """Moves the position of a loaded record (``whence`` 0: from the start, 1: from the
        current position, 2: from the end); a streamed one raises ``io.UnsupportedOperation``."""
        if self._data is None:
            raise io.UnsupportedOperation(
                "a streamed record is not seekable: read it with read(), or load it first (data)")
        base = (0, self._pos, len(self._data))[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        """Bytes of the payload read so far (the position)."""
        return self._pos

    def close(self) -> None:
        """Ends reading (file protocol); what is left of a streamed payload is skipped by the
        query, or dropped with the connection of ``read_stream``."""
        self._closed = True

    @property
    def closed(self) -> bool:
        """True after ``close()``."""
        return self._closed

    def __enter__(self) -> "AsyncRecord":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncQueryIterator(AsyncIterator[Item]):
    """The records of a query (or a tail), parsed from the server's stream as they arrive.

    Use it in a ``for`` loop; use ``with`` (or ``close()``) to release the connection when you
    stop early. Records up to the client's ``eager_limit`` carry their ``data``; larger ones
    stream it and must be read before the next record (unread payload is skipped). Memory
    stays bounded however many records match.

    A dropped connection (or a ``502``/``503``/``504`` when reopening, or the ``busy`` error
    frame with which a stopping server ends its streams) does not end the iteration: the
    query is reopened from the last timestamp handed out, skipping the records already
    handed out there, with ``limit`` lowered by what was handed out, following the
    client's :class:`Retry` (failures in a row; a record handed out resets the count). A query
    with ``when`` resumes only until its first record (its aggregations would start over).

    A record whose stored bytes are damaged is skipped by the server, and the query goes on:
    once the iteration is over, ``skipped`` lists them (:class:`SkippedRecord`: entry,
    timestamp, error code; the first 1000 in all) and ``skipped_count`` counts them all. A
    live tail reports them each time it catches up: its reports add up, the list stops at
    1000 and the count goes on. ``meta=True`` reads no payload, so it never skips one.
    """

    skipped: List[SkippedRecord]
    """The damaged records the server skipped (filled in as its report arrives, before the end):
    the first 1000 at most (``tsblob._common.MAX_SKIPPED_LISTED``)."""
    skipped_count: int
    """How many records the server skipped as damaged (``>= len(skipped)``)."""

    def __init__(self, client: "AsyncClient", path: str, params: c.Params, *, meta: bool = False,
                 policy: Optional[c.Retry] = None, resumable: bool = True, endless: bool = False) -> None:
        self._client = client
        self._path = path
        self._params = params
        self._meta = meta
        self._policy = client.retry if policy is None else policy
        self._resumable = resumable
        self._endless = endless  # a tail without $limit: its answer never ends, but cut
        self._resume = c.Resume()
        self._stream: Optional[Stream] = None
        self._chunks: Optional[AsyncIterator[bytes]] = None
        self._parser: Any = None
        self._payload: Optional[AsyncIterator[bytes]] = None
        self._done = False
        self._failures = 0
        self.skipped = []
        self.skipped_count = 0

    def __aiter__(self) -> AsyncQueryIterator[Item]:
        return self

    async def __aenter__(self) -> AsyncQueryIterator[Item]:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def to_pandas(self) -> "pandas.DataFrame":
        """Runs the query to its end and returns the records' metadata as a pandas DataFrame
        (needs ``tsblob[pandas]``): ``ts`` (``datetime64[us, UTC]``), ``entry``, ``size``,
        ``content_type``, then one column per label key (``None`` where a record lacks it).
        Payloads are not kept: use ``meta=True`` to leave them on the server."""
        items: List[RecordInfo] = []
        async for item in self:
            items.append(RecordInfo(item.timestamp, item.content_type, item.labels, item.size, item.entry))
        return _frames.to_pandas(items)

    async def aclose(self) -> None:
        """Stops the query and gives the connection back (drops the rest of the stream)."""
        self._done = True
        await self._drop()

    async def _drop(self) -> None:
        stream, self._stream = self._stream, None
        self._chunks = None
        self._payload = None
        if stream is not None:
            await stream.aclose()

    async def _open(self) -> None:
        target = c.target(self._path, self._resume.params(self._params))
        self._stream = await self._client._request("GET", target, None, None, c.NO_RETRY, True)
        self._chunks = self._stream.chunks()
        self._parser = c.MetaParser() if self._meta else FrameParser(self._client.eager_limit)

    async def _feed(self) -> bool:
        """Feeds the next chunk to the parser; False at the end of the body."""
        assert self._chunks is not None
        try:
            data = await self._chunks.__anext__()
        except StopAsyncIteration:
            self._parser.eof()  # a record stream cut before its end frame raises here
            return False
        self._parser.feed(data)
        return True

    async def _stream_payload(self) -> AsyncIterator[bytes]:
        while True:
            ev = self._parser.next_event()
            if ev is None:
                if not await self._feed():
                    return
                continue
            yield ev[1]
            if ev[2]:
                return

    async def _next_item(self, ev: Any) -> Optional[RecordInfo]:
        """The next record of the open stream (from ``ev``, an event already taken from the
        parser, if not ``None``), or ``None`` at its end."""
        parser = self._parser
        while True:
            if ev is None:
                ev = parser.next_event()
            if ev is None:
                if not await self._feed():
                    if self._meta:
                        ev = parser.next_event()
                        if ev is None:
                            if self._endless:  # (NDJSON has no end line: only a cut ends a tail)
                                raise ProtocolError("the live tail's answer ended: the connection closed")
                            return None
                        return ev  # type: ignore[no-any-return]
                continue
            if self._meta:
                return ev  # type: ignore[no-any-return]
            kind = ev[0]
            if kind == EV_RECORD:
                h = ev[1]
                return AsyncRecord(h.ts, h.content_type, h.labels, h.size, ev[2], None, h.entry)
            if kind == EV_HEAD:
                h = ev[1]
                self._payload = self._stream_payload()
                return AsyncRecord(h.ts, h.content_type, h.labels, h.size, None, self._payload, h.entry)
            if kind == EV_HEARTBEAT:  # a live tail is idle: nothing to hand out
                ev = None
                continue
            if kind == EV_SKIPPED:  # damaged records the server skipped: the stream goes on
                # (a live tail's reports add up: the list keeps the first MAX_SKIPPED_LISTED in all)
                room = c.MAX_SKIPPED_LISTED - len(self.skipped)
                if room > 0:
                    self.skipped.extend(SkippedRecord.from_json(r) for r in ev[1][:room])
                self.skipped_count += ev[2]
                ev = None
                continue
            if kind == EV_END:
                # Read the HTTP end of the body too, so that the connection can be reused.
                assert self._chunks is not None
                async for rest in self._chunks:
                    if rest:
                        raise ProtocolError("the server sent bytes after the end of the record stream")
                return None
            raise ProtocolError(f"unexpected frame event {kind} between records")

    def _may_resume(self, e: TsblobError) -> bool:
        if not c.reopens(e, self._policy):
            return False
        if not self._resumable and self._resume.last is not None:
            return False
        return self._failures < self._policy.attempts

    async def __anext__(self) -> Item:
        while True:
            if self._done:
                raise StopAsyncIteration
            try:
                if self._stream is None:
                    await self._open()
                if self._payload is not None:
                    payload, self._payload = self._payload, None
                    async for _ in payload:  # skip what the caller did not read of the last record
                        pass
                # A record already in the parser's buffer is handed out without a coroutine
                # (most records of a query: a network read brings many).
                ev = self._parser.next_event()
                if not self._meta and ev is not None and ev[0] == EV_RECORD:
                    h = ev[1]
                    item: Optional[RecordInfo] = AsyncRecord(h.ts, h.content_type, h.labels, h.size, ev[2], None,
                                                             h.entry)
                else:
                    item = await self._next_item(ev)
            except TsblobError as e:
                await self._drop()
                if not self._may_resume(e):
                    self._done = True
                    raise e._gave_up(self._failures)
                self._failures += 1
                delay = self._policy.delay(self._failures)
                log.warning("%s: %s; reopening from the last record in %.2f s (retry %d of %d)",
                            self._path, e, delay, self._failures, self._policy.attempts)
                await sleep(delay)
                continue
            except BaseException:
                await self.aclose()
                raise
            if item is None:
                await self.aclose()
                raise StopAsyncIteration
            if not self._resume.take(item.timestamp, item.entry):
                continue  # handed out before the connection dropped
            self._failures = 0
            return cast(Item, item)


class AsyncClient:
    """A tsblob client; ``with`` closes its connections at the end.

    ``url``: the server's base address (default ``$TSBLOB_URL``, else
    ``http://127.0.0.1:8686``); ``token``: a bearer token (default ``$TSBLOB_TOKEN``);
    ``timeout``: seconds for connecting and for each wait on the socket (not a whole
    transfer). ``retries``: a :class:`Retry` or a number of retries for idempotent calls
    (``0`` turns them off). ``eager_limit``: query records up to this many bytes come with
    ``data`` loaded, larger ones are streamed. ``batch_max_bytes``/``batch_max_records`` size
    the requests of ``write_batch``. ``pool_size``: connections kept for reuse.
    ``ssl_context`` is used for ``https://`` URLs (default: the system's CAs, and those of the
    PEM file ``$TSBLOB_CA`` names, as the CLI). A ``url`` that is no ``http://`` or
    ``https://`` URL raises :class:`InvalidInput`. One client may be shared (by threads for
    the sync client, by tasks for the async one).

    Handles: ``db.bucket("robot1").entry("cam/front")`` has the record methods with the
    bucket and entry filled in.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 timeout: Optional[float] = c.DEFAULT_TIMEOUT, *, retries: Union[int, c.Retry, None] = c.Retry(),
                 eager_limit: int = c.DEFAULT_EAGER_LIMIT, batch_max_bytes: int = c.DEFAULT_BATCH_BYTES,
                 batch_max_records: int = c.DEFAULT_BATCH_RECORDS, pool_size: int = POOL_SIZE,
                 ssl_context: Any = None) -> None:
        self.url = c.env_url(url)
        token = c.env_token(token)
        self.retry = c.retry_policy(retries)
        self.eager_limit = eager_limit
        self.batch_max_bytes = batch_max_bytes
        self.batch_max_records = batch_max_records
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._t = AsyncTransport(self.url, headers, timeout, pool_size, c.env_ssl_context(ssl_context, self.url))

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the idle connections; the client is not usable afterwards."""
        await self._t.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- plumbing ------------------------------------------------------------------------

    async def _request(self, method: str, target: str, body: Any, headers: Optional[Dict[str, str]],
                       policy: c.Retry, stream: bool, limit: Optional[int] = c.JSON_MAX) -> Any:
        """Sends a request, again after a connection error or a retriable status as ``policy``
        allows; returns the :class:`Response` (``stream``: the open :class:`Stream`), or raises
        the error the answer says (its ``attempts`` set). ``limit``: the most of the answer
        read (``None`` for a record's payload); an error answer is read up to
        ``c.ERROR_BODY_MAX``; a longer answer raises :class:`ProtocolError`."""
        attempt = 0
        while True:
            try:
                if stream:
                    s = await self._t.open(method, target, headers)
                    if s.status < 400:
                        return s
                    resp = c.Response(s.status, s.headers, await s.read(c.ERROR_BODY_MAX))
                    await s.aclose()
                else:
                    resp = await self._t.request(method, target, body, headers, limit)
                    if resp.status < 400:
                        resp.attempts = attempt
                        return resp
            except TransportError as e:
                if attempt >= policy.attempts:
                    raise e._gave_up(attempt)
                why = str(e)
            else:
                if resp.status not in policy.statuses or attempt >= policy.attempts:
                    raise error_from_response_body(resp.status, resp.body, resp.headers)._gave_up(attempt)
                why = f"the server answered {resp.status}"
            attempt += 1
            delay = policy.delay(attempt)
            log.warning("%s %s: %s; retry %d of %d in %.2f s", method, target.split("?")[0], why, attempt,
                        policy.attempts, delay)
            await sleep(delay)

    async def _send(self, method: str, path: str, params: Optional[c.Params] = None, *, json_body: Any = None,
                    content: Any = None, headers: Optional[Dict[str, str]] = None, retry: bool = False,
                    limit: Optional[int] = c.JSON_MAX) -> c.Response:
        if json_body is not None:
            content, headers = json.dumps(json_body).encode(), c.JSON_HEADERS
        policy = self.retry if retry else c.NO_RETRY
        resp: c.Response = await self._request(method, c.target(path, params), content, headers, policy, False, limit)
        return resp

    async def _json(self, method: str, path: str, params: Optional[c.Params] = None, *, json_body: Any = None,
                    content: Any = None, headers: Optional[Dict[str, str]] = None, retry: bool = False) -> Any:
        if json_body is not None:
            content, headers = json.dumps(json_body).encode(), c.JSON_HEADERS
        policy = self.retry if retry else c.NO_RETRY
        return c.parse_json(await self._request(method, c.target(path, params), content, headers, policy, False))

    async def _stored_crc_is(self, path: str, ts: int, payload: Any) -> bool:
        """True when the record stored at ``ts`` has ``payload``'s size and CRC-32 (read in
        chunks: bounded memory)."""
        stream = await self._request("GET", c.target(path, c.ts_params(ts)), None, None, self.retry, True)
        crc, size = 0, 0
        try:
            async for chunk in stream.chunks():
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
        finally:
            await stream.aclose()
        return size == len(payload) and crc == zlib.crc32(payload)

    # -- service -------------------------------------------------------------------------

    async def health(self) -> Health:
        """``GET /health`` (never needs a token)."""
        d = await self._json("GET", "/health", retry=True)
        def part(name: str) -> str:
            p = d.get(name)
            return str(p.get("status", "ok")) if isinstance(p, dict) else "ok"
        return Health(status=str(d.get("status", "")), version=str(d.get("version", "")), disk=part("disk"),
                      index=part("index"))

    async def info(self) -> ServerInfo:
        """Server version, uptime, bucket count, bytes used, sync policy."""
        return ServerInfo.from_json(await self._json("GET", f"{c.API}/info", retry=True))

    # -- buckets -------------------------------------------------------------------------

    def bucket(self, name: str) -> AsyncBucketHandle:
        """A handle on a bucket: ``db.bucket("robot1").write("cam", data)``; its ``entry(name)``
        gives an entry handle. No request is sent (see :class:`BucketHandle`)."""
        c.bucket_path(name)  # a bad name fails here, not at first use
        return AsyncBucketHandle(self, name)

    async def create_bucket(self, bucket: str, *, quota_type: Optional[str] = None,
                            quota_size: Optional[c.Size] = None, max_block_size: Optional[c.Size] = None,
                            max_block_records: Optional[int] = None, compression: Optional[str] = None,
                            max_age: Optional[c.Duration] = None, tier_local_max: Optional[c.Size] = None,
                            tier_after: Optional[c.Duration] = None, exist_ok: bool = False,
                            strict: bool = False) -> Bucket:
        """Creates a bucket; settings left out take the server's defaults. Sizes
        (``quota_size``, ``max_block_size``, ``tier_local_max``) are bytes or strings such as
        ``"24MiB"``/``"10GB"``; durations (``max_age``, ``tier_after``) are µs, a
        ``timedelta`` or strings such as ``"30d"``/``"90s"``; a bad one raises
        :class:`InvalidInput` (a ``ValueError``) before anything is sent.

        With ``exist_ok=True`` an existing bucket is returned as it is (its settings are not
        changed); if they differ from the settings asked for, a :class:`SettingsMismatch`
        warning says which (``strict=True``: raised as :class:`SettingsMismatchError`).
        """
        path = c.bucket_path(bucket)
        body = c.settings_json(quota_type, quota_size, max_block_size, max_block_records, compression, max_age,
                               tier_local_max, tier_after)
        try:
            return Bucket.from_json(await self._json("POST", path, json_body=body, retry=exist_ok))
        except TsblobError as e:
            if not (exist_ok and e.code == "bucket_exists"):
                raise
        found = await self.get_bucket(bucket)
        c.check_existing_settings(bucket, body, found.settings, strict)
        return found

    async def get_bucket(self, bucket: str) -> Bucket:
        """A bucket's settings, totals and entries."""
        return Bucket.from_json(await self._json("GET", c.bucket_path(bucket), retry=True))

    async def list_buckets(self) -> List[Bucket]:
        """Every bucket the token may read, with settings and totals."""
        doc = await self._json("GET", f"{c.API}/b", retry=True)
        return [Bucket.from_json(b) for b in doc.get("buckets", [])]

    async def update_bucket(self, bucket: str, *, quota_type: Optional[str] = None,
                            quota_size: Optional[c.Size] = None, max_block_size: Optional[c.Size] = None,
                            max_block_records: Optional[int] = None, compression: Optional[str] = None,
                            max_age: Optional[c.Duration] = None, tier_local_max: Optional[c.Size] = None,
                            tier_after: Optional[c.Duration] = None) -> Bucket:
        """Changes the given settings, leaves the others (units as in :meth:`create_bucket`;
        ``"none"`` turns ``max_age``, ``tier_local_max`` or ``tier_after`` off)."""
        body = c.settings_json(quota_type, quota_size, max_block_size, max_block_records, compression, max_age,
                               tier_local_max, tier_after)
        return Bucket.from_json(await self._json("PUT", c.bucket_path(bucket), json_body=body, retry=True))

    async def remove_bucket(self, bucket: str) -> None:
        """Removes a bucket and every record in it."""
        await self._send("DELETE", c.bucket_path(bucket))

    async def rename_bucket(self, bucket: str, new_name: str) -> Bucket:
        """Renames a bucket; its settings, entries and records stay. The new name must be free
        (:class:`Conflict` ``bucket_exists`` otherwise). Needs a full-access token."""
        return Bucket.from_json(await self._json("PUT", c.bucket_path(bucket) + "/rename",
                                                 json_body={"new_name": new_name}))

    # -- entries -------------------------------------------------------------------------

    async def get_entry(self, bucket: str, entry: str) -> EntryInfo:
        """An entry's record count, size and time span."""
        return EntryInfo.from_json(await self._json("GET", c.entry_path(bucket, entry) + "/info", retry=True))

    async def histogram(self, bucket: str, entry: str, start: Optional[Timestamp] = None,
                        stop: Optional[Timestamp] = None, *, step: Optional[Union[int, timedelta]] = None
                        ) -> Histogram:
        """Records and payload bytes per time step of an entry over ``[start, stop)`` (default: the
        whole entry), from the server's index (no payload read). ``step``: µs or a timedelta;
        default about 200 steps; at most 10,000 steps (more is a :class:`BadRequest`)."""
        params = c.histogram_params(start, stop, step)
        return Histogram.from_json(await self._json("GET", c.entry_path(bucket, entry) + "/histogram", params,
                                                    retry=True))

    async def remove_entry(self, bucket: str, entry: str) -> None:
        """Removes an entry and all its records."""
        await self._send("DELETE", c.entry_path(bucket, entry))

    async def rename_entry(self, bucket: str, entry: str, new_name: str) -> EntryInfo:
        """Renames an entry; its records, labels and timestamps stay. The new name must be free
        (:class:`Conflict` ``entry_exists`` otherwise)."""
        return EntryInfo.from_json(await self._json("PUT", c.entry_path(bucket, entry) + "/rename",
                                                    json_body={"new_name": new_name}))

    # -- attachments ---------------------------------------------------------------------

    async def write_attachments(self, bucket: str, entry: str, attachments: Mapping[str, Any]) -> Dict[str, int]:
        """Writes attachments of an entry: small JSON documents kept with it under a name
        (``{"schema": {"fps": 30}}``), never records. All or none; an attachment of the same
        name is replaced, and the entry is created if it does not exist. Returns each name's
        timestamp (µs). Each document is at most ``--max-attachment-size`` (64 KiB:
        :class:`PayloadTooLarge` ``attachment_too_large``), an entry holds at most
        ``--max-attachments`` (64: :class:`InvalidInput` ``too_many_attachments``)."""
        doc = await self._json("PUT", c.entry_path(bucket, entry) + "/attachments", json_body=dict(attachments))
        return {str(k): int(v) for k, v in doc["written"].items()}

    async def read_attachments(self, bucket: str, entry: str) -> Dict[str, Any]:
        """Every attachment of an entry, name → document (``{}`` when it has none;
        :class:`EntryNotFound` when the entry does not exist)."""
        return dict(await self._json("GET", c.entry_path(bucket, entry) + "/attachments"))

    async def read_attachment(self, bucket: str, entry: str, name: str) -> Any:
        """One attachment's document (:class:`AttachmentNotFound` when there is none of that
        name)."""
        return await self._json("GET", c.entry_path(bucket, entry) + "/attachments/" + quote(name, safe=""))

    async def remove_attachments(self, bucket: str, entry: str, names: Optional[Iterable[str]] = None) -> List[str]:
        """Removes the attachments named (a name the entry does not have is skipped), or all of
        them when ``names`` is ``None``. Returns the names removed."""
        params: Optional[c.Params] = None
        if names is not None:
            names = [names] if isinstance(names, str) else list(names)
            params = [("names", ",".join(names))]
        doc = await self._json("DELETE", c.entry_path(bucket, entry) + "/attachments", params)
        return [str(n) for n in doc["removed"]]

    # -- records -------------------------------------------------------------------------

    async def write(self, bucket: str, entry: str, data: Any, ts: Optional[Timestamp] = None, *,
                    labels: Optional[c.Labels] = None, content_type: Optional[str] = None,
                    size: Optional[int] = None) -> int:
        """Writes one record and returns its timestamp (µs).

        ``data``: bytes, a binary file (streamed from its current position) or an iterable of
        byte chunks (streamed; give ``size`` if you know it; the async client also takes an
        async iterator). ``ts``: see :func:`tsblob.to_micros` (µs int, float seconds,
        datetime, ISO string, numpy values, a timedelta from now); ``None`` lets the server
        assign "now". A timestamp that already exists raises :class:`TimestampExists`.

        Retried (see :class:`Retry`) when ``ts`` is given and ``data`` is bytes: a retry that
        finds the timestamp taken by a record with the same size and CRC counts as success
        (the first attempt had been stored, its answer lost).
        """
        path = c.entry_path(bucket, entry)
        params = c.ts_params(ts)
        content, length = prepare_body(data, size)
        headers = c.write_headers(content_type, labels, length)
        policy = self.retry if params and isinstance(content, (bytes, bytearray, memoryview)) else c.NO_RETRY
        try:
            resp = await self._request("POST", c.target(path, params), content, headers, policy, False)
            return int(c.parse_json(resp)["ts"])
        except TransportError as e:
            if not params and e.request_sent:
                e.message += ("; the record may have been stored (under a timestamp the server chose): a write "
                              "without ts= is never retried, since a retry could store it twice; give ts= to "
                              "make it retriable, or query the entry to see whether it arrived")
            raise
        except TimestampExists as e:
            t = int(params[0][1])
            if e.attempts and await self._stored_crc_is(path, t, content):
                return t
            raise

    async def write_batch(self, bucket: str, entry: str, records: Iterable[Any], *,
                          raise_errors: bool = True) -> BatchResult:
        """Writes many records, in requests of at most ``batch_max_bytes``/``batch_max_records``.

        ``records`` may be any iterable (a generator is consumed lazily, one request at a
        time) of bytes, ``(ts, data[, labels[, content_type]])`` tuples, dicts with ``data``
        and optional ``ts``/``labels``/``content_type``, or :class:`Record` objects. Returns
        one :class:`RecordResult` per record. When some records failed (a timestamp taken, a
        quota...) the others are stored and :class:`BatchError` is raised at the end, its
        ``result`` saying which; ``raise_errors=False`` returns the result instead.

        A request whose records all have timestamps is retried like :meth:`write` (a record
        found stored with the same size and CRC on a retry counts as written).
        """
        path = c.entry_path(bucket, entry) + "/batch"
        result = BatchResult()
        headers = {"content-type": MEDIA_TYPE}
        for body, spans in c.iter_batches(records, self.batch_max_bytes, self.batch_max_records):
            retry = all(ts is not None for ts, _, _ in spans)
            resp = await self._send("POST", path, content=body, headers=headers, retry=retry)
            doc = c.parse_json(resp)
            if resp.attempts:
                await self._settle_retried(c.entry_path(bucket, entry), doc, body, spans)
            result._add(doc)
            del body, resp  # the next body is built while this one would still be held
        if raise_errors:
            result.raise_for_errors()
        return result

    async def _settle_retried(self, path: str, doc: Any, body: bytearray, spans: List[Tuple[Any, int, int]]) -> None:
        """After a retried batch: a record refused as existing whose stored copy has the same
        size and CRC was stored by the earlier attempt; it counts as written."""
        results = doc.get("results") or []
        for i, r in enumerate(results):
            if i < len(spans) and r.get("error") and int(r.get("status", 0)) == 409:
                ts, off, n = spans[i]
                if ts is not None and await self._stored_crc_is(path, ts, memoryview(body)[off:off + n]):
                    results[i] = {"ts": ts, "status": 201}
                    doc["written"] = int(doc.get("written", 0)) + 1
                    doc["failed"] = int(doc.get("failed", 1)) - 1

    async def read(self, bucket: str, entry: str, ts: Optional[Timestamp] = None) -> AsyncRecord:
        """Reads one record whole (``ts=None``: the latest). For large payloads use
        :meth:`read_stream` or :meth:`download`."""
        # (a record's payload: read whole, however large, as asked; not bounded as JSON is)
        resp = await self._send("GET", c.entry_path(bucket, entry), c.ts_params(ts), retry=True, limit=None)
        t, ct, labels, _ = c.info_from_headers(resp.headers)
        return AsyncRecord(t, ct, labels, len(resp.body), resp.body)

    @asynccontextmanager
    async def read_stream(self, bucket: str, entry: str, ts: Optional[Timestamp] = None
                          ) -> AsyncIterator[AsyncRecord]:
        """Opens one record for streaming, as a context manager giving a :class:`Record` whose
        payload is read with ``read(n)``, ``iter_chunks()`` or ``download()``. Memory stays at
        one network chunk whatever the size."""
        target = c.target(c.entry_path(bucket, entry), c.ts_params(ts))
        stream = await self._request("GET", target, None, None, self.retry, True)
        try:
            t, ct, labels, size = c.info_from_headers(stream.headers)
            yield AsyncRecord(t, ct, labels, size, None, stream.chunks())
        finally:
            await stream.aclose()

    async def download(self, bucket: str, entry: str, path: Any, *, ts: Optional[Timestamp] = None,
                       progress: Optional[Progress] = None) -> RecordInfo:
        """Writes a record's payload (``ts=None``: the latest) into the file at ``path``,
        streamed, calling ``progress(bytes done, size)`` after each chunk; returns the
        record's metadata."""
        async with self.read_stream(bucket, entry, ts) as rec:
            await rec.download(path, progress=progress)
            return RecordInfo(rec.timestamp, rec.content_type, rec.labels, rec.size)

    async def head(self, bucket: str, entry: str, ts: Optional[Timestamp] = None) -> RecordInfo:
        """A record's metadata without its payload."""
        resp = await self._send("HEAD", c.entry_path(bucket, entry), c.ts_params(ts), retry=True)
        return RecordInfo(*c.info_from_headers(resp.headers))

    @overload
    def query(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None,
              stop: Optional[Timestamp] = None, *, eq: Optional[c.Labels] = None,
              ne: Optional[c.Labels] = None, has: Optional[Sequence[str]] = None,
              missing: Optional[Sequence[str]] = None, limit: Optional[int] = None, desc: bool = False,
              when: Optional[Mapping[str, Any]] = None, strict: bool = False, meta: Literal[False] = False,
              entries: Optional[Sequence[str]] = None, labels: Optional[c.Labels] = None,
              exclude: Optional[c.Labels] = None, reverse: Optional[bool] = None) -> AsyncQueryIterator[AsyncRecord]: ...

    @overload
    def query(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None,
              stop: Optional[Timestamp] = None, *, eq: Optional[c.Labels] = None,
              ne: Optional[c.Labels] = None, has: Optional[Sequence[str]] = None,
              missing: Optional[Sequence[str]] = None, limit: Optional[int] = None, desc: bool = False,
              when: Optional[Mapping[str, Any]] = None, strict: bool = False, meta: Literal[True],
              entries: Optional[Sequence[str]] = None, labels: Optional[c.Labels] = None,
              exclude: Optional[c.Labels] = None, reverse: Optional[bool] = None) -> AsyncQueryIterator[RecordInfo]: ...

    @overload
    def query(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None,
              stop: Optional[Timestamp] = None, *, eq: Optional[c.Labels] = None,
              ne: Optional[c.Labels] = None, has: Optional[Sequence[str]] = None,
              missing: Optional[Sequence[str]] = None, limit: Optional[int] = None, desc: bool = False,
              when: Optional[Mapping[str, Any]] = None, strict: bool = False, meta: bool = False,
              entries: Optional[Sequence[str]] = None, labels: Optional[c.Labels] = None,
              exclude: Optional[c.Labels] = None, reverse: Optional[bool] = None) -> AsyncQueryIterator[RecordInfo]: ...

    def query(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None,
              stop: Optional[Timestamp] = None, *, eq: Optional[c.Labels] = None,
              ne: Optional[c.Labels] = None, has: Optional[Sequence[str]] = None,
              missing: Optional[Sequence[str]] = None, limit: Optional[int] = None, desc: bool = False,
              when: Optional[Mapping[str, Any]] = None, strict: bool = False, meta: bool = False,
              entries: Optional[Sequence[str]] = None, labels: Optional[c.Labels] = None,
              exclude: Optional[c.Labels] = None, reverse: Optional[bool] = None) -> AsyncQueryIterator[Any]:
        """Records with ``start <= ts < stop`` (both optional), oldest first (``desc=True``:
        newest first), at most ``limit``. Label filters, combined with AND (the names of the
        HTTP API and the CLI): ``eq`` equal, ``ne`` not equal (or missing), ``has`` present,
        ``missing`` absent. ``when``: a condition in ReductStore's language, as a dict
        (``{"&score": {"$gt": 10}, "$each_t": "1s"}``, see docs/api.md); ``strict``: a
        comparison with a missing label raises instead of being false. (``labels``,
        ``exclude`` and ``reverse`` are the deprecated names of ``eq``, ``ne`` and ``desc``.)

        ``entries=["cams/*", "imu"]`` (instead of ``entry``) merges several entries of the
        bucket in timestamp order (names and globs: ``*`` within a segment, ``**`` across;
        ties in the order of the entries' names); each record's ``entry`` says where it
        belongs, and ``limit``/``when`` count over the merged stream.

        ``meta=True`` yields :class:`RecordInfo` (timestamp, size, content type, labels)
        without payloads. The request starts on the first ``next()``; a dropped connection is
        resumed (see :class:`QueryIterator`).
        """
        eq = c.renamed("labels", "eq", labels, eq)
        ne = c.renamed("exclude", "ne", exclude, ne)
        desc = bool(c.renamed("reverse", "desc", reverse, desc or None))
        params = c.query_params(start, stop, eq, ne, has, missing, limit, desc, when, strict, meta)
        path = c.query_path(bucket, entry, entries, params)
        return AsyncQueryIterator(self, path, params, meta=meta, resumable=when is None)

    async def export_mcap(self, bucket: str, entries: Union[str, Sequence[str]], start: Optional[Timestamp] = None,
                          stop: Optional[Timestamp] = None, path: Any = None, *,
                          when: Optional[Mapping[str, Any]] = None, strict: bool = False,
                          progress: Optional[Callable[[int], None]] = None) -> int:
        """Writes the records of ``entries`` (names and globs, as in :meth:`query`) with
        ``start <= ts < stop`` into the MCAP file at ``path``: each entry a channel, each record
        a message at its timestamp, labels on a ``<topic>#labels`` channel (the mapping is in
        docs/api.md, "MCAP export"). Streamed from the server (bounded memory), into
        ``path + ".part"`` renamed to ``path`` once complete, so an interrupted export leaves
        no file that looks whole. ``progress(bytes done)`` after each chunk; returns the
        bytes written."""
        if path is None:
            raise TypeError("export_mcap needs the path of the MCAP file to write")
        params = c.query_params(start, stop, None, None, None, None, None, False, when, strict, False)
        qpath = c.query_path(bucket, None, entries, params)
        params.append(("format", "mcap"))
        stream = await self._request("GET", c.target(qpath, params), None, None, self.retry, True)
        part = os.fspath(path) + ".part"
        done, tail = 0, b""
        try:
            with open(part, "wb") as f:
                async for chunk in stream.chunks():
                    f.write(chunk)
                    done += len(chunk)
                    tail = (tail + chunk)[-8:]
                    if progress is not None:
                        progress(done)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(part)
            raise
        finally:
            await stream.aclose()
        if tail != c.MCAP_MAGIC:
            with contextlib.suppress(OSError):
                os.remove(part)
            raise ProtocolError(f"the MCAP stream ended before the file's end ({done} bytes): export again",
                                code="truncated")
        os.replace(part, path)
        return done

    @overload
    def tail(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None, *,
             when: Optional[Mapping[str, Any]] = None, strict: bool = False, meta: Literal[False] = False,
             heartbeat: Optional[int] = None, settle_ms: Optional[int] = None,
             retries: int = c.TAIL_RETRIES, backoff: float = c.TAIL_BACKOFF,
             entries: Optional[Sequence[str]] = None) -> AsyncQueryIterator[AsyncRecord]: ...

    @overload
    def tail(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None, *,
             when: Optional[Mapping[str, Any]] = None, strict: bool = False, meta: Literal[True],
             heartbeat: Optional[int] = None, settle_ms: Optional[int] = None,
             retries: int = c.TAIL_RETRIES, backoff: float = c.TAIL_BACKOFF,
             entries: Optional[Sequence[str]] = None) -> AsyncQueryIterator[RecordInfo]: ...

    @overload
    def tail(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None, *,
             when: Optional[Mapping[str, Any]] = None, strict: bool = False, meta: bool = False,
             heartbeat: Optional[int] = None, settle_ms: Optional[int] = None,
             retries: int = c.TAIL_RETRIES, backoff: float = c.TAIL_BACKOFF,
             entries: Optional[Sequence[str]] = None) -> AsyncQueryIterator[RecordInfo]: ...

    def tail(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None, *,
             when: Optional[Mapping[str, Any]] = None, strict: bool = False, meta: bool = False,
             heartbeat: Optional[int] = None, settle_ms: Optional[int] = None,
             retries: int = c.TAIL_RETRIES, backoff: float = c.TAIL_BACKOFF,
             entries: Optional[Sequence[str]] = None) -> AsyncQueryIterator[Any]:
        """A live tail: the records from ``start`` on (everything stored without it), then
        each new one as it is written, oldest first, forever (or until a ``$limit`` in
        ``when`` is reached). Yields :class:`Record` (``meta=True``: :class:`RecordInfo`);
        heartbeats are skipped. A dropped connection (a stream cut short, the ``busy`` error
        frame of a server that is stopping, a refused connection while it restarts) is
        reopened from the last timestamp (up to ``retries`` times in a row, waiting
        ``backoff`` seconds, doubled each time, at most 30 s), so nothing is missed or seen
        twice across reconnections; errors the server answers raise at once. ``heartbeat``:
        seconds between the server's keep-alives when idle (default 15; keep it below the
        client's ``timeout``); ``settle_ms``: see docs/api.md. Break out of the loop (or ``close()`` the iterator) to stop.
        ``entries=[...]`` (instead of ``entry``) follows several entries merged, as in
        :meth:`query`."""
        extra: c.Params = []
        path = c.query_path(bucket, entry, entries, extra)
        first = None if start is None else to_micros(start)
        params = c.tail_params(first, when, strict, meta, heartbeat, settle_ms) + extra
        policy = c.Retry(attempts=retries, backoff=backoff, max_backoff=30.0)
        return AsyncQueryIterator(self, path, params, meta=meta, policy=policy, resumable=True,
                                  endless=not c.has_limit(when))

    async def remove_query(self, bucket: str, entry: str, start: Optional[Timestamp] = None,
                           stop: Optional[Timestamp] = None, *, when: Optional[Mapping[str, Any]] = None,
                           strict: bool = False, limit: Optional[int] = None) -> int:
        """Removes the records with ``start <= ts < stop`` (both optional) that match
        ``when`` (all of them without it), oldest first, at most ``limit``; returns how many."""
        params = c.query_params(start, stop, None, None, None, None, limit, False, when, strict)
        doc = await self._json("DELETE", c.entry_path(bucket, entry) + "/query", params)
        return int(doc.get("removed", 0))

    async def update_labels(self, bucket: str, entry: str, ts: Timestamp,
                            labels: Mapping[str, Optional[c.LabelValue]]) -> RecordInfo:
        """Sets labels of a record; a value of ``None`` removes that label."""
        doc = await self._json("PATCH", c.entry_path(bucket, entry), c.ts_params(ts),
                               json_body=c.labels_patch(labels), retry=True)
        return RecordInfo.from_json(doc)

    async def update_labels_where(self, bucket: str, entry: str, labels: Mapping[str, Optional[c.LabelValue]],
                                  start: Optional[Timestamp] = None, stop: Optional[Timestamp] = None, *,
                                  when: Optional[Mapping[str, Any]] = None, strict: bool = False,
                                  limit: Optional[int] = None) -> int:
        """Sets labels (a value of ``None`` removes that label) on every record with
        ``start <= ts < stop`` (both optional) that matches ``when`` (all of them without it),
        oldest first, at most ``limit``; ``when`` sees the labels before the update. Returns
        how many records were updated (one request, ``PATCH …/query``)."""
        body = c.labels_patch(labels)
        body.update(c.selection_body(start, stop, when, strict, limit))
        doc = await self._json("PATCH", c.entry_path(bucket, entry) + "/query", json_body=body)
        return int(doc.get("updated", 0))

    async def update_labels_batch(self, bucket: str, entry: str,
                                  updates: Mapping[Timestamp, Mapping[str, Optional[c.LabelValue]]], *,
                                  raise_errors: bool = True) -> BatchResult:
        """Label changes of several records by timestamp in one request (``PATCH …/batch``):
        ``{ts: {"k": "v", "gone": None}}``. Each record is answered on its own (a missing one
        is a 404 result, the others are still updated); ``raise_errors`` raises
        :class:`~tsblob.BatchError` if any failed, after all were tried."""
        body = {"records": [{"ts": to_micros(ts), **c.labels_patch(labels)} for ts, labels in updates.items()]}
        result = BatchResult()
        result._add(await self._json("PATCH", c.entry_path(bucket, entry) + "/batch", json_body=body))
        return result.raise_for_errors() if raise_errors else result

    async def remove_batch(self, bucket: str, entry: str, timestamps: Iterable[Timestamp], *,
                           raise_errors: bool = True) -> BatchResult:
        """Removes several records by timestamp in one request (``DELETE …/batch``), each
        answered on its own (a missing one is a 404 result); ``raise_errors`` raises
        :class:`~tsblob.BatchError` if any failed, after all were tried."""
        body = {"ts": [to_micros(ts) for ts in timestamps]}
        result = BatchResult()
        result._add(await self._json("DELETE", c.entry_path(bucket, entry) + "/batch", json_body=body))
        return result.raise_for_errors() if raise_errors else result

    async def remove(self, bucket: str, entry: str, ts: Optional[Timestamp] = None, *,
                     start: Optional[Timestamp] = None, stop: Optional[Timestamp] = None) -> int:
        """Removes one record (``ts``) or the records with ``start <= ts < stop``; returns how
        many were removed. (The whole entry: :meth:`remove_entry`.)"""
        params = c.range_params(ts, start, stop)
        return int((await self._json("DELETE", c.entry_path(bucket, entry), params)).get("removed", 0))

    # -- tokens --------------------------------------------------------------------------

    async def create_token(self, name: str, *, full_access: bool = False, read: Sequence[str] = (),
                           write: Sequence[str] = (), expires_at: Optional[Timestamp] = None,
                           ttl: Union[int, timedelta, None] = None,
                           ip_allowlist: Sequence[str] = ()) -> str:
        """Creates an access token and returns its value (shown only this once). Bucket
        names in ``read``/``write`` may end in ``*``.

        ``expires_at``: the token stops working at this time (any :data:`~tsblob.Timestamp`;
        a ``timedelta`` counts from now: ``timedelta(days=30)``). ``ttl``: it stops working
        once unused for this long (whole seconds, or a ``timedelta``); each request with it
        starts the clock again. ``ip_allowlist``: addresses or CIDR networks it may be used
        from (``["10.0.0.0/8", "203.0.113.7"]``). A request past either limit is refused
        (:class:`~tsblob.TokenExpired`, :class:`~tsblob.IpNotAllowed`), and a stream opened
        with the token ends when it expires."""
        body: Dict[str, Any] = {"full_access": full_access, "read": list(read), "write": list(write)}
        if expires_at is not None:
            body["expires_at"] = to_micros(expires_at)
        if ttl is not None:
            seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
            if isinstance(seconds, bool) or seconds != int(seconds) or seconds < 1:
                raise InvalidInput(f"ttl={ttl!r}: give whole seconds, at least 1", code="invalid_ttl")
            body["ttl"] = int(seconds)
        if ip_allowlist:
            if isinstance(ip_allowlist, str):
                raise TypeError("ip_allowlist is a list of addresses or networks, not one string")
            body["ip_allowlist"] = list(ip_allowlist)
        doc = await self._json("POST", f"{c.API}/tokens/{quote(name, safe='')}", json_body=body)
        return str(doc["value"])

    async def rotate_token(self, name: str) -> str:
        """Gives a token a new value and returns it (shown only this once): the old value
        stops working at once, and streams opened with it end. Permissions and limits stay;
        the ``ttl`` clock starts again. A token past its ``expires_at`` cannot be rotated
        (:class:`~tsblob.InvalidInput`, ``expired_not_rotatable``)."""
        doc = await self._json("POST", f"{c.API}/tokens/{quote(name, safe='')}/rotate")
        return str(doc["value"])

    async def list_tokens(self) -> List[Token]:
        """Every stored token's name, permissions and limits (never the values)."""
        doc = await self._json("GET", f"{c.API}/tokens", retry=True)
        return [Token.from_json(t) for t in doc.get("tokens", [])]

    async def remove_token(self, name: str, *, disable_auth: bool = False) -> None:
        """Removes a stored token. Removing the last one of a server without an admin token
        switches authentication off, so the server refuses it (409 ``last_token``) unless
        ``disable_auth=True``."""
        params: c.Params = [("disable_auth", "true")] if disable_auth else []
        await self._send("DELETE", f"{c.API}/tokens/{quote(name, safe='')}", params or None)

    async def me(self) -> Token:
        """The permissions and limits of the token this client uses."""
        return Token.from_json(await self._json("GET", f"{c.API}/me", retry=True))

    # -- lifecycle rules -----------------------------------------------------------------

    async def lifecycle_rules(self, bucket: str) -> List[LifecycleRule]:
        """A bucket's lifecycle rules with what each removed: its ``max_age`` first (the
        shorthand rule ``max_age``), then the others. See docs/api.md, "Lifecycle rules"."""
        doc = await self._json("GET", c.lifecycle_path(bucket), retry=True)
        return [LifecycleRule.from_json(r) for r in doc.get("rules", [])]

    async def get_lifecycle_rule(self, bucket: str, name: str) -> LifecycleRule:
        """One rule with its status (:class:`NotFound` ``rule_not_found`` if there is none)."""
        return LifecycleRule.from_json(await self._json("GET", c.lifecycle_path(bucket, name), retry=True))

    async def set_lifecycle_rule(self, bucket: str, name: str, older_than: c.Duration, *,
                                 interval: Optional[c.Duration] = None, entries: Sequence[str] = (),
                                 when: Optional[Mapping[str, Any]] = None,
                                 mode: Optional[str] = None,
                                 action: Optional[str] = None) -> LifecycleRule:
        """Creates or replaces a rule (admin token needed): records older than ``older_than``
        (µs, a timedelta or ``"30d"``), in ``entries`` (names or globs, ``"!name"`` excludes;
        empty: every entry), that ``when`` keeps, are removed in the background every
        ``interval`` (default 1 h); with ``action="compress"`` they are stored zstd-compressed
        instead (read back identical, the space they took given back). ``mode``:
        ``"enabled"``, ``"disabled"`` or ``"dry_run"`` (counts only). The name ``max_age``
        sets the bucket's ``max_age`` (``older_than`` only)."""
        body = c.lifecycle_body(older_than, interval, entries, when, mode, action)
        return LifecycleRule.from_json(await self._json("PUT", c.lifecycle_path(bucket, name), json_body=body,
                                                        retry=True))

    async def remove_lifecycle_rule(self, bucket: str, name: str) -> None:
        """Removes a rule (``max_age``: clears the bucket's ``max_age``); no record is touched."""
        await self._send("DELETE", c.lifecycle_path(bucket, name))

    async def run_lifecycle_rule(self, bucket: str, name: str) -> Dict[str, Any]:
        """Runs one pass of a rule now, whatever its mode: ``{"removed", "compressed",
        "saved_bytes", "blocks", "looked_at", "caught_up"}`` (a pass is bounded: ``caught_up``
        false means more to do)."""
        return dict(await self._json("POST", c.lifecycle_path(bucket, name) + "/run"))

    # -- query links ---------------------------------------------------------------------

    async def create_link(self, bucket: str, entry: Union[str, Sequence[str]], *,
                          start: Optional[Timestamp] = None, stop: Optional[Timestamp] = None,
                          when: Optional[Mapping[str, Any]] = None, limit: Optional[int] = None,
                          desc: bool = False, index: Optional[int] = None,
                          record: Optional[Tuple[str, Timestamp]] = None, mcap: bool = False,
                          expires_in: Optional[Union[int, timedelta]] = None,
                          expires_at: Optional[Timestamp] = None, file_name: Optional[str] = None,
                          base_url: Optional[str] = None) -> Dict[str, Any]:
        """Makes a query link: a URL that downloads the query's records **without a token**
        until it expires (docs/api.md, Query links). ``entry``: a name, or names and globs.
        ``index`` (the n-th record, 0 first) or ``record`` (``(entry, ts)``) makes it answer one
        record's payload; otherwise the whole query as record frames (``mcap=True``: one MCAP
        file). ``expires_in`` (seconds or a timedelta; default 24 h) or ``expires_at``.
        Returns ``{"link", "expires_at", "file_name"}``. The link runs as this client's token
        at download time and stops working when that token is removed."""
        body: Dict[str, Any] = {"bucket": bucket}
        if isinstance(entry, str):
            body["entry"] = entry
        else:
            body["entries"] = list(entry)
        for key, value in (("start", start), ("stop", stop), ("expires_at", expires_at)):
            if value is not None:
                body[key] = to_micros(value)
        if when is not None:
            body["when"] = dict(when)
        if limit is not None:
            body["limit"] = int(limit)
        if desc:
            body["desc"] = True
        if index is not None:
            body["index"] = int(index)
        if record is not None:
            body["record"] = {"entry": record[0], "ts": to_micros(record[1])}
        if mcap:
            body["format"] = "mcap"
        if expires_in is not None:
            body["expires_in"] = int(expires_in.total_seconds() if isinstance(expires_in, timedelta) else expires_in)
        if file_name is not None:
            body["file_name"] = file_name
        if base_url is not None:
            body["base_url"] = base_url
        return dict(await self._json("POST", f"{c.API}/links", json_body=body))

    # -- replication ---------------------------------------------------------------------

    async def put_replication(self, name: str, src_bucket: str, dst_url: str, dst_bucket: str, *,
                              dst_token: Optional[str] = None, entries: Sequence[str] = (),
                              when: Optional[Mapping[str, Any]] = None, mode: str = "enabled",
                              from_ts: Optional[Timestamp] = None,
                              dst_ca: Optional[str] = None, dst_prefix: str = "",
                              dst_api: str = "tsblob", compression: str = "auto") -> Dict[str, Any]:
        """Creates or replaces a replication task (admin token needed) and returns it as the
        server answers it: ``{"name", "settings", "status"}`` (the token is never echoed;
        omitting ``dst_token`` on a replace keeps the stored one). ``dst_ca``: PEM
        certificates to trust for an https destination. ``entries`` may exclude with
        ``"!pattern"``; ``mode``: ``enabled``, ``paused`` (the backlog is kept) or
        ``disabled`` (nothing kept); ``dst_prefix`` is put before entry names at the
        destination; ``dst_api``: ``tsblob`` or ``reductstore`` (a ReductStore server);
        ``compression``: ``auto``, ``zstd``, ``none`` or (to a ReductStore) ``gzip``. ``from_ts``:
        backfill the records from this time on (any :data:`~tsblob.Timestamp`, as ``ts``:
        a float is seconds). The task is a plain ``dict``, as are those of
        :meth:`get_replication` and :meth:`list_replications`. See docs/replication.md."""
        body = c.replication_body(src_bucket, dst_url, dst_bucket, dst_token, entries, when, mode, from_ts,
                                  dst_ca, dst_prefix, dst_api, compression)
        return dict(await self._json("PUT", c.replication_path(name), json_body=body))

    async def set_replication_mode(self, name: str, mode: str) -> Dict[str, Any]:
        """Sets a task's mode (``enabled``, ``paused``, ``disabled``), keeping its other
        settings and its stored destination token; returns the task."""
        task = await self.get_replication(name)
        s = task["settings"]
        body = c.replication_body(s["src_bucket"], s["dst_url"], s["dst_bucket"], None, s.get("entries", []),
                                  s.get("when"), mode, s.get("from"), None, s.get("dst_prefix", ""),
                                  s.get("dst_api", "tsblob"), s.get("compression", "auto"))
        return dict(await self._json("PUT", c.replication_path(name), json_body=body))

    async def get_replication(self, name: str) -> Dict[str, Any]:
        """A task's settings and status (pending records and bytes, lag, counters)."""
        return dict(await self._json("GET", c.replication_path(name), retry=True))

    async def list_replications(self) -> List[Dict[str, Any]]:
        """Every replication task with its settings and status."""
        return list((await self._json("GET", f"{c.API}/replications", retry=True)).get("replications", []))

    async def remove_replication(self, name: str) -> None:
        """Removes a replication task (what it already sent stays at the destination)."""
        await self._send("DELETE", c.replication_path(name))
