//! ReductStore's HTTP API (v1, as of ReductStore 1.21) over the same engine, so that
//! ReductStore clients (reduct-py, reduct-js, reduct-cli...) work against tsblob and a
//! record written through one API reads the same through the other (`docs/reductstore.md`).
//!
//! Served on its own listener (`--reductstore-listen`) and under a path prefix of the main
//! one (`--reductstore-prefix`), both off by default. Every request goes through the native
//! API's middleware ([`crate::http::gate_with`]: metrics, browser rules, tokens, read
//! replica), and the handlers reuse the native ones (single records, removals) or the same
//! bounds (body limits, memory budget, stream slots) — no second copy of either. What is
//! ReductStore's own lives here: its routes, its JSON documents and headers (`wire.rs`),
//! its batch protocols (`batch.rs`) and its query sessions (`query.rs`). Errors leave as
//! ReductStore sends them: the status, `x-reduct-error` and `{"detail": ...}`.

pub mod attachments;
pub mod batch;
pub mod buckets;
pub use crate::reduct_header as header;
pub mod lifecycle;
pub mod links;
pub mod query;
pub mod records;
pub mod replications;
pub mod server;
pub mod tokens;
pub mod wire;

use std::sync::Arc;
use tsblob_proto::ErrorCode;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::{Extension, Router};

use crate::http::auth::Caller;
use crate::http::browser::BrowserPolicy;
use crate::http::{AppError, AppState};

/// What the ReductStore routes share: the native state and the query sessions.
pub struct Reduct {
    pub state: AppState,
    pub sessions: Arc<query::Sessions>,
}

/// The context of one router: the shared part and the browser rules of its listener.
#[derive(Clone)]
pub struct Ctx {
    pub reduct: Arc<Reduct>,
    browser: Arc<BrowserPolicy>,
}

impl std::ops::Deref for Ctx {
    type Target = Reduct;
    fn deref(&self) -> &Reduct {
        &self.reduct
    }
}

impl Reduct {
    pub fn new(state: AppState, limits: query::SessionLimits) -> Arc<Reduct> {
        Arc::new(Reduct {
            state,
            sessions: Arc::new(query::Sessions::new(limits)),
        })
    }

    /// The routes, with the browser rules of the listener they are served on.
    pub fn router(self: &Arc<Self>, browser: BrowserPolicy) -> Router {
        let ctx = Ctx {
            reduct: self.clone(),
            browser: Arc::new(browser),
        };
        Router::new()
            .route("/api/v1/info", get(server::info))
            .route("/api/v1/list", get(server::list))
            .route("/api/v1/me", get(tokens::me))
            .route("/api/v1/tokens", get(tokens::list))
            .route("/api/v1/replications", get(replications::list))
            .route(
                "/api/v1/replications/{name}",
                any(replications::replication_route),
            )
            .route(
                "/api/v1/replications/{name}/mode",
                axum::routing::patch(replications::set_mode),
            )
            .route("/api/v1/lifecycles", get(lifecycle::list))
            .route("/api/v1/lifecycles/{name}", any(lifecycle::route))
            .route(
                "/api/v1/lifecycles/{name}/mode",
                axum::routing::patch(lifecycle::set_mode),
            )
            .route("/api/v1/tokens/{name}", any(tokens::token_route))
            .route(
                "/api/v1/tokens/{name}/rotate",
                axum::routing::post(tokens::rotate),
            )
            .route("/api/v1/b/{bucket}", any(buckets::bucket_route))
            .route("/api/v1/b/{bucket}/{*rest}", any(entry_route))
            .route("/api/v1/io/{bucket}/{op}", any(io_route))
            .route(
                "/api/v1/links/{*file_name}",
                get(links::download)
                    .head(links::download)
                    .post(links::create),
            )
            .fallback(not_found)
            .layer(middleware::from_fn_with_state(ctx.clone(), gate))
            .with_state(ctx)
    }
}

