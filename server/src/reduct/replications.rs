//! Replications in ReductStore's shapes (`/api/v1/replications`: list, and GET, POST, PUT,
//! DELETE of `{name}`, `PATCH {name}/mode`), mapped onto tsblob's own replication tasks
//! (`crate::replication`): one implementation, two APIs. A task created here sends with
//! ReductStore's batch protocol (`dst_api: reductstore`: to a ReductStore server, or a
//! tsblob's `--reductstore-listen`); ReductStore's `dst_host` is tsblob's `dst_url`.
//! Lifecycles are `lifecycle.rs`.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tsblob_proto::ErrorCode;

use super::Ctx;
use crate::http::auth::Caller;
use crate::http::AppError;
use crate::replication::{Compression, DstApi, Mode, Phase, TaskInfo, TaskSpec};

/// ReductStore's `ReplicationSettings` (reduct-py `ReplicationSettings`, 1.21).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RsSettings {
    pub src_bucket: String,
    pub dst_bucket: String,
    pub dst_host: String,
    #[serde(default)]
    pub dst_token: Option<String>,
    #[serde(default)]
    pub entries: Vec<String>,
    #[serde(default)]
    pub dst_prefix: String,
    #[serde(default)]
    pub when: Option<Value>,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default = "none")]
    pub compression: String,
}

fn none() -> String {
    "none".to_string()
}

/// ReductStore's `ReplicationInfo`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RsInfo {
    pub name: String,
    pub mode: Mode,
    pub is_active: bool,
    pub is_provisioned: bool,
    pub pending_records: u64,
}

fn rs_info(i: &TaskInfo) -> RsInfo {
    RsInfo {
        name: i.name.clone(),
        mode: i.settings.mode,
        // ReductStore: sending (enabled or paused) and the destination reachable.
        is_active: i.settings.mode != Mode::Disabled
            && !matches!(i.status.phase, Phase::Backoff | Phase::Disabled),
        is_provisioned: false,
        pending_records: i.status.pending_records,
    }
}

fn rs_settings(i: &TaskInfo) -> RsSettings {
    let s = &i.settings;
    RsSettings {
        src_bucket: s.src_bucket.clone(),
        dst_bucket: s.dst_bucket.clone(),
        dst_host: s.dst_url.clone(),
        // Never answered, as ReductStore masks it.
        dst_token: None,
        entries: s.entries.clone(),
        dst_prefix: s.dst_prefix.clone(),
        when: s.when.clone(),
        mode: s.mode,
        compression: match s.compression {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            // `auto` compresses when it pays: zstd is what may travel.
            Compression::Zstd | Compression::Auto => "zstd",
        }
        .to_string(),
    }
}

/// ReductStore's settings as a task of tsblob's; `old`: the task they replace (its
/// destination API and backfill start are kept).
fn to_spec(name: &str, rs: RsSettings, old: Option<&TaskSpec>) -> Result<TaskSpec, AppError> {
    let compression = match rs.compression.as_str() {
        "none" => Compression::None,
        "zstd" => Compression::Zstd,
        "gzip" => Compression::Gzip,
        other => {
            return Err(AppError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidReplication,
                format!(
                "replication {name:?}: compression {other:?}: use \"none\", \"zstd\" or \"gzip\""
            ),
            ))
        }
    };
    Ok(TaskSpec {
        src_bucket: rs.src_bucket,
        dst_url: rs.dst_host,
        dst_bucket: rs.dst_bucket,
        dst_token: rs.dst_token,
        dst_ca: None,
        entries: rs.entries,
        when: rs.when.filter(|w| !w.is_null()),
        mode: rs.mode,
        from: old.and_then(|o| o.from),
        dst_prefix: rs.dst_prefix,
        dst_api: old.map_or(DstApi::Reductstore, |o| o.dst_api),
        compression,
    })
}

async fn json_body<T: serde::de::DeserializeOwned>(
    ctx: &Ctx,
    body: Body,
    example: &str,
) -> Result<T, AppError> {
    crate::http::body::json(body, 1 << 20, &ctx.state.limits, |e| {
        AppError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::InvalidReplication,
            format!("the body must be JSON like {example}: {e}"),
        )
    })
    .await
}

