//! Tokens in ReductStore's shapes (`/api/v1/tokens`), over tsblob's own token store
//! (`crate::http::auth`): a token created through either API works through both.

use axum::extract::{Path, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;
use tsblob_proto::ErrorCode;

use super::server::{rfc3339, token_json};
use super::{method_not_allowed, ok_empty, Ctx};
use crate::http::auth::Caller;
use crate::http::body::BodyChunks;
use crate::http::errors::blocking;
use crate::http::AppError;

/// `GET /api/v1/tokens`: the stored tokens (the `--token` admin token is not one).
pub async fn list(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, AppError> {
    caller.require_admin("list tokens")?;
    let mut tokens = ctx.state.auth.list();
    tokens.sort_by(|a, b| a.name.cmp(&b.name));
    let tokens: Vec<serde_json::Value> = tokens
        .iter()
        .map(|t| json!({"name": t.name, "created_at": rfc3339(t.created), "is_provisioned": false}))
        .collect();
    Ok(Json(json!({ "tokens": tokens })).into_response())
}

/// ReductStore's permissions document.
#[derive(Debug, Default, Deserialize)]
struct Permissions {
    #[serde(default)]
    full_access: bool,
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    write: Vec<String>,
}

/// A creation request: `{"permissions": {...}, "expires_at", "ttl", "ip_allowlist"}`
/// (API 1.19 on), or the permissions alone (before).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum CreateRequest {
    Full {
        permissions: Permissions,
        #[serde(default)]
        expires_at: Option<serde_json::Value>,
        #[serde(default)]
        ttl: Option<serde_json::Value>,
        #[serde(default)]
        ip_allowlist: Vec<String>,
    },
    Bare(Permissions),
}

fn unsupported(what: &str) -> AppError {
    AppError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::Unsupported,
        format!("{what} is not supported by tsblob's tokens: nothing was changed (see docs/reductstore.md)"),
    )
}

/// `GET`, `POST` (create), `DELETE /api/v1/tokens/{name}`.
pub async fn token_route(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    req: Request,
) -> Result<Response, AppError> {
    let auth = ctx.state.auth.clone();
    match req.method().clone() {
        Method::GET => {
            caller.require_admin("read tokens")?;
            let t = auth
                .list()
                .into_iter()
                .find(|t| t.name == name)
                .ok_or_else(|| {
                    AppError::new(
                        StatusCode::NOT_FOUND,
                        ErrorCode::TokenNotFound,
                        format!("there is no token named {name:?}"),
                    )
                })?;
            Ok(Json(token_json(
                &t.name,
                t.full_access,
                &t.read,
                &t.write,
                Some(t.created),
                false,
            ))
            .into_response())
        }
        Method::POST => {
            caller.require_admin("create tokens")?;
            let body = BodyChunks::new(req.into_body(), 1 << 20, &ctx.state.limits)
                .collect(256)
                .await?;
            let perms = match serde_json::from_slice::<CreateRequest>(&body) {
                Ok(CreateRequest::Full {
                    permissions,
                    expires_at,
                    ttl,
                    ip_allowlist,
                }) => {
                    if expires_at.is_some_and(|v| !v.is_null())
                        || ttl.is_some_and(|v| !v.is_null())
                    {
                        return Err(unsupported("a token expiry (expires_at, ttl)"));
                    }
                    if !ip_allowlist.is_empty() {
                        return Err(unsupported("an IP allow-list"));
                    }
                    permissions
                }
                Ok(CreateRequest::Bare(p)) => p,
                Err(e) => {
                    return Err(AppError::bad_request(format!(
                        "the body must be JSON like {{\"permissions\": {{\"full_access\": false, \"read\": [\"bucket\"], \"write\": []}}}}: {e}"
                    )))
                }
            };
            let n = name.clone();
            let value =
                blocking(move || auth.create(&n, perms.full_access, perms.read, perms.write))
                    .await?;
            tracing::info!(token = %name, "token created (ReductStore API)");
            let created = ctx
                .state
                .auth
                .list()
                .into_iter()
                .find(|t| t.name == name)
                .map(|t| t.created)
                .unwrap_or_else(tsblob_storage::now_micros);
            Ok(Json(json!({"value": value, "created_at": rfc3339(created)})).into_response())
        }
        Method::DELETE => {
            caller.require_admin("remove tokens")?;
            let n = name.clone();
            blocking(move || auth.remove(&n, false)).await?;
            tracing::info!(token = %name, "token removed (ReductStore API)");
            Ok(ok_empty())
        }
        method => Err(method_not_allowed(&method, "a token")),
    }
}

/// `POST /api/v1/tokens/{name}/rotate`: refused, saying so.
pub async fn rotate(Extension(caller): Extension<Caller>) -> Result<Response, AppError> {
    caller.require_admin("rotate tokens")?;
    Err(unsupported(
        "rotating a token (create a new one and remove the old one)",
    ))
}
