//! Batch writes: record frames parsed as the body streams in, written in chunks of a few
//! MB with one engine call each, while the next chunk is being parsed.
//!
//! A body that breaks the framing is answered 400 `malformed_batch` together with the
//! results of the chunks already written: records of the chunk being parsed when the fault
//! was found are not written, so the results list exactly what was kept.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tsblob_proto::ErrorCode;
use tsblob_storage::{GroupResult, Spool, Store, WriteMeta, DEFAULT_CONTENT_TYPE};

use super::batch_chunk::{Chunk, Parsed};
use super::batch_writer::{Stopped, Written};
use super::body::content_length;
use super::budget::{Held, MemoryBudget};
use super::errors::{AppError, ErrorBody};
use super::if_exists::{conflict, same_payload, settle_write, IfExists};
use super::inflate::PlainChunks;
use super::records::Target;
use super::spool::SpoolSink;
pub use crate::answers::{BatchResult, RecordResult};
use tsblob_proto::framing::{ChunkDecoder, Event, RawEvent, RawHead, TS_NOW};

/// A chunk is written when the memory it holds reaches this many bytes (payloads, content
/// types, labels and the per-record overhead of [`held_bytes`]) ...
const CHUNK_BYTES: usize = 1 << 20;
/// ... or this many records.
const CHUNK_RECORDS: usize = 4096;
/// A record at least this large is spooled as its payload arrives (as a single-record
/// body of that size is) instead of held in memory until it is complete: holding 10 MiB
/// payloads kept the receive buffers alive and made the server fault in fresh pages for
/// new ones (`clear_page` in the profile of docs/benchmarks/large-records-2026-11-23.md).
const SPOOL_FROM: u64 = super::budget::MemoryBudget::LARGEST;
/// What a record costs in memory besides its payload, content type and label bytes: the
/// record and its result, ...
const RECORD_OVERHEAD: usize = 160;
/// ... and each label (two `String`s in a map node).
const LABEL_OVERHEAD: usize = 96;

/// The memory a parsed record holds while it waits in a chunk, counting every byte the
/// client sent for it (not only its payload), as if its content type and labels were its
/// own (records that share them share one copy, see [`Metas`]: an over-estimate that also
/// covers that copy): a batch of records with 1 MiB of labels and no payload must fill
/// chunks as fast as one with 1 MiB payloads.
fn held_bytes(head: &RawHead) -> usize {
    let count = head.label_count();
    // (each key and value is sent after its u16 length)
    let text = head.label_bytes().len().saturating_sub(4 * count);
    RECORD_OVERHEAD + head.content_type_bytes().len() + count * LABEL_OVERHEAD + text
}

/// At most this many bytes of encoded content types and labels are remembered by [`Metas`]
/// per batch (past it, a new set is decoded for each record that sends it).
const METAS_BYTES: usize = 64 << 10;

/// The content types and labels of a batch, decoded once per distinct encoding: records
/// that send the same bytes for them share one `WriteMeta`, so no string or map is built
/// per record and the engine checks each set and builds its index attrs once
/// (`Store::write_group_at`). Decoding each record's labels into its own map was the
/// largest piece of the handler's time (docs/benchmarks/batch-1k-2026-11-26.md).
///
/// Before the hash map, two guesses compared byte for byte: the previous record's set,
/// and the set that followed it last time (records that repeat one set, or take turns
/// through a few in order, are found without hashing their labels:
/// docs/benchmarks/batch-2-2026-11-26.md).
///
/// A connection keeps its `Metas` from one batch to the next ([`LabelMemo`]): a client
/// sends the same few sets batch after batch, and each batch decoded them again (ten
/// decodes per batch of the bench's 1 KiB phase: docs/benchmarks/batch-3-2026-11-26.md).
#[derive(Default)]
struct Metas {
    /// The sets met, in order of first sight.
    sets: Vec<MetaSet>,
    /// Index in `sets` by the encoded content type and labels.
    by_bytes: HashMap<Box<[u8]>, usize>,
    /// The previous record's set (in `sets`), if remembered.
    last: Option<usize>,
    bytes: usize,
    /// The memory the remembered sets hold ([`set_cost`]): what a kept memo is bounded by.
    cost: usize,
}

