//! ReductStore's wire formats in one place: its JSON documents (server info, bucket
//! settings and info, entries, tokens), its record headers (`x-reduct-time`,
//! `x-reduct-label-<key>`), the per-record header of batch protocol v1
//! (`x-reduct-time-<ts>: <size>,<content type>,<k>=<v>,...`) and its errors
//! (`x-reduct-error` plus `{"detail": ...}`).
//!
//! ReductStore sends label values raw in header values, where tsblob percent-encodes them
//! (`tsblob_proto::headers`): the adapter converts at this edge, so a label written through
//! one API reads the same through the other.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tsblob_storage::{BucketInfo, BucketSettings, EntryInfo, Labels, QuotaType, RecordMeta};

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

/// A label value as a ReductStore header value: sent raw when HTTP can carry it (visible
/// ASCII and inner spaces), else percent-encoded as tsblob does (HTTP cannot carry it raw).
pub fn label_value(v: &str) -> Option<HeaderValue> {
    let raw_ok =
        v.bytes().all(|b| (0x20..0x7f).contains(&b)) && !v.starts_with(' ') && !v.ends_with(' ');
    if raw_ok {
        HeaderValue::from_str(v).ok()
    } else {
        HeaderValue::from_str(&tsblob_proto::headers::encode_label_value(v)).ok()
    }
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

/// One record's header in batch protocol v1: `<size>,<content type>[,<k>=<v>]...`, a value
/// holding `,` in double quotes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchHeaderV1 {
    pub size: u64,
    pub content_type: Option<String>,
    pub labels: Vec<(String, String)>,
}

/// Splits on commas outside double quotes; quoted parts keep their text without quotes.
fn split_csv(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    if quoted {
        return Err("a double quote is not closed".into());
    }
    out.push(cur);
    Ok(out)
}

impl BatchHeaderV1 {
    pub fn parse(raw: &str) -> Result<BatchHeaderV1, String> {
        let items = split_csv(raw)?;
        let size = items[0]
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("{:?} is not a content length", items[0]))?;
        let content_type = items
            .get(1)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        let mut labels = Vec::new();
        // An item without `=` is skipped, as ReductStore does: reduct-py (1.21) quotes a
        // value only when its *name* holds `,` or `=`, so a value `x,y` arrives as `k=x,y`
        // and ReductStore stores `k=x`.
        for item in items.iter().skip(2) {
            if let Some((k, v)) = item.split_once('=') {
                labels.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        Ok(BatchHeaderV1 {
            size,
            content_type,
            labels,
        })
    }

    /// The header of a record's metadata.
    pub fn format(meta: &tsblob_storage::RecordMeta) -> String {
        let ct = if meta.content_type.is_empty() {
            tsblob_storage::DEFAULT_CONTENT_TYPE
        } else {
            &meta.content_type
        };
        let mut s = format!("{},{ct}", meta.size);
        for (k, v) in &meta.labels {
            if v.contains(',') {
                s.push_str(&format!(",{k}=\"{v}\""));
            } else {
                s.push_str(&format!(",{k}={v}"));
            }
        }
        s
    }
}

/// An entry (or label) name as a header list item: `tchar`s kept, other bytes `%XX`.
pub fn encode_entry(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&'*+-.^_`|~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A record's v2 header relative to the previous record of its entry in the answer:
/// `<size>,<content type>[,<label ops>]` (a label gone is `name=`).
pub fn label_delta_v2(meta: &RecordMeta, prev: Option<&RecordMeta>) -> String {
    let ct = if meta.content_type.is_empty() {
        tsblob_storage::DEFAULT_CONTENT_TYPE
    } else {
        &meta.content_type
    };
    let quote = |v: &str| {
        if v.contains(',') {
            format!("\"{v}\"")
        } else {
            v.to_string()
        }
    };
    let mut ops: Vec<String> = Vec::new();
    match prev {
        None => {
            for (k, v) in &meta.labels {
                ops.push(format!("{k}={}", quote(v)));
            }
        }
        Some(p) => {
            let keys: std::collections::BTreeSet<&String> =
                meta.labels.keys().chain(p.labels.keys()).collect();
            for k in keys {
                match (meta.labels.get(k), p.labels.get(k)) {
                    (a, b) if a == b => {}
                    (None, _) => ops.push(format!("{k}=")),
                    (Some(v), _) => ops.push(format!("{k}={}", quote(v))),
                }
            }
        }
    }
    if ops.is_empty() {
        format!("{},{ct}", meta.size)
    } else {
        format!("{},{ct},{}", meta.size, ops.join(","))
    }
}

/// Labels as tsblob's map.
pub fn to_labels(pairs: Vec<(String, String)>) -> Labels {
    pairs.into_iter().collect()
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

/// A message as a header value: controls (line breaks) become spaces, other characters
/// HTTP cannot carry `?`.
pub fn header_safe(message: &str) -> HeaderValue {
    let clean: String = message
        .chars()
        .map(|c| match c {
            ' '..='~' => c,
            c if c.is_control() => ' ',
            _ => '?',
        })
        .collect();
    HeaderValue::from_str(clean.trim()).unwrap_or(HeaderValue::from_static("error"))
}

/// A batch record's error header value: `<status>,<message>`.
pub fn record_error(e: &AppError) -> HeaderValue {
    header_safe(&format!("{},{}", e.status.as_u16(), e.answer().message))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn batch_v1_headers_parse_as_reductstore_documents_them() {
        // From ReductStore's batch protocol documentation and reduct-py's make_headers_v1.
        let h = BatchHeaderV1::parse("10,text/plain,label1=value1,label2=\"value,2\"").unwrap();
        assert_eq!(h.size, 10);
        assert_eq!(h.content_type.as_deref(), Some("text/plain"));
        assert_eq!(
            h.labels,
            vec![
                ("label1".into(), "value1".into()),
                ("label2".into(), "value,2".into())
            ]
        );
        let h = BatchHeaderV1::parse("5").unwrap();
        assert_eq!((h.size, h.content_type), (5, None));
        assert!(BatchHeaderV1::parse("x,text/plain").is_err());
        // reduct-py's unquoted `k=x,y`: ReductStore keeps `k=x`.
        let h = BatchHeaderV1::parse("1,a,k=x,y").unwrap();
        assert_eq!(h.labels, vec![("k".into(), "x".into())]);
        assert!(BatchHeaderV1::parse("1,a,b=\"c").is_err());
    }

    #[test]
    fn batch_v1_header_round_trips_a_comma_value() {
        let meta = tsblob_storage::RecordMeta {
            ts: 1,
            size: 3,
            content_type: "text/plain".into(),
            labels: [("a".to_string(), "x,y".to_string())].into_iter().collect(),
        };
        let s = BatchHeaderV1::format(&meta);
        assert_eq!(s, "3,text/plain,a=\"x,y\"");
        let back = BatchHeaderV1::parse(&s).unwrap();
        assert_eq!(back.labels, vec![("a".into(), "x,y".into())]);
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

    #[test]
    fn error_headers_stay_valid_header_values() {
        let r = error_response(StatusCode::NOT_FOUND, "entry 'ü' not found\n");
        assert_eq!(r.headers()[ERROR_HEADER], "entry '?' not found");
    }
}
