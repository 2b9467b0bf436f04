//! Sending records to a server's batch endpoint with `if_exists=compare` (a record already
//! stored with the same payload is 200, a different one 409 `conflict`), zstd-compressed
//! when that saves bytes. Shared by replication senders and `tsblob cp`.
//!
//! The destination is not trusted: no redirect is followed (a 3xx is an error naming its
//! status and the `Location` host), every answer is read up to a bound
//! ([`batch_answer_max`], and the destination's `outbound::Bounds`: `--outbound-answer-max`,
//! `--outbound-error-max` for replication) and cut
//! there, and of an error answer only a tsblob error document's message is kept, one
//! short line (`tsblob_proto::outbound`).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tsblob_storage::Labels;

use crate::answers::{BatchResult, ErrorDetail, RecordResult};
use serde::{Deserialize, Serialize};
use tsblob_proto::framing::{put_end, put_record_head, MEDIA_TYPE};
use tsblob_proto::outbound;
use tsblob_proto::tls::error_chain;
use tsblob_proto::ErrorCode;

/// The API the destination speaks: tsblob's own (`if_exists=compare` batches), or
/// ReductStore's (batch protocol v1, `x-reduct-time-<ts>` headers): a ReductStore server,
/// or a tsblob's `--reductstore-listen`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DstApi {
    #[default]
    Tsblob,
    Reductstore,
}

/// How batch bodies travel: `auto` zstd (level 1) when it saves an eighth of the bytes,
/// `zstd` always (`Content-Encoding: zstd`), `none` never; `gzip` (ReductStore
/// destinations only: tsblob's native batch decodes zstd alone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    Auto,
    None,
    Zstd,
    Gzip,
}

impl Compression {
    /// To a ReductStore destination: `auto` sends plain (ReductStore's default, `none`:
    /// servers before 1.21 do not decode request bodies).
    pub fn for_reductstore(self) -> Compression {
        match self {
            Compression::Auto => Compression::None,
            c => c,
        }
    }
}

/// Bodies smaller than this go uncompressed.
const ZSTD_MIN: usize = 4096;
/// A request may take `timeout` plus the time to move its body at this rate.
const MIN_RATE: f64 = 64.0 * 1024.0;

/// One record on its way to another server.
#[derive(Debug, Clone)]
pub struct OutRecord {
    pub entry: String,
    pub ts: u64,
    pub content_type: String,
    pub labels: Labels,
    pub data: Vec<u8>,
}

/// Where records go.
#[derive(Debug, Clone)]
pub struct Destination {
    /// The server's base URL (`http://host:port`).
    pub url: String,
    pub bucket: String,
    pub token: Option<String>,
    /// How much of its answers is read, and of its error messages kept.
    pub bounds: outbound::Bounds,
    /// The API it speaks (tsblob's, or ReductStore's batch protocol v1).
    pub api: DstApi,
    /// Whether batch bodies go zstd-compressed.
    pub compression: Compression,
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.url.trim_end_matches('/'), self.bucket)
    }
}

/// A body's first this many bytes are compressed first: when they do not shrink, the
/// rest is not tried (images and video do not; text and sensor data do).
const ZSTD_SAMPLE: usize = 64 << 10;

/// The framed body of `recs` (record frames, then the end frame): zstd (level 1, the
/// frame announcing its size) when that saves at least an eighth of the bytes, judged on
/// the first [`ZSTD_SAMPLE`] bytes first, so incompressible payloads cost one small
/// attempt. The payloads are read in place: the plain body is only built when it is sent
/// plain. Blocking (run it on the blocking pool).
fn encode_body(recs: &[OutRecord], compression: Compression) -> (Bytes, bool) {
    let mut heads = BytesMut::new();
    let mut ends = Vec::with_capacity(recs.len());
    for r in recs {
        put_record_head(
            &mut heads,
            r.ts,
            &r.content_type,
            &r.labels,
            r.data.len() as u64,
        );
        ends.push(heads.len());
    }
    let mut tail = BytesMut::new();
    put_end(&mut tail, recs.len() as u64);
    let mut from = 0;
    let mut pieces: Vec<&[u8]> = Vec::with_capacity(recs.len() * 2 + 1);
    for (r, end) in recs.iter().zip(&ends) {
        pieces.push(&heads[from..*end]);
        pieces.push(&r.data);
        from = *end;
    }
    pieces.push(&tail);
    let total: usize = pieces.iter().map(|p| p.len()).sum();
    if let Some(packed) = compress(&pieces, total, compression) {
        return (Bytes::from(packed), true);
    }
    let mut body = BytesMut::with_capacity(total);
    for p in pieces {
        body.extend_from_slice(p);
    }
    (body.freeze(), false)
}

