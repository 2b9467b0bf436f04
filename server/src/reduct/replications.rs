//! Replications and lifecycle rules in ReductStore's shapes. Listing works (tsblob's own
//! replication tasks, `crate::replication`, as ReductStore's `ReplicationInfo`; tsblob has
//! no lifecycle rules, so that list is empty); creating, changing and removing them through
//! this API is refused with the reason: tsblob's tasks replicate to tsblob servers over its
//! own protocol (`docs/replication.md`), manage them on the main port.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;
use tsblob_proto::ErrorCode;

use super::Ctx;
use crate::http::auth::Caller;
use crate::http::AppError;

/// `GET /api/v1/replications`.
pub async fn list(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, AppError> {
    caller.require_admin("list replication tasks")?;
    let mut out = Vec::new();
    for name in ctx.state.replications.names() {
        match ctx.state.replications.info(&name).await {
            Ok(i) => out.push(json!({
                "name": i.name,
                "is_active": !matches!(i.status.phase, crate::replication::Phase::Paused),
                "is_provisioned": false,
                "mode": match i.settings.mode {
                    crate::replication::Mode::Enabled => "enabled",
                    crate::replication::Mode::Paused => "paused",
                },
                "pending_records": i.status.pending_records,
            })),
            // Removed while listing.
            Err(e) => match AppError::from(e) {
                e if e.status == StatusCode::NOT_FOUND => {}
                e => return Err(e),
            },
        }
    }
    Ok(Json(json!({ "replications": out })).into_response())
}

/// `GET /api/v1/lifecycles`: tsblob has none (retention is a bucket's `max_age`).
pub async fn lifecycles(Extension(caller): Extension<Caller>) -> Result<Response, AppError> {
    caller.require_admin("list lifecycle rules")?;
    Ok(Json(json!({ "lifecycles": [] })).into_response())
}

/// Anything else under `/replications/{name}` or `/lifecycles/{name}`.
pub async fn refuse(req: Request) -> AppError {
    let what = if req.uri().path().contains("/lifecycles/") {
        "lifecycle rules are not supported by tsblob (age-based retention is a bucket setting, max_age, on tsblob's own API)"
    } else {
        "managing replications through the ReductStore API is not supported: tsblob replicates to tsblob servers with its own tasks (docs/replication.md), managed on the main port"
    };
    AppError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::Unsupported,
        format!("{what}; nothing was changed"),
    )
}
