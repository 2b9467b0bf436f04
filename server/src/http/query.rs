//! Time-range queries: one `GET` streaming every matching record as frames.
//!
//! A blocking producer walks the engine's query iterator and encodes frames into a bounded
//! channel; `blocking_send` waits while the client reads slower than the disk, so memory
//! per query is bounded by the channel depth times the chunk size. No state outlives the
//! response: to continue after a `limit`, a client queries again from the last ts + 1.

use std::io::Read;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use tsblob_storage::{LabelFilter, Query, QueryIter};

use super::body::channel_body;
use super::errors::{blocking, AppError, ErrorBody};
use super::params::{pairs, parse_bool, parse_ts, parse_u64, unknown};
use super::records::{remove_range, Target};
use crate::framing::{put_end, put_error, put_record_head, MEDIA_TYPE};

/// Frames are gathered into chunks of about this size before being sent.
const CHUNK: usize = 64 << 10;
/// Payloads larger than this are streamed from their reader instead of read whole.
const WHOLE_PAYLOAD: u64 = 1 << 20;
/// Chunks queued between the producer and the socket.
const DEPTH: usize = 8;

const KNOWN: &str = "start, stop, limit, desc, eq.<key>, ne.<key>, has, missing";

/// Parses the query string of a query.
pub fn parse_query(q: Option<&str>) -> Result<Query, AppError> {
    let mut query = Query::default();
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
    if let (Some(start), Some(stop)) = (query.start, query.stop) {
        if start > stop {
            return Err(AppError::invalid_timestamp(format!(
                "start={start} is after stop={stop}: the range is [start, stop)"
            )));
        }
    }
    Ok(query)
}

/// Streams the records of a time range.
#[utoipa::path(get, path = "/api/v1/b/{bucket}/{entry}/query", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path),
           ("start" = Option<u64>, Query, description = "inclusive, µs"),
           ("stop" = Option<u64>, Query, description = "exclusive, µs"),
           ("limit" = Option<u64>, Query), ("desc" = Option<bool>, Query, description = "newest first"),
           ("has" = Option<String>, Query, description = "label key that must exist (repeatable)"),
           ("missing" = Option<String>, Query, description = "label key that must not exist (repeatable)")),
    responses((status = 200, description = "record frames, then an end frame (or an error frame)",
               content_type = "application/x-tsblob-records", body = Vec<u8>),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn stream(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_read(&t.bucket)?;
    let query = parse_query(req.uri().query())?;
    // Opening the query answers an unknown bucket or entry with a status, before any frame.
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let iter = blocking(move || Ok(store.query(&bucket, &entry, &query)?)).await?;
    let (tx, body) = channel_body(DEPTH);
    let sent = t.state.metrics.clone();
    tokio::task::spawn_blocking(move || {
        let bytes = produce(iter, &tx);
        sent.query_bytes.inc_by(bytes);
    });
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static(MEDIA_TYPE),
    );
    Ok(resp)
}

type Tx = tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>;

/// Sends a full chunk; false when the client has gone away.
fn flush(buf: &mut BytesMut, tx: &Tx, sent: &mut u64) -> bool {
    if buf.is_empty() {
        return true;
    }
    *sent += buf.len() as u64;
    tx.blocking_send(Ok(buf.split().freeze())).is_ok()
}

/// Encodes every record of `iter` into `tx`; returns the bytes sent.
fn produce(iter: QueryIter, tx: &Tx) -> u64 {
    let mut buf = BytesMut::with_capacity(CHUNK * 2);
    let mut count = 0u64;
    let mut sent = 0u64;
    let fail = |buf: &mut BytesMut, e: AppError, sent: &mut u64| {
        tracing::warn!("query stream ended by an error: {e}");
        put_error(buf, &e.json_bytes());
        flush(buf, tx, sent);
    };
    for item in iter {
        let item = match item {
            Ok(i) => i,
            Err(e) => {
                fail(&mut buf, AppError::from(e), &mut sent);
                return sent;
            }
        };
        let m = &item.meta;
        if m.size <= WHOLE_PAYLOAD {
            let data = match item.data() {
                Ok(d) => d,
                // Removed or evicted by a FIFO quota after the query listed it: the record
                // is gone, so it is not part of the answer.
                Err(tsblob_storage::Error::NotFound(_)) => continue,
                Err(e) => {
                    fail(&mut buf, AppError::from(e), &mut sent);
                    return sent;
                }
            };
            put_record_head(
                &mut buf,
                m.ts,
                &m.content_type,
                &m.labels,
                data.len() as u64,
            );
            buf.extend_from_slice(&data);
        } else {
            // A large payload goes out in chunks straight from its reader. Its length is
            // in the head already, so a failure half-way must end the response abruptly:
            // an error frame would be read as payload bytes.
            let mut reader = match item.reader() {
                Ok(r) => r,
                Err(tsblob_storage::Error::NotFound(_)) => continue, // evicted meanwhile
                Err(e) => {
                    fail(&mut buf, AppError::from(e), &mut sent);
                    return sent;
                }
            };
            put_record_head(&mut buf, m.ts, &m.content_type, &m.labels, m.size);
            let mut left = m.size;
            while left > 0 {
                if buf.len() >= CHUNK && !flush(&mut buf, tx, &mut sent) {
                    return sent;
                }
                let start = buf.len();
                let want = (CHUNK as u64).min(left) as usize;
                buf.resize(start + want, 0);
                match reader.read(&mut buf[start..]) {
                    Ok(0) | Err(_) => {
                        let _ = tx.blocking_send(Err(std::io::Error::other(
                            "the record could not be read to its end",
                        )));
                        return sent;
                    }
                    Ok(n) => {
                        buf.truncate(start + n);
                        left -= n as u64;
                    }
                }
            }
            // The engine checks the CRC when the reader reaches its end: read once more so
            // that a corrupted payload aborts the response instead of passing as complete.
            if !matches!(reader.read(&mut [0u8; 1]), Ok(0)) {
                let _ = tx.blocking_send(Err(std::io::Error::other(
                    "the record failed its CRC check at its end",
                )));
                return sent;
            }
        }
        count += 1;
        if buf.len() >= CHUNK && !flush(&mut buf, tx, &mut sent) {
            return sent;
        }
    }
    put_end(&mut buf, count);
    flush(&mut buf, tx, &mut sent);
    sent
}

/// Removes the records of `[start, stop)` (the `DELETE` of the query route).
#[utoipa::path(delete, path = "/api/v1/b/{bucket}/{entry}/query", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path),
           ("start" = Option<u64>, Query), ("stop" = Option<u64>, Query)),
    responses((status = 200, body = serde_json::Value, description = "{\"removed\": N}"),
              (status = 404, body = ErrorBody)))]
pub async fn remove(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let p = super::params::RecordParams::parse(req.uri().query(), true)?;
    if p.ts.is_some() {
        return Err(AppError::bad_request(
            "the query route removes ranges: give start and stop, not ts",
        ));
    }
    remove_range(t.state.store.clone(), t.bucket, t.entry, p.start, p.stop).await
}