/// The body compressed as `compression` asks: `Auto` when it pays ([`zstd_if_it_pays`]),
/// `Zstd` always, `None` never.
fn compress(pieces: &[&[u8]], total: usize, compression: Compression) -> Option<Vec<u8>> {
    match compression {
        // Gzip goes to ReductStore destinations only ([`gzip_all`]), checked at `PUT`.
        Compression::None | Compression::Gzip => None,
        Compression::Auto if total < ZSTD_MIN => None,
        Compression::Auto => zstd_if_it_pays(pieces, total),
        Compression::Zstd => zstd_all(pieces, total),
    }
}

/// `plain` gzip-compressed (level 1), for a ReductStore destination.
fn gzip_all(plain: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(plain.len() / 2 + 64),
        flate2::Compression::fast(),
    );
    enc.write_all(plain).ok()?;
    enc.finish().ok()
}

fn zstd_all(pieces: &[&[u8]], total: usize) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut enc = zstd::stream::Encoder::new(Vec::with_capacity(total / 2 + 64), 1).ok()?;
    enc.include_contentsize(true).ok()?;
    enc.set_pledged_src_size(Some(total as u64)).ok()?;
    for p in pieces {
        enc.write_all(p).ok()?;
    }
    enc.finish().ok()
}

fn zstd_if_it_pays(pieces: &[&[u8]], total: usize) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut sample = Vec::with_capacity(total.min(ZSTD_SAMPLE));
    for p in pieces {
        let room = ZSTD_SAMPLE - sample.len();
        sample.extend_from_slice(&p[..p.len().min(room)]);
        if sample.len() == ZSTD_SAMPLE {
            break;
        }
    }
    let s = zstd::bulk::compress(&sample, 1).ok()?;
    if s.len() >= sample.len() - sample.len() / 8 {
        return None;
    }
    let packed = if sample.len() == total {
        s
    } else {
        let mut enc = zstd::stream::Encoder::new(Vec::with_capacity(s.len() * 2), 1).ok()?;
        enc.include_contentsize(true).ok()?;
        enc.set_pledged_src_size(Some(total as u64)).ok()?;
        for p in pieces {
            enc.write_all(p).ok()?;
        }
        enc.finish().ok()?
    };
    (packed.len() < total - total / 8).then_some(packed)
}

/// Posts `recs` (all of entry `entry`) as one batch, and hands them back. `Ok` carries the
/// server's per-record results (in order; fewer than `recs` if the body was refused part
/// way); `Err` a message for an attempt that failed as a whole (transport, or an error
/// answer).
pub async fn post_batch(
    http: &reqwest::Client,
    dst: &Destination,
    entry: &str,
    recs: Vec<OutRecord>,
    timeout: Duration,
) -> (Vec<OutRecord>, Result<BatchResult, String>) {
    if dst.api == DstApi::Reductstore {
        let answer = reduct_batches(http, dst, entry, &recs, timeout).await;
        return (recs, answer);
    }
    let shared = std::sync::Arc::new(recs);
    let job = shared.clone();
    let compression = dst.compression;
    let encoded = tokio::task::spawn_blocking(move || encode_body(&job, compression)).await;
    // The task is over (even if it failed): the records are ours again, uncopied.
    let recs = std::sync::Arc::try_unwrap(shared).unwrap_or_else(|a| (*a).clone());
    let (payload, zstd) = match encoded {
        Ok(e) => e,
        Err(e) => return (recs, Err(format!("encoding a batch failed: {e}"))),
    };
    let n = recs.len();
    let mut answer = send_batch(http, dst, entry, n, payload.clone(), zstd, timeout).await;
    if let Err(f) = &mut answer {
        if f.bucket_missing {
            match create_bucket(http, dst, timeout).await {
                Ok(()) => answer = send_batch(http, dst, entry, n, payload, zstd, timeout).await,
                Err(why) => f.message = format!("{}; {why}", f.message),
            }
        }
    }
    (recs, answer.map_err(|f| f.message))
}

/// A batch that failed as a whole: the retry's message, and whether the destination said
/// its bucket does not exist (404 `bucket_not_found`).
struct Failed {
    message: String,
    bucket_missing: bool,
}

impl From<String> for Failed {
    fn from(message: String) -> Failed {
        Failed {
            message,
            bucket_missing: false,
        }
    }
}

