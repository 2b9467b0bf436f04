//! Buckets: create, read (settings, sizes, entries), list, update, remove; and the
//! server-wide `/api/v1/info`.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use tsblob_storage::{BucketInfo, BucketSettings, BucketSettingsUpdate, EntryInfo, QuotaType};

use super::auth::Caller;
use super::body::json_or_default;
use super::budget::Held;
use super::errors::{blocking, AppError, ErrorBody};
use super::records::EntryJson;
use super::AppState;

/// A bucket's settings as JSON.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SettingsJson {
    /// `none`, `fifo` or `hard`.
    pub quota_type: String,
    /// Bytes of block files the quota allows.
    pub quota_size: u64,
    pub max_block_size: u64,
    pub max_block_records: u64,
    /// `none` or `zstd:<level>`.
    pub compression: String,
    /// Age-based retention in microseconds (null: keep records until removed).
    pub max_age: Option<u64>,
    /// With a tier (`--tier-url`): bytes of sealed blocks kept locally; older ones are
    /// uploaded and their local copy dropped (null: no local budget).
    pub tier_local_max: Option<u64>,
    /// With a tier: sealed blocks whose newest record is older than this (microseconds)
    /// are uploaded even below the local budget (null: no age rule).
    pub tier_after: Option<u64>,
}

impl From<&BucketSettings> for SettingsJson {
    fn from(s: &BucketSettings) -> Self {
        SettingsJson {
            quota_type: s.quota_type.to_string(),
            quota_size: s.quota_size,
            max_block_size: s.max_block_size,
            max_block_records: s.max_block_records,
            compression: s.compression.to_string(),
            max_age: s.max_age,
            tier_local_max: s.tier_local_max,
            tier_after: s.tier_after,
        }
    }
}

/// Settings on input: every field optional; absent fields keep their value (or default).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsInput {
    pub quota_type: Option<String>,
    /// Bytes, or a size such as `"20GiB"`.
    #[schema(value_type = Option<String>)]
    pub quota_size: Option<serde_json::Value>,
    /// Bytes, or a size such as `"64MiB"`.
    #[schema(value_type = Option<String>)]
    pub max_block_size: Option<serde_json::Value>,
    pub max_block_records: Option<u64>,
    /// `none`, `zstd` (level 3) or `zstd:<1-22>`.
    pub compression: Option<String>,
    /// Age-based retention: microseconds, or a duration such as `"30d"`, `"12h"`, `"90s"`;
    /// `"none"` (or `0`) turns it off.
    #[schema(value_type = Option<String>)]
    pub max_age: Option<serde_json::Value>,
    /// Bytes of sealed blocks kept locally with a tier (a number or a size such as
    /// `"10GiB"`); `"none"` turns the budget off.
    #[schema(value_type = Option<String>)]
    pub tier_local_max: Option<serde_json::Value>,
    /// Upload sealed blocks older than this with a tier: microseconds or a duration such
    /// as `"1h"`; `"none"` turns it off.
    #[schema(value_type = Option<String>)]
    pub tier_after: Option<serde_json::Value>,
}

/// A size setting given as bytes or as a size (`"10GiB"`); `null` is no change. Bug
/// (new-user walkthrough): `"quota_size": "1GiB"` was refused as "not valid JSON" while
/// `tier_local_max` took the same string.
fn parse_size(name: &str, v: &serde_json::Value) -> Result<Option<u64>, AppError> {
    let bad = |why: String| {
        AppError::invalid_settings(format!(
            "{name} {v} is not a size ({why}): give bytes (a number) or a string such as \"10GiB\""
        ))
    };
    match v {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::Number(n) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| bad("not a whole number".into())),
        serde_json::Value::String(s) => tsblob_proto::parse_size(s).map(Some).map_err(bad),
        _ => Err(bad("wrong type".into())),
    }
}

/// An optional size field ([`parse_size`]).
fn size_field(name: &str, v: Option<&serde_json::Value>) -> Result<Option<u64>, AppError> {
    Ok(v.map(|v| parse_size(name, v)).transpose()?.flatten())
}