/// What a remembered set holds in memory: its encoding twice (the list and the map's key)
/// and its text once more decoded, [`LABEL_OVERHEAD`] per label, and the rest of a decoded
/// `WriteMeta` (its `Arc`, a B-tree leaf of room for 11 labels, ~550 bytes even for one)
/// and the set's own records.
fn set_cost(key: &[u8], labels: usize) -> usize {
    const SET_OVERHEAD: usize = 768;
    3 * key.len() + labels * LABEL_OVERHEAD + SET_OVERHEAD
}

/// The label sets a connection's batches sent, kept between its requests (`serve.rs` gives
/// each request of a connection a clone). A batch takes them for its time (a concurrent
/// batch of the same connection, which HTTP/1.1 does not have, would start afresh) and
/// puts them back when it ends if they hold at most `--batch-label-memo` bytes and the
/// memory budget (`budget.rs`) stays at most half used with them in it (a kept memo is a
/// saving, never why a request waits for room); otherwise they are dropped, and the next
/// batch starts with none. A caller sending a new set per record costs at most that per
/// connection between its batches (within one batch, at most [`METAS_BYTES`] of encodings).
#[derive(Clone, Default)]
pub struct LabelMemo(Arc<parking_lot::Mutex<Kept>>);

/// What a connection keeps between its batches.
#[derive(Default)]
struct Kept {
    /// Label sets, with their share of the memory budget.
    metas: Option<(Metas, Held)>,
    /// The records of the previous batch (at most a chunk's): the first chunk of the next
    /// one is sized for them, where it grew from empty record by record.
    records: usize,
}

impl LabelMemo {
    /// The memory (bytes) the kept sets hold, 0 when none are kept.
    pub fn kept_bytes(&self) -> u64 {
        self.0
            .lock()
            .metas
            .as_ref()
            .map_or(0, |(m, _)| m.cost as u64)
    }

    /// The sets kept by the connection's previous batch (none if there are none), and a
    /// first chunk sized like its records.
    fn take(memo: Option<&LabelMemo>) -> (Metas, Chunk) {
        let Some(memo) = memo else {
            return (Metas::default(), Chunk::default());
        };
        let mut kept = memo.0.lock();
        let metas = kept.metas.take().map_or_else(Metas::default, |(m, _)| m);
        (metas, Chunk::with_capacity(kept.records, kept.records))
    }

    /// Keeps `metas` for the connection's next batch if they fit in `limit` bytes and in
    /// the memory budget (drops them otherwise), and how many `records` this one had.
    fn keep(
        memo: Option<&LabelMemo>,
        metas: Metas,
        records: u64,
        limit: u64,
        budget: &MemoryBudget,
    ) {
        let Some(memo) = memo else {
            return;
        };
        let mut kept = memo.0.lock();
        kept.records = usize::try_from(records).map_or(CHUNK_RECORDS, |r| r.min(CHUNK_RECORDS));
        if metas.sets.is_empty() || metas.cost as u64 > limit {
            return;
        }
        let cost = metas.cost as u64;
        if budget.used().saturating_add(cost) > budget.limit() / 2 {
            return;
        }
        let mut held = budget.upload();
        if held.try_resize(cost) {
            kept.metas = Some((metas, held));
        }
    }
}

struct MetaSet {
    /// The encoded content type and labels, and the content type's length (two encodings
    /// with equal bytes and different splits are not the same).
    key: Box<[u8]>,
    ct_len: usize,
    meta: Arc<WriteMeta>,
    /// The set of the record that followed one of this set last time.
    next: Option<usize>,
}

impl Metas {
    /// The set at `at` if it is the one `head` sends.
    fn guess(&self, at: Option<usize>, key: &[u8], ct_len: usize) -> Option<usize> {
        let at = at?;
        let set = self.sets.get(at)?;
        (set.ct_len == ct_len && *set.key == *key).then_some(at)
    }

