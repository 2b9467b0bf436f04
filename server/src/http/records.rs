//! One record: write (small bodies in memory, larger ones received into a spool first),
//! read (small ones whole, large ones streamed), `HEAD`, label updates, removal; and the
//! entry routes (info, remove).

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tsblob_storage::{EntryInfo, Labels, Payload, RecordMeta, WriteMeta};

use super::auth::Caller;
use super::body::{channel_body, content_length, json, not_like, BodyChunks};
use super::budget::{BodyRoom, MemoryBudget};
use super::errors::{blocking, AppError, ErrorBody};
use super::headers::{
    check_label_bounds, content_type_from, identity_only, labels_from, put_meta, TS_HEADER_NAME,
};
use super::if_exists::{settle_write, IfExists};
use super::params::RecordParams;
use super::spool;
use super::AppState;

/// Bodies up to this size are collected in memory; larger (or unannounced) ones are
/// received into a spool (`spool.rs`). Either way the engine is called once, with the
/// whole payload.
const SMALL_BODY: u64 = 256 << 10;

/// The bucket and entry a request is about, with who asks.
pub struct Target {
    pub state: AppState,
    pub caller: Caller,
    pub bucket: String,
    pub entry: String,
}

/// The answer to a write.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Written {
    pub ts: u64,
}

/// A record's metadata as JSON.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RecordMetaJson {
    pub ts: u64,
    pub size: u64,
    pub content_type: String,
    pub labels: Labels,
}

impl From<RecordMeta> for RecordMetaJson {
    fn from(m: RecordMeta) -> Self {
        RecordMetaJson {
            ts: m.ts,
            size: m.size,
            content_type: m.content_type,
            labels: m.labels,
        }
    }
}

/// An entry's sizes and counts.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EntryJson {
    pub name: String,
    pub record_count: u64,
    pub size: u64,
    pub block_count: u64,
    pub oldest: Option<u64>,
    pub latest: Option<u64>,
}

impl From<EntryInfo> for EntryJson {
    fn from(e: EntryInfo) -> Self {
        EntryJson {
            name: e.name,
            record_count: e.record_count,
            size: e.size,
            block_count: e.block_count,
            oldest: e.oldest,
            latest: e.latest,
        }
    }
}

/// Writes one record; the body is the payload.
#[utoipa::path(post, path = "/api/v1/b/{bucket}/{entry}", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path, description = "may contain '/'"),
           ("ts" = Option<u64>, Query, description = "µs since the Unix epoch; default: now"),
           ("if_exists" = Option<String>, Query, description = "fail (default: 409 timestamp_exists) or compare (the same payload CRC32C stored at ts: 200; a different one: 409 conflict)")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "the payload; Content-Type is stored; labels as x-tsblob-label-<key> headers"),
    responses((status = 201, body = Written), (status = 200, body = Written, description = "if_exists=compare: the same payload is stored at ts already"),
              (status = 409, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 415, body = ErrorBody, description = "unsupported_encoding: a Content-Encoding other than identity"),
              (status = 422, body = ErrorBody), (status = 507, body = ErrorBody)))]
