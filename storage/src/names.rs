//! Entry names on disk. The name rules themselves are part of the protocol
//! (`tsblob_proto::names`); the engine checks them on every call.

pub use tsblob_proto::names::{validate_bucket_name, validate_entry_name, validate_label_key};

/// The folder name of an entry: `/` becomes `%2F`, which no valid name contains.
pub(crate) fn entry_dir_name(entry: &str) -> String {
    entry.replace('/', "%2F")
}

pub(crate) fn entry_from_dir_name(dir: &str) -> String {
    dir.replace("%2F", "/")
}

/// True when `name` matches `pattern`: `*` matches any characters but `/` (within one
/// segment), `**` any characters including `/`; everything else matches itself.
pub fn entry_pattern_matches(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match p.first() {
            None => n.is_empty(),
            Some(b'*') if p.get(1) == Some(&b'*') => {
                let rest = &p[2..];
                (0..=n.len()).any(|i| go(rest, &n[i..]))
            }
            Some(b'*') => {
                let rest = &p[1..];
                for i in 0..=n.len() {
                    if go(rest, &n[i..]) {
                        return true;
                    }
                    if n.get(i) == Some(&b'/') {
                        return false;
                    }
                }
                false
            }
            Some(c) => n.first() == Some(c) && go(&p[1..], &n[1..]),
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names_round_trip() {
        assert_eq!(entry_from_dir_name(&entry_dir_name("a/b/c")), "a/b/c");
    }
}