/// A `tier_local_max` given as bytes or as a size (`"10GiB"`); `"none"` is off.
fn parse_local_max(v: &serde_json::Value) -> Result<Option<u64>, AppError> {
    match v {
        serde_json::Value::String(s) if s == "none" => Ok(None),
        v => parse_size("tier_local_max", v).map_err(|e| {
            AppError::invalid_settings(format!(
                "{}; \"none\" turns the local budget off",
                e.message
            ))
        }),
    }
}

/// The same error about another setting (durations share one parser).
fn rename_setting(e: AppError, from: &str, to: &str) -> AppError {
    AppError::invalid_settings(e.message.replacen(from, to, 1))
}

/// A `max_age` given as microseconds or as a duration (`"30d"`); `none` or 0 is off.
fn parse_max_age(v: &serde_json::Value) -> Result<Option<u64>, AppError> {
    let bad = || {
        AppError::invalid_settings(format!(
            "max_age {v} is not a duration: give microseconds (a number) or a string such as \"30d\", \"12h\", \"90s\"; \"none\" turns retention off"
        ))
    };
    match v {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::Number(n) => match n.as_u64().ok_or_else(bad)? {
            0 => Ok(None),
            us => Ok(Some(us)),
        },
        serde_json::Value::String(s) if s == "none" || s == "0" => Ok(None),
        serde_json::Value::String(s) => super::lifecycle::duration_micros(s)
            .map(Some)
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}

impl SettingsInput {
    /// A settings body (empty: no change from the defaults).
    async fn read(body: Body, limits: &super::Limits) -> Result<BucketSettingsUpdate, AppError> {
        let input: SettingsInput = json_or_default(body, 1 << 20, limits, |e| {
            AppError::bad_request(format!(
                "the settings do not parse as a JSON object of known fields ({e}); fields: quota_type, quota_size, max_block_size, max_block_records, compression, max_age, tier_local_max, tier_after"
            ))
        })
        .await?;
        input.into_update()
    }

    fn into_update(self) -> Result<BucketSettingsUpdate, AppError> {
        Ok(BucketSettingsUpdate {
            quota_type: self
                .quota_type
                .map(|q| q.parse::<QuotaType>())
                .transpose()
                .map_err(AppError::invalid_settings)?,
            quota_size: size_field("quota_size", self.quota_size.as_ref())?,
            max_block_size: size_field("max_block_size", self.max_block_size.as_ref())?,
            max_block_records: self.max_block_records,
            compression: self
                .compression
                .map(|c| c.parse())
                .transpose()
                .map_err(AppError::invalid_settings)?,
            max_age: self.max_age.as_ref().map(parse_max_age).transpose()?,
            tier_local_max: self
                .tier_local_max
                .as_ref()
                .map(parse_local_max)
                .transpose()?,
            tier_after: self
                .tier_after
                .as_ref()
                .map(|v| parse_max_age(v).map_err(|e| rename_setting(e, "max_age", "tier_after")))
                .transpose()?,
        })
    }
}

/// Sizes and counts of a bucket.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BucketInfoJson {
    pub record_count: u64,
    /// Bytes of blocks, local plus tiered (what the quota counts; precision one block).
    pub size: u64,
    pub block_count: u64,
    /// Of `size`: bytes of blocks kept only in the object store (tiered).
    pub tiered_size: u64,
    /// Of `block_count`: blocks kept only in the object store.
    pub tiered_blocks: u64,
    pub entry_count: u64,
    pub oldest: Option<u64>,
    pub latest: Option<u64>,
    /// Blocks removed by the FIFO quota since the server started.
    pub evicted_blocks: u64,
    /// Whole blocks removed by lifecycle rules (`max_age` included) since the server started.
    pub expired_blocks: u64,
    /// `size / quota_size`, or null without a quota.
    pub quota_used: Option<f64>,
}

/// A bucket: settings, sizes and (for a single bucket) its entries.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BucketJson {
    pub name: String,
    pub settings: SettingsJson,
    pub info: BucketInfoJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<EntryJson>>,
}

