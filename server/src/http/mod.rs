//! The HTTP API over the engine (`docs/api.md` is its contract).
//!
//! [`app`] builds the whole router from an [`AppState`], so tests drive it with
//! `tower::ServiceExt::oneshot` and `serve` binds it to a socket. The engine is blocking:
//! every call into it runs on tokio's blocking pool ([`errors::blocking`]), and payloads
//! move through bounded channels so that memory stays flat whatever the record size.

pub mod attachments;
pub mod auth;
pub mod batch;
mod batch_chunk;
pub(crate) mod batch_writer;
pub mod body;
pub mod browser;
pub mod buckets;
pub mod budget;
pub mod bulk;
pub mod damage;
pub mod errors;
pub mod headers;
pub mod histogram;
mod if_exists;
pub mod inflate;
pub mod lifecycle;
pub mod limits;
pub mod links;
pub mod metrics;
pub mod openapi;
pub mod params;
pub mod query;
pub mod records;
pub mod replications;
mod results;
pub(crate) mod round_thread;
pub mod spool;
pub mod tails;
pub mod tokens;
pub mod ui;
pub(crate) mod writer;

use std::sync::Arc;
use std::time::{Duration, Instant};
use tsblob_proto::ErrorCode;

use axum::extract::{Path, Request, State};
use axum::http::Method;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use tsblob_proto::names::{split_attachment_path, split_entry_path, EntryRoute};
use tsblob_storage::Store;

pub use crate::when;
pub use errors::AppError;

/// Limits a server enforces on what clients send.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest request body (single record or batch), in bytes.
    pub max_body: u64,
    /// The largest record inside a batch body (they are held in memory until written).
    pub max_batch_record: u64,
    /// The most records in one batch body (each one's result is held until the answer).
    pub max_batch_records: u64,
    /// The label sets a connection's batches sent, kept for its next batch up to this many
    /// bytes (`batch.rs`, `--batch-label-memo`; 0: none kept).
    pub batch_label_memo: u64,
    /// The longest a client may leave a request body idle before it is dropped.
    pub idle_timeout: Duration,
    /// How long a whole body may take (a base plus a minimum rate).
    pub body_deadline: body::BodyDeadline,
    /// What browsers may do: `Host` names, other origins (`browser.rs`).
    pub browser: browser::BrowserPolicy,
    /// How many live tails may stream, in all and per token (`limits.rs`; a tail is also
    /// a stream).
    pub tails: limits::Caps,
    /// Memory all requests may hold at once, and the longest wait for room in it
    /// (`budget.rs`, `--memory-budget`, `--memory-wait`).
    pub memory_budget: u64,
    pub memory_wait: Duration,
    /// A zstd body's largest size as sent and once decompressed (`inflate.rs`).
    pub max_compressed_body: u64,
    pub max_decompressed_body: u64,
    /// Streams (query answers, live tails, MCAP exports) running at once, on the server
    /// and per token (`limits.rs`).
    pub streams: limits::Caps,
    /// Damaged records a query names one by one (`damage.rs`, `--max-skipped-listed`).
    pub max_skipped_listed: usize,
    /// Query links: longest expiry and URL, their base (`links.rs`).
    pub links: links::LinkLimits,
    /// Point reads on the worker threads: the largest index checked for it
    /// (`--inline-read-index-max`; 0: never).
    pub inline_read_index_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body: 4 << 30,
            max_batch_record: 64 << 20,
            max_batch_records: 100_000,
            batch_label_memo: 64 << 10,
            idle_timeout: Duration::from_secs(60),
            body_deadline: body::BodyDeadline::default(),
            browser: browser::BrowserPolicy::default(),
            tails: limits::Caps::TAILS,
            memory_budget: budget::MemoryBudget::DEFAULT,
            memory_wait: budget::MemoryBudget::DEFAULT_WAIT,
            max_compressed_body: 1 << 30,
            max_decompressed_body: 4 << 30,
            streams: limits::Caps::STREAMS,
            max_skipped_listed: damage::MAX_LISTED,
            inline_read_index_max: records::INLINE_READ_INDEX_MAX,
            links: links::LinkLimits::DEFAULT,
        }
    }
}