pub async fn write(t: Target, req: Request) -> Result<Response, AppError> {
    identity_only(req.headers())?;
    t.caller.require_write(&t.bucket)?;
    let (parts, body) = req.into_parts();
    let (mut ts, mut if_exists) = (None, IfExists::Fail);
    // The parameters as borrowed (decoded only when escaped): no `String` per parameter.
    for (k, v) in form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()) {
        match &*k {
            "ts" => ts = Some(super::params::parse_ts(&k, &v)?),
            "if_exists" => if_exists = IfExists::parse(&v)?,
            _ => return Err(super::params::unknown(&k, "ts and if_exists")),
        }
    }
    let meta = WriteMeta {
        ts,
        content_type: content_type_from(&parts.headers)?,
        labels: labels_from(&parts.headers)?,
    };
    check_label_bounds(&meta.labels)?;
    let len = content_length(&parts.headers)?;
    let state = &t.state;
    let limits = &state.limits;
    if let Some(n) = len {
        if n > limits.max_body {
            return Err(AppError::too_large(limits.max_body));
        }
    }
    let chunks = BodyChunks::new(body, limits.max_body, limits);
    let (bucket, entry) = (t.bucket, t.entry);
    // Bodies of known length up to 4 MiB are received in memory while the memory budget
    // (`--memory-budget`, shared with batches and queries) has room for the bytes that
    // arrived, and written with one call (no spool file, no second copy); the rest are
    // spooled, so a write still succeeds while the budget is spent.
    let received = match len {
        Some(n) if n <= MemoryBudget::LARGEST => receive(state.bodies.body_room(), chunks).await?,
        _ => Received::Spool(Vec::new(), chunks),
    };
    let (ts, status) = match received {
        // Small bodies go to the writer thread, which groups concurrent writes; a write that
        // asks to compare with a stored record (`if_exists=compare`) is settled below.
        Received::Whole(pieces, _room)
            if len.is_some_and(|n| n <= SMALL_BODY) && if_exists == IfExists::Fail =>
        {
            let ts = state.writer.write(bucket, entry, meta, pieces).await?;
            (ts, StatusCode::CREATED)
        }
        Received::Whole(pieces, room) => {
            let store = state.store.clone();
            blocking(move || {
                // The body's room in the budget is given back when its bytes are, after the
                // write: a client that leaves meanwhile drops this request, not the write.
                let _room = room;
                let written = store.write_pieces(&bucket, &entry, &meta, &pieces);
                // The body's CRC only when a taken timestamp is to be compared: the engine
                // has its own, and a second pass over a large payload was ~15 % of the
                // server's CPU for 1 MiB writes (docs/benchmarks/limit-store-2026-11-23.md).
                let crc = || {
                    pieces.iter().fold(0, |crc, piece| {
                        tsblob_storage::crc::crc32c_append(crc, piece)
                    })
                };
                settle_write(&store, &bucket, &entry, written, if_exists, crc)
            })
            .await?
        }
        Received::Spool(arrived, chunks) => {
            let store = state.store.clone();
            // The whole body is received before the engine is asked for anything; the
            // last append and the write are one call.
            let (s, b, e, m) = (store.clone(), bucket.clone(), entry.clone(), meta.clone());
            let write = move |spool: tsblob_storage::Spool, crc| {
                if len.is_some_and(|n| n != spool.len()) {
                    return Err(AppError::bad_request(format!(
                        "the body has {} bytes but Content-Length said {}: nothing was stored",
                        spool.len(),
                        len.unwrap_or_default()
                    )));
                }
                let written = spool::write_spooled(&s, &b, &e, &m, spool);
                settle_write(&s, &b, &e, written, if_exists, || crc)
            };
            let body = spool::Incoming {
                announced: len,
                arrived,
                chunks,
            };
            spool::receive_then(&store, &bucket, &entry, &meta, body, write).await?
        }
    };
    Ok(written(status, ts))
}

/// A single-record body as far as it was received in memory.
enum Received {
    /// All of it, and its room in the memory budget (given back once it is written).
    Whole(Vec<Bytes>, BodyRoom),
    /// What arrived before the budget had no room for more (nothing, for a body not
    /// received in memory at all), and the rest of the body: both go to a spool.
    Spool(Vec<Bytes>, BodyChunks),
}

/// Receives a body in memory, its room in the budget growing as its bytes arrive: room for
/// bytes a client announced and never sent would be held for as long as it stalls (up to
/// the body deadline), and 32 such uploads of 4 MiB held the whole default budget. When
/// the budget (or the single bodies' half of it) has no room for a chunk, the chunks so far
/// and the rest of the body go to a spool instead: the write still succeeds.
async fn receive(mut room: BodyRoom, mut chunks: BodyChunks) -> Result<Received, AppError> {
    let mut pieces = Vec::new();
    while let Some(chunk) = chunks.next().await? {
        pieces.push(chunk);
        if !room.try_cover(chunks.seen()) {
            return Ok(Received::Spool(pieces, chunks));
        }
    }
    Ok(Received::Whole(pieces, room))
}

/// The answer to a write: `{"ts":N}` (as [`Written`]) with the timestamp also in
/// `x-tsblob-ts`; the JSON written directly (no serializer, no formatter): one allocation
/// of the body's exact length (a `format!` grew its `String` and `Bytes` then added a
/// shared header: three), one for the header's value (`HeaderValue::from(u64)` takes two).
fn written(status: StatusCode, ts: u64) -> Response {
    const OPEN: &[u8] = b"{\"ts\":";
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(ts).as_bytes();
    let mut json = Vec::with_capacity(OPEN.len() + digits.len() + 1);
    json.extend_from_slice(OPEN);
    json.extend_from_slice(digits);
    json.push(b'}');
    // Decimal digits are always a valid header value; `from(ts)` is the form that cannot fail.
    let ts_value = HeaderValue::from_bytes(digits).unwrap_or_else(|_| HeaderValue::from(ts));
    let mut resp = Response::new(Body::from(json));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(TS_HEADER_NAME, ts_value);
    resp
}

enum Opened {
    Whole(RecordMeta, Payload),
    Stream(RecordMeta, tsblob_storage::RecordReader),
}

