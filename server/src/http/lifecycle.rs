//! Lifecycle rules of a bucket (`tsblob_storage::LifecycleRule`): list, read, set, remove
//! and run one now, under `/api/v1/lifecycle/{bucket}` (a path of its own: an entry may be
//! named anything but the route words). `max_age` is listed as the shorthand rule
//! `max_age`; setting it (only `older_than`) or removing it changes the bucket's `max_age`.
//! The ReductStore adapter (`crate::reduct::lifecycle`) maps its documents onto the same
//! calls through [`RuleInput`] and [`rule_duration`].

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use tsblob_storage::{
    BucketSettingsUpdate, LifecycleAction, LifecycleMode, LifecycleRule, LifecycleStatus,
    MAX_AGE_RULE,
};

use super::auth::Caller;
use super::body::json;
use super::errors::{blocking, AppError, ErrorBody};
use super::when;
use super::AppState;

/// The interval of a rule that gives none: an hour, as ReductStore's default.
pub const DEFAULT_INTERVAL: u64 = 3_600_000_000;

/// A rule as given to `PUT` (every field optional but `older_than`).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleInput {
    /// `remove` (the default) or `compress`: the records it selects are stored
    /// zstd-compressed (read back identical) and the blocks they leave are deleted.
    pub action: Option<String>,
    /// Records older than this go: microseconds, or a duration such as `"30d"`, `"12h"`.
    #[schema(value_type = Object)]
    pub older_than: Option<serde_json::Value>,
    /// How often the rule looks again (default `"1h"`, at least `"1s"`).
    #[schema(value_type = Object)]
    pub interval: Option<serde_json::Value>,
    /// Entry names or globs (`*`, `**`); `!pattern` excludes. Empty or absent: every entry.
    pub entries: Option<Vec<String>>,
    /// Only records this condition keeps (the query language, docs/api.md).
    #[schema(value_type = Object)]
    pub when: Option<when::Json>,
    /// `enabled` (default), `disabled` or `dry_run` (counts, removes nothing).
    pub mode: Option<String>,
}

/// What a `PUT` sets: a rule, or the bucket's `max_age`.
pub enum RuleChange {
    Rule(LifecycleRule),
    MaxAge(u64),
}

/// A duration given as microseconds (a number) or text (`"30d"`, `"1h 30m"`).
pub fn rule_duration(v: &serde_json::Value, field: &str) -> Result<u64, AppError> {
    let bad = || {
        AppError::invalid_settings(format!(
            "{field} {v} is not a duration: give microseconds (a number above 0) or a string such as \"30d\", \"12h\", \"90s\""
        ))
    };
    match v {
        serde_json::Value::Number(n) => n.as_u64().filter(|us| *us > 0).ok_or_else(bad),
        serde_json::Value::String(s) => duration_micros(s.trim()).ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// A duration as text (`"30d"`, `"1h 30m"`) in microseconds, above 0: the one reading of the
/// settings' durations (rules, `max_age`, `tier_after`, the CLI's `--max-age`).
pub fn duration_micros(text: &str) -> Option<u64> {
    humantime::parse_duration(text)
        .ok()
        .and_then(|d| u64::try_from(d.as_micros()).ok())
        .filter(|us| *us > 0)
}

/// A duration as text both humantime and ReductStore read back (`"30d"`, `"90s"`, `"15us"`).
pub fn duration_text(us: u64) -> String {
    for (unit, len) in [
        ("d", 86_400_000_000),
        ("h", 3_600_000_000),
        ("m", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1_000),
    ] {
        if us >= len && us.is_multiple_of(len) {
            return format!("{}{unit}", us / len);
        }
    }
    format!("{us}us")
}

impl RuleInput {
    /// The rule `name` of this input (checked; its `when` parsed).
    pub fn into_change(self, name: &str) -> Result<RuleChange, AppError> {
        let action = self
            .action
            .as_deref()
            .map(str::parse::<LifecycleAction>)
            .transpose()
            .map_err(AppError::invalid_settings)?
            .unwrap_or_default();
        let older_than = rule_duration(
            self.older_than.as_ref().ok_or_else(|| {
                AppError::invalid_settings(
                    "older_than is missing: give the age past which records go, e.g. \"30d\"",
                )
            })?,
            "older_than",
        )?;
        if name == MAX_AGE_RULE {
            let plain = action == LifecycleAction::Remove
                && self.interval.is_none()
                && self.entries.as_ref().is_none_or(Vec::is_empty)
                && self.when.is_none()
                && self.mode.as_deref().is_none_or(|m| m == "enabled");
            if !plain {
                return Err(AppError::invalid_settings(
                    "the rule max_age is the bucket's max_age setting: it takes older_than only (every entry, whole blocks, checked every second); give other settings to a rule of another name",
                ));
            }
            return Ok(RuleChange::MaxAge(older_than));
        }
        let interval = self
            .interval
            .as_ref()
            .map(|v| rule_duration(v, "interval"))
            .transpose()?
            .unwrap_or(DEFAULT_INTERVAL);
        let when = match &self.when {
            Some(w) => {
                when::parse(w)?;
                Some(w.to_string())
            }
            None => None,
        };
        let mode = self
            .mode
            .as_deref()
            .map(str::parse::<LifecycleMode>)
            .transpose()
            .map_err(AppError::invalid_settings)?
            .unwrap_or_default();
        let rule = LifecycleRule {
            name: name.to_string(),
            older_than,
            interval,
            entries: self.entries.unwrap_or_default(),
            when,
            mode,
            action,
        };
        rule.validate().map_err(AppError::invalid_settings)?;
        Ok(RuleChange::Rule(rule))
    }
}

/// What a rule has done since the server started.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StatusJson {
    /// When its last pass ended (µs since the epoch).
    pub last_run: Option<u64>,
    /// When its next pass is due (µs since the epoch; 0: at the next tick).
    pub next_run: u64,
    /// Whether its last round reached the cutoff.
    pub caught_up: bool,
    /// Records removed (counted, in `dry_run`) by its last pass.
    pub last_removed: u64,
    /// Records removed (counted, in `dry_run`) since the server started.
    pub removed: u64,
    /// Whole blocks deleted since the server started (a compress rule: blocks left with no
    /// live record once theirs were compressed).
    pub removed_blocks: u64,
    /// Records compressed (counted, in `dry_run`) by its last pass (a compress rule).
    pub last_compressed: u64,
    /// Records compressed (counted, in `dry_run`) since the server started.
    pub compressed: u64,
    /// Bytes the records it compressed gave up since the server started.
    pub saved_bytes: u64,
    pub last_error: Option<String>,
}

/// A rule as answered.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RuleJson {
    pub name: String,
    pub bucket: String,
    /// `remove` or `compress`.
    pub action: String,
    /// µs.
    pub older_than: u64,
    /// µs.
    pub interval: u64,
    pub entries: Vec<String>,
    #[schema(value_type = Object)]
    pub when: Option<serde_json::Value>,
    pub mode: String,
    /// True for `max_age`, the bucket setting reported as a rule (whole blocks).
    pub shorthand: bool,
    pub status: StatusJson,
}

