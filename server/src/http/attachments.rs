//! An entry's attachments (issue 28): small JSON documents kept with the entry under a
//! name, never records (`tsblob_storage`'s `write_attachments`, `attachments`,
//! `remove_attachments`). Routes: `GET|PUT|DELETE /api/v1/b/{bucket}/{entry}/attachments`
//! (all of them) and `…/attachments/{name}` (one). The ReductStore API's `<entry>/$meta`
//! (`reduct/attachments.rs`) calls the same engine functions.

use std::collections::BTreeMap;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::value::RawValue;
use tsblob_storage::Attachment;

use super::body::{content_length, BodyChunks};
use super::errors::{blocking, AppError, ErrorBody};
use super::records::Target;
use super::AppState;
use tsblob_proto::ErrorCode;

/// JSON the attachments of a write may add around their documents (names, quotes, spaces).
const JSON_SLACK: u64 = 1 << 20;

/// 422 `invalid_attachment`: what a document must be.
pub fn not_json(name: &str, e: &serde_json::Error) -> AppError {
    AppError::unprocessable(
        ErrorCode::InvalidAttachment,
        format!("attachment {name:?} is not one JSON document ({e}): send JSON, e.g. {{\"version\": 2}}"),
    )
}

/// 413 `attachment_too_large`, before the body is read or when it crosses the limit.
fn too_large(what: &str, limit: u64) -> AppError {
    AppError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::AttachmentTooLarge,
        format!("{what} is over {limit} bytes, the server's limit (--max-attachment-size, and --max-attachments of them in one write): attachments are small documents; keep large data in records"),
    )
}

/// Reads a body of at most `limit` bytes (refused from its `Content-Length` before reading).
async fn body(req: Request, state: &AppState, limit: u64, what: &str) -> Result<Vec<u8>, AppError> {
    if content_length(req.headers())?.is_some_and(|n| n > limit) {
        return Err(too_large(what, limit));
    }
    let mut chunks = BodyChunks::new(req.into_body(), limit, &state.limits);
    let mut out = Vec::new();
    loop {
        match chunks.next().await {
            Ok(Some(c)) => out.extend_from_slice(&c),
            Ok(None) => return Ok(out),
            Err(e) if e.code == ErrorCode::PayloadTooLarge => return Err(too_large(what, limit)),
            Err(e) => return Err(e),
        }
    }
}

/// Every attachment of an entry, as one JSON object: name → document.
#[utoipa::path(get, path = "/api/v1/b/{bucket}/{entry}/attachments", tag = "attachments",
    params(("bucket" = String, Path), ("entry" = String, Path)),
    responses((status = 200, body = serde_json::Value, description = "`{name: document}`, by name; `{}` for an entry without attachments"),
              (status = 404, body = ErrorBody, description = "`bucket_not_found`, `entry_not_found`")))]
pub async fn list(t: Target) -> Result<Response, AppError> {
    t.caller.require_read(&t.bucket)?;
    // Room for the most an entry's attachments can be, taken before they are read (120
    // unread requests each read 4 MB, then 90 of them were refused 503 for want of room:
    // 542 MB, reads probe of 2026-11-28); then brought down to what they are.
    let limits = t.state.store.options().attachments;
    let most = (limits.max_count as u64).saturating_mul(limits.max_size as u64 + 4096);
    let mut room = t.state.bodies.empty();
    room.cover(most, "an entry's attachments").await?;
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let all = blocking(move || Ok(store.attachments(&bucket, &entry)?)).await?;
    // Up to 64 documents of 64 KiB, held (read, as JSON, as the answer's text) until a
    // client that may not read takes it: in --memory-budget, as a bucket's entry list.
    let held: u64 = all
        .iter()
        .map(|a| 3 * (a.name.len() + a.data.len()) as u64 + 64)
        .sum();
    if !room.try_resize(held) {
        // More than was taken (three copies of a full set): wait for the rest.
        room.cover(held, "an entry's attachments").await?;
    }
    let doc: BTreeMap<String, Box<RawValue>> = all
        .iter()
        .map(|a| (a.name.clone(), crate::answers::attachment_json(a)))
        .collect();
    drop(all);
    super::buckets::counted_json(&doc, room)
}

