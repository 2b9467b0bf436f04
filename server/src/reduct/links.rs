//! Query links in ReductStore's shapes (`POST /api/v1/links/{file_name}`, and `GET` of
//! the link without a token): the native links of `crate::http::links`, made from
//! ReductStore's `QueryLinkCreateRequest` and answered with ReductStore's record headers
//! (`x-reduct-time`, `x-reduct-entry`, `x-reduct-label-*`).
//!
//! ReductStore 1.21 encrypts the query into the link with a key derived from the creating
//! token's value; tsblob signs it with the server's link secret and ties it to the token by
//! a fingerprint (`docs/reductstore.md`, what differs). Either way a link stops working with
//! its token, and the URL is what a client hands on.

use axum::extract::{OriginalUri, Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use tsblob_proto::ErrorCode;

use super::query::QueryJson;
use super::Ctx;
use crate::http::auth::Caller;
use crate::http::links::{self, CreateLink, RecordAnswer, RecordRef};
use crate::http::records::Target;
use crate::http::AppError;

/// ReductStore's `QueryLinkCreateRequest`.
#[derive(Debug, Deserialize)]
struct CreateRequest {
    bucket: String,
    #[serde(default)]
    entry: String,
    /// Before API 1.19: the n-th record of the query.
    index: Option<u64>,
    record_entry: Option<String>,
    record_timestamp: Option<u64>,
    query: serde_json::Value,
    /// Seconds since the Unix epoch.
    expire_at: u64,
    base_url: Option<String>,
}

fn unprocessable(message: &str) -> AppError {
    AppError::unprocessable(ErrorCode::InvalidLink, message)
}

/// `POST /api/v1/links/{file_name}` (a token that may read the bucket): `{"link"}`.
pub async fn create(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
    Path(file_name): Path<String>,
    req: Request,
) -> Result<Response, AppError> {
    // The path this API is served under (`--reductstore-prefix`), for the link's base.
    let prefix = req
        .extensions()
        .get::<OriginalUri>()
        .and_then(|o| o.path().strip_suffix(req.uri().path()).map(str::to_string))
        .unwrap_or_default();
    let base = links::base_of(&ctx.state, &req, &prefix)?;
    let r: CreateRequest = crate::http::body::json(req.into_body(), 1 << 20, &ctx.state.limits, |e| {
        AppError::unprocessable(
            ErrorCode::InvalidLink,
            format!("the body must be ReductStore's query link request ({e}): {{\"bucket\", \"entry\", \"record_entry\", \"record_timestamp\", \"query\": {{\"query_type\": \"QUERY\"}}, \"expire_at\"}}"),
        )
    })
    .await?;
    let q: QueryJson = serde_json::from_value(r.query.clone()).map_err(|e| {
        unprocessable(&format!(
            "the query is not ReductStore's query document: {e}"
        ))
    })?;
    if q.query_type.as_deref().unwrap_or("QUERY") != "QUERY" {
        return Err(unprocessable(
            "Only 'Query' type is supported for query links",
        ));
    }
    // What tsblob cannot run is refused now, as a query would be (`ext`, deprecated
    // parameters, a condition that does not parse).
    q.engine_query()?;
    let entries = match q.entries.clone().filter(|e| !e.is_empty()) {
        Some(list) => list,
        None if !r.entry.is_empty() => vec![r.entry.clone()],
        None => {
            return Err(unprocessable(
                "the link needs an entry: give entry or query.entries",
            ))
        }
    };
    let (index, record) = match (r.record_entry, r.record_timestamp, r.index) {
        (Some(entry), Some(ts), _) => (None, Some(RecordRef { entry, ts })),
        (None, None, Some(i)) => (Some(i), None),
        _ => {
            return Err(unprocessable(
                "Both 'record_entry' and 'record_timestamp' must be provided in payload",
            ))
        }
    };
    let spec = CreateLink {
        bucket: r.bucket,
        entries: Some(entries),
        start: q.start,
        stop: q.stop,
        when: r.query.get("when").filter(|w| !w.is_null()).cloned(),
        limit: q.limit,
        strict: q.strict.unwrap_or(false),
        index,
        record,
        expires_at: Some(r.expire_at.saturating_mul(1_000_000)),
        file_name: Some(file_name),
        base_url: r.base_url,
        ..CreateLink::default()
    };
    let made = links::make(&ctx.state, &caller, spec, base).await?;
    Ok(Json(serde_json::json!({ "link": made.link })).into_response())
}

/// `GET`/`HEAD` of a link (no token).
pub async fn download(
    State(ctx): State<Ctx>,
    Path(file_name): Path<String>,
    req: Request,
) -> Result<Response, AppError> {
    let opened = links::open(&ctx.state, &file_name, req.uri().query())?;
    let head = req.method() == axum::http::Method::HEAD;
    links::serve(&ctx.state, opened, head, Reduct(ctx.clone())).await
}

/// A picked record with ReductStore's headers (`super::records::read`).
struct Reduct(Ctx);

impl RecordAnswer for Reduct {
    async fn read(&self, t: Target, req: Request, head: bool) -> Result<Response, AppError> {
        super::records::read(&self.0, t, req, head).await
    }
}

/// Whether a request is a link download: public, as ReductStore's.
pub(crate) fn is_download(req: &Request) -> bool {
    matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    ) && req.uri().path().starts_with("/api/v1/links/")
}
