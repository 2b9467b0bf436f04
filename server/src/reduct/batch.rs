//! ReductStore's batch protocols: v1 (`/api/v1/b/{bucket}/{entry}/batch`, one entry, a
//! header `x-reduct-time-<ts>: <size>,<content type>,<labels>` per record) and v2 (the
//! `/api/v1/io/{bucket}/{write|update|remove}` routes, several entries: `x-reduct-entries`,
//! `x-reduct-start-ts`, optional `x-reduct-labels`, and `x-reduct-<entry index>-<ts delta>`
//! per record, whose content type and labels are deltas from the entry's previous record).
//! Write bodies are the payloads back to back, in the order of the headers (v1: by
//! timestamp; v2: by entry index, then timestamp). Per-record failures are answered in
//! `x-reduct-error-<ts>` (v1) or `x-reduct-error-<index>-<delta>` (v2) headers as
//! `<status>,<message>`; the request itself answers 200.
//!
//! Bounds are the native batch's: `--max-body` (whole body), `--max-batch-record` (each
//! record), `--max-batch-records` (count), the body deadlines, and the body is held in the
//! server's memory budget (`--memory-budget`, waiting `--memory-wait`, then 503 `busy`).

use std::collections::BTreeMap;
use tsblob_proto::ErrorCode;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use percent_encoding::percent_decode_str;
use tsblob_storage::{BatchRecord, Store, WriteMeta};

use super::header::{parse_record_v2, EntryState};
use super::ok_empty;
use super::wire::{self, BatchHeaderV1, ERROR_PREFIX, TIME_PREFIX};
#[cfg(test)]
use super::wire::{encode_entry, label_delta_v2};
use crate::http::auth::Caller;
use crate::http::body::{content_length, BodyChunks};
use crate::http::errors::blocking;
use crate::http::records::Target;
use crate::http::AppError;

/// One record of a batch request.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    entry: usize,
    ts: u64,
    size: u64,
    content_type: Option<String>,
    /// Labels as sent: an empty value removes the label (updates) or is absent (writes).
    labels: BTreeMap<String, String>,
    /// Where its error is answered.
    error_header: String,
}

/// A parsed batch request: its entries, its records in body order, and the headers its
/// answer repeats (v2: the entries and the start, which clients read errors against).
#[derive(Debug)]
struct Parsed {
    entries: Vec<String>,
    items: Vec<Item>,
    echo: Vec<(&'static str, HeaderValue)>,
}

fn malformed(message: impl std::fmt::Display) -> AppError {
    AppError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::MalformedBatch,
        format!("{message}"),
    )
}

/// v1: `x-reduct-time-<ts>` headers, in timestamp order.
fn parse_v1(headers: &HeaderMap, entry: &str) -> Result<Parsed, AppError> {
    let mut items = Vec::new();
    for (name, value) in headers {
        let Some(ts) = name.as_str().strip_prefix(TIME_PREFIX) else {
            continue;
        };
        let ts: u64 = ts
            .parse()
            .map_err(|_| malformed(format!("{name}: {ts:?} is not a timestamp in µs")))?;
        let raw = value
            .to_str()
            .map_err(|_| malformed(format!("{name}: the value is not ASCII")))?;
        let h = BatchHeaderV1::parse(raw).map_err(|e| malformed(format!("{name}: {e}")))?;
        items.push(Item {
            entry: 0,
            ts,
            size: h.size,
            content_type: h.content_type,
            labels: h.labels.into_iter().collect(),
            error_header: format!("{ERROR_PREFIX}{ts}"),
        });
    }
    items.sort_by_key(|i| i.ts);
    Ok(Parsed {
        entries: vec![entry.to_string()],
        items,
        echo: Vec::new(),
    })
}

fn decode_name(s: &str) -> Result<String, AppError> {
    percent_decode_str(s.trim())
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| malformed(format!("{s:?} does not decode to UTF-8")))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, AppError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map_err(|_| malformed(format!("{name}: the value is not ASCII")))
        })
        .transpose()
}

/// The most entries a v2 batch may name (`x-reduct-entries`): a record header each can
/// carry no more than hyper's 100 headers anyway.
const MAX_V2_ENTRIES: usize = 1024;