impl RuleJson {
    pub fn new(bucket: &str, r: &LifecycleRule, s: &LifecycleStatus) -> RuleJson {
        RuleJson {
            name: r.name.clone(),
            bucket: bucket.to_string(),
            action: r.action.to_string(),
            older_than: r.older_than,
            interval: r.interval,
            entries: r.entries.clone(),
            when: r.when.as_ref().and_then(|w| serde_json::from_str(w).ok()),
            mode: r.mode.to_string(),
            shorthand: r.name == MAX_AGE_RULE,
            status: StatusJson {
                last_run: s.last_run,
                next_run: s.next_run,
                caught_up: s.caught_up,
                last_removed: s.last_removed,
                removed: s.removed,
                removed_blocks: s.removed_blocks,
                last_compressed: s.last_compressed,
                compressed: s.compressed,
                saved_bytes: s.saved_bytes,
                last_error: s.last_error.clone(),
            },
        }
    }
}

/// Applies a change (blocking: the settings file is written before it returns); true: a
/// rule of that name was replaced.
pub fn apply(
    store: &tsblob_storage::Store,
    bucket: &str,
    change: RuleChange,
) -> Result<bool, AppError> {
    Ok(match change {
        RuleChange::Rule(rule) => store.set_lifecycle_rule(bucket, rule)?,
        RuleChange::MaxAge(age) => {
            let had = store.bucket(bucket)?.settings.max_age.is_some();
            store.update_bucket(
                bucket,
                &BucketSettingsUpdate {
                    max_age: Some(Some(age)),
                    ..BucketSettingsUpdate::default()
                },
            )?;
            had
        }
    })
}

/// Lists a bucket's lifecycle rules (`max_age` first, as the shorthand rule).
#[utoipa::path(get, path = "/api/v1/lifecycle/{bucket}", tag = "lifecycle",
    params(("bucket" = String, Path)),
    responses((status = 200, body = Vec<RuleJson>, description = "{\"rules\": [...]}"),
              (status = 404, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(bucket): Path<String>,
) -> Result<Response, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    caller.require_read(&bucket)?;
    let (store, b) = (state.store.clone(), bucket.clone());
    let rules = blocking(move || Ok(store.lifecycle_rules(&b)?)).await?;
    let out: Vec<RuleJson> = rules
        .iter()
        .map(|(r, s)| RuleJson::new(&bucket, r, s))
        .collect();
    Ok(Json(serde_json::json!({ "rules": out })).into_response())
}

