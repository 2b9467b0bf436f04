"""The async client's HTTP transport, over aiohttp (the optional extra ``tsblob[async]``).

This module is the only one that imports aiohttp, and only :class:`tsblob.AsyncClient`
imports this module, so ``import tsblob`` (the sync client) never loads aiohttp. It offers
the same names as :mod:`tsblob._http` (``AsyncTransport.request``/``open``, ``Stream``,
``prepare_body``, ``sleep``, ``load_rest``), awaited: the client in ``_async/client.py`` is
written once against them and the sync client is generated from it (``hatch_build.py``).

Why aiohttp and not httpx: measured here, the same 1 KB write to ``tsblob serve`` took
2.7 ms through ``httpx.AsyncClient`` (anyio and httpcore layers) and 0.58 ms through
aiohttp, whose HTTP parser is compiled (``bench/transport_overhead.py``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import ssl
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, Iterable, List, Optional, Tuple

from ._common import ERROR_BODY_MAX, JSON_MAX, STREAM_CHUNK, Bounded, Response, check_url, too_large
from ._errors import InvalidInput, TransportError
from ._http import _readable, answer_name, file_size, request_name, transport_error

try:
    import aiohttp
    from aiohttp.client_proto import ResponseHandler
    from yarl import URL
except ImportError as e:  # pragma: no cover - exercised by test_packaging in a venv without it
    raise ImportError(
        "tsblob.AsyncClient needs aiohttp, which is an optional dependency: "
        "pip install 'tsblob[async]' (from the tsblob source tree: pip install './client-py[async]'; the sync "
        "tsblob.Client needs nothing besides Python)") from e

if TYPE_CHECKING:
    from ._async.client import AsyncRecord

__all__ = ["FileBase", "AsyncTransport", "Stream", "prepare_body", "sleep", "load_rest"]

sleep = asyncio.sleep
"""How the async client waits between retries."""


class FileBase:
    """The base of ``AsyncRecord`` (the sync ``Record``'s is ``typing.BinaryIO``: an async
    record's ``read`` is awaited, so it is no ``IO[bytes]``)."""

    __slots__ = ()
POOL_SIZE = 100
"""Connections open at once at most (aiohttp's connector limit)."""

ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)
READ_BUFSIZE = 1 << 20


async def _file_chunks(f: Any) -> AsyncIterator[bytes]:
    # Reads block the event loop for one chunk at a time (1 MiB): short on local files; for
    # slow sources pass an async iterator instead.
    while True:
        chunk = f.read(STREAM_CHUNK)
        if not chunk:
            return
        yield chunk


async def _sync_chunks(it: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in it:
        yield chunk


HEAD_PIECE = 16 << 10
"""Bytes of a large body sent with the request's head (aiohttp joins the two into one buffer)."""
BODY_PIECE = 1 << 20
"""A large body goes to the transport this many bytes at a time, each once the last has left."""
LARGE_BODY = 64 << 10
"""Bodies from this size go out as :class:`_LargeBody` (below it, aiohttp's join is cheap)."""


class _LargeBody(aiohttp.BytesPayload):
    """A bytes-like body that aiohttp sends without copying it whole (issue 30).

    aiohttp's ``BytesPayload`` hands the body to the writer in one piece: the writer joins
    the request's head to it (``b"".join``, a fresh buffer of the body's size, on Pythons
    before 3.12.9 where aiohttp avoids ``writelines``), and asyncio's transport copies what
    the socket did not take at once into its own buffer (7 MB of a 10 MB body here). Here
    the head leaves with the first ``HEAD_PIECE`` bytes, then the rest, ``BODY_PIECE`` bytes
    at a time, as slices of a ``memoryview`` of the caller's object, each once the transport
    has emptied its buffer (its high-water mark is 0 meanwhile): the socket takes a piece
    straight from the caller's memory, and at most the part of one piece it did not accept
    is copied."""

    protocol: Any = None
    """aiohttp's protocol of the connection it was sent on (see :func:`_send_guarded`)."""

    async def write(self, writer: Any) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: Any, content_length: Optional[int]) -> None:
        view = memoryview(self._value)
        if content_length is not None:
            view = view[:content_length]
        transport = writer.transport
        limits = transport.get_write_buffer_limits() if transport is not None else None
        try:
            if limits is not None:
                transport.set_write_buffer_limits(high=0)  # drain() waits for an empty buffer
            await _send_guarded(self, writer, _pieces(view), drain_first=True)
        finally:
            if limits is not None and not transport.is_closing():
                transport.set_write_buffer_limits(high=limits[1], low=limits[0])


