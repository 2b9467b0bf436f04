//! Time-range queries: `GET` (or `POST` with a JSON body, for long conditions) streaming
//! every matching record as frames, or its metadata as NDJSON lines (`meta=true`), and
//! `DELETE` of the matching records. Conditions (`when`) are parsed in `when.rs` and
//! evaluated by the engine from the index, so records that do not match cost no payload read.
//!
//! A producer walks the engine's query iterator in bounded steps on the blocking pool and
//! sends the encoded frames into a bounded channel; sending waits while the client reads
//! slower than the disk, so memory per query is bounded by the channel depth times the
//! chunk size, and a slow reader holds no blocking thread while it waits. Those pages are
//! counted in the server's memory budget (`budget.rs`): a step takes room for its page
//! before it runs, and each piece carries its share until the connection has written it.
//! No state outlives the response: to continue after a `limit`, a client queries again
//! from the last ts + 1.

mod delete;
mod mcap_export;
mod page;
mod parse;
mod produce;
mod pump;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tsblob_proto::framing::MEDIA_TYPE;

use super::errors::{blocking, AppError, ErrorBody};
use super::records::Target;
use page::CHUNK;
use parse::{many_entries, one_entry, post_body};
use produce::{Producer, Step};
use pump::{pump, step_body, Live};

pub use parse::{parse_body, parse_query, FollowOpts, QueryBody, QueryRequest, DEFAULT_HEARTBEAT};
// (`__path_remove`: the OpenAPI description `#[utoipa::path]` generates, named by `openapi.rs`.)
pub use delete::{__path_remove, remove};

/// The media type of `meta=true` answers: one JSON object per line.
pub const NDJSON: &str = "application/x-ndjson";

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
           ("heartbeat" = Option<u64>, Query, description = "seconds without anything sent before a heartbeat (1..3600, default 15): a live tail's while idle, any query's while a long scan finds nothing"),
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
    if let Some(q) = mcap_export::requested(req.uri().query())? {
        return mcap_export::stream(t, q).await;
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
        heartbeat,
    } = r;
    // Counted against --max-streams and --max-streams-per-token (and a tail against
    // --max-tails and --max-tails-per-token too) until the producer ends (`limits.rs`):
    // refused before any work.
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
    // The first step runs before the status is sent too: an error before any record (a
    // strict condition meeting a missing label) is answered with its status.
    let skipped = crate::http::damage::Skipped::new(t.state.limits.max_skipped_listed);
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let grant_bucket = bucket.clone();
    let many = entries.is_some();
    let open = move || -> Result<tsblob_storage::QueryIter, AppError> {
        Ok(match entries {
            Some(patterns) => store.query_entries(&bucket, &patterns, &query)?,
            None => store.query(&bucket, &entry, &query)?,
        })
    };
    // Room for the first page in the memory budget.
    let mut room = t.state.bodies.empty();
    let (p, first) = if tail.is_none() && room.try_cover(CHUNK as u64) {
        // Room at once, and not a live tail: the query opened and its first step run in
        // one hand-off to the blocking pool (a short query's whole answer; each hand-off
        // costs wake-ups of both cores: `docs/benchmarks/reads-2-2026-11-26b.md`).
        let bodies = t.state.bodies.clone();
        t.state
            .scans
            .run(move || {
                let mut p = Producer::new(open()?, many, meta, &bodies, skipped, room);
                let step = p.counted_step();
                Ok::<_, AppError>((p, step))
            })
            .await?
    } else {
        let iter = blocking(open).await?;
        // A live tail is registered under its entries before its first walk: a commit
        // after that walk's read transaction began always wakes it.
        if let Some(tail) = tail.as_mut() {
            tail.watch(iter.entry_ids());
        }
        let mut p = Producer::new(iter, many, meta, &t.state.bodies, skipped, room);
        if let Some(f) = follow {
            p.follow(f.settle);
        }
        // Or 503 busy (with Retry-After) when none comes within --memory-wait.
        p.room.cover(CHUNK as u64, "a query page").await?;
        t.state
            .scans
            .run(move || {
                let step = p.counted_step();
                Ok::<_, AppError>((p, step))
            })
            .await?
    };
    let first = match first {
        Step::Fail(pieces, e) if pieces.is_empty() && p.count == 0 => return Err(e),
        other => other,
    };
    let (tx, body, steps) = step_body(t.state.metrics.sent.clone());
    let metrics = t.state.metrics.clone();
    match first {
        // The whole answer in its first step (not a live tail: its steps are `Caught`):
        // queued in the body before the response is handed to the connection, which
        // then writes the status, the headers and the records at once; no pump.
        Step::Last(pieces) => answer_whole(&p, pieces, None, tx, slot, &metrics),
        Step::Fail(pieces, e) => answer_whole(&p, pieces, Some(e), tx, slot, &metrics),
        first => {
            // The stream checks its token again whenever the tokens change, for as long
            // as it runs.
            let grant = t.state.auth.grant(&t.caller, &grant_bucket);
            let live = follow.zip(tail).map(|(opts, tail)| Live { opts, tail });
            let scans = t.state.scans.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let (bytes, _) = pump(p, first, tx, live, grant, heartbeat, scans).await;
                metrics.query_bytes.inc_by(bytes);
            });
        }
    }
    let mut resp = (StatusCode::OK, body).into_response();
    resp.extensions_mut().insert(steps);
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static(if meta { NDJSON } else { MEDIA_TYPE }),
    );
    Ok(resp)
}

/// Queues a query's whole answer, its one step (and the error it ended with), in its
/// response body, whose channel has room for it (`pump::STEPS_AHEAD` steps): the body
/// ends after it. The stream's slot is given back now, as a pump gives it back once its
/// last step is queued.
fn answer_whole(
    p: &Producer,
    mut pieces: Vec<bytes::Bytes>,
    fail: Option<AppError>,
    tx: pump::StepTx,
    slot: crate::http::limits::Slot,
    metrics: &crate::http::metrics::Metrics,
) {
    if let Some(e) = fail {
        pieces.push(p.error_piece(&e));
    }
    let bytes = pieces.iter().map(|b| b.len() as u64).sum::<u64>();
    if !pieces.is_empty() {
        if let Err(tokio::sync::mpsc::error::TrySendError::Full(item)) = tx.try_send(Ok(pieces)) {
            // (Not with a fresh channel of `STEPS_AHEAD` places; sent when there is room.)
            tokio::spawn(async move {
                let _slot = slot;
                let _ = tx.send(item).await;
            });
        }
    }
    metrics.query_bytes.inc_by(bytes);
}