/// One rule with what it has done.
#[utoipa::path(get, path = "/api/v1/lifecycle/{bucket}/{name}", tag = "lifecycle",
    params(("bucket" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = RuleJson), (status = 404, body = ErrorBody)))]
pub async fn get_one(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((bucket, name)): Path<(String, String)>,
) -> Result<Json<RuleJson>, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    caller.require_read(&bucket)?;
    let (store, b, n) = (state.store.clone(), bucket.clone(), name.clone());
    let (r, s) = blocking(move || Ok(store.lifecycle_rule(&b, &n)?)).await?;
    Ok(Json(RuleJson::new(&bucket, &r, &s)))
}

/// Adds a rule, or replaces the one of its name (201 created, 200 replaced).
#[utoipa::path(put, path = "/api/v1/lifecycle/{bucket}/{name}", tag = "lifecycle",
    params(("bucket" = String, Path), ("name" = String, Path)),
    request_body = RuleInput,
    responses((status = 201, body = RuleJson, description = "created"),
              (status = 200, body = RuleJson, description = "replaced"),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn put(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((bucket, name)): Path<(String, String)>,
    body: Body,
) -> Result<Response, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    caller.require_admin("change lifecycle rules")?;
    let input: RuleInput = json(body, 1 << 20, &state.limits, |e| {
        AppError::bad_request(format!(
            "the rule is not valid JSON ({e}); fields: older_than, interval, entries, when, mode, action"
        ))
    })
    .await?;
    let change = input.into_change(&name)?;
    let (store, b, n) = (state.store.clone(), bucket.clone(), name.clone());
    let (replaced, (r, s)) = blocking(move || {
        let replaced = apply(&store, &b, change)?;
        Ok((replaced, store.lifecycle_rule(&b, &n)?))
    })
    .await?;
    let status = if replaced {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(RuleJson::new(&bucket, &r, &s))).into_response())
}

/// Removes a rule (`max_age`: clears the bucket's `max_age`).
#[utoipa::path(delete, path = "/api/v1/lifecycle/{bucket}/{name}", tag = "lifecycle",
    params(("bucket" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = serde_json::Value, description = "{\"removed\": \"name\"}"),
              (status = 404, body = ErrorBody)))]
pub async fn remove(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((bucket, name)): Path<(String, String)>,
) -> Result<Json<serde_json::Value>, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    caller.require_admin("change lifecycle rules")?;
    let (store, b, n) = (state.store.clone(), bucket.clone(), name.clone());
    blocking(move || Ok(store.remove_lifecycle_rule(&b, &n)?)).await?;
    Ok(Json(serde_json::json!({ "removed": name })))
}

/// Runs one pass of a rule now (whatever its mode; `dry_run` counts only), bounded as the
/// background's are (`--lifecycle-pass-records`).
#[utoipa::path(post, path = "/api/v1/lifecycle/{bucket}/{name}/run", tag = "lifecycle",
    params(("bucket" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = serde_json::Value,
               description = "{\"removed\", \"compressed\", \"saved_bytes\", \"blocks\", \"looked_at\", \"caught_up\", \"dry_run\"}: in dry_run, what would have been removed or compressed"),
              (status = 404, body = ErrorBody)))]
pub async fn run(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((bucket, name)): Path<(String, String)>,
) -> Result<Json<serde_json::Value>, AppError> {
    tsblob_storage::validate_bucket_name(&bucket)?;
    caller.require_admin("run lifecycle rules")?;
    let store = state.store.clone();
    let limit = store.options().lifecycle_pass_records.max(1);
    let p = blocking(move || {
        Ok(store.run_lifecycle(&bucket, &name, tsblob_storage::now_micros(), limit)?)
    })
    .await?;
    Ok(Json(serde_json::json!({
        "removed": p.removed,
        "compressed": p.compressed,
        "saved_bytes": p.saved,
        "blocks": p.blocks,
        "looked_at": p.looked_at,
        "caught_up": p.caught_up,
        "dry_run": p.dry_run,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_back_in_both_apis() {
        for us in [1, 1_500, 90_000_000, 86_400_000_000 * 30, 3_600_000_000 * 5] {
            let text = duration_text(us);
            let back = rule_duration(&serde_json::Value::String(text.clone()), "x").unwrap();
            assert_eq!(back, us, "{text}");
        }
        assert_eq!(duration_text(86_400_000_000), "1d");
        assert!(rule_duration(&serde_json::json!("0s"), "older_than").is_err());
        assert!(rule_duration(&serde_json::json!(-5), "older_than").is_err());
    }
}