async def _pieces(view: memoryview) -> AsyncIterator[memoryview]:
    yield view[:HEAD_PIECE]
    for at in range(HEAD_PIECE, len(view), BODY_PIECE):
        yield view[at:at + BODY_PIECE]


async def _send_guarded(payload: Any, writer: Any, chunks: AsyncIterator[Any], drain_first: bool = False) -> None:
    """Sends ``chunks`` through aiohttp's ``writer``, stopping when the server has answered
    before the whole body (a 413 for a body over its ``--max-body``, then it closes).

    Before each chunk the socket is polled: readable means the answer (or the close) is
    there, so sending stops and aiohttp's reader reads the answer. A send that fails all the
    same (the answer came between the poll and the send) is raised only once the protocol
    has learnt of the lost connection and read the answer from the socket (:class:`_Handler`):
    raised earlier, aiohttp would report it in place of the answer. Either way the
    connection, its body cut short, is never reused. ``drain_first``: wait for
    the transport's buffer to empty before each chunk (else aiohttp's writer drains after)."""
    payload.protocol = protocol = writer.protocol  # (see AsyncTransport.request: closed after a 413)
    transport = writer.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    try:
        async for chunk in chunks:
            if drain_first:
                await writer.drain()
            if sock is not None and _readable(sock):
                break
            await writer.write(chunk, drain=not drain_first)
        else:
            return
    except OSError:  # (aiohttp's ClientConnectionResetError is one)
        pass
    force_close = getattr(protocol, "force_close", None)
    if force_close is not None:
        force_close()
    if transport is not None and transport.is_closing():
        # A send failed: let asyncio tell the protocol (it reads the answer, if one came:
        # _Handler), then report the failure to aiohttp, which then does not end a body on a
        # dead connection (an error nobody would retrieve); the answer, read first, wins.
        await asyncio.sleep(0)
        raise ConnectionResetError("the server closed the connection before the whole body was sent")


class _Handler(ResponseHandler):
    """aiohttp's protocol of a connection, which reads the server's answer before it learns
    that the connection broke.

    A server answers a body over its limit before reading all of it (413), then closes; the
    client's next send then fails (the server's reset follows its answer), and asyncio's
    transport, failing inside that send, drops the socket at the loop's next turn without
    reading it: aiohttp reported "Can not write request body" with the answer unread. Here,
    when the connection is lost on an error, what the server sent and nobody read is read
    from the socket (still open: asyncio closes it after this call) and handed to aiohttp's
    own parser first, so the answer reaches the caller; with nothing there, the error stands.
    (Plain HTTP only: over TLS the answer is lost as before.)"""

    _sock_transport: Any = None

    def connection_made(self, transport: Any) -> None:
        # (kept here: aiohttp drops its own reference when it closes the connection after the
        # failed send, before asyncio calls connection_lost)
        self._sock_transport = transport
        super().connection_made(transport)

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        transport, self._sock_transport = self._sock_transport, None
        # (over TLS the socket carries ciphertext, which only the TLS layer may read)
        if exc is not None and transport is not None and transport.get_extra_info("sslcontext") is None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                try:
                    with socket.socket(fileno=os.dup(sock.fileno())) as s:  # asyncio's is non-blocking
                        while True:
                            data = s.recv(READ_BUFSIZE)
                            if not data:
                                break
                            self.data_received(data)
                except OSError:  # nothing more to read (BlockingIOError), or the reset after it
                    pass
        super().connection_lost(exc)