/// v2: the records in body order (entry index, then timestamp).
fn parse_v2(headers: &HeaderMap) -> Result<Parsed, AppError> {
    let entries: Vec<String> = match header_str(headers, "x-reduct-entries")? {
        None => {
            return Err(malformed(
                "x-reduct-entries is missing: the batch's entries",
            ))
        }
        Some(s) if s.trim().is_empty() => Vec::new(),
        Some(s) if s.split(',').count() > MAX_V2_ENTRIES => {
            return Err(malformed(format!(
                "x-reduct-entries names more than {MAX_V2_ENTRIES} entries: send fewer in one batch"
            )))
        }
        Some(s) => s.split(',').map(decode_name).collect::<Result<_, _>>()?,
    };
    let start: u64 = header_str(headers, "x-reduct-start-ts")?
        .ok_or_else(|| malformed("x-reduct-start-ts is missing"))?
        .trim()
        .parse()
        .map_err(|_| malformed("x-reduct-start-ts is not a timestamp in µs"))?;
    let names: Option<Vec<String>> = header_str(headers, "x-reduct-labels")?
        .map(|s| {
            s.split(',')
                .map(|n| decode_name(n).map(|n| super::header::label_name(&n)))
                .collect::<Result<_, _>>()
        })
        .transpose()?;
    let mut raw: Vec<(usize, u64, &str)> = Vec::new();
    for (name, value) in headers {
        let Some(rest) = name.as_str().strip_prefix("x-reduct-") else {
            continue;
        };
        let Some((i, d)) = rest.rsplit_once('-') else {
            continue;
        };
        if i.is_empty()
            || d.is_empty()
            || !i.bytes().all(|b| b.is_ascii_digit())
            || !d.bytes().all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let (Ok(i), Ok(d)) = (i.parse::<usize>(), d.parse::<u64>()) else {
            return Err(malformed(format!(
                "{name}: the index or the delta is too large"
            )));
        };
        if i >= entries.len() {
            return Err(malformed(format!(
                "{name}: entry index {i} is not in x-reduct-entries"
            )));
        }
        let v = value
            .to_str()
            .map_err(|_| malformed(format!("{name}: the value is not ASCII")))?;
        raw.push((i, d, v));
    }
    raw.sort_by_key(|&(i, d, _)| (i, d));
    let mut previous: Vec<Option<EntryState>> = vec![None; entries.len()];
    let mut items = Vec::with_capacity(raw.len());
    for (i, d, v) in raw {
        let ts = start
            .checked_add(d)
            .ok_or_else(|| malformed(format!("x-reduct-{i}-{d}: the timestamp overflows")))?;
        let (size, (content_type, labels)) =
            parse_record_v2(v, previous[i].as_ref(), names.as_deref())
                .map_err(|e| malformed(format!("x-reduct-{i}-{d}: {e}")))?;
        // Checked here, not only once the body is in: each record inherits the labels of
        // the one before, so ~95 headers of a few bytes each repeated 390 KB of labels
        // (~37 MB a request, held until the body ended).
        let bytes: usize = labels.iter().map(|(k, v)| k.len() + v.len()).sum();
        if labels.len() > tsblob_storage::MAX_LABELS || bytes > tsblob_storage::MAX_LABELS_BYTES {
            return Err(malformed(format!(
                "x-reduct-{i}-{d}: the record's labels come to {} labels and {bytes} bytes, over the limit of {} labels and {} bytes of names and values a record",
                labels.len(),
                tsblob_storage::MAX_LABELS,
                tsblob_storage::MAX_LABELS_BYTES
            )));
        }
        previous[i] = Some((content_type.clone(), labels.clone()));
        items.push(Item {
            entry: i,
            ts,
            size,
            content_type,
            labels,
            error_header: format!("{ERROR_PREFIX}{i}-{d}"),
        });
    }
    let mut echo = Vec::new();
    for name in ["x-reduct-entries", "x-reduct-start-ts"] {
        if let Some(v) = headers.get(name) {
            echo.push((name, v.clone()));
        }
    }
    Ok(Parsed {
        entries,
        items,
        echo,
    })
}

