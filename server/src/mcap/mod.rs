//! MCAP in and out (`docs/cli.md`, "MCAP and ROS 2 bags"): a window of records leaves as
//! one MCAP file (each entry a channel, each record a message), and an MCAP file or a
//! rosbag2 folder of them comes in (each topic an entry, each message a record). The
//! format is the `mcap` crate's (Foxglove's), not ours.
//!
//! * [`export`]: the writer over any `Write` (no `Seek`: chunks are compressed in memory,
//!   one at a time, and written whole; the summary and chunk indexes at the end) and the
//!   HTTP route `GET /api/v1/b/{bucket}/query?entries=...&format=mcap` that streams it.
//! * [`import`]: an MCAP file's messages as records (topics → entries, log times →
//!   timestamps, labels) and the report of what was not imported: a chunk that fails its
//!   CRC or does not decompress is skipped and counted, a truncated end is reported.
//! * [`bag`]: a rosbag2 folder's `metadata.yaml`: which files, in what order, and how
//!   rosbag2 compressed them (by message or by file, zstd).
//! * `read`: the bounded record reader under it: top-level records one at a time, each
//!   within a bound of its kind, the unused ones skipped unread, a chunk decompressed and
//!   its records handed on one at a time.
//!
//! The mappings both ways live here, each with its inverse, so that an import exported
//! again gives the same topics, encodings, schemas, times and message bytes.

pub mod bag;
pub mod export;
pub mod import;
mod read;
pub use read::has_magic;

use tsblob_storage::Labels;

/// The entry a bucket's MCAP schemas are kept in: one record per distinct schema (payload:
/// the schema's data; labels: its name and encoding), at the timestamp [`schema_ts`] gives.
/// Records of imported messages name theirs with the label [`L_SCHEMA_ID`]. The name
/// starts with a `.`, which the topic escaping never produces (`.` is always followed by
/// two hex digits there), so no topic maps onto it.
pub const SCHEMAS_ENTRY: &str = ".mcap-schemas";

/// The largest MCAP message an import takes and an export carries (one record, read whole:
/// the frame answer's largest mapped record). An import refuses a larger message (reported,
/// the copy fails) before buffering it when its record is outside a chunk: two 512 MiB
/// messages of a 33 KB file cost `tsblob cp` 2.4 GB, and were then refused by every export.
pub const MAX_MESSAGE_BYTES: u64 = tsblob_storage::MAP_MAX;

/// Labels an import sets (and an export reads back instead of exporting them as labels).
pub const L_TOPIC: &str = "mcap.topic";
pub const L_ENCODING: &str = "mcap.encoding";
pub const L_SCHEMA: &str = "mcap.schema";
pub const L_SCHEMA_ENCODING: &str = "mcap.schema_encoding";
pub const L_SCHEMA_ID: &str = "mcap.schema_id";
pub const L_LOG_TIME: &str = "mcap.log_time_ns";
pub const L_PUBLISH_TIME: &str = "mcap.publish_time_ns";
pub const L_SEQUENCE: &str = "mcap.sequence";

/// Channel metadata keys of an export.
pub const M_ENTRY: &str = "tsblob.entry";
pub const M_CONTENT_TYPE: &str = "tsblob.content_type";
/// Channel metadata of a labels channel: the topic whose records' labels it carries.
pub const M_LABELS_OF: &str = "tsblob.labels_of";
/// A labels channel's topic is its data topic with this suffix.
pub const LABELS_SUFFIX: &str = "#labels";
/// The schema of labels messages (a JSON object of strings).
pub const LABELS_SCHEMA_NAME: &str = "tsblob.Labels";
pub const LABELS_SCHEMA: &str =
    r#"{"type":"object","additionalProperties":{"type":"string"},"title":"tsblob.Labels"}"#;

/// Whether a label is one the MCAP mapping itself sets (not exported as a label).
pub fn is_mapping_label(key: &str) -> bool {
    [
        L_TOPIC,
        L_ENCODING,
        L_SCHEMA,
        L_SCHEMA_ENCODING,
        L_SCHEMA_ID,
        L_LOG_TIME,
        L_PUBLISH_TIME,
        L_SEQUENCE,
    ]
    .contains(&key)
}

