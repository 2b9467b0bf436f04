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
import ssl
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, Iterable, List, Optional, Tuple

from ._common import STREAM_CHUNK, Response
from ._errors import InvalidInput, TransportError
from ._http import file_size, transport_error

try:
    import aiohttp
    from yarl import URL
except ImportError as e:  # pragma: no cover - exercised by test_packaging in a venv without it
    raise ImportError(
        "tsblob.AsyncClient needs aiohttp, which is an optional dependency: "
        "pip install 'tsblob[async]' (the sync tsblob.Client needs nothing besides Python)") from e

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


def prepare_body(data: Any, size: Optional[int]) -> Tuple[Any, Optional[int]]:
    """(body for aiohttp, Content-Length or None)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        # No copy: aiohttp sends any bytes-like body; a memoryview is cast to bytes so that
        # its length counts bytes (an array of 4-byte items has 4 bytes an item).
        return data if isinstance(data, bytes) else memoryview(data).cast("B"), None
    if isinstance(data, str):
        raise TypeError("write() takes bytes, a binary file or an iterator of bytes; encode str first "
                        "(e.g. text.encode()) and pass content_type='text/plain; charset=utf-8'")
    if hasattr(data, "read"):
        return _file_chunks(data), size if size is not None else file_size(data)
    if hasattr(data, "__aiter__"):
        return data, size
    if isinstance(data, Iterable):
        return _sync_chunks(data), size
    raise TypeError(f"write() cannot send a {type(data).__name__}: give bytes, a binary file or an "
                    "(async) iterator of bytes")


def load_rest(record: "AsyncRecord") -> bytes:
    """``AsyncRecord.data`` of a streamed record: the async client cannot block for it."""
    raise InvalidInput(
        f"the payload of record {record.timestamp} ({record.size} bytes) is streamed: "
        "use `await record.read()` or `async for chunk in record.aiter_chunks()`", code="payload_not_loaded")


def _lower_headers(resp: aiohttp.ClientResponse) -> List[Tuple[str, str]]:
    return [(k.lower(), v) for k, v in resp.headers.items()]


class Stream:
    """An answer being read (see :class:`tsblob._http.Stream`), awaited."""

    __slots__ = ("_resp", "status", "headers")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
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

    async def read(self) -> bytes:
        try:
            return await self._resp.read()
        except ERRORS as e:
            raise transport_error(e, "reading the answer") from e

    async def aclose(self) -> None:
        # release() keeps the connection when the body was read to its end; an early stop
        # leaves unread bytes, and aiohttp then closes the connection.
        self._resp.release()


def _error(e: BaseException, method: str, target: str) -> TransportError:
    err = transport_error(e, f"{method} {target.split('?')[0]}")
    if isinstance(e, aiohttp.ClientConnectorError):  # no connection: the server saw nothing
        err.request_sent = False
    return err


class AsyncTransport:
    """Sends requests to one server over aiohttp's pool (``pool_size`` connections at most),
    opened on first use, inside the running event loop."""

    def __init__(self, url: str, headers: Dict[str, str], timeout: Optional[float], pool_size: int = POOL_SIZE,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url {url!r} must look like http://host:port or https://host:port")
        self.url = url
        self._headers = headers
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        self._pool_size = pool_size
        self._ssl = ssl_context
        self._session: Optional[aiohttp.ClientSession] = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._pool_size, ssl=self._ssl if self._ssl else True)
            # A larger read buffer than aiohttp's 64 KiB lets large payloads stream without pausing
            # the socket every 128 KiB; memory stays bounded by twice this size.
            # trust_env: HTTP_PROXY/HTTPS_PROXY/NO_PROXY (and ~/.netrc) as the sync client reads them
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout, connector=connector,
                                                  read_bufsize=READ_BUFSIZE, trust_env=True)
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def request(self, method: str, target: str, body: Any = None,
                      headers: Optional[Dict[str, str]] = None) -> Response:
        """Sends a request and reads the whole answer."""
        try:
            async with self._sess().request(method, URL(self.url + target, encoded=True), data=body,
                                            headers=headers) as r:
                return Response(r.status, _lower_headers(r), await r.read())
        except ERRORS as e:
            raise _error(e, method, target) from e

    async def open(self, method: str, target: str, headers: Optional[Dict[str, str]] = None) -> Stream:
        """Sends a request and returns the answer unread."""
        try:
            resp = await self._sess().request(method, URL(self.url + target, encoded=True), headers=headers)
        except ERRORS as e:
            raise _error(e, method, target) from e
        return Stream(resp)
