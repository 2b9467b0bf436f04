//! Lifecycle rules in ReductStore's shapes (`/api/v1/lifecycles[/{name}[/mode]]`, API 1.21),
//! over the engine's per-bucket rules (`crate::http::lifecycle`): a rule made through either
//! API is seen and run the same through both.
//!
//! ReductStore names its lifecycles server-wide and gives the bucket in their settings;
//! tsblob keeps rules in their bucket. So a name is looked up in every bucket: one made
//! here must be free in all of them (409), and one tsblob's API gave to rules of two
//! buckets is refused here (409, with the buckets named). A bucket's `max_age` is listed as
//! the provisioned lifecycle `<bucket>.max_age` (read-only here, as ReductStore's
//! provisioned ones are: change it with the bucket's settings or tsblob's API). `compress`
//! is tsblob's compress rule (records rewritten zstd-compressed); ReductStore refuses a
//! `when` with it, tsblob takes one (docs/api.md, the differences table).

use axum::extract::{Path, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};
use tsblob_storage::{
    LifecycleAction, LifecycleMode, LifecycleRule, LifecycleStatus, Store, MAX_AGE_RULE,
};

use super::server::rfc3339;
use super::{method_not_allowed, ok_empty, Ctx};
use crate::http::auth::Caller;
use crate::http::errors::blocking;
use crate::http::lifecycle::{duration_text, RuleChange, RuleInput};
use crate::http::AppError;
use tsblob_proto::ErrorCode;

/// A rule with where it lives, as this API names it.
struct Found {
    name: String,
    bucket: String,
    rule: LifecycleRule,
    status: LifecycleStatus,
}

impl Found {
    fn provisioned(&self) -> bool {
        self.rule.name == MAX_AGE_RULE
    }

    /// ReductStore's name of the rule's action.
    fn kind(&self) -> &'static str {
        match self.rule.action {
            LifecycleAction::Remove => "delete",
            LifecycleAction::Compress => "compress",
        }
    }

    fn info(&self) -> Value {
        json!({
            "name": self.name,
            "is_provisioned": self.provisioned(),
            "is_running": self.rule.mode != LifecycleMode::Disabled,
            "type": self.kind(),
            "mode": self.rule.mode.to_string(),
            "last_run": self.status.last_run.map(rfc3339),
        })
    }

    fn settings(&self) -> Value {
        json!({
            "type": self.kind(),
            "bucket": self.bucket,
            "entries": self.rule.entries,
            "older_than": duration_text(self.rule.older_than),
            "interval": duration_text(self.rule.interval),
            "when": self.rule.when.as_ref().and_then(|w| serde_json::from_str::<Value>(w).ok()),
            "processing_interval": Value::Null,
            "mode": self.rule.mode.to_string(),
        })
    }
}

