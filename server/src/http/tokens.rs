//! Token management routes: list, create (the value is answered once), remove, and `me`.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::body::BodyChunks;
use super::errors::{AppError, ErrorBody};
use super::AppState;

/// A token's permissions (never its value).
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenJson {
    pub name: String,
    pub full_access: bool,
    pub read: Vec<String>,
    pub write: Vec<String>,
    /// µs since the Unix epoch; absent for the `--token` admin token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenJson>,
}

/// What a new token may do.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    #[serde(default)]
    pub full_access: bool,
    /// Bucket names or prefixes ending in `*`.
    #[serde(default)]
    pub read: Vec<String>,
    #[serde(default)]
    pub write: Vec<String>,
}

/// A new token's value, shown only in this answer.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NewToken {
    pub name: String,
    pub value: String,
}

/// Lists the stored tokens.
#[utoipa::path(get, path = "/api/v1/tokens", tag = "tokens",
    responses((status = 200, body = TokenList), (status = 403, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<TokenList>, AppError> {
    caller.require_admin("list tokens")?;
    Ok(Json(TokenList {
        tokens: state
            .auth
            .list()
            .into_iter()
            .map(|t| TokenJson {
                name: t.name,
                full_access: t.full_access,
                read: t.read,
                write: t.write,
                created: Some(t.created),
            })
            .collect(),
    }))
}

/// Creates a token. Creating the first one switches authentication on.
#[utoipa::path(post, path = "/api/v1/tokens/{name}", tag = "tokens",
    params(("name" = String, Path)), request_body = TokenSpec,
    responses((status = 201, body = NewToken), (status = 409, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Body,
) -> Result<Response, AppError> {
    caller.require_admin("create tokens")?;
    let body = BodyChunks::new(body, 1 << 20, &state.limits)
        .collect(256)
        .await?;
    let spec: TokenSpec = if body.iter().all(u8::is_ascii_whitespace) {
        TokenSpec::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            AppError::bad_request(format!(
                "the body must be JSON like {{\"full_access\": false, \"read\": [\"bucket\"], \"write\": [\"cam-*\"]}}: {e}"
            ))
        })?
    };
    let auth = state.auth.clone();
    let n = name.clone();
    // The token file is fsynced: keep that off the async workers.
    let value =
        super::errors::blocking(move || auth.create(&n, spec.full_access, spec.read, spec.write))
            .await?;
    tracing::info!(token = %name, "token created");
    Ok((StatusCode::CREATED, Json(NewToken { name, value })).into_response())
}

/// Removes a stored token. The last one (with no `--token` admin token) only with
/// `?disable_auth=true`: removing it switches authentication off.
#[utoipa::path(delete, path = "/api/v1/tokens/{name}", tag = "tokens",
    params(("name" = String, Path),
           ("disable_auth" = Option<bool>, Query, description = "confirms removing the last token, which switches authentication off")),
    responses((status = 200, body = serde_json::Value), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "last_token: the last token, without disable_auth=true")))]
pub async fn remove(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    uri: axum::http::Uri,
) -> Result<Json<serde_json::Value>, AppError> {
    caller.require_admin("remove tokens")?;
    let mut disable_auth = false;
    for (k, v) in super::params::pairs(uri.query()) {
        match (k.as_str(), v.as_str()) {
            ("disable_auth", "true") => disable_auth = true,
            ("disable_auth", "false") => disable_auth = false,
            ("disable_auth", other) => {
                return Err(AppError::bad_request(format!(
                    "disable_auth={other:?}: use true or false"
                )))
            }
            (k, _) => return Err(super::params::unknown(k, "only disable_auth")),
        }
    }
    let auth = state.auth.clone();
    let n = name.clone();
    super::errors::blocking(move || auth.remove(&n, disable_auth)).await?;
    if disable_auth && !state.auth.enabled() {
        tracing::warn!(token = %name, "the last token was removed: authentication is off");
    }
    tracing::info!(token = %name, "token removed");
    Ok(Json(serde_json::json!({"removed": name})))
}

/// The calling token's permissions.
#[utoipa::path(get, path = "/api/v1/me", tag = "tokens",
    responses((status = 200, body = TokenJson)))]
pub async fn me(Extension(caller): Extension<Caller>) -> Json<TokenJson> {
    Json(TokenJson {
        name: caller.name.clone().unwrap_or_default(),
        full_access: caller.full_access,
        read: caller.read.clone(),
        write: caller.write.clone(),
        created: None,
    })
}
