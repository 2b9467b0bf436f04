//! Time-range queries: `GET` (or `POST` with a JSON body, for long conditions) streaming
//! every matching record as frames, or its metadata as NDJSON lines (`meta=true`), and
//! `DELETE` of the matching records. Conditions (`when`) are parsed in `when.rs` and
//! evaluated by the engine from the index, so records that do not match cost no payload read.
//!
//! A producer walks the engine's query iterator in bounded steps on the blocking pool and
//! sends the encoded frames into a bounded channel; sending waits while the client reads
//! slower than the disk, so memory per query is bounded by the channel depth times the
//! chunk size, and a slow reader holds no blocking thread while it waits. No state outlives the
//! response: to continue after a `limit`, a client queries again from the last ts + 1.

use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::BufMut;
use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tsblob_storage::{
    LabelFilter, Labels, MultiIter, Payload, Query, QueryItem, QueryIter, Windows,
};

use super::auth::StreamGrant;
use super::body::{channel_body, BodyChunks};
use super::errors::{blocking, AppError, ErrorBody};
use super::params::{pairs, parse_bool, parse_ts, parse_u64, unknown};
use super::records::{remove_range, Target};
use super::when::Json;
use tsblob_proto::framing::{
    put_end, put_entry_record_head, put_error, put_heartbeat, put_record_head, MEDIA_TYPE,
};

/// The media type of `meta=true` answers: one JSON object per line.
pub const NDJSON: &str = "application/x-ndjson";
/// Pages of index records (256 each) a step may scan without a match before it hands back,
/// so that the producer notices a client that went away during a long scan.
const IDLE_PAGES: u32 = 16;

/// Frames are gathered into chunks of about this size, one per step on the blocking pool
/// (large enough that the hand-off to the pool costs little per byte). A mapped payload
/// (`tsblob_storage::Payload::Mapped`, up to `MAP_MAX`) is one piece however large: it
/// holds page-cache pages, not memory of ours, and counts towards `STEP` instead.
const CHUNK: usize = 256 << 10;
/// A step also ends once its pieces, mapped ones included, reach this many bytes. Mapped
/// payloads cost no memory of ours, so a step of them can be larger than `CHUNK`: fewer
/// hand-offs between the blocking pool and the response's task per byte (each costs
/// futex wake-ups and context switches: `docs/benchmarks/range-read-2026-11-23.md`).
const STEP: usize = 4 << 20;
/// Chunks queued between the producer and the socket.
const DEPTH: usize = 16;

const KNOWN: &str = "start, stop, limit, desc, when, strict, meta, follow, heartbeat, settle_ms, entries, eq.<key>, ne.<key>, has, missing";

/// The heartbeat period of a live tail unless `heartbeat=` says otherwise.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(15);
/// The longest `settle_ms` a live tail may ask for.
const MAX_SETTLE_MS: u64 = 60_000;

/// A parsed query request: what to select and how to answer.
#[derive(Debug, Clone, Default)]
pub struct QueryRequest {
    pub query: Query,
    /// Answer the metadata as NDJSON instead of record frames.
    pub meta: bool,
    /// A live tail: `Some` with `follow=true`.
    pub follow: Option<FollowOpts>,
    /// The entries (names and globs) of a bucket-level query (`entries=`).
    pub entries: Option<Vec<String>>,
}

/// How a live tail (`follow=true`) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowOpts {
    /// A heartbeat is sent after this long without anything sent.
    pub heartbeat: Duration,
    /// A record is delivered only once the server's clock is this far past its timestamp.
    pub settle: Duration,
}

/// Checks and assembles the follow options of a query (`heartbeat` and `settle_ms` only
/// with `follow`; no `desc` and no `stop`).
fn follow_opts(
    q: &Query,
    follow: bool,
    heartbeat: Option<u64>,
    settle_ms: Option<u64>,
) -> Result<Option<FollowOpts>, AppError> {
    if !follow {
        if heartbeat.is_some() || settle_ms.is_some() {
            return Err(AppError::bad_request(
                "heartbeat and settle_ms only apply to a live tail: add follow=true",
            ));
        }
        return Ok(None);
    }
    if q.descending {
        return Err(AppError::bad_request(
            "follow=true streams oldest first: drop desc",
        ));
    }
    if q.stop.is_some() {
        return Err(AppError::bad_request(
            "follow=true has no stop: it streams until the client closes the connection (use a plain query for a closed range)",
        ));
    }
    let heartbeat = heartbeat.unwrap_or(DEFAULT_HEARTBEAT.as_secs());
    if !(1..=3600).contains(&heartbeat) {
        return Err(AppError::bad_request(format!(
            "heartbeat={heartbeat}: give seconds between 1 and 3600"
        )));
    }
    let settle_ms = settle_ms.unwrap_or(0);
    if settle_ms > MAX_SETTLE_MS {
        return Err(AppError::bad_request(format!(
            "settle_ms={settle_ms} is over the {MAX_SETTLE_MS} ms limit"
        )));
    }
    Ok(Some(FollowOpts {
        heartbeat: Duration::from_secs(heartbeat),
        settle: Duration::from_millis(settle_ms),
    }))
}

