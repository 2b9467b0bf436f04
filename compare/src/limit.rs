//! The `limit` target: the least work a server on tsblob's stack (tokio, hyper through axum)
//! can do for the bench's requests, so `tsblob bench --against limit` says how close tsblob
//! comes to what the machine and the stack allow.
//!
//! It speaks tsblob's HTTP API for exactly the requests the bench makes, and does nothing
//! else: a write's body is read to its end and dropped (no parse, no disk); a read answers
//! the record's bytes in tsblob's own framing from memory filled once at start ([`Copies`]:
//! a copy of the seeded pool of its size per record, so two reads never send the same bytes
//! out of the CPU's cache, and a payload goes to the socket with no copy in user space, as
//! `sendfile` from the page cache would). It has no index: it knows which
//! records exist from the workload plan it is given (`--workload`), the way the bench itself
//! does. Started by `tsblob bench` as the hidden `tsblob bench-limit` subcommand.
//!
//! With `--store` it is the `limit-store` target: the same server, except that a write's
//! body is appended, piece by piece as it arrives, to one file per entry (page cache, no
//! fsync, no index, no framing). That is the least work any store must do for a write —
//! the bytes have to reach a file — so `% of limit-store` says how close tsblob's writes come
//! to storing at all, where `% of limit` compares them with not storing.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use bytes::Bytes;
use futures_util::StreamExt;
use memmap2::Mmap;
use serde::Deserialize;

use crate::payload::{pool_bytes, Expected};
use crate::workload::{SizePlan, Workload, BASE_TS, CONTENT_TYPE, TS_STEP};
use tsblob_proto::framing::{put_end, put_record_head};

/// Flags of `tsblob bench-limit` (hidden; `tsblob bench` passes them).
#[derive(Debug, Clone, clap::Args)]
pub struct LimitArgs {
    /// Address to listen on.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Folder for `--store`'s files.
    #[arg(long)]
    pub data: PathBuf,
    /// The workload (JSON, as `tsblob bench` writes it): which records exist.
    #[arg(long)]
    pub workload: PathBuf,
    /// Append each write's body to a file per entry (the `limit-store` target) instead of
    /// dropping it.
    #[arg(long)]
    pub store: bool,
}

/// A payload size's plan and the memory its records are read from.
#[derive(Clone)]
struct Size {
    plan: SizePlan,
    copies: Arc<Copies>,
}

/// At most this many bytes of [`Copies`] per payload size.
const COPIES_BYTES: u64 = 256 << 20;

/// Copies of a size's pool laid end to end in memory, one per record (global index
/// `seq × entries + entry`), or as many as fit in [`COPIES_BYTES`], reused in turn past that.
///
/// Every record is a window of the same pool (`crate::payload`), so answering each from
/// that one pool sent a 1 MiB record out of the core's L2 cache every time, where a store
/// reads each record's own bytes from memory: distinct bytes cost `limit` about a quarter of
/// its 1 MiB range-read rate (`docs/benchmarks/limit-copies-2026-11-27.md`).
/// 256 MiB is far past any core's cache (a record's copy is used again only after 256 MiB
/// of others) and bounds the memory: about 1 GB for the default workload's five sizes.
struct Copies {
    map: Mmap,
    /// One copy's length: the pool's.
    slot: usize,
    slots: u64,
}

impl Copies {
    /// `records` copies of `pool`, or as many as fit in `cap` bytes (at least one).
    fn new(pool: &[u8], records: u64, cap: u64) -> Result<Copies> {
        // A pool is `size + 4 KiB` long: never empty.
        anyhow::ensure!(!pool.is_empty(), "an empty pool has nothing to copy");
        let slot = pool.len();
        let slots = records.min(cap / slot as u64).max(1);
        let len = usize::try_from(slots)
            .ok()
            .and_then(|n| n.checked_mul(slot))
            .context("the pool copies do not fit in memory")?;
        let mut map = memmap2::MmapMut::map_anon(len).context("cannot map the pool copies")?;
        for copy in map.chunks_mut(slot) {
            copy.copy_from_slice(&pool[..copy.len()]);
        }
        Ok(Copies {
            map: map
                .make_read_only()
                .context("cannot seal the pool copies")?,
            slot,
            slots,
        })
    }