/// Every rule of every bucket (blocking).
fn all_rules(store: &Store) -> Result<Vec<Found>, AppError> {
    let mut out = Vec::new();
    for b in store.list_buckets()? {
        let rules = match store.lifecycle_rules(&b.name) {
            Ok(r) => r,
            // removed while listing
            Err(tsblob_storage::Error::NotFound(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        for (rule, status) in rules {
            let name = if rule.name == MAX_AGE_RULE {
                format!("{}.{MAX_AGE_RULE}", b.name)
            } else {
                rule.name.clone()
            };
            out.push(Found {
                name,
                bucket: b.name.clone(),
                rule,
                status,
            });
        }
    }
    Ok(out)
}

/// The one rule this API calls `name` (blocking); `None` when there is none.
fn find(store: &Store, name: &str) -> Result<Option<Found>, AppError> {
    let mut found: Vec<Found> = all_rules(store)?
        .into_iter()
        .filter(|f| f.name == name)
        .collect();
    if found.len() > 1 {
        let buckets: Vec<&str> = found.iter().map(|f| f.bucket.as_str()).collect();
        return Err(AppError::new(
            StatusCode::CONFLICT,
            ErrorCode::Conflict,
            format!(
                "lifecycle {name:?} names rules of several buckets ({}): ReductStore's API names lifecycles server-wide; manage these on tsblob's API (/api/v1/lifecycle/{{bucket}}/{name}) or rename one",
                buckets.join(", ")
            ),
        ));
    }
    Ok(found.pop())
}

fn missing(name: &str) -> AppError {
    AppError::not_found(format!("Lifecycle '{name}' does not exist"))
}

fn provisioned(name: &str) -> AppError {
    AppError::new(
        StatusCode::CONFLICT,
        ErrorCode::Conflict,
        format!("Can't change provisioned lifecycle '{name}': it is its bucket's max_age setting; change that in the bucket's settings"),
    )
}

/// ReductStore's `LifecycleSettings` (reduct-py sends `null` for what it leaves unset).
#[derive(Debug, Deserialize)]
struct SettingsDoc {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    bucket: String,
    #[serde(default)]
    entries: Option<Vec<String>>,
    older_than: String,
    #[serde(default)]
    interval: Option<String>,
    #[serde(default)]
    when: Option<crate::http::when::Json>,
    /// Accepted, not kept: a tsblob pass is bounded by records (`--lifecycle-pass-records`).
    #[serde(default)]
    #[allow(dead_code)]
    processing_interval: Option<String>,
    #[serde(default)]
    mode: Option<String>,
}

impl SettingsDoc {
    fn rule(self, name: &str) -> Result<(String, LifecycleRule), AppError> {
        if name == MAX_AGE_RULE || name.ends_with(".max_age") {
            return Err(AppError::invalid_settings(format!(
                "the lifecycle name {name} is kept for buckets' max_age settings: choose another name"
            )));
        }
        let input = RuleInput {
            action: Some(match self.kind.as_deref() {
                None | Some("delete") => "remove".to_string(),
                Some(other) => other.to_string(),
            }),
            older_than: Some(Value::String(self.older_than)),
            interval: Some(Value::String(
                self.interval.unwrap_or_else(|| "3600s".to_string()),
            )),
            entries: self.entries,
            when: match self.when {
                Some(crate::http::when::Json::Null) => None,
                w => w,
            },
            mode: self.mode,
        };
        // ReductStore answers a condition that does not parse 422, as any invalid setting.
        let change = input.into_change(name).map_err(|e| {
            if e.status == StatusCode::BAD_REQUEST {
                AppError::invalid_settings(e.body().error.message)
            } else {
                e
            }
        })?;
        match change {
            RuleChange::Rule(r) => Ok((self.bucket, r)),
            RuleChange::MaxAge(_) => Err(missing(name)),
        }
    }
}

async fn settings_doc(ctx: &Ctx, req: Request) -> Result<SettingsDoc, AppError> {
    crate::http::body::json(req.into_body(), 1 << 20, &ctx.state.limits, |e| {
        AppError::invalid_settings(format!(
            "the lifecycle settings are not valid ({e}): give bucket, older_than and optionally type, entries, interval, when, mode"
        ))
    })
    .await
}

/// `GET /api/v1/lifecycles`.
pub async fn list(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, AppError> {
    caller.require_admin("list lifecycle rules")?;
    let store = ctx.state.store.clone();
    let all = blocking(move || all_rules(&store)).await?;
    let out: Vec<Value> = all.iter().map(Found::info).collect();
    Ok(Json(json!({ "lifecycles": out })).into_response())
}

/// `GET` (info and settings), `POST` (create), `PUT` (update), `DELETE`
/// `/api/v1/lifecycles/{name}`.
pub async fn route(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    req: Request,
) -> Result<Response, AppError> {
    let method = req.method().clone();
    let store = ctx.state.store.clone();
    match method {
        Method::GET => {
            caller.require_admin("read lifecycle rules")?;
            let n = name.clone();
            let f = blocking(move || find(&store, &n))
                .await?
                .ok_or_else(|| missing(&name))?;
            Ok(Json(json!({"info": f.info(), "settings": f.settings()})).into_response())
        }
        Method::POST | Method::PUT => {
            caller.require_admin("change lifecycle rules")?;
            let doc = settings_doc(&ctx, req).await?;
            let (bucket, rule) = doc.rule(&name)?;
            let create = method == Method::POST;
            blocking(move || {
                let old = find(&store, &name)?;
                match (&old, create) {
                    (Some(_), true) => {
                        return Err(AppError::new(
                            StatusCode::CONFLICT,
                            ErrorCode::Conflict,
                            format!("Lifecycle '{name}' already exists"),
                        ))
                    }
                    (None, false) => return Err(missing(&name)),
                    (Some(f), false) if f.provisioned() => return Err(provisioned(&name)),
                    _ => {}
                }
                store.set_lifecycle_rule(&bucket, rule)?;
                if let Some(f) = old.filter(|f| f.bucket != bucket) {
                    // moved to another bucket
                    store.remove_lifecycle_rule(&f.bucket, &f.rule.name)?;
                }
                Ok(())
            })
            .await?;
            Ok(ok_empty())
        }
        Method::DELETE => {
            caller.require_admin("remove lifecycle rules")?;
            blocking(move || {
                let f = find(&store, &name)?.ok_or_else(|| missing(&name))?;
                if f.provisioned() {
                    return Err(provisioned(&name));
                }
                Ok(store.remove_lifecycle_rule(&f.bucket, &f.rule.name)?)
            })
            .await?;
            Ok(ok_empty())
        }
        m => Err(method_not_allowed(
            &m,
            "a lifecycle (GET, POST, PUT, DELETE)",
        )),
    }
}

/// `PATCH /api/v1/lifecycles/{name}/mode` with `{"mode": "enabled"|"disabled"|"dry_run"}`.
pub async fn set_mode(
    State(ctx): State<Ctx>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    req: Request,
) -> Result<Response, AppError> {
    caller.require_admin("change lifecycle rules")?;
    #[derive(Deserialize)]
    struct ModeDoc {
        mode: String,
    }
    let doc: ModeDoc = crate::http::body::json(req.into_body(), 64 << 10, &ctx.state.limits, |e| {
        AppError::invalid_settings(format!(
            "the body must be {{\"mode\": \"enabled\" | \"disabled\" | \"dry_run\"}} ({e})"
        ))
    })
    .await?;
    let mode: LifecycleMode = doc.mode.parse().map_err(AppError::invalid_settings)?;
    let store = ctx.state.store.clone();
    blocking(move || {
        let f = find(&store, &name)?.ok_or_else(|| missing(&name))?;
        if f.provisioned() {
            return Err(provisioned(&name));
        }
        store.set_lifecycle_rule(&f.bucket, LifecycleRule { mode, ..f.rule })?;
        Ok(())
    })
    .await?;
    Ok(ok_empty())
}
