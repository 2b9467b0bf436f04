//! Name rules: nothing a caller names may escape or alias the data folder, and no entry
//! name may be mistaken for one of the HTTP API's routes. The engine checks them on every
//! call, the server before it touches anything, and `docs/api.md` lists them (a test here
//! reads it).

use thiserror::Error;

pub const BUCKET_MAX: usize = 64;
pub const ENTRY_MAX: usize = 255;
pub const LABEL_KEY_MAX: usize = 128;

/// What the path after `/api/v1/b/{bucket}/` names: a record of the entry, or one of the
/// entry's routes, told apart by the entry path's last segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryRoute {
    Record,
    Batch,
    Query,
    Info,
    Histogram,
    /// `PUT …/{entry}/rename` (and `PUT /api/v1/b/{bucket}/rename`): ReductStore's rename.
    Rename,
}

/// The route words of an entry path, and the route each names.
pub const ENTRY_ROUTES: [(&str, EntryRoute); 5] = [
    ("batch", EntryRoute::Batch),
    ("query", EntryRoute::Query),
    ("info", EntryRoute::Info),
    ("histogram", EntryRoute::Histogram),
    ("rename", EntryRoute::Rename),
];

/// Last segments no entry name may have: the route words of [`ENTRY_ROUTES`], `labels`
/// (kept free for a label route) and [`ATTACHMENTS_WORD`] (which no segment may be).
pub const RESERVED_ENTRY_WORDS: [&str; 7] = [
    "batch",
    "query",
    "info",
    "histogram",
    "rename",
    "labels",
    ATTACHMENTS_WORD,
];

/// The route word of an entry's attachments: `…/{entry}/attachments` and
/// `…/{entry}/attachments/{name}`. No segment of an entry name may be it, so a path whose
/// last segment or the one before it is this word names attachments, never a record.
pub const ATTACHMENTS_WORD: &str = "attachments";

/// The longest attachment name, in bytes.
pub const ATTACHMENT_NAME_MAX: usize = 128;

/// Names in the data folder that belong to the engine or to the program embedding it (the
/// server keeps its tokens in `tokens`): no bucket may take them. Names that start with
/// [`RESERVED_BUCKET_PREFIXES`] (`.`: the engine's scratch folders; `index.`: a damaged
/// index set aside) are reserved too.
pub const RESERVED_BUCKETS: [&str; 5] =
    ["index", "tokens", "settings", "tsblob.lock", "replications"];
/// Prefixes no bucket name may start with.
pub const RESERVED_BUCKET_PREFIXES: [&str; 2] = [".", "index."];
/// Whole entry names that are reserved: an entry's folder sits beside its bucket's settings
/// file (and that file's temporary copy).
pub const RESERVED_ENTRIES: [&str; 2] = ["settings", "settings.tmp"];

/// Splits `robot1/lidar/query` into the entry and its route; a path whose last segment is
/// not a route word names a record of the whole path. An empty entry comes back for a
/// path that is only a route word (`query`: the bucket-level query).
pub fn split_entry_path(rest: &str) -> (&str, EntryRoute) {
    for (suffix, route) in ENTRY_ROUTES {
        if let Some(entry) = rest.strip_suffix(suffix) {
            if entry.is_empty() {
                return ("", route);
            }
            if let Some(entry) = entry.strip_suffix('/') {
                return (entry, route);
            }
        }
    }
    (rest, EntryRoute::Record)
}

/// Splits `robot1/lidar/attachments` into (`robot1/lidar`, `None`) and
/// `robot1/lidar/attachments/schema` into (`robot1/lidar`, `Some("schema")`); `None` for a
/// path that does not name attachments.
pub fn split_attachment_path(rest: &str) -> Option<(&str, Option<&str>)> {
    // `/attachments` at the end, without a `String` per request (this runs on every entry
    // route).
    fn strip(s: &str) -> Option<&str> {
        s.strip_suffix(ATTACHMENTS_WORD)?.strip_suffix('/')
    }
    if let Some(entry) = strip(rest) {
        return Some((entry, None));
    }
    let (head, name) = rest.rsplit_once('/')?;
    let entry = strip(head)?;
    Some((entry, Some(name)))
}

