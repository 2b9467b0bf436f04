//! Sending records to a server's batch endpoint with `if_exists=compare` (a record already
//! stored with the same payload is 200, a different one 409 `conflict`), zstd-compressed
//! when that saves bytes. Shared by replication senders and `tsblob cp`.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tsblob_storage::Labels;

use crate::http::batch::BatchResult;
use tsblob_proto::framing::{put_end, put_record, MEDIA_TYPE};
use tsblob_proto::tls::error_chain;

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
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.url.trim_end_matches('/'), self.bucket)
    }
}

/// A body's first this many bytes are compressed first: when they do not shrink, the
/// rest is not tried (images and video do not; text and sensor data do).
const ZSTD_SAMPLE: usize = 64 << 10;

/// zstd (level 1) when it saves at least an eighth of the bytes (judged on a sample
/// first, so incompressible payloads cost one small attempt per body).
pub async fn compress(plain: Bytes) -> (Bytes, bool) {
    if plain.len() < ZSTD_MIN {
        return (plain, false);
    }
    let copy = plain.clone();
    let packed = tokio::task::spawn_blocking(move || {
        let sample = &copy[..copy.len().min(ZSTD_SAMPLE)];
        let s = zstd::bulk::compress(sample, 1).ok()?;
        if s.len() >= sample.len() - sample.len() / 8 {
            return None;
        }
        if sample.len() == copy.len() {
            return Some(s);
        }
        zstd::bulk::compress(&copy, 1).ok()
    })
    .await;
    match packed {
        Ok(Some(p)) if p.len() < plain.len() - plain.len() / 8 => (Bytes::from(p), true),
        _ => (plain, false),
    }
}

/// Posts `recs` (all of entry `entry`) as one batch. `Ok` carries the server's per-record
/// results (in order; fewer than `recs` if the body was refused part way); `Err` a
/// message for an attempt that failed as a whole (transport, or an error answer).
pub async fn post_batch(
    http: &reqwest::Client,
    dst: &Destination,
    entry: &str,
    recs: &[OutRecord],
    timeout: Duration,
) -> Result<BatchResult, String> {
    // Sized once: growing an 8 MiB body by doubling copies it again and again.
    let size: usize = recs
        .iter()
        .map(|r| {
            r.data.len()
                + r.content_type.len()
                + r.labels
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 8)
                    .sum::<usize>()
                + 48
        })
        .sum();
    let mut body = BytesMut::with_capacity(size + 32);
    for r in recs {
        put_record(&mut body, r.ts, &r.content_type, &r.labels, &r.data);
    }
    put_end(&mut body, recs.len() as u64);
    let (payload, zstd) = compress(body.freeze()).await;
    let timeout = timeout + Duration::from_secs_f64(payload.len() as f64 / MIN_RATE);
    let url = format!(
        "{}/api/v1/b/{}/{}/batch?if_exists=compare",
        dst.url.trim_end_matches('/'),
        crate::cli::client::seg(&dst.bucket),
        crate::cli::client::seg(entry)
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
            "sending {} record(s) to {dst}/{entry} failed: {}",
            recs.len(),
            error_chain(&e)
        )
    })?;
    let status = resp.status();
    let text = resp.bytes().await.map_err(|e| {
        format!(
            "reading the answer of {dst}/{entry} failed: {}",
            error_chain(&e)
        )
    })?;
    match serde_json::from_slice::<BatchResult>(&text) {
        Ok(a) if status.is_success() || !a.results.is_empty() => Ok(a),
        _ => {
            let why = serde_json::from_slice::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| {
                    v.pointer("/error/message")
                        .and_then(|m| m.as_str())
                        .map(String::from)
                })
                .unwrap_or_else(|| {
                    String::from_utf8_lossy(&text[..text.len().min(300)]).into_owned()
                });
            Err(format!("{dst}/{entry} answered {status}: {why}"))
        }
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
    /// Refused for good (a 4xx other than those below): do not retry.
    Refused(String),
    /// Failed as a whole (transport, 401/403/404, 429, 5xx): try again later.
    Retry(String),
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
    let client =
        tsblob_proto::client::Client::with_http(http.clone(), &dst.url, dst.token.as_deref());
    let ct = if meta.content_type.is_empty() {
        "application/octet-stream"
    } else {
        meta.content_type.as_str()
    };
    let req = client
        .write_request(&dst.bucket, entry, Some(meta.ts), ct, &meta.labels)
        .query(&[("if_exists", "compare")])
        .header(reqwest::header::CONTENT_LENGTH, meta.size)
        .timeout(timeout + Duration::from_secs_f64(meta.size as f64 / MIN_RATE))
        .body(body);
    let what = format!("record {} ({} bytes) to {dst}/{entry}", meta.ts, meta.size);
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return Single::Retry(format!("sending {what} failed: {}", error_chain(&e))),
    };
    let status = resp.status().as_u16();
    let text = match resp.bytes().await {
        Ok(t) => t,
        Err(e) => {
            return Single::Retry(format!(
                "reading the answer for {what} failed: {}",
                error_chain(&e)
            ))
        }
    };
    let why = || {
        serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| {
                v.pointer("/error/message")
                    .and_then(|m| m.as_str())
                    .map(String::from)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&text[..text.len().min(300)]).into_owned())
    };
    match status {
        201 => Single::Stored,
        200 => Single::Existing,
        409 => Single::Conflict(why()),
        401 | 403 | 404 | 408 | 429 | 500.. => Single::Retry(format!(
            "{dst}/{entry} answered {status} for {what}: {}",
            why()
        )),
        _ => Single::Refused(format!(
            "{dst}/{entry} refused {what} ({status}): {}",
            why()
        )),
    }
}