/// Probes answer without a token, as ReductStore's do (only the `Host` rule applies);
/// everything else goes through the native middleware, then its errors are reshaped into
/// ReductStore's and every answer says the API level (`x-reduct-api`).
async fn gate(State(ctx): State<Ctx>, req: Request, next: middleware::Next) -> Response {
    let path = req.uri().path();
    let mut resp = if !path.starts_with("/api/v1/") {
        // ReductStore answers a path outside its API 404 before any token check (reduct-py's
        // `test__bad_url_server_exists`: a client given a wrong URL hears "Not found").
        let mut resp = match ctx.browser.admit_host(&req, || ctx.state.auth.enabled()) {
            Ok(()) => not_found_outside_api(req.method(), path),
            Err(refused) => reshape_error(*refused).await,
        };
        crate::http::browser::harden(resp.headers_mut());
        resp
    } else if path == "/api/v1/alive" || path == "/api/v1/ready" {
        let mut resp = match ctx.browser.admit_host(&req, || ctx.state.auth.enabled()) {
            Ok(()) if matches!(*req.method(), Method::GET | Method::HEAD) => {
                StatusCode::OK.into_response()
            }
            Ok(()) => wire::error_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "GET or HEAD only on a probe",
            ),
            Err(refused) => reshape_error(*refused).await,
        };
        crate::http::browser::harden(resp.headers_mut());
        resp
    } else if links::is_download(&req) {
        // A query link is downloaded without a token (the link is the permission).
        let resp = crate::http::public_gate_with(&ctx.state, &ctx.browser, req, next).await;
        reshape_error(resp).await
    } else {
        let resp = crate::http::gate_with(&ctx.state, &ctx.browser, req, next).await;
        reshape_error(resp).await
    };
    resp.headers_mut()
        .insert("x-reduct-api", HeaderValue::from_static(wire::API_VERSION));
    resp
}

/// A native error answer (`{"error": {"code", "message"}}`) as ReductStore's, in
/// ReductStore's words where its clients read them ([`wire::reduct_message`]); other
/// answers pass unchanged. Its other headers (`Retry-After`, CORS) are kept.
async fn reshape_error(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error())
        || resp.headers().contains_key(wire::ERROR_HEADER)
    {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    // Error documents are small; anything longer is not one of ours.
    let bytes = axum::body::to_bytes(body, 64 << 10)
        .await
        .unwrap_or_default();
    let native = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
    let code = native
        .as_ref()
        .and_then(|v| v["error"]["code"].as_str())
        .unwrap_or_default();
    let native_message = native.as_ref().and_then(|v| v["error"]["message"].as_str());
    let status = wire::reduct_status(code, native_message.unwrap_or_default(), status);
    parts.status = status;
    let message = native_message
        .map(|m| wire::reduct_message(code, m).unwrap_or_else(|| m.to_string()))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
    let message = if message.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        message
    };
    let fresh = wire::error_response(status, &message);
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    for (k, v) in fresh.headers() {
        parts.headers.insert(k.clone(), v.clone());
    }
    let (_, body) = fresh.into_parts();
    Response::from_parts(parts, body)
}

/// 404 for a path outside `/api/v1/`: ReductStore's `Not found` in `x-reduct-error` (what
/// clients show), and what is wrong in the body.
fn not_found_outside_api(method: &Method, path: &str) -> Response {
    let mut resp = wire::error_response(
        StatusCode::NOT_FOUND,
        &format!("Not found: {method} {path} is outside ReductStore's API (/api/v1/...): check the client's URL"),
    );
    resp.headers_mut()
        .insert(wire::ERROR_HEADER, HeaderValue::from_static("Not found"));
    resp
}

async fn not_found(req: Request) -> AppError {
    AppError::not_found(format!(
        "no ReductStore route for {} {} (tsblob speaks ReductStore's API v1: see docs/reductstore.md for what is supported)",
        req.method(),
        req.uri().path()
    ))
}

pub(crate) fn method_not_allowed(method: &Method, what: &str) -> AppError {
    AppError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::MethodNotAllowed,
        format!("{method} is not supported on {what}"),
    )
}

/// An empty 200, ReductStore's answer to writes, updates and removals.
pub(crate) fn ok_empty() -> Response {
    Response::new(Body::empty())
}