    /// The content type and labels of `head` (its `ts` left `None`: each record keeps its own).
    fn of(&mut self, head: &RawHead) -> Arc<WriteMeta> {
        let key = head.meta_bytes();
        let ct_len = head.content_type_bytes().len();
        let predicted = self
            .last
            .and_then(|l| self.sets.get(l))
            .and_then(|s| s.next);
        let found = self
            .guess(self.last, key, ct_len)
            .or_else(|| self.guess(predicted, key, ct_len))
            .or_else(|| {
                self.by_bytes
                    .get(key)
                    .copied()
                    .filter(|&at| self.sets.get(at).is_some_and(|s| s.ct_len == ct_len))
            });
        let (at, meta) = match found.and_then(|at| Some((at, self.sets.get(at)?.meta.clone()))) {
            Some(known) => known,
            None => {
                let ct = head.content_type();
                let meta = Arc::new(WriteMeta {
                    ts: None,
                    content_type: (ct != DEFAULT_CONTENT_TYPE).then_some(ct),
                    labels: head.labels(),
                });
                if self.bytes + key.len() > METAS_BYTES {
                    // Not remembered: decoded again for each record that sends it.
                    self.last = None;
                    return meta;
                }
                self.bytes += key.len();
                self.cost += set_cost(key, head.label_count());
                let at = self.sets.len();
                self.sets.push(MetaSet {
                    key: key.into(),
                    ct_len,
                    meta: meta.clone(),
                    next: None,
                });
                self.by_bytes.insert(key.into(), at);
                (at, meta)
            }
        };
        if let Some(prev) = self.last.and_then(|l| self.sets.get_mut(l)) {
            prev.next = Some(at);
        }
        self.last = Some(at);
        meta
    }
}

/// What one record's result takes in the answer, about (`{"ts":` and 16 digits, the
/// status, the braces and the comma).
const RESULT_BYTES: usize = 40;
/// Answers of more results than this are written on the blocking pool.
const LONG_ANSWER: usize = 4096;