/// Creates the destination's bucket with its default settings, as ReductStore's replication
/// (and this sender to a ReductStore) does: whether it is there now (made, or made by
/// someone else meanwhile). Bug (new-user walkthrough): a task into a missing bucket of a
/// tsblob destination was accepted and failed every attempt, for ever, with "bucket does
/// not exist". One request per failed attempt; its answer is read within the error bound.
/// `Err`: why it could not be made, for the task's `last_error` (a token without the right
/// to create buckets was seen only in the log, behind "bucket does not exist").
async fn create_bucket(
    http: &reqwest::Client,
    dst: &Destination,
    timeout: Duration,
) -> Result<(), String> {
    let url = format!(
        "{}/api/v1/b/{}",
        dst.url.trim_end_matches('/'),
        crate::cli::client::seg(&dst.bucket)
    );
    let mut req = http.post(url).timeout(timeout);
    if let Some(t) = &dst.token {
        req = req.bearer_auth(t);
    }
    let resp = send_once(req, "a bucket creation", dst)
        .await
        .map_err(|e| format!("creating it failed: {e}"))?;
    let status = resp.status();
    let body = outbound::read_bounded(resp, dst.bounds.error_max)
        .await
        .unwrap_or_default();
    tracing::info!(bucket = %dst.bucket, %status, "replication: asked the destination to create its missing bucket");
    if status.is_success() || status == reqwest::StatusCode::CONFLICT {
        Ok(())
    } else {
        Err(format!(
            "creating it was answered {status}: {}",
            error_text(&body)
        ))
    }
}

/// Whether a tsblob error answer says the bucket does not exist (`bucket_not_found`).
fn says_bucket_missing(answer: &[u8]) -> bool {
    outbound::error_fields(answer)
        .is_some_and(|(code, _)| code.as_deref() == Some("bucket_not_found"))
}

async fn send_batch(
    http: &reqwest::Client,
    dst: &Destination,
    entry: &str,
    count: usize,
    payload: Bytes,
    zstd: bool,
    timeout: Duration,
) -> Result<BatchResult, Failed> {
    let timeout = timeout + Duration::from_secs_f64(payload.len() as f64 / MIN_RATE);
    let url = format!(
        "{}/api/v1/b/{}/{}/batch?if_exists=compare",
        dst.url.trim_end_matches('/'),
        crate::cli::client::seg(&dst.bucket),
        crate::cli::client::entry_seg(entry)
    );
    let mut req = http
        .post(&url)
        .timeout(timeout)
        .header(reqwest::header::CONTENT_TYPE, MEDIA_TYPE)
        .body(payload);
    if zstd {
        req = req.header(reqwest::header::CONTENT_ENCODING, "zstd");
    }
    if let Some(t) = &dst.token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|e| {
        format!(
            "sending {count} record(s) to {dst}/{entry} failed: {}",
            error_chain(&e)
        )
    })?;
    let status = resp.status();
    if status.is_redirection() {
        return Err(format!(
            "{dst}/{entry} answered {status}, {}",
            outbound::redirect_message(&resp)
        )
        .into());
    }
    let text = outbound::read_bounded(resp, batch_answer_max(&dst.bounds, count))
        .await
        .map_err(|e| format!("{dst}/{entry} answered {status}, but {e}"))?;
    match serde_json::from_slice::<BatchResult>(&text) {
        // An error answer's results are taken as tsblob sends them, with the error that
        // stopped the batch (records written before a 503 or a 507 are 201): a 401 or a 5xx
        // with results and no error is no tsblob answer, and nothing in it counts as
        // delivered (hostile probe of 2026-11-30: a 500 listing every record as 201 was
        // taken as a delivery).
        Ok(mut a) if status.is_success() || (!a.results.is_empty() && a.error.is_some()) => {
            // The destination's words go to the task's status and the log: one short
            // line each.
            for e in a.results.iter_mut().filter_map(|r| r.error.as_mut()) {
                e.code = outbound::one_line(&e.code, 64);
                e.message = outbound::one_line(&e.message, dst.bounds.message_max);
            }
            Ok(a)
        }
        _ => Err(Failed {
            message: format!("{dst}/{entry} answered {status}: {}", error_text(&text)),
            bucket_missing: status == reqwest::StatusCode::NOT_FOUND && says_bucket_missing(&text),
        }),
    }
}

/// The most of a batch answer read: an error document's room plus [`RESULT_MAX`] per
/// record sent (each record's result: its timestamp, status and any error).
pub fn batch_answer_max(bounds: &outbound::Bounds, records: usize) -> usize {
    bounds
        .error_max
        .saturating_add(records.saturating_mul(RESULT_MAX))
}

/// The room for one record's result in a batch answer.
const RESULT_MAX: usize = 1024;

/// What an error answer's body says, as one short line: the message of a tsblob error
/// document, else only its size (a foreign body is never echoed).
fn error_text(body: &[u8]) -> String {
    match outbound::error_fields(body) {
        Some((_, message)) => message,
        None if body.is_empty() => "no error document".to_string(),
        None => format!("{} bytes that are not a tsblob error document", body.len()),
    }
}