/// The labels of a record that are not the mapping's own.
pub fn user_labels(labels: &Labels) -> Labels {
    labels
        .iter()
        .filter(|(k, _)| !is_mapping_label(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Content types and the MCAP message encodings they are (the well-known encodings of the
/// MCAP registry). The first content type of an encoding is the one an import gives.
const ENCODINGS: [(&str, &str); 12] = [
    ("application/json", "json"),
    ("application/x-protobuf", "protobuf"),
    ("application/protobuf", "protobuf"),
    ("application/vnd.google.protobuf", "protobuf"),
    ("application/x-cdr", "cdr"),
    ("application/cdr", "cdr"),
    ("application/x-ros1", "ros1"),
    ("application/cbor", "cbor"),
    ("application/msgpack", "msgpack"),
    ("application/x-msgpack", "msgpack"),
    ("application/vnd.msgpack", "msgpack"),
    ("application/x-flatbuffer", "flatbuffer"),
];

/// The message encoding of a record's content type: a well-known encoding when the type is
/// one, else the content type itself (MCAP allows any encoding string; readers that do not
/// know it show the bytes).
pub fn encoding_of(content_type: &str) -> &str {
    let base = content_type.split(';').next().unwrap_or("").trim();
    ENCODINGS
        .iter()
        .find(|(ct, _)| ct.eq_ignore_ascii_case(base))
        .map_or(content_type, |(_, enc)| enc)
}

/// The content type of a message encoding (the inverse of [`encoding_of`]): a well-known
/// encoding's type, an encoding that is itself a media type as it is, anything else
/// `application/octet-stream` (the encoding stays in the label `mcap.encoding`).
pub fn content_type_of(encoding: &str) -> String {
    if let Some((ct, _)) = ENCODINGS.iter().find(|(_, enc)| *enc == encoding) {
        return (*ct).to_string();
    }
    if encoding.contains('/')
        && encoding.len() <= 255
        && encoding.bytes().all(|b| (0x21..0x7f).contains(&b))
    {
        return encoding.to_string();
    }
    "application/octet-stream".to_string()
}

/// Why a topic has no entry name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("topic {topic:?} maps to the entry name {entry:?}, which is not allowed ({why}): rename the topic or import with --entries to leave it out")]
pub struct TopicError {
    pub topic: String,
    pub entry: String,
    pub why: String,
}

/// The entry a topic is imported into:
///
/// 1. one leading `/` is dropped (`/cams/front` → `cams/front`);
/// 2. every byte that entry names do not allow is written `.XX` (two upper-case hex digits
///    of the byte; UTF-8 is escaped byte by byte), and so is every `.` (so `.` is always
///    an escape and the mapping is reversible), a `/` that would start an empty segment
///    (a second leading `/`, `//`, a trailing `/`), and the first letter of a segment
///    that is a reserved word of entry names (`query` → `.71uery`, `settings`).
///
/// [`entry_to_topic`] is the inverse (with the leading `/` given back).
pub fn topic_to_entry(topic: &str) -> Result<String, TopicError> {
    let rest = topic.strip_prefix('/').unwrap_or(topic);
    let mut out = String::with_capacity(rest.len());
    let bytes = rest.as_bytes();
    let esc = |out: &mut String, b: u8| out.push_str(&format!(".{b:02X}"));
    for (i, &b) in bytes.iter().enumerate() {
        let seg_start = out.is_empty() || out.ends_with('/');
        match b {
            b'/' if seg_start || i + 1 == bytes.len() => esc(&mut out, b),
            b'/' => out.push('/'),
            b'.' => esc(&mut out, b),
            b if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' => {
                if seg_start && starts_reserved(&bytes[i..]) {
                    esc(&mut out, b);
                } else {
                    out.push(b as char);
                }
            }
            b => esc(&mut out, b),
        }
    }
    match tsblob_proto::names::validate_entry_name(&out) {
        Ok(()) => Ok(out),
        Err(e) => Err(TopicError {
            topic: topic.to_string(),
            entry: out,
            why: e.to_string(),
        }),
    }
}

/// Whether `rest` (from the start of a segment) is a segment that is a reserved word: the
/// API's route words as any segment (they are only reserved as the last, but escaping them
/// everywhere keeps the rule simple), `settings` and `settings.tmp` as the whole name.
fn starts_reserved(rest: &[u8]) -> bool {
    let seg_end = rest.iter().position(|b| *b == b'/').unwrap_or(rest.len());
    let seg = &rest[..seg_end];
    tsblob_proto::names::RESERVED_ENTRY_WORDS
        .iter()
        .chain(tsblob_proto::names::RESERVED_ENTRIES.iter())
        .any(|w| w.as_bytes() == seg)
}

/// The topic an imported entry came from: `.XX` escapes decoded, the leading `/` given
/// back. `None` for a name that is not an escaped one (a `.` not followed by two hex
/// digits, or bytes that are not UTF-8).
pub fn entry_to_topic(entry: &str) -> Option<String> {
    let b = entry.as_bytes();
    let mut out = vec![b'/'];
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'.' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            if hex.bytes().any(|c| c.is_ascii_lowercase()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The timestamp of a schema's record in [`SCHEMAS_ENTRY`]: from a hash of its name,
/// encoding and data, in [2^52, 2^53) µs (years 2112 to 2255: out of the way of data
/// windows and of a FIFO quota's oldest-first removal, and exact as a JSON number). The same
/// schema always lands on the same timestamp, so a second import finds it there.
pub fn schema_ts(name: &str, encoding: &str, data: &[u8]) -> u64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update((name.len() as u64).to_le_bytes());
    h.update(name.as_bytes());
    h.update((encoding.len() as u64).to_le_bytes());
    h.update(encoding.as_bytes());
    h.update(data);
    let d = h.finalize();
    let mut n = [0u8; 8];
    n.copy_from_slice(&d[..8]);
    (1u64 << 52) | (u64::from_le_bytes(n) & ((1u64 << 52) - 1))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn topics_map_to_valid_entries_and_back() {
        for (topic, entry) in [
            ("/imu", "imu"),
            ("/cams/front/image_raw", "cams/front/image_raw"),
            ("camera", "camera"),
            ("/tf_static", "tf_static"),
            ("/a.b", "a.2Eb"),
            ("/a b#c", "a.20b.23c"),
            ("//x", ".2Fx"),
            ("/a//b/", "a/.2Fb.2F"),
            ("/robot/query", "robot/.71uery"),
            ("/settings", ".73ettings"),
            ("/.", ".2E"),
            ("/..", ".2E.2E"),
            ("/é", ".C3.A9"),
            ("/x/labels", "x/.6Cabels"),
        ] {
            let got = topic_to_entry(topic).unwrap();
            assert_eq!(got, entry, "{topic}");
            tsblob_proto::names::validate_entry_name(&got).unwrap();
            let back = entry_to_topic(&got).unwrap();
            let want = if topic.starts_with('/') {
                topic.to_string()
            } else {
                format!("/{topic}")
            };
            assert_eq!(back, want, "{topic}");
        }
    }

    #[test]
    fn a_topic_too_long_for_an_entry_is_refused_by_name() {
        let topic = format!("/{}", "x".repeat(300));
        let e = topic_to_entry(&topic).unwrap_err();
        assert!(e.to_string().contains("longer than 255"), "{e}");
        assert_eq!(topic_to_entry("").unwrap_err().topic, "");
        // `/` alone is no name once its leading `/` is dropped.
        assert!(topic_to_entry("/").is_err());
    }

    #[test]
    fn the_schemas_entry_is_no_topic_s_entry() {
        tsblob_proto::names::validate_entry_name(SCHEMAS_ENTRY).unwrap();
        assert_eq!(entry_to_topic(SCHEMAS_ENTRY), None);
        assert_eq!(topic_to_entry("/.mcap-schemas").unwrap(), ".2Emcap-schemas");
    }

    #[test]
    fn content_types_and_encodings_map_both_ways() {
        assert_eq!(encoding_of("application/json"), "json");
        assert_eq!(encoding_of("application/json; charset=utf-8"), "json");
        assert_eq!(encoding_of("application/x-cdr"), "cdr");
        assert_eq!(encoding_of("image/jpeg"), "image/jpeg");
        for enc in [
            "json",
            "cdr",
            "ros1",
            "protobuf",
            "cbor",
            "msgpack",
            "flatbuffer",
        ] {
            assert_eq!(encoding_of(&content_type_of(enc)), enc);
        }
        assert_eq!(content_type_of("image/jpeg"), "image/jpeg");
        assert_eq!(content_type_of("weird"), "application/octet-stream");
    }

    #[test]
    fn schema_timestamps_are_stable_and_far_off() {
        let a = schema_ts("std_msgs/msg/String", "ros2msg", b"string data");
        assert_eq!(
            a,
            schema_ts("std_msgs/msg/String", "ros2msg", b"string data")
        );
        assert_ne!(
            a,
            schema_ts("std_msgs/msg/String", "ros2msg", b"string dat")
        );
        assert!((1u64 << 52..1u64 << 53).contains(&a));
    }
}