def _connector(limit: int, ssl_context: Any) -> aiohttp.TCPConnector:
    connector = aiohttp.TCPConnector(limit=limit, ssl=ssl_context)
    factory = getattr(connector, "_factory", None)
    if isinstance(factory, functools.partial) and factory.func is ResponseHandler:
        # (aiohttp has no public way to choose the protocol; versions that build it otherwise
        # keep theirs, and lose an early answer as before)
        connector._factory = functools.partial(_Handler, *factory.args, **factory.keywords)  # type: ignore[assignment]
    return connector


class _GuardedStream(aiohttp.AsyncIterablePayload):
    """A streamed body (file, iterator): aiohttp's own payload, sent by :func:`_send_guarded`."""

    protocol: Any = None

    async def write_with_length(self, writer: Any, content_length: Optional[int]) -> None:
        it = self._iter
        if it is None:
            return
        self._iter = None
        await _send_guarded(self, writer, _limited(it, content_length))


async def _limited(it: AsyncIterator[bytes], content_length: Optional[int]) -> AsyncIterator[bytes]:
    left = content_length
    async for chunk in it:
        if left is None:
            yield chunk
            continue
        if left <= 0:
            return
        yield chunk[:left]
        left -= len(chunk)


def prepare_body(data: Any, size: Optional[int]) -> Tuple[Any, Optional[int]]:
    """(body for aiohttp, Content-Length or None)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        # No copy: aiohttp sends any bytes-like body; a memoryview is cast to bytes so that
        # its length counts bytes (an array of 4-byte items has 4 bytes an item).
        body = data if isinstance(data, bytes) else memoryview(data).cast("B")
        return body, None
    if isinstance(data, str):
        raise TypeError("write() takes bytes, a binary file or an iterator of bytes; encode str first "
                        "(e.g. text.encode()) and pass content_type='text/plain; charset=utf-8'")
    if hasattr(data, "read"):
        return _GuardedStream(_file_chunks(data)), size if size is not None else file_size(data)
    if hasattr(data, "__aiter__"):
        return _GuardedStream(data), size
    if isinstance(data, Iterable):
        return _GuardedStream(_sync_chunks(data)), size
    raise TypeError(f"write() cannot send a {type(data).__name__}: give bytes, a binary file or an "
                    "(async) iterator of bytes")


def load_rest(record: "AsyncRecord") -> bytes:
    """``AsyncRecord.data`` of a streamed record: the async client cannot block for it."""
    raise InvalidInput(
        f"the payload of record {record.timestamp} ({record.size} bytes) is streamed: "
        "use `await record.read()` or `async for chunk in record.aiter_chunks()`", code="payload_not_loaded")


async def _read_bounded(resp: aiohttp.ClientResponse, limit: int) -> Optional[bytes]:
    """The whole body if it is at most ``limit`` bytes, else ``None`` (as soon as that is
    known: a larger ``Content-Length``, or ``limit + 1`` bytes read; the rest is left unread
    and the caller must close the response). A body of unknown length is read a piece at a
    time, never more than ``limit + 1`` bytes (plus what aiohttp buffers: ``READ_BUFSIZE``)."""
    length = resp.content_length
    if resp.method == "HEAD":  # (its Content-Length is the record's, without a body)
        return await resp.read()
    if length is not None and "chunked" not in resp.headers.get("transfer-encoding", ""):
        if length > limit:
            return None
        if "content-encoding" not in resp.headers:
            return await resp.read()
        # (a compressed body, which aiohttp inflates: its length says nothing of the inflated size)
    body = Bounded(limit)
    read = resp.content.read
    while True:
        chunk = await read(body.want(READ_BUFSIZE))
        if not chunk:
            return body.body()
        if not body.add(chunk):
            return None


def _lower_headers(resp: aiohttp.ClientResponse) -> List[Tuple[str, str]]:
    return [(k.lower(), v) for k, v in resp.headers.items()]


class Stream:
    """An answer being read (see :class:`tsblob._http.Stream`), awaited."""

    __slots__ = ("_resp", "_request", "status", "headers")

    def __init__(self, resp: aiohttp.ClientResponse, request: str = "the request") -> None:
        self._resp = resp
        self._request = request  # "GET /path", for errors
        self.status = resp.status
        self.headers = _lower_headers(resp)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (aiohttp pauses the socket when its buffer is full, so a slow
        consumer does not make it grow); a body cut short raises :class:`TransportError`."""
        resp = self._resp
        expected = resp.content_length if "chunked" not in resp.headers.get("transfer-encoding", "") else None
        got = 0
        try:
            async for chunk in resp.content.iter_any():
                got += len(chunk)
                yield chunk
        except ERRORS as e:
            raise transport_error(e, "reading the answer") from e
        if expected is not None and got != expected:
            raise TransportError(f"the connection closed after {got} of {expected} bytes of the answer",
                                 code="transport")

    async def read(self, limit: Optional[int] = None) -> bytes:
        """The whole body; with ``limit``, a body over ``limit`` bytes is cut off there, the
        connection closed, and :class:`ProtocolError` raised."""
        try:
            data = await self._resp.read() if limit is None else await _read_bounded(self._resp, limit)
        except ERRORS as e:
            raise transport_error(e, "reading the answer") from e
        if data is None:
            assert limit is not None
            self._resp.close()  # the body is not read to its end: the connection is closed, not pooled
            raise too_large(answer_name(self.status, self._request), limit)
        return data

    async def aclose(self) -> None:
        # release() keeps the connection when the body was read to its end; an early stop
        # leaves unread bytes, and aiohttp then closes the connection.
        self._resp.release()