impl BucketJson {
    fn new(b: &BucketInfo, entries: Option<Vec<EntryJson>>) -> BucketJson {
        let quota_used = (b.settings.quota_type != QuotaType::None && b.settings.quota_size > 0)
            .then(|| b.size as f64 / b.settings.quota_size as f64);
        BucketJson {
            name: b.name.clone(),
            settings: SettingsJson::from(&b.settings),
            info: BucketInfoJson {
                record_count: b.record_count,
                size: b.size,
                block_count: b.block_count,
                tiered_size: b.tiered_size,
                tiered_blocks: b.tiered_blocks,
                entry_count: b.entry_count,
                oldest: b.oldest,
                latest: b.latest,
                evicted_blocks: b.evicted_blocks,
                expired_blocks: b.expired_blocks,
                quota_used,
            },
            entries,
        }
    }
}

/// The answer of the bucket list.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BucketList {
    pub buckets: Vec<BucketJson>,
}

/// Lists the buckets the caller may read.
#[utoipa::path(get, path = "/api/v1/b", tag = "buckets",
    responses((status = 200, body = BucketList)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<BucketList>, AppError> {
    let store = state.store.clone();
    let all = blocking(move || Ok(store.list_buckets()?)).await?;
    Ok(Json(BucketList {
        buckets: all
            .iter()
            .filter(|b| caller.can_read(&b.name))
            .map(|b| BucketJson::new(b, None))
            .collect(),
    }))
}

/// What one entry of a bucket's answer holds at its peak besides its name: its
/// `EntryInfo`, its JSON form and its text (the name is in each of the three).
const ENTRY_ANSWER_BYTES: u64 = 320;

/// A bucket's info and its entries' (what both APIs answer for one bucket), with the room
/// the answer holds in `--memory-budget` until its client has it ([`counted_json`]).
/// Bug "entry list flood": a bucket of 50,000 entries answers 5.5 MB of JSON, and 64 such
/// answers at once took the server's RSS 111 → 550 MB, outside the budget; now each waits
/// for its room (at most `--memory-wait`, then 503 `busy`).
pub(crate) async fn info_and_entries(
    state: &AppState,
    name: String,
) -> Result<(BucketInfo, Vec<EntryInfo>, Held), AppError> {
    let what = "a bucket's list of entries";
    let store = state.store.clone();
    let n = name.clone();
    let info = blocking(move || Ok(store.bucket(&n)?)).await?;
    let mut room = state.bodies.empty();
    room.cover(info.entry_count.saturating_mul(ENTRY_ANSWER_BYTES), what)
        .await?;
    let store = state.store.clone();
    let entries = blocking(move || Ok(store.list_entries(&name)?)).await?;
    let exact = entries
        .iter()
        .map(|e| ENTRY_ANSWER_BYTES + 3 * e.name.len() as u64)
        .sum();
    room.cover(exact, what).await?;
    Ok((info, entries, room))
}

/// `value` as a JSON answer whose text holds its share of `room` until the connection
/// wrote it (the rest of `room` is given back now).
pub(crate) fn counted_json<T: Serialize>(value: &T, mut room: Held) -> Result<Response, AppError> {
    let text = serde_json::to_vec(value)
        .map_err(|e| AppError::internal(format!("an answer could not be written as JSON: {e}")))?;
    let len = text.len() as u64;
    let body = room.attach(bytes::Bytes::from(text), len);
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response())
}

async fn bucket_with_entries(state: &AppState, name: String) -> Result<Response, AppError> {
    let (info, entries, room) = info_and_entries(state, name).await?;
    let json = BucketJson::new(
        &info,
        Some(entries.into_iter().map(EntryJson::from).collect()),
    );
    counted_json(&json, room)
}

/// Settings, sizes and entries of a bucket.
#[utoipa::path(get, path = "/api/v1/b/{bucket}", tag = "buckets",
    params(("bucket" = String, Path)),
    responses((status = 200, body = BucketJson), (status = 404, body = ErrorBody)))]
pub async fn get_bucket(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(bucket): Path<String>,
) -> Result<Response, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    caller.require_read(&bucket)?;
    bucket_with_entries(&state, bucket).await
}

/// Creates a bucket; the body (optional) holds settings, the rest are the server defaults.
#[utoipa::path(post, path = "/api/v1/b/{bucket}", tag = "buckets",
    params(("bucket" = String, Path)), request_body = SettingsInput,
    responses((status = 201, body = BucketJson), (status = 409, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(bucket): Path<String>,
    body: Body,
) -> Result<Response, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    caller.require_admin("create buckets")?;
    let update = SettingsInput::read(body, &state.limits).await?;
    let store = state.store.clone();
    let settings = store.options().default_bucket.apply(&update);
    settings.validate().map_err(AppError::invalid_settings)?;
    settings
        .check_quota_sized()
        .map_err(AppError::invalid_settings)?;
    let info = blocking(move || Ok(store.create_bucket(&bucket, settings)?)).await?;
    Ok((
        StatusCode::CREATED,
        Json(BucketJson::new(&info, Some(Vec::new()))),
    )
        .into_response())
}

