//! Object keys and the *heads* sidecar of a tiered block (see `docs/storage-format.md`,
//! "Object layout").
//!
//! A tiered block is two objects: `<prefix>/<bucket>/<entry-dir>/<id>.blk`, the block file
//! byte for byte (header and frames: self-contained), and `<id>.heads`, the block's live
//! records as the index holds them, so an index can be rebuilt from the object store
//! without reading a payload. `<prefix>/<bucket>/settings` holds the bucket's settings.

use std::sync::Arc;

use crate::chunk::RecMeta;
use crate::frame::{put_varint, Reader};
use crate::index::IndexValue;
use crate::names::{entry_dir_name, entry_from_dir_name};

pub(crate) const HEADS_MAGIC: &[u8; 8] = b"TSHDS001";

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

/// What a heads sidecar holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Heads {
    pub block_id: u64,
    pub base_ts: u64,
    /// Bytes of the block object.
    pub block_len: u64,
    /// CRC32C of the block object's bytes.
    pub block_crc: u32,
    pub entry: String,
    /// Live records: timestamp and index value (`block_id` = this block).
    pub records: Vec<(u64, IndexValue)>,
}

impl Heads {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.records.len() * 16);
        out.extend_from_slice(HEADS_MAGIC);
        out.extend_from_slice(&self.block_id.to_le_bytes());
        out.extend_from_slice(&self.base_ts.to_le_bytes());
        out.extend_from_slice(&self.block_len.to_le_bytes());
        out.extend_from_slice(&self.block_crc.to_le_bytes());
        put_varint(&mut out, self.entry.len() as u64);
        out.extend_from_slice(self.entry.as_bytes());
        put_varint(&mut out, self.records.len() as u64);
        for (ts, v) in &self.records {
            put_varint(&mut out, *ts);
            put_varint(&mut out, v.offset);
            put_varint(&mut out, v.frame_len);
            put_varint(&mut out, v.stored);
            put_varint(&mut out, v.size);
            out.push(v.flags);
            v.meta.encode(&mut out);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// `None` if the bytes are not a whole, CRC-valid sidecar.
    pub fn decode(buf: &[u8]) -> Option<Heads> {
        let body_len = buf.len().checked_sub(4)?;
        let (body, crc) = buf.split_at(body_len);
        if crc32c::crc32c(body).to_le_bytes() != crc {
            return None;
        }
        let mut r = Reader::new(body);
        if r.bytes(8)? != HEADS_MAGIC {
            return None;
        }
        let block_id = r.u64()?;
        let base_ts = r.u64()?;
        let block_len = r.u64()?;
        let block_crc = r.u32()?;
        let n = usize::try_from(r.varint()?).ok()?;
        let entry = r.str(n)?.to_string();
        let count = r.varint()?;
        let mut records = Vec::new();
        let mut shared: Option<Arc<RecMeta>> = None;
        for _ in 0..count {
            let ts = r.varint()?;
            let offset = r.varint()?;
            let frame_len = r.varint()?;
            let stored = r.varint()?;
            let size = r.varint()?;
            let flags = r.u8()?;
            let meta = RecMeta::decode(&mut r)?;
            let meta = match &shared {
                Some(m) if **m == meta => m.clone(),
                _ => {
                    let m = Arc::new(meta);
                    shared = Some(m.clone());
                    m
                }
            };
            records.push((
                ts,
                IndexValue {
                    block_id,
                    offset,
                    frame_len,
                    stored,
                    size,
                    flags,
                    meta,
                },
            ));
        }
        Some(Heads {
            block_id,
            base_ts,
            block_len,
            block_crc,
            entry,
            records,
        })
    }
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

    #[test]
    fn heads_round_trip_and_refuse_damage() {
        let meta = Arc::new(RecMeta {
            content_type: "image/jpeg".into(),
            labels: [("k".to_string(), "v".to_string())].into_iter().collect(),
        });
        let v = |offset| IndexValue {
            block_id: 9,
            offset,
            frame_len: 30,
            stored: 10,
            size: 10,
            flags: 0,
            meta: meta.clone(),
        };
        let h = Heads {
            block_id: 9,
            base_ts: 100,
            block_len: 1000,
            block_crc: 0xdead_beef,
            entry: "e/1".into(),
            records: vec![(100, v(40)), (200, v(70))],
        };
        let bytes = h.encode();
        assert_eq!(Heads::decode(&bytes), Some(h));
        let mut bad = bytes.clone();
        bad[20] ^= 1;
        assert_eq!(Heads::decode(&bad), None);
        assert_eq!(Heads::decode(&bytes[..bytes.len() - 1]), None);
    }
}