/// Everything a handler needs; cheap to clone: one reference count (every request clones
/// it several times, in the middlewares and the extractors; with a count per field, its
/// clones and drops were ~3 % of the server's CPU per 1 KiB write).
#[derive(Clone)]
pub struct AppState {
    shared: Arc<Shared>,
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// What an [`AppState`] shares.
pub struct Shared {
    pub store: Store,
    pub auth: Arc<auth::Auth>,
    pub metrics: Arc<metrics::Metrics>,
    pub limits: Arc<Limits>,
    pub started: Instant,
    /// Bumped after every index commit (the engine's commit listener): replication
    /// senders wait on it instead of polling.
    pub commits: Arc<tokio::sync::watch::Sender<u64>>,
    /// Live tails (`follow=true`): woken by commits to the entries they read, capped.
    pub tails: Arc<tails::Tails>,
    /// Replication tasks (their senders start with [`crate::replication::Replications::start_all`]).
    pub replications: Arc<crate::replication::Replications>,
    /// Memory every request together may hold (`budget.rs`): bodies, batches, zstd, queries.
    pub(crate) bodies: budget::MemoryBudget,
    /// Streams running now (`limits.rs`): query answers, live tails, MCAP exports.
    pub(crate) streams: Arc<limits::Limiter>,
    /// Query steps running on the blocking pool now, a few at once (`blocking::Scans`).
    pub(crate) scans: crate::blocking::Scans,
    /// The store's writer thread, which writes small single records in groups (`writer.rs`).
    pub(crate) writer: writer::Writer,
    /// The store's batch writer thread, which writes the chunks of batches in rounds
    /// (`batch_writer.rs`).
    pub(crate) batch_writer: batch_writer::BatchWriter,
    /// The key query links are signed with (`links.rs`), read or made on first use.
    pub(crate) links: links::Secret,
}

impl AppState {
    /// The state of `shared`, assembled by [`crate::assemble::state`].
    pub fn new(shared: Shared) -> AppState {
        AppState {
            shared: Arc::new(shared),
        }
    }
}

/// The whole API as a router.
pub fn app(state: AppState) -> Router {
    // The routes that take no query parameter: one given is refused (400), as the entry
    // routes refuse one they do not know (docs walkthrough: `DELETE /api/v1/b/x?dry_run=true`
    // removed the bucket, `.../run?dry_run=true` ran an enabled rule for real).
    let plain = Router::new()
        .route("/api/v1/info", get(buckets::server_info))
        .route("/api/v1/me", get(tokens::me))
        .route("/api/v1/tokens", get(tokens::list))
        .route("/api/v1/tokens/{name}/rotate", post(tokens::rotate))
        .route("/api/v1/links", post(links::create))
        .route("/api/v1/replications", get(replications::list))
        .route(
            "/api/v1/replications/{name}",
            get(replications::get_one)
                .put(replications::put)
                .delete(replications::remove),
        )
        .route("/api/v1/lifecycle/{bucket}", get(lifecycle::list))
        .route(
            "/api/v1/lifecycle/{bucket}/{name}",
            get(lifecycle::get_one)
                .put(lifecycle::put)
                .delete(lifecycle::remove),
        )
        .route(
            "/api/v1/lifecycle/{bucket}/{name}/run",
            axum::routing::post(lifecycle::run),
        )
        .route("/api/v1/b", get(buckets::list))
        .route(
            "/api/v1/b/{bucket}",
            get(buckets::get_bucket)
                .post(buckets::create)
                .put(buckets::update)
                .delete(buckets::remove),
        )
        .route_layer(middleware::from_fn(no_query));
    let api = Router::new()
        .merge(plain)
        .route("/api/v1/openapi.json", get(openapi::document))
        .route(
            "/api/v1/tokens/{name}",
            post(tokens::create).delete(tokens::remove),
        )
        .route(
            "/api/v1/b/{bucket}/{*rest}",
            axum::routing::any(entry_route),
        )
        .route("/metrics", get(metrics::scrape))
        .route("/health", get(health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), gate));
    let assets = ui::routes().layer(middleware::from_fn_with_state(state.clone(), assets_gate));
    // Query links are downloaded without a token (the link is the permission).
    let public = Router::new()
        .route(
            "/api/v1/links/{*file_name}",
            get(links::download).head(links::download),
        )
        // (Its 405 said only "Method Not Allowed": hostile probe of 2026-11-29.)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), public_gate));
    api.merge(assets).merge(public).with_state(state)
}

/// The one middleware of the API routes, from the outside in: metrics (every answer is
/// counted, refusals included), the browser rules (403 for other sites' pages and unknown
/// `Host` names, CORS, safe payload headers: `browser.rs`), the token check (401), JSON errors (axum's plain-text
/// rejections reshaped), the read-replica refusal (405). One `from_fn` layer: as four, each
/// boxed a future and cloned a boxed service per request
/// (`docs/benchmarks/write-cpu-2-2026-11-23.md`).
async fn gate(State(state): State<AppState>, req: Request, next: middleware::Next) -> Response {
    gate_with(&state, &state.limits.browser, req, next).await
}

