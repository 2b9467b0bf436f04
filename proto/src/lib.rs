//! tsblob's wire protocol, in one place for the server, the CLI, the bench (`compare/`),
//! the fuzzers and the engine:
//!
//! - [`error_code`]: [`ErrorCode`], the codes of error answers;
//! - [`framing`]: the record framing of batch bodies and query streams, encoder and
//!   incremental decoders;
//! - [`headers`]: record metadata in HTTP headers (label values percent-encoded);
//! - [`names`]: the name rules and reserved words of buckets, entries and label keys, and
//!   how an entry path splits into entry and route;
//! - [`size`]: byte sizes as flags are written (`KB` = 10^3, `KiB` = 2^10);
//! - the record limits and the label map every side shares;
//! - `client` (feature `client`): a small async client of the HTTP API over reqwest, and
//!   `tls`, the client builder every side uses (https by rustls, webpki roots, a CA file,
//!   no redirects), and `outbound`, bounded reads of answers and error descriptions that
//!   never echo a foreign body.
//!
//! The default build needs no async runtime (the engine depends on it).

#[cfg(feature = "client")]
pub mod client;
pub mod error_code;
pub mod framing;
pub mod headers;
pub mod names;
#[cfg(feature = "client")]
pub mod outbound;
pub mod size;
#[cfg(feature = "client")]
pub mod tls;

pub use error_code::ErrorCode;
pub use names::{
    validate_attachment_name, validate_bucket_name, validate_entry_name, validate_label_key,
    NameError,
};
pub use size::{format_size, parse_size};

use std::collections::BTreeMap;

/// At most this many labels per record (write, batch and label update alike).
pub const MAX_LABELS: usize = 1000;
/// At most this many bytes of label keys and values per record, in all.
pub const MAX_LABELS_BYTES: usize = 64 << 10;
/// At most this many bytes in one label value.
pub const MAX_LABEL_VALUE: usize = 4096;

/// Labels of a record: string keys to string values, kept sorted.
pub type Labels = BTreeMap<String, String>;

/// The content type a record has when none is given.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// `s` quoted for an error message, cut after 64 characters with its length said: an
/// error answer never echoes a huge value back whole (a 70 KB `Content-Type` was).
pub fn quote_short(s: &str) -> String {
    const SHOWN: usize = 64;
    match s.char_indices().nth(SHOWN) {
        None => format!("{s:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &s[..cut], s.len()),
    }
}

/// Labels as key-value pairs, however a caller keeps them: a [`Labels`] map or a list of
/// pairs (the bench keeps its labels in the order it generated them).
pub trait LabelPairs {
    fn label_pairs(&self) -> impl Iterator<Item = (&str, &str)>;
}

impl LabelPairs for Labels {
    fn label_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl LabelPairs for [(String, String)] {
    fn label_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl LabelPairs for Vec<(String, String)> {
    fn label_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.as_slice().label_pairs()
    }
}

#[cfg(test)]
mod quote_tests {
    use super::quote_short;

    /// Bug "echo": errors quoted the whole offending value back (a 70 KB content type, a
    /// 64 KB name): now its first 64 characters and its length.
    #[test]
    fn errors_echoed_a_huge_value_whole() {
        assert_eq!(quote_short("image/png"), "\"image/png\"");
        let long = "é".repeat(70_000);
        let q = quote_short(&long);
        assert!(q.len() < 200, "{q}");
        assert!(q.ends_with("... (140000 bytes)"), "{q}");
    }
}