/// An attachment name: 1–128 bytes of letters, digits, `-`, `_`, `.` and `$` (ReductStore's
/// system keys start with `$`); not `.` or `..`.
pub fn validate_attachment_name(name: &str) -> Result<(), NameError> {
    let kind = "attachment";
    if name.is_empty() {
        return Err(NameError::Empty {
            kind,
            max: ATTACHMENT_NAME_MAX,
        });
    }
    if name.len() > ATTACHMENT_NAME_MAX {
        return Err(NameError::TooLong {
            kind,
            name: name.to_string(),
            max: ATTACHMENT_NAME_MAX,
        });
    }
    if let Some(ch) = name.chars().find(|c| !plain(*c) && *c != '$') {
        return Err(NameError::BadChar {
            kind,
            name: name.to_string(),
            ch,
            slash: " ('$' too)",
        });
    }
    check_segment(kind, name, name)
}

/// The reserved words, for messages.
fn reserved_help() -> String {
    format!(
        "reserved words are the data folder's own files ({}, names starting with {}) and, as an entry's last segment, the HTTP API's route words ({})",
        RESERVED_BUCKETS.join(", "),
        RESERVED_BUCKET_PREFIXES.map(|p| format!("'{p}'")).join(" or "),
        RESERVED_ENTRY_WORDS.join(", ")
    )
}

/// A bucket, entry or label name that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum NameError {
    #[error("{kind} name is empty: give a name of 1 to {max} characters")]
    Empty { kind: &'static str, max: usize },
    #[error("{kind} name {} is longer than {max} bytes", crate::quote_short(.name))]
    TooLong {
        kind: &'static str,
        name: String,
        max: usize,
    },
    #[error("entry name {name:?} needs a folder name of {len} bytes (each '/' is stored as the 3 bytes %2F), over the file system's 255: use fewer or shorter segments")]
    FolderTooLong { name: String, len: usize },
    #[error("{kind} name {name:?} has a path segment that is empty, '.' or '..': names may not escape or alias folders")]
    DotSegment { kind: &'static str, name: String },
    #[error("{kind} name {name:?} contains {ch:?}, which is not allowed: use letters, digits, '-', '_' and '.'{slash}")]
    BadChar {
        kind: &'static str,
        name: String,
        ch: char,
        slash: &'static str,
    },
    #[error(
        "{kind} name {name:?} uses the reserved word {segment:?}: {}; choose another name",
        reserved_help()
    )]
    Reserved {
        kind: &'static str,
        name: String,
        segment: String,
    },
    /// A bucket name starting with a reserved prefix (`.` or `index.`).
    #[error(
        "{kind} name {name:?} starts with {prefix:?}, which the data folder keeps for its own files: {}; choose another name (one starting with a letter or digit is always safe)",
        reserved_help()
    )]
    ReservedPrefix {
        kind: &'static str,
        name: String,
        prefix: &'static str,
    },
}

fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

fn check_segment(kind: &'static str, name: &str, seg: &str) -> Result<(), NameError> {
    if seg.is_empty() || seg == "." || seg == ".." {
        return Err(NameError::DotSegment {
            kind,
            name: name.to_string(),
        });
    }
    Ok(())
}

/// A bucket name: 1–64 bytes of letters, digits, `-`, `_`, `.`; not `.` or `..`.
pub fn validate_bucket_name(name: &str) -> Result<(), NameError> {
    let kind = "bucket";
    if name.is_empty() {
        return Err(NameError::Empty {
            kind,
            max: BUCKET_MAX,
        });
    }
    if name.len() > BUCKET_MAX {
        return Err(NameError::TooLong {
            kind,
            name: name.to_string(),
            max: BUCKET_MAX,
        });
    }
    if let Some(ch) = name.chars().find(|c| !plain(*c)) {
        return Err(NameError::BadChar {
            kind,
            name: name.to_string(),
            ch,
            slash: "",
        });
    }
    check_segment(kind, name, name)?;
    if RESERVED_BUCKETS.contains(&name) {
        return Err(NameError::Reserved {
            kind,
            name: name.to_string(),
            segment: name.to_string(),
        });
    }
    if let Some(prefix) = RESERVED_BUCKET_PREFIXES
        .into_iter()
        .find(|p| name.starts_with(p))
    {
        return Err(NameError::ReservedPrefix {
            kind,
            name: name.to_string(),
            prefix,
        });
    }
    Ok(())
}

