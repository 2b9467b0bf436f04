//! `/api/v1/replications`: replication tasks (admin only). The destination token is
//! accepted, stored and never answered (`dst_token_set` says whether there is one).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::body::{json, not_like};
use super::errors::{AppError, ErrorBody};
use super::AppState;
use crate::replication::{TaskInfo, TaskSpec};

/// Every task.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReplicationList {
    pub replications: Vec<TaskInfo>,
}

/// Lists the replication tasks with their status.
#[utoipa::path(get, path = "/api/v1/replications", tag = "replication",
    responses((status = 200, body = ReplicationList), (status = 403, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<ReplicationList>, AppError> {
    caller.require_admin("list replication tasks")?;
    let mut out = Vec::new();
    for name in state.replications.names() {
        match state.replications.info(&name).await {
            Ok(i) => out.push(i),
            // Removed while listing.
            Err(e) => match AppError::from(e) {
                e if e.status == StatusCode::NOT_FOUND => {}
                e => return Err(e),
            },
        }
    }
    Ok(Json(ReplicationList { replications: out }))
}

/// A task's settings (without the destination token) and status.
#[utoipa::path(get, path = "/api/v1/replications/{name}", tag = "replication",
    params(("name" = String, Path)),
    responses((status = 200, body = TaskInfo), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub async fn get_one(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<TaskInfo>, AppError> {
    caller.require_admin("read replication tasks")?;
    Ok(Json(state.replications.info(&name).await?))
}

/// Creates (201) or replaces (200) a task. A replaced task keeps its position if its source
/// bucket is the same, and its destination token if none is given (`""` removes it).
#[utoipa::path(put, path = "/api/v1/replications/{name}", tag = "replication",
    params(("name" = String, Path)), request_body = TaskSpec,
    responses((status = 201, body = TaskInfo), (status = 200, body = TaskInfo),
              (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody, description = "bucket_not_found: the source bucket"),
              (status = 409, body = ErrorBody, description = "too_many_tasks"),
              (status = 422, body = ErrorBody)))]
pub async fn put(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Body,
) -> Result<Response, AppError> {
    caller.require_admin("manage replication tasks")?;
    let spec: TaskSpec = json(
        body,
        1 << 20,
        &state.limits,
        not_like(
            r#"{"src_bucket": "cams", "dst_url": "http://cloud:8686", "dst_bucket": "cams", "dst_token": "...", "entries": ["front/*"], "when": {"&score": {"$gt": 5}}, "mode": "enabled", "from": 0}"#,
        ),
    )
    .await?;
    let created = state.replications.put(&name, spec).await?;
    let info = state.replications.info(&name).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(info)).into_response())
}

/// Removes a task (what it sent stays at the destination).
#[utoipa::path(delete, path = "/api/v1/replications/{name}", tag = "replication",
    params(("name" = String, Path)),
    responses((status = 200, body = serde_json::Value), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub async fn remove(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, AppError> {
    caller.require_admin("manage replication tasks")?;
    state.replications.remove(&name).await?;
    Ok(Json(serde_json::json!({"removed": name})))
}
