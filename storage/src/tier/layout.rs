//! Object keys and the *heads* sidecar of a tiered block (see `docs/storage-format.md`,
//! "Object layout").
//!
//! A tiered block is two objects: `<prefix>/<bucket>/<entry-dir>/<id>.blk`, the block file
//! byte for byte (header and frames: self-contained), and `<id>.heads`, the block's live
//! records as the index holds them, so an index can be rebuilt from the object store
//! without reading a payload. `<prefix>/<bucket>/settings` holds the bucket's settings.
//! The sidecar's byte layout is `codec/heads.rs`.

pub(crate) use crate::codec::heads::{set_block_crc, Heads, TooLarge, HEADS_MAX};
use crate::names::{entry_dir_name, entry_from_dir_name};

/// Key of a bucket's folder in the object store: `<prefix>/<bucket>/`.
pub(crate) fn bucket_prefix(prefix: &str, bucket: &str) -> String {
    if prefix.is_empty() {
        format!("{bucket}/")
    } else {
        format!("{prefix}/{bucket}/")
    }
}

pub(crate) fn settings_key(prefix: &str, bucket: &str) -> String {
    format!("{}settings", bucket_prefix(prefix, bucket))
}

/// Key of a block object (`ext` = `blk` or `heads`).
pub(crate) fn block_key(prefix: &str, bucket: &str, entry: &str, id: u64, ext: &str) -> String {
    format!(
        "{}{}/{id:016x}.{ext}",
        bucket_prefix(prefix, bucket),
        entry_dir_name(entry)
    )
}

/// A key under `prefix` parsed back: bucket, entry, block id and extension.
pub(crate) fn parse_block_key(prefix: &str, key: &str) -> Option<(String, String, u64, String)> {
    let rest = if prefix.is_empty() {
        key
    } else {
        key.strip_prefix(prefix)?.strip_prefix('/')?
    };
    let mut parts = rest.split('/');
    let (bucket, edir, file) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (hex, ext) = file.split_once('.')?;
    if hex.len() != 16 {
        return None;
    }
    let id = u64::from_str_radix(hex, 16).ok()?;
    Some((
        bucket.to_string(),
        entry_from_dir_name(edir),
        id,
        ext.to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let k = block_key("edge/one", "cams", "robot1/lidar", 42, "blk");
        assert_eq!(k, "edge/one/cams/robot1%2Flidar/000000000000002a.blk");
        assert_eq!(
            parse_block_key("edge/one", &k),
            Some(("cams".into(), "robot1/lidar".into(), 42, "blk".into()))
        );
        assert_eq!(parse_block_key("edge/one", "edge/one/cams/settings"), None);
        assert_eq!(
            parse_block_key("", &block_key("", "b", "e", 7, "heads")),
            Some(("b".into(), "e".into(), 7, "heads".into()))
        );
    }
}
