//! `GET /api/v1/b/{bucket}/query?format=mcap`: a multi-entry query's records as one MCAP
//! file ([`crate::mcap::export::Exporter`]), produced in bounded steps on the blocking pool
//! and streamed as they fill (dispatched from `mod.rs`).

use std::io::Write;
use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use parking_lot::Mutex;
use tsblob_storage::{QueryIter, Store};

use super::parse::parse_query;
// The frame answer's step bounds: pages and time without a match, and time in all.
use super::produce::{StepClock, IDLE_PAGES, IDLE_TIME};
use crate::http::body::channel_body;
use crate::http::budget::Held;
use crate::http::errors::{blocking, AppError};
use crate::http::records::Target;
use crate::mcap::export::{load_schema, ExportError, Exporter, SchemaLookup, MEDIA_TYPE};

/// A `Write` into a buffer the HTTP producer drains after each step.
#[derive(Clone, Default)]
pub struct Spool(Arc<Mutex<Vec<u8>>>);

impl Spool {
    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.0.lock())
    }

    fn len(&self) -> usize {
        self.0.lock().len()
    }
}

impl Write for Spool {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A step hands its output over once it holds this many bytes of MCAP ...
const STEP_OUT: usize = 256 << 10;
/// ... or has read this many bytes of payloads (compression may hold them in its chunk).
const STEP_IN: usize = 4 << 20;
/// Output pieces queued between the producer and the socket.
const DEPTH: usize = 8;

/// Walks a multi-entry query into an [`Exporter`] in bounded steps on the blocking pool.
struct Producer {
    iter: QueryIter,
    /// The next step's room in the memory budget, and the merge's pages of index records
    /// (as in `query.rs`).
    room: Held,
    merge: Held,
    /// The schemas the writer holds until the end (at most
    /// `mcap::export::MAX_SCHEMA_TOTAL_BYTES`), in the memory budget.
    schemas: Held,
    exporter: Option<Exporter<Spool>>,
    out: Spool,
    store: Store,
    bucket: String,
}

enum Step {
    More(Vec<u8>),
    Last(Vec<u8>),
    Fail(Vec<u8>, AppError),
}

/// A step's output as sent: the piece (carrying its share of the memory budget), whether
/// it is the last, and the error that ends the export after it.
type Sent = (Bytes, bool, Option<AppError>);

impl Producer {
    /// A step, its output carrying its share of the memory budget until written; the
    /// room it did not use given back, the merge's pages counted as they are now.
    fn counted_step(&mut self) -> Sent {
        let (out, last, err) = match self.step() {
            Step::More(b) => (b, false, None),
            Step::Last(b) => (b, true, None),
            Step::Fail(b, e) => (b, true, Some(e)),
        };
        // Counted at its buffer's capacity: what it keeps alive.
        let cap = out.capacity() as u64;
        let piece = self.room.attach(Bytes::from(out), cap);
        self.room.try_resize(0);
        self.merge.set(self.iter.held_bytes());
        (piece, last, err)
    }

