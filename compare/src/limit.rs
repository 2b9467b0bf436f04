//! The `limit` target: the least work a server on tsblob's stack (tokio, hyper through axum)
//! can do for the bench's requests, so `tsblob bench --against limit` says how close tsblob
//! comes to what the machine and the stack allow.
//!
//! It speaks tsblob's HTTP API for exactly the requests the bench makes, and does nothing
//! else: a write's body is read to its end and dropped (no parse, no disk); a read answers
//! the record's bytes from a file (the seeded pool of its size, written once at start and
//! memory-mapped, so a payload goes from the page cache to the socket with no copy in user
//! space, as `sendfile` would) in tsblob's own framing. It has no index: it knows which
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
    /// Folder for the pool files.
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

/// A payload size's plan and its pool file, mapped.
struct Size {
    plan: SizePlan,
    pool: Arc<Mmap>,
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

/// A window of a mapped pool file, handed to hyper without a copy.
struct Window {
    map: Arc<Mmap>,
    range: std::ops::Range<usize>,
}

impl AsRef<[u8]> for Window {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.range.clone()]
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
        let path = args.data.join(format!("pool-{}", plan.size));
        std::fs::write(&path, pool_bytes(plan.seed, plan.size))
            .with_context(|| format!("cannot write {}", path.display()))?;
        let file = std::fs::File::open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // SAFETY: the file is ours, written above and never changed or truncated while
        // mapped (the process only reads it).
        let pool = Arc::new(unsafe { Mmap::map(&file) }.context("cannot map a pool file")?);
        sizes.insert(plan.size, Size { plan, pool });
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
    let window = Bytes::from_owner(Window {
        map: Arc::clone(&s.pool),
        range,
    });
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
    let plan = s.plan.clone();
    let pool = Arc::clone(&s.pool);
    let size = Size { plan, pool };
    // One step per poll: small records gathered into ~256 KiB, large ones as file windows.
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
