//! Tokens in ReductStore's shapes (`/api/v1/tokens`), over tsblob's own token store
//! (`crate::http::auth`): a token created through either API works through both.

use axum::extract::{Path, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::server::{rfc3339, token_json};
use super::{method_not_allowed, ok_empty, Ctx};
use crate::http::auth::Caller;
use crate::http::auth::TokenSpec;
use crate::http::body::BodyChunks;
use crate::http::errors::blocking;
use crate::http::AppError;
use tsblob_proto::ErrorCode;

/// The name ReductStore gives the token of `RS_API_TOKEN`: here the `--token` admin token
/// (tsblob's own API calls it `admin`).
pub const INIT_TOKEN: &str = "init-token";

/// True when `name` is the `--token` admin token in this API: `init-token` while the server
/// has one (a stored token of that name, made through tsblob's API, is hidden behind it).
fn is_init_token(ctx: &Ctx, name: &str) -> bool {
    name == INIT_TOKEN && ctx.state.auth.has_admin()
}

/// The `--token` admin token as ReductStore shows its `RS_API_TOKEN`: `init-token`, full
/// access, provisioned, made when the server started.
pub fn init_token_json(ctx: &Ctx) -> serde_json::Value {
    let started = tsblob_storage::now_micros()
        .saturating_sub(u64::try_from(ctx.state.started.elapsed().as_micros()).unwrap_or(u64::MAX));
    let t = crate::http::tokens::TokenJson {
        name: INIT_TOKEN.into(),
        full_access: true,
        read: Vec::new(),
        write: Vec::new(),
        created: Some(started),
        expires_at: None,
        ttl: None,
        ip_allowlist: Vec::new(),
        last_access: None,
        rotated: None,
        is_expired: false,
    };
    token_json(&t, true)
}

/// The value prefix of a token made or rotated through this API: its name and `-`, as
/// ReductStore's values start (`<name>-<random>`); the random part is tsblob's.
fn value_prefix(name: &str) -> String {
    format!("{name}-")
}

/// `GET /api/v1/tokens`: the stored tokens and, when the server has one, the `--token`
/// admin token as `init-token` (as ReductStore lists the token of `RS_API_TOKEN`).
pub async fn list(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, AppError> {
    caller.require_admin("list tokens")?;
    let mut tokens: Vec<(String, serde_json::Value)> = crate::http::tokens::shown(&ctx.state)
        .iter()
        .filter(|t| !is_init_token(&ctx, &t.name))
        .map(|t| (t.name.clone(), token_json(t, false)))
        .collect();
    if ctx.state.auth.has_admin() {
        tokens.push((INIT_TOKEN.into(), init_token_json(&ctx)));
    }
    tokens.sort_by(|a, b| a.0.cmp(&b.0));
    let tokens: Vec<serde_json::Value> = tokens.into_iter().map(|(_, t)| t).collect();
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
        /// RFC 3339, e.g. `2026-12-01T00:00:00Z`.
        #[serde(default)]
        expires_at: Option<String>,
        /// Seconds of inactivity.
        #[serde(default)]
        ttl: Option<u64>,
        #[serde(default)]
        ip_allowlist: Vec<String>,
    },
    Bare(Permissions),
}

/// RFC 3339 (`Z`, an offset such as `+02:00`, or none: UTC) as µs since the Unix epoch.
pub fn parse_time(s: &str) -> Option<u64> {
    let s = s.trim();
    // The offset, if any, follows the time of day (after the `T`).
    let t_at = s.find(['T', 't', ' '])?;
    let (main, offset_s) = match s[t_at..].rfind(['+', '-']) {
        Some(i) => {
            let (main, off) = s.split_at(t_at + i);
            let sign: i64 = if off.starts_with('-') { -1 } else { 1 };
            let (h, m) = off[1..].split_once(':')?;
            let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
            if h > 23 || m > 59 {
                return None;
            }
            (main, sign * (h * 3600 + m * 60))
        }
        None => (s.trim_end_matches(['Z', 'z']), 0),
    };
    let t = humantime::parse_rfc3339_weak(main).ok()?;
    let us = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_micros();
    let us = i128::try_from(us).ok()? - i128::from(offset_s) * 1_000_000;
    u64::try_from(us).ok()
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
            if is_init_token(&ctx, &name) {
                return Ok(Json(init_token_json(&ctx)).into_response());
            }
            let t = crate::http::tokens::shown(&ctx.state)
                .into_iter()
                .find(|t| t.name == name)
                .ok_or_else(|| {
                    AppError::new(
                        StatusCode::NOT_FOUND,
                        ErrorCode::TokenNotFound,
                        format!("there is no token named {name:?}"),
                    )
                })?;
            Ok(Json(token_json(&t, false)).into_response())
        }
        Method::POST => {
            caller.require_admin("create tokens")?;
            if is_init_token(&ctx, &name) {
                return Err(AppError::new(
                    StatusCode::CONFLICT,
                    ErrorCode::TokenExists,
                    format!("a token named {name:?} already exists (the --token admin token)"),
                ));
            }
            let body = BodyChunks::new(req.into_body(), 1 << 20, &ctx.state.limits)
                .collect(256)
                .await?;
            let spec = match serde_json::from_slice::<CreateRequest>(&body) {
                Ok(CreateRequest::Full {
                    permissions,
                    expires_at,
                    ttl,
                    ip_allowlist,
                }) => TokenSpec {
                    full_access: permissions.full_access,
                    read: permissions.read,
                    write: permissions.write,
                    expires_at: match expires_at {
                        None => None,
                        Some(s) => Some(parse_time(&s).ok_or_else(|| {
                            AppError::new(
                                StatusCode::UNPROCESSABLE_ENTITY,
                                ErrorCode::InvalidExpiry,
                                format!(
                                    "expires_at {} is not an RFC 3339 time: give e.g. 2026-12-01T00:00:00Z",
                                    tsblob_proto::quote_short(&s)
                                ),
                            )
                        })?),
                    },
                    ttl,
                    ip_allowlist,
                },
                Ok(CreateRequest::Bare(p)) => TokenSpec {
                    full_access: p.full_access,
                    read: p.read,
                    write: p.write,
                    ..TokenSpec::default()
                },
                Err(e) => {
                    return Err(AppError::bad_request(format!(
                        "the body must be JSON like {{\"permissions\": {{\"full_access\": false, \"read\": [\"bucket\"], \"write\": []}}, \"expires_at\": \"2026-12-01T00:00:00Z\", \"ttl\": 3600, \"ip_allowlist\": [\"10.0.0.0/8\"]}}: {e}"
                    )))
                }
            };
            let n = name.clone();
            let value = blocking(move || auth.create_prefixed(&n, spec, &value_prefix(&n))).await?;
            tracing::info!(token = %name, "token created (ReductStore API)");
            let created = ctx
                .state
                .auth
                .token_by_name(&name)
                .map(|t| t.stored().created)
                .unwrap_or_else(tsblob_storage::now_micros);
            Ok(Json(json!({"value": value, "created_at": rfc3339(created)})).into_response())
        }
        Method::DELETE => {
            caller.require_admin("remove tokens")?;
            if is_init_token(&ctx, &name) {
                return Err(provisioned("remove", &name));
            }
            let n = name.clone();
            blocking(move || auth.remove(&n, false)).await?;
            tracing::info!(token = %name, "token removed (ReductStore API)");
            Ok(ok_empty())
        }
        method => Err(method_not_allowed(&method, "a token")),
    }
}