/// Reads one record (`ts` absent: the latest), or only its metadata for `HEAD`.
#[utoipa::path(get, path = "/api/v1/b/{bucket}/{entry}", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path),
           ("ts" = Option<u64>, Query, description = "default: the latest record")),
    responses((status = 200, description = "the payload; metadata in Content-Type, x-tsblob-ts and x-tsblob-label-* headers",
               content_type = "application/octet-stream", body = Vec<u8>),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn read(t: Target, req: Request, head_only: bool) -> Result<Response, AppError> {
    t.caller.require_read(&t.bucket)?;
    let params = RecordParams::parse(req.uri().query(), false)?;
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket.clone(), t.entry.clone());
    if head_only {
        let meta = blocking(move || Ok(store.head(&bucket, &entry, params.ts)?)).await?;
        let mut resp = Response::new(Body::empty());
        put_meta(resp.headers_mut(), &meta);
        resp.headers_mut().insert(
            axum::http::header::CONTENT_LENGTH,
            HeaderValue::from(meta.size),
        );
        return Ok(resp);
    }
    // On this worker thread when nothing of it can wait on the disk (a small record whose
    // index pages and bytes are in memory): the hand-off to the blocking pool and back
    // cost more than the read itself. Otherwise, or when unsure, on the blocking pool.
    let inline = t.state.limits.inline_read_index_max;
    if inline > 0 {
        if let Some((meta, p)) = store.read_payload_now(&bucket, &entry, params.ts, inline)? {
            return Ok(record_response(&meta, Body::from(p.into_vec())));
        }
    }
    let opened = blocking(move || {
        // Mapped from its block (large), or read whole (small); streamed past MAP_MAX.
        if let (meta, Some(p)) = store.read_payload(&bucket, &entry, params.ts)? {
            return Ok(Opened::Whole(meta, p));
        }
        let r = store.open_record(&bucket, &entry, params.ts)?;
        Ok(Opened::Stream(r.meta().clone(), r))
    })
    .await?;
    let (meta, body) = match opened {
        Opened::Whole(meta, Payload::Memory(data)) => (meta, Body::from(data)),
        Opened::Whole(meta, p @ (Payload::Mapped(_) | Payload::Shared(_))) => {
            (meta, Body::from(Bytes::from_owner(p)))
        }
        Opened::Stream(meta, reader) => {
            let (tx, body) = channel_body(4);
            // The client's token is checked again before each chunk: one removed (or no
            // longer allowed to read the bucket) while the record streams cuts it short.
            let mut grant = t.state.auth.grant(&t.caller, &t.bucket);
            tokio::spawn(crate::record_stream::stream_record(reader, tx, move || {
                grant.check().map_err(|e| e.to_string())
            }));
            (meta, body)
        }
    };
    Ok(record_response(&meta, body))
}

/// The default of `--inline-read-index-max`: point reads served on the worker threads
/// check at most this much of the index for being in memory (`read`).
pub const INLINE_READ_INDEX_MAX: u64 = 1 << 20;

/// A point read's answer: its payload `body` and its metadata in the headers.
fn record_response(meta: &RecordMeta, body: Body) -> Response {
    let mut resp = Response::new(body);
    put_meta(resp.headers_mut(), meta);
    resp.headers_mut().insert(
        axum::http::header::CONTENT_LENGTH,
        HeaderValue::from(meta.size),
    );
    resp
}

/// The body of a label update: a value sets a label, `null` removes it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelUpdate {
    pub labels: BTreeMap<String, Option<String>>,
}

/// Sets and removes labels of one record.
#[utoipa::path(patch, path = "/api/v1/b/{bucket}/{entry}", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path), ("ts" = u64, Query)),
    request_body = LabelUpdate,
    responses((status = 200, body = RecordMetaJson), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn update_labels(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let params = RecordParams::parse(req.uri().query(), false)?;
    let ts = params
        .ts
        .ok_or_else(|| AppError::bad_request("PATCH needs ?ts=<µs> naming the record to update"))?;
    let update: LabelUpdate = json(
        req.into_body(),
        1 << 20,
        &t.state.limits,
        not_like(r#"{"labels": {"key": "value", "gone": null}}"#),
    )
    .await?;
    let mut set = Labels::new();
    let mut remove = Vec::new();
    for (k, v) in update.labels {
        tsblob_storage::validate_label_key(&k)?;
        match v {
            Some(v) => {
                set.insert(k, v);
            }
            None => remove.push(k),
        }
    }
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let meta =
        blocking(move || Ok(store.update_labels(&bucket, &entry, ts, &set, &remove)?)).await?;
    Ok(Json(RecordMetaJson::from(meta)).into_response())
}

/// Removes one record (`ts`), a time range (`start`, `stop`) or the whole entry.
#[utoipa::path(delete, path = "/api/v1/b/{bucket}/{entry}", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path), ("ts" = Option<u64>, Query),
           ("start" = Option<u64>, Query), ("stop" = Option<u64>, Query)),
    responses((status = 200, body = serde_json::Value, description = "{\"removed\": N} or {\"removed\": \"entry\"}"),
              (status = 404, body = ErrorBody)))]
