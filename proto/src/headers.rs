//! Record metadata in HTTP headers: `Content-Type`, `x-tsblob-ts` and one
//! `x-tsblob-label-<key>` header per label, values percent-encoded UTF-8 (controls, `%`
//! and the space, which HTTP would trim, and every byte outside ASCII).

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};
use thiserror::Error;

/// The record's timestamp (µs) in a read's answer.
pub const TS_HEADER: &str = "x-tsblob-ts";
/// Prefix of a label's header name; the rest of the name is the label key.
pub const LABEL_PREFIX: &str = "x-tsblob-label-";

/// What is encoded in a label header value: controls, `%`, and the space (which HTTP would
/// trim at either end). Bytes outside ASCII are always encoded.
const LABEL_VALUE: &AsciiSet = &CONTROLS.add(b'%').add(b' ');

/// A label header value that does not decode.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LabelValueError {
    #[error("label {key:?}: the header value is not ASCII; percent-encode UTF-8 label values")]
    NotAscii { key: String },
    #[error("label {key:?}: the percent-decoded value is not valid UTF-8")]
    NotUtf8 { key: String },
}

/// The header name of label `key`.
pub fn label_header(key: &str) -> String {
    format!("{LABEL_PREFIX}{key}")
}

/// A label value as a header value.
pub fn encode_label_value(v: &str) -> String {
    utf8_percent_encode(v, LABEL_VALUE).to_string()
}

/// A header value back to the label value of `key`.
pub fn decode_label_value(key: &str, raw: &[u8]) -> Result<String, LabelValueError> {
    let text = std::str::from_utf8(raw).map_err(|_| LabelValueError::NotAscii {
        key: key.to_string(),
    })?;
    percent_decode_str(text)
        .decode_utf8()
        .map(|v| v.into_owned())
        .map_err(|_| LabelValueError::NotUtf8 {
            key: key.to_string(),
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn values_round_trip_and_stay_header_safe() {
        for v in ["plain", " padded ", "100%", "ü/é", "a\nb", ""] {
            let e = encode_label_value(v);
            assert!(e.bytes().all(|b| (0x21..0x7f).contains(&b)), "{e:?}");
            assert_eq!(decode_label_value("k", e.as_bytes()).unwrap(), v);
        }
        assert!(matches!(
            decode_label_value("k", b"%ff"),
            Err(LabelValueError::NotUtf8 { .. })
        ));
        assert!(matches!(
            decode_label_value("k", &[0xff, 0x41]),
            Err(LabelValueError::NotAscii { .. })
        ));
    }
}
