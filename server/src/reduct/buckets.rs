//! Buckets (`/api/v1/b/{bucket}`: GET, HEAD, POST, PUT, DELETE) and renames.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::Method;
use axum::response::Response;
use axum::Extension;

use super::wire::{BucketFullJson, BucketJson, EntryJson, Settings};
use super::{method_not_allowed, ok_empty, Ctx};
use crate::http::auth::Caller;
use crate::http::errors::blocking;
use crate::http::records::Target;
use crate::http::{AppError, AppState};

/// Settings bodies are small JSON documents.
const SETTINGS_BODY: u64 = 1 << 20;

pub async fn bucket_route(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
    Path(bucket): Path<String>,
    req: Request,
) -> Result<Response, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    let method = req.method().clone();
    let state = &ctx.state;
    match method {
        Method::GET => {
            caller.require_read(&bucket)?;
            full_info(state, bucket).await
        }
        Method::HEAD => {
            // Whether the bucket exists: a token that may write it may ask (reduct-rs's
            // `get_bucket` is a HEAD, and a ReductStore's replication sender calls it before
            // each batch with the destination's usual write-only token; review of
            // 2026-11-29, after writing stopped implying reading).
            if !caller.can_write(&bucket) {
                caller.require_read(&bucket)?;
            }
            let store = state.store.clone();
            blocking(move || Ok(store.check_bucket(&bucket)?)).await?;
            Ok(ok_empty())
        }
        Method::POST => {
            caller.require_admin("create buckets")?;
            let input = settings_body(state, req.into_body()).await?;
            let store = state.store.clone();
            let settings = super::wire::bucket_defaults(&store.options().default_bucket)
                .apply(&input.update()?);
            settings.validate().map_err(AppError::invalid_settings)?;
            blocking(move || Ok(store.create_bucket(&bucket, settings)?)).await?;
            Ok(ok_empty())
        }
        Method::PUT => {
            caller.require_admin("change bucket settings")?;
            let input = settings_body(state, req.into_body()).await?;
            let update = input.update()?;
            let store = state.store.clone();
            blocking(move || Ok(store.update_bucket(&bucket, &update)?)).await?;
            Ok(ok_empty())
        }
        Method::DELETE => {
            caller.require_admin("remove buckets")?;
            let store = state.store.clone();
            blocking(move || Ok(store.remove_bucket(&bucket)?)).await?;
            Ok(ok_empty())
        }
        method => Err(method_not_allowed(&method, "a bucket")),
    }
}

/// An optional settings document (absent or empty: the defaults).
async fn settings_body(state: &AppState, body: Body) -> Result<Settings, AppError> {
    crate::http::body::json_or_default(body, SETTINGS_BODY, &state.limits, |e| {
        AppError::invalid_settings(format!(
            "the bucket settings are not valid JSON ({e}): send e.g. {{\"quota_type\": \"FIFO\", \"quota_size\": 1000000000}}"
        ))
    })
    .await
}

/// The bucket's full info, its answer counted in `--memory-budget` as the native one
/// (`crate::http::buckets::info_and_entries`).
async fn full_info(state: &AppState, name: String) -> Result<Response, AppError> {
    let (info, entries, room) = crate::http::buckets::info_and_entries(state, name).await?;
    let json = BucketFullJson {
        info: BucketJson::from(&info),
        settings: Settings::from(&info.settings),
        entries: entries.iter().map(EntryJson::from).collect(),
    };
    crate::http::buckets::counted_json(&json, room)
}

/// `PUT /api/v1/b/{bucket}/rename`: the native rename (`{"new_name": ...}`, admin only);
/// ReductStore answers 200 empty.
pub async fn rename(
    ctx: &Ctx,
    caller: &Caller,
    bucket: &str,
    req: Request,
) -> Result<Response, AppError> {
    crate::http::buckets::rename(ctx.state.clone(), caller.clone(), bucket.to_string(), req)
        .await?;
    Ok(ok_empty())
}

/// `PUT /api/v1/b/{bucket}/{entry}/rename`: the native rename of an entry.
pub async fn rename_entry(t: Target, req: Request) -> Result<Response, AppError> {
    crate::http::records::rename_entry(t, req).await?;
    Ok(ok_empty())
}