/// Whether a destination's status for what it was sent (a record, an attachment) refuses it
/// for good: a 4xx other than 401, 403, 404, 408 and 429, which a destination set right
/// takes later. Every other status but the success the caller looks for is a failed
/// attempt, sent again: a 5xx, and what is no answer to a write at all (1xx, a 2xx other
/// than 200 and 201, 3xx, 0 or past 599). Bug "records skipped for good on an odd status"
/// (hostile probe of 2026-11-30): a batch result of 0, 202, 302, 401, 404 or 408 skipped
/// its record for ever, where a record sent alone was sent again.
pub fn refused_for_good(status: u16) -> bool {
    (400..=499).contains(&status) && !matches!(status, 401 | 403 | 404 | 408 | 429)
}

/// A ReductStore destination's status for a record, read as tsblob's: its full HARD quota
/// (`400 Quota of 'b' exceeded`, which tsblob's ReductStore API also answers) is 507, a
/// destination that takes the record once room is made, not a record refused for good
/// (review of 2026-11-29).
fn quota_is_full(status: u16, message: &str) -> u16 {
    if status == 400 && message.to_ascii_lowercase().contains("quota") {
        507
    } else {
        status
    }
}

/// What a destination did with one record sent alone.
#[derive(Debug)]
pub enum Single {
    /// Stored (201).
    Stored,
    /// The same payload was there already (200 with `if_exists=compare`).
    Existing,
    /// Another payload is stored at the timestamp (409): kept, never overwritten.
    Conflict(String),
    /// Refused for good ([`refused_for_good`]): do not retry.
    Refused(String),
    /// Failed as a whole (transport, 401/403/404/408, 429, 5xx, a status that is no
    /// answer to a write): try again later.
    Retry(String),
}

/// A record's content type as sent: its own, or `application/octet-stream` when it has none.
fn content_type(meta: &tsblob_storage::RecordMeta) -> &str {
    if meta.content_type.is_empty() {
        "application/octet-stream"
    } else {
        meta.content_type.as_str()
    }
}

/// Sends one request to a destination (`what` names it in messages, `to` the place it
/// goes): a failure to send, or a redirect (never followed), is the retry's message.
pub async fn send_once(
    req: reqwest::RequestBuilder,
    what: &str,
    to: impl std::fmt::Display,
) -> Result<reqwest::Response, String> {
    let resp = req
        .send()
        .await
        .map_err(|e| format!("sending {what} failed: {}", error_chain(&e)))?;
    let status = resp.status();
    if status.is_redirection() {
        return Err(format!(
            "{to} answered {status} for {what}, {}",
            outbound::redirect_message(&resp)
        ));
    }
    Ok(resp)
}

/// [`send_once`] for one record's request: a failure is a [`Single::Retry`].
async fn send_single(
    req: reqwest::RequestBuilder,
    what: &str,
    dst: &Destination,
    entry: &str,
) -> Result<reqwest::Response, Single> {
    send_once(req, what, format!("{dst}/{entry}"))
        .await
        .map_err(Single::Retry)
}

/// Writes one record with a single-record `POST ?ts=&if_exists=compare` (for records over
/// the destination's batch limit), its payload streamed from `body` (`size` bytes).
pub async fn post_single(
    http: &reqwest::Client,
    dst: &Destination,
    entry: &str,
    meta: &tsblob_storage::RecordMeta,
    body: reqwest::Body,
    timeout: Duration,
) -> Single {
    if dst.api == DstApi::Reductstore {
        return reduct_single(http, dst, entry, meta, body, timeout).await;
    }
    let client =
        tsblob_proto::client::Client::with_http(http.clone(), &dst.url, dst.token.as_deref());
    let ct = content_type(meta);
    let req = client
        .write_request(&dst.bucket, entry, Some(meta.ts), ct, &meta.labels)
        .query(&[("if_exists", "compare")])
        .header(reqwest::header::CONTENT_LENGTH, meta.size)
        .timeout(timeout + Duration::from_secs_f64(meta.size as f64 / MIN_RATE))
        .body(body);
    let what = format!("record {} ({} bytes) to {dst}/{entry}", meta.ts, meta.size);
    let resp = match send_single(req, &what, dst, entry).await {
        Ok(r) => r,
        Err(retry) => return retry,
    };
    let status = resp.status();
    let limit = if status.is_success() {
        dst.bounds.answer_max
    } else {
        dst.bounds.error_max
    };
    let text = match outbound::read_bounded(resp, limit).await {
        Ok(t) => t,
        Err(e) => {
            return Single::Retry(format!(
                "{dst}/{entry} answered {status} for {what}, but {e}"
            ))
        }
    };
    let why = || error_text(&text);
    let status = status.as_u16();
    if status == 404 && says_bucket_missing(&text) {
        // The payload was streamed and is spent: the next attempt sends it.
        return Single::Retry(match create_bucket(http, dst, timeout).await {
            Ok(()) => format!(
                "{dst}/{entry} had no bucket {}: created it; {what} is sent again",
                dst.bucket
            ),
            Err(why) => format!(
                "{dst}/{entry} answered 404 for {what}: {}; {why}",
                error_text(&text)
            ),
        });
    }
    match status {
        201 => Single::Stored,
        200 => Single::Existing,
        409 => Single::Conflict(why()),
        s if refused_for_good(s) => Single::Refused(format!(
            "{dst}/{entry} refused {what} ({status}): {}",
            why()
        )),
        _ => Single::Retry(format!(
            "{dst}/{entry} answered {status} for {what}: {}",
            why()
        )),
    }
}