pub async fn remove(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let p = RecordParams::parse(req.uri().query(), true)?;
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    match (p.ts, p.start, p.stop) {
        (Some(ts), None, None) => {
            blocking(move || Ok(store.remove_record(&bucket, &entry, ts)?)).await?;
            Ok(Json(serde_json::json!({"removed": 1})).into_response())
        }
        (None, None, None) => {
            let name = entry.clone();
            blocking(move || Ok(store.remove_entry(&bucket, &entry)?)).await?;
            Ok(Json(serde_json::json!({"removed": name})).into_response())
        }
        (None, start, stop) => {
            let slot = t
                .state
                .streams
                .open(t.caller.name.as_deref().unwrap_or(""))?;
            remove_range(store, slot, bucket, entry, start, stop).await
        }
        _ => Err(AppError::bad_request(
            "give either ts (one record) or start/stop (a range), not both",
        )),
    }
}

/// Removes `[start, stop)` (open ends: from the oldest, to the latest). The walk holds
/// `slot` (a stream's place) until it ends.
pub async fn remove_range(
    store: tsblob_storage::Store,
    slot: crate::http::limits::Slot,
    bucket: String,
    entry: String,
    start: Option<u64>,
    stop: Option<u64>,
) -> Result<Response, AppError> {
    let (start, stop) = (start.unwrap_or(0), stop.unwrap_or(u64::MAX));
    if start > stop {
        return Err(AppError::invalid_timestamp(format!(
            "start={start} is after stop={stop}: the range is [start, stop)"
        )));
    }
    let n = blocking(move || {
        let _slot = slot;
        Ok(store.remove_range(&bucket, &entry, start, stop)?)
    })
    .await?;
    Ok(Json(serde_json::json!({"removed": n})).into_response())
}

/// The body of a rename, as ReductStore's: `{"new_name": "..."}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameBody {
    pub new_name: String,
}

/// Reads a rename's body (at most 4 KiB).
pub async fn rename_body(req: Request, state: &AppState) -> Result<String, AppError> {
    let b: RenameBody = json(req.into_body(), 4096, &state.limits, |e| {
        AppError::bad_request(format!(
            "the body of a rename must be JSON like {{\"new_name\": \"cams/left\"}}: {e}"
        ))
    })
    .await?;
    Ok(b.new_name)
}

/// Renames an entry: its records, labels and timestamps stay, under the new name.
#[utoipa::path(put, path = "/api/v1/b/{bucket}/{entry}/rename", tag = "entries",
    params(("bucket" = String, Path), ("entry" = String, Path)),
    request_body = RenameBody,
    responses((status = 200, body = EntryJson, description = "the entry under its new name"),
              (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "`entry_exists`: the new name is taken; `rename_tiered`: the entry has blocks in the object store"),
              (status = 422, body = ErrorBody, description = "`invalid_name`: the new name breaks the name rules")))]
pub async fn rename_entry(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let new = rename_body(req, &t.state).await?;
    tsblob_storage::validate_entry_name(&new)?;
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let info = blocking(move || Ok(store.rename_entry(&bucket, &entry, &new)?)).await?;
    Ok(Json(EntryJson::from(info)).into_response())
}

/// Sizes and counts of one entry.
#[utoipa::path(get, path = "/api/v1/b/{bucket}/{entry}/info", tag = "entries",
    params(("bucket" = String, Path), ("entry" = String, Path)),
    responses((status = 200, body = EntryJson), (status = 404, body = ErrorBody)))]
pub async fn entry_info(t: Target) -> Result<Response, AppError> {
    t.caller.require_read(&t.bucket)?;
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let info = blocking(move || Ok(store.entry(&bucket, &entry)?)).await?;
    Ok(Json(EntryJson::from(info)).into_response())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The write answer's bytes did not change when it stopped going through `format!`:
    /// `{"ts":N}` exactly, its type JSON, the same N in `x-tsblob-ts`, at 0, a typical
    /// timestamp and the largest one.
    #[tokio::test]
    async fn the_write_answer_is_the_same_json_and_header_without_format() {
        for (status, ts) in [
            (StatusCode::OK, 0u64),
            (StatusCode::OK, 1_764_000_000_123_456),
            (StatusCode::CONFLICT, u64::MAX - 1),
        ] {
            let resp = written(status, ts);
            assert_eq!(resp.status(), status);
            assert_eq!(
                resp.headers()[axum::http::header::CONTENT_TYPE],
                "application/json"
            );
            assert_eq!(resp.headers()[TS_HEADER_NAME], ts.to_string().as_str());
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            assert_eq!(body, format!("{{\"ts\":{ts}}}").as_bytes());
            let parsed: Written = serde_json::from_slice(&body).unwrap();
            assert_eq!(parsed.ts, ts);
        }
    }
}