/// One attachment: its document.
#[utoipa::path(get, path = "/api/v1/b/{bucket}/{entry}/attachments/{name}", tag = "attachments",
    params(("bucket" = String, Path), ("entry" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = serde_json::Value, description = "the document; `x-tsblob-ts`: when it was written (µs)"),
              (status = 404, body = ErrorBody, description = "`bucket_not_found`, `entry_not_found`, `attachment_not_found`")))]
pub async fn read(t: Target, name: String) -> Result<Response, AppError> {
    t.caller.require_read(&t.bucket)?;
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let a = blocking(move || Ok(store.attachment(&bucket, &entry, &name)?)).await?;
    let mut resp = Json(crate::answers::attachment_json(&a)).into_response();
    resp.headers_mut()
        .insert(tsblob_proto::headers::TS_HEADER, a.ts.into());
    Ok(resp)
}

/// The answer to a write: the names written with their timestamps.
fn written(stored: &[Attachment]) -> Response {
    let doc: BTreeMap<&str, u64> = stored.iter().map(|a| (a.name.as_str(), a.ts)).collect();
    Json(serde_json::json!({ "written": doc })).into_response()
}

/// Writes several attachments at once, all or none: a JSON object name → document. An
/// existing attachment of a name is replaced; the entry is created if it does not exist.
#[utoipa::path(put, path = "/api/v1/b/{bucket}/{entry}/attachments", tag = "attachments",
    params(("bucket" = String, Path), ("entry" = String, Path)),
    request_body(content = serde_json::Value, description = "`{name: document, ...}`"),
    responses((status = 200, body = serde_json::Value, description = "`{\"written\": {name: ts}}`"),
              (status = 404, body = ErrorBody, description = "`bucket_not_found`"),
              (status = 413, body = ErrorBody, description = "`attachment_too_large`"),
              (status = 422, body = ErrorBody, description = "`invalid_attachment`, `invalid_name`, `too_many_attachments`")))]
pub async fn write_many(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let limits = t.state.store.options().attachments;
    let limit = (limits.max_size as u64)
        .saturating_mul(limits.max_count as u64)
        .saturating_add(JSON_SLACK);
    let bytes = body(req, &t.state, limit, "the body of an attachments write").await?;
    let docs = parse_docs(&bytes, limits.max_count)?;
    let docs: Vec<(String, Vec<u8>)> = docs
        .into_iter()
        .map(|(n, v)| (n, v.get().as_bytes().to_vec()))
        .collect();
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let stored = blocking(move || Ok(store.write_attachments(&bucket, &entry, docs)?)).await?;
    Ok(written(&stored))
}

/// The attachments of a write's body, name → document (a repeated name keeps its last
/// document), read until more than `max` distinct names: a body of 580,000 short names (5
/// MiB, under the body limit) built ~100 MB of maps before the store refused them.
fn parse_docs(bytes: &[u8], max: usize) -> Result<BTreeMap<String, Box<RawValue>>, AppError> {
    use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, Visitor};
    struct Docs(usize);
    impl<'de> Visitor<'de> for Docs {
        type Value = BTreeMap<String, Box<RawValue>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object of attachments")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((name, doc)) = map.next_entry::<String, Box<RawValue>>()? {
                out.insert(name, doc);
                if out.len() > self.0 {
                    return Err(A::Error::custom(TOO_MANY));
                }
            }
            Ok(out)
        }
    }
    impl<'de> DeserializeSeed<'de> for Docs {
        type Value = BTreeMap<String, Box<RawValue>>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    const TOO_MANY: &str = "too many attachments";
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let docs = Docs(max)
        .deserialize(&mut de)
        .and_then(|d| de.end().map(|()| d));
    docs.map_err(|e| {
        if e.to_string().starts_with(TOO_MANY) {
            AppError::unprocessable(
                ErrorCode::TooManyAttachments,
                format!("the body holds more than {max} attachments, the limit of an entry (--max-attachments): write fewer at once"),
            )
        } else {
            AppError::unprocessable(
                ErrorCode::InvalidAttachment,
                format!("the body must be one JSON object of attachments, name → document, e.g. {{\"schema\": {{\"version\": 2}}}} ({e})"),
            )
        }
    })
}