/// Changes some settings of a bucket.
#[utoipa::path(put, path = "/api/v1/b/{bucket}", tag = "buckets",
    params(("bucket" = String, Path)), request_body = SettingsInput,
    responses((status = 200, body = BucketJson), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(bucket): Path<String>,
    body: Body,
) -> Result<Response, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    caller.require_admin("change bucket settings")?;
    let update = SettingsInput::read(body, &state.limits).await?;
    let store = state.store.clone();
    let name = bucket.clone();
    // An update that sets the quota's type or size must leave a quota with a size (one
    // that touches neither keeps a zero-byte quota made through ReductStore's API).
    let sets_quota = update.quota_type.is_some() || update.quota_size.is_some();
    blocking(move || {
        Ok(store.update_bucket_checked(&name, &update, |s| {
            if sets_quota {
                s.check_quota_sized()
            } else {
                Ok(())
            }
        })?)
    })
    .await?;
    bucket_with_entries(&state, bucket).await
}

/// Removes a bucket and all its data.
#[utoipa::path(delete, path = "/api/v1/b/{bucket}", tag = "buckets",
    params(("bucket" = String, Path)),
    responses((status = 200, body = serde_json::Value, description = "{\"removed\": \"name\"}"),
              (status = 404, body = ErrorBody)))]
pub async fn remove(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(bucket): Path<String>,
) -> Result<Json<serde_json::Value>, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    caller.require_admin("remove buckets")?;
    let store = state.store.clone();
    let name = bucket.clone();
    blocking(move || Ok(store.remove_bucket(&name)?)).await?;
    Ok(Json(serde_json::json!({"removed": bucket})))
}

/// Renames a bucket (its settings, entries and records stay).
#[utoipa::path(put, path = "/api/v1/b/{bucket}/rename", tag = "buckets",
    params(("bucket" = String, Path)),
    request_body = super::records::RenameBody,
    responses((status = 200, body = BucketJson, description = "the bucket under its new name"),
              (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "`bucket_exists`: the new name is taken; `rename_tiered`: an entry has blocks in the object store"),
              (status = 422, body = ErrorBody, description = "`invalid_name`")))]
pub async fn rename(
    state: AppState,
    caller: Caller,
    bucket: String,
    req: axum::extract::Request,
) -> Result<Response, AppError> {
    caller.require_admin("rename buckets")?;
    let new = super::records::rename_body(req, &state).await?;
    tsblob_storage::validate_bucket_name(&new)?;
    let store = state.store.clone();
    let (old, to) = (bucket.clone(), new.clone());
    blocking(move || Ok(store.rename_bucket(&old, &to)?)).await?;
    // Replication tasks whose source it is follow it.
    state.replications.bucket_renamed(&bucket, &new).await;
    bucket_with_entries(&state, new).await
}

/// Server-wide figures.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ServerInfo {
    pub version: String,
    pub uptime_s: u64,
    pub bucket_count: u64,
    pub record_count: u64,
    /// Bytes of block files on disk.
    pub usage: u64,
    pub free_bytes: u64,
    /// The sync policy (`always`, `periodic:<N>ms`, `never`).
    pub sync: String,
}

/// Version, uptime, usage and sync policy.
#[utoipa::path(get, path = "/api/v1/info", tag = "service",
    responses((status = 200, body = ServerInfo)))]
pub async fn server_info(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<ServerInfo>, AppError> {
    caller.require_all_buckets("read the server's info")?;
    let store = state.store.clone();
    let stats = blocking(move || Ok(store.stats())).await?;
    Ok(Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_s: state.started.elapsed().as_secs(),
        bucket_count: stats.bucket_count,
        record_count: stats.record_count,
        usage: stats.disk_bytes,
        free_bytes: stats.free_bytes,
        sync: state.store.options().sync.to_string(),
    }))
}