/// [`gate`] with the browser rules of another listener (the ReductStore API's,
/// `crate::reduct`, whose address may differ from `--listen`).
pub(crate) async fn gate_with(
    state: &AppState,
    browser: &browser::BrowserPolicy,
    req: Request,
    next: middleware::Next,
) -> Response {
    let (mut req, started) = state.metrics.start(req);
    let cors = match browser.admit(&req, || state.auth.enabled()) {
        Ok(cors) => cors,
        Err(answer) => return state.metrics.finish(started, *answer),
    };
    if let Err(refused) = headers::chunked_only(req.headers()) {
        let resp = browser.finish(cors, refused.into_response());
        return state.metrics.finish(started, resp);
    }
    let resp = match state.auth.admit(&mut req) {
        Some(refused) => refused,
        None => {
            let resp = match read_only(state, &req) {
                Some(refused) => refused,
                None => next.run(req).await,
            };
            errors::json_errors(resp).await
        }
    };
    state.metrics.finish(started, browser.finish(cors, resp))
}

/// The gate of query link downloads (`links.rs`): [`gate_with`] without the token check
/// (the link is checked by its handler) and with only the `Host` rule of the browser rules
/// (a shared link is opened from other sites' pages); answers are hardened as the API's.
async fn public_gate(
    State(state): State<AppState>,
    req: Request,
    next: middleware::Next,
) -> Response {
    public_gate_with(&state, &state.limits.browser, req, next).await
}

/// [`public_gate`] with the browser rules of another listener (the ReductStore API's).
pub(crate) async fn public_gate_with(
    state: &AppState,
    browser: &browser::BrowserPolicy,
    req: Request,
    next: middleware::Next,
) -> Response {
    let (req, started) = state.metrics.start(req);
    let cors = match browser.admit_public(&req, || state.auth.enabled()) {
        Ok(cors) => cors,
        Err(answer) => return state.metrics.finish(started, *answer),
    };
    if let Err(refused) = headers::chunked_only(req.headers()) {
        let resp = browser.finish(cors, refused.into_response());
        return state.metrics.finish(started, resp);
    }
    let resp = errors::json_errors(next.run(req).await).await;
    state.metrics.finish(started, browser.finish(cors, resp))
}

/// The console's files are public: only the `Host` check applies (DNS rebinding).
async fn assets_gate(
    State(state): State<AppState>,
    req: Request,
    next: middleware::Next,
) -> Response {
    match state
        .limits
        .browser
        .admit_host(&req, || state.auth.enabled())
    {
        Ok(()) => next.run(req).await,
        Err(refused) => *refused,
    }
}

