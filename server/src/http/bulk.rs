//! Label updates and removals of many records in one request (issue 28; ReductStore has
//! batch label updates and batch removes): `PATCH …/{entry}/query` updates the labels of
//! every record a query selects; `PATCH …/{entry}/batch` and `DELETE …/{entry}/batch` take
//! a list of timestamps, each answered with its own result.

use std::collections::BTreeMap;
use tsblob_proto::ErrorCode;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use tsblob_storage::{Labels, Query};

use super::batch::RecordResult;
use super::body::{json, not_like, BodyChunks};
use super::errors::{blocking, AppError, ErrorBody};
use super::records::Target;
use super::when;

/// Bodies of these routes are small JSON documents.
const BODY_LIMIT: u64 = 16 << 20;

/// Label changes: a value sets a label, `null` removes it.
fn split(labels: BTreeMap<String, Option<String>>) -> Result<(Labels, Vec<String>), AppError> {
    let (mut set, mut remove) = (Labels::new(), Vec::new());
    for (k, v) in labels {
        tsblob_storage::validate_label_key(&k)?;
        match v {
            Some(v) => drop(set.insert(k, v)),
            None => remove.push(k),
        }
    }
    Ok((set, remove))
}

/// The body of `PATCH …/{entry}/query`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelsWhere {
    /// Inclusive, µs.
    pub start: Option<u64>,
    /// Exclusive, µs.
    pub stop: Option<u64>,
    /// A condition (`when`), as in a query.
    #[schema(value_type = Option<Object>)]
    pub when: Option<when::Json>,
    #[serde(default)]
    pub strict: bool,
    /// At most this many records (the first ones, oldest first).
    pub limit: Option<u64>,
    /// A value sets the label, `null` removes it.
    pub labels: BTreeMap<String, Option<String>>,
}

/// Updates the labels of every record a query selects.
#[utoipa::path(patch, path = "/api/v1/b/{bucket}/{entry}/query", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path)),
    request_body = LabelsWhere,
    responses((status = 200, body = serde_json::Value, description = "{\"updated\": N}"),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn update_where(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let b: LabelsWhere = json(
        req.into_body(),
        BODY_LIMIT,
        &t.state.limits,
        not_like(r#"{"start": 0, "stop": 100, "when": {"&cam": {"$eq": "front"}}, "labels": {"reviewed": "yes", "draft": null}}"#),
    )
    .await?;
    let (set, remove) = split(b.labels)?;
    if set.is_empty() && remove.is_empty() {
        return Err(AppError::bad_request(
            "labels is empty: give the labels to set (\"key\": \"value\") or remove (\"key\": null)",
        ));
    }
    let query = Query {
        start: b.start,
        stop: b.stop,
        when: b.when.as_ref().map(when::parse).transpose()?,
        strict: b.strict,
        limit: b.limit,
        ..Query::default()
    };
    // A walk of the index until it ends: a stream's place while it runs (as a removal by
    // query).
    let slot = t
        .state
        .streams
        .open(t.caller.name.as_deref().unwrap_or(""))?;
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let n = blocking(move || {
        let _slot = slot;
        Ok(store.update_labels_where(&bucket, &entry, &query, &set, &remove)?)
    })
    .await?;
    Ok(Json(serde_json::json!({"updated": n})).into_response())
}

/// One label update of `PATCH …/{entry}/batch`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelsAt {
    pub ts: u64,
    pub labels: BTreeMap<String, Option<String>>,
}

/// The body of `PATCH …/{entry}/batch`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelsBatch {
    pub records: Vec<LabelsAt>,
}

/// The body of `DELETE …/{entry}/batch`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveBatch {
    pub ts: Vec<u64>,
}

/// The answer of a batch by timestamps: how many succeeded, and one result per item.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BulkResult {
    pub done: u64,
    pub failed: u64,
    /// One per item, in order: status 200, or the status a single request would have had.
    pub results: Vec<RecordResult>,
}

fn too_many(n: usize, max: u64) -> Result<(), AppError> {
    if n as u64 > max {
        return Err(AppError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::PayloadTooLarge,
            format!("{n} items, over --max-batch-records ({max}): send them in several requests"),
        ));
    }
    Ok(())
}

