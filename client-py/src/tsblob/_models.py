"""What the server answers, as typed Python objects.

Control-plane answers (buckets, entries, server info, tokens) are frozen dataclasses built
from the server's JSON. Records are small classes with ``__slots__`` because a query can
produce hundreds of thousands of them.

``Record``/``AsyncRecord`` (a record's payload, readable as a file) are defined with the
clients (``_async/client.py``), since reading a streamed payload is I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from ._errors import BatchError, TsblobError, error_from_json
from ._timestamps import from_micros

__all__ = [
    "BucketSettings",
    "BucketInfo",
    "EntryInfo",
    "Bucket",
    "ServerInfo",
    "Health",
    "RecordInfo",
    "RecordResult",
    "SkippedRecord",
    "BatchResult",
    "Token",
    "Histogram",
    "LifecycleStatus",
    "LifecycleRule",
]


def _opt_int(v: Any) -> Optional[int]:
    return None if v is None else int(v)


@dataclass(frozen=True)
class BucketSettings:
    """Settings of a bucket. ``compression`` is ``"none"``, ``"zstd"`` or ``"zstd:<level>"``;
    ``quota_type`` is ``"none"``, ``"fifo"`` (drop the oldest blocks) or ``"hard"`` (refuse
    writes); ``quota_size`` is in bytes on disk. ``max_age``: age-based retention in µs
    (whole blocks whose newest record is older are deleted; ``None``: kept until removed).
    With a tier (``tsblob serve --tier-url``): ``tier_local_max``, bytes of sealed blocks
    kept on the local disk (``None``: no budget), and ``tier_after``, µs after which sealed
    blocks are uploaded even below that budget (``None``: no age rule)."""

    quota_type: str = "none"
    quota_size: int = 0
    max_block_size: int = 64 << 20
    max_block_records: int = 1 << 20
    compression: str = "none"
    max_age: Optional[int] = None
    tier_local_max: Optional[int] = None
    tier_after: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "BucketSettings":
        defaults = cls()
        return cls(
            quota_type=str(d.get("quota_type", defaults.quota_type)),
            quota_size=int(d.get("quota_size", defaults.quota_size)),
            max_block_size=int(d.get("max_block_size", defaults.max_block_size)),
            max_block_records=int(d.get("max_block_records", defaults.max_block_records)),
            compression=str(d.get("compression", defaults.compression)),
            max_age=_opt_int(d.get("max_age")),
            tier_local_max=_opt_int(d.get("tier_local_max")),
            tier_after=_opt_int(d.get("tier_after")),
        )

    def differences(self, asked: Mapping[str, Any]) -> Dict[str, Tuple[Any, Any]]:
        """``{setting: (asked, stored)}`` for each setting of ``asked`` (a settings document
        as the client sends it: bytes, µs, ``"none"``) that this one does not have."""
        out: Dict[str, Tuple[Any, Any]] = {}
        for key, want in asked.items():
            have = getattr(self, key, None)
            norm = want
            if key == "compression" and want == "zstd":
                norm = "zstd:3"
            elif key == "quota_type" and isinstance(want, str):
                norm = want.lower()
            elif want == "none" and key in ("max_age", "tier_local_max", "tier_after"):
                norm = None
            if norm != have:
                out[key] = (want, have)
        return out


@dataclass(frozen=True)
class BucketInfo:
    """Sizes and counts of a bucket. ``size`` counts bytes of block files on disk (what the
    quota counts, precise to one block); ``oldest``/``latest`` are µs or ``None`` when empty."""

    record_count: int = 0
    size: int = 0
    block_count: int = 0
    entry_count: int = 0
    oldest: Optional[int] = None
    latest: Optional[int] = None
    evicted_blocks: int = 0
    quota_used: Optional[float] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "BucketInfo":
        q = d.get("quota_used")
        return cls(
            record_count=int(d.get("record_count", 0)),
            size=int(d.get("size", 0)),
            block_count=int(d.get("block_count", 0)),
            entry_count=int(d.get("entry_count", 0)),
            oldest=_opt_int(d.get("oldest")),
            latest=_opt_int(d.get("latest")),
            evicted_blocks=int(d.get("evicted_blocks", 0)),
            quota_used=None if q is None else float(q),
        )


@dataclass(frozen=True)
class EntryInfo:
    """Sizes and counts of one entry (a stream of records inside a bucket)."""

    name: str
    record_count: int = 0
    size: int = 0
    block_count: int = 0
    oldest: Optional[int] = None
    latest: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "EntryInfo":
        return cls(
            name=str(d["name"]),
            record_count=int(d.get("record_count", 0)),
            size=int(d.get("size", 0)),
            block_count=int(d.get("block_count", 0)),
            oldest=_opt_int(d.get("oldest")),
            latest=_opt_int(d.get("latest")),
        )


@dataclass(frozen=True)
class Bucket:
    """A bucket: its name, settings, totals and (from ``get_bucket``) its entries."""

    name: str
    settings: BucketSettings = field(default_factory=BucketSettings)
    info: BucketInfo = field(default_factory=BucketInfo)
    entries: List[EntryInfo] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Bucket":
        return cls(
            name=str(d["name"]),
            settings=BucketSettings.from_json(d.get("settings") or {}),
            info=BucketInfo.from_json(d.get("info") or {}),
            entries=[EntryInfo.from_json(e) for e in d.get("entries") or []],
        )


@dataclass(frozen=True)
class ServerInfo:
    """``GET /api/v1/info``: version, uptime, bucket count, bytes used, sync policy."""

    version: str
    uptime_s: float = 0
    bucket_count: int = 0
    usage: int = 0
    sync: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ServerInfo":
        return cls(
            version=str(d.get("version", "")),
            uptime_s=float(d.get("uptime_s", 0)),
            bucket_count=int(d.get("bucket_count", 0)),
            usage=int(d.get("usage", 0)),
            sync=str(d.get("sync", "")),
        )


@dataclass(frozen=True)
class Health:
    """``GET /health``."""

    status: str
    version: str = ""
    #: ``"full"`` while the server refuses writes for disk space (507 ``disk_full``: its
    #: free space is below ``--free-space-reserve``); ``"ok"`` otherwise.
    disk: str = "ok"
    #: ``"full"`` while the server's index map (``--index-map-size``) is full (507
    #: ``index_full``); ``"ok"`` otherwise.
    index: str = "ok"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Token:
    """An access token's permissions and limits (never its value, which is shown once, at
    creation or rotation). Times are µs since the epoch (``tsblob.from_micros`` makes a
    ``datetime``); ``ttl`` is in seconds."""

    name: str
    full_access: bool = False
    read: List[str] = field(default_factory=list)
    write: List[str] = field(default_factory=list)
    created: Optional[Any] = None
    #: The token stops working at this time; ``None``: never.
    expires_at: Optional[int] = None
    #: Seconds of inactivity after which the token stops working; ``None``: no limit.
    ttl: Optional[int] = None
    #: Addresses or CIDR networks the token may be used from; empty: any.
    ip_allowlist: List[str] = field(default_factory=list)
    #: The last request that used the token (to the second); ``None``: not used yet.
    last_access: Optional[int] = None
    #: When the token's value was last rotated.
    rotated: Optional[int] = None
    #: True once the token no longer works (past ``expires_at``, or unused for ``ttl``).
    is_expired: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Token":
        def opt_int(k: str) -> Optional[int]:
            v = d.get(k)
            return None if v is None else int(v)

        return cls(
            name=str(d.get("name", "")),
            full_access=bool(d.get("full_access", False)),
            read=[str(b) for b in d.get("read") or []],
            write=[str(b) for b in d.get("write") or []],
            created=d.get("created"),
            expires_at=opt_int("expires_at"),
            ttl=opt_int("ttl"),
            ip_allowlist=[str(n) for n in d.get("ip_allowlist") or []],
            last_access=opt_int("last_access"),
            rotated=opt_int("rotated"),
            is_expired=bool(d.get("is_expired", False)),
        )


class RecordInfo:
    """Metadata of a record: timestamp (µs), content type, labels, payload size, and the
    entry it belongs to in the answer of a multi-entry query (``None`` otherwise)."""

    __slots__ = ("timestamp", "content_type", "labels", "size", "entry")

    def __init__(self, timestamp: int, content_type: str, labels: Dict[str, str], size: int,
                 entry: Optional[str] = None) -> None:
        self.timestamp = timestamp
        self.content_type = content_type
        self.labels = labels
        self.size = size
        self.entry = entry

    @property
    def ts(self) -> int:
        """Alias of ``timestamp`` (µs since the epoch)."""
        return self.timestamp

    @property
    def datetime(self) -> datetime:
        """The timestamp as an aware UTC ``datetime``."""
        return from_micros(self.timestamp)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RecordInfo":
        entry = d.get("entry")
        return cls(int(d["ts"]), str(d.get("content_type", "application/octet-stream")),
                   {str(k): str(v) for k, v in (d.get("labels") or {}).items()}, int(d.get("size", 0)),
                   None if entry is None else str(entry))

    def __repr__(self) -> str:
        entry = "" if self.entry is None else f", entry={self.entry!r}"
        return (f"{type(self).__name__}(timestamp={self.timestamp}, content_type={self.content_type!r}, "
                f"labels={self.labels!r}, size={self.size}{entry})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecordInfo):
            return NotImplemented
        return (self.timestamp, self.content_type, self.labels, self.size, self.entry) == (
            other.timestamp, other.content_type, other.labels, other.size, other.entry)

    __hash__ = None  # type: ignore[assignment]  # labels are mutable


class RecordResult:
    """The fate of one record of a batch: ``status`` 201 when stored, else ``error``."""

    __slots__ = ("ts", "status", "error")

    def __init__(self, ts: Optional[int], status: int, error: Optional[TsblobError]) -> None:
        self.ts = ts
        self.status = status
        self.error = error

    @property
    def ok(self) -> bool:
        return self.error is None and 200 <= self.status < 300

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RecordResult":
        status = int(d.get("status", 0))
        err = error_from_json({"error": d["error"]}, status) if d.get("error") else None
        return cls(_opt_int(d.get("ts")), status, err)

    def __repr__(self) -> str:
        return f"RecordResult(ts={self.ts}, status={self.status}, error={self.error!r})"


@dataclass(frozen=True)
class SkippedRecord:
    """A record a query skipped because its stored bytes are damaged (the server's
    ``skipped`` report): its ``entry`` (multi-entry queries; ``None`` otherwise), timestamp
    and error ``code`` (``corrupt_record``, ``tier_damaged``, ...)."""

    entry: Optional[str]
    ts: int
    code: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SkippedRecord":
        return cls(d.get("entry"), int(d["ts"]), str(d["code"]))


@dataclass
class BatchResult:
    """Per-record results of ``write_batch`` (and of ``update_labels_batch`` and
    ``remove_batch``, where ``written`` counts the records updated or removed), in the order
    the records were given."""

    written: int = 0
    failed: int = 0
    results: List[RecordResult] = field(default_factory=list)
    batches: int = 0

    @property
    def errors(self) -> List[RecordResult]:
        return [r for r in self.results if not r.ok]

    def raise_for_errors(self) -> "BatchResult":
        """Raises :class:`~tsblob.BatchError` if any record failed (the first failure as its
        cause); returns self otherwise."""
        errors = self.errors
        if errors:
            first = errors[0]
            raise BatchError(f"{len(errors)} of {len(self.results)} records failed (the others succeeded); "
                             f"the first, ts {first.ts}: {first.error}", result=self) from first.error
        return self

    def _add(self, doc: Mapping[str, Any]) -> None:
        results = [RecordResult.from_json(r) for r in doc.get("results") or []]
        self.results.extend(results)
        # `done`: the batches by timestamp of label updates and removals.
        self.written += int(doc.get("written", doc.get("done", sum(1 for r in results if r.ok))))
        self.failed += int(doc.get("failed", sum(1 for r in results if not r.ok)))
        self.batches += 1


@dataclass(frozen=True)
class Histogram:
    """Records and payload bytes of an entry per time step, over ``[start, stop)``: step ``i``
    covers ``[start + i*step, start + (i+1)*step)`` µs. Computed by the server from its index
    alone (no payload is read)."""

    start: int
    stop: int
    step: int
    counts: List[int] = field(default_factory=list)
    bytes: List[int] = field(default_factory=list)
    #: Set when the window held more records than one request visits: the steps from this
    #: timestamp on are incomplete.
    truncated_at: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Histogram":
        return cls(
            start=int(d["start"]),
            stop=int(d["stop"]),
            step=int(d["step"]),
            counts=[int(x) for x in d.get("counts", [])],
            bytes=[int(x) for x in d.get("bytes", [])],
            truncated_at=_opt_int(d.get("truncated_at")),
        )

    @property
    def total(self) -> int:
        """Records in the window."""
        return sum(self.counts)

    def steps(self) -> Iterator[Tuple[int, int, int]]:
        """``(step start µs, count, bytes)`` for each step."""
        for i, (n, b) in enumerate(zip(self.counts, self.bytes)):
            yield self.start + i * self.step, n, b


@dataclass(frozen=True)
class LifecycleStatus:
    """What a lifecycle rule did since the server started: records removed (counted, in
    ``dry_run``) by its last pass and in all, whole blocks deleted, when it last ran (µs)."""

    last_run: Optional[int] = None
    next_run: int = 0
    caught_up: bool = False
    last_removed: int = 0
    removed: int = 0
    removed_blocks: int = 0
    last_compressed: int = 0
    compressed: int = 0
    saved_bytes: int = 0
    last_error: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "LifecycleStatus":
        return cls(
            last_run=_opt_int(d.get("last_run")),
            next_run=int(d.get("next_run") or 0),
            caught_up=bool(d.get("caught_up", False)),
            last_removed=int(d.get("last_removed") or 0),
            removed=int(d.get("removed") or 0),
            removed_blocks=int(d.get("removed_blocks") or 0),
            last_compressed=int(d.get("last_compressed") or 0),
            compressed=int(d.get("compressed") or 0),
            saved_bytes=int(d.get("saved_bytes") or 0),
            last_error=None if d.get("last_error") is None else str(d["last_error"]),
        )


@dataclass(frozen=True)
class LifecycleRule:
    """A bucket's lifecycle rule: records older than ``older_than`` µs, in ``entries``
    (names or globs, ``!`` excludes; empty: every entry), kept by ``when``, are removed in the
    background every ``interval`` µs. ``shorthand``: the bucket's ``max_age`` (whole blocks)."""

    name: str
    bucket: str
    older_than: int
    interval: int
    entries: List[str] = field(default_factory=list)
    when: Optional[Dict[str, Any]] = None
    mode: str = "enabled"
    action: str = "remove"
    shorthand: bool = False
    status: LifecycleStatus = field(default_factory=LifecycleStatus)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "LifecycleRule":
        when = d.get("when")
        return cls(
            name=str(d["name"]),
            bucket=str(d.get("bucket", "")),
            older_than=int(d["older_than"]),
            interval=int(d.get("interval") or 0),
            entries=[str(e) for e in d.get("entries") or []],
            when=dict(when) if isinstance(when, Mapping) else None,
            mode=str(d.get("mode", "enabled")),
            action=str(d.get("action", "remove")),
            shorthand=bool(d.get("shorthand", False)),
            status=LifecycleStatus.from_json(d.get("status") or {}),
        )