/// Parses the query string of a query.
pub fn parse_query(q: Option<&str>) -> Result<QueryRequest, AppError> {
    let mut r = QueryRequest::default();
    let query = &mut r.query;
    let (mut follow, mut heartbeat, mut settle_ms) = (false, None, None);
    for (k, v) in pairs(q) {
        let label = |key: &str| -> Result<String, AppError> {
            tsblob_storage::validate_label_key(key)?;
            Ok(key.to_string())
        };
        match k.as_str() {
            "start" => query.start = Some(parse_ts(&k, &v)?),
            "stop" => query.stop = Some(parse_ts(&k, &v)?),
            "limit" => query.limit = Some(parse_u64(&k, &v)?),
            "desc" => query.descending = parse_bool(&k, &v)?,
            "strict" => query.strict = parse_bool(&k, &v)?,
            "meta" => r.meta = parse_bool(&k, &v)?,
            "follow" => follow = parse_bool(&k, &v)?,
            "heartbeat" => heartbeat = Some(parse_u64(&k, &v)?),
            "settle_ms" => settle_ms = Some(parse_u64(&k, &v)?),
            "entries" => r.entries.get_or_insert_with(Vec::new).extend(
                v.split(',')
                    .map(str::trim)
                    .filter(|e| !e.is_empty())
                    .map(String::from),
            ),
            "when" => {
                if query.when.is_some() {
                    return Err(AppError::bad_request(
                        "when is given twice: AND the conditions in one object instead",
                    ));
                }
                query.when = Some(super::when::parse_text(&v)?);
            }
            "has" => query.filters.push(LabelFilter::Has(label(&v)?)),
            "missing" => query.filters.push(LabelFilter::Missing(label(&v)?)),
            other => {
                if let Some(key) = other.strip_prefix("eq.") {
                    query.filters.push(LabelFilter::Eq(label(key)?, v));
                } else if let Some(key) = other.strip_prefix("ne.") {
                    query.filters.push(LabelFilter::Ne(label(key)?, v));
                } else {
                    return Err(unknown(other, KNOWN));
                }
            }
        }
    }
    check_range(&r.query)?;
    r.follow = follow_opts(&r.query, follow, heartbeat, settle_ms)?;
    Ok(r)
}

fn check_range(query: &Query) -> Result<(), AppError> {
    for (name, ts) in [("start", query.start), ("stop", query.stop)] {
        if ts == Some(u64::MAX) {
            return Err(AppError::invalid_timestamp(format!(
                "{name}=18446744073709551615 is out of range: timestamps are below it"
            )));
        }
    }
    if let (Some(start), Some(stop)) = (query.start, query.stop) {
        if start > stop {
            return Err(AppError::invalid_timestamp(format!(
                "start={start} is after stop={stop}: the range is [start, stop)"
            )));
        }
    }
    Ok(())
}

/// The JSON body of `POST .../query`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryBody {
    /// Inclusive, µs.
    pub start: Option<u64>,
    /// Exclusive, µs.
    pub stop: Option<u64>,
    /// A condition in ReductStore's `when` language, e.g. `{"&score": {"$gt": 10}}`.
    #[schema(value_type = Option<Object>)]
    pub when: Option<Json>,
    pub limit: Option<u64>,
    /// Newest first.
    #[serde(default)]
    pub desc: bool,
    /// Answer metadata as NDJSON lines, no payloads.
    #[serde(default)]
    pub meta: bool,
    /// A comparison with a missing label is an error (422 `missing_label`) instead of false.
    #[serde(default)]
    pub strict: bool,
    /// A live tail: the records from `start` on, then each new one as it is committed,
    /// with heartbeats while idle; no `stop`, no `desc`.
    #[serde(default)]
    pub follow: bool,
    /// Seconds without anything sent before a live tail sends a heartbeat (1 to 3600,
    /// default 15).
    pub heartbeat: Option<u64>,
    /// A live tail delivers a record only once the server's clock is this many ms past its
    /// timestamp (default 0, at most 60000), so that a record committed up to that late is
    /// not skipped.
    pub settle_ms: Option<u64>,
    /// Bucket-level queries only (`/api/v1/b/{bucket}/query`): entry names and globs
    /// (`*` within a segment, `**` across), e.g. `["cams/*", "imu"]`.
    pub entries: Option<Vec<String>>,
}

