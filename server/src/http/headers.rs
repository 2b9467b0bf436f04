//! Record metadata in HTTP headers: `Content-Type`, `x-tsblob-ts` and one
//! `x-tsblob-label-<key>` header per label, values percent-encoded UTF-8.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use tsblob_proto::headers::{decode_label_value, encode_label_value, label_header};
pub use tsblob_proto::headers::{LABEL_PREFIX, TS_HEADER};
use tsblob_proto::ErrorCode;
use tsblob_storage::{Labels, RecordMeta, DEFAULT_CONTENT_TYPE};

use super::errors::AppError;

/// [`TS_HEADER`] as a header name, built at compile time: inserting it by its `&str`
/// parsed and checked the name on every answer (`write-cpu-5-2026-11-26.md`).
pub const TS_HEADER_NAME: HeaderName = HeaderName::from_static(TS_HEADER);

/// The engine's per-record label bounds (`MAX_LABELS`, `MAX_LABELS_BYTES`), checked before
/// a body is received: a write whose labels will be refused is refused before its payload
/// is uploaded, not after. (The engine checks them again on every write path.)
pub fn check_label_bounds(labels: &Labels) -> Result<(), AppError> {
    use tsblob_storage::{MAX_LABELS, MAX_LABELS_BYTES};
    if labels.len() > MAX_LABELS {
        return Err(AppError::invalid_label(format!(
            "{} labels: a record may have at most {MAX_LABELS}",
            labels.len()
        )));
    }
    let bytes: usize = labels.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_LABELS_BYTES {
        return Err(AppError::invalid_label(format!(
            "labels of {bytes} bytes (keys and values): a record may have at most {MAX_LABELS_BYTES}"
        )));
    }
    Ok(())
}

/// The labels of a write, from its `x-tsblob-label-*` headers.
pub fn labels_from(headers: &HeaderMap) -> Result<Labels, AppError> {
    let mut labels = Labels::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix(LABEL_PREFIX) {
            tsblob_storage::validate_label_key(key)?;
            let v = decode_label_value(key, value.as_bytes())
                .map_err(|e| AppError::invalid_label(e.to_string()))?;
            if labels.insert(key.to_string(), v).is_some() {
                return Err(AppError::invalid_label(format!(
                    "label {key:?} is given twice: send each label once"
                )));
            }
        }
    }
    Ok(labels)
}

/// The content type of a write (`None` when absent: the engine's default).
pub fn content_type_from(headers: &HeaderMap) -> Result<Option<String>, AppError> {
    match headers.get(axum::http::header::CONTENT_TYPE) {
        None => Ok(None),
        Some(v) => {
            let s = v.to_str().map_err(|_| {
                AppError::new(
                    axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                    ErrorCode::InvalidContentType,
                    "the Content-Type header is not printable ASCII",
                )
            })?;
            Ok(Some(s.to_string()))
        }
    }
}

/// Puts a record's metadata into response headers (not `Content-Length`: the body says it).
pub fn put_meta(headers: &mut HeaderMap, meta: &RecordMeta) {
    let ct = if meta.content_type.is_empty() {
        DEFAULT_CONTENT_TYPE
    } else {
        meta.content_type.as_str()
    };
    if let Ok(v) = HeaderValue::from_str(ct) {
        headers.insert(axum::http::header::CONTENT_TYPE, v);
    }
    headers.insert(TS_HEADER_NAME, HeaderValue::from(meta.ts));
    for (k, v) in &meta.labels {
        let name = HeaderName::try_from(label_header(k));
        let value = HeaderValue::try_from(encode_label_value(v));
        if let (Ok(name), Ok(value)) = (name, value) {
            headers.insert(name, value);
        }
    }
}

/// A request's `Content-Encoding`: none (or `identity`), `zstd`, or any other (its value).
enum Coding<'a> {
    Identity,
    Zstd(&'a HeaderValue),
    Other(&'a HeaderValue),
}

fn content_coding(headers: &HeaderMap) -> Coding<'_> {
    let Some(v) = headers.get(axum::http::header::CONTENT_ENCODING) else {
        return Coding::Identity;
    };
    // Compared without case and without a lower-cased copy of the value.
    match v.to_str().map(str::trim) {
        Ok(s) if s.eq_ignore_ascii_case("zstd") => Coding::Zstd(v),
        Ok(s) if s.is_empty() || s.eq_ignore_ascii_case("identity") => Coding::Identity,
        _ => Coding::Other(v),
    }
}

/// The 415 of a `Content-Encoding` a route does not take; `how` says what to send instead.
fn unsupported_encoding(v: &HeaderValue, how: &str) -> AppError {
    AppError::new(
        axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorCode::UnsupportedEncoding,
        format!("Content-Encoding {v:?} is not supported {how}"),
    )
}

