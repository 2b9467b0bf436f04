"""The binary record framing of batch bodies and query streams (``docs/api.md``).

Encoding builds batch bodies. Decoding is a push parser with no I/O of its own
(:class:`FrameParser`): the sync and async clients feed it the chunks their HTTP layer hands them
and pull events out, so both share every byte of parsing logic.

Memory: the parser keeps at most one partial frame head (its labels, or the JSON of a
skipped or error frame, at most ``MAX_META_LEN`` bytes) plus, for records whose payload is at
most ``eager_limit`` bytes, that one payload; larger payloads are handed out chunk by chunk as
they arrive and never accumulate. A query over any number of records therefore holds
``O(eager_limit + chunk size)`` bytes.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from ._errors import ProtocolError, TsblobError, error_from_json

__all__ = [
    "LabelValue",
    "label_value",
    "MEDIA_TYPE",
    "SERVER_TS",
    "DEFAULT_CONTENT_TYPE",
    "encode_record",
    "encode_end",
    "FrameParser",
    "Head",
    "EV_RECORD",
    "EV_HEAD",
    "EV_CHUNK",
    "EV_END",
    "EV_HEARTBEAT",
    "EV_SKIPPED",
]

MEDIA_TYPE = "application/x-tsblob-records"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
SERVER_TS = 0xFFFF_FFFF_FFFF_FFFF
"""Timestamp of a batch frame that asks the server to assign "now"."""

KIND_END = 0
KIND_RECORD = 1
KIND_ERROR = 2
KIND_HEARTBEAT = 3  # a live tail's keep-alive: the server's time, u64 LE µs
KIND_ENTRY_RECORD = 4  # a record of a multi-entry query: the head, then u16 LE + entry name
KIND_SKIPPED = 5  # damaged records the query skipped: u32 LE length + {"skipped": [...], "skipped_count": n}

MAX_META_LEN = 1 << 20
"""The most bytes of labels in a record frame, and of the JSON of a skipped or error frame,
read (the Rust decoder's ``MAX_META_LEN``, ``proto/src/framing.rs``): a longer length is
refused as soon as it is read, before its bytes are waited for."""

_HEAD = struct.Struct("<BQHHIQ")  # kind, ts, content type len, label count, labels len, payload len
_END = struct.Struct("<BQ")
_ERR = struct.Struct("<BI")
_U16 = struct.Struct("<H")
HEAD_SIZE = _HEAD.size  # 25

# Events returned by FrameParser.next_event(), as tuples whose first item is one of these.
EV_RECORD = 1  # (EV_RECORD, head, payload: bytes): a whole record (payload <= eager_limit)
EV_HEAD = 2  # (EV_HEAD, head): a large record starts; EV_CHUNKs follow
EV_CHUNK = 3  # (EV_CHUNK, data: bytes, last: bool): part of the current large payload
EV_END = 4  # (EV_END, count): the end frame; the stream is complete
EV_HEARTBEAT = 5  # (EV_HEARTBEAT, server time µs): a live tail is idle; skip it
EV_SKIPPED = 6  # (EV_SKIPPED, records: list of dicts {entry?, ts, code}, count): damaged records skipped

Buffer = Union[bytes, bytearray, memoryview]


class Head:
    """Metadata of one record frame."""

    __slots__ = ("ts", "content_type", "labels", "size", "entry")

    def __init__(self, ts: int, content_type: str, labels: Dict[str, str], size: int,
                 entry: Optional[str] = None) -> None:
        self.ts = ts
        self.content_type = content_type
        self.labels = labels
        self.size = size
        self.entry = entry  # set by multi-entry queries (frame kind 4)

    def __repr__(self) -> str:
        return (f"Head(ts={self.ts}, content_type={self.content_type!r}, labels={self.labels!r}, "
                f"size={self.size}, entry={self.entry!r})")


LabelValue = Union[str, bool, int, float]
"""A label's value as given to the SDK; stored as text (see :func:`label_value`)."""


def label_value(value: Any, key: str = "") -> str:
    """The text a label value is stored as, one rule for writes, ``eq=``/``ne=`` filters and
    label updates: ``True``/``False`` are ``"true"``/``"false"`` (what a ``when`` condition's
    JSON ``true`` matches), numbers as Python writes them (``3``, ``2.5``), strings as they
    are. ``None`` and other types are refused (``None`` removes a label only in
    ``update_labels``)."""
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    from ._errors import InvalidInput

    raise InvalidInput(f"label {key!r}: value {value!r} of type {type(value).__name__} is not a label value: "
                       "give a str, bool (stored as true/false), int or float", code="invalid_label")


def _encode_labels(labels: Optional[Mapping[str, LabelValue]]) -> Tuple[bytes, int]:
    if not labels:
        return b"", 0
    parts: List[bytes] = []
    for key, value in labels.items():
        k = str(key).encode("utf-8")
        v = label_value(value, key).encode("utf-8")
        if len(k) > 0xFFFF or len(v) > 0xFFFF:
            raise TsblobError(f"label {key!r} is too long for a frame (keys and values fit in 65535 bytes)",
                              code="invalid_label")
        parts.append(_U16.pack(len(k)))
        parts.append(k)
        parts.append(_U16.pack(len(v)))
        parts.append(v)
    return b"".join(parts), len(labels)


def encode_record(ts: Optional[int], data: Buffer, content_type: Optional[str],
                  labels: Optional[Mapping[str, LabelValue]]) -> List[Buffer]:
    """The parts of one record frame (head, content type and labels, payload), ready to be
    joined into a batch body. ``ts=None`` lets the server assign the timestamp."""
    ct = b"" if not content_type or content_type == DEFAULT_CONTENT_TYPE else content_type.encode("ascii")
    if len(ct) > 0xFFFF:
        raise TsblobError("content type is longer than 65535 bytes", code="invalid_content_type")
    lab, count = _encode_labels(labels)
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    head = _HEAD.pack(KIND_RECORD, SERVER_TS if ts is None else ts, len(ct), count, len(lab), size)
    return [head + ct + lab, data]


def encode_end(count: int) -> bytes:
    """The end frame closing a batch body of ``count`` record frames."""
    return _END.pack(KIND_END, count)


class FrameParser:
    """Incremental decoder of a record stream: ``feed()`` bytes, then ``next_event()`` until
    it returns ``None`` (it needs more bytes). Call ``eof()`` when the input ends.

    An error frame raises the server's error (a :class:`~tsblob.TsblobError` subclass); bytes
    that do not follow the framing raise :class:`~tsblob.ProtocolError`.
    """

    def __init__(self, eager_limit: int) -> None:
        self.eager_limit = eager_limit
        self._buf: Buffer = b""
        self._pos = 0
        self._remaining = 0  # payload bytes still to come of the current large record
        self.records = 0  # record frames seen
        self.finished = False

    def feed(self, data: Buffer) -> None:
        if not data:
            return
        if self.finished:
            raise ProtocolError("the server sent bytes after the end of the record stream")
        buf, pos = self._buf, self._pos
        if pos >= len(buf):
            # The usual case for large payloads: nothing left over, take the chunk as it is.
            self._buf, self._pos = data, 0
            return
        if isinstance(buf, bytearray):
            if pos:
                del buf[:pos]
        else:
            buf = bytearray(buf[pos:])
        buf += data
        self._buf, self._pos = buf, 0

    def buffered(self) -> int:
        """Bytes received but not yet handed out (for memory accounting in tests)."""
        return len(self._buf) - self._pos

    def next_event(self) -> Optional[Tuple[Any, ...]]:
        buf, pos = self._buf, self._pos
        avail = len(buf) - pos
        if self._remaining:
            if not avail:
                return None
            n = self._remaining if self._remaining < avail else avail
            if type(buf) is bytes:
                chunk = buf if (pos == 0 and n == len(buf)) else buf[pos:pos + n]
            else:
                chunk = _take(buf, pos, pos + n)
            self._pos = pos + n
            self._remaining -= n
            return (EV_CHUNK, chunk, self._remaining == 0)
        if self.finished or not avail:
            return None
        kind = buf[pos]
        if kind == KIND_RECORD or kind == KIND_ENTRY_RECORD:
            if avail < HEAD_SIZE:
                return None
            _, ts, ct_len, count, lab_len, size = _HEAD.unpack_from(buf, pos)
            if lab_len > MAX_META_LEN:
                raise self._fail(f"labels length {lab_len} is over the {MAX_META_LEN}-byte limit")
            p = pos + HEAD_SIZE
            entry = None
            if kind == KIND_ENTRY_RECORD:
                if avail < HEAD_SIZE + 2:
                    return None
                (entry_len,) = _U16.unpack_from(buf, p)
                if avail < HEAD_SIZE + 2 + entry_len:
                    return None
                try:
                    entry = bytes(buf[p + 2:p + 2 + entry_len]).decode("utf-8")
                except UnicodeDecodeError:
                    raise ProtocolError("a record frame's entry name is not UTF-8") from None
                p += 2 + entry_len
            meta_end = p + ct_len + lab_len
            if len(buf) < meta_end:
                return None
            eager = size <= self.eager_limit
            if eager and len(buf) - meta_end < size:
                return None
            content_type = bytes(buf[p:p + ct_len]).decode("ascii") if ct_len else DEFAULT_CONTENT_TYPE
            labels = self._labels(buf, p + ct_len, count, meta_end) if count else {}
            self.records += 1
            head = Head(ts, content_type, labels, size, entry)
            if eager:
                self._pos = meta_end + size
                data = buf[meta_end:meta_end + size] if type(buf) is bytes else _take(buf, meta_end, meta_end + size)
                return (EV_RECORD, head, data)
            self._pos = meta_end
            self._remaining = size
            return (EV_HEAD, head)
        if kind == KIND_END:
            if avail < _END.size:
                return None
            _, count = _END.unpack_from(buf, pos)
            self._pos = pos + _END.size
            self.finished = True
            if count != self.records:
                raise ProtocolError(
                    f"the end frame counts {count} records but {self.records} arrived: the stream was cut or garbled")
            if self._pos != len(buf):
                raise ProtocolError("the server sent bytes after the end of the record stream")
            return (EV_END, count)
        if kind == KIND_HEARTBEAT:
            if avail < _END.size:
                return None
            _, now = _END.unpack_from(buf, pos)
            self._pos = pos + _END.size
            return (EV_HEARTBEAT, now)
        if kind == KIND_SKIPPED:
            if avail < _ERR.size:
                return None
            _, length = _ERR.unpack_from(buf, pos)
            if length > MAX_META_LEN:
                raise self._fail(f"skipped frame of {length} bytes is over the {MAX_META_LEN}-byte limit")
            if avail < _ERR.size + length:
                return None
            body = bytes(buf[pos + _ERR.size:pos + _ERR.size + length])
            self._pos = pos + _ERR.size + length
            try:
                doc = json.loads(body)
                return (EV_SKIPPED, list(doc["skipped"]), int(doc["skipped_count"]))
            except (ValueError, KeyError, TypeError):
                raise ProtocolError(f"a skipped frame that is not the documented JSON: {body[:200]!r}") from None
        if kind == KIND_ERROR:
            if avail < _ERR.size:
                return None
            _, length = _ERR.unpack_from(buf, pos)
            if length > MAX_META_LEN:
                raise self._fail(f"error frame of {length} bytes is over the {MAX_META_LEN}-byte limit")
            if avail < _ERR.size + length:
                return None
            body = bytes(buf[pos + _ERR.size:pos + _ERR.size + length])
            self._pos = pos + _ERR.size + length
            self.finished = True
            try:
                doc = json.loads(body)
            except ValueError:
                raise ProtocolError(f"an error frame with a body that is not JSON: {body[:200]!r}") from None
            # An error frame arrives inside a 200 answer: there is no HTTP status to report.
            raise error_from_json(doc, None)
        raise ProtocolError(f"unknown frame kind {kind} after {self.records} records")

    def _fail(self, why: str) -> ProtocolError:
        """A frame that cannot be read: the stream is over (nothing after it is parsed)."""
        self.finished = True
        return ProtocolError(f"{why} (after {self.records} records)")

    @staticmethod
    def _labels(buf: Buffer, p: int, count: int, end: int) -> Dict[str, str]:
        labels: Dict[str, str] = {}
        start = p
        unpack = _U16.unpack_from
        try:
            for _ in range(count):
                (kl,) = unpack(buf, p)
                p += 2
                key = bytes(buf[p:p + kl]).decode("utf-8")
                p += kl
                (vl,) = unpack(buf, p)
                p += 2
                labels[key] = bytes(buf[p:p + vl]).decode("utf-8")
                p += vl
        except (struct.error, UnicodeDecodeError) as e:
            raise ProtocolError(f"a record frame's labels do not parse: {e}") from None
        if p != end:
            raise ProtocolError(f"a record frame's labels take {p - start} bytes, not the {end - start} announced")
        return labels

    def eof(self) -> None:
        """Says the input ended; raises if that was before the end frame."""
        if not self.finished:
            where = "in the middle of a record" if (self._remaining or self.buffered()) else "before its end frame"
            raise ProtocolError(
                f"the record stream ended {where} after {self.records} records: the connection was cut")


def _take(buf: Buffer, a: int, b: int) -> bytes:
    """``bytes(buf[a:b])`` with one copy instead of two for a bytearray; the view is released
    at once so that the buffer can be resized by the next ``feed()``."""
    view = memoryview(buf)
    try:
        return view[a:b].tobytes()
    finally:
        view.release()