/// The answer of a batch: 200, per-record errors in headers.
fn answer(parsed: &Parsed, errors: Vec<(String, AppError)>) -> Response {
    let mut resp = ok_empty();
    let headers = resp.headers_mut();
    for (name, v) in &parsed.echo {
        headers.insert(*name, v.clone());
    }
    for (name, e) in errors {
        if let Ok(name) = HeaderName::try_from(name) {
            headers.insert(name, wire::record_error(&e));
        }
    }
    resp
}

fn check_labels(labels: &tsblob_storage::Labels) -> Result<(), AppError> {
    for k in labels.keys() {
        tsblob_storage::validate_label_key(k)?;
    }
    crate::http::headers::check_label_bounds(labels)
}

/// Writes a parsed batch: bounds checked before the body is received, the body held in
/// the memory budget, each entry's records written with one engine call.
async fn write(
    state: &crate::http::AppState,
    caller: &Caller,
    bucket: &str,
    parsed: Parsed,
    req: Request,
) -> Result<Response, AppError> {
    // ReductStore 1.21's replication sends `Content-Encoding: zstd` when asked to (so does
    // tsblob's, to a `dst_api: reductstore` destination): decoded as it arrives, as the
    // native batch does (`http/inflate.rs`, its bounds); other codings are a 415.
    let gzip_body = req
        .headers()
        .get(axum::http::header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let zstd_body = !gzip_body && crate::http::headers::zstd_encoded(req.headers())?;
    caller.require_write(bucket)?;
    let limits = state.limits.clone();
    if parsed.items.len() as u64 > limits.max_batch_records {
        return Err(malformed(format!(
            "{} records in one batch: the server takes at most {} (--max-batch-records)",
            parsed.items.len(),
            limits.max_batch_records
        )));
    }
    let mut total = 0u64;
    for item in &parsed.items {
        if item.size > limits.max_batch_record {
            return Err(malformed(format!(
                "the record at {} has {} bytes: a batch record may have at most {} (--max-batch-record); write it alone",
                item.ts, item.size, limits.max_batch_record
            )));
        }
        total = total.saturating_add(item.size);
    }
    if total > limits.max_body {
        return Err(AppError::too_large(limits.max_body));
    }
    if let Some(n) = content_length(req.headers())?.filter(|_| !zstd_body && !gzip_body) {
        if n != total {
            return Err(malformed(format!(
                "Content-Length is {n} but the record headers add up to {total} bytes"
            )));
        }
    }
    // The room grows with the bytes that arrived, never for what the headers announce:
    // bug "announced ReductStore batches spent the budget" (hostile round of 2026-11-27:
    // connections announcing 4 MiB batches and sending a byte held the budget whole).
    let mut held = state.bodies.upload();
    let sizes: Vec<usize> = parsed
        .items
        .iter()
        .map(|i| usize::try_from(i.size).unwrap_or(usize::MAX))
        .collect();
    // Each record's bytes go straight into its own buffer (a body gathered whole and then
    // copied out per record held twice what the budget counted).
    let mut records = Payloads::new(&sizes, total);
    if gzip_body {
        // ReductStore's `compression: gzip`: the compressed body (at most the plain size
        // plus gzip's framing) is decoded on the blocking pool, at most `total` plain
        // bytes; both are covered.
        const GZIP_SLACK: u64 = 64 << 10;
        let mut chunks = BodyChunks::new(req.into_body(), total + GZIP_SLACK, &limits);
        let mut packed = Vec::new();
        while let Some(chunk) = chunks.next().await? {
            held.cover((packed.len() + chunk.len()) as u64, "a ReductStore batch")
                .await?;
            packed.extend_from_slice(&chunk);
        }
        held.cover(packed.len() as u64 + total, "a ReductStore gzip batch")
            .await?;
        records = crate::blocking::run(move || {
            use std::io::Read;
            let mut gz = flate2::read::GzDecoder::new(&packed[..]);
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = gz
                    .read(&mut buf)
                    .map_err(|e| malformed(format!("the gzip body does not decode: {e}")))?;
                if n == 0 {
                    break;
                }
                records.push(&buf[..n])?;
            }
            Ok::<_, AppError>(records)
        })
        .await?;
    } else if zstd_body {
        // At most `total` plain bytes are kept: more is refused, not held.
        let mut chunks =
            crate::http::inflate::PlainChunks::new(req.into_body(), true, &limits, &state.bodies)?;
        while let Some(piece) = chunks.next().await? {
            held.cover(
                records.received() + piece.len() as u64,
                "a ReductStore batch",
            )
            .await?;
            records.push(&piece)?;
        }
    } else {
        let mut chunks = BodyChunks::new(req.into_body(), total, &limits);
        while let Some(chunk) = chunks.next().await? {
            held.cover(
                records.received() + chunk.len() as u64,
                "a ReductStore batch",
            )
            .await?;
            records.push(&chunk)?;
        }
    }
    let mut payloads = records.finish()?.into_iter();
    let mut errors = Vec::new();
    let mut per_entry: Vec<Vec<(String, BatchRecord)>> = vec![Vec::new(); parsed.entries.len()];
    for item in &parsed.items {
        let data = payloads.next().unwrap_or_default();
        let labels: tsblob_storage::Labels = item
            .labels
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Err(e) = check_labels(&labels) {
            errors.push((item.error_header.clone(), e));
            continue;
        }
        per_entry[item.entry].push((
            item.error_header.clone(),
            BatchRecord {
                meta: WriteMeta {
                    ts: Some(item.ts),
                    content_type: item.content_type.clone(),
                    labels,
                },
                data,
            },
        ));
    }
    let (store, b, entries) = (
        state.store.clone(),
        bucket.to_string(),
        parsed.entries.clone(),
    );
    let results = blocking(move || {
        let mut out: Vec<(String, AppError)> = Vec::new();
        // A missing bucket fails each record, not the request (ReductStore answers 200 with
        // a 404 per record: reduct-py returns them from `write_batch`).
        if let Err(e @ tsblob_storage::Error::NotFound(tsblob_storage::NotFound::Bucket { .. })) =
            store.check_bucket(&b)
        {
            let e = AppError::from(e);
            out.extend(per_entry.into_iter().flatten().map(|(h, _)| (h, e.clone())));
            return Ok(out);
        }
        for (entry, records) in entries.iter().zip(per_entry) {
            if records.is_empty() {
                continue;
            }
            if let Some(parent) = super::attachments::meta_parent(entry) {
                out.extend(super::attachments::write(&store, &b, parent, records)?);
                continue;
            }
            if let Err(e) = tsblob_storage::validate_entry_name(entry) {
                let e = AppError::from(tsblob_storage::Error::from(e));
                out.extend(records.into_iter().map(|(h, _)| (h, e.clone())));
                continue;
            }
            let (names, records): (Vec<String>, Vec<BatchRecord>) = records.into_iter().unzip();
            match store.write_batch(&b, entry, &records) {
                Ok(results) => {
                    for (h, r) in names.into_iter().zip(results) {
                        if let Err(e) = r {
                            out.push((h, e.into()));
                        }
                    }
                }
                // The bucket removed since (or the disk full...): the whole request fails.
                Err(e) => return Err(AppError::from(e)),
            }
        }
        Ok(out)
    })
    .await?;
    drop(held);
    errors.extend(results);
    Ok(answer(&parsed, errors))
}

