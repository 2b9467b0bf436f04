//! Name validation: nothing a caller names may escape or alias the data folder.

use crate::NameError;

const BUCKET_MAX: usize = 64;
const ENTRY_MAX: usize = 255;
const LABEL_KEY_MAX: usize = 128;
/// Last segments of an entry name that the HTTP API uses for its own routes.
const RESERVED_LAST: [&str; 5] = ["batch", "query", "info", "labels", "histogram"];
/// Names in the data folder that belong to the engine or to the program embedding it (the
/// server keeps its tokens in `tokens` and its replication tasks in `replications`): no bucket may take them. Names that start with `.`
/// (the engine's scratch folders) or `index.` (a damaged index set aside) are reserved too.
const RESERVED_BUCKETS: [&str; 5] = ["index", "tokens", "tsblob.lock", "settings", "replications"];

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
    if RESERVED_BUCKETS.contains(&name) || name.starts_with('.') || name.starts_with("index.") {
        return Err(NameError::Reserved {
            kind,
            name: name.to_string(),
            segment: name.to_string(),
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
    let mut last = "";
    for seg in name.split('/') {
        check_segment(kind, name, seg)?;
        last = seg;
    }
    // An entry's folder sits beside the bucket's settings file (and its temporary copy).
    if name == "settings" || name == "settings.tmp" {
        return Err(NameError::Reserved {
            kind,
            name: name.to_string(),
            segment: name.to_string(),
        });
    }
    if RESERVED_LAST.contains(&last) {
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

/// The folder name of an entry: `/` becomes `%2F`, which no valid name contains.
pub(crate) fn entry_dir_name(entry: &str) -> String {
    entry.replace('/', "%2F")
}

pub(crate) fn entry_from_dir_name(dir: &str) -> String {
    dir.replace("%2F", "/")
}

#[cfg(test)]
mod tests {
    use super::*;

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
            "replications",
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

    #[test]
    fn accepts_plain_names() {
        validate_bucket_name("cams-1.v2_x").unwrap();
        validate_entry_name("robot1/lidar").unwrap();
        validate_entry_name("a.b/c-d/e_f").unwrap();
        validate_label_key("camera.id").unwrap();
        assert_eq!(entry_from_dir_name(&entry_dir_name("a/b/c")), "a/b/c");
    }
}