    /// `range` of the pool, from the copy of record `record`.
    fn window(self: &Arc<Self>, record: u64, range: std::ops::Range<usize>) -> Bytes {
        // `record % slots < slots`, whose copies all fit in the map: in range.
        let base = (record % self.slots) as usize * self.slot;
        Bytes::from_owner(Window {
            copies: Arc::clone(self),
            range: base + range.start..base + range.end,
        })
    }
}

struct Limit {
    sizes: HashMap<u64, Size>,
    /// With `--store`: where written bodies go.
    store: Option<Appender>,
}

/// The files written bodies are appended to (`--store`): one per entry, opened on its first
/// write. Bodies are written on the runtime worker that receives them: the least work, not
/// a model of how a server should do blocking I/O.
struct Appender {
    dir: PathBuf,
    files: std::sync::Mutex<HashMap<String, Arc<std::sync::Mutex<std::fs::File>>>>,
}

impl Appender {
    fn file(&self, entry: &str) -> Result<Arc<std::sync::Mutex<std::fs::File>>, String> {
        let mut files = self
            .files
            .lock()
            .map_err(|_| "a writer panicked".to_string())?;
        if let Some(f) = files.get(entry) {
            return Ok(Arc::clone(f));
        }
        // Entry names of the workload are `s<size>-e<n>`: safe as file names (checked).
        if entry.is_empty()
            || !entry
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(format!("entry {entry:?} is not a workload entry"));
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(entry))
            .map_err(|e| format!("cannot open the entry's file: {e}"))?;
        let file = Arc::new(std::sync::Mutex::new(file));
        files.insert(entry.to_string(), Arc::clone(&file));
        Ok(file)
    }

    /// Reads a body to its end, appending each piece as it arrives.
    async fn append(&self, entry: &str, body: Body) -> Result<u64, String> {
        use std::io::Write;
        let file = self.file(entry)?;
        let mut stream = body.into_data_stream();
        let mut n = 0u64;
        while let Some(piece) = stream.next().await {
            let piece = piece.map_err(|e| format!("reading the body failed: {e}"))?;
            let mut f = file.lock().map_err(|_| "a writer panicked".to_string())?;
            f.write_all(&piece)
                .map_err(|e| format!("appending to the entry's file failed: {e}"))?;
            n += piece.len() as u64;
        }
        Ok(n)
    }
}

/// A window of one record's pool copy, handed to hyper without a copy.
struct Window {
    copies: Arc<Copies>,
    range: std::ops::Range<usize>,
}

impl AsRef<[u8]> for Window {
    fn as_ref(&self) -> &[u8] {
        &self.copies.map[self.range.clone()]
    }
}

/// A query stream is produced in steps of about this many bytes (like tsblob's).
const STEP: usize = 256 << 10;
/// Payloads from this size on travel as windows of the mapped file; smaller ones are copied
/// into the step (one write of many small records beats many tiny buffers).
const ZERO_COPY_FROM: usize = 16 << 10;

/// Runs the limit server until the process is killed.
pub async fn serve(args: LimitArgs) -> Result<()> {
    let workload = Workload::from_file(&args.workload)?;
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("cannot create {}", args.data.display()))?;
    let mut sizes = HashMap::new();
    for plan in workload.size_plans() {
        let copies = Copies::new(&pool_bytes(plan.seed, plan.size), plan.count, COPIES_BYTES)?;
        let copies = Arc::new(copies);
        sizes.insert(plan.size, Size { plan, copies });
    }
    let store = match args.store {
        true => {
            let dir = args.data.join("store");
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            Some(Appender {
                dir,
                files: Default::default(),
            })
        }
        false => None,
    };
    let state = Arc::new(Limit { sizes, store });
    let app = Router::new()
        .route("/health", get(health))
        .route("/api/v1/b/{bucket}", post(create_bucket))
        .route("/api/v1/b/{bucket}/{entry}", post(discard).get(point))
        .route("/api/v1/b/{bucket}/{entry}/batch", post(discard_batch))
        .route("/api/v1/b/{bucket}/{entry}/query", get(query))
        .with_state(state);
    // TCP_NODELAY as tsblob's own accept loop sets it: without it a response written as a
    // small head then a large payload waits on the client's delayed ACK (Nagle).
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?
        .tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
    axum::serve(listener, app)
        .await
        .context("the limit server stopped")
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "status": "ok",
        "version": format!("limit {}", env!("CARGO_PKG_VERSION")),
    }))
}