/// The payloads of a ReductStore batch's records, filled in order as the body's bytes
/// arrive (each in a buffer of its own, allocated as its first byte comes).
struct Payloads {
    sizes: Vec<usize>,
    done: Vec<Vec<u8>>,
    current: Vec<u8>,
    received: u64,
    total: u64,
}

impl Payloads {
    fn new(sizes: &[usize], total: u64) -> Payloads {
        Payloads {
            sizes: sizes.iter().rev().copied().collect(),
            done: Vec::with_capacity(sizes.len()),
            current: Vec::new(),
            received: 0,
            total,
        }
    }

    /// Bytes received so far.
    fn received(&self) -> u64 {
        self.received
    }

    /// Appends the body's next bytes; more than the record headers add up to is refused.
    fn push(&mut self, mut bytes: &[u8]) -> Result<(), AppError> {
        if self.received + bytes.len() as u64 > self.total {
            return Err(malformed(format!(
                "the body has more bytes than the record headers add up to ({}): nothing was stored",
                self.total
            )));
        }
        self.received += bytes.len() as u64;
        while !bytes.is_empty() {
            self.close_full();
            let Some(&size) = self.sizes.last() else {
                break;
            };
            if self.current.capacity() == 0 {
                self.current.reserve_exact(size);
            }
            let take = (size - self.current.len()).min(bytes.len());
            self.current.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        self.close_full();
        Ok(())
    }

    /// Moves on to the next record while the current one is whole (records of 0 bytes
    /// included).
    fn close_full(&mut self) {
        while self.sizes.last().is_some_and(|&s| self.current.len() == s) {
            self.sizes.pop();
            self.done.push(std::mem::take(&mut self.current));
        }
    }

    /// Each record's payload, in the order of the headers; a body that ended short fails.
    fn finish(mut self) -> Result<Vec<Vec<u8>>, AppError> {
        self.close_full();
        if self.received != self.total {
            return Err(malformed(format!(
                "the body has {} bytes but the record headers add up to {}: nothing was stored",
                self.received, self.total
            )));
        }
        Ok(self.done)
    }
}

/// Label updates of a parsed batch (no body).
async fn update(
    state: &crate::http::AppState,
    caller: &Caller,
    bucket: &str,
    parsed: Parsed,
    whole: Option<String>,
) -> Result<Response, AppError> {
    each_item(
        state,
        caller,
        bucket,
        parsed,
        whole,
        |store, b, entry, item| {
            if let Some(parent) = super::attachments::meta_parent(entry) {
                return super::attachments::update(store, b, parent, item.ts, &item.labels);
            }
            let (set, remove) = super::records::split_update(item.labels.into_iter().collect());
            check_labels(&set)?;
            store.update_labels(b, entry, item.ts, &set, &remove)?;
            Ok(())
        },
    )
    .await
}

/// Removals of a parsed batch (no body).
async fn remove(
    state: &crate::http::AppState,
    caller: &Caller,
    bucket: &str,
    parsed: Parsed,
    whole: Option<String>,
) -> Result<Response, AppError> {
    each_item(
        state,
        caller,
        bucket,
        parsed,
        whole,
        |store, b, entry, item| {
            if let Some(parent) = super::attachments::meta_parent(entry) {
                return super::attachments::remove(store, b, parent, item.ts, None);
            }
            Ok(store.remove_record(b, entry, item.ts)?)
        },
    )
    .await
}

/// Runs `apply` on each item of a parsed batch with no body (a label update or a
/// removal), on the blocking pool once the bucket is found, and answers with the items
/// that failed. `whole`: the entry of a v1 batch (`/b/{bucket}/{entry}/batch`), which must
/// exist, as ReductStore looks it up first (a 404 for the request); v2 batches name their
/// entries per record and a missing one fails its records.
async fn each_item<F>(
    state: &crate::http::AppState,
    caller: &Caller,
    bucket: &str,
    parsed: Parsed,
    whole: Option<String>,
    apply: F,
) -> Result<Response, AppError>
where
    F: Fn(&Store, &str, &str, Item) -> Result<(), AppError> + Send + 'static,
{
    caller.require_write(bucket)?;
    check_count(state, &parsed)?;
    let (store, b, entries, items) = (
        state.store.clone(),
        bucket.to_string(),
        parsed.entries.clone(),
        parsed.items.clone(),
    );
    let errors = blocking(move || {
        store.check_bucket(&b)?;
        if let Some(entry) = whole.filter(|e| super::attachments::meta_parent(e).is_none()) {
            store.check_entry(&b, &entry)?;
        }
        let mut out = Vec::new();
        for mut item in items {
            let header = std::mem::take(&mut item.error_header);
            let entry = &entries[item.entry];
            if let Err(e) = apply(&store, &b, entry, item) {
                out.push((header, e));
            }
        }
        Ok(out)
    })
    .await?;
    Ok(answer(&parsed, errors))
}

fn check_count(state: &crate::http::AppState, parsed: &Parsed) -> Result<(), AppError> {
    let max = state.limits.max_batch_records;
    if parsed.items.len() as u64 > max {
        return Err(malformed(format!(
            "{} records in one batch: the server takes at most {max} (--max-batch-records)",
            parsed.items.len()
        )));
    }
    Ok(())
}

/// `POST /api/v1/io/{bucket}/write`.
pub async fn write_v2(
    state: &crate::http::AppState,
    caller: &Caller,
    bucket: &str,
    req: Request,
) -> Result<Response, AppError> {
    let parsed = parse_v2(req.headers())?;
    write(state, caller, bucket, parsed, req).await
}

/// `PATCH /api/v1/io/{bucket}/update`.
pub async fn update_v2(
    state: &crate::http::AppState,
    caller: &Caller,
    bucket: &str,
    req: Request,
) -> Result<Response, AppError> {
    update(state, caller, bucket, parse_v2(req.headers())?, None).await
}

/// `DELETE /api/v1/io/{bucket}/remove`.
pub async fn remove_v2(
    state: &crate::http::AppState,
    caller: &Caller,
    bucket: &str,
    req: Request,
) -> Result<Response, AppError> {
    remove(state, caller, bucket, parse_v2(req.headers())?, None).await
}

/// `POST /api/v1/b/{bucket}/{entry}/batch`.
pub async fn write_v1(t: Target, req: Request) -> Result<Response, AppError> {
    let parsed = parse_v1(req.headers(), &t.entry)?;
    write(&t.state, &t.caller, &t.bucket, parsed, req).await
}

/// `PATCH /api/v1/b/{bucket}/{entry}/batch`.
pub async fn update_v1(t: Target, req: Request) -> Result<Response, AppError> {
    let parsed = parse_v1(req.headers(), &t.entry)?;
    update(&t.state, &t.caller, &t.bucket, parsed, Some(t.entry)).await
}

/// `DELETE /api/v1/b/{bucket}/{entry}/batch`.
pub async fn remove_v1(t: Target, req: Request) -> Result<Response, AppError> {
    let parsed = parse_v1(req.headers(), &t.entry)?;
    remove(&t.state, &t.caller, &t.bucket, parsed, Some(t.entry)).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tsblob_storage::RecordMeta;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                HeaderName::try_from(*k).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    /// The payloads split across any chunking of the body, empty records included; more or
    /// fewer bytes than the headers add up to are refused.
    #[test]
    fn payloads_fill_each_record_whatever_the_chunks() {
        let sizes = [3usize, 0, 5, 1, 0];
        let body: Vec<u8> = (0u8..9).collect();
        let want = vec![vec![0, 1, 2], vec![], vec![3, 4, 5, 6, 7], vec![8], vec![]];
        for step in 1..=body.len() {
            let mut p = Payloads::new(&sizes, 9);
            for chunk in body.chunks(step) {
                p.push(chunk).unwrap();
            }
            assert_eq!(p.finish().unwrap(), want, "chunks of {step}");
        }
        let mut p = Payloads::new(&sizes, 9);
        p.push(&body[..4]).unwrap();
        assert!(p.finish().unwrap_err().status.is_client_error());
        let mut p = Payloads::new(&sizes, 9);
        assert!(p.push(&[0u8; 10]).is_err());
        assert_eq!(
            Payloads::new(&[0, 0], 0).finish().unwrap(),
            vec![Vec::<u8>::new(); 2]
        );
    }

    /// Bug "inherited label blow-up": every v2 record header inherits the labels of the
    /// one before, so a first record of 100 labels of ~3.9 KB and ~95 headers of a few
    /// bytes each made ~37 MB of label maps per request, held until the body ended (the
    /// label bounds were checked once it had). A record over the bounds now fails the
    /// headers' parse, as does an `x-reduct-entries` of more than 1,024 names.
    #[test]
    fn v2_records_inheriting_huge_labels_were_copied_before_any_check() {
        let big = "v".repeat(3900);
        let names: Vec<String> = (0..100).map(|i| format!("l{i}")).collect();
        let first: String = std::iter::once("1,text/plain".to_string())
            .chain((0..100).map(|i| format!("{i}={big}")))
            .collect::<Vec<_>>()
            .join(",");
        let labels = names.join(",");
        let h = headers(&[
            ("x-reduct-entries", "e"),
            ("x-reduct-start-ts", "1"),
            ("x-reduct-labels", labels.as_str()),
            ("x-reduct-0-0", first.as_str()),
            ("x-reduct-0-1", "1"),
        ]);
        let e = parse_v2(&h).err().unwrap();
        assert_eq!(
            (e.status.as_u16(), e.code),
            (422, ErrorCode::MalformedBatch)
        );
        assert!(
            e.message.contains("x-reduct-0-0") && e.message.contains("65536"),
            "{}",
            e.message
        );
        let many = vec!["e"; 1025].join(",");
        let h = headers(&[
            ("x-reduct-entries", many.as_str()),
            ("x-reduct-start-ts", "1"),
        ]);
        let e = parse_v2(&h).err().unwrap();
        assert!(
            e.message.contains("more than 1024 entries"),
            "{}",
            e.message
        );
    }

    #[test]
    fn v2_headers_apply_deltas_per_entry() {
        // As reduct-py's make_headers_v2 builds them: entry 1 is `a/b` (encoded), labels by
        // index, the second record of entry 0 only says what changed.
        let h = headers(&[
            ("x-reduct-entries", "e0,a%2Fb"),
            ("x-reduct-start-ts", "1000"),
            ("x-reduct-labels", "robot,score"),
            ("x-reduct-0-0", "3,text/plain,0=r1,1=\"0,5\""),
            ("x-reduct-0-10", "2,,1="),
            ("x-reduct-1-5", "1,application/json"),
            ("x-reduct-0-20", "4"),
        ]);
        let p = parse_v2(&h).unwrap();
        assert_eq!(p.entries, vec!["e0".to_string(), "a/b".to_string()]);
        type Row<'a> = (usize, u64, u64, Option<&'a str>, Vec<(&'a str, &'a str)>);
        let got: Vec<Row> = p
            .items
            .iter()
            .map(|i| {
                (
                    i.entry,
                    i.ts,
                    i.size,
                    i.content_type.as_deref(),
                    i.labels
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    0,
                    1000,
                    3,
                    Some("text/plain"),
                    vec![("robot", "r1"), ("score", "0,5")]
                ),
                (
                    0,
                    1010,
                    2,
                    Some("text/plain"),
                    vec![("robot", "r1"), ("score", "")]
                ),
                (
                    0,
                    1020,
                    4,
                    Some("text/plain"),
                    vec![("robot", "r1"), ("score", "")]
                ),
                (1, 1005, 1, Some("application/json"), vec![]),
            ]
        );
        assert_eq!(p.items[3].error_header, "x-reduct-error-1-5");
    }