/// Parses the JSON body of a `POST` query.
pub fn parse_body(body: &[u8]) -> Result<QueryRequest, AppError> {
    let b: QueryBody = serde_json::from_slice(body).map_err(|e| {
        AppError::bad_request(format!(
            "the body must be JSON like {{\"start\": 0, \"stop\": 100, \"when\": {{\"&score\": {{\"$gt\": 10}}}}, \"limit\": 10, \"desc\": false, \"meta\": false, \"strict\": false}} (every field optional): {e}"
        ))
    })?;
    let query = Query {
        start: b.start,
        stop: b.stop,
        limit: b.limit,
        descending: b.desc,
        strict: b.strict,
        when: b.when.as_ref().map(super::when::parse).transpose()?,
        filters: Vec::new(),
    };
    check_range(&query)?;
    let follow = follow_opts(&query, b.follow, b.heartbeat, b.settle_ms)?;
    Ok(QueryRequest {
        query,
        meta: b.meta,
        follow,
        entries: b.entries,
    })
}

/// Streams the records of a time range.
#[utoipa::path(get, path = "/api/v1/b/{bucket}/{entry}/query", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path),
           ("start" = Option<u64>, Query, description = "inclusive, µs"),
           ("stop" = Option<u64>, Query, description = "exclusive, µs"),
           ("limit" = Option<u64>, Query), ("desc" = Option<bool>, Query, description = "newest first"),
           ("when" = Option<String>, Query, description = "a condition as URL-encoded JSON, ReductStore's `when` language: {\"&score\": {\"$gt\": 10}}"),
           ("strict" = Option<bool>, Query, description = "a comparison with a missing label is an error (422 missing_label) instead of false"),
           ("meta" = Option<bool>, Query, description = "answer application/x-ndjson: one {ts, size, content_type, labels} per line, no payloads"),
           ("follow" = Option<bool>, Query, description = "live tail: the records from start on, then every new matching record as it is committed, oldest first, with heartbeat frames (kind 3; with meta=true {\"heartbeat\": µs} lines) while idle; no stop, no desc"),
           ("heartbeat" = Option<u64>, Query, description = "with follow: seconds without anything sent before a heartbeat (1..3600, default 15)"),
           ("settle_ms" = Option<u64>, Query, description = "with follow: deliver a record only once the server's clock is this many ms past its timestamp (0..60000, default 0)"),
           ("has" = Option<String>, Query, description = "label key that must exist (repeatable)"),
           ("missing" = Option<String>, Query, description = "label key that must not exist (repeatable)")),
    responses((status = 200, description = "record frames, then an end frame (or an error frame); with meta=true NDJSON lines",
               content_type = "application/x-tsblob-records", body = Vec<u8>),
              (status = 400, body = ErrorBody, description = "a malformed condition, naming what is wrong"),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn stream(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_read(&t.bucket)?;
    let r = parse_query(req.uri().query())?;
    answer(t, one_entry(r)?).await
}

/// `entries` belongs to the bucket-level route.
fn one_entry(r: QueryRequest) -> Result<QueryRequest, AppError> {
    if r.entries.is_some() {
        return Err(AppError::bad_request(
            "entries= selects entries of a bucket-level query: use /api/v1/b/{bucket}/query?entries=...",
        ));
    }
    Ok(r)
}

/// A bucket-level query needs `entries`.
fn many_entries(r: QueryRequest) -> Result<QueryRequest, AppError> {
    if r.entries.as_ref().is_none_or(|e| e.is_empty()) {
        return Err(AppError::bad_request(
            "a bucket-level query needs entries: names and globs, comma-separated (entries=cams/*,imu; entries=** for every entry)",
        ));
    }
    Ok(r)
}

/// Streams the records of several entries merged in timestamp order.
#[utoipa::path(get, path = "/api/v1/b/{bucket}/query", tag = "records",
    params(("bucket" = String, Path),
           ("entries" = String, Query, description = "entry names and globs, comma-separated (repeatable): `*` matches within a segment, `**` across segments; e.g. cams/*,imu. A plain name must exist (404); a glob may match nothing"),
           ("start" = Option<u64>, Query, description = "inclusive, µs"),
           ("stop" = Option<u64>, Query, description = "exclusive, µs"),
           ("limit" = Option<u64>, Query, description = "over the merged stream"), ("desc" = Option<bool>, Query, description = "newest first"),
           ("when" = Option<String>, Query, description = "a condition as URL-encoded JSON, applied per record, its aggregation operators ($each_n, $each_t, $limit) over the merged stream"),
           ("strict" = Option<bool>, Query),
           ("meta" = Option<bool>, Query, description = "NDJSON lines {ts, entry, size, content_type, labels}"),
           ("follow" = Option<bool>, Query, description = "live tail over the entries (as on the entry route)"),
           ("heartbeat" = Option<u64>, Query), ("settle_ms" = Option<u64>, Query),
           ("format" = Option<String>, Query, description = "`mcap`: the records as one MCAP file (application/x-mcap; docs/api.md, MCAP export)")),
    responses((status = 200, description = "record frames of kind 4 (each names its entry), then an end frame; ties in timestamp come in entry-name order",
               content_type = "application/x-tsblob-records", body = Vec<u8>),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn stream_bucket(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_read(&t.bucket)?;
    if let Some(q) = super::mcap_export::requested(req.uri().query())? {
        return super::mcap_export::stream(t, q).await;
    }
    let r = parse_query(req.uri().query())?;
    answer(t, many_entries(r)?).await
}

/// The bucket-level query with a JSON body (`"entries": [...]` required).
#[utoipa::path(post, path = "/api/v1/b/{bucket}/query", tag = "records",
    params(("bucket" = String, Path)),
    request_body = QueryBody,
    responses((status = 200, description = "as GET", content_type = "application/x-tsblob-records", body = Vec<u8>),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn stream_bucket_post(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_read(&t.bucket)?;
    let body = post_body(&t, req).await?;
    answer(t, many_entries(parse_body(&body)?)?).await
}

async fn post_body(t: &Target, req: Request) -> Result<Vec<u8>, AppError> {
    if let Some(q) = req.uri().query().filter(|q| !q.is_empty()) {
        return Err(AppError::bad_request(format!(
            "a POST query takes its parameters in the JSON body, not in the URL (?{q})"
        )));
    }
    BodyChunks::new(req.into_body(), 1 << 20, &t.state.limits)
        .collect(1024)
        .await
}

/// The same query with a JSON body, for conditions too long for a URL.
#[utoipa::path(post, path = "/api/v1/b/{bucket}/{entry}/query", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path)),
    request_body = QueryBody,
    responses((status = 200, description = "as GET: record frames, or NDJSON lines with meta",
               content_type = "application/x-tsblob-records", body = Vec<u8>),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn stream_post(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_read(&t.bucket)?;
    let body = post_body(&t, req).await?;
    answer(t, one_entry(parse_body(&body)?)?).await
}

async fn answer(t: Target, r: QueryRequest) -> Result<Response, AppError> {
    let QueryRequest {
        query,
        meta,
        follow,
        entries,
    } = r;
    // Counted against --max-streams and --max-streams-per-token until the producer ends
    // (`limits.rs`): refused before any work.
    let slot = t
        .state
        .streams
        .open(t.caller.name.as_deref().unwrap_or(""))?;
    // A live tail is admitted (or refused: 429) before any work.
    let mut tail = match follow {
        Some(_) => Some(t.state.tails.admit(&t.caller)?),
        None => None,
    };
    // Opening the query answers an unknown bucket or entry with a status, before any frame.
    let grant_bucket = t.bucket.clone();
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let iter = blocking(move || {
        Ok(match entries {
            Some(patterns) => Walk::Many(store.query_entries(&bucket, &patterns, &query)?),
            None => Walk::One(store.query(&bucket, &entry, &query)?),
        })
    })
    .await?;
    // A live tail is registered under its entries before its first walk: a commit after
    // that walk's read transaction began always wakes it.
    if let Some(tail) = tail.as_mut() {
        tail.watch(iter.entry_ids());
    }
    // The first step runs before the status is sent: an error before any record (a strict
    // condition meeting a missing label) is answered with its status.
    let mut p = Producer::new(iter, meta);
    if let Some(f) = follow {
        p.follow(f.settle);
    }
    let (p, first) = blocking(move || {
        let step = p.step();
        Ok((p, step))
    })
    .await?;
    let first = match first {
        Step::Fail(pieces, e) if pieces.is_empty() && p.count == 0 => return Err(e),
        other => other,
    };
    let (tx, body) = channel_body(DEPTH);
    let metrics = t.state.metrics.clone();
    // The stream checks its token again whenever the tokens change, for as long as it runs.
    let grant = t.state.auth.grant(&t.caller, &grant_bucket);
    let live = follow.zip(tail).map(|(opts, tail)| Live { opts, tail });
    tokio::spawn(async move {
        let _slot = slot;
        let (bytes, _) = pump(p, first, tx, live, grant).await;
        metrics.query_bytes.inc_by(bytes);
    });
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static(if meta { NDJSON } else { MEDIA_TYPE }),
    );
    Ok(resp)
}

/// What one production step yields.
enum Step {
    More(Vec<Bytes>),
    /// A live tail caught up: the pieces, then wait for a commit before the next step (or
    /// until its settle time lets through the first record its walk left past its horizon,
    /// at this timestamp).
    Caught(Vec<Bytes>, Option<u64>),
    Last(Vec<Bytes>),
    /// The pieces before an error, then the error (sent as an error frame or line).
    Fail(Vec<Bytes>, AppError),
    Abort(std::io::Error),
}

/// Payloads at least this long are sent as their own piece, straight from the buffer the
/// engine read them into; shorter ones are copied next to their heads (one piece per record
/// would cost more in chunk framing and syscalls than the copy).
const OWN_PIECE: usize = 16 << 10;

/// The pieces of one step: heads and small records gathered in `buf`, large payloads kept as
/// the buffers they were read into.
#[derive(Default)]
struct Pieces {
    done: Vec<Bytes>,
    buf: BytesMut,
    len: usize,
    /// Bytes of `done` that are mapped payloads (page cache: not memory of ours).
    borrowed: usize,
}

impl Pieces {
    fn len(&self) -> usize {
        self.len + self.buf.len()
    }

    /// Bytes of ours the step holds (gathered, or in buffers read for it): all but the
    /// mapped payloads.
    fn held(&self) -> usize {
        self.len() - self.borrowed
    }

    /// Whether the step is full: `CHUNK` bytes held, or `STEP` in all.
    fn full(&self) -> bool {
        self.held() >= CHUNK || self.len() >= STEP
    }

    fn push(&mut self, data: Vec<u8>) {
        if data.len() < OWN_PIECE {
            self.buf.extend_from_slice(&data);
            return;
        }
        self.flush();
        self.len += data.len();
        self.done.push(Bytes::from(data));
    }

    /// A record's payload: a large mapped one (a slice of its block's window), or a large
    /// slice of a tiered range, as a piece of its own, without a copy; a small one copied
    /// next to its head.
    fn push_payload(&mut self, p: Payload) {
        match p {
            Payload::Memory(data) => self.push(data),
            p @ (Payload::Mapped(_) | Payload::Shared(_)) if p.len() < OWN_PIECE => {
                self.buf.extend_from_slice(p.as_ref())
            }
            p @ (Payload::Mapped(_) | Payload::Shared(_)) => {
                self.flush();
                self.len += p.len();
                if matches!(p, Payload::Mapped(_)) {
                    self.borrowed += p.len();
                }
                self.done.push(Bytes::from_owner(p));
            }
        }
    }

    fn flush(&mut self) {
        if !self.buf.is_empty() {
            self.len += self.buf.len();
            self.done.push(self.buf.split().freeze());
        }
    }

    fn finish(mut self) -> Vec<Bytes> {
        self.flush();
        self.done
    }
}

/// What a producer walks: one entry, or several merged.
pub(crate) enum Walk {
    One(QueryIter),
    Many(MultiIter),
}

impl Walk {
    fn next_bounded(&mut self) -> Option<tsblob_storage::Result<Option<QueryItem>>> {
        match self {
            Walk::One(i) => i.next_bounded(),
            Walk::Many(i) => i.next_bounded(),
        }
    }

    fn resume(&mut self, horizon: u64) -> bool {
        match self {
            Walk::One(i) => i.resume(horizon),
            Walk::Many(i) => i.resume(horizon),
        }
    }

    /// Walks on only where it may find something: the entries in `changed` (sorted ids)
    /// and those whose record past the last horizon the new one lets through.
    fn resume_changed(&mut self, horizon: u64, changed: &[u32]) -> bool {
        match self {
            Walk::One(i) => i.resume_changed(horizon, changed),
            Walk::Many(i) => i.resume_changed(horizon, changed),
        }
    }

    fn ahead(&self) -> Option<u64> {
        match self {
            Walk::One(i) => i.ahead(),
            Walk::Many(i) => i.ahead(),
        }
    }

    /// The ids of the entries walked (what the commit listener names).
    fn entry_ids(&self) -> Vec<u32> {
        match self {
            Walk::One(i) => vec![i.entry_id()],
            Walk::Many(i) => i.entry_ids(),
        }
    }

    fn is_many(&self) -> bool {
        matches!(self, Walk::Many(_))
    }
}

/// One NDJSON line of a `meta=true` answer.
#[derive(Serialize)]
struct MetaLine<'a> {
    ts: u64,
    /// Multi-entry answers only.
    #[serde(skip_serializing_if = "Option::is_none")]
    entry: Option<&'a str>,
    size: u64,
    content_type: &'a str,
    labels: &'a Labels,
}

pub(crate) struct Producer {
    iter: Walk,
    /// NDJSON metadata lines instead of record frames.
    meta: bool,
    count: u64,
    /// The mapped block window payloads are sliced from.
    windows: Windows,
    large: Option<(tsblob_storage::RecordReader, u64)>,
    /// A live tail: its settle time in µs (records newer than now minus it wait).
    follow: Option<u64>,
    /// The next step starts a new walk (a live tail woken by a commit or a timer).
    rearm: bool,
    /// The entries (ids, sorted) that got records since the last walk: the next walk's.
    changed: Vec<u32>,
}

impl Producer {
    pub(crate) fn new(iter: Walk, meta: bool) -> Producer {
        Producer {
            iter,
            meta,
            count: 0,
            windows: Windows::default(),
            large: None,
            follow: None,
            rearm: false,
            changed: Vec::new(),
        }
    }

    /// Makes this a live tail: at the end of the records it reports `Step::Caught` and walks
    /// on from its cursor at the next step.
    fn follow(&mut self, settle: Duration) {
        let settle = settle.as_micros() as u64;
        self.follow = Some(settle);
        let horizon = self.horizon();
        self.iter.resume(horizon);
    }

    /// The upper bound of a live tail's walk: timestamps below `now - settle` (all of them
    /// without a settle time).
    fn horizon(&self) -> u64 {
        match self.follow {
            Some(0) | None => u64::MAX,
            Some(settle) => tsblob_storage::now_micros().saturating_sub(settle),
        }
    }

    /// A heartbeat frame, or an `{"heartbeat": µs}` line.
    fn heartbeat_piece(&self) -> Bytes {
        let now = tsblob_storage::now_micros();
        let mut b = BytesMut::new();
        if self.meta {
            b.extend_from_slice(format!("{{\"heartbeat\":{now}}}\n").as_bytes());
        } else {
            put_heartbeat(&mut b, now);
        }
        b.freeze()
    }

    /// An error as the stream ends it: an error frame, or an `{"error": ...}` line.
    fn error_piece(&self, e: &AppError) -> Bytes {
        let mut b = BytesMut::new();
        if self.meta {
            b.extend_from_slice(&e.json_bytes());
            b.extend_from_slice(b"\n");
        } else {
            put_error(&mut b, &e.json_bytes());
        }
        b.freeze()
    }

    fn step(&mut self) -> Step {
        let mut out = Pieces::default();
        let mut idle = 0;
        if std::mem::take(&mut self.rearm) {
            let horizon = self.horizon();
            let changed = std::mem::take(&mut self.changed);
            self.iter.resume_changed(horizon, &changed);
        }
        loop {
            if out.full() {
                return Step::More(out.finish());
            }
            if let Some((reader, left)) = self.large.as_mut() {
                let want = (CHUNK as u64).min(*left).max(1) as usize;
                match reader.read_chunk(want) {
                    Ok(data) if data.is_empty() => {
                        return Step::Abort(std::io::Error::other(
                            "a record ended before its announced length",
                        ))
                    }
                    Err(e) => {
                        tracing::warn!("query stream cut: {e}");
                        return Step::Abort(e);
                    }
                    Ok(data) => {
                        *left = left.saturating_sub(data.len() as u64);
                        out.push(data);
                        if *left == 0 {
                            if !matches!(reader.read_chunk(1).map(|d| d.is_empty()), Ok(true)) {
                                tracing::warn!("query stream cut: a record failed its CRC check");
                                return Step::Abort(std::io::Error::other(
                                    "a record failed its CRC check at its end",
                                ));
                            }
                            self.large = None;
                            self.count += 1;
                        }
                    }
                }
                continue;
            }
            let item = match self.iter.next_bounded() {
                None => {
                    // (What the walk left past its horizon, before `resume_changed` may
                    // arm a walk of it.)
                    let ahead = self.iter.ahead();
                    if self.follow.is_some() && self.iter.resume_changed(self.horizon(), &[]) {
                        self.rearm = true;
                        return Step::Caught(out.finish(), ahead);
                    }
                    if !self.meta {
                        put_end(&mut out.buf, self.count);
                    }
                    return Step::Last(out.finish());
                }
                Some(Err(e)) => return self.fail(out, AppError::from(e)),
                Some(Ok(None)) => {
                    idle += 1;
                    if idle >= IDLE_PAGES {
                        return Step::More(out.finish());
                    }
                    continue;
                }
                Some(Ok(Some(item))) => item,
            };
            let m = &item.meta;
            if self.meta {
                let line = MetaLine {
                    ts: m.ts,
                    entry: self.iter.is_many().then(|| item.entry()),
                    size: m.size,
                    content_type: &m.content_type,
                    labels: &m.labels,
                };
                let mut w = (&mut out.buf).writer();
                if let Err(e) = serde_json::to_writer(&mut w, &line) {
                    return self.fail(out, AppError::internal(format!("encoding metadata: {e}")));
                }
                out.buf.extend_from_slice(b"\n");
                self.count += 1;
                continue;
            }
            match item.payload_in(&mut self.windows) {
                Ok(Some(data)) => {
                    self.put_head(&mut out.buf, &item, data.len() as u64);
                    out.push_payload(data);
                    self.count += 1;
                }
                Ok(None) => match item.reader() {
                    Ok(r) => {
                        self.put_head(&mut out.buf, &item, m.size);
                        self.large = Some((r, m.size));
                    }
                    Err(tsblob_storage::Error::NotFound(_)) => {}
                    Err(e) => return self.fail(out, AppError::from(e)),
                },
                Err(tsblob_storage::Error::NotFound(_)) => {}
                Err(e) => return self.fail(out, AppError::from(e)),
            }
        }
    }

    /// A record frame's head: kind 4 (naming the entry) in a multi-entry answer.
    fn put_head(&self, out: &mut BytesMut, item: &QueryItem, len: u64) {
        let m = &item.meta;
        if self.iter.is_many() {
            put_entry_record_head(out, item.entry(), m.ts, &m.content_type, &m.labels, len);
        } else {
            put_record_head(out, m.ts, &m.content_type, &m.labels, len);
        }
    }

    fn fail(&self, out: Pieces, e: AppError) -> Step {
        tracing::warn!("query stream ended by an error: {e}");
        Step::Fail(out.finish(), e)
    }
}

/// What a live tail needs besides its producer. Dropped when its stream ends (or its
/// client leaves): nothing of it outlives the response.
struct Live {
    opts: FollowOpts,
    /// Admitted, counted, and registered under its entries before the first walk.
    tail: super::tails::Tail,
}

/// The longest a live tail's settle timer waits at once (a record stamped years ahead
/// re-arms it after each wait).
const MAX_SETTLE_WAIT: Duration = Duration::from_secs(24 * 3600);

/// When a live tail with a settle time walks again without a commit: once its horizon
/// (now minus `settle`) has passed `ahead`, the first record its last walk left for later.
fn settle_deadline(ahead: Option<u64>, settle: Duration) -> Option<tokio::time::Instant> {
    let ts = ahead?;
    let due = ts
        .saturating_add(settle.as_micros() as u64)
        .saturating_add(1);
    let wait = Duration::from_micros(due.saturating_sub(tsblob_storage::now_micros()))
        .min(MAX_SETTLE_WAIT)
        + Duration::from_millis(1);
    Some(tokio::time::Instant::now() + wait)
}

/// Drives a producer into `tx` until the end, an abort or the client leaving; returns the
/// bytes sent and the production steps run after `first`. A live tail waits between walks for a commit (or its settle timer), sending
/// a heartbeat whenever nothing was sent for its heartbeat period.
async fn pump(
    mut p: Producer,
    first: Step,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    mut live: Option<Live>,
    mut grant: StreamGrant,
) -> (u64, u64) {
    use tokio::time::Instant;
    let mut sent = 0u64;
    let mut steps = 0u64;
    let mut next = Some(first);
    let mut last_sent = Instant::now();
    // With a settle time: the next walk without a commit, once the horizon passes the
    // first record the last walk left past it (a record stamped ahead of the clock, or
    // committed within the settle time), so it is delivered with no other write.
    let mut settle_at = None;
    loop {
        let step = match next.take() {
            Some(s) => s,
            None => {
                // A long scan without matches sends nothing: look for a closed channel.
                if tx.is_closed() {
                    return (sent, steps);
                }
                // A token removed (or no longer allowed to read the bucket) ends the stream.
                if let Err(e) = grant.check() {
                    return (sent + revoked(&p, &tx, e).await, steps);
                }
                let Ok((back, step)) = tokio::task::spawn_blocking(move || {
                    let step = p.step();
                    (p, step)
                })
                .await
                else {
                    let _ = tx
                        .send(Err(std::io::Error::other("the query task failed")))
                        .await;
                    return (sent, steps);
                };
                p = back;
                steps += 1;
                step
            }
        };
        let (mut pieces, last, caught) = match step {
            Step::More(b) => (b, false, false),
            Step::Caught(b, ahead) => {
                if let Some(l) = &live {
                    settle_at = settle_deadline(ahead, l.opts.settle);
                }
                (b, false, true)
            }
            Step::Last(b) => (b, true, false),
            Step::Fail(mut b, e) => {
                b.push(p.error_piece(&e));
                (b, true, false)
            }
            Step::Abort(e) => {
                let _ = tx.send(Err(e)).await;
                return (sent, steps);
            }
        };
        if let Some(l) = &live {
            // A long catch-up scan that matches nothing still keeps the connection alive.
            // (Only between frames: never inside a large record's payload.)
            if pieces.is_empty()
                && !last
                && p.large.is_none()
                && last_sent.elapsed() >= l.opts.heartbeat
            {
                pieces.push(p.heartbeat_piece());
            }
        }
        for piece in pieces {
            sent += piece.len() as u64;
            if tx.send(Ok(piece)).await.is_err() {
                return (sent, steps); // the client went away
            }
            last_sent = Instant::now();
        }
        if last {
            return (sent, steps);
        }
        if !caught {
            continue;
        }
        let Some(l) = live.as_mut() else {
            return (sent, steps); // only a live tail catches up
        };
        // Wait for a commit to one of its entries, the settle timer or the client leaving;
        // heartbeats meanwhile.
        loop {
            let beat_at = last_sent + l.opts.heartbeat;
            tokio::select! {
                _ = tx.closed() => return (sent, steps),
                _ = l.tail.wake().notified() => break,
                _ = grant.changed() => {
                    if let Err(e) = grant.check() {
                        return (sent + revoked(&p, &tx, e).await, steps);
                    }
                }
                _ = tokio::time::sleep_until(settle_at.unwrap_or(beat_at)), if settle_at.is_some() => {
                    settle_at = None;
                    break;
                }
                _ = tokio::time::sleep_until(beat_at) => {
                    let beat = p.heartbeat_piece();
                    sent += beat.len() as u64;
                    if tx.send(Ok(beat)).await.is_err() {
                        return (sent, steps);
                    }
                    last_sent = Instant::now();
                }
            }
        }
        // Taken before the walk's read transaction begins: a commit after this wakes the
        // tail again (no lost wake-ups).
        p.changed = l.tail.wake().take();
    }
}

/// Ends a stream whose token was removed or lost its permission (`StreamGrant::check`):
/// an error frame (an `{"error": ...}` line with `meta=true`) between records, a cut
/// inside a large record's payload (the client sees a short body, never wrong bytes).
/// Returns the bytes sent.
async fn revoked(
    p: &Producer,
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    e: AppError,
) -> u64 {
    tracing::info!("query stream ended: {e}");
    if p.large.is_some() {
        let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
        return 0;
    }
    let piece = p.error_piece(&e);
    let n = piece.len() as u64;
    let _ = tx.send(Ok(piece)).await;
    n
}

#[utoipa::path(delete, path = "/api/v1/b/{bucket}/{entry}/query", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path),
           ("start" = Option<u64>, Query), ("stop" = Option<u64>, Query),
           ("when" = Option<String>, Query, description = "only records matching this condition (URL-encoded JSON)"),
           ("strict" = Option<bool>, Query), ("limit" = Option<u64>, Query)),
    responses((status = 200, body = serde_json::Value, description = "{\"removed\": N}"),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn remove(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let raw = req.uri().query();
    if pairs(raw).iter().any(|(k, _)| k == "ts") {
        return Err(AppError::bad_request(
            "the query route removes ranges: give start and stop, not ts",
        ));
    }
    let r = one_entry(parse_query(raw)?)?;
    if r.meta || r.query.descending || r.follow.is_some() {
        return Err(AppError::bad_request(
            "meta, desc and follow have no meaning for DELETE: removal goes oldest first and answers {\"removed\": N}",
        ));
    }
    let q = r.query;
    if q.when.is_none() && q.filters.is_empty() && q.limit.is_none() {
        return remove_range(t.state.store.clone(), t.bucket, t.entry, q.start, q.stop).await;
    }
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let n = blocking(move || Ok(store.remove_where(&bucket, &entry, &q)?)).await?;
    Ok(axum::Json(serde_json::json!({"removed": n})).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsblob_storage::{BatchRecord, BucketSettings, Store, StoreOptions, WriteMeta};

    #[test]
    fn a_scan_without_matches_hands_back_every_few_pages() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let n = 20_000u64;
        let batch: Vec<BatchRecord> = (0..n)
            .map(|ts| BatchRecord {
                meta: WriteMeta {
                    labels: [("n".to_string(), ts.to_string())].into(),
                    ..WriteMeta::at(ts)
                },
                data: vec![1; 10],
            })
            .collect();
        s.write_batch("b", "e", batch).unwrap();
        let r = parse_query(Some(&format!(
            "when={}",
            form_urlencoded::byte_serialize(br#"{"&n": {"$gt": 1000000}}"#).collect::<String>()
        )))
        .unwrap();
        let mut p = Producer::new(Walk::One(s.query("b", "e", &r.query).unwrap()), false);
        let mut steps = 0;
        loop {
            steps += 1;
            match p.step() {
                Step::More(pieces) => assert!(pieces.is_empty()),
                Step::Last(_) => break,
                _ => panic!("unexpected step"),
            }
        }
        // 20,000 records = 79 pages of 256: a hand-back every IDLE_PAGES pages
        assert_eq!(
            steps,
            (n as usize).div_ceil(256).div_ceil(IDLE_PAGES as usize)
        );
    }
}
