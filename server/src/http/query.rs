//! Time-range queries: one `GET` streaming every matching record as frames.
//!
//! A producer walks the engine's query iterator in bounded steps on the blocking pool and
//! sends the encoded frames into a bounded channel; sending waits while the client reads
//! slower than the disk, so memory per query is bounded by the channel depth times the
//! chunk size, and a slow reader holds no blocking thread while it waits. No state outlives the
//! response: to continue after a `limit`, a client queries again from the last ts + 1.

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

/// Frames are gathered into chunks of about this size, one per step on the blocking pool
/// (large enough that the hand-off to the pool costs little per byte).
const CHUNK: usize = 256 << 10;
/// Payloads larger than this are streamed from their reader instead of read whole.
const WHOLE_PAYLOAD: u64 = 1 << 20;
/// Chunks queued between the producer and the socket.
const DEPTH: usize = 16;

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
    let metrics = t.state.metrics.clone();
    tokio::spawn(async move {
        let bytes = pump(Producer::new(iter), tx).await;
        metrics.query_bytes.inc_by(bytes);
    });
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static(MEDIA_TYPE),
    );
    Ok(resp)
}

/// What one production step yields.
enum Step {
    More(Vec<Bytes>),
    Last(Vec<Bytes>),
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
}

impl Pieces {
    fn len(&self) -> usize {
        self.len + self.buf.len()
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

pub(crate) struct Producer {
    iter: QueryIter,
    count: u64,
    large: Option<(tsblob_storage::RecordReader, u64)>,
}

impl Producer {
    pub(crate) fn new(iter: QueryIter) -> Producer {
        Producer {
            iter,
            count: 0,
            large: None,
        }
    }

    fn step(&mut self) -> Step {
        let mut out = Pieces::default();
        loop {
            if out.len() >= CHUNK {
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
            let item = match self.iter.next() {
                None => {
                    put_end(&mut out.buf, self.count);
                    return Step::Last(out.finish());
                }
                Some(Err(e)) => return Step::Last(self.fail(out, AppError::from(e))),
                Some(Ok(item)) => item,
            };
            let m = &item.meta;
            if m.size <= WHOLE_PAYLOAD {
                match item.data() {
                    Ok(data) => {
                        put_record_head(
                            &mut out.buf,
                            m.ts,
                            &m.content_type,
                            &m.labels,
                            data.len() as u64,
                        );
                        out.push(data);
                        self.count += 1;
                    }
                    Err(tsblob_storage::Error::NotFound(_)) => {}
                    Err(e) => return Step::Last(self.fail(out, AppError::from(e))),
                }
            } else {
                match item.reader() {
                    Ok(r) => {
                        put_record_head(&mut out.buf, m.ts, &m.content_type, &m.labels, m.size);
                        self.large = Some((r, m.size));
                    }
                    Err(tsblob_storage::Error::NotFound(_)) => {}
                    Err(e) => return Step::Last(self.fail(out, AppError::from(e))),
                }
            }
        }
    }

    fn fail(&self, mut out: Pieces, e: AppError) -> Vec<Bytes> {
        tracing::warn!("query stream ended by an error: {e}");
        put_error(&mut out.buf, &e.json_bytes());
        out.finish()
    }
}

/// Drives a producer into `tx` until the end, an abort or the client leaving; returns the
/// bytes sent.
async fn pump(
    mut p: Producer,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
) -> u64 {
    let mut sent = 0u64;
    loop {
        let Ok((back, step)) = tokio::task::spawn_blocking(move || {
            let step = p.step();
            (p, step)
        })
        .await
        else {
            let _ = tx
                .send(Err(std::io::Error::other("the query task failed")))
                .await;
            return sent;
        };
        p = back;
        let (pieces, last) = match step {
            Step::More(b) => (b, false),
            Step::Last(b) => (b, true),
            Step::Abort(e) => {
                let _ = tx.send(Err(e)).await;
                return sent;
            }
        };
        for piece in pieces {
            sent += piece.len() as u64;
            if tx.send(Ok(piece)).await.is_err() {
                return sent; // the client went away
            }
        }
        if last {
            return sent;
        }
    }
}

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