/// Records per request to a ReductStore destination: batch protocol v1 carries one header
/// per record, and HTTP servers take about 100 headers (ReductStore 1.21.5 drops the
/// connection past them).
pub const REDUCT_BATCH_RECORDS: usize = 80;
/// Bytes of `x-reduct-time-*` headers (names and values) per request to a ReductStore
/// destination: ReductStore 1.21.5 answered 431 to a batch of nine records with 60 KB of
/// labels each (540 KB of headers) and took eight (480 KB). Bug: 80 records of 8 KB of
/// labels made 640 KB, and the task retried that request for ever
/// (`docs/benchmarks/bounds-2026-11-27.md`).
pub const REDUCT_BATCH_HEADERS: usize = 400_000;

/// The record's `x-reduct-time-*` header as sent, name and value.
fn reduct_header(r: &OutRecord) -> (String, String) {
    let meta = tsblob_storage::RecordMeta {
        ts: r.ts,
        size: r.data.len() as u64,
        content_type: r.content_type.clone(),
        labels: r.labels.clone(),
    };
    (
        format!("x-reduct-time-{}", r.ts),
        crate::reduct_header::BatchHeaderV1::format(&meta),
    )
}

/// The records of `heads` (their headers, [`reduct_header`]) cut into requests of at most
/// [`REDUCT_BATCH_RECORDS`] records and [`REDUCT_BATCH_HEADERS`] bytes of headers (a record
/// over it alone goes alone): the index ranges of the requests.
fn reduct_chunks(heads: &[(String, String)]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, (name, value)) in heads.iter().enumerate() {
        let len = name.len() + value.len() + 4;
        if i > start && (i - start == REDUCT_BATCH_RECORDS || bytes + len > REDUCT_BATCH_HEADERS) {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += len;
    }
    if start < heads.len() {
        out.push(start..heads.len());
    }
    out
}

fn reduct_url(dst: &Destination, tail: &str) -> String {
    format!(
        "{}/api/v1/b/{}{tail}",
        dst.url.trim_end_matches('/'),
        crate::cli::client::seg(&dst.bucket)
    )
}

/// A ReductStore error answer's message (`x-reduct-error`), one short line.
fn reduct_error(resp: &reqwest::Response, bounds: &outbound::Bounds) -> String {
    resp.headers()
        .get("x-reduct-error")
        .map(|v| outbound::one_line(&String::from_utf8_lossy(v.as_bytes()), bounds.message_max))
        .unwrap_or_else(|| "no x-reduct-error header".to_string())
}

