//! ReductStore's wire formats in one place: its JSON documents (server info, bucket
//! settings and info, entries, tokens), its record headers (`x-reduct-time`,
//! `x-reduct-label-<key>`), the per-record header of batch protocol v1
//! (`x-reduct-time-<ts>: <size>,<content type>,<k>=<v>,...`, its text codec in `header.rs`)
//! and its errors (`x-reduct-error` plus `{"detail": ...}`).
//!
//! ReductStore sends label values raw in header values, where tsblob percent-encodes them
//! (`tsblob_proto::headers`): the adapter converts at this edge, so a label written through
//! one API reads the same through the other.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tsblob_storage::{BucketInfo, BucketSettings, EntryInfo, Labels, QuotaType};

pub use super::header::{encode_entry, label_delta_v2, BatchHeaderV1};

use crate::http::AppError;

/// The API level this adapter speaks, sent as `x-reduct-api` on every answer (clients pick
/// their protocols by it: reduct-py uses batch protocol v2 and `/io` queries from 1.18).
pub const API_VERSION: &str = "1.21";
/// The ReductStore version reported by `/info`: the release whose API this adapter follows.
pub const SERVER_VERSION: &str = "1.21.0";

pub const TIME_HEADER: &str = "x-reduct-time";
pub const LABEL_PREFIX: &str = "x-reduct-label-";
pub const TIME_PREFIX: &str = "x-reduct-time-";
pub const ERROR_HEADER: &str = "x-reduct-error";
pub const ERROR_PREFIX: &str = "x-reduct-error-";
pub const LAST_HEADER: &str = "x-reduct-last";

/// ReductStore's quota type names.
pub fn quota_name(q: QuotaType) -> &'static str {
    match q {
        QuotaType::None => "NONE",
        QuotaType::Fifo => "FIFO",
        QuotaType::Hard => "HARD",
    }
}

/// A quota type by ReductStore's name (any case, as the engine's own names).
fn parse_quota(s: &str) -> Result<QuotaType, AppError> {
    s.parse().map_err(|_| {
        AppError::invalid_settings(format!("quota_type {s:?} is not one of NONE, FIFO, HARD"))
    })
}

/// ReductStore's default `max_block_size` (bytes): 64 MB, where tsblob's is 64 MiB.
pub const DEFAULT_MAX_BLOCK_SIZE: u64 = 64_000_000;

/// The settings a bucket created through this API starts from, and `/info`'s defaults:
/// tsblob's (the `--default-*` flags), with ReductStore's `max_block_size` unless the
/// operator chose one (`--default-max-block-size` other than tsblob's 64 MiB).
pub fn bucket_defaults(native: &BucketSettings) -> BucketSettings {
    let mut s = native.clone();
    if s.max_block_size == BucketSettings::default().max_block_size {
        s.max_block_size = DEFAULT_MAX_BLOCK_SIZE;
    }
    s
}

/// A bucket's settings as ReductStore writes them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Settings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_block_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_block_records: Option<u64>,
}

impl From<&BucketSettings> for Settings {
    fn from(s: &BucketSettings) -> Self {
        Settings {
            quota_type: Some(quota_name(s.quota_type).to_string()),
            quota_size: Some(s.quota_size),
            max_block_size: Some(s.max_block_size),
            max_block_records: Some(s.max_block_records),
        }
    }
}

impl Settings {
    /// The settings as an update of tsblob's (absent fields keep their value).
    pub fn update(&self) -> Result<tsblob_storage::BucketSettingsUpdate, AppError> {
        Ok(tsblob_storage::BucketSettingsUpdate {
            quota_type: self.quota_type.as_deref().map(parse_quota).transpose()?,
            quota_size: self.quota_size,
            max_block_size: self.max_block_size,
            max_block_records: self.max_block_records,
            ..Default::default()
        })
    }
}

/// A bucket in `/list` and in a bucket's `info`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BucketJson {
    pub name: String,
    pub entry_count: u64,
    pub size: u64,
    pub oldest_record: u64,
    pub latest_record: u64,
    pub is_provisioned: bool,
    pub status: String,
}

impl From<&BucketInfo> for BucketJson {
    fn from(b: &BucketInfo) -> Self {
        BucketJson {
            name: b.name.clone(),
            entry_count: b.entry_count,
            size: b.size,
            oldest_record: b.oldest.unwrap_or(0),
            latest_record: b.latest.unwrap_or(0),
            is_provisioned: false,
            status: "READY".into(),
        }
    }
}

/// An entry in a bucket's answer.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct EntryJson {
    pub name: String,
    pub size: u64,
    pub record_count: u64,
    pub block_count: u64,
    pub oldest_record: u64,
    pub latest_record: u64,
    pub status: String,
}