    fn step(&mut self) -> Step {
        let mut read = 0usize;
        // At most `IDLE_TIME` of scanning without a match, and of the step in all
        // (`StepClock`): a step holds a place in the gate of steps.
        let mut bound = tsblob_storage::ScanBound::pages_or_time(IDLE_PAGES, IDLE_TIME);
        let mut clock = StepClock::start();
        if self.exporter.is_none() {
            return Step::Last(Vec::new());
        }
        let (store, bucket) = (self.store.clone(), self.bucket.clone());
        let held = &mut self.schemas;
        let mut no_room = false;
        let mut schema = |ts: u64| {
            let s = load_schema(&store, &bucket, ts)?;
            if let Some(s) = &s {
                if !held.try_resize(held.bytes().saturating_add(s.held_bytes())) {
                    no_room = true;
                    return Err(SchemaLookup::Failed(
                        "no room in the memory budget for the schema".to_string(),
                    ));
                }
            }
            Ok(s)
        };
        loop {
            if self.out.len() >= STEP_OUT || read >= STEP_IN {
                return Step::More(self.out.take());
            }
            let item = match self.iter.next_within(&mut bound) {
                None => {
                    let done = self.exporter.take().map(Exporter::finish);
                    return match done {
                        Some(Err(e)) => Step::Fail(self.out.take(), export_failed(e)),
                        _ => Step::Last(self.out.take()),
                    };
                }
                Some(Err(e)) => return Step::Fail(self.out.take(), AppError::from(e)),
                Some(Ok(None)) => return Step::More(self.out.take()),
                Some(Ok(Some(item))) => item,
            };
            // The payload is read whole, then copied into the writer's chunk (kept until
            // the chunk is full) and into the output: a record is refused past
            // `MCAP_RECORD_MAX`, and two copies of it must find room in the budget.
            let size = item.meta.size;
            if size > MCAP_RECORD_MAX {
                return Step::Fail(
                    self.out.take(),
                    record_too_large(item.entry(), item.meta.ts, size),
                );
            }
            if !self.room.try_cover(size.saturating_mul(2)) {
                return Step::Fail(
                    self.out.take(),
                    self.room.budget_busy("an MCAP export's record"),
                );
            }
            let data = match item.data() {
                Ok(d) => d,
                // Removed since the query listed it: skipped, as the frame answer does.
                Err(tsblob_storage::Error::NotFound(_)) => continue,
                Err(e) => return Step::Fail(self.out.take(), AppError::from(e)),
            };
            read += data.len();
            let m = &item.meta;
            let Some(exporter) = self.exporter.as_mut() else {
                return Step::Last(self.out.take());
            };
            if let Err(e) = exporter.add(
                item.entry(),
                m.ts,
                &m.content_type,
                &m.labels,
                &data,
                &mut schema,
            ) {
                if no_room {
                    let busy = self.room.budget_busy("an MCAP export's schemas");
                    return Step::Fail(self.out.take(), busy);
                }
                return Step::Fail(self.out.take(), export_failed(e));
            }
            if clock.put_one() {
                return Step::More(self.out.take());
            }
        }
    }
}

/// The largest record an MCAP export carries: the frame answer's largest mapped record
/// (`tsblob_storage::MAP_MAX`). A 4 GiB record was read into memory whole and copied
/// twice more by the writer (~12 GiB), for each of 64 exports a token may run.
const MCAP_RECORD_MAX: u64 = crate::mcap::MAX_MESSAGE_BYTES;

fn record_too_large(entry: &str, ts: u64, size: u64) -> AppError {
    AppError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        tsblob_proto::ErrorCode::PayloadTooLarge,
        format!(
            "record {ts} of entry {entry:?} is {size} bytes, over the {} an MCAP export carries: export a range without it, or read it with a plain query",
            tsblob_proto::format_size(MCAP_RECORD_MAX)
        ),
    )
}

fn export_failed(e: ExportError) -> AppError {
    match e {
        // The export's bounds: the request asks too much, nothing failed.
        // A schema over what an export reads (stored by another writer than the import,
        // which refuses one): was a 500 `internal`, its reason only in the server log.
        ExportError::TooMany { .. }
        | ExportError::SchemaBytes { .. }
        | ExportError::SchemaTooLarge { .. } => AppError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            tsblob_proto::ErrorCode::Unsupported,
            format!("the MCAP export stopped: {e}"),
        ),
        e => AppError::internal(format!("the MCAP export failed: {e}")),
    }
}

/// `format=` of a bucket-level query: `Some(query string without it)` for `format=mcap`;
/// `None` without `format`; an error for another format.
pub fn requested(q: Option<&str>) -> Result<Option<String>, AppError> {
    let Some(q) = q else { return Ok(None) };
    let mut mcap = false;
    let mut rest = form_urlencoded::Serializer::new(String::new());
    for (k, v) in form_urlencoded::parse(q.as_bytes()) {
        if k == "format" {
            if v != "mcap" {
                return Err(AppError::bad_request(format!(
                    "format={}: the one format besides record frames is mcap (leave format out for frames)",
                    tsblob_proto::quote_short(&v)
                )));
            }
            mcap = true;
        } else {
            rest.append_pair(&k, &v);
        }
    }
    Ok(mcap.then(|| rest.finish()))
}