/// Writes one attachment: the body is its JSON document.
#[utoipa::path(put, path = "/api/v1/b/{bucket}/{entry}/attachments/{name}", tag = "attachments",
    params(("bucket" = String, Path), ("entry" = String, Path), ("name" = String, Path)),
    request_body(content = serde_json::Value, description = "the document"),
    responses((status = 200, body = serde_json::Value, description = "`{\"written\": {name: ts}}`"),
              (status = 404, body = ErrorBody, description = "`bucket_not_found`"),
              (status = 413, body = ErrorBody, description = "`attachment_too_large`: over --max-attachment-size"),
              (status = 422, body = ErrorBody, description = "`invalid_attachment`: not JSON; `invalid_name`; `too_many_attachments`")))]
pub async fn write_one(t: Target, name: String, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    tsblob_storage::validate_attachment_name(&name)?;
    let limit = t.state.store.options().attachments.max_size as u64;
    let bytes = body(req, &t.state, limit, &format!("attachment {name:?}")).await?;
    serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).map_err(|e| not_json(&name, &e))?;
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let stored =
        blocking(move || Ok(store.write_attachments(&bucket, &entry, vec![(name, bytes)])?))
            .await?;
    Ok(written(&stored))
}

/// Removes attachments: one (`…/attachments/{name}`, 404 if the entry has none of that
/// name), or all of them (`…/attachments`, with `?names=a,b` only those).
#[utoipa::path(delete, path = "/api/v1/b/{bucket}/{entry}/attachments", tag = "attachments",
    params(("bucket" = String, Path), ("entry" = String, Path),
           ("names" = Option<String>, Query, description = "comma-separated names: only these (absent: every attachment)")),
    responses((status = 200, body = serde_json::Value, description = "`{\"removed\": [names]}`"),
              (status = 404, body = ErrorBody, description = "`bucket_not_found`, `entry_not_found`")))]
pub async fn remove(
    t: Target,
    name: Option<String>,
    query: Option<String>,
) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let names: Option<Vec<String>> = match &name {
        Some(n) => Some(vec![n.clone()]),
        None => query_names(query.as_deref())?,
    };
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let (b, e) = (bucket.clone(), entry.clone());
    let removed =
        blocking(move || Ok(store.remove_attachments(&bucket, &entry, names.as_deref())?)).await?;
    if let (Some(n), true) = (name, removed.is_empty()) {
        return Err(
            tsblob_storage::Error::from(tsblob_storage::AttachmentError::NotFound {
                bucket: b,
                entry: e,
                name: n,
            })
            .into(),
        );
    }
    Ok(Json(serde_json::json!({ "removed": removed })).into_response())
}

/// `?names=a,b`; no other parameter.
fn query_names(query: Option<&str>) -> Result<Option<Vec<String>>, AppError> {
    let mut names = None;
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "names" => {
                names = Some(
                    v.split(',')
                        .filter(|n| !n.is_empty())
                        .map(str::to_string)
                        .collect(),
                )
            }
            other => {
                return Err(AppError::bad_request(format!(
                    "unknown parameter {other:?}: DELETE …/attachments takes only names=a,b"
                )))
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod parse_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Bug "attachment key flood": a body of 580,000 short names (5 MiB, under the body
    /// limit) was parsed whole into maps of ~100 MB before the store refused the count;
    /// the parse now stops at the first name past `--max-attachments`.
    #[test]
    fn a_body_of_many_names_stops_at_the_first_past_the_limit() {
        let many: String = (0..580_000)
            .map(|i| format!("\"k{i}\":0"))
            .collect::<Vec<_>>()
            .join(",");
        let e = parse_docs(format!("{{{many}}}").as_bytes(), 64).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.code),
            (422, ErrorCode::TooManyAttachments)
        );
        assert!(
            e.message.contains("more than 64 attachments"),
            "{}",
            e.message
        );
        // A repeated name keeps its last document and counts once.
        let d = parse_docs(br#"{"a": 1, "b": {"x": 2}, "a": 3}"#, 2).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d["a"].get(), "3");
        for bad in [&b"[1]"[..], b"{\"a\": 1} x", b"{\"a\":"] {
            let e = parse_docs(bad, 64).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidAttachment, "{}", e.message);
        }
    }
}