/// `recs` to a ReductStore destination with batch protocol v1 (`POST
/// /api/v1/b/{bucket}/{entry}/batch`, one `x-reduct-time-<ts>` header per record), in
/// requests of [`reduct_chunks`]. ReductStore has no `if_exists=compare`:
/// a record already stored at the timestamp is its 409, counted as delivered (200 here),
/// whatever its payload. A request failing as a whole after others succeeded ends the
/// results there (the rest is retried).
async fn reduct_batches(
    http: &reqwest::Client,
    dst: &Destination,
    entry: &str,
    recs: &[OutRecord],
    timeout: Duration,
) -> Result<BatchResult, String> {
    let mut out = BatchResult {
        error: None,
        written: 0,
        existing: 0,
        failed: 0,
        results: Vec::with_capacity(recs.len()),
    };
    let mut created = false;
    // Each record's header is made once: it sizes the requests and is sent.
    let heads: Vec<(String, String)> = recs.iter().map(reduct_header).collect();
    let mut chunks = reduct_chunks(&heads).into_iter();
    let mut next = chunks.next();
    while let Some(chunk) = next.clone() {
        match reduct_batch(
            http,
            dst,
            entry,
            &recs[chunk.clone()],
            &heads[chunk],
            timeout,
        )
        .await
        {
            Ok(results) => {
                for r in &results {
                    match r.status {
                        201 => out.written += 1,
                        200 => out.existing += 1,
                        _ => out.failed += 1,
                    }
                }
                out.results.extend(results);
                next = chunks.next();
            }
            // ReductStore's replication creates a missing destination bucket; so does this
            // sender, once per attempt, with the destination's default settings.
            Err((Some(404), _)) if !created => {
                created = true;
                let mut req = http.post(reduct_url(dst, "")).timeout(timeout);
                if let Some(t) = &dst.token {
                    req = req.bearer_auth(t);
                }
                if let Ok(resp) = req.send().await {
                    let status = resp.status();
                    let _ = outbound::read_bounded(resp, dst.bounds.error_max).await;
                    tracing::info!(bucket = %dst.bucket, %status, "replication: created the destination bucket");
                }
            }
            Err((_, message)) if out.results.is_empty() => return Err(message),
            Err((_, message)) => {
                tracing::warn!("replication: {message}; the rest of the batch is sent again");
                break;
            }
        }
    }
    Ok(out)
}

/// One request of [`reduct_batches`]: the per-record results, or the status (if any) and a
/// message for a request that failed as a whole.
async fn reduct_batch(
    http: &reqwest::Client,
    dst: &Destination,
    entry: &str,
    recs: &[OutRecord],
    heads: &[(String, String)],
    timeout: Duration,
) -> Result<Vec<RecordResult>, (Option<u16>, String)> {
    // One result per record, in the order of `recs` (those refused here first).
    let mut results: Vec<Option<RecordResult>> = vec![None; recs.len()];
    let mut headers = reqwest::header::HeaderMap::new();
    let mut sent = Vec::with_capacity(recs.len());
    let mut stamps = std::collections::HashSet::with_capacity(recs.len());
    for (i, (r, (name, value))) in recs.iter().zip(heads).enumerate() {
        // A timestamp twice in a page (the record written again): one header can carry
        // it, so its payload goes once (both items read the same stored record).
        if !stamps.insert(r.ts) {
            continue;
        }
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes());
        let value = reqwest::header::HeaderValue::from_str(value);
        match (name, value) {
            (Ok(n), Ok(v)) => {
                headers.insert(n, v);
                sent.push(r);
            }
            _ => {
                results[i] = Some(RecordResult {
                    ts: Some(r.ts),
                    status: 422,
                    error: Some(ErrorDetail {
                        code: ErrorCode::InvalidLabel.as_str().into(),
                        message: "a label value HTTP cannot carry in ReductStore's batch header (bytes outside printable ASCII)".into(),
                    }),
                })
            }
        }
    }
    // ReductStore reads the payloads in the order of their timestamps (headers have no
    // order), so they go sorted: in feed order, records written out of timestamp order
    // were stored with each other's payloads (bug: `x-reduct-time-1` got the payload of
    // the record at 3).
    sent.sort_by_key(|r| r.ts);
    // The plain body (one chunk of at most REDUCT_BATCH_RECORDS records of a bounded page),
    // compressed on the blocking pool when asked.
    let mut plain = BytesMut::with_capacity(sent.iter().map(|r| r.data.len()).sum());
    for r in &sent {
        plain.extend_from_slice(&r.data);
    }
    let plain = plain.freeze();
    let total = plain.len();
    let compression = dst.compression.for_reductstore();
    let packed = match compression {
        Compression::Zstd | Compression::Gzip => {
            let job = plain.clone();
            tokio::task::spawn_blocking(move || match compression {
                Compression::Gzip => gzip_all(&job).map(|p| (p, "gzip")),
                _ => compress(&[&job[..]], total, compression).map(|p| (p, "zstd")),
            })
            .await
            .ok()
            .flatten()
        }
        _ => None,
    };
    let (body, packed) = match packed {
        Some((packed, coding)) => {
            headers.insert(
                reqwest::header::CONTENT_ENCODING,
                reqwest::header::HeaderValue::from_static(coding),
            );
            (Bytes::from(packed), true)
        }
        None => (plain, false),
    };
    let len = body.len();
    // A compressed body goes chunked, without `Content-Length`, as ReductStore's own sender
    // sends it: with the compressed length announced, ReductStore 1.21.5 answered each
    // batch only after about two seconds (5,000 records of 10 KiB: 122 s against 2 s plain).
    let body = if packed {
        reqwest::Body::wrap_stream(futures_util::stream::once(async move {
            Ok::<Bytes, std::io::Error>(body)
        }))
    } else {
        reqwest::Body::from(body)
    };
    let what = format!("{} record(s) to {dst}/{entry}", sent.len());
    let mut req = http
        .post(reduct_url(
            dst,
            &format!("/{}/batch", crate::cli::client::entry_seg(entry)),
        ))
        .timeout(timeout + Duration::from_secs_f64(len as f64 / MIN_RATE))
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .headers(headers)
        .body(body);
    if let Some(t) = &dst.token {
        req = req.bearer_auth(t);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| (None, format!("sending {what} failed: {}", error_chain(&e))))?;
    let status = resp.status();
    if status.is_redirection() {
        return Err((
            Some(status.as_u16()),
            format!(
                "{dst}/{entry} answered {status}, {}",
                outbound::redirect_message(&resp)
            ),
        ));
    }
    let message = reduct_error(&resp, &dst.bounds);
    let mut errors: std::collections::HashMap<u64, (u16, String)> = Default::default();
    for (k, v) in resp.headers() {
        let Some(ts) = k.as_str().strip_prefix("x-reduct-error-") else {
            continue;
        };
        let Ok(ts) = ts.parse::<u64>() else { continue };
        let text = String::from_utf8_lossy(v.as_bytes());
        let (code, msg) = text.split_once(',').unwrap_or((&text, ""));
        let code = code.trim().parse::<u16>().unwrap_or(500);
        errors.insert(ts, (code, outbound::one_line(msg, dst.bounds.message_max)));
    }
    let limit = if status.is_success() {
        batch_answer_max(&dst.bounds, recs.len())
    } else {
        dst.bounds.error_max
    };
    outbound::read_bounded(resp, limit).await.map_err(|e| {
        (
            Some(status.as_u16()),
            format!("{dst}/{entry} answered {status}, but {e}"),
        )
    })?;
    if !status.is_success() {
        return Err((
            Some(status.as_u16()),
            format!("{dst}/{entry} answered {status} for {what}: {message}"),
        ));
    }
    // ReductStore answers a missing bucket per record (404 for each): the batch failed as
    // a whole (the bucket is created, then it is sent again).
    if let Some((_, message)) = errors.values().find(|(code, _)| *code == 404) {
        return Err((
            Some(404),
            format!("{dst}/{entry} answered 404 for {what}: {message}"),
        ));
    }
    for (slot, r) in results.iter_mut().zip(recs).filter(|(s, _)| s.is_none()) {
        let error = errors
            .get(&r.ts)
            .map(|(code, message)| (quota_is_full(*code, message), message.clone()));
        *slot = Some(match error {
            None => RecordResult {
                ts: Some(r.ts),
                status: 201,
                error: None,
            },
            // Already stored at the timestamp (ReductStore cannot compare payloads).
            Some((409, _)) => RecordResult {
                ts: Some(r.ts),
                status: 200,
                error: None,
            },
            Some((code, message)) => RecordResult {
                ts: Some(r.ts),
                status: code,
                error: Some(ErrorDetail {
                    code: if code >= 500 {
                        ErrorCode::Internal
                    } else {
                        ErrorCode::BadRequest
                    }
                    .as_str()
                    .into(),
                    message,
                }),
            },
        });
    }
    Ok(results.into_iter().flatten().collect())
}