/// `POST /api/v1/tokens/{name}/rotate`: a new value (`{"value", "created_at"}`), the old
/// one stops working at once.
pub async fn rotate(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Response, AppError> {
    caller.require_admin("rotate tokens")?;
    if is_init_token(&ctx, &name) {
        return Err(provisioned("rotate", &name));
    }
    let auth = ctx.state.auth.clone();
    let n = name.clone();
    let (value, at) = blocking(move || auth.rotate_prefixed(&n, &value_prefix(&n))).await?;
    tracing::info!(token = %name, "token rotated (ReductStore API)");
    Ok(Json(json!({"value": value, "created_at": rfc3339(at)})).into_response())
}

/// ReductStore's refusal to remove (or rotate) the token of `RS_API_TOKEN`; here the
/// `--token` flag sets it.
fn provisioned(verb: &str, name: &str) -> AppError {
    AppError::new(
        StatusCode::CONFLICT,
        ErrorCode::Conflict,
        format!("Can't {verb} provisioned token '{name}'"),
    )
}

/// `GET /api/v1/me`: the caller's token in ReductStore's shape (never its value).
pub async fn me(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, AppError> {
    // The `--token` admin token (no stored token is named `admin`) is ReductStore's
    // `init-token`.
    if caller.name.as_deref() == Some(crate::http::auth::ADMIN_NAME) {
        return Ok(Json(init_token_json(&ctx)).into_response());
    }
    let mut t = crate::http::tokens::me_json(&ctx.state, &caller);
    if caller.name.is_none() {
        t.name = INIT_TOKEN.into();
    }
    let provisioned = t.created.is_none();
    Ok(Json(token_json(&t, provisioned)).into_response())
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn rfc3339_times_with_and_without_offsets() {
        let z = parse_time("2026-12-01T00:00:00Z");
        assert_eq!(z, Some(1_796_083_200_000_000));
        assert_eq!(parse_time("2026-12-01T00:00:00"), z);
        assert_eq!(parse_time("2026-12-01T02:00:00+02:00"), z);
        assert_eq!(parse_time("2026-11-30T23:30:00-00:30"), z);
        assert_eq!(parse_time("2026-12-01T00:00:00.5Z"), z.map(|t| t + 500_000));
        assert_eq!(parse_time("2026-12-01T00:00:00+00:00"), z);
        for bad in [
            "",
            "tomorrow",
            "2026-12-01",
            "2026-12-01T00:00:00+25:00",
            "1969-12-31T00:00:00Z",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }
}
