//! Token management routes: list, create (the value is answered once), remove, and `me`.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use super::auth::{self, Caller, StoredToken};
use super::body::{json_or_default, not_like};
use super::errors::{AppError, ErrorBody};
use super::AppState;

/// A token's permissions and limits (never its value).
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenJson {
    pub name: String,
    pub full_access: bool,
    pub read: Vec<String>,
    pub write: Vec<String>,
    /// µs since the Unix epoch; absent for the `--token` admin token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<u64>,
    /// The token stops working at this time (µs since the Unix epoch); absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// Seconds of inactivity after which the token stops working; absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
    /// Addresses or CIDR networks the token may be used from; empty: any.
    #[serde(default)]
    pub ip_allowlist: Vec<String>,
    /// The last request that used the token (µs, to the second); absent: not used yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_access: Option<u64>,
    /// When the token's value was last rotated (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated: Option<u64>,
    /// True once the token no longer works (past `expires_at`, or unused for `ttl`).
    #[serde(default)]
    pub is_expired: bool,
}

impl TokenJson {
    /// A stored token as shown (`expired`: whether it no longer works now).
    pub fn of(t: StoredToken, expired: bool) -> TokenJson {
        TokenJson {
            name: t.name,
            full_access: t.full_access,
            read: t.read,
            write: t.write,
            created: Some(t.created),
            expires_at: t.expires_at,
            ttl: t.ttl,
            ip_allowlist: t.ip_allowlist,
            last_access: t.last_access,
            rotated: t.rotated,
            is_expired: expired,
        }
    }
}

/// The stored tokens, as shown.
pub fn shown(state: &AppState) -> Vec<TokenJson> {
    let now = tsblob_storage::now_micros();
    state
        .auth
        .list()
        .into_iter()
        .map(|t| {
            let expired = state
                .auth
                .token_by_name(&t.name)
                .is_some_and(|l| l.is_expired(now));
            TokenJson::of(t, expired)
        })
        .collect()
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenJson>,
}

/// What a new token may do, and its limits.
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
    /// The token stops working at this time (µs since the Unix epoch, in the future).
    #[serde(default)]
    pub expires_at: Option<u64>,
    /// Seconds of inactivity (no request with the token) after which it stops working.
    #[serde(default)]
    pub ttl: Option<u64>,
    /// Client addresses (`203.0.113.7`) or CIDR networks (`10.0.0.0/8`) the token may be
    /// used from; empty: any.
    #[serde(default)]
    pub ip_allowlist: Vec<String>,
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
        tokens: shown(&state),
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
    let spec: TokenSpec = json_or_default(
        body,
        1 << 20,
        &state.limits,
        not_like(
            r#"{"full_access": false, "read": ["bucket"], "write": ["cam-*"], "expires_at": 1893456000000000, "ttl": 3600, "ip_allowlist": ["10.0.0.0/8"]}"#,
        ),
    )
    .await?;
    let auth = state.auth.clone();
    let n = name.clone();
    // The token file is fsynced: keep that off the async workers.
    let spec = auth::TokenSpec {
        full_access: spec.full_access,
        read: spec.read,
        write: spec.write,
        expires_at: spec.expires_at,
        ttl: spec.ttl,
        ip_allowlist: spec.ip_allowlist,
    };
    let value = super::errors::blocking(move || auth.create(&n, spec)).await?;
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

/// Gives a token a new value, answered once: the old value stops working at once (streams
/// opened with it end). Permissions and limits stay; the `ttl` inactivity clock restarts.
#[utoipa::path(post, path = "/api/v1/tokens/{name}/rotate", tag = "tokens",
    params(("name" = String, Path)),
    responses((status = 200, body = NewToken), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody, description = "expired_not_rotatable: past its expires_at")))]
pub async fn rotate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<NewToken>, AppError> {
    caller.require_admin("rotate tokens")?;
    let auth = state.auth.clone();
    let n = name.clone();
    let (value, _) = super::errors::blocking(move || auth.rotate(&n)).await?;
    tracing::info!(token = %name, "token rotated");
    Ok(Json(NewToken { name, value }))
}

/// The calling token's permissions and limits.
#[utoipa::path(get, path = "/api/v1/me", tag = "tokens",
    responses((status = 200, body = TokenJson)))]
pub async fn me(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Json<TokenJson> {
    Json(me_json(&state, &caller))
}

/// The caller's token as shown (`/api/v1/me` of both APIs).
pub fn me_json(state: &AppState, caller: &Caller) -> TokenJson {
    let now = tsblob_storage::now_micros();
    let stored = caller
        .token_hash
        .as_deref()
        .and_then(|h| state.auth.token_by_hash(h));
    match stored {
        Some(t) => TokenJson::of(t.stored(), t.is_expired(now)),
        None => TokenJson {
            name: caller.name.clone().unwrap_or_default(),
            full_access: caller.full_access,
            read: caller.read.clone(),
            write: caller.write.clone(),
            created: None,
            expires_at: None,
            ttl: None,
            ip_allowlist: Vec::new(),
            last_access: None,
            rotated: None,
            is_expired: false,
        },
    }
}
