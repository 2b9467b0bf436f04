"""The sync client's HTTP/1.1 transport: a thread-safe keep-alive pool over ``http.client``.

Why not httpx (the first choice): measured on the 2-core machines here, the same 1 KB write
to ``tsblob serve`` took 718 µs through ``httpx.Client`` and 232 µs through the standard
library's ``http.client`` (``bench/transport_overhead.py``): httpx alone would have set the
write rate of every Python program. ``http.client`` brings no dependency and does the
protocol work (chunked encoding both ways, keep-alive, HEAD); this module adds what it
lacks: a pool of connections shared by threads, detection of connections the server closed
while idle, one retry of a request that failed on such a stale connection before any answer
arrived, a check that a body with ``Content-Length`` was not cut short, and the proxy
variables of the environment (:func:`proxy_for`).
"""

from __future__ import annotations

import email.parser
import http.client
import os
import re
import select
import socket
import ssl
import stat
import threading
import time
import types
from base64 import b64encode
from typing import TYPE_CHECKING, Any, BinaryIO, Dict, Iterable, Iterator, List, Optional, Tuple
from urllib.parse import unquote, urlsplit

from ._common import ERROR_BODY_MAX, JSON_MAX, STREAM_CHUNK, Bounded, Response, check_url, too_large
from ._errors import InvalidInput, TransportError

if TYPE_CHECKING:
    from ._sync.client import Record

__all__ = ["FileBase", "SyncTransport", "Stream", "Response", "TRANSPORT_ERRORS", "prepare_body", "sleep", "load_rest",
           "file_size", "FileBody"]

sleep = time.sleep
"""How the sync client waits between retries."""
FileBase = BinaryIO
"""The base of the sync ``Record``: a binary file for type checkers too (``PIL.Image.open``
takes ``IO[bytes]``); ``typing.BinaryIO`` has no slots and no behaviour of its own."""
POOL_SIZE = 8
"""Idle connections kept by default (threads beyond it open and close their own)."""

TRANSPORT_ERRORS = (OSError, http.client.HTTPException)
# Errors that mean "the server had closed this kept-alive connection" when met while sending
# on a reused connection: nothing was processed, so the request may be sent again.
_STALE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, http.client.RemoteDisconnected)
READ_CHUNK = 256 << 10


def file_size(f: Any) -> Optional[int]:
    """Bytes left in a regular file from its current position, or ``None`` if unknown."""
    try:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        return int(st.st_size - f.tell())
    except (AttributeError, OSError, ValueError):
        return None