    #[test]
    fn v2_refuses_what_does_not_parse() {
        for bad in [
            vec![("x-reduct-start-ts", "0")],
            vec![("x-reduct-entries", "e"), ("x-reduct-start-ts", "x")],
            vec![
                ("x-reduct-entries", "e"),
                ("x-reduct-start-ts", "0"),
                ("x-reduct-1-0", "1,a"),
            ],
            vec![
                ("x-reduct-entries", "e"),
                ("x-reduct-start-ts", "0"),
                ("x-reduct-0-0", "1"),
            ],
            vec![
                ("x-reduct-entries", "e"),
                ("x-reduct-start-ts", "0"),
                ("x-reduct-0-0", "1,a,k"),
            ],
            vec![
                ("x-reduct-entries", "e"),
                ("x-reduct-start-ts", "0"),
                ("x-reduct-labels", "a"),
                ("x-reduct-0-0", "1,a,7=x"),
            ],
        ] {
            assert!(parse_v2(&headers(&bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn v2_answer_headers_round_trip_through_the_parser() {
        let m = |ts, labels: &[(&str, &str)]| RecordMeta {
            ts,
            size: 1,
            content_type: "text/plain".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let a = m(1, &[("x", "1"), ("y", "a,b")]);
        let b = m(2, &[("x", "2")]);
        assert_eq!(label_delta_v2(&a, None), "1,text/plain,x=1,y=\"a,b\"");
        assert_eq!(label_delta_v2(&b, Some(&a)), "1,text/plain,x=2,y=");
        assert_eq!(label_delta_v2(&b, Some(&b)), "1,text/plain");
        assert_eq!(encode_entry("a/b c"), "a%2Fb%20c");
        assert_eq!(decode_name("a%2Fb%20c").unwrap(), "a/b c");
    }
}