def _error(e: BaseException, method: str, target: str) -> TransportError:
    err = transport_error(e, f"{method} {target.split('?')[0]}")
    if isinstance(e, aiohttp.ClientConnectorError):  # no connection: the server saw nothing
        err.request_sent = False
    return err


def _env_settings(url: URL) -> Optional[Dict[str, Any]]:
    """What aiohttp's ``trust_env=True`` would find for requests to ``url``, as keyword
    arguments of ``ClientSession.request``: ``proxy``/``proxy_auth`` from the proxy variables
    (``NO_PROXY`` honoured), ``auth`` from the netrc file for the host. ``None`` if this
    aiohttp lacks the helpers it uses for that (then the session keeps ``trust_env=True``)."""
    try:
        from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
    except ImportError:  # pragma: no cover - aiohttp older than these helpers
        return None
    env: Dict[str, Any] = {}
    try:
        env["proxy"], auth = get_env_proxy_for_url(url)
        if auth is not None:  # (aiohttp 3.14 deprecates proxy_auth=): the CONNECT's header for
            # https; an http request goes to the proxy itself and carries it (see _sess)
            env["proxy_headers"] = {"Proxy-Authorization": auth.encode()}
    except LookupError:
        pass
    if url.host is not None:
        try:
            env["auth"] = basicauth_from_netrc(netrc_from_env(), url.host)
        except LookupError:
            pass
    return env


def _other_loop(first: Optional[asyncio.AbstractEventLoop]) -> RuntimeError:
    state = "now closed" if first is not None and first.is_closed() else "still open"
    return RuntimeError(
        f"this AsyncClient was first used in another event loop ({state}, e.g. an earlier asyncio.run()); its "
        "connections belong to that loop: make one AsyncClient per event loop, inside the coroutine that uses it "
        "(async with AsyncClient(...) as db: ... within the function asyncio.run() runs), or `await db.aclose()` "
        "in the first loop before using the client in another")


