"""The synchronous client, over a keep-alive pool of ``http.client`` connections.

Every method maps to one route of ``docs/api.md`` (``write_batch`` to one request per
server-sized batch). Payloads are never buffered by the SDK beyond what the caller hands it:
uploads from files and iterators are streamed, ``read_stream`` and queries parse the answer
as it arrives (see :mod:`tsblob._framing` for the memory bound). Why ``http.client`` and not
httpx: see :mod:`tsblob._http`.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import stat
import time
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, BinaryIO, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from . import _common as c
from ._errors import ProtocolError, TransportError, TsblobError, error_from_response_body
from ._framing import EV_END, EV_HEAD, EV_HEARTBEAT, EV_RECORD, MEDIA_TYPE, FrameParser
from ._http import Response, SyncTransport, iter_response, lower_headers
from ._models import BatchResult, Bucket, EntryInfo, Health, Histogram, Record, RecordInfo, ServerInfo, Token
from ._timestamps import Timestamp

__all__ = ["Client", "QueryIterator"]

Data = Union[bytes, bytearray, memoryview, BinaryIO, Iterable[bytes]]
_JSON = {"content-type": "application/json"}


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
        return iter(lambda: f.read(c.STREAM_CHUNK), b""), size if size is not None else file_size(f)
    if isinstance(data, Iterable):
        return iter(data), size
    raise TypeError(f"write() cannot send a {type(data).__name__}: give bytes, a binary file or an iterator of bytes")


def parse_json(resp: Response) -> Any:
    try:
        return json.loads(resp.body)
    except ValueError:
        raise TsblobError(f"the server answered {resp.status} with a body that is not JSON: {resp.body[:200]!r}",
                          code="protocol", status=resp.status) from None


class QueryIterator(Iterator[Record]):
    """Records of a time-range query, parsed from the server's stream as they arrive.

    Use it in a ``for`` loop; use ``with`` (or call ``close()``) to release the connection
    when you stop early. Records up to the client's ``eager_limit`` carry their ``data``;
    larger ones stream it through ``Record.iter_chunks()`` and must be read before the next
    record (unread payload is skipped).
    """

    def __init__(self, client: "Client", path: str, params: c.Params) -> None:
        self._client = client
        self._path = path
        self._params = params
        self._cm: Any = None
        self._chunks: Optional[Iterator[bytes]] = None
        self._parser = FrameParser(client.eager_limit)
        self._payload: Optional[Iterator[bytes]] = None
        self._done = False

    def __iter__(self) -> "QueryIterator":
        return self

    def __enter__(self) -> "QueryIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass

    def close(self) -> None:
        """Stops the query and gives the connection back (drops the rest of the stream)."""
        self._done = True
        cm, self._cm = self._cm, None
        if cm is not None:
            cm.__exit__(None, None, None)

    def _open(self) -> None:
        cm = self._client._stream("GET", self._path, self._params)
        resp = cm.__enter__()
        self._cm = cm
        self._chunks = iter_response(resp)

    def _event(self) -> Tuple[Any, ...]:
        parser = self._parser
        while True:
            ev = parser.next_event()
            if ev is not None:
                if ev[0] == EV_HEARTBEAT:  # a live tail is idle: nothing to hand out
                    continue
                return ev
            assert self._chunks is not None
            try:
                data = next(self._chunks)
            except StopIteration:
                parser.eof()  # raises: the stream stopped before its end frame
                raise
            parser.feed(data)

    def _stream_payload(self) -> Iterator[bytes]:
        while True:
            ev = self._event()
            yield ev[1]
            if ev[2]:
                return

    def __next__(self) -> Record:
        if self._done:
            raise StopIteration
        try:
            if self._cm is None:
                self._open()
            if self._payload is not None:
                for _ in self._payload:  # skip what the caller did not read of the last record
                    pass
                self._payload = None
            ev = self._event()
            kind = ev[0]
            if kind == EV_RECORD:
                h = ev[1]
                return Record(h.ts, h.content_type, h.labels, h.size, ev[2], None, h.entry)
            if kind == EV_HEAD:
                h = ev[1]
                self._payload = self._stream_payload()
                return Record(h.ts, h.content_type, h.labels, h.size, None, self._payload, h.entry)
            if kind == EV_END:
                # Read the HTTP end of the body too, so that the connection can be reused.
                assert self._chunks is not None
                if any(self._chunks):
                    raise ProtocolError("the server sent bytes after the end of the record stream")
                self.close()
                raise StopIteration
            raise TsblobError(f"unexpected frame event {kind} between records", code="protocol")
        except BaseException:
            self.close()
            raise


class Client:
    """A tsblob client. ``with Client() as db: ...`` closes its connections at the end.

    ``url`` is the server's base address, ``token`` a bearer token (needed when the server
    has tokens), ``timeout`` seconds for connecting and for each wait on the socket (not a
    whole transfer). ``eager_limit``: query records up to this many bytes come with ``data``
    loaded; larger ones are streamed. ``batch_max_bytes``/``batch_max_records`` size the
    requests of ``write_batch``. ``pool_size`` idle connections are kept for reuse; the
    client may be shared by threads. ``ssl_context`` is used for ``https://`` URLs.
    """

    def __init__(self, url: str = c.DEFAULT_URL, token: Optional[str] = None,
                 timeout: Optional[float] = c.DEFAULT_TIMEOUT, *, eager_limit: int = c.DEFAULT_EAGER_LIMIT,
                 batch_max_bytes: int = c.DEFAULT_BATCH_BYTES, batch_max_records: int = c.DEFAULT_BATCH_RECORDS,
                 pool_size: int = 8, ssl_context: Optional[ssl.SSLContext] = None) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.eager_limit = eager_limit
        self.batch_max_bytes = batch_max_bytes
        self.batch_max_records = batch_max_records
        self._t = SyncTransport(self.url, headers, timeout, pool_size, ssl_context)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._t.close()

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # -- plumbing ------------------------------------------------------------------------

    def _send(self, method: str, path: str, params: Optional[c.Params] = None, *, json_body: Any = None,
              content: Any = None, headers: Optional[Dict[str, str]] = None) -> Response:
        if json_body is not None:
            content, headers = json.dumps(json_body).encode(), _JSON
        resp = self._t.request(method, c.target(path, params), content, headers)
        if resp.status >= 400:
            raise error_from_response_body(resp.status, resp.body)
        return resp

    def _json(self, method: str, path: str, params: Optional[c.Params] = None, *, json_body: Any = None,
              content: Any = None, headers: Optional[Dict[str, str]] = None) -> Any:
        return parse_json(self._send(method, path, params, json_body=json_body, content=content, headers=headers))

    @contextmanager
    def _stream(self, method: str, path: str, params: Optional[c.Params] = None
                ) -> Iterator[http.client.HTTPResponse]:
        with self._t.stream(method, c.target(path, params)) as resp:
            if resp.status >= 400:
                raise error_from_response_body(resp.status, resp.read())
            yield resp

    # -- service -------------------------------------------------------------------------

    def health(self) -> Health:
        """``GET /health`` (never needs a token)."""
        d = self._json("GET", "/health")
        return Health(status=str(d.get("status", "")), version=str(d.get("version", "")))

    def info(self) -> ServerInfo:
        """Server version, uptime, bucket count, bytes used, sync policy."""
        return ServerInfo.from_json(self._json("GET", f"{c.API}/info"))

    # -- buckets -------------------------------------------------------------------------

    def create_bucket(self, name: str, *, quota_type: Optional[str] = None, quota_size: Optional[int] = None,
                      max_block_size: Optional[int] = None, max_block_records: Optional[int] = None,
                      compression: Optional[str] = None, exist_ok: bool = False) -> Bucket:
        """Creates a bucket; settings left out take the server's defaults. With
        ``exist_ok=True`` an existing bucket is returned as it is (its settings unchanged)."""
        path = c.bucket_path(name)
        body = c.settings_json(quota_type, quota_size, max_block_size, max_block_records, compression)
        try:
            return Bucket.from_json(self._json("POST", path, json_body=body))
        except TsblobError as e:
            if exist_ok and e.code == "bucket_exists":
                return self.get_bucket(name)
            raise

    def get_bucket(self, name: str) -> Bucket:
        """A bucket's settings, totals and entries."""
        return Bucket.from_json(self._json("GET", c.bucket_path(name)))

    def list_buckets(self) -> List[Bucket]:
        return [Bucket.from_json(b) for b in self._json("GET", f"{c.API}/b").get("buckets", [])]

    def update_bucket(self, name: str, *, quota_type: Optional[str] = None, quota_size: Optional[int] = None,
                      max_block_size: Optional[int] = None, max_block_records: Optional[int] = None,
                      compression: Optional[str] = None) -> Bucket:
        """Changes the given settings, leaves the others."""
        body = c.settings_json(quota_type, quota_size, max_block_size, max_block_records, compression)
        return Bucket.from_json(self._json("PUT", c.bucket_path(name), json_body=body))

    def remove_bucket(self, name: str) -> None:
        """Removes a bucket and every record in it."""
        self._send("DELETE", c.bucket_path(name))

    # -- entries -------------------------------------------------------------------------

    def get_entry(self, bucket: str, entry: str) -> EntryInfo:
        return EntryInfo.from_json(self._json("GET", c.entry_path(bucket, entry) + "/info"))

    def histogram(self, bucket: str, entry: str, start: Optional[Timestamp] = None,
                  stop: Optional[Timestamp] = None, step: Optional[Union[int, timedelta]] = None) -> Histogram:
        """Records and payload bytes per time step of an entry over ``[start, stop)`` (default: the
        whole entry), from the server's index (no payload read). ``step``: µs or a timedelta;
        default about 200 steps; at most 10,000 steps (more is a :class:`BadRequest`)."""
        params = c.histogram_params(start, stop, step)
        return Histogram.from_json(self._json("GET", c.entry_path(bucket, entry) + "/histogram", params))

    def remove_entry(self, bucket: str, entry: str) -> None:
        """Removes an entry and all its records."""
        self._send("DELETE", c.entry_path(bucket, entry))

    # -- records -------------------------------------------------------------------------

    def write(self, bucket: str, entry: str, data: Data, ts: Optional[Timestamp] = None,
              labels: Optional[Mapping[str, str]] = None, content_type: Optional[str] = None, *,
              size: Optional[int] = None) -> int:
        """Writes one record and returns its timestamp (µs).

        ``data``: bytes, a binary file (streamed from its current position) or an iterable of
        byte chunks (streamed; give ``size`` if you know it). ``ts``: µs int, float seconds,
        datetime or ISO string; ``None`` lets the server assign "now". A timestamp that
        already exists raises :class:`~tsblob.TimestampExists`.
        """
        path = c.entry_path(bucket, entry)
        content, length = prepare_body(data, size)
        headers = c.write_headers(content_type, labels, length)
        return int(self._json("POST", path, c.ts_params(ts), content=content, headers=headers)["ts"])

    def write_batch(self, bucket: str, entry: str, records: Iterable[c.BatchItem]) -> BatchResult:
        """Writes many records, in requests of at most ``batch_max_bytes``/``batch_max_records``.

        ``records`` may be any iterable (a generator is consumed lazily, one request at a
        time) of bytes, ``(ts, data[, labels[, content_type]])`` tuples, dicts with ``data``
        and optional ``ts``/``labels``/``content_type``, or :class:`Record` objects. Returns
        one :class:`RecordResult` per record; a record's failure (e.g. timestamp exists)
        does not raise: call ``raise_for_errors()`` on the result for that.
        """
        path = c.entry_path(bucket, entry) + "/batch"
        result = BatchResult()
        headers = {"content-type": MEDIA_TYPE}
        for body, _count in c.iter_batches(records, self.batch_max_bytes, self.batch_max_records):
            result._add(self._json("POST", path, content=body, headers=headers))
        return result

    def read(self, bucket: str, entry: str, ts: Optional[Timestamp] = None) -> Record:
        """Reads one record whole (``ts=None``: the latest). For large payloads use
        :meth:`read_stream`."""
        resp = self._send("GET", c.entry_path(bucket, entry), c.ts_params(ts))
        t, ct, labels, _ = c.info_from_headers(resp.headers)
        return Record(t, ct, labels, len(resp.body), resp.body)

    @contextmanager
    def read_stream(self, bucket: str, entry: str, ts: Optional[Timestamp] = None) -> Iterator[Record]:
        """Opens one record for streaming: ``with db.read_stream(b, e, ts) as rec: for chunk in
        rec.iter_chunks(): ...``. Memory stays at one network chunk whatever the size."""
        with self._stream("GET", c.entry_path(bucket, entry), c.ts_params(ts)) as resp:
            t, ct, labels, size = c.info_from_headers(lower_headers(resp))
            yield Record(t, ct, labels, size, None, iter_response(resp, c.STREAM_CHUNK))

    def head(self, bucket: str, entry: str, ts: Optional[Timestamp] = None) -> RecordInfo:
        """A record's metadata without its payload."""
        resp = self._send("HEAD", c.entry_path(bucket, entry), c.ts_params(ts))
        return RecordInfo(*c.info_from_headers(resp.headers))

    def query(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None,
              stop: Optional[Timestamp] = None,
              labels: Optional[Mapping[str, str]] = None, limit: Optional[int] = None, reverse: bool = False, *,
              exclude: Optional[Mapping[str, str]] = None, has: Optional[Sequence[str]] = None,
              missing: Optional[Sequence[str]] = None, when: Optional[Mapping[str, Any]] = None,
              strict: bool = False, meta: bool = False,
              entries: Optional[Sequence[str]] = None) -> Union[QueryIterator, Iterator[RecordInfo]]:
        """Records with ``start <= ts < stop`` (both optional), oldest first (``reverse``:
        newest first), at most ``limit``. Label filters, all combined with AND: ``labels``
        equal, ``exclude`` not equal (or missing), ``has`` present, ``missing`` absent.
        ``when``: a condition in ReductStore's language, as a dict
        (``{"&score": {"$gt": 10}, "$each_t": "1s"}``, see docs/api.md); ``strict``: a
        comparison with a missing label raises instead of being false.

        ``entries=["cams/*", "imu"]`` (instead of ``entry``) merges several entries of the
        bucket in timestamp order (names and globs: ``*`` within a segment, ``**`` across;
        ties in the order of the entries' names); each record's ``entry`` says where it
        belongs, and ``limit``/``when`` count over the merged stream.

        ``meta=True`` yields :class:`RecordInfo` (timestamp, size, content type, labels)
        without payloads. The request starts on the first ``next()``; memory stays bounded
        however many records match (see :class:`QueryIterator`).
        """
        params = c.query_params(start, stop, labels, exclude, has, missing, limit, reverse, when, strict, meta)
        path = c.query_path(bucket, entry, entries, params)
        if meta:
            return self._iter_meta(path, params)
        return QueryIterator(self, path, params)

    def _iter_meta(self, path: str, params: c.Params) -> Iterator[RecordInfo]:
        with self._stream("GET", path, params) as resp:
            rest = b""
            for chunk in iter_response(resp):
                lines, rest = c.split_lines(rest, chunk)
                for line in lines:
                    info = c.meta_line(line)
                    if info is not None:
                        yield info
            if rest.strip():
                info = c.meta_line(rest)
                if info is not None:
                    yield info

    def tail(self, bucket: str, entry: Optional[str] = None, start: Optional[Timestamp] = None, *,
             when: Optional[Mapping[str, Any]] = None, strict: bool = False, meta: bool = False,
             heartbeat: Optional[int] = None, settle_ms: Optional[int] = None,
             retries: int = c.TAIL_RETRIES, backoff: float = c.TAIL_BACKOFF,
             entries: Optional[Sequence[str]] = None) -> Iterator[Any]:
        """A live tail: the records from ``start`` on (everything stored without it), then
        each new one as it is written, oldest first, forever (or until a ``$limit`` in
        ``when`` is reached). Yields :class:`Record` (``meta=True``: :class:`RecordInfo`);
        heartbeats are skipped. A dropped connection is reopened from the last timestamp + 1
        (up to ``retries`` times in a row, waiting ``backoff`` seconds, doubled each time),
        so nothing is missed or seen twice across reconnections; errors the server answers
        raise at once. ``heartbeat``: seconds between the server's keep-alives when idle
        (default 15; keep it below the client's ``timeout``); ``settle_ms``: see docs/api.md.
        Break out of the loop (or ``close()`` the generator) to stop. ``entries=[...]``
        (instead of ``entry``) follows several entries merged, as in :meth:`query`."""
        extra: c.Params = []
        path = c.query_path(bucket, entry, entries, extra)
        cursor = None if start is None else c.to_micros(start)
        failures = 0
        while True:
            params = c.tail_params(cursor, when, strict, meta, heartbeat, settle_ms) + extra
            it: Any = self._iter_meta(path, params) if meta else QueryIterator(self, path, params)
            try:
                for rec in it:
                    failures = 0
                    cursor = rec.timestamp + 1
                    yield rec
                return  # the stream ended: its limit was reached
            except (TransportError, ProtocolError):
                failures += 1
                if failures > retries:
                    raise
            finally:
                it.close()
            time.sleep(c.tail_delay(failures, backoff))

    def remove_query(self, bucket: str, entry: str, start: Optional[Timestamp] = None,
                     stop: Optional[Timestamp] = None, *, when: Optional[Mapping[str, Any]] = None,
                     strict: bool = False, limit: Optional[int] = None) -> int:
        """Removes the records with ``start <= ts < stop`` (both optional) that match
        ``when`` (all of them without it), oldest first, at most ``limit``; returns how many."""
        params = c.query_params(start, stop, None, None, None, None, limit, False, when, strict)
        return int(self._json("DELETE", c.entry_path(bucket, entry) + "/query", params).get("removed", 0))

    def update_labels(self, bucket: str, entry: str, ts: Timestamp,
                      labels: Mapping[str, Optional[str]]) -> RecordInfo:
        """Sets labels of a record; a value of ``None`` removes that label."""
        doc = self._json("PATCH", c.entry_path(bucket, entry), c.ts_params(ts), json_body=c.labels_patch(labels))
        return RecordInfo.from_json(doc)

    def remove(self, bucket: str, entry: str, ts: Optional[Timestamp] = None, *,
               start: Optional[Timestamp] = None, stop: Optional[Timestamp] = None) -> int:
        """Removes one record (``ts``) or the records with ``start <= ts < stop``; returns how
        many were removed. (The whole entry: :meth:`remove_entry`.)"""
        params = c.range_params(ts, start, stop)
        return int(self._json("DELETE", c.entry_path(bucket, entry), params).get("removed", 0))

    # -- tokens --------------------------------------------------------------------------

    def create_token(self, name: str, *, full_access: bool = False, read: Sequence[str] = (),
                     write: Sequence[str] = ()) -> str:
        """Creates an access token and returns its value (shown only this once). Bucket
        names in ``read``/``write`` may end in ``*``."""
        body = {"full_access": full_access, "read": list(read), "write": list(write)}
        return str(self._json("POST", f"{c.API}/tokens/{quote(name, safe='')}", json_body=body)["value"])

    def list_tokens(self) -> List[Token]:
        return [Token.from_json(t) for t in self._json("GET", f"{c.API}/tokens").get("tokens", [])]

    def remove_token(self, name: str, disable_auth: bool = False) -> None:
        """Removes a stored token. Removing the last one of a server without an admin token
        switches authentication off, so the server refuses it (409 ``last_token``) unless
        ``disable_auth=True``."""
        params: c.Params = [("disable_auth", "true")] if disable_auth else []
        self._send("DELETE", f"{c.API}/tokens/{quote(name, safe='')}", params or None)

    def me(self) -> Token:
        """The permissions of the token this client uses."""
        return Token.from_json(self._json("GET", f"{c.API}/me"))

    # -- replication ---------------------------------------------------------------------

    def put_replication(self, name: str, src_bucket: str, dst_url: str, dst_bucket: str, *,
                        dst_token: Optional[str] = None, entries: Sequence[str] = (),
                        when: Optional[Mapping[str, Any]] = None, mode: str = "enabled",
                        from_ts: Optional[int] = None) -> Dict[str, Any]:
        """Creates or replaces a replication task (admin token needed) and returns it as the
        server answers it: ``{"name", "settings", "status"}`` (the token is never echoed;
        omitting ``dst_token`` on a replace keeps the stored one). See docs/replication.md."""
        body = c.replication_body(src_bucket, dst_url, dst_bucket, dst_token, entries, when, mode, from_ts)
        return dict(self._json("PUT", c.replication_path(name), json_body=body))

    def get_replication(self, name: str) -> Dict[str, Any]:
        """A task's settings and status (pending records and bytes, lag, counters)."""
        return dict(self._json("GET", c.replication_path(name)))

    def list_replications(self) -> List[Dict[str, Any]]:
        return list(self._json("GET", f"{c.API}/replications").get("replications", []))

    def remove_replication(self, name: str) -> None:
        self._send("DELETE", c.replication_path(name))