impl From<&EntryInfo> for EntryJson {
    fn from(e: &EntryInfo) -> Self {
        EntryJson {
            name: e.name.clone(),
            size: e.size,
            record_count: e.record_count,
            block_count: e.block_count,
            oldest_record: e.oldest.unwrap_or(0),
            latest_record: e.latest.unwrap_or(0),
            status: "READY".into(),
        }
    }
}

/// `GET /api/v1/b/{bucket}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct BucketFullJson {
    pub info: BucketJson,
    pub settings: Settings,
    pub entries: Vec<EntryJson>,
}

/// A label value as a ReductStore header value ([`super::header::label_text`]).
pub fn label_value(v: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&super::header::label_text(v)).ok()
}

/// A ReductStore header value as a label value: the raw text (UTF-8 is accepted as
/// ReductStore does).
fn header_text(key: &str, v: &HeaderValue) -> Result<String, AppError> {
    String::from_utf8(v.as_bytes().to_vec()).map_err(|_| {
        AppError::invalid_label(format!("label {key:?}: the header value is not UTF-8"))
    })
}

/// The labels of a request's `x-reduct-label-<key>` headers, in order (an update removes
/// the labels with an empty value).
pub fn labels_from(headers: &HeaderMap) -> Result<Vec<(String, String)>, AppError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix(LABEL_PREFIX) {
            tsblob_storage::validate_label_key(key)?;
            if out.iter().any(|(k, _)| k == key) {
                return Err(AppError::invalid_label(format!(
                    "label {key:?} is given twice: send each label once"
                )));
            }
            out.push((key.to_string(), header_text(key, value)?));
        }
    }
    Ok(out)
}

/// Puts a record's metadata into ReductStore's headers.
pub fn put_meta(headers: &mut HeaderMap, meta: &tsblob_storage::RecordMeta, entry: &str) {
    let ct = if meta.content_type.is_empty() {
        tsblob_storage::DEFAULT_CONTENT_TYPE
    } else {
        meta.content_type.as_str()
    };
    if let Ok(v) = HeaderValue::from_str(ct) {
        headers.insert(axum::http::header::CONTENT_TYPE, v);
    }
    headers.insert(TIME_HEADER, HeaderValue::from(meta.ts));
    if let Ok(v) = HeaderValue::from_str(entry) {
        headers.insert("x-reduct-entry", v);
    }
    for (k, v) in &meta.labels {
        if let (Ok(name), Some(value)) = (
            HeaderName::try_from(format!("{LABEL_PREFIX}{k}")),
            label_value(v),
        ) {
            headers.insert(name, value);
        }
    }
}

/// Labels as tsblob's map.
pub fn to_labels(pairs: Vec<(String, String)>) -> Labels {
    pairs.into_iter().collect()
}

/// The `n`th text in double quotes of a native message (the engine and the token store
/// quote names with `{:?}`); `None` when there is none, or when it holds an escape (a name
/// the formats below could not show as ReductStore does).
fn quoted(message: &str, n: usize) -> Option<&str> {
    let part = message.split('"').nth(2 * n + 1)?;
    (!part.contains('\\') && message.split('"').count() > 2 * n + 2).then_some(part)
}

/// ReductStore's text for a native error, where ReductStore clients read it (reduct-py's
/// tests compare `Bucket 'X' is not found`, `Token 'X' doesn't exist`...): the names come
/// from the native message, whose shapes the tests below pin. `None`: keep tsblob's message.
/// Only the ReductStore API answers with these; the native API keeps its own texts.
pub fn reduct_message(code: &str, message: &str) -> Option<String> {
    Some(match code {
        "bucket_not_found" => format!("Bucket '{}' is not found", quoted(message, 0)?),
        "bucket_exists" => format!("Bucket '{}' already exists", quoted(message, 0)?),
        "entry_not_found" => format!(
            "Entry '{}' not found in bucket '{}'",
            quoted(message, 0)?,
            quoted(message, 1)?
        ),
        "entry_exists" => format!(
            "Entry '{}' already exists in bucket '{}'",
            quoted(message, 0)?,
            quoted(message, 1)?
        ),
        "record_not_found" => {
            let rest = message.strip_prefix("no record at timestamp ")?;
            let (ts, path) = rest.split_once(" in ")?;
            ts.parse::<u64>().ok()?;
            format!("Record {ts} not found in entry {path}")
        }
        "timestamp_exists" => {
            let rest = message.strip_prefix("a record with timestamp ")?;
            let (ts, _) = rest.split_once(' ')?;
            ts.parse::<u64>().ok()?;
            format!("A record with timestamp {ts} already exists")
        }
        "missing_label" => format!("Reference '{}' not found", quoted(message, 0)?),
        "token_not_found" => format!("Token '{}' doesn't exist", quoted(message, 0)?),
        // The reserved `admin` keeps tsblob's text: "already exists" beside a 404 for the
        // same name on every other route contradicted itself (hostile probe of 2026-11-29).
        "token_exists" if message.contains("is reserved") => return None,
        "token_exists" => format!("Token '{}' already exists", quoted(message, 0)?),
        _ => return None,
    })
}