class AsyncTransport:
    """Sends requests to one server over aiohttp's pool (``pool_size`` connections at most),
    opened on first use, inside the running event loop."""

    def __init__(self, url: str, headers: Dict[str, str], timeout: Optional[float], pool_size: int = POOL_SIZE,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self.url = check_url(url)
        self._headers = headers
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        self._pool_size = pool_size
        self._ssl = ssl_context
        self._session: Optional[aiohttp.ClientSession] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._env: Optional[Dict[str, Any]] = None

    def _sess(self) -> aiohttp.ClientSession:
        session = self._session
        if session is not None and not session.closed:
            # aiohttp's session (its connections, its timers) belongs to the loop it was made
            # in: used from another one it fails with a bare "Event loop is closed" (the second
            # asyncio.run of a program) or worse. One comparison a request.
            if asyncio.get_running_loop() is not self._loop:
                raise _other_loop(self._loop)
            return session
        connector = _connector(self._pool_size, self._ssl if self._ssl else True)
        # HTTP_PROXY/HTTPS_PROXY/NO_PROXY and ~/.netrc, read once here, as aiohttp's
        # trust_env=True reads them (the sync client reads the proxy variables once too):
        # trust_env looks them up again for every request, in two trips to a thread (the
        # netrc file is read twice a request), a cost of every write (issue 30).
        self._env = env = _env_settings(URL(self.url))
        headers = self._headers
        if env and "proxy_headers" in env and self.url.startswith("http://"):
            headers = {**headers, **env["proxy_headers"]}
        # A larger read buffer than aiohttp's 64 KiB lets large payloads stream without pausing
        # the socket every 128 KiB; memory stays bounded by twice this size.
        self._session = aiohttp.ClientSession(headers=headers, timeout=self._timeout, connector=connector,
                                              read_bufsize=READ_BUFSIZE, trust_env=self._env is None)
        self._loop = asyncio.get_running_loop()
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            if self._loop is not None and self._loop.is_closed():
                return  # (its connections went with their loop: closing them would fail on it)
            await session.close()

    async def request(self, method: str, target: str, body: Any = None,
                      headers: Optional[Dict[str, str]] = None, limit: Optional[int] = JSON_MAX) -> Response:
        """Sends a request and reads the whole answer: at most ``limit`` bytes of it
        (``None``: no bound, for a record's payload), of an error answer at most
        ``ERROR_BODY_MAX``; a longer one is cut off (its connection closed) and raises
        :class:`ProtocolError`."""
        session = self._sess()
        if isinstance(body, (bytes, memoryview)) and len(body) >= LARGE_BODY:
            body = _LargeBody(body)
        try:
            async with session.request(method, URL(self.url + target, encoded=True), data=body, headers=headers,
                                       **self._env or {}) as r:
                conn = r.connection
                cap = ERROR_BODY_MAX if r.status >= 400 else limit
                data = await r.read() if cap is None else await _read_bounded(r, cap)
                if data is None:
                    assert cap is not None
                    r.close()  # the body is not read to its end: the connection is closed, not pooled
                    raise too_large(answer_name(r.status, request_name(method, target)), cap)
                out = Response(r.status, _lower_headers(r), data)
        except ERRORS as e:
            raise _error(e, method, target) from e
        if out.status == 413 and body is not None:
            # The server answers a body over its limit before reading all of it, then closes
            # the connection; aiohttp may have put it back in its pool already (when the whole
            # body had left before the answer came): close it, so that the next request does
            # not fail on it ("Cannot write to closing transport"). (A request of another task
            # that took it from the pool meanwhile would have failed on it all the same.)
            proto = conn.protocol if conn is not None and conn.protocol is not None else getattr(body, "protocol", None)
            if proto is not None:
                proto.close()
        return out

    async def open(self, method: str, target: str, headers: Optional[Dict[str, str]] = None) -> Stream:
        """Sends a request and returns the answer unread."""
        session = self._sess()
        try:
            resp = await session.request(method, URL(self.url + target, encoded=True), headers=headers,
                                         **self._env or {})
        except ERRORS as e:
            raise _error(e, method, target) from e
        return Stream(resp, request_name(method, target))
