//! Parsing a query: its query string, or the JSON body of a `POST` (for conditions too
//! long for a URL), into a [`QueryRequest`], checked before any work.

use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use serde::Deserialize;
use tsblob_proto::ErrorCode;
use tsblob_storage::{LabelFilter, Query};

use crate::http::body::BodyChunks;
use crate::http::errors::AppError;
use crate::http::params::{pairs, parse_bool, parse_ts, parse_u64, unknown};
use crate::http::records::Target;
use crate::when::Json;

const KNOWN: &str = "start, stop, limit, desc, when, strict, meta, follow, heartbeat, settle_ms, entries, eq.<key>, ne.<key>, has, missing";

/// The heartbeat period of a query unless `heartbeat=` says otherwise: a live tail's while
/// idle, and any query's while a long scan finds nothing to send.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(15);
/// The longest `settle_ms` a live tail may ask for.
const MAX_SETTLE_MS: u64 = 60_000;

/// A parsed query request: what to select and how to answer.
#[derive(Debug, Clone)]
pub struct QueryRequest {
    pub query: Query,
    /// Answer the metadata as NDJSON instead of record frames.
    pub meta: bool,
    /// A live tail: `Some` with `follow=true`.
    pub follow: Option<FollowOpts>,
    /// The entries (names and globs) of a bucket-level query (`entries=`).
    pub entries: Option<Vec<String>>,
    /// A heartbeat is sent after this long without anything sent (`heartbeat=`).
    pub heartbeat: Duration,
}

impl Default for QueryRequest {
    fn default() -> Self {
        QueryRequest {
            query: Query::default(),
            meta: false,
            follow: None,
            entries: None,
            heartbeat: DEFAULT_HEARTBEAT,
        }
    }
}

/// How a live tail (`follow=true`) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowOpts {
    /// A record is delivered only once the server's clock is this far past its timestamp.
    pub settle: Duration,
}

/// A query's heartbeat period (`heartbeat=` seconds, 1 to 3600, default 15).
fn heartbeat_of(heartbeat: Option<u64>) -> Result<Duration, AppError> {
    let heartbeat = heartbeat.unwrap_or(DEFAULT_HEARTBEAT.as_secs());
    if !(1..=3600).contains(&heartbeat) {
        return Err(AppError::bad_request(format!(
            "heartbeat={heartbeat}: give seconds between 1 and 3600"
        )));
    }
    Ok(Duration::from_secs(heartbeat))
}

/// Checks and assembles the follow options of a query (`settle_ms` only with `follow`; no
/// `desc` and no `stop`).
fn follow_opts(
    q: &Query,
    follow: bool,
    settle_ms: Option<u64>,
) -> Result<Option<FollowOpts>, AppError> {
    if !follow {
        if settle_ms.is_some() {
            return Err(AppError::bad_request(
                "settle_ms only applies to a live tail: add follow=true",
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
    let settle_ms = settle_ms.unwrap_or(0);
    if settle_ms > MAX_SETTLE_MS {
        return Err(AppError::bad_request(format!(
            "settle_ms={settle_ms} is over the {MAX_SETTLE_MS} ms limit"
        )));
    }
    Ok(Some(FollowOpts {
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
                query.when = Some(crate::when::parse_text(&v)?);
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
    r.follow = follow_opts(&r.query, follow, settle_ms)?;
    r.heartbeat = heartbeat_of(heartbeat)?;
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
    /// Seconds without anything sent before a heartbeat (1 to 3600, default 15): a live
    /// tail's while idle, any query's while a long scan finds nothing.
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
        when: b.when.as_ref().map(crate::when::parse).transpose()?,
        filters: Vec::new(),
    };
    check_range(&query)?;
    let follow = follow_opts(&query, b.follow, b.settle_ms)?;
    Ok(QueryRequest {
        query,
        meta: b.meta,
        follow,
        entries: b.entries,
        heartbeat: heartbeat_of(b.heartbeat)?,
    })
}

/// `entries` belongs to the bucket-level route.
pub(super) fn one_entry(r: QueryRequest) -> Result<QueryRequest, AppError> {
    if r.entries.is_some() {
        return Err(AppError::bad_request(
            "entries= selects entries of a bucket-level query: use /api/v1/b/{bucket}/query?entries=...",
        ));
    }
    Ok(r)
}

/// A bucket-level query needs `entries`.
pub(super) fn many_entries(r: QueryRequest) -> Result<QueryRequest, AppError> {
    if r.entries.as_ref().is_none_or(|e| e.is_empty()) {
        return Err(AppError::bad_request(
            "a bucket-level query needs entries: names and globs, comma-separated (entries=cams/*,imu; entries=** for every entry)",
        ));
    }
    Ok(r)
}

pub(super) async fn post_body(t: &Target, req: Request) -> Result<Vec<u8>, AppError> {
    if let Some(q) = req.uri().query().filter(|q| !q.is_empty()) {
        return Err(AppError::bad_request(format!(
            "a POST query takes its parameters in the JSON body, not in the URL (?{q}); `query` names this route, so it cannot be an entry name's last segment: to write a record, pick another entry name"
        )));
    }
    BodyChunks::new(req.into_body(), QUERY_BODY_LIMIT, &t.state.limits)
        .collect(1024)
        .await
        .map_err(|err| match err.code {
            ErrorCode::PayloadTooLarge => AppError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::PayloadTooLarge,
                "the query's JSON body is over 1 MiB, a fixed bound of the query route (not --max-body): make the condition smaller (an $in of many values may be split over several queries), or name fewer entries (a glob such as cams/* names many at once)",
            ),
            _ => err,
        })
}

/// The most bytes a POST query's JSON body may have. Bug (probe of 2026-11-30): a body
/// over it was told to "start the server with a larger --max-body", a flag that does not
/// move this bound.
const QUERY_BODY_LIMIT: u64 = 1 << 20;
