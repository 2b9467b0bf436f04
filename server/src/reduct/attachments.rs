//! ReductStore's entry attachments on tsblob's: ReductStore keeps an entry's attachments as
//! records of a hidden entry `<entry>/$meta`, one per attachment, labelled `key=<name>`
//! (a write of a key replaces the older record; an update labelling it `remove=true` removes
//! it). reduct-py's `write_attachments`, `read_attachments` and `remove_attachments` speak
//! exactly that through batch protocol v2 (`/io/{bucket}/write`, `/io/{bucket}/update`) and
//! v2 queries (`/io/{bucket}/q`, `/io/{bucket}/read`); `batch.rs` and `query.rs` send the
//! records of a `$meta` entry here, which maps them onto the engine's attachments (the same
//! ones `GET /api/v1/b/{bucket}/{entry}/attachments` serves). No storage logic of its own.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use tsblob_storage::{Attachment, BatchRecord, Labels, RecordMeta, Store, ATTACHMENT_KEY_LABEL};

use crate::http::AppError;
use tsblob_proto::ErrorCode;

/// The last segment of ReductStore's attachment entries.
pub const META_SEGMENT: &str = "$meta";

/// The label that removes an attachment when an update sets it to `true`.
const REMOVE_LABEL: &str = "remove";

/// The entry whose attachments `name` (`<entry>/$meta`) holds; `None` for another name.
pub fn meta_parent(name: &str) -> Option<&str> {
    name.strip_suffix(META_SEGMENT)
        .and_then(|p| p.strip_suffix('/'))
        .filter(|p| !p.is_empty())
}

fn refused(message: String) -> AppError {
    AppError::unprocessable(ErrorCode::InvalidAttachment, message)
}

/// A `$meta` record to write as an attachment: its name (the `key` label) and document.
fn as_attachment(
    entry: &str,
    r: BatchRecord,
    max_size: usize,
) -> Result<(String, Vec<u8>), AppError> {
    let Some(key) = r.meta.labels.get(ATTACHMENT_KEY_LABEL) else {
        return Err(refused(format!(
            "records of {entry}/{META_SEGMENT} are attachments and must have the label 'key' (the attachment's name)"
        )));
    };
    if r.meta.labels.get(REMOVE_LABEL).is_some_and(|v| v == "true") {
        return Err(refused(format!(
            "a record of {entry}/{META_SEGMENT} is not written with remove=true: update the attachment's record with it to remove it"
        )));
    }
    tsblob_storage::validate_attachment_name(key)?;
    if r.data.len() > max_size {
        return Err(
            tsblob_storage::Error::from(tsblob_storage::AttachmentError::TooLarge {
                name: key.clone(),
                size: r.data.len(),
                max: max_size,
            })
            .into(),
        );
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(&r.data)
        .map_err(|e| crate::http::attachments::not_json(key, &e))?;
    Ok((key.clone(), r.data))
}

/// Writes the records a batch sent to `<entry>/$meta` as the entry's attachments, all those
/// that are valid in one engine call; returns each failed record's error header and error.
/// A missing bucket fails the whole request (as for records).
pub fn write(
    store: &Store,
    bucket: &str,
    entry: &str,
    records: Vec<(String, BatchRecord)>,
) -> Result<Vec<(String, AppError)>, AppError> {
    store.check_bucket(bucket)?;
    let mut out = Vec::new();
    let mut docs = Vec::new();
    let mut headers = Vec::new();
    let max_size = store.options().attachments.max_size;
    for (header, r) in records {
        match as_attachment(entry, r, max_size) {
            Ok(doc) => {
                docs.push(doc);
                headers.push(header);
            }
            Err(e) => out.push((header, e)),
        }
    }
    if docs.is_empty() {
        return Ok(out);
    }
    match store.write_attachments(bucket, entry, docs) {
        Ok(_) => {}
        Err(e @ tsblob_storage::Error::NotFound(tsblob_storage::NotFound::Bucket(_))) => {
            return Err(e.into())
        }
        Err(e) => {
            let e = AppError::from(e);
            out.extend(headers.into_iter().map(|h| (h, e.clone())));
        }
    }
    Ok(out)
}

/// An update of a `$meta` record: `remove=true` removes the attachment (named by the
/// update's `key` label, else found by its timestamp); any other change is refused.
pub fn update(
    store: &Store,
    bucket: &str,
    entry: &str,
    ts: u64,
    labels: &BTreeMap<String, String>,
) -> Result<(), AppError> {
    if labels.get(REMOVE_LABEL).map(String::as_str) != Some("true") {
        return Err(refused(format!(
            "the records of {entry}/{META_SEGMENT} are attachments, which carry no labels but 'key': write the attachment again to change it, or update its record with remove=true to remove it"
        )));
    }
    remove(
        store,
        bucket,
        entry,
        ts,
        labels.get(ATTACHMENT_KEY_LABEL).cloned(),
    )
}

/// Removes the attachment `name` (or, without one, the one stamped `ts`).
pub fn remove(
    store: &Store,
    bucket: &str,
    entry: &str,
    ts: u64,
    name: Option<String>,
) -> Result<(), AppError> {
    let name = match name {
        Some(n) => n,
        None => store
            .attachments(bucket, entry)?
            .into_iter()
            .find(|a| a.ts == ts)
            .map(|a| a.name)
            .ok_or_else(|| not_found(bucket, entry, ts))?,
    };
    let removed = store.remove_attachments(bucket, entry, Some(&[name]))?;
    if removed.is_empty() {
        return Err(not_found(bucket, entry, ts));
    }
    Ok(())
}

fn not_found(bucket: &str, entry: &str, ts: u64) -> AppError {
    AppError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::AttachmentNotFound,
        format!("no attachment of {bucket}/{entry} at {ts}: it was removed, or written again since (a new timestamp)"),
    )
}

/// An attachment as the record of `<entry>/$meta` a ReductStore query answers.
pub fn as_record(entry: &str, a: Attachment) -> (String, RecordMeta, Vec<u8>) {
    let labels: Labels = [(ATTACHMENT_KEY_LABEL.to_string(), a.name)].into();
    let meta = RecordMeta {
        ts: a.ts,
        size: a.data.len() as u64,
        content_type: "application/json".to_string(),
        labels,
    };
    (format!("{entry}/{META_SEGMENT}"), meta, a.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_entries_name_their_parent() {
        assert_eq!(meta_parent("cam/$meta"), Some("cam"));
        assert_eq!(meta_parent("a/b/$meta"), Some("a/b"));
        assert_eq!(meta_parent("$meta"), None);
        assert_eq!(meta_parent("cam/x$meta"), None);
        assert_eq!(meta_parent("cam"), None);
    }
}
