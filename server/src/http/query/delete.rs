//! `DELETE .../query`: removes the records a query selects (a plain range, or with a
//! condition, filters or a limit, those that match).

use axum::extract::Request;
use axum::response::{IntoResponse, Response};

use super::parse::{one_entry, parse_query};
use crate::http::errors::{blocking, AppError, ErrorBody};
use crate::http::params::pairs;
use crate::http::records::{remove_range, Target};

#[utoipa::path(delete, path = "/api/v1/b/{bucket}/{entry}/query", tag = "records",
    params(("bucket" = String, Path), ("entry" = String, Path),
           ("start" = Option<u64>, Query), ("stop" = Option<u64>, Query),
           ("when" = Option<String>, Query, description = "only records matching this condition (URL-encoded JSON)"),
           ("strict" = Option<bool>, Query), ("limit" = Option<u64>, Query)),
    responses((status = 200, body = serde_json::Value, description = "{\"removed\": N}"),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn remove(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let raw = req.uri().query();
    let given = pairs(raw);
    if given.iter().any(|(k, _)| k == "ts") {
        return Err(AppError::bad_request(
            "the query route removes ranges: give start and stop, not ts",
        ));
    }
    if let Some((k, _)) = given
        .iter()
        .find(|(k, _)| k == "heartbeat" || k == "settle_ms")
    {
        return Err(AppError::bad_request(format!(
            "{k} has no meaning for DELETE (a removal sends one answer, {{\"removed\": N}}, at its end): leave it out"
        )));
    }
    let r = one_entry(parse_query(raw)?)?;
    if r.meta || r.query.descending || r.follow.is_some() {
        return Err(AppError::bad_request(
            "meta, desc and follow have no meaning for DELETE: removal goes oldest first and answers {\"removed\": N}",
        ));
    }
    let q = r.query;
    // A walk of the index on a blocking thread until it ends, whether or not its client
    // stays: it takes a stream's place (`--max-streams`, `--max-streams-per-token`) for
    // as long as it runs.
    let slot = t
        .state
        .streams
        .open(t.caller.name.as_deref().unwrap_or(""))?;
    if q.when.is_none() && q.filters.is_empty() && q.limit.is_none() {
        let store = t.state.store.clone();
        return remove_range(store, slot, t.bucket, t.entry, q.start, q.stop).await;
    }
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let n = blocking(move || {
        let _slot = slot;
        Ok(store.remove_where(&bucket, &entry, &q)?)
    })
    .await?;
    Ok(axum::Json(serde_json::json!({"removed": n})).into_response())
}