fn results<T>(asked: &[u64], out: Vec<tsblob_storage::Result<T>>) -> BulkResult {
    let mut r = BulkResult {
        done: 0,
        failed: 0,
        results: Vec::with_capacity(out.len()),
    };
    for (ts, o) in asked.iter().zip(out) {
        r.results.push(match o {
            Ok(_) => {
                r.done += 1;
                RecordResult {
                    ts: Some(*ts),
                    status: 200,
                    error: None,
                }
            }
            Err(e) => {
                r.failed += 1;
                let e = AppError::from(e);
                RecordResult {
                    ts: Some(*ts),
                    status: e.status.as_u16(),
                    error: Some(e.answer()),
                }
            }
        });
    }
    r
}

/// Label updates of several records by timestamp, each answered on its own.
#[utoipa::path(patch, path = "/api/v1/b/{bucket}/{entry}/batch", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path)),
    request_body = LabelsBatch,
    responses((status = 200, body = BulkResult), (status = 404, body = ErrorBody)))]
pub async fn update_batch(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let body = BodyChunks::new(req.into_body(), BODY_LIMIT, &t.state.limits)
        .collect(1024)
        .await?;
    let max = t.state.limits.max_batch_records;
    let budget = t.state.bodies.clone();
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    // The parse, the work and the answer's making on the blocking pool: 16 MiB of JSON
    // in, a result per item out, were the runtime's workers' (every other client waited:
    // hostile probe of 2026-11-28).
    let answer = blocking(move || {
        let b: LabelsBatch = serde_json::from_slice(&body).map_err(not_like(
            r#"{"records": [{"ts": 1, "labels": {"reviewed": "yes", "draft": null}}]}"#,
        ))?;
        drop(body);
        too_many(b.records.len(), max)?;
        let mut updates = Vec::with_capacity(b.records.len());
        for r in b.records {
            let (set, remove) = split(r.labels)?;
            updates.push((r.ts, set, remove));
        }
        let asked: Vec<u64> = updates.iter().map(|u| u.0).collect();
        let out = store.update_labels_batch(&bucket, &entry, &updates)?;
        answer_json(&asked, out)
    })
    .await?;
    Ok(json_answer(answer, &budget))
}

/// Removes several records by timestamp, each answered on its own.
#[utoipa::path(delete, path = "/api/v1/b/{bucket}/{entry}/batch", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path)),
    request_body = RemoveBatch,
    responses((status = 200, body = BulkResult), (status = 404, body = ErrorBody)))]
pub async fn remove_batch(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let body = BodyChunks::new(req.into_body(), BODY_LIMIT, &t.state.limits)
        .collect(1024)
        .await?;
    let max = t.state.limits.max_batch_records;
    let budget = t.state.bodies.clone();
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    // (on the blocking pool, as `update_batch`)
    let answer = blocking(move || {
        let b: RemoveBatch =
            serde_json::from_slice(&body).map_err(not_like(r#"{"ts": [1, 2, 3]}"#))?;
        drop(body);
        too_many(b.ts.len(), max)?;
        let out = store.remove_records(&bucket, &entry, &b.ts)?;
        answer_json(&b.ts, out)
    })
    .await?;
    Ok(json_answer(answer, &budget))
}

/// The answer of a batch by timestamps, as JSON: repeated failures of a code with a short
/// message (`results.rs`).
fn answer_json<T>(asked: &[u64], out: Vec<tsblob_storage::Result<T>>) -> Result<Vec<u8>, AppError> {
    let mut r = results(asked, out);
    super::results::Tally::default().take(&mut r.results);
    serde_json::to_vec(&r).map_err(|e| AppError::internal(format!("the answer: {e}")))
}

/// `json` as a 200, counted in the memory budget until sent (`results.rs`).
fn json_answer(json: Vec<u8>, budget: &super::budget::MemoryBudget) -> Response {
    super::results::held_json(StatusCode::OK, json, Some(budget.empty()))
}