/// ReductStore's status for a native error where the two APIs differ: a `when` that does
/// not parse (the evaluator's messages start with `when: `, `crate::when::WhenError`) is
/// 422 there and 400 on tsblob's API; a label a `strict` condition compares but a record
/// lacks is 404 there (`Reference 'X' not found`, which `rcli cp --strict` reports and goes
/// on) and 422 on tsblob's. Other statuses are the same on both.
pub fn reduct_status(code: &str, message: &str, status: StatusCode) -> StatusCode {
    match code {
        "bad_request" if message.starts_with("when: ") => StatusCode::UNPROCESSABLE_ENTITY,
        "missing_label" => StatusCode::NOT_FOUND,
        // ReductStore answers a full HARD quota `400 Quota of 'b' exceeded` (parity probe of
        // 2026-11-29: code checking for 400 missed tsblob's 507).
        "quota_exceeded" => StatusCode::BAD_REQUEST,
        _ => status,
    }
}

/// An error as ReductStore sends it: the status, `x-reduct-error: <message>` and
/// `{"detail": "<message>"}`.
pub fn error_response(status: StatusCode, message: &str) -> Response {
    let mut resp = (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        serde_json::json!({ "detail": message }).to_string(),
    )
        .into_response();
    resp.headers_mut()
        .insert(ERROR_HEADER, header_safe(message));
    resp
}

/// A message as a header value: controls (line breaks) become spaces, the non-ASCII
/// characters our own messages use their ASCII spelling (`µs` read `?s`), others `?`.
pub fn header_safe(message: &str) -> HeaderValue {
    let mut clean = String::with_capacity(message.len());
    for c in message.chars() {
        match c {
            ' '..='~' => clean.push(c),
            c if c.is_control() => clean.push(' '),
            'µ' => clean.push('u'),
            '…' => clean.push_str("..."),
            '—' | '–' => clean.push('-'),
            '→' => clean.push_str("->"),
            '×' => clean.push('x'),
            '≥' => clean.push_str(">="),
            '≤' => clean.push_str("<="),
            _ => clean.push('?'),
        }
    }
    HeaderValue::from_str(clean.trim()).unwrap_or(HeaderValue::from_static("error"))
}