/// The batch answer's JSON: the bytes `serde_json` writes for `a` (pinned by
/// `answer_body_is_what_serde_json_writes`), into one buffer sized for its results, with
/// each number written by `itoa`. Serialized through serde, each record's result was
/// a map of two or three entries with a `fmt` call per number, in a buffer that grew by
/// doubling: 3 % of the server's time in a batch of 1 KiB records
/// (docs/benchmarks/batch-3-2026-11-26.md). An error's details, rare, still go through
/// serde (string escaping).
fn answer_body(a: &BatchResult) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + a.results.len() * RESULT_BYTES);
    let mut n = itoa::Buffer::new();
    out.push(b'{');
    if let Some(e) = &a.error {
        out.extend_from_slice(b"\"error\":");
        json_into(&mut out, e);
        out.push(b',');
    }
    out.extend_from_slice(b"\"written\":");
    out.extend_from_slice(n.format(a.written).as_bytes());
    if a.existing != 0 {
        out.extend_from_slice(b",\"existing\":");
        out.extend_from_slice(n.format(a.existing).as_bytes());
    }
    out.extend_from_slice(b",\"failed\":");
    out.extend_from_slice(n.format(a.failed).as_bytes());
    out.extend_from_slice(b",\"results\":[");
    for (i, r) in a.results.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"ts\":");
        match r.ts {
            Some(ts) => out.extend_from_slice(n.format(ts).as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"status\":");
        out.extend_from_slice(n.format(r.status).as_bytes());
        if let Some(e) = &r.error {
            out.extend_from_slice(b",\"error\":");
            json_into(&mut out, e);
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}

/// `value` as JSON at the end of `out` (a struct of strings and numbers, which serde_json
/// always writes; `null` if it ever could not, never half a value).
fn json_into<T: Serialize>(out: &mut Vec<u8>, value: &T) {
    match serde_json::to_vec(value) {
        Ok(v) => out.extend_from_slice(&v),
        Err(_) => out.extend_from_slice(b"null"),
    }
}

/// A 400 before any record was handled, in the batch answer's shape (as documented for
/// every 400 of this route).
fn refused(e: AppError) -> Response {
    let answer = BatchResult {
        error: Some(e.body().error),
        written: 0,
        existing: 0,
        failed: 0,
        results: Vec::new(),
    };
    answer_response(e.status, &answer)
}

/// A batch answer with its status.
fn answer_response(status: StatusCode, answer: &BatchResult) -> Response {
    super::results::held_json(status, answer_body(answer), None)
}

type ChunkOutcome = Vec<RecordResult>;

fn malformed(message: impl std::fmt::Display) -> AppError {
    AppError::new(
        StatusCode::BAD_REQUEST,
        ErrorCode::MalformedBatch,
        format!("the batch body is malformed: {message}; see the framing in docs/api.md"),
    )
}

/// A record's result for an error answered in it ([`AppError::answer`]: logged).
fn answered(e: &AppError) -> RecordResult {
    RecordResult {
        ts: None,
        status: e.status.as_u16(),
        error: Some(e.answer()),
    }
}

/// A chunk being written, or its answer already known.
enum Flight {
    /// On the batch writer thread (`batch_writer.rs`).
    Chunk(oneshot::Receiver<Written>),
    /// A spooled record, on the blocking pool.
    Spooled(JoinHandle<ChunkOutcome>),
    Ready(ChunkOutcome),
}

/// Every record of `chunk` answered with the chunk's one error.
fn all_failed(chunk: &Chunk, a: &AppError) -> ChunkOutcome {
    chunk
        .records
        .iter()
        .map(|r| RecordResult {
            ts: r.ts,
            ..answered(a)
        })
        .collect()
}

/// Hands one chunk to the batch writer thread. `held`, the chunk's share of the memory
/// budget, is given back once it is written.
fn submit(t: &Target, chunk: Chunk, held: Held) -> Flight {
    match t
        .state
        .batch_writer
        .write(t.bucket.clone(), t.entry.clone(), chunk, held)
    {
        Ok(rx) => Flight::Chunk(rx),
        Err(Stopped(chunk)) => {
            let a = AppError::internal(
                "the batch writer thread has stopped; nothing of this chunk was stored: restart the server",
            );
            Flight::Ready(all_failed(&chunk, &a))
        }
    }
}

/// Whether an outcome holds a taken timestamp that `if_exists=compare` must look at
/// (a blocking read of the stored record).
fn needs_compare(outcome: &GroupResult, if_exists: IfExists) -> bool {
    if_exists == IfExists::Compare
        && outcome.as_ref().is_ok_and(|rs| {
            rs.iter().any(|r| {
                matches!(
                    r,
                    Err(tsblob_storage::Error::Write(
                        tsblob_storage::WriteError::Conflict { .. }
                    ))
                )
            })
        })
}

/// One result per record of a written chunk. With `if_exists=compare`, a record whose
/// timestamp is taken is compared with the stored one (blocking: called on the pool then).
fn answers(
    t: &(Store, String, String),
    chunk: &Chunk,
    outcome: GroupResult,
    if_exists: IfExists,
) -> ChunkOutcome {
    let (store, bucket, entry) = t;
    match outcome {
        Ok(results) => results
            .into_iter()
            .zip(&chunk.records)
            .map(|(r, rec)| match r {
                Ok(ts) => RecordResult {
                    ts: Some(ts),
                    status: 201,
                    error: None,
                },
                Err(tsblob_storage::Error::Write(tsblob_storage::WriteError::Conflict {
                    ts: at,
                    ..
                })) if if_exists == IfExists::Compare => {
                    let crc = chunk
                        .pieces_of(rec)
                        .iter()
                        .fold(0, |c, p| tsblob_storage::crc::crc32c_append(c, p));
                    if same_payload(store, bucket, entry, at, crc) {
                        RecordResult {
                            ts: Some(at),
                            status: 200,
                            error: None,
                        }
                    } else {
                        let c = conflict(bucket, entry, at);
                        RecordResult {
                            ts: Some(at),
                            ..answered(&c)
                        }
                    }
                }
                Err(e) => {
                    let a = AppError::from(e);
                    RecordResult {
                        ts: rec.ts,
                        ..answered(&a)
                    }
                }
            })
            .collect(),
        Err(e) => {
            // The whole chunk failed: every record in it says why.
            all_failed(chunk, &AppError::from(e))
        }
    }
}

fn failed_to_run(e: impl std::fmt::Display) -> RecordResult {
    let a = AppError::internal(format!(
        "a chunk of the batch failed to run ({e}); its records were not confirmed"
    ));
    answered(&a)
}

async fn settle(
    t: &Target,
    flight: Option<Flight>,
    if_exists: IfExists,
    results: &mut Vec<RecordResult>,
) {
    match flight {
        None => {}
        Some(Flight::Ready(mut r)) => results.append(&mut r),
        Some(Flight::Spooled(h)) => match h.await {
            Ok(mut r) => results.append(&mut r),
            Err(e) => results.push(failed_to_run(e)),
        },
        Some(Flight::Chunk(rx)) => match rx.await {
            Ok((chunk, outcome)) => {
                let names = (t.state.store.clone(), t.bucket.clone(), t.entry.clone());
                if needs_compare(&outcome, if_exists) {
                    let compared = tokio::task::spawn_blocking(move || {
                        answers(&names, &chunk, outcome, if_exists)
                    })
                    .await;
                    match compared {
                        Ok(mut r) => results.append(&mut r),
                        Err(e) => results.push(failed_to_run(e)),
                    }
                } else {
                    results.append(&mut answers(&names, &chunk, outcome, if_exists));
                }
            }
            Err(e) => results.push(failed_to_run(e)),
        },
    }
}

/// The record being assembled from its frame head and payload pieces.
struct Pending {
    /// The timestamp it asks for (`None`: now).
    ts: Option<u64>,
    payload_len: u64,
    /// Its content type and labels, shared with the batch's other records that have them.
    meta: Arc<WriteMeta>,
    /// Where its payload pieces start in the chunk's list ([`Chunk::pieces`]: slices of
    /// the receive buffer as the decoder cut them, no copy; the engine appends pieces of
    /// 16 KiB and more from them directly).
    first: usize,
    len: u64,
    /// A large record's payload goes to a spool instead of `data` (see [`SPOOL_FROM`]).
    spooled: Option<Spooling>,
}

/// A large record of a batch being received into a spool, or why it could not be.
enum Spooling {
    Sink(SpoolSink),
    Failed(AppError),
}

impl Spooling {
    /// `len`: the record's payload length, from its head.
    async fn start(t: &Target, meta: &WriteMeta, len: u64) -> Spooling {
        match SpoolSink::new(&t.state.store, &t.bucket, &t.entry, meta, Some(len)).await {
            Ok(sink) => Spooling::Sink(sink),
            Err(e) => Spooling::Failed(e),
        }
    }

    async fn push(&mut self, d: Bytes) {
        let Spooling::Sink(sink) = self else {
            return; // failed: the rest of the payload is read and dropped
        };
        if let Err(e) = sink.push(d).await {
            if let Spooling::Sink(sink) = std::mem::replace(self, Spooling::Failed(e)) {
                sink.abandon().await;
            }
        }
    }
}

/// Writes a spooled record of a batch on the blocking pool; the handle yields its result.
fn spawn_spooled(
    t: &Target,
    meta: WriteMeta,
    spooled: Result<(Spool, u32), AppError>,
    if_exists: IfExists,
) -> Flight {
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket.clone(), t.entry.clone());
    Flight::Spooled(tokio::task::spawn_blocking(move || {
        let asked = meta.ts;
        let settled = spooled.and_then(|(spool, crc)| {
            let written = store.write_spooled(&bucket, &entry, &meta, spool);
            settle_write(&store, &bucket, &entry, written, if_exists, || crc)
        });
        vec![match settled {
            Ok((ts, status)) => RecordResult {
                ts: Some(ts),
                status: status.as_u16(),
                error: None,
            },
            Err(a) => RecordResult {
                ts: asked,
                ..answered(&a)
            },
        }]
    }))
}