/// Answers like tsblob (a JSON body: the shared client parses one) without keeping anything.
async fn create_bucket(Path(bucket): Path<String>) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "name": bucket }))
}

/// Reads a body to its end and drops it.
async fn drain(body: Body) -> Result<u64, String> {
    let mut stream = body.into_data_stream();
    let mut n = 0u64;
    while let Some(piece) = stream.next().await {
        let piece = piece.map_err(|e| format!("reading the body failed: {e}"))?;
        n += piece.len() as u64;
    }
    Ok(n)
}

/// Reads a write's body and drops it (or appends it, `--store`); answers like tsblob
/// (`201 {"ts"}`), as the shared client reads the timestamp back.
async fn discard(
    State(state): State<Arc<Limit>>,
    Path((_bucket, entry)): Path<(String, String)>,
    Query(q): Query<TsParam>,
    body: Body,
) -> Response {
    match state.take(&entry, body).await {
        Ok(_) => (StatusCode::CREATED, Json(serde_json::json!({ "ts": q.ts }))).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

/// A batch's body, likewise; answers that nothing failed.
async fn discard_batch(
    State(state): State<Arc<Limit>>,
    Path((_bucket, entry)): Path<(String, String)>,
    body: Body,
) -> Response {
    match state.take(&entry, body).await {
        Ok(_) => Json(serde_json::json!({"failed": 0, "results": []})).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

fn error(status: StatusCode, message: String) -> Response {
    let body = serde_json::json!({"error": {"code": "limit", "message": message}});
    (status, Json(body)).into_response()
}

impl Limit {
    /// Reads a write's body to its end: dropped, or appended to the entry's file with
    /// `--store`.
    async fn take(&self, entry: &str, body: Body) -> Result<u64, String> {
        match &self.store {
            Some(store) => store.append(entry, body).await,
            None => drain(body).await,
        }
    }

    /// The plan and entry index of an entry name `s<size>-e<entry>` (a 404 otherwise).
    fn entry(&self, name: &str) -> Result<(&Size, u32), Box<Response>> {
        let parsed = name
            .strip_prefix('s')
            .and_then(|r| r.split_once("-e"))
            .and_then(|(s, e)| Some((s.parse::<u64>().ok()?, e.parse::<u32>().ok()?)));
        let not_found = || {
            Box::new(error(
                StatusCode::NOT_FOUND,
                format!("entry {name:?} is not in the workload the limit server was given"),
            ))
        };
        let (size, entry) = parsed.ok_or_else(not_found)?;
        let s = self.sizes.get(&size).ok_or_else(not_found)?;
        if entry >= s.plan.entries {
            return Err(not_found());
        }
        Ok((s, entry))
    }
}

/// A record's payload: the tag, then a window of the pool.
fn payload_pieces(s: &Size, entry: u32, ts: u64) -> (Bytes, Bytes) {
    let expected: Expected = s.plan.expected(entry, ts);
    let (tag, range) = expected.tag_and_window();
    let head = expected.len().min(tag.len());
    let window = s.copies.window(s.plan.index_of(entry, ts), range);
    (Bytes::copy_from_slice(&tag[..head]), window)
}

#[derive(Deserialize)]
struct TsParam {
    ts: u64,
}

async fn point(
    State(state): State<Arc<Limit>>,
    Path((_bucket, entry)): Path<(String, String)>,
    Query(q): Query<TsParam>,
) -> Response {
    let (s, e) = match state.entry(&entry) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let seq = match q.ts.checked_sub(BASE_TS) {
        Some(d) if d % TS_STEP == 0 && d / TS_STEP < s.plan.entry_len(e) => d / TS_STEP,
        _ => return error(StatusCode::NOT_FOUND, format!("no record at {}", q.ts)),
    };
    let rec = crate::workload::Rec {
        entry: e,
        seq,
        ts: q.ts,
    };
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(s.plan.size));
    for (k, v) in s.plan.labels_of(rec) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(format!("x-tsblob-label-{k}")),
            HeaderValue::try_from(v),
        ) {
            headers.insert(name, value);
        }
    }
    let (tag, window) = payload_pieces(s, e, q.ts);
    let body = Body::from_stream(futures_util::stream::iter([
        Ok::<_, std::convert::Infallible>(tag),
        Ok(window),
    ]));
    (headers, body).into_response()
}

#[derive(Deserialize)]
struct RangeParams {
    start: u64,
    stop: u64,
}

async fn query(
    State(state): State<Arc<Limit>>,
    Path((_bucket, entry)): Path<(String, String)>,
    Query(q): Query<RangeParams>,
) -> Response {
    let (s, e) = match state.entry(&entry) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let first = q.start.saturating_sub(BASE_TS).div_ceil(TS_STEP);
    let end = first + s.plan.expected_in(e, q.start, q.stop);
    let size = s.clone();
    // One step per poll: small records gathered into ~256 KiB, large ones as windows of
    // their copies.
    let steps = futures_util::stream::unfold(
        (first, false, size),
        move |(mut seq, done, size)| async move {
            if done {
                return None;
            }
            let mut out: Vec<Bytes> = Vec::new();
            let mut buf = bytes::BytesMut::with_capacity(STEP.min(64 << 10));
            while seq < end && buf.len() < STEP && out.len() < 64 {
                let ts = BASE_TS + seq * TS_STEP;
                let rec = crate::workload::Rec { entry: e, seq, ts };
                let labels = size.plan.labels_of(rec);
                put_record_head(&mut buf, ts, CONTENT_TYPE, &labels, size.plan.size);
                let (tag, window) = payload_pieces(&size, e, ts);
                buf.extend_from_slice(&tag);
                if window.len() >= ZERO_COPY_FROM {
                    out.push(buf.split().freeze());
                    out.push(window);
                } else {
                    buf.extend_from_slice(&window);
                }
                seq += 1;
            }
            let last = seq >= end;
            if last {
                put_end(&mut buf, end - first);
            }
            if !buf.is_empty() {
                out.push(buf.freeze());
            }
            let step = futures_util::stream::iter(
                out.into_iter().map(Ok::<Bytes, std::convert::Infallible>),
            );
            Some((step, (seq, last, size)))
        },
    )
    .flatten();
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tsblob-records"),
    );
    (headers, Body::from_stream(steps)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before, every record of a size was served from the one pool: the same bytes, hot in
    /// the core's cache, for every read.
    #[test]
    fn each_record_is_served_from_its_own_copy_of_the_pool_up_to_the_cap() {
        let pool: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let copies = Arc::new(Copies::new(&pool, 5, 1 << 20).unwrap());
        assert_eq!(copies.slots, 5);
        let windows: Vec<Bytes> = (0..5).map(|r| copies.window(r, 10..900)).collect();
        for w in &windows {
            assert_eq!(&w[..], &pool[10..900]);
        }
        let mut starts: Vec<usize> = windows.iter().map(|w| w.as_ptr() as usize).collect();
        starts.sort_unstable();
        starts.dedup();
        assert_eq!(starts.len(), 5, "five records, five copies");
        // Past the cap the copies are reused in turn, and still hold the pool's bytes.
        let capped = Arc::new(Copies::new(&pool, 100, 3500).unwrap());
        assert_eq!(capped.slots, 3);
        assert_eq!(
            capped.window(4, 0..1000).as_ptr(),
            capped.window(1, 0..1000).as_ptr()
        );
        assert_ne!(
            capped.window(4, 0..1000).as_ptr(),
            capped.window(5, 0..1000).as_ptr()
        );
        assert_eq!(&capped.window(7, 0..1000)[..], &pool[..]);
        // A cap below one copy still keeps one.
        assert_eq!(Copies::new(&pool, 100, 10).unwrap().slots, 1);
        assert!(Copies::new(&[], 5, 1 << 20).is_err());
    }
}
