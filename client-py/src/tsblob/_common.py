"""Request building and answer parsing shared by the sync and async clients (no I/O here).

Both clients turn a call into the same path, query parameters and headers, and turn the
same answers into models; only the sending differs. Keeping that logic here means the two
clients cannot drift apart.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import ssl
import warnings
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Deque, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote, unquote, urlencode, urlsplit

from ._errors import InvalidInput, ProtocolError, TransportError, TsblobError, error_from_json
from ._framing import SERVER_TS, LabelValue as LabelValue, encode_end, encode_record, label_value
from ._models import RecordInfo
from ._timestamps import Timestamp, duration_micros, to_micros

API = "/api/v1"
LABEL_PREFIX = "x-tsblob-label-"
TS_HEADER = "x-tsblob-ts"
DEFAULT_URL = "http://127.0.0.1:8686"
DEFAULT_TIMEOUT = 30.0
DEFAULT_EAGER_LIMIT = 1 << 20
DEFAULT_BATCH_BYTES = 8 << 20
DEFAULT_BATCH_RECORDS = 10_000
STREAM_CHUNK = 1 << 20
# The last 8 bytes of a complete MCAP file (and its first).
MCAP_MAGIC = b"\x89MCAP0\r\n"
"""Bytes read at a time from a file object being uploaded."""

Labels = Mapping[str, LabelValue]
Params = List[Tuple[str, Any]]
JSON_HEADERS = {"content-type": "application/json"}

# Bounds on what a server's answer can make the client hold (a hostile or broken server
# must not exhaust its memory): an answer past its bound is cut off there, its connection
# closed (never put back in the pool half-read), and ProtocolError raised. Record payloads
# (read(), read_stream(), queries) have no such bound: they are streamed or asked for.
JSON_MAX = 64 << 20
"""The most of a JSON answer read (a bucket with all its entries, a token list...): the
Rust client's ``JSON_MAX`` (``proto/src/client.rs``)."""
ERROR_BODY_MAX = 64 << 10
"""The most of an error answer read (a tsblob error document is far smaller): the Rust
``ERROR_BODY_MAX`` (``proto/src/outbound.rs``)."""
META_LINE_MAX = 2 << 20
"""The longest line of a ``meta=True`` query's NDJSON answer (the server's lines carry at
most ~1 MiB of labels)."""
MAX_SKIPPED_LISTED = 1000
"""The most skipped records a query iterator lists in all (``skipped``); ``skipped_count``
counts every one. (A live tail's reports add up: without a bound the list would grow as
long as the tail runs.) The Rust client's ``MAX_SKIPPED_LISTED`` (``proto/src/client.rs``)."""


class Bounded:
    """The pieces of a body of unknown length read up to ``limit`` bytes (the sync and the
    async transports' ``read_bounded``): ``want(n)`` is the most to read next (never past
    ``limit + 1`` in all), ``add(piece)`` is ``False`` once more than ``limit`` arrived."""

    __slots__ = ("limit", "got", "parts")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.got = 0
        self.parts: List[bytes] = []

    def want(self, n: int) -> int:
        return min(n, self.limit + 1 - self.got)

    def add(self, piece: bytes) -> bool:
        self.got += len(piece)
        if self.got > self.limit:
            return False
        self.parts.append(piece)
        return True

    def body(self) -> bytes:
        return b"".join(self.parts)


def too_large(what: str, limit: int) -> ProtocolError:
    """The error for an answer cut off at ``limit`` bytes (``what``: which answer)."""
    return ProtocolError(f"{what} is over {limit} bytes, the most read from a server: it was cut off "
                         "(and its connection closed)")