/// A batch record's error header value: `<status>,<message>`.
pub fn record_error(e: &AppError) -> HeaderValue {
    let answer = e.answer();
    let status = reduct_status(&answer.code, &answer.message, e.status);
    let message = reduct_message(&answer.code, &answer.message).unwrap_or(answer.message);
    header_safe(&format!("{},{message}", status.as_u16()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Bug (parity probe of 2026-11-29): a full HARD quota was 507 on the ReductStore API,
    /// where ReductStore answers 400 (`Quota of 'b' exceeded`).
    #[test]
    fn a_full_hard_quota_was_507_where_reductstore_answers_400() {
        assert_eq!(
            reduct_status(
                "quota_exceeded",
                "bucket b has a HARD quota",
                StatusCode::INSUFFICIENT_STORAGE
            ),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            reduct_status("disk_full", "no space", StatusCode::INSUFFICIENT_STORAGE),
            StatusCode::INSUFFICIENT_STORAGE
        );
    }

    /// Bugs "a malformed `when` is 400" and "a strict query's missing label is 422": the
    /// ReductStore API answers ReductStore's statuses, the native API keeps its own.
    #[test]
    fn a_bad_when_is_422_and_a_missing_strict_label_404_in_reductstores_words() {
        let bad_when =
            AppError::from(crate::when::parse_text(r#"{"&k": {"$foo": 1}}"#).unwrap_err());
        assert_eq!(bad_when.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            record_error(&bad_when).to_str().unwrap().split(',').next(),
            Some("422")
        );
        let missing = AppError::from(tsblob_storage::Error::Query(
            tsblob_storage::QueryError::MissingLabel {
                label: "zz".into(),
                ts: 5,
            },
        ));
        assert_eq!(missing.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            record_error(&missing).to_str().unwrap(),
            "404,Reference 'zz' not found"
        );
        // Other errors keep their status.
        let other = AppError::bad_request("when is fine, this is not");
        assert_eq!(
            record_error(&other).to_str().unwrap().split(',').next(),
            Some("400")
        );
    }

    #[test]
    fn default_max_block_size_was_tsblobs_64_mib_not_reductstores_64_mb() {
        let d = bucket_defaults(&BucketSettings::default());
        assert_eq!(d.max_block_size, 64_000_000);
        assert_eq!(
            d.max_block_records,
            BucketSettings::default().max_block_records
        );
        // An operator's --default-max-block-size is kept.
        let chosen = BucketSettings {
            max_block_size: 8 << 20,
            ..BucketSettings::default()
        };
        assert_eq!(bucket_defaults(&chosen).max_block_size, 8 << 20);
    }

    #[test]
    fn a_quota_of_zero_bytes_is_valid_settings() {
        for q in [QuotaType::Fifo, QuotaType::Hard] {
            let s = BucketSettings {
                quota_type: q,
                quota_size: 0,
                ..BucketSettings::default()
            };
            assert_eq!(s.validate(), Ok(()), "{q:?}");
        }
    }

    #[test]
    fn settings_use_reductstore_names() {
        let s = Settings::from(&BucketSettings::default());
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["quota_type"], "NONE");
        let u: Settings =
            serde_json::from_str(r#"{"quota_type":"FIFO","quota_size":1000}"#).unwrap();
        assert_eq!(u.update().unwrap().quota_type, Some(QuotaType::Fifo));
        let bad: Settings = serde_json::from_str(r#"{"quota_type":"LIFO"}"#).unwrap();
        assert!(bad.update().is_err());
    }

    /// The native messages the mapping reads, made by the code that makes them.
    #[test]
    fn native_errors_read_as_reductstore_words_them() {
        use tsblob_storage::{BucketError, Error, NotFound, RenameError, WriteError};
        let cases: Vec<(AppError, &str)> = vec![
            (
                Error::NotFound(NotFound::Bucket("NOTEXIST".into())).into(),
                "Bucket 'NOTEXIST' is not found",
            ),
            (
                Error::Bucket(BucketError::Exists("b-1".into())).into(),
                "Bucket 'b-1' already exists",
            ),
            (
                Error::NotFound(NotFound::Entry {
                    bucket: "b".into(),
                    entry: "cam/front".into(),
                })
                .into(),
                "Entry 'cam/front' not found in bucket 'b'",
            ),
            (
                Error::Rename(RenameError::EntryExists {
                    bucket: "b".into(),
                    entry: "new".into(),
                })
                .into(),
                "Entry 'new' already exists in bucket 'b'",
            ),
            (
                Error::NotFound(NotFound::Record {
                    bucket: "bucket-1".into(),
                    entry: "entry-1".into(),
                    ts: 1000,
                })
                .into(),
                "Record 1000 not found in entry bucket-1/entry-1",
            ),
            (
                Error::Write(WriteError::Conflict {
                    bucket: "b".into(),
                    entry: "e".into(),
                    ts: 2,
                })
                .into(),
                "A record with timestamp 2 already exists",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(
                reduct_message(e.code.as_str(), &e.message).as_deref(),
                Some(want),
                "{e}"
            );
            assert_eq!(
                record_error(&e),
                format!("{},{want}", e.status.as_u16()).as_str()
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let auth = crate::http::auth::Auth::load(dir.path(), None).unwrap();
        let spec = || crate::http::auth::TokenSpec {
            full_access: true,
            read: vec![],
            write: vec![],
            expires_at: None,
            ttl: None,
            ip_allowlist: vec![],
        };
        auth.create("t-1", spec()).unwrap();
        let e = auth.create("t-1", spec()).unwrap_err();
        assert_eq!(
            reduct_message(e.code.as_str(), &e.message).as_deref(),
            Some("Token 't-1' already exists")
        );
        // Bug: the reserved `admin` was "Token 'admin' already exists" here and 404 "doesn't
        // exist" on every other route (hostile probe of 2026-11-29): it says it is reserved.
        let e = auth.create("admin", spec()).unwrap_err();
        assert_eq!(reduct_message(e.code.as_str(), &e.message), None);
        assert!(e.message.contains("is reserved"), "{}", e.message);
        let e = auth.remove("NOTEXIST", false).unwrap_err();
        assert_eq!(
            reduct_message(e.code.as_str(), &e.message).as_deref(),
            Some("Token 'NOTEXIST' doesn't exist")
        );
        // Anything else keeps tsblob's message.
        assert_eq!(reduct_message("invalid_label", "label \"a\" is bad"), None);
        assert_eq!(
            reduct_message("bucket_not_found", "bucket \"a\\\"b\" does not exist"),
            None
        );
        assert_eq!(reduct_message("bucket_not_found", "no quotes"), None);
    }

    #[test]
    fn error_headers_stay_valid_header_values() {
        let r = error_response(StatusCode::NOT_FOUND, "entry 'ü' not found\n");
        assert_eq!(r.headers()[ERROR_HEADER], "entry '?' not found");
        // Bug (docs walkthrough): "expired at 1795926215000000 ?s".
        let r = error_response(StatusCode::GONE, "expired at 17 µs — 1 s ago");
        assert_eq!(r.headers()[ERROR_HEADER], "expired at 17 us - 1 s ago");
    }
}