/// A request's `Transfer-Encoding` must be `chunked` alone: hyper takes the last coding
/// off (`chunked`) and passes the rest of the list by. Bug (probe of 2026-11-30): a write
/// with `Transfer-Encoding: gzip, chunked` (or `deflate`, or a coding no one knows) was
/// answered 201 and stored the still-gzipped bytes as the record. Any other coding is
/// refused with 501, as RFC 9112 §6.1 asks, before the route reads the body.
pub fn chunked_only(headers: &HeaderMap) -> Result<(), AppError> {
    for v in headers.get_all(axum::http::header::TRANSFER_ENCODING) {
        let other = match v.to_str() {
            Ok(list) => list
                .split(',')
                .map(str::trim)
                .any(|c| !c.is_empty() && !c.eq_ignore_ascii_case("chunked")),
            Err(_) => true,
        };
        if other {
            return Err(AppError::new(
                axum::http::StatusCode::NOT_IMPLEMENTED,
                ErrorCode::UnsupportedEncoding,
                format!("Transfer-Encoding {v:?} is not supported: the only transfer coding taken is chunked; send the body as it is (a batch may be sent with Content-Encoding: zstd instead)"),
            ));
        }
    }
    Ok(())
}

/// Whether a request body is zstd-compressed (`Content-Encoding: zstd`); `identity` or no
/// header is plain; any other coding is refused (415).
pub fn zstd_encoded(headers: &HeaderMap) -> Result<bool, AppError> {
    match content_coding(headers) {
        Coding::Zstd(_) => Ok(true),
        Coding::Identity => Ok(false),
        Coding::Other(v) => Err(unsupported_encoding(
            v,
            "here: send the body plain or as one zstd stream (Content-Encoding: zstd)",
        )),
    }
}

/// A single write's body is its payload, stored as given: a `Content-Encoding` other than
/// `identity` is refused (415), not stored compressed under the client's nose (a client
/// sending `gzip` or `zstd` expected it to be decoded and read back plain).
pub fn identity_only(headers: &HeaderMap) -> Result<(), AppError> {
    match content_coding(headers) {
        Coding::Identity => Ok(()),
        Coding::Zstd(v) | Coding::Other(v) => Err(unsupported_encoding(
            v,
            "on a single-record write: send the payload as it is to be stored (no Content-Encoding), or send compressed records as a batch with Content-Encoding: zstd",
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn labels_round_trip_through_headers() {
        let meta = RecordMeta {
            ts: 42,
            size: 3,
            content_type: "image/png".into(),
            labels: [
                ("plain".to_string(), "front-1".to_string()),
                ("fancy".to_string(), " 50% é\n".to_string()),
            ]
            .into_iter()
            .collect(),
        };
        let mut h = HeaderMap::new();
        put_meta(&mut h, &meta);
        assert_eq!(h.get("x-tsblob-label-plain").unwrap(), "front-1");
        assert_eq!(
            h.get("x-tsblob-label-fancy").unwrap(),
            "%2050%25%20%C3%A9%0A"
        );
        assert_eq!(h.get(TS_HEADER).unwrap(), "42");
        assert_eq!(labels_from(&h).unwrap(), meta.labels);
    }

    #[test]
    fn content_encoding_is_read_without_case_or_surrounding_spaces() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(
                axum::http::header::CONTENT_ENCODING,
                HeaderValue::from_static(v),
            );
            h
        };
        assert!(zstd_encoded(&with("zstd")).unwrap());
        assert!(zstd_encoded(&with(" ZStd ")).unwrap());
        assert!(!zstd_encoded(&with("Identity")).unwrap());
        assert!(!zstd_encoded(&with("")).unwrap());
        assert!(!zstd_encoded(&HeaderMap::new()).unwrap());
        assert!(zstd_encoded(&with("gzip")).is_err());
        assert!(identity_only(&with("IDENTITY")).is_ok());
        assert!(identity_only(&with("ZSTD")).is_err());
        assert!(identity_only(&with("zstdx")).is_err());
    }

    #[test]
    fn bad_label_headers_are_refused() {
        let mut h = HeaderMap::new();
        h.insert("x-tsblob-label-k", HeaderValue::from_static("%FF"));
        assert_eq!(labels_from(&h).unwrap_err().code, ErrorCode::InvalidLabel);
        let mut h = HeaderMap::new();
        h.insert("x-tsblob-label-a!b", HeaderValue::from_static("v"));
        assert!(labels_from(&h).is_err());
    }
}