class Response:
    """A whole answer: status, headers (names lower-cased, in order) and body."""

    __slots__ = ("status", "headers", "body", "attempts")

    def __init__(self, status: int, headers: List[Tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.attempts = 0  # earlier attempts of the call that failed and were retried


def parse_json(resp: Response) -> Any:
    try:
        return json.loads(resp.body)
    except ValueError:
        raise TsblobError(f"the server answered {resp.status} with a body that is not JSON: {resp.body[:200]!r}",
                          code="protocol", status=resp.status) from None


def env_url(url: Optional[str]) -> str:
    """``url``, else ``$TSBLOB_URL``, else ``http://127.0.0.1:8686`` (as the CLI); one that is
    no ``http://``/``https://`` URL raises :class:`InvalidInput` (:func:`check_url`)."""
    if url:
        return check_url(url).rstrip("/")
    env = os.environ.get("TSBLOB_URL")
    if env:
        return check_url(env, " (from $TSBLOB_URL)").rstrip("/")
    return DEFAULT_URL


def check_url(url: str, where: str = "") -> str:
    """``url`` if it is a server's base URL (``http://host[:port]`` or ``https://...``, a
    path below it allowed), else :class:`InvalidInput` saying the form expected (``where``:
    where the URL came from, for the message)."""
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # a port that is no number (or out of range) raises here
    except ValueError as e:
        ok, why = False, f" ({e})"
    else:
        why = ""
    if ok:
        return url
    if "://" not in url:
        why += f": did you mean 'http://{url}'?"
    elif parts.scheme not in ("http", "https"):
        why += f": the server speaks http:// (or https:// when started with --tls-cert), not {parts.scheme}://"
    raise InvalidInput(f"url {url!r}{where} is not a server's URL: give http://host:port or https://host:port "
                       f"(e.g. http://127.0.0.1:8686){why}", code="bad_request")


def env_ssl_context(ssl_context: Any, url: str) -> Any:
    """``ssl_context`` if given; else, for an ``https://`` URL with ``$TSBLOB_CA`` set, a
    default context that also trusts the certificates of that PEM file (as the CLI's
    ``--ca``: a private CA, a self-signed server certificate); else ``None`` (the system's
    CAs). A file that does not load raises :class:`InvalidInput`."""
    if ssl_context is not None or not url.startswith("https://"):
        return ssl_context
    ca = os.environ.get("TSBLOB_CA")
    if not ca:
        return None
    ctx = ssl.create_default_context()
    try:
        ctx.load_verify_locations(cafile=ca)
    except OSError as e:  # (ssl.SSLError too: a file without a PEM certificate)
        raise InvalidInput(f"TSBLOB_CA={ca!r} does not load as a PEM file of CA certificates: {e}",
                           code="bad_request") from e
    return ctx


def reopens(e: TsblobError, policy: "Retry") -> bool:
    """Whether a query or tail stream that failed with ``e`` is opened again (within
    ``policy``'s attempts): a connection that failed or was cut (:class:`TransportError`,
    :class:`ProtocolError`: a stream cut short), an answer of a status ``policy`` retries
    (502/503/504 on reopening), or the ``busy`` error frame with which a stopping server
    ends its streams ("follow again once it is back")."""
    return (isinstance(e, (TransportError, ProtocolError)) or e.status in policy.statuses
            or (e.status is None and e.code == "busy"))


def env_token(token: Optional[str]) -> Optional[str]:
    """``token``, else ``$TSBLOB_TOKEN`` (as the CLI); ``""`` means no token."""
    if token is None:
        token = os.environ.get("TSBLOB_TOKEN")
    return token or None


@dataclass(frozen=True)
class Retry:
    """When and how an idempotent call is sent again.

    A call is retried after a connection error or a ``502``/``503``/``504`` answer (``statuses``)
    at most ``attempts`` times, waiting ``backoff`` seconds before the first retry, doubled each
    time up to ``max_backoff``, each wait drawn in its upper half at random (jitter, so that
    clients cut off together do not come back together). Idempotent calls: reads, queries
    (which also resume after a dropped connection, see :meth:`Client.query`), ``head``,
    info and listings, settings and label updates, and writes with an explicit timestamp and
    a bytes payload (a ``409`` on a retry whose stored record has the payload's CRC counts as
    success). Never retried: writes without a timestamp or with a streamed payload, removals,
    bucket and token creation. ``Retry(attempts=0)`` (or ``retries=0``) turns retries off.
    """

    attempts: int = 3
    backoff: float = 0.1
    max_backoff: float = 5.0
    statuses: FrozenSet[int] = frozenset({502, 503, 504})

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1, 2, ...)."""
        full = min(self.backoff * (2 ** (attempt - 1)), self.max_backoff)
        return float(full * (0.5 + random.random() / 2))


NO_RETRY = Retry(attempts=0)


def retry_policy(retries: Union[int, Retry, None]) -> Retry:
    if retries is None:
        return NO_RETRY
    if isinstance(retries, Retry):
        return retries
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidInput(f"retries={retries!r}: give a number of retries (0 for none) or a tsblob.Retry",
                           code="bad_request")
    return Retry(attempts=retries)


def renamed(old: str, new: str, old_value: Any, new_value: Any, default: Any = None) -> Any:
    """The value of an option under its new name, taking the old (deprecated) name too."""
    if old_value is default:
        return new_value
    warnings.warn(f"{old}= is deprecated: use {new}= (the name the HTTP API and the CLI use)",
                  DeprecationWarning, stacklevel=3)
    if new_value is not default:
        raise InvalidInput(f"give {new}= or its old name {old}=, not both", code="bad_request")
    return old_value

# Printable ASCII stays readable in label headers; '%' (the escape) and space (trimmed at the
# ends of header values by HTTP parsers) are encoded, like every byte outside ASCII.
# Characters of a label key (docs/api.md); checked here because a key becomes a header name,
# and a header name with other characters would not reach the server as a label at all.
# The length limit is left to the server.
_LABEL_KEY = re.compile(r"[a-z0-9._-]+")
_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


# The server's name rules (proto/src/names.rs: validate_bucket_name, validate_entry_name),
# checked here once for every path the client builds and for each handle when it is made, so
# that a bad name raises at once, with the server's explanation, instead of a 422 at first use.
BUCKET_MAX = 64
ENTRY_MAX = 255
_NAME_CHAR = re.compile(r"[A-Za-z0-9._-]")
_NAME = re.compile(r"[A-Za-z0-9._-]+")
_ENTRY = re.compile(r"[A-Za-z0-9._/-]+")
RESERVED_BUCKETS = ("index", "tokens", "settings", "tsblob.lock", "replications")
RESERVED_BUCKET_PREFIXES = (".", "index.")
RESERVED_ENTRIES = ("settings", "settings.tmp")
ATTACHMENTS_WORD = "attachments"
RESERVED_ENTRY_WORDS = ("batch", "query", "info", "histogram", "rename", "labels", ATTACHMENTS_WORD)
_RESERVED_HELP = ("reserved words are the data folder's own files ({}, names starting with {}) and, as an entry's "
                  "last segment, the HTTP API's route words ({})").format(
    ", ".join(RESERVED_BUCKETS), " or ".join(f"'{p}'" for p in RESERVED_BUCKET_PREFIXES),
    ", ".join(RESERVED_ENTRY_WORDS))


def _bad_name(kind: str, name: str, why: str) -> InvalidInput:
    return InvalidInput(f"{kind} name {name!r} {why} (checked by the client before sending)", code="invalid_name")


def check_name(kind: str, name: Any) -> None:
    """Raises :class:`InvalidInput` (``invalid_name``, the server's words) when ``name`` breaks
    the server's rules for a ``kind`` (``"bucket"`` or ``"entry"``) name: 1-64 (bucket) or
    1-255 (entry) bytes of letters, digits, ``-``, ``_``, ``.`` (and ``/`` between an entry's
    segments); no segment empty, ``.`` or ``..``; none of the reserved words."""
    entry = kind == "entry"
    limit = ENTRY_MAX if entry else BUCKET_MAX
    if not isinstance(name, str):
        raise _bad_name(kind, str(name), f"is a {type(name).__name__}, not a str")
    if not name:
        raise InvalidInput(f"{kind} name is empty: give a name of 1 to {limit} characters "
                           "(checked by the client before sending)", code="invalid_name")
    if len(name.encode("utf-8", "surrogatepass")) > limit:
        raise _bad_name(kind, name, f"is longer than {limit} bytes")
    if not (_ENTRY if entry else _NAME).fullmatch(name):
        ch = next(c for c in name if c != "/" and not _NAME_CHAR.match(c)) if entry else \
            next(c for c in name if not _NAME_CHAR.match(c))
        slash = " ('/' separates segments)" if entry else ""
        raise _bad_name(kind, name, f"contains {ch!r}, which is not allowed: use letters, digits, '-', '_' and '.'{slash}")
    segments = name.split("/")
    if entry:
        folder = len(name) + 2 * (len(segments) - 1)
        if folder > ENTRY_MAX:
            raise _bad_name(kind, name, f"needs a folder name of {folder} bytes (each '/' is stored as the 3 bytes "
                                        "%2F), over the file system's 255: use fewer or shorter segments")
    if any(seg in ("", ".", "..") for seg in segments):
        raise _bad_name(kind, name, "has a path segment that is empty, '.' or '..': names may not escape or alias folders")
    if entry:
        reserved = next((s for s in segments if s == ATTACHMENTS_WORD), None)
        if reserved is None and name in RESERVED_ENTRIES:
            reserved = name
        if reserved is None and segments[-1] in RESERVED_ENTRY_WORDS:
            reserved = segments[-1]
    else:
        prefix = next((p for p in RESERVED_BUCKET_PREFIXES if name.startswith(p)), None)
        if name not in RESERVED_BUCKETS and prefix is not None:
            raise _bad_name(kind, name, f"starts with {prefix!r}, which the data folder keeps for its own files: "
                                        f"{_RESERVED_HELP}; choose another name (one starting with a letter or digit "
                                        "is always safe)")
        reserved = name if name in RESERVED_BUCKETS else None
    if reserved is not None:
        raise _bad_name(kind, name, f"uses the reserved word {reserved!r}: {_RESERVED_HELP}; choose another name")


def bucket_path(bucket: str) -> str:
    """``/api/v1/b/<bucket>``; a name that breaks the server's rules raises here
    (:func:`check_name`)."""
    check_name("bucket", bucket)
    return f"{API}/b/{quote(bucket, safe='')}"


def entry_path(bucket: str, entry: str) -> str:
    """``/api/v1/b/<bucket>/<entry>``; entry names may hold '/'-separated segments.

    The paths of recent names are kept (every write to an entry builds the same path: two
    ``quote`` calls and the checks, some 2.5 µs); a bad name raises each time (nothing is
    kept for it)."""
    if type(bucket) is str and type(entry) is str:
        return _entry_path_of_str(bucket, entry)
    return _entry_path(bucket, entry)


def _entry_path(bucket: str, entry: str) -> str:
    check_name("entry", entry)
    return f"{bucket_path(bucket)}/{quote(entry, safe='/')}"


_entry_path_of_str = functools.lru_cache(maxsize=1024)(_entry_path)


def label_headers(labels: Optional[Labels], headers: Dict[str, str]) -> None:
    """Adds ``x-tsblob-label-<key>: <percent-encoded value>`` headers."""
    if not labels:
        return
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.fullmatch(key):
            raise InvalidInput(
                f"label key {key!r} is not usable: keys are 1-128 characters of a-z 0-9 - _ . "
                "(lower case, because HTTP header names ignore case)", code="invalid_label")
        headers[LABEL_PREFIX + key] = quote(label_value(value, key), safe=_SAFE)


def labels_from_headers(headers: Iterable[Tuple[str, str]]) -> Dict[str, str]:
    n = len(LABEL_PREFIX)
    return {k[n:]: unquote(v) for k, v in headers if k.startswith(LABEL_PREFIX)}


def info_from_headers(headers: List[Tuple[str, str]]) -> Tuple[int, str, Dict[str, str], int]:
    """(ts, content type, labels, size) from a record's response headers (lower-case names)."""
    ts, content_type, size = 0, "application/octet-stream", 0
    labels: Dict[str, str] = {}
    n = len(LABEL_PREFIX)
    for k, v in headers:
        if k.startswith(LABEL_PREFIX):
            labels[k[n:]] = unquote(v)
        elif k == TS_HEADER:
            ts = int(v)
        elif k == "content-type":
            content_type = v
        elif k == "content-length":
            size = int(v)
    return ts, content_type, labels, size


def target(path: str, params: Optional[Params] = None) -> str:
    """Path plus query string, every value percent-encoded."""
    if not params:
        return path
    if len(params) == 1 and params[0][0] == "ts":  # every single-record call: skip urlencode
        return f"{path}?ts={params[0][1]}"
    return path + "?" + urlencode(params, quote_via=quote, safe="")


def write_headers(content_type: Optional[str], labels: Optional[Labels], size: Optional[int]) -> Dict[str, str]:
    headers: Dict[str, str] = {}
    if content_type:
        headers["content-type"] = content_type
    if size is not None:
        headers["content-length"] = str(size)
    label_headers(labels, headers)
    return headers


def ts_params(ts: Optional[Timestamp]) -> Params:
    return [] if ts is None else [("ts", str(to_micros(ts)))]


def query_params(start: Optional[Timestamp], stop: Optional[Timestamp], eq: Optional[Labels],
                 ne: Optional[Labels], has: Optional[Sequence[str]], missing: Optional[Sequence[str]],
                 limit: Optional[int], desc: bool, when: Optional[Mapping[str, Any]] = None,
                 strict: bool = False, meta: bool = False) -> Params:
    params: Params = []
    if start is not None:
        params.append(("start", str(to_micros(start))))
    if stop is not None:
        params.append(("stop", str(to_micros(stop))))
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidInput(f"limit {limit!r} must be a non-negative int", code="bad_request")
        params.append(("limit", str(limit)))
    if desc:
        params.append(("desc", "true"))
    for k, v in (eq or {}).items():
        params.append((f"eq.{k}", label_value(v, k)))
    for k, v in (ne or {}).items():
        params.append((f"ne.{k}", label_value(v, k)))
    for k in _names(has):
        params.append(("has", k))
    for k in _names(missing):
        params.append(("missing", k))
    params.extend(when_params(when, strict))
    if meta:
        params.append(("meta", "true"))
    return params


def selection_body(start: Optional[Timestamp], stop: Optional[Timestamp], when: Optional[Mapping[str, Any]],
                   strict: bool, limit: Optional[int]) -> Dict[str, Any]:
    """The selection of a JSON request body (``PATCH …/query``): the same fields as a query's
    parameters, typed as JSON."""
    body: Dict[str, Any] = {}
    if start is not None:
        body["start"] = to_micros(start)
    if stop is not None:
        body["stop"] = to_micros(stop)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidInput(f"limit {limit!r} must be a non-negative int", code="bad_request")
        body["limit"] = limit
    if when is not None:
        body["when"] = when
    if strict:
        body["strict"] = True
    return body


def when_params(when: Optional[Mapping[str, Any]], strict: bool) -> Params:
    """``when`` (a condition in ReductStore's language, as a dict) as compact JSON, and
    ``strict``."""
    params: Params = []
    if when is not None:
        if not isinstance(when, Mapping):
            raise InvalidInput(f"when must be a dict such as {{'&score': {{'$gt': 10}}}}, not {when!r}",
                               code="bad_request")
        params.append(("when", json.dumps(when, separators=(",", ":"))))
    if strict:
        params.append(("strict", "true"))
    return params


class Resume:
    """Where a query stands, to reopen it after a dropped connection without missing or
    repeating a record: the last timestamp handed out and the entries already handed out at
    that timestamp (several for a multi-entry query; ``None`` for one entry), and how many
    records were handed out in all (for ``limit``). The reopened query starts at that
    timestamp inclusive (``stop`` just after it when newest first) and skips those; oldest
    first on one entry without ``stop`` or ``limit`` (a tail), where no other record can
    share it, just after it (``last + 1``: the last record is not sent again)."""

    __slots__ = ("last", "seen", "count")

    def __init__(self) -> None:
        self.last: Optional[int] = None
        self.seen: List[Optional[str]] = []
        self.count = 0

    def take(self, ts: int, entry: Optional[str]) -> bool:
        """Notes a record about to be handed out; False for one of a reopened stream that was
        handed out before the cut (to be skipped)."""
        if ts == self.last:
            if entry in self.seen:
                return False
            self.seen.append(entry)
        else:
            self.last = ts
            self.seen = [entry]
        self.count += 1
        return True

    def params(self, params: Params) -> Params:
        """``params`` of the query reopened from here."""
        if self.last is None:
            return params
        get = dict(params).get
        desc = get("desc") == "true"
        out: Params = [(k, v) for k, v in params if k not in ("start", "stop", "limit")]
        resent = len(self.seen)  # records at ``last`` the reopened stream sends again
        if desc:
            out.append(("stop", str(self.last + 1)))
            if get("start") is not None:
                out.append(("start", get("start")))
        else:
            if self.seen == [None] and get("stop") is None and get("limit") is None:
                # one entry (a tail, or a query open at its end): start after the last record
                out.append(("start", str(self.last + 1)))
                resent = 0
            else:
                out.append(("start", str(self.last)))
            if get("stop") is not None:
                out.append(("stop", get("stop")))
        limit = get("limit")
        if limit is not None:
            out.append(("limit", str(int(limit) - self.count + resent)))
        return out


def meta_line(line: bytes) -> Optional[RecordInfo]:
    """One NDJSON line of a ``meta=True`` query; an ``{"error": ...}`` line raises; a live
    tail's ``{"heartbeat": µs}`` line is ``None``."""
    try:
        doc = json.loads(line)
    except ValueError as e:
        raise ProtocolError(f"a metadata line is not JSON: {line[:200]!r}") from e
    if isinstance(doc, dict) and "error" in doc:
        raise error_from_json(doc, None)
    if isinstance(doc, dict) and "heartbeat" in doc and "ts" not in doc:
        return None
    if isinstance(doc, dict) and "skipped" in doc and "ts" not in doc:
        return None  # (meta=True reads no payload, so it never skips a damaged one)
    return RecordInfo.from_json(doc)


def query_path(bucket: str, entry: Optional[str], entries: Optional[Union[str, Sequence[str]]],
               params: Params) -> str:
    """The query route of one entry, or the bucket-level one with ``entries`` added to
    ``params`` (names and globs: ``*`` within a segment, ``**`` across)."""
    if entries is None:
        if entry is None:
            raise InvalidInput("give an entry, or entries=[...] (names and globs) for a multi-entry query",
                               code="bad_request")
        return entry_path(bucket, entry) + "/query"
    if entry is not None:
        raise InvalidInput("give either an entry or entries=[...], not both", code="bad_request")
    names = _names(entries)
    if not names:
        raise InvalidInput("entries=[] names no entry: give names or globs such as ['cams/*', 'imu']",
                           code="bad_request")
    params.append(("entries", ",".join(names)))
    return bucket_path(bucket) + "/query"


TAIL_RETRIES = 5
"""Reconnections a tail attempts in a row (after a dropped connection) before it gives up."""
TAIL_BACKOFF = 0.5
"""Seconds before the first reconnection; doubled at each failure in a row, at most 30 s."""


def has_limit(when: Any) -> bool:
    """Whether a condition holds ``$limit`` anywhere (an operator, at any depth: ``$and``'s
    operands too), which may end a live tail's answer for good; without one, a tail's answer
    that ends was cut."""
    if isinstance(when, Mapping):
        return any(k == "$limit" or has_limit(v) for k, v in when.items())
    if isinstance(when, (list, tuple)):
        return any(has_limit(v) for v in when)
    return False


def tail_params(start: Optional[int], when: Optional[Mapping[str, Any]], strict: bool, meta: bool,
                heartbeat: Optional[int], settle_ms: Optional[int]) -> Params:
    """Parameters of a live tail (``follow=true``) from ``start`` (µs) on."""
    params: Params = [("follow", "true")]
    if start is not None:
        params.append(("start", str(start)))
    params.extend(when_params(when, strict))
    if meta:
        params.append(("meta", "true"))
    if heartbeat is not None:
        params.append(("heartbeat", str(int(heartbeat))))
    if settle_ms is not None:
        params.append(("settle_ms", str(int(settle_ms))))
    return params


class MetaParser:
    """The NDJSON answer of a ``meta=True`` query, with the push interface of
    :class:`~tsblob._framing.FrameParser`: ``feed()`` chunks, take :class:`RecordInfo` out of
    ``next_event()`` (``None`` when it needs more), ``eof()`` at the end.

    A line longer than :data:`META_LINE_MAX` raises :class:`ProtocolError` (a server that
    never sends a line break cannot make the client hold its answer whole); each byte is
    scanned for the line break once (only what arrived since the last ``feed``)."""

    __slots__ = ("_rest", "_lines")

    def __init__(self) -> None:
        self._rest = bytearray()  # the start of a line whose end has not come (no b"\n" in it)
        self._lines: Deque[bytes] = deque()

    def feed(self, data: bytes) -> None:
        rest = self._rest
        at = len(rest)  # where the new bytes start: the ones before hold no line break
        rest += data
        start = 0
        find = rest.find
        lines = self._lines
        while True:
            end = find(b"\n", at)
            if end < 0:
                break
            if end - start > META_LINE_MAX:
                raise self._too_long()
            line = bytes(rest[start:end])
            if line.strip():
                lines.append(line)
            start = at = end + 1
        if start:
            del rest[:start]
        if len(rest) > META_LINE_MAX:
            raise self._too_long()

    @staticmethod
    def _too_long() -> ProtocolError:
        return ProtocolError(f"a line of the metadata answer is over {META_LINE_MAX} bytes, the most read "
                             "from a server (its lines are far shorter): it was cut off")

    def next_event(self) -> Optional[RecordInfo]:
        while self._lines:
            info = meta_line(self._lines.popleft())
            if info is not None:
                return info
        return None

    def eof(self) -> None:
        rest, self._rest = self._rest, bytearray()
        if rest.strip():
            self._lines.append(bytes(rest))


def _names(keys: Optional[Union[str, Sequence[str]]]) -> List[str]:
    if keys is None:
        return []
    return [keys] if isinstance(keys, str) else [str(k) for k in keys]


def range_params(ts: Optional[Timestamp], start: Optional[Timestamp], stop: Optional[Timestamp]) -> Params:
    """Parameters of a record or range removal; the whole entry is never removed by default."""
    if ts is not None:
        if start is not None or stop is not None:
            raise InvalidInput("give either ts (one record) or start/stop (a range), not both", code="bad_request")
        return ts_params(ts)
    if start is None and stop is None:
        raise InvalidInput("remove() needs ts (one record) or start/stop (a range); "
                           "to remove a whole entry call remove_entry()", code="bad_request")
    # An open end is left out: the server reads it as "from the oldest" / "to the latest".
    params: Params = []
    if start is not None:
        params.append(("start", str(to_micros(start))))
    if stop is not None:
        params.append(("stop", str(to_micros(stop))))
    return params


Size = Union[int, str]
"""Bytes: an ``int``, or a string with a unit as the server reads it (``"24MiB"``, ``"10GB"``)."""
Duration = Union[int, str, timedelta]
"""A span of time: an ``int`` of microseconds (the server's unit), a ``timedelta``, or a
string such as ``"30d"``, ``"12h"``, ``"90s"``, ``"1h 30m"``."""

_SIZE = re.compile(r"\s*(\d+)\s*([A-Za-z]*)\s*")
_SIZE_POWERS = {"": 0, "b": 0, "k": 1, "m": 2, "g": 3, "t": 4}
U64_MAX = (1 << 64) - 1


def _bad_setting(name: str, value: Any, why: str) -> InvalidInput:
    return InvalidInput(f"{name}={value!r} {why} (checked by the client before sending)", code="invalid_settings")


def parse_size(value: Size, name: str = "size") -> int:
    """Bytes from an ``int`` or a string with the server's units: ``KB``, ``MB``, ``GB``,
    ``TB`` are powers of 1000, ``KiB``, ``MiB``, ``GiB``, ``TiB`` (and a bare ``K``, ``M``,
    ``G``, ``T``) powers of 1024; case-insensitive but for that ``i``
    (``proto/src/size.rs``). A bad value raises :class:`~tsblob.InvalidInput` (a ``ValueError``)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _bad_setting(name, value, "is not a size: give bytes (an int) or a string such as '24MiB' or '10GB'")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.fullmatch(value)
        unit = m.group(2).lower() if m else ""
        power = _SIZE_POWERS.get(unit[:1]) if m else None
        rest = unit[1:]
        if m is None or power is None or (power == 0 and rest) or rest not in ("", "ib", "b"):
            raise _bad_setting(name, value, "is not a size: give bytes, or a whole number then a unit: "
                                            "B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)")
        n = int(m.group(1)) * ((1000 if rest == "b" else 1024) ** power)
    if not 0 <= n <= U64_MAX:
        raise _bad_setting(name, value, "is out of range (0 to 2^64-1 bytes)")
    return n


def parse_duration(value: Duration, name: str = "duration") -> int:
    """Microseconds from an ``int`` (µs), a ``timedelta`` or a string such as ``"30d"``,
    ``"12h"``, ``"90s"``, ``"1h 30m"`` (the units of the server's parser: ``us``, ``ms``,
    ``s``, ``m``/``min``, ``h``, ``d``, ``w``, ``M`` (months), ``y``). A bad value raises
    :class:`~tsblob.InvalidInput` (a ``ValueError``)."""
    if isinstance(value, timedelta):
        us = value // timedelta(microseconds=1)
    elif isinstance(value, int) and not isinstance(value, bool):
        us = value
    elif isinstance(value, str):
        try:
            us = duration_micros(value)
        except ValueError:
            raise _bad_setting(name, value, "is not a duration: give microseconds (an int), a timedelta, or "
                                            "a string such as '30d', '12h', '90s', '1h 30m'") from None
    else:
        raise _bad_setting(name, value, "is not a duration: give microseconds (an int), a timedelta, or "
                                        "a string such as '30d', '12h', '90s'")
    if not 0 < us <= U64_MAX:
        raise _bad_setting(name, value, "must be longer than 0 (to turn the setting off give 'none')")
    return us


def _off_or(value: Any, parse: Any, name: str) -> Any:
    """A setting that ``"none"`` turns off (sent as ``"none"``), else parsed."""
    if isinstance(value, str) and value.strip().lower() == "none":
        return "none"
    return parse(value, name)


QUOTA_TYPES = ("none", "fifo", "hard")
"""A bucket's ``quota_type`` values (any case, as the server reads them: storage/src/settings.rs)."""
_ZSTD_LEVEL = re.compile(r"zstd:\+?([0-9]+)")


def check_quota_type(value: Any) -> None:
    """Raises :class:`InvalidInput` (``invalid_settings``) for a ``quota_type`` the server refuses."""
    if not (isinstance(value, str) and value.isascii() and value.lower() in QUOTA_TYPES):
        raise _bad_setting("quota_type", value, "is not a quota type: give 'none', 'fifo' or 'hard'")


def check_compression(value: Any) -> None:
    """Raises :class:`InvalidInput` (``invalid_settings``) for a bucket ``compression`` the
    server refuses: it takes ``"none"``, ``"zstd"`` (level 3) or ``"zstd:<level 1-22>"``, in
    lower case (storage/src/settings.rs)."""
    if isinstance(value, str):
        if value in ("none", "zstd"):
            return
        m = _ZSTD_LEVEL.fullmatch(value)
        if m is not None and 1 <= int(m.group(1)) <= 22:
            return
    raise _bad_setting("compression", value, "is not a bucket compression: give 'none', 'zstd' or "
                                             "'zstd:<level 1-22>' (such as 'zstd:9')")


def settings_json(quota_type: Optional[str], quota_size: Optional[Size], max_block_size: Optional[Size],
                  max_block_records: Optional[int], compression: Optional[str], max_age: Optional[Duration] = None,
                  tier_local_max: Optional[Size] = None, tier_after: Optional[Duration] = None) -> Dict[str, Any]:
    """The (partial) settings document: only what the caller gave, sizes in bytes and
    durations in µs (checked here, so that a bad one is a clear ``InvalidInput`` rather than
    the server's JSON parser's message); ``"none"`` turns ``max_age``, ``tier_local_max``
    and ``tier_after`` off."""
    if quota_type is not None:
        check_quota_type(quota_type)
    if compression is not None:
        check_compression(compression)
    d: Dict[str, Any] = {"quota_type": quota_type, "compression": compression}
    if quota_size is not None:
        d["quota_size"] = parse_size(quota_size, "quota_size")
    if max_block_size is not None:
        d["max_block_size"] = parse_size(max_block_size, "max_block_size")
    if max_block_records is not None:
        if isinstance(max_block_records, bool) or not isinstance(max_block_records, int) or max_block_records <= 0:
            raise _bad_setting("max_block_records", max_block_records, "is not a positive int")
        d["max_block_records"] = max_block_records
    if max_age is not None:
        d["max_age"] = _off_or(max_age, parse_duration, "max_age")
    if tier_local_max is not None:
        d["tier_local_max"] = _off_or(tier_local_max, parse_size, "tier_local_max")
    if tier_after is not None:
        d["tier_after"] = _off_or(tier_after, parse_duration, "tier_after")
    return {k: v for k, v in d.items() if v is not None}


class SettingsMismatch(UserWarning):
    """``create_bucket(..., exist_ok=True)`` found the bucket with other settings than the
    ones asked for (they were left as they are: use ``update_bucket`` to change them)."""


class SettingsMismatchError(InvalidInput):
    """``create_bucket(..., exist_ok=True, strict=True)`` found the bucket with other
    settings than the ones asked for; ``differences`` is ``{setting: (asked, stored)}``."""

    def __init__(self, message: str, differences: Dict[str, Tuple[Any, Any]]) -> None:
        super().__init__(message, code="settings_mismatch")
        self.differences = differences


def check_existing_settings(bucket: str, asked: Mapping[str, Any], have: Any, strict: bool) -> None:
    """Warns (``strict``: raises) when an existing bucket's settings differ from ``asked``."""
    diff = have.differences(asked)
    if not diff:
        return
    listed = ", ".join(f"{k} {a!r} asked, {h!r} stored" for k, (a, h) in diff.items())
    msg = (f"bucket {bucket!r} exists with other settings than asked ({listed}); they were left unchanged: "
           "call update_bucket() to change them")
    if strict:
        raise SettingsMismatchError(msg, diff)
    warnings.warn(msg, SettingsMismatch, stacklevel=3)


def labels_patch(labels: Mapping[str, Optional[LabelValue]]) -> Dict[str, Any]:
    return {"labels": {str(k): (None if v is None else label_value(v, str(k))) for k, v in labels.items()}}


def record_info(doc: Mapping[str, Any]) -> RecordInfo:
    return RecordInfo.from_json(doc)


BatchItem = Any
"""An item of ``write_batch``: bytes (the server assigns the timestamp); a
``(ts, data[, labels[, content_type]])`` tuple; a mapping with ``data`` and optional ``ts``,
``labels``, ``content_type``; or a :class:`~tsblob.Record` read from another entry."""


def _normalise(item: BatchItem) -> Tuple[Optional[int], Any, Optional[str], Optional[Labels]]:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return None, item, None, None
    if isinstance(item, RecordInfo):
        data = getattr(item, "data")
        return item.timestamp, data, item.content_type, item.labels
    if isinstance(item, Mapping):
        ts = item.get("ts", item.get("timestamp"))
        return (None if ts is None else to_micros(ts), item["data"], item.get("content_type"),
                item.get("labels"))
    if isinstance(item, (tuple, list)) and 2 <= len(item) <= 4:
        ts = item[0]
        labels = item[2] if len(item) > 2 else None
        ct = item[3] if len(item) > 3 else None
        return (None if ts is None else to_micros(ts)), item[1], ct, labels
    raise TypeError(f"write_batch() cannot use a {type(item).__name__} as a record: give bytes, "
                    "(ts, data[, labels[, content_type]]), a dict with 'data', or a Record")


def iter_batches(records: Iterable[BatchItem], max_bytes: int, max_records: int
                 ) -> Iterator[Tuple[bytearray, List[Tuple[Optional[int], int, int]]]]:
    """Splits records into request bodies of at most ``max_bytes`` (a record larger than that
    travels alone) and ``max_records`` records; yields ``(body, spans)``, a span being
    ``(ts or None, payload offset in body, payload length)`` per record. Only one body exists
    at a time, built in place: the caller's payload objects are not kept."""
    body = bytearray()
    spans: List[Tuple[Optional[int], int, int]] = []
    for item in records:
        ts, data, ct, labels = _normalise(item)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"batch record data must be bytes-like, not {type(data).__name__}; "
                            "stream large payloads one at a time with write()")
        if ts == SERVER_TS:
            raise InvalidInput(f"timestamp {ts} is reserved", code="invalid_timestamp")
        head, payload = encode_record(ts, data, ct, labels)
        fsize = len(head) + len(payload)
        if spans and (len(body) + fsize > max_bytes or len(spans) >= max_records):
            body += encode_end(len(spans))
            yield body, spans
            body, spans = bytearray(), []
        body += head
        spans.append((ts, len(body), len(payload)))
        body += payload
    if spans:
        body += encode_end(len(spans))
        yield body, spans


def histogram_params(start: Optional[Timestamp], stop: Optional[Timestamp],
                     step: Optional[Union[int, timedelta]]) -> Params:
    """``start``/``stop`` of a histogram (any timestamp form), ``step`` as µs or a timedelta."""
    params: Params = []
    if start is not None:
        params.append(("start", str(to_micros(start))))
    if stop is not None:
        params.append(("stop", str(to_micros(stop))))
    if step is not None:
        us = int(step.total_seconds() * 1_000_000) if isinstance(step, timedelta) else int(step)
        if us <= 0:
            raise InvalidInput(f"step={step!r} is not a positive number of microseconds", code="bad_request")
        params.append(("step", str(us)))
    return params


def replication_body(src_bucket: str, dst_url: str, dst_bucket: str, dst_token: Optional[str],
                     entries: Sequence[str], when: Optional[Mapping[str, Any]], mode: str,
                     from_ts: Optional[Timestamp], dst_ca: Optional[str] = None, dst_prefix: str = "",
                     dst_api: str = "tsblob", compression: str = "auto") -> Dict[str, Any]:
    """The JSON of ``PUT /api/v1/replications/{name}`` (docs/replication.md)."""
    if mode not in ("enabled", "paused", "disabled"):
        raise InvalidInput(f"mode={mode!r}: give 'enabled', 'paused' or 'disabled'", code="bad_request")
    if dst_api not in ("tsblob", "reductstore"):
        raise InvalidInput(f"dst_api={dst_api!r}: give 'tsblob' or 'reductstore'", code="bad_request")
    if compression not in ("auto", "zstd", "none", "gzip"):
        raise InvalidInput(f"compression={compression!r}: give 'auto', 'zstd', 'none' or 'gzip' (gzip: to a "
                           "ReductStore destination only)", code="bad_request")
    body: Dict[str, Any] = {"src_bucket": src_bucket, "dst_url": dst_url, "dst_bucket": dst_bucket,
                            "entries": list(entries), "mode": mode, "dst_api": dst_api,
                            "compression": compression}
    if dst_prefix:
        body["dst_prefix"] = dst_prefix
    if dst_token is not None:
        body["dst_token"] = dst_token
    if dst_ca is not None:
        body["dst_ca"] = dst_ca
    if when is not None:
        body["when"] = dict(when)
    if from_ts is not None:
        body["from"] = to_micros(from_ts)  # as every ts/start/stop: seconds, datetimes, "now-1h"...
    return body


def replication_path(name: str) -> str:
    return f"{API}/replications/{quote(name, safe='')}"


def lifecycle_path(bucket: str, name: Optional[str] = None) -> str:
    """``/api/v1/lifecycle/<bucket>[/<name>]`` (the bucket's name checked as ``bucket_path`` does)."""
    path = f"{API}/lifecycle/{bucket_path(bucket)[len(API) + 3:]}"
    return path if name is None else f"{path}/{quote(name, safe='')}"


def lifecycle_body(older_than: Duration, interval: Optional[Duration], entries: Sequence[str],
                   when: Optional[Mapping[str, Any]], mode: Optional[str],
                   action: Optional[str] = None) -> Dict[str, Any]:
    """The JSON of ``PUT /api/v1/lifecycle/{bucket}/{name}`` (durations sent as µs)."""
    if isinstance(entries, str):
        entries = [entries]
    body: Dict[str, Any] = {"older_than": parse_duration(older_than, "older_than")}
    if interval is not None:
        body["interval"] = parse_duration(interval, "interval")
    if entries:
        body["entries"] = list(entries)
    if when is not None:
        body["when"] = dict(when)
    if mode is not None:
        body["mode"] = mode
    if action is not None:
        body["action"] = action
    return body