def prepare_body(data: Any, size: Optional[int]) -> Tuple[Any, Optional[int]]:
    """(body for the transport, Content-Length or None) for a sync upload."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return data, None  # http.client sets the length itself
    if isinstance(data, str):
        raise TypeError("write() takes bytes, a binary file or an iterator of bytes; encode str first "
                        "(e.g. text.encode()) and pass content_type='text/plain; charset=utf-8'")
    if hasattr(data, "read"):
        f = data
        left = file_size(f)
        if left is not None:  # a regular file: sent by the kernel (sendfile), never read here
            n = size if size is not None else left
            return FileBody(f, n), n
        return iter(lambda: f.read(STREAM_CHUNK), b""), size
    if isinstance(data, Iterable):
        return iter(data), size
    raise TypeError(f"write() cannot send a {type(data).__name__}: give bytes, a binary file or an iterator of bytes")


class FileBody:
    """A regular file's next ``size`` bytes as a request body. Over plain TCP they go from the
    page cache to the socket with ``sendfile`` (no read into Python, no copy in user space);
    over TLS they are read a chunk at a time. Never more than ``size`` bytes are sent (the
    declared Content-Length), and a file with fewer left raises instead of leaving the
    server waiting for the rest."""

    __slots__ = ("file", "size")

    def __init__(self, file: Any, size: int) -> None:
        self.file = file
        self.size = size


def load_rest(record: "Record") -> bytes:
    """``Record.data`` of a streamed record: reads the rest of its payload (the sync client may
    block)."""
    if record.tell():
        raise InvalidInput(f"{record.tell()} bytes of record {record.timestamp} were already read with read(): "
                           "keep reading with read(), or read the record again", code="payload_consumed")
    return b"".join(record.iter_chunks())


class Proxy:
    """An HTTP proxy to go through: its address and, when its URL has ``user:password@``,
    the ``Proxy-Authorization`` header."""

    __slots__ = ("host", "port", "headers")

    def __init__(self, host: str, port: int, headers: Dict[str, str]) -> None:
        self.host = host
        self.port = port
        self.headers = headers


def proxy_for(scheme: str, host: str) -> Optional[Proxy]:
    """The proxy the environment names for ``scheme://host``, as curl and the standard
    library read it: ``HTTPS_PROXY`` for https, ``HTTP_PROXY`` for http (or their lower-case
    names), none when ``host`` matches ``NO_PROXY`` (comma-separated host names or domain
    suffixes, ``*`` for all; ``urllib.request.getproxies`` and ``proxy_bypass``). The proxy
    is spoken to in plain HTTP (``http://host:port``; an ``https://`` proxy URL is
    refused): an https server is reached through a ``CONNECT`` tunnel, TLS end to end; an
    http one with absolute-URI requests."""
    import urllib.request  # only here: it costs a few ms to import, and most programs need no proxy

    url = urllib.request.getproxies().get(scheme)
    if not url or urllib.request.proxy_bypass(host):
        return None
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise InvalidInput(f"proxy {url!r} (from ${scheme.upper()}_PROXY): the SDK speaks to proxies in plain "
                           "HTTP; give http://host:port", code="bad_request")
    headers: Dict[str, str] = {}
    if parts.username is not None:
        cred = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Proxy-Authorization"] = "Basic " + b64encode(cred).decode()
    return Proxy(parts.hostname, parts.port or 80, headers)


def lower_headers(resp: http.client.HTTPResponse) -> List[Tuple[str, str]]:
    return [(k.lower(), v) for k, v in resp.getheaders()]


def iter_response(resp: http.client.HTTPResponse, size: int = READ_CHUNK) -> Iterator[bytes]:
    """The body as it arrives: each piece is what one socket read gave (at most ``size``).

    A body cut short raises :class:`TransportError`: ``read1`` reports a connection closed
    before ``Content-Length`` bytes as a plain end of data, so the count is checked here.
    """
    read1 = resp.read1
    length = resp.getheader("content-length")
    expected = int(length) if length is not None and not resp.chunked else None
    got = 0
    while True:
        if got == expected:
            # read1 never marks a Content-Length body as finished; read() does, and only a
            # finished response lets its connection go back to the pool.
            resp.read()
            return
        try:
            chunk = read1(size)
        except TRANSPORT_ERRORS as e:
            raise transport_error(e, "reading the answer") from e
        if not chunk:
            if expected is not None and got != expected:
                raise TransportError(f"the connection closed after {got} of {expected} bytes of the answer",
                                     code="transport")
            return
        got += len(chunk)
        yield chunk


def read_bounded(resp: http.client.HTTPResponse, limit: int) -> Optional[bytes]:
    """The whole body if it is at most ``limit`` bytes, else ``None`` (as soon as that is
    known: a larger ``Content-Length``, or ``limit + 1`` bytes read; the rest is left unread
    and the caller must close the connection). A body of unknown length (chunked, or up to
    the close) is read a piece at a time, never more than ``limit + 1`` bytes."""
    length = resp.length  # (0 for a HEAD answer, None when chunked or delimited by the close)
    if length is not None:
        return resp.read() if length <= limit else None
    body = Bounded(limit)
    while True:
        chunk = resp.read(body.want(READ_CHUNK))
        if not chunk:
            return body.body()
        if not body.add(chunk):
            return None


def request_name(method: str, target: str) -> str:
    """A request as errors name it: ``GET /path`` (without the query string)."""
    return f"{method} {target.split('?')[0]}"


def answer_name(status: int, request: str) -> str:
    """How a too-large answer to ``request`` (:func:`request_name`) is named in its error."""
    return f"the {'error ' if status >= 400 else ''}answer ({status}) to {request}"


def transport_error(e: BaseException, doing: str) -> TransportError:
    return TransportError(f"{doing}: {type(e).__name__}: {e or 'connection closed'}{tls_hint(e)}", code="transport")


# The first bytes of a TLS record (an alert or a handshake, TLS 1.x) where an HTTP status line
# was expected, as http.client (raw) and aiohttp (escaped, once or twice) quote them.
_TLS_RECORD = re.compile(r"(\\+x1[56]|[\x15\x16])(\\+x03|\x03)")


def tls_hint(e: BaseException) -> str:
    """What to do about a TLS mismatch ``e`` shows (both clients: aiohttp's errors are
    subclasses of the ``ssl`` ones), or ``""``."""
    text = str(e)
    if isinstance(e, ssl.SSLCertVerificationError):
        if "mismatch" in text:  # (hostname or IP address mismatch)
            return (" (the server's certificate does not name this host: use a name or address its "
                    "subjectAltName lists)")
        return (" (the server's certificate is not trusted here: pass ssl_context= (e.g. "
                "ssl.create_default_context(cafile=...)) or set TSBLOB_CA to the PEM file of the server's CA "
                "(or of its self-signed certificate))")
    if isinstance(e, ssl.SSLError) and "WRONG_VERSION_NUMBER" in text:
        return " (the server may speak plain HTTP on this port: use an http:// URL)"
    if re.search(r"status ?line", f"{type(e).__name__} {text}", re.I) and _TLS_RECORD.search(text):
        return " (the server may serve TLS (https) on this port: use an https:// URL)"
    return ""


class _Coalescing:
    """Sends a request's head together with the first piece of its body.

    ``http.client`` writes the head and the body with separate ``sendall`` calls; for small
    records that doubles the system calls and wake-ups of a write. The head (when small) is
    held until the next ``send`` or ``getresponse``; only the head is ever held, so a body
    streamed piece by piece leaves as each piece is produced.

    Over plain TCP the head and a bytes-like body (``bytes``, ``bytearray``, ``memoryview``)
    of any size leave in one ``sendmsg`` (scatter/gather): the payload is never copied in
    Python. ``head + body`` copied the whole record into a fresh buffer: about 30 µs a MB,
    plus, when the allocator maps such a buffer afresh, some 250 page faults a MB (a 1 MB
    write's client CPU went from 1.9–2.2 ms to 1.4–1.5 ms, 700 → 456 faults a write, in a
    loop like ``bench_vs_reduct.py``'s, issue 15). Over TLS (no ``sendmsg``) a body of at most
    1 MiB is joined to the head, a larger one follows it.
    """

    _held: Optional[bytes] = None
    _hold_next = False
    sock: Any

    def putrequest(self, *args: Any, **kwargs: Any) -> None:
        super().putrequest(*args, **kwargs)  # type: ignore[misc]
        self._hold_next = True  # the next send() carries this request's head

    def send(self, data: Any) -> None:
        if self._hold_next:
            self._hold_next = False
            if isinstance(data, bytes) and len(data) <= (64 << 10):
                self._held = data
                return
        held, self._held = self._held, None
        if held is not None:
            if isinstance(data, (bytes, bytearray, memoryview)):
                if type(self.sock) is socket.socket:
                    _send_gathered(self.sock, held, data)
                    return
                if memoryview(data).nbytes <= (1 << 20):
                    super().send(held + data)  # type: ignore[misc]
                    return
            super().send(held)  # type: ignore[misc]
        super().send(data)  # type: ignore[misc]

    def send_file(self, body: FileBody) -> None:
        """Sends the held head, then ``body.size`` bytes of ``body.file`` from its position."""
        held, self._held = self._held, None
        f, size = body.file, body.size
        if type(self.sock) is socket.socket:
            if held is not None:
                self.sock.sendall(held)
            sent = self.sock.sendfile(f, f.tell(), size) if size else 0
        else:
            if held is not None:
                super().send(held)  # type: ignore[misc]
            sent = 0
            while sent < size:
                chunk = f.read(min(STREAM_CHUNK, size - sent))
                if not chunk:
                    break
                super().send(chunk)  # type: ignore[misc]
                sent += len(chunk)
        if sent != size:
            raise InvalidInput(f"the file had {sent} bytes left to send, not the {size} of its Content-Length "
                               "(was it truncated while being sent, or is size= larger than the file?)",
                               code="bad_request")

    def getresponse(self) -> http.client.HTTPResponse:
        held, self._held = self._held, None
        if held is not None:
            super().send(held)  # type: ignore[misc]
        return super().getresponse()  # type: ignore[misc,no-any-return]


def _send_gathered(sock: socket.socket, head: bytes, body: Any) -> None:
    """``head`` then ``body`` (bytes-like) on a plain socket, without joining them: one
    ``sendmsg`` takes what the socket buffer can hold, ``sendall`` the rest from where it
    stopped (a slice of a ``memoryview``: no copy)."""
    view = memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")  # counts bytes (a C-contiguous array of any item size)
    sent = sock.sendmsg([head, view])
    if sent < len(head):
        sock.sendall(head[sent:])
        sock.sendall(view)
    elif sent - len(head) < len(view):
        sock.sendall(view[sent - len(head):])


# A header line that the email parser reads as one ``Name: value`` field: a name of
# printable ASCII without ':' (the parser's ``headerRE``), a colon, a value without CR or LF
# (the parser splits lines at either), the line end.
_FIELD = re.compile(rb"[\x21-\x39\x3b-\x7e]+:[^\r\n]*\r?\n")
# The standard library's reader of a header block's lines (3.10 to 3.13 at least; typeshed
# does not list it): where it is missing, the standard ``begin`` is kept (``_fast_begin``).
_read_headers: Any = getattr(http.client, "_read_headers", None)


def _parse_headers(fp: Any, _class: Any = http.client.HTTPMessage) -> http.client.HTTPMessage:
    """``http.client.parse_headers`` without the email package's feed parser when every line
    is a plain ``Name: value`` field (issue 30): the same lines are read
    (``http.client._read_headers``, with its line and count limits) and each is stored as
    the parser stores it (``set_raw(name, value)``, the value's leading blanks and line end
    stripped: compat32's ``header_source_parse``). The parser cost some 20 µs of a 1 KB
    write's 175 µs of client CPU (8 answer headers). A block with anything else (a folded
    line, a line without a colon, ``From ``, a bare CR) goes to the email parser, as the
    standard library does it."""
    lines = _read_headers(fp)
    fields = lines[:-1]  # the last is the empty line that ends them (or b"" at the end of the stream)
    if all(_FIELD.fullmatch(line) for line in fields):
        msg = _class()
        for line in fields:
            name, value = line.decode("iso-8859-1").split(":", 1)
            msg.set_raw(name, value.lstrip(" \t").rstrip("\r\n"))
        msg.set_payload("")  # (the parser's: an empty body)
        return msg  # type: ignore[no-any-return]
    return email.parser.Parser(_class=_class).parsestr(b"".join(lines).decode("iso-8859-1"))  # type: ignore[no-any-return]


def _fast_begin() -> Any:
    """``HTTPResponse.begin`` of this Python, unchanged but for the header parser it calls
    (:func:`_parse_headers` in place of the module's ``parse_headers``): the function's own
    code, bound to a copy of ``http.client``'s globals. Python versions whose ``begin`` reads
    headers otherwise keep the standard ``begin``."""
    begin = http.client.HTTPResponse.begin
    if "parse_headers" not in begin.__code__.co_names or _read_headers is None:
        return begin
    scope = dict(vars(http.client))
    scope["parse_headers"] = _parse_headers
    return types.FunctionType(begin.__code__, scope, begin.__name__, begin.__defaults__, begin.__closure__)


class _HTTPResponse(http.client.HTTPResponse):
    begin = _fast_begin()


class _HTTPConnection(_Coalescing, http.client.HTTPConnection):
    response_class = _HTTPResponse


class _HTTPSConnection(_Coalescing, http.client.HTTPSConnection):
    response_class = _HTTPResponse


def _early_answer(conn: http.client.HTTPConnection) -> Optional[http.client.HTTPResponse]:
    try:
        return conn.getresponse()
    except TRANSPORT_ERRORS:
        return None


def _readable(sock: socket.socket) -> bool:
    if hasattr(select, "poll"):  # poll has no FD_SETSIZE limit, unlike select
        p = select.poll()
        p.register(sock, select.POLLIN)
        return bool(p.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


class SyncTransport:
    """Sends requests to one server over a pool of at most ``pool_size`` idle connections."""

    def __init__(self, url: str, headers: Dict[str, str], timeout: Optional[float], pool_size: int = POOL_SIZE,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        parts = urlsplit(check_url(url))
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""  # (never empty: check_url)
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")  # a server mounted below a path by a proxy
        self.timeout = timeout
        self.headers = headers
        self.pool_size = pool_size
        self.ssl_context = ssl_context
        self.proxy = proxy_for(parts.scheme, self.host)
        # Through a proxy, an http request names the whole URL (absolute form); https goes
        # through a CONNECT tunnel and keeps the path alone.
        if self.proxy is not None and not self.https:
            self.prefix = f"http://{parts.netloc.rsplit('@', 1)[-1]}{self.prefix}"
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    # -- connections ---------------------------------------------------------------------

    def _new(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        proxy = self.proxy
        host, port = (self.host, self.port) if proxy is None else (proxy.host, proxy.port)
        if self.https:
            conn = _HTTPSConnection(host, port, timeout=self.timeout,
                                    context=self.ssl_context or ssl.create_default_context(), blocksize=1 << 20)
            if proxy is not None:
                conn.set_tunnel(self.host, self.port, headers=proxy.headers)
        else:
            conn = _HTTPConnection(host, port, timeout=self.timeout, blocksize=1 << 20)
        conn.connect()
        if conn.sock is not None:  # small requests must not wait for delayed ACKs (Nagle)
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _get(self) -> Tuple[http.client.HTTPConnection, bool]:
        """An idle connection that is still open (reused=True), or a new one."""
        while True:
            with self._lock:
                if self._closed:
                    raise TransportError("the client is closed", code="transport")
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            # An idle connection with something to read has been closed by the server (EOF)
            # or is out of step: either way it cannot carry a new request.
            if conn.sock is not None and not _readable(conn.sock):
                return conn, True
            conn.close()
        try:
            return self._new(), False
        except TRANSPORT_ERRORS as e:
            via = "" if self.proxy is None else f" through the proxy {self.proxy.host}:{self.proxy.port}"
            err = transport_error(e, f"connecting to {self.host}:{self.port}{via}")
            # a failed CONNECT (the proxy's refusal) is an OSError too: nothing reached the server
            err.request_sent = False
            raise err from e

    def _put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- requests ------------------------------------------------------------------------

    def _send(self, method: str, target: str, body: Any, headers: Optional[Dict[str, str]]
              ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        all_headers = {**self.headers, **headers} if headers else self.headers
        if self.proxy is not None and not self.https and self.proxy.headers:
            all_headers = {**all_headers, **self.proxy.headers}
        resendable = body is None or isinstance(body, (bytes, bytearray, memoryview))
        path = self.prefix + target
        for attempt in (0, 1):
            conn, reused = self._get()
            try:
                if isinstance(body, FileBody):
                    conn.request(method, path, body=None, headers=all_headers)  # the head, held
                    conn.send_file(body)  # type: ignore[attr-defined]
                else:
                    conn.request(method, path, body=body, headers=all_headers)
                return conn, conn.getresponse()
            except _STALE as e:
                # A server may answer before reading the whole body (413 on a Content-Length
                # over its limit) and close: that answer is the one to report.
                early = _early_answer(conn)
                if early is not None:
                    return conn, early
                conn.close()
                if reused and resendable and attempt == 0:
                    continue  # the server closed it while idle, just before our request
                raise transport_error(e, f"{method} {path}") from e
            except TRANSPORT_ERRORS as e:
                conn.close()
                raise transport_error(e, f"{method} {path}") from e
            except BaseException:  # e.g. the caller's body iterator failed half-way
                conn.close()
                raise
        raise TransportError(f"{method} {path}: no connection could carry the request", code="transport")

    def request(self, method: str, target: str, body: Any = None,
                headers: Optional[Dict[str, str]] = None, limit: Optional[int] = JSON_MAX) -> Response:
        """Sends a request and reads the whole answer: at most ``limit`` bytes of it
        (``None``: no bound, for a record's payload), of an error answer at most
        ``ERROR_BODY_MAX``; a longer one is cut off (its connection closed) and raises
        :class:`ProtocolError`."""
        conn, resp = self._send(method, target, body, headers)
        cap = ERROR_BODY_MAX if resp.status >= 400 else limit
        try:
            data = resp.read() if cap is None else read_bounded(resp, cap)
        except TRANSPORT_ERRORS as e:
            conn.close()
            raise transport_error(e, f"reading the answer to {method} {target}") from e
        if data is None:
            assert cap is not None
            conn.close()
            raise too_large(answer_name(resp.status, request_name(method, target)), cap)
        out = Response(resp.status, lower_headers(resp), data)
        if resp.will_close:
            conn.close()
        else:
            self._put(conn)
        return out

    def open(self, method: str, target: str, headers: Optional[Dict[str, str]] = None) -> "Stream":
        """Sends a request and returns the answer unread (:class:`Stream`)."""
        conn, resp = self._send(method, target, None, headers)
        return Stream(self, conn, resp, request_name(method, target))


class Stream:
    """An answer being read: ``status``, ``headers`` (lower-case names), ``chunks()`` (the
    body as it arrives) or ``read()`` (all of it, or at most ``limit`` bytes), then
    ``close()``: the connection goes back to the pool only if the body was read to its end
    (else it is closed: an early stop)."""

    __slots__ = ("_t", "_conn", "_resp", "_request", "status", "headers")

    def __init__(self, transport: SyncTransport, conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse, request: str = "the request") -> None:
        self._t = transport
        self._conn: Optional[http.client.HTTPConnection] = conn
        self._resp = resp
        self._request = request  # "GET /path", for errors
        self.status = resp.status
        self.headers = lower_headers(resp)

    def chunks(self, size: int = READ_CHUNK) -> Iterator[bytes]:
        return iter_response(self._resp, size)

    def read(self, limit: Optional[int] = None) -> bytes:
        """The whole body; with ``limit``, a body over ``limit`` bytes is cut off there, the
        connection closed, and :class:`ProtocolError` raised."""
        try:
            data = self._resp.read() if limit is None else read_bounded(self._resp, limit)
        except TRANSPORT_ERRORS as e:
            self.close()
            raise transport_error(e, "reading the answer") from e
        if data is None:
            assert limit is not None
            self.close()  # the body is not read to its end: the connection is closed, not pooled
            raise too_large(answer_name(self.status, self._request), limit)
        return data

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._resp.isclosed() and not self._resp.will_close:
            self._t._put(conn)
        else:
            conn.close()