/// An entry name: 1–255 bytes, `/`-separated segments of letters, digits, `-`, `_`, `.`;
/// no empty, `.` or `..` segment; the last segment not one of the HTTP API's route words.
pub fn validate_entry_name(name: &str) -> Result<(), NameError> {
    let kind = "entry";
    if name.is_empty() {
        return Err(NameError::Empty {
            kind,
            max: ENTRY_MAX,
        });
    }
    if name.len() > ENTRY_MAX {
        return Err(NameError::TooLong {
            kind,
            name: name.to_string(),
            max: ENTRY_MAX,
        });
    }
    if let Some(ch) = name.chars().find(|c| !plain(*c) && *c != '/') {
        return Err(NameError::BadChar {
            kind,
            name: name.to_string(),
            ch,
            slash: " ('/' separates segments)",
        });
    }
    // An entry's folder spells each `/` as `%2F` (the engine's `entry_dir_name`): a name of
    // 255 bytes with slashes in it made a folder name over `NAME_MAX`, and a 500.
    let folder = name.len() + 2 * name.bytes().filter(|b| *b == b'/').count();
    if folder > ENTRY_MAX {
        return Err(NameError::FolderTooLong {
            name: name.to_string(),
            len: folder,
        });
    }
    let mut last = "";
    for seg in name.split('/') {
        check_segment(kind, name, seg)?;
        if seg == ATTACHMENTS_WORD {
            return Err(NameError::Reserved {
                kind,
                name: name.to_string(),
                segment: seg.to_string(),
            });
        }
        last = seg;
    }
    if RESERVED_ENTRIES.contains(&name) {
        return Err(NameError::Reserved {
            kind,
            name: name.to_string(),
            segment: name.to_string(),
        });
    }
    if RESERVED_ENTRY_WORDS.contains(&last) {
        return Err(NameError::Reserved {
            kind,
            name: name.to_string(),
            segment: last.to_string(),
        });
    }
    Ok(())
}