/// Everything under an entry: one route with a wildcard (entry names contain `/`), sent to
/// its handler by method and by the reserved last segment.
async fn entry_route(
    State(state): State<AppState>,
    Extension(caller): Extension<auth::Caller>,
    Path((bucket, rest)): Path<(String, String)>,
    req: Request,
) -> Result<Response, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    params::refuse_repeats(req.uri().query())?;
    if let Some((entry, name)) = split_attachment_path(&rest) {
        return attachment_route(state, caller, bucket, entry, name, req).await;
    }
    let (entry, route) = split_entry_path(&rest);
    if entry.is_empty() && route == EntryRoute::Query {
        // `/api/v1/b/{bucket}/query`: no entry may be named `query` (a reserved last
        // segment), so this is the bucket-level, multi-entry query.
        let method = req.method().clone();
        let target = records::Target {
            state,
            caller,
            bucket,
            entry: String::new(),
        };
        return match method {
            Method::GET => query::stream_bucket(target, req).await,
            Method::POST => query::stream_bucket_post(target, req).await,
            method => Err(AppError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                ErrorCode::MethodNotAllowed,
                format!("{method} is not supported on a bucket-level query: GET or POST with entries (removal goes entry by entry)"),
            )),
        };
    }
    if route == EntryRoute::Rename && req.method() != Method::PUT {
        // Bug "PUT …/e1/rename wrote a record" (issue 28): `rename` is a route word now,
        // so no record can be written to (or read from) an entry path ending in it.
        return Err(AppError::new(
            axum::http::StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::MethodNotAllowed,
            format!("{} …/rename is not supported: `rename` is reserved as an entry name's last segment; PUT /api/v1/b/{{bucket}}/{{entry}}/rename (or /api/v1/b/{{bucket}}/rename) with {{\"new_name\": \"...\"}} renames the entry (or the bucket)", req.method()),
        ));
    }
    if entry.is_empty() && route == EntryRoute::Rename {
        // `/api/v1/b/{bucket}/rename`: no entry may be named `rename`.
        return buckets::rename(state, caller, bucket, req).await;
    }
    if entry.is_empty() && route != EntryRoute::Record {
        // `…/b/{bucket}/info` (`histogram`, `batch`): a route word with no entry before
        // it. Bug (probe of 2026-11-30): answered "entry name is empty" to a client that
        // named an entry `info`.
        return Err(AppError::new(
            axum::http::StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::MethodNotAllowed,
            no_entry_before(req.method(), route),
        ));
    }
    tsblob_storage::validate_entry_name(entry)?;
    let entry = entry.to_string();
    let method = req.method().clone();
    let target = records::Target {
        state,
        caller,
        bucket,
        entry,
    };
    match (route, method) {
        (EntryRoute::Record, Method::POST | Method::PUT) => records::write(target, req).await,
        (EntryRoute::Record, Method::GET) => records::read(target, req, false).await,
        (EntryRoute::Record, Method::HEAD) => records::read(target, req, true).await,
        (EntryRoute::Record, Method::PATCH) => records::update_labels(target, req).await,
        (EntryRoute::Record, Method::DELETE) => records::remove(target, req).await,
        (EntryRoute::Info, Method::GET) => records::entry_info(target).await,
        (EntryRoute::Histogram, Method::GET) => histogram::histogram(target, req).await,
        (EntryRoute::Batch, Method::POST | Method::PUT) => batch::write(target, req).await,
        (EntryRoute::Batch, Method::PATCH) => bulk::update_batch(target, req).await,
        (EntryRoute::Batch, Method::DELETE) => bulk::remove_batch(target, req).await,
        (EntryRoute::Query, Method::PATCH) => bulk::update_where(target, req).await,
        (EntryRoute::Query, Method::GET) => query::stream(target, req).await,
        (EntryRoute::Query, Method::POST) => query::stream_post(target, req).await,
        (EntryRoute::Query, Method::DELETE) => query::remove(target, req).await,
        (EntryRoute::Rename, Method::PUT) => records::rename_entry(target, req).await,
        (route, method) => Err(AppError::new(
            axum::http::StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::MethodNotAllowed,
            not_on_route(&method, route),
        )),
    }
}

/// A method a route word does not take. Bug (new-user walkthrough): `POST …/x/info` said
/// only "POST is not supported on the Info route" to a client meaning to write to an entry
/// named `x/info`; the message says the word is reserved.
fn not_on_route(method: &Method, route: EntryRoute) -> String {
    let word = tsblob_proto::names::ENTRY_ROUTES
        .iter()
        .find(|(_, r)| *r == route)
        .map(|(w, _)| *w);
    match word {
        Some(word) => format!("{method} is not supported on …/{word}: `{word}` names a route (see docs/api.md for its methods), so it cannot be an entry name's last segment: to write a record, pick another entry name"),
        None => format!("{method} is not supported on this route: see docs/api.md for the methods of each route"),
    }
}

/// A route word right after the bucket (`…/b/{bucket}/info`): no entry is named, and the
/// word cannot be an entry name.
fn no_entry_before(method: &Method, route: EntryRoute) -> String {
    let word = tsblob_proto::names::ENTRY_ROUTES
        .iter()
        .find(|(_, r)| *r == route)
        .map_or("this word", |(w, _)| *w);
    format!("{method} /api/v1/b/{{bucket}}/{word} names no entry: `{word}` names a route of an entry (…/{{bucket}}/{{entry}}/{word}, see docs/api.md for its methods), so it cannot be an entry name or its last segment: to write a record, pick another entry name (a bucket's own info is GET /api/v1/b/{{bucket}})")
}

/// `…/{entry}/attachments[/{name}]`: an entry's attachments (`attachments.rs`).
async fn attachment_route(
    state: AppState,
    caller: auth::Caller,
    bucket: String,
    entry: &str,
    name: Option<&str>,
    req: Request,
) -> Result<Response, AppError> {
    tsblob_storage::validate_entry_name(entry)?;
    let name = name.map(str::to_string);
    let target = records::Target {
        state,
        caller,
        bucket,
        entry: entry.to_string(),
    };
    match (req.method().clone(), name) {
        (Method::GET, None) => attachments::list(target).await,
        (Method::GET, Some(n)) => attachments::read(target, n).await,
        (Method::PUT, None) => attachments::write_many(target, req).await,
        (Method::PUT, Some(n)) => attachments::write_one(target, n, req).await,
        (Method::DELETE, n) => {
            let query = req.uri().query().map(str::to_string);
            attachments::remove(target, n, query).await
        }
        (method, _) => Err(AppError::new(
            axum::http::StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::MethodNotAllowed,
            format!("{method} is not supported on attachments: GET, PUT or DELETE …/{{entry}}/attachments[/{{name}}] (see docs/api.md, Attachments)"),
        )),
    }
}