/// A record's whole metadata, its own (for a spooled record, written alone).
fn own_meta(ts: Option<u64>, meta: &WriteMeta) -> WriteMeta {
    WriteMeta {
        ts,
        content_type: meta.content_type.clone(),
        labels: meta.labels.clone(),
    }
}

impl Pending {
    /// The record, complete: its pieces are the chunk's from `first` on.
    fn into_record(self, pieces: usize) -> Parsed {
        Parsed {
            ts: self.ts,
            meta: self.meta,
            pieces: self.first..pieces,
        }
    }
}

/// Writes many records from one framed body; per-record results in the answer.
#[utoipa::path(post, path = "/api/v1/b/{bucket}/{entry}/batch", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path),
        ("if_exists" = Option<String>, Query, description = "fail (default: 409 timestamp_exists) or compare (same payload CRC: 200, counted in `existing`; different: 409 conflict)"),
        ("Content-Encoding" = Option<String>, Header, description = "zstd: the body is one zstd stream of the framing")),
    request_body(content = Vec<u8>, content_type = "application/x-tsblob-records",
        description = "record frames then one end frame (docs/api.md)"),
    responses((status = 200, body = BatchResult, description = "the body parsed; see each record's status"),
              (status = 400, body = BatchResult, description = "malformed_batch, with what was kept"),
              (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 415, body = ErrorBody, description = "unsupported_encoding: a Content-Encoding other than zstd")))]
