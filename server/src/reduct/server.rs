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
    let defaults = Settings::from(&ctx.state.store.options().default_bucket);
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

/// `GET /api/v1/me`: the caller's token in ReductStore's shape (never its value).
pub async fn me(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, AppError> {
    let created = caller.name.as_deref().and_then(|name| {
        ctx.state
            .auth
            .list()
            .into_iter()
            .find(|t| t.name == name)
            .map(|t| t.created)
    });
    Ok(Json(super::server::token_json(
        caller.name.as_deref().unwrap_or("init-token"),
        caller.full_access,
        &caller.read,
        &caller.write,
        created,
        created.is_none(),
    ))
    .into_response())
}

/// A token as ReductStore writes it.
pub fn token_json(
    name: &str,
    full_access: bool,
    read: &[String],
    write: &[String],
    created_us: Option<u64>,
    provisioned: bool,
) -> serde_json::Value {
    json!({
        "name": name,
        "value": "",
        "created_at": rfc3339(created_us.unwrap_or(0)),
        "permissions": {"full_access": full_access, "read": read, "write": write},
        "is_provisioned": provisioned,
        "expires_at": null,
        "ttl": null,
        "last_access": null,
        "ip_allowlist": [],
        "is_expired": false,
    })
}

/// Microseconds since the epoch as RFC 3339 (`created_at`).
pub fn rfc3339(us: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(us);
    humantime::format_rfc3339_micros(t).to_string()
}
