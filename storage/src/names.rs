//! Entry names on disk. The name rules themselves are part of the protocol
//! (`tsblob_proto::names`); the engine checks them on every call.

pub use tsblob_proto::names::{
    validate_attachment_name, validate_bucket_name, validate_entry_name, validate_label_key,
};

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
    fn dir_names_round_trip() {
        assert_eq!(entry_from_dir_name(&entry_dir_name("a/b/c")), "a/b/c");
    }
}
