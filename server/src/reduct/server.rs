//! Server-wide routes: `/info`, `/list`, `/me` (the probes `/alive` and `/ready` are
//! answered by the gate, `mod.rs`).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;

use super::wire::{self, BucketJson, Settings};
use super::Ctx;
use crate::http::auth::Caller;
use crate::http::errors::blocking;
use crate::http::AppError;

/// `GET /api/v1/info`: ReductStore's `ServerInfo` (usage, record range, bucket defaults).
/// As the native `/api/v1/info`, it needs a token that reaches every bucket.
pub async fn info(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, AppError> {
    caller.require_all_buckets("read the server's info")?;
    let store = ctx.state.store.clone();
    let buckets = blocking(move || Ok(store.list_buckets()?)).await?;
    let defaults = Settings::from(&wire::bucket_defaults(
        &ctx.state.store.options().default_bucket,
    ));
    Ok(Json(json!({
        "version": wire::SERVER_VERSION,
        "instance_name": "tsblob",
        "instance_role": "STANDALONE",
        "bucket_count": buckets.len(),
        "usage": buckets.iter().map(|b| b.size).sum::<u64>(),
        "uptime": ctx.state.started.elapsed().as_secs(),
        "oldest_record": buckets.iter().filter_map(|b| b.oldest).min().unwrap_or(u64::MAX),
        "latest_record": buckets.iter().filter_map(|b| b.latest).max().unwrap_or(0),
        "defaults": {"bucket": defaults},
        "license": null,
    }))
    .into_response())
}

/// `GET /api/v1/list`: the buckets the caller may read.
pub async fn list(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, AppError> {
    let store = ctx.state.store.clone();
    let buckets = blocking(move || Ok(store.list_buckets()?)).await?;
    let buckets: Vec<BucketJson> = buckets
        .iter()
        .filter(|b| caller.can_read(&b.name))
        .map(BucketJson::from)
        .collect();
    Ok(Json(json!({ "buckets": buckets })).into_response())
}

/// A token as ReductStore writes it (`created_at`: when its value was made, by creation or
/// rotation; `ttl` in seconds; times RFC 3339).
pub fn token_json(t: &crate::http::tokens::TokenJson, provisioned: bool) -> serde_json::Value {
    json!({
        "name": t.name,
        "value": "",
        "created_at": rfc3339(t.rotated.or(t.created).unwrap_or(0)),
        "permissions": {"full_access": t.full_access, "read": t.read, "write": t.write},
        "is_provisioned": provisioned,
        "expires_at": t.expires_at.map(rfc3339),
        "ttl": t.ttl,
        "last_access": t.last_access.map(rfc3339),
        "ip_allowlist": t.ip_allowlist,
        "is_expired": t.is_expired,
    })
}

/// Microseconds since the epoch as RFC 3339 (`created_at`).
pub fn rfc3339(us: u64) -> String {
    crate::http::auth::rfc3339(us)
}