const SETTINGS_EXAMPLE: &str = r#"{"src_bucket": "cams", "dst_bucket": "cams", "dst_host": "http://cloud:8383", "dst_token": "...", "entries": ["cam*", "!cam-debug"], "dst_prefix": "", "when": null, "mode": "enabled", "compression": "none"}"#;

fn missing(name: &str) -> AppError {
    AppError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::ReplicationNotFound,
        format!("Replication '{name}' does not exist"),
    )
}

/// `GET /api/v1/replications`.
pub async fn list(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, AppError> {
    caller.require_admin("list replication tasks")?;
    let mut out = Vec::new();
    for name in ctx.state.replications.names() {
        match ctx.state.replications.info(&name).await {
            Ok(i) => out.push(rs_info(&i)),
            // Removed while listing.
            Err(e) => match AppError::from(e) {
                e if e.status == StatusCode::NOT_FOUND => {}
                e => return Err(e),
            },
        }
    }
    Ok(Json(json!({ "replications": out })).into_response())
}

/// `GET|POST|PUT|DELETE /api/v1/replications/{name}`.
pub async fn replication_route(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    req: Request,
) -> Result<Response, AppError> {
    caller.require_admin("manage replication tasks")?;
    let repl = &ctx.state.replications;
    let method = req.method().clone();
    match method.as_str() {
        "GET" => {
            let i = repl.info(&name).await.map_err(|e| not_found_as(e, &name))?;
            let c = &i.status.counters;
            let mut errors = serde_json::Map::new();
            if let Some(last) = &c.last_error {
                // tsblob counts errors, not per status: one entry, key 0.
                errors.insert(
                    "0".into(),
                    json!({"count": c.errors, "last_message": last.message}),
                );
            }
            Ok(Json(json!({
                "info": rs_info(&i),
                "settings": rs_settings(&i),
                "diagnostics": {"hourly": {
                    "ok": c.sent_records + c.existing_records,
                    "errored": c.errors,
                    "errors": errors,
                }},
            }))
            .into_response())
        }
        "POST" => {
            let rs: RsSettings = json_body(&ctx, req.into_body(), SETTINGS_EXAMPLE).await?;
            if repl.exists(&name) {
                return Err(AppError::new(
                    StatusCode::CONFLICT,
                    ErrorCode::ReplicationExists,
                    format!("Replication '{name}' already exists"),
                ));
            }
            let spec = to_spec(&name, rs, None)?;
            ctx.state.replications.put(&name, spec).await?;
            Ok(StatusCode::OK.into_response())
        }
        "PUT" => {
            let rs: RsSettings = json_body(&ctx, req.into_body(), SETTINGS_EXAMPLE).await?;
            let old = repl.spec(&name).map_err(|e| not_found_as(e, &name))?;
            let spec = to_spec(&name, rs, Some(&old))?;
            ctx.state.replications.put(&name, spec).await?;
            Ok(StatusCode::OK.into_response())
        }
        "DELETE" => {
            repl.remove(&name)
                .await
                .map_err(|e| not_found_as(e, &name))?;
            Ok(StatusCode::OK.into_response())
        }
        _ => Err(AppError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::MethodNotAllowed,
            "GET, POST, PUT or DELETE on /api/v1/replications/{name}".to_string(),
        )),
    }
}

/// `PATCH /api/v1/replications/{name}/mode` with `{"mode": "enabled"|"paused"|"disabled"}`:
/// the mode alone, the other settings (and the token) kept.
pub async fn set_mode(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Body,
) -> Result<Response, AppError> {
    caller.require_admin("manage replication tasks")?;
    #[derive(Deserialize)]
    struct ModeBody {
        mode: Mode,
    }
    let m: ModeBody = json_body(&ctx, body, r#"{"mode": "paused"}"#).await?;
    let mut spec = ctx
        .state
        .replications
        .spec(&name)
        .map_err(|e| not_found_as(e, &name))?;
    spec.mode = m.mode;
    ctx.state.replications.put(&name, spec).await?;
    Ok(StatusCode::OK.into_response())
}

/// A missing task in ReductStore's words.
fn not_found_as(e: crate::replication::ReplicationError, name: &str) -> AppError {
    match e {
        crate::replication::ReplicationError::NotFound(_) => missing(name),
        e => e.into(),
    }
}