pub async fn write(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let (parts, body) = req.into_parts();
    let mut if_exists = IfExists::Fail;
    for (k, v) in super::params::pairs(parts.uri.query()) {
        match k.as_str() {
            "if_exists" => match IfExists::parse(&v) {
                Ok(i) => if_exists = i,
                Err(e) => return Ok(refused(e)),
            },
            _ => return Ok(refused(super::params::unknown(&k, "if_exists"))),
        }
    }
    let limits = t.state.limits.clone();
    if content_length(&parts.headers)?.is_some_and(|n| n > limits.max_body) {
        return Err(AppError::too_large(limits.max_body));
    }
    let zstd_body = super::headers::zstd_encoded(&parts.headers)?;
    // An unknown bucket is refused before a byte of the body is read: a look-up in memory
    // (the bucket's info walked every entry's last index chunk on the blocking pool, an
    // eighth of a 1 KiB batch's server CPU: docs/benchmarks/batch-1k-2026-11-25.md).
    t.state.store.check_bucket(&t.bucket)?;

    // A zstd body is decoded as it arrives (`inflate.rs`), never collected whole.
    let mut chunks = PlainChunks::new(body, zstd_body, &limits, &t.state.bodies)?;
    // Every byte the batch holds in memory (records being received and chunks waiting for
    // their write) is in the server's memory budget: bug "batch records outside the
    // budget" (issue 27, defect 3).
    let mut held = t.state.bodies.upload();
    // Payload pieces are slices of the body chunks as hyper received them: no copy into a
    // gathering buffer (which cost a copy and fresh pages per byte on 10 MiB records).
    let mut dec = ChunkDecoder::new();
    let memo = parts.extensions.get::<LabelMemo>();
    let (mut metas, mut chunk) = LabelMemo::take(memo);
    let mut current: Option<Pending> = None;
    let mut in_flight: Option<Flight> = None;
    let mut results: Vec<RecordResult> = Vec::new();
    // The answer's bytes, covered by `held` as results arrive (`results.rs`).
    let mut tally = super::results::Tally::default();
    let mut fault: Option<AppError> = None;
    // The timestamp of a record over `--max-batch-record` (it ends the batch).
    let mut too_large: Option<u64> = None;

    'body: loop {
        loop {
            let event = match dec.next_raw() {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(e) => {
                    fault = Some(malformed(e));
                    break 'body;
                }
            };
            match event {
                RawEvent::Record(head) => {
                    if head.names_entry() {
                        fault = Some(malformed(format!(
                            "record frame {} names an entry (kind 4): a batch writes to the entry of its URL, use record frames (kind 1)",
                            dec.records()
                        )));
                        break 'body;
                    }
                    if head.payload_len() > limits.max_batch_record {
                        // The records before it are complete: they are written, and this
                        // one's result (413 `record_too_large`) follows theirs, so a client
                        // knows which to send alone.
                        too_large = Some(head.ts());
                        fault = Some(AppError::new(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            ErrorCode::RecordTooLarge,
                            format!(
                                "record frame {} has a {}-byte payload, over the {}-byte limit for records in a batch: send it with a single-record POST (the records after it were not read)",
                                dec.records(), head.payload_len(), limits.max_batch_record
                            ),
                        ));
                        break 'body;
                    }
                    if dec.records() > limits.max_batch_records {
                        fault = Some(AppError::new(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            ErrorCode::PayloadTooLarge,
                            format!(
                                "the batch has more than {} records, the server's limit per request (each record's result is held until the answer): split it, or start the server with a larger --max-batch-records",
                                limits.max_batch_records
                            ),
                        ));
                        break 'body;
                    }
                    let ts = (head.ts() != TS_NOW).then_some(head.ts());
                    let meta = metas.of(&head);
                    let spooled = if head.payload_len() >= SPOOL_FROM {
                        // The records before it are written first (results keep their order).
                        if !chunk.records.is_empty() {
                            settle(&t, in_flight.take(), if_exists, &mut results).await;
                            let share = held.split(chunk.bytes as u64);
                            in_flight = Some(submit(&t, chunk.take(), share));
                        }
                        Some(Spooling::start(&t, &own_meta(ts, &meta), head.payload_len()).await)
                    } else {
                        chunk.bytes += held_bytes(&head);
                        None
                    };
                    // Memory follows the bytes that arrive, not the length a head claims.
                    current = Some(Pending {
                        ts,
                        payload_len: head.payload_len(),
                        meta,
                        first: chunk.pieces.len(),
                        len: 0,
                        spooled,
                    });
                }
                RawEvent::Other(Event::Data(d)) => {
                    if let Some(p) = current.as_mut() {
                        p.len += d.len() as u64;
                        match p.spooled.as_mut() {
                            Some(s) => s.push(d).await,
                            None => chunk.pieces.push(d),
                        }
                    }
                }
                RawEvent::Other(Event::End(n)) => {
                    if n != dec.records() {
                        fault = Some(malformed(format!(
                            "the end frame announces {n} records but the body has {}: the upload is incomplete or the count is wrong",
                            dec.records()
                        )));
                        break 'body;
                    }
                }
                // A query's answer with its heartbeats (a downloaded link) is a valid batch:
                // a heartbeat says nothing of the records and is skipped, as a client does.
                RawEvent::Other(Event::Heartbeat(_)) => {}
                RawEvent::Other(Event::Error(_) | Event::Skipped(_) | Event::Record(_)) => {
                    fault = Some(malformed(
                        "error and skipped frames (kinds 2 and 5) are not allowed in a batch",
                    ));
                    break 'body;
                }
            }
            // What the batch holds now is covered by its reservation (it grows a granule at
            // a time, so this is an atomic operation per 64 KiB, not per record); no room
            // within --memory-wait ends the batch with 503 `busy` and what was kept.
            let pending = current
                .as_ref()
                .filter(|p| p.spooled.is_none())
                .map_or(0, |p| p.len);
            tally.take(&mut results);
            // (`try_cover` first: most events need no more room, and no future is built)
            let total = chunk.bytes as u64 + pending + tally.bytes();
            if !held.try_cover(total) {
                if let Err(e) = held.wait_cover(total, "a batch").await {
                    fault = Some(e);
                    break 'body;
                }
            }
            // A record is complete once its payload is; zero-length ones at once.
            if current.as_ref().is_some_and(|p| p.len == p.payload_len) {
                if let Some(mut p) = current.take() {
                    if let Some(spooling) = p.spooled.take() {
                        let spooled = match spooling {
                            Spooling::Sink(sink) => sink.finish().await,
                            Spooling::Failed(e) => Err(e),
                        };
                        settle(&t, in_flight.take(), if_exists, &mut results).await;
                        let meta = own_meta(p.ts, &p.meta);
                        in_flight = Some(spawn_spooled(&t, meta, spooled, if_exists));
                        continue;
                    }
                    chunk.bytes += p.len as usize;
                    let record = p.into_record(chunk.pieces.len());
                    chunk.records.push(record);
                }
                if chunk.bytes >= CHUNK_BYTES || chunk.records.len() >= CHUNK_RECORDS {
                    settle(&t, in_flight.take(), if_exists, &mut results).await;
                    let share = held.split(chunk.bytes as u64);
                    in_flight = Some(submit(&t, chunk.take(), share));
                }
            }
        }
        match chunks.next().await {
            // `next_event` used up what was pushed before: the chunk is taken as it is.
            Ok(Some(bytes)) => dec.push(bytes),
            Ok(None) => {
                if !dec.is_done() {
                    fault = Some(malformed(format!(
                        "the body ended after {} bytes without an end frame: the upload was cut off",
                        chunks.seen()
                    )));
                }
                break;
            }
            Err(e) => {
                fault = Some(e);
                break;
            }
        }
    }
    if too_large.is_some() {
        // The rest of the body is read and dropped before the answer. Answered while the
        // client still wrote, the connection closed under it: the client saw a broken pipe,
        // not the 413 that tells it to send that record alone, and `tsblob cp` retried the
        // same batch until it gave up (pinned by replication_large::
        // records_over_the_destination_batch_limit_arrive_alone_through_a_cut, which failed
        // so with a debug client). Bounded as any body: --max-body, the body deadline and
        // the idle timeout.
        while let Ok(Some(_)) = chunks.next().await {}
    }
    if (fault.is_none() || too_large.is_some()) && !chunk.records.is_empty() {
        settle(&t, in_flight.take(), if_exists, &mut results).await;
        let share = held.split(chunk.bytes as u64);
        in_flight = Some(submit(&t, chunk, share));
    }
    settle(&t, in_flight, if_exists, &mut results).await;
    LabelMemo::keep(
        memo,
        metas,
        dec.records(),
        limits.batch_label_memo,
        &t.state.bodies,
    );
    if let (Some(ts), Some(f)) = (too_large, &fault) {
        results.push(RecordResult {
            ts: (ts != TS_NOW).then_some(ts),
            ..answered(f)
        });
    }

    tally.take(&mut results);
    let written = results.iter().filter(|r| r.status == 201).count() as u64;
    let existing = results.iter().filter(|r| r.status == 200).count() as u64;
    let answer = BatchResult {
        error: fault.as_ref().map(|f| f.body().error),
        written,
        existing,
        failed: results.len() as u64 - written - existing,
        results,
    };
    let retry = fault.as_ref().is_some_and(AppError::retry_later);
    let status = fault.map_or(StatusCode::OK, |f| f.status);
    // A long answer is written on the blocking pool, not on a runtime worker (a 100,000-
    // result answer held every other client on the worker: hostile probe of 2026-11-28).
    let json = if answer.results.len() > LONG_ANSWER {
        tokio::task::spawn_blocking(move || answer_body(&answer))
            .await
            .map_err(|e| AppError::internal(format!("writing the batch answer: {e}")))?
    } else {
        answer_body(&answer)
    };
    // Records were written: the answer goes out whether or not the budget has room for
    // it now; it stays counted until sent (the batches after it wait for room).
    let mut resp = super::results::held_json(status, json, Some(held));
    if retry {
        resp.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from(super::errors::RETRY_AFTER_SECS),
        );
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::ErrorDetail;

    fn failure(code: &str, message: &str) -> ErrorDetail {
        ErrorDetail {
            code: code.into(),
            message: message.into(),
        }
    }

    #[test]
    fn answer_body_is_what_serde_json_writes() {
        let record = |ts, status, error| RecordResult { ts, status, error };
        let results = vec![
            record(Some(1_732_600_000_000_000), 201, None),
            record(Some(0), 200, None),
            record(Some(u64::MAX), 201, None),
            record(
                None,
                500,
                Some(failure("internal", "a \"quoted\" \\ path\n\u{1}é")),
            ),
            record(Some(7), 409, Some(failure("timestamp_exists", "taken"))),
        ];
        let answers = [
            BatchResult {
                error: None,
                written: 0,
                existing: 0,
                failed: 0,
                results: Vec::new(),
            },
            BatchResult {
                error: None,
                written: 2,
                existing: 0,
                failed: 3,
                results: results.clone(),
            },
            BatchResult {
                error: Some(failure("malformed_batch", "the body ended \"early\"")),
                written: u64::MAX,
                existing: 1,
                failed: 12,
                results,
            },
        ];
        for a in &answers {
            let ours = answer_body(a);
            let serde = serde_json::to_vec(a).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&serde)
            );
            assert_eq!(ours, serde);
        }
    }
}