/// `GET /api/v1/b/{bucket}/query?entries=...&format=mcap`: the query's records as one
/// MCAP file, streamed chunk by chunk as they fill. An error after the first byte ends the
/// response without its last chunk (an MCAP without its footer: readers see it truncated).
pub async fn stream(t: Target, q: String) -> Result<Response, AppError> {
    t.caller.require_read(&t.bucket)?;
    let r = parse_query(Some(&q))?;
    let Some(patterns) = r.entries.filter(|e| !e.is_empty()) else {
        return Err(AppError::bad_request(
            "an MCAP export needs entries: names and globs, comma-separated (entries=cams/*,imu; entries=** for every entry)",
        ));
    };
    if r.meta || r.follow.is_some() || r.query.descending {
        return Err(AppError::bad_request(
            "format=mcap answers a closed window oldest first: drop meta, follow and desc",
        ));
    }
    // A stream like any query answer: counted against --max-streams and
    // --max-streams-per-token until it ends.
    let slot = t
        .state
        .streams
        .open(t.caller.name.as_deref().unwrap_or(""))?;
    let (store, bucket, query) = (t.state.store.clone(), t.bucket.clone(), r.query);
    let iter = {
        let (store, bucket) = (store.clone(), bucket.clone());
        blocking(move || Ok(store.query_entries(&bucket, &patterns, &query)?)).await?
    };
    let out = Spool::default();
    let exporter =
        Exporter::new(out.clone()).map_err(|e| AppError::internal(format!("MCAP: {e}")))?;
    let mut p = Producer {
        iter,
        room: t.state.bodies.empty(),
        merge: t.state.bodies.empty(),
        schemas: t.state.bodies.empty(),
        exporter: Some(exporter),
        out,
        store,
        bucket: bucket.clone(),
    };
    // The first step before the status: an error before any record gets its status.
    p.room.cover(STEP_OUT as u64, "an MCAP export").await?;
    let (p, first) = t
        .state
        .scans
        .run(move || {
            let s = p.counted_step();
            Ok::<_, AppError>((p, s))
        })
        .await?;
    let first = match first {
        (_, _, Some(e)) => return Err(e),
        s => s,
    };
    let (tx, body) = channel_body(DEPTH);
    // The token is checked again before each step: one removed, rotated or expired while
    // the file streams cuts it (no footer).
    let grant = t.state.auth.grant(&t.caller, &t.bucket);
    let scans = t.state.scans.clone();
    tokio::spawn(async move {
        let _slot = slot;
        pump(p, first, tx, grant, scans).await
    });
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static(MEDIA_TYPE),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{bucket}.mcap\"")) {
        h.insert(axum::http::header::CONTENT_DISPOSITION, v);
    }
    Ok(resp)
}

async fn pump(
    mut p: Producer,
    first: Sent,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    mut grant: crate::http::auth::StreamGrant,
    scans: crate::blocking::Scans,
) {
    let mut next = Some(first);
    loop {
        let step = match next.take() {
            Some(s) => s,
            None => {
                if tx.is_closed() {
                    return;
                }
                if let Err(e) = grant.check() {
                    tracing::info!("MCAP export cut: {e}");
                    let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                    return;
                }
                // Room for the step's output in the memory budget; none within
                // --memory-wait ends the export (its MCAP file is left without a footer).
                if let Err(e) = p.room.cover(STEP_OUT as u64, "an MCAP export").await {
                    e.log();
                    crate::throttled!(warn, "mcap_export_cut", "MCAP export cut: {e}");
                    let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                    return;
                }
                match scans
                    .run(move || {
                        let s = p.counted_step();
                        Ok::<_, crate::blocking::TaskFailed>((p, s))
                    })
                    .await
                {
                    Ok((back, s)) => {
                        p = back;
                        s
                    }
                    Err(_) => {
                        let _ = tx
                            .send(Err(std::io::Error::other("the MCAP export task failed")))
                            .await;
                        return;
                    }
                }
            }
        };
        let (piece, last, err) = step;
        if !piece.is_empty() && tx.send(Ok(piece)).await.is_err() {
            return; // the client went away
        }
        if let Some(e) = err {
            e.log();
            crate::throttled!(warn, "mcap_export_cut", "MCAP export cut: {e}");
            let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
            return;
        }
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn format_mcap_is_taken_out_of_the_query_string() {
        assert_eq!(requested(None).unwrap(), None);
        assert_eq!(requested(Some("entries=a")).unwrap(), None);
        assert_eq!(
            requested(Some("entries=a%2Cb&format=mcap&start=1")).unwrap(),
            Some("entries=a%2Cb&start=1".to_string())
        );
        assert!(requested(Some("format=csv")).is_err());
    }
}