/// Everything under `/api/v1/b/{bucket}/`: an entry's records, or the reserved last
/// segments `batch`, `q` and `rename` (entry names may contain `/`).
async fn entry_route(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
    Path((bucket, rest)): Path<(String, String)>,
    req: Request,
) -> Result<Response, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    crate::http::params::refuse_repeats(req.uri().query())?;
    let method = req.method().clone();
    if rest == "rename" && method == Method::PUT {
        return buckets::rename(&ctx, &caller, &bucket, req).await;
    }
    let (entry, route) = match rest.rsplit_once('/') {
        Some((entry, last @ ("batch" | "q" | "rename"))) => (entry.to_string(), Some(last)),
        _ => (rest.clone(), None),
    };
    // `<entry>/$meta`, the entry's attachments as ReductStore keeps them: batches (writes
    // and updates, as ReductStore's replication sends them) go to `batch.rs`, v1 queries
    // and their batch reads (reduct-rs and rcli read attachments so) to `query.rs`; both
    // map them onto the attachments.
    let meta_route = matches!(
        (route, &method),
        (
            Some("batch"),
            &Method::POST | &Method::PATCH | &Method::GET | &Method::HEAD
        ) | (Some("q"), &Method::GET | &Method::POST)
    ) && attachments::meta_parent(&entry)
        .is_some_and(|p| tsblob_storage::validate_entry_name(p).is_ok());
    if let (false, Err(e)) = (meta_route, tsblob_storage::validate_entry_name(&entry)) {
        // A read of an entry tsblob cannot hold finds nothing (404, as ReductStore answers
        // a missing entry); a write is refused with the name rules (422).
        let read = matches!(
            (route, &method),
            (None | Some("batch"), &Method::GET | &Method::HEAD)
                | (Some("q"), &Method::GET | &Method::POST)
        );
        return Err(if read {
            query::entry_not_held(&bucket, &entry)
        } else {
            e.into()
        });
    }
    let target = crate::http::records::Target {
        state: ctx.state.clone(),
        caller,
        bucket,
        entry,
    };
    match (route, method) {
        (None, Method::POST) => records::write(target, req).await,
        (None, Method::GET) => records::read(&ctx, target, req, false).await,
        (None, Method::HEAD) => records::read(&ctx, target, req, true).await,
        (None, Method::PATCH) => records::update(target, req).await,
        (None, Method::DELETE) => records::remove(target, req).await,
        (Some("batch"), Method::POST) => batch::write_v1(target, req).await,
        (Some("batch"), Method::GET) => query::read_v1(&ctx, target, req, false).await,
        (Some("batch"), Method::HEAD) => query::read_v1(&ctx, target, req, true).await,
        (Some("batch"), Method::PATCH) => batch::update_v1(target, req).await,
        (Some("batch"), Method::DELETE) => batch::remove_v1(target, req).await,
        (Some("q"), Method::GET | Method::POST) => query::open_v1(&ctx, target, req).await,
        (Some("q"), Method::DELETE) => query::remove_v1(target, req).await,
        (Some("rename"), Method::PUT) => buckets::rename_entry(target, req).await,
        (route, method) => Err(method_not_allowed(
            &method,
            &format!("the {} route", route.unwrap_or("record")),
        )),
    }
}

/// `/api/v1/io/{bucket}/{write|update|remove|q|read}`.
async fn io_route(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
    Path((bucket, op)): Path<(String, String)>,
    req: Request,
) -> Result<Response, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    let method = req.method().clone();
    let target = crate::http::records::Target {
        state: ctx.state.clone(),
        caller,
        bucket,
        entry: String::new(),
    };
    let (state, caller, bucket) = (&target.state, &target.caller, target.bucket.as_str());
    match (op.as_str(), method) {
        ("write", Method::POST) => batch::write_v2(state, caller, bucket, req).await,
        ("update", Method::PATCH) => batch::update_v2(state, caller, bucket, req).await,
        ("remove", Method::DELETE) => batch::remove_v2(state, caller, bucket, req).await,
        ("q", Method::POST) => query::open_io(&ctx, target, req).await,
        ("read", Method::GET) => query::read_io(&ctx, target, req, false).await,
        ("read", Method::HEAD) => query::read_io(&ctx, target, req, true).await,
        (op, method) => Err(method_not_allowed(&method, &format!("/io/{{bucket}}/{op}"))),
    }
}