/// Health check; never needs a token. `disk.status` is `full` while writes are refused
/// for the free-space reserve, `index.status` while the index map is full. With a tier,
/// says whether the object store is reachable (`tier.available`, and `tier.error` why
/// not); the server itself is up either way (200).
#[utoipa::path(get, path = "/health", tag = "service",
    responses((status = 200, description = "The server is up; `disk.status` is `full` while the free space is below --free-space-reserve (writes refused with 507 disk_full); `index.status` is `full` while the index map (--index-map-size) is (507 index_full); `tier` (with --tier-url or --read-replica) says whether the object store is available", body = serde_json::Value)))]
pub async fn health(State(state): State<AppState>) -> axum::Json<serde_json::Value> {
    // `disk`: `full` while writes are refused for space (507 disk_full; reads go on);
    // `index`: while the index map is (507 index_full). No figures: /health needs no token
    // (GET /api/v1/info has them).
    // `disk`: `error` for a minute after the data folder refused or failed a read or write
    // (permission denied, read-only, I/O error: `crate::disk_errors`), and the whole status
    // `degraded` meanwhile.
    let part = |full: bool| serde_json::json!({"status": if full { "full" } else { "ok" }});
    let mut body = serde_json::json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "disk": part(state.store.disk_short()),
        "index": part(state.store.index_full()),
    });
    if let Some((ago, kind)) = crate::disk_errors::recent() {
        body["status"] = "degraded".into();
        body["disk"] = serde_json::json!({
            "status": "error",
            "error": format!("{kind} {} s ago: see the server log", ago.as_secs()),
        });
    }
    if let Some(t) = state.store.tier_stats() {
        // `degraded`: no call has failed yet, but one has waited for the store past what a
        // healthy store takes (a hung store said `available` until its timeout).
        let status = match (t.available, &t.stalled) {
            (false, _) => "unavailable",
            (true, Some(_)) => "degraded",
            (true, None) => "available",
        };
        body["tier"] = serde_json::json!({
            "status": status,
            "available": t.available,
            "upload_queue": t.upload_queue,
            "read_replica": !t.uploads_enabled,
            "error": if t.available { t.stalled.or(t.last_error) } else { t.last_error.or(t.stalled) },
        });
    }
    axum::Json(body)
}

/// A read replica answers reads only: GET and HEAD, and POST of a query. Anything else
/// under `/api/v1/b` is 405 with the reason.
fn read_only(state: &AppState, req: &Request) -> Option<Response> {
    let path = req.uri().path();
    // (`/q` and `/io/*/q`: the ReductStore API's query sessions, `crate::reduct`.)
    let read = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        || (*req.method() == Method::POST && (path.ends_with("/query") || path.ends_with("/q")));
    if read || !(path.starts_with("/api/v1/b") || path.starts_with("/api/v1/io/")) {
        return None;
    }
    let of = state.store.read_replica_of()?;
    Some(
        AppError::from(tsblob_storage::Error::from(
            tsblob_storage::TierError::ReadOnly(of),
        ))
        .into_response(),
    )
}

/// Refuses a query parameter on a route that takes none (a misspelt or imagined one, such
/// as `?dry_run=true` on a removal, must not be ignored).
async fn no_query(req: Request, next: middleware::Next) -> Response {
    let first = req
        .uri()
        .query()
        .and_then(|q| form_urlencoded::parse(q.as_bytes()).next());
    if let Some((k, _)) = first {
        return params::unknown(&k, "no query parameters").into_response();
    }
    next.run(req).await
}

async fn not_found(req: Request) -> AppError {
    AppError::not_found(format!(
        "no route for {} {}: routes live under /api/v1 (see /api/v1/openapi.json)",
        req.method(),
        req.uri().path()
    ))
}

async fn method_not_allowed(req: Request) -> AppError {
    AppError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::MethodNotAllowed,
        format!(
            "{} is not supported on {}: see /api/v1/openapi.json for the methods of each route",
            req.method(),
            req.uri().path()
        ),
    )
}