/// A label key: 1–128 bytes of lower-case letters, digits, `-`, `_`, `.`.
pub fn validate_label_key(key: &str) -> Result<(), NameError> {
    let kind = "label";
    if key.is_empty() {
        return Err(NameError::Empty {
            kind,
            max: LABEL_KEY_MAX,
        });
    }
    if key.len() > LABEL_KEY_MAX {
        return Err(NameError::TooLong {
            kind,
            name: key.to_string(),
            max: LABEL_KEY_MAX,
        });
    }
    if let Some(ch) = key
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.')))
    {
        return Err(NameError::BadChar {
            kind,
            name: key.to_string(),
            ch,
            slash: " (lower case only)",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A bucket name starting with '.' was said to "use the reserved word \".x\"", the
    /// name itself, which told the user nothing about what to change.
    #[test]
    fn a_dot_bucket_was_said_to_use_itself_as_a_reserved_word() {
        let e = validate_bucket_name(".x").unwrap_err().to_string();
        assert!(e.starts_with("bucket name \".x\" starts with \".\", which the data folder keeps for its own files"), "{e}");
        let e = validate_bucket_name("index.old").unwrap_err().to_string();
        assert!(e.contains("starts with \"index.\""), "{e}");
        let e = validate_bucket_name("tokens").unwrap_err().to_string();
        assert!(e.contains("uses the reserved word \"tokens\""), "{e}");
    }

    #[test]
    fn rejects_escapes() {
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a\0b",
            "a b",
            "../x",
            "é",
            "index",
            "tokens",
            ".trash",
            ".x",
            "tsblob.lock",
            "index.damaged-1",
            "settings",
        ] {
            assert!(validate_bucket_name(bad).is_err(), "{bad:?} accepted");
        }
        for bad in [
            "",
            "..",
            "a/../b",
            "/a",
            "a/",
            "a//b",
            "a\nb",
            "x/query",
            "batch",
            "settings",
            "settings.tmp",
        ] {
            assert!(validate_entry_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_bucket_name(&"a".repeat(65)).is_err());
        assert!(validate_label_key("Camera").is_err());
    }

    /// Bug "folder too long": `a/a/.../a` (255 bytes) was a valid entry name whose folder
    /// (`a%2Fa%2F...`, 509 bytes) the file system refused: a 500 on its first write.
    #[test]
    fn entry_whose_folder_name_was_too_long_was_accepted() {
        let deep = format!("{}a", "a/".repeat(127));
        assert_eq!(deep.len(), ENTRY_MAX);
        assert!(matches!(
            validate_entry_name(&deep),
            Err(NameError::FolderTooLong { len: 509, .. })
        ));
        // The longest names that fit: 255 bytes without a slash; 215 bytes with 20 `/`.
        validate_entry_name(&"a".repeat(ENTRY_MAX)).unwrap();
        let fits = format!("{}{}", "abcdefgh/".repeat(20), "y".repeat(35));
        assert_eq!(fits.len() + 2 * 20, ENTRY_MAX);
        validate_entry_name(&fits).unwrap();
        assert!(validate_entry_name(&format!("{fits}y")).is_err());
    }

    #[test]
    fn accepts_plain_names() {
        validate_bucket_name("cams-1.v2_x").unwrap();
        validate_entry_name("robot1/lidar").unwrap();
        validate_entry_name("a.b/c-d/e_f").unwrap();
        validate_label_key("camera.id").unwrap();
    }

    #[test]
    fn every_route_word_is_reserved_and_documented() {
        for (word, _) in ENTRY_ROUTES {
            assert!(
                RESERVED_ENTRY_WORDS.contains(&word),
                "{word} routes but is not reserved"
            );
            assert!(validate_entry_name(&format!("cam/{word}")).is_err());
        }
        // docs/api.md's "Names" section lists the same words, in the same order.
        let api = include_str!("../../docs/api.md");
        let words = RESERVED_ENTRY_WORDS.map(|w| format!("`{w}`"));
        let last = words.len() - 1;
        let listed = format!("{} or {}", words[..last].join(", "), words[last]);
        assert!(
            api.contains(&listed),
            "docs/api.md should list the reserved entry words as: {listed}"
        );
        let buckets = RESERVED_BUCKETS.map(|w| format!("`{w}`")).join(", ");
        assert!(
            api.contains(&buckets),
            "docs/api.md should list the reserved bucket names as: {buckets}"
        );
        let message = validate_entry_name("a/histogram").unwrap_err().to_string();
        assert!(message.contains("histogram") && message.contains("tsblob.lock"));
    }

    #[test]
    fn entry_paths_split_on_reserved_words_only() {
        assert_eq!(split_entry_path("cam"), ("cam", EntryRoute::Record));
        assert_eq!(
            split_entry_path("robot1/lidar"),
            ("robot1/lidar", EntryRoute::Record)
        );
        assert_eq!(
            split_entry_path("robot1/lidar/query"),
            ("robot1/lidar", EntryRoute::Query)
        );
        assert_eq!(split_entry_path("cam/batch"), ("cam", EntryRoute::Batch));
        assert_eq!(split_entry_path("cam/info"), ("cam", EntryRoute::Info));
        assert_eq!(
            split_entry_path("cam/histogram"),
            ("cam", EntryRoute::Histogram)
        );
        assert_eq!(split_entry_path("batch"), ("", EntryRoute::Batch));
        assert_eq!(split_entry_path("e1/rename"), ("e1", EntryRoute::Rename));
        assert_eq!(split_entry_path("rename"), ("", EntryRoute::Rename));
        // a segment that merely ends in a route word is part of the name
        assert_eq!(split_entry_path("myquery"), ("myquery", EntryRoute::Record));
    }

    #[test]
    fn attachment_paths_and_names() {
        assert_eq!(
            split_attachment_path("cam/attachments"),
            Some(("cam", None))
        );
        assert_eq!(
            split_attachment_path("a/b/attachments/schema"),
            Some(("a/b", Some("schema")))
        );
        assert_eq!(split_attachment_path("cam/myattachments"), None);
        assert_eq!(split_attachment_path("cam/x"), None);
        // `attachments` may be no segment of an entry name: the paths above are never records
        for bad in ["attachments", "a/attachments", "a/attachments/b"] {
            assert!(
                matches!(validate_entry_name(bad), Err(NameError::Reserved { .. })),
                "{bad:?} accepted"
            );
        }
        validate_entry_name("a/my-attachments").unwrap();
        validate_attachment_name("schema.v2").unwrap();
        validate_attachment_name("$plugin").unwrap();
        for bad in ["", ".", "..", "a/b", "a b", "é"] {
            assert!(validate_attachment_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_attachment_name(&"a".repeat(ATTACHMENT_NAME_MAX + 1)).is_err());
    }
}