/// One record to a ReductStore destination (`POST /api/v1/b/{bucket}/{entry}?ts=`, labels
/// in `x-reduct-label-*`), its payload streamed; 409 (a record at the timestamp) counts as
/// there already.
async fn reduct_single(
    http: &reqwest::Client,
    dst: &Destination,
    entry: &str,
    meta: &tsblob_storage::RecordMeta,
    body: reqwest::Body,
    timeout: Duration,
) -> Single {
    let ct = content_type(meta);
    let url = reduct_url(
        dst,
        &format!("/{}?ts={}", crate::cli::client::entry_seg(entry), meta.ts),
    );
    let mut req = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, ct)
        .header(reqwest::header::CONTENT_LENGTH, meta.size)
        .timeout(timeout + Duration::from_secs_f64(meta.size as f64 / MIN_RATE))
        .body(body);
    for (k, v) in &meta.labels {
        if let (Ok(n), Some(v)) = (
            reqwest::header::HeaderName::from_bytes(format!("x-reduct-label-{k}").as_bytes()),
            reqwest::header::HeaderValue::from_str(&crate::reduct_header::label_text(v)).ok(),
        ) {
            req = req.header(n, v);
        }
    }
    if let Some(t) = &dst.token {
        req = req.bearer_auth(t);
    }
    let what = format!("record {} ({} bytes) to {dst}/{entry}", meta.ts, meta.size);
    let resp = match send_single(req, &what, dst, entry).await {
        Ok(r) => r,
        Err(retry) => return retry,
    };
    let status = resp.status();
    let message = reduct_error(&resp, &dst.bounds);
    if let Err(e) = outbound::read_bounded(resp, dst.bounds.error_max).await {
        return Single::Retry(format!(
            "{dst}/{entry} answered {status} for {what}, but {e}"
        ));
    }
    match quota_is_full(status.as_u16(), &message) {
        200 | 201 => Single::Stored,
        409 => Single::Existing,
        s if refused_for_good(s) => {
            Single::Refused(format!("{dst}/{entry} refused {what} ({s}): {message}"))
        }
        s => Single::Retry(format!("{dst}/{entry} answered {s} for {what}: {message}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Review of 2026-11-29: a ReductStore destination (and tsblob's ReductStore API) answers
    /// a full HARD quota 400, which skipped the record for good; it is sent again later.
    #[test]
    fn a_full_quota_at_a_reductstore_destination_skipped_records_for_good() {
        let s = quota_is_full(400, "Quota of 'b' exceeded");
        assert_eq!(s, 507);
        assert!(!refused_for_good(s));
        assert_eq!(quota_is_full(400, "bad label"), 400);
        assert!(refused_for_good(quota_is_full(400, "bad label")));
        assert_eq!(quota_is_full(422, "quota_size must be positive"), 422);
    }
    use tsblob_proto::framing::put_record;

    /// Bug: requests to a ReductStore destination were cut at 80 records whatever their
    /// labels: 80 records with 8 KB of labels made 640 KB of headers, ReductStore answered
    /// 431 and the task sent the same request again for ever. Cut by header bytes too now.
    #[test]
    fn reduct_requests_are_cut_by_header_bytes_and_records() {
        let labelled = |ts: u64, n: usize| OutRecord {
            labels: [("a".to_string(), "y".repeat(n))].into_iter().collect(),
            ..rec(ts, b"x".to_vec())
        };
        let check = |recs: &[OutRecord], sizes: &[usize]| {
            let heads: Vec<_> = recs.iter().map(reduct_header).collect();
            let chunks = reduct_chunks(&heads);
            assert_eq!(chunks.iter().map(|c| c.len()).collect::<Vec<_>>(), sizes);
            let all: Vec<usize> = chunks.iter().flat_map(|c| c.clone()).collect();
            assert_eq!(all, (0..recs.len()).collect::<Vec<_>>());
            for c in chunks {
                let n = c.len();
                let bytes: usize = heads[c].iter().map(|(n, v)| n.len() + v.len() + 4).sum();
                assert!(n == 1 || bytes <= REDUCT_BATCH_HEADERS, "{bytes}");
            }
        };
        let small: Vec<_> = (1..=200).map(|ts| rec(ts, vec![1])).collect();
        check(&small, &[80, 80, 40]);
        let big: Vec<_> = (1..=200).map(|ts| labelled(ts, 8000)).collect();
        check(&big, &[49, 49, 49, 49, 4]);
        let mixed = vec![labelled(1, 300_000), labelled(2, 300_000), rec(3, vec![1])];
        check(&mixed, &[1, 2]);
        check(&[], &[]);
    }

    fn rec(ts: u64, data: Vec<u8>) -> OutRecord {
        let labels: Labels = [("k".to_string(), ts.to_string())].into_iter().collect();
        OutRecord {
            entry: "e".into(),
            ts,
            content_type: "text/plain".into(),
            labels,
            data,
        }
    }

    /// The body is the framing of the records whether it is compressed or not (and the
    /// compressed frame announces its size, which the server allocates at once).
    #[test]
    fn bodies_are_the_framing_plain_or_compressed() {
        let text: Vec<OutRecord> = (0..50)
            .map(|i| rec(i, format!("reading {i} ok\n").repeat(500).into_bytes()))
            .collect();
        let noise: Vec<OutRecord> = (0..3)
            .map(|i| {
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ i;
                let data = (0..100_000)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                rec(i, data)
            })
            .collect();
        for (recs, packed) in [(text, true), (noise, false)] {
            let mut want = BytesMut::new();
            for r in &recs {
                put_record(&mut want, r.ts, &r.content_type, &r.labels, &r.data);
            }
            put_end(&mut want, recs.len() as u64);
            let (body, zstd) = encode_body(&recs, Compression::Auto);
            assert_eq!(zstd, packed);
            let plain = if zstd {
                assert_eq!(
                    zstd::zstd_safe::get_frame_content_size(&body).unwrap(),
                    Some(want.len() as u64)
                );
                zstd::stream::decode_all(&body[..]).unwrap()
            } else {
                body.to_vec()
            };
            assert_eq!(plain, want.to_vec());
        }
    }
}
