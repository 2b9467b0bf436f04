//! The LMDB index (heed): where each record lives, and the state of each block.
//!
//! Tables (all keys big-endian so LMDB's byte order is numeric order):
//! - `records`: `entry_id u32 ++ ts u64` → [`IndexValue`]
//! - `blocks`:  `block_id u64` → [`BlockMeta`]
//! - `entries`: `bucket \0 entry` → `entry_id u32`
//! - `meta`:    small named values (format version)
//!
//! The index is a cache of the block files: `recover::rebuild_index` recreates it.

use std::path::Path;

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, RoTxn, RwTxn, WithoutTls};

use crate::frame::FLAG_ZSTD;
use crate::frame::{
    decode_labels, encode_labels, loaded_content_type, put_varint, stored_content_type, Reader,
};
use crate::{Error, Labels, OpenError, Result};

pub const INDEX_VERSION: &[u8] = b"tsblob-index-1";

pub type RecKey = [u8; 12];

pub fn rec_key(entry_id: u32, ts: u64) -> RecKey {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&entry_id.to_be_bytes());
    k[4..].copy_from_slice(&ts.to_be_bytes());
    k
}

pub fn key_ts(k: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(k.get(4..12)?.try_into().ok()?))
}

/// Where a record lives and what it is, without reading its block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexValue {
    pub block_id: u64,
    pub offset: u64,
    pub frame_len: u64,
    /// Payload bytes as stored (compressed or not).
    pub stored: u64,
    pub size: u64,
    pub flags: u8,
    pub content_type: String,
    pub labels: Labels,
}

impl IndexValue {
    pub fn encode(&self, out: &mut Vec<u8>) {
        // The frame length is stored as the head length (one byte for ordinary heads),
        // with the compression flag in its low bit; the stored length follows only for a
        // compressed payload (for a raw one it equals `size`).
        let zstd = self.flags & FLAG_ZSTD != 0;
        let stored = self.stored;
        put_varint(out, self.block_id);
        put_varint(out, self.offset);
        put_varint(out, ((self.frame_len - stored) << 1) | u64::from(zstd));
        put_varint(out, self.size);
        if zstd {
            put_varint(out, stored);
        }
        let ct = stored_content_type(&self.content_type);
        put_varint(out, ct.len() as u64);
        out.extend_from_slice(ct.as_bytes());
        if !self.labels.is_empty() {
            encode_labels(out, &self.labels);
        }
    }

    pub fn decode(buf: &[u8]) -> Option<IndexValue> {
        let mut r = Reader::new(buf);
        let block_id = r.varint()?;
        let offset = r.varint()?;
        let head = r.varint()?;
        let size = r.varint()?;
        let (flags, stored) = if head & 1 == 1 {
            (FLAG_ZSTD, r.varint()?)
        } else {
            (0, size)
        };
        let frame_len = (head >> 1).checked_add(stored)?;
        let ctl = r.varint()? as usize;
        let content_type = loaded_content_type(r.str(ctl)?);
        let labels = if r.pos == buf.len() {
            Labels::new()
        } else {
            decode_labels(&mut r)?
        };
        Some(IndexValue {
            block_id,
            offset,
            frame_len,
            stored,
            size,
            flags,
            content_type,
            labels,
        })
    }

    /// Only the block id, for scans that need nothing else.
    pub fn decode_block_id(buf: &[u8]) -> Option<u64> {
        Reader::new(buf).varint()
    }
}

/// The state of one block file as the index knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockMeta {
    pub entry_id: u32,
    pub base_ts: u64,
    pub min_ts: u64,
    pub max_ts: u64,
    /// Live (not removed) records.
    pub records: u64,
    /// Bytes of the block file up to the end of the last frame the index has seen.
    pub indexed_len: u64,
    pub sealed: bool,
}

impl BlockMeta {
    pub fn encode(&self) -> [u8; 45] {
        let mut b = [0u8; 45];
        b[0..4].copy_from_slice(&self.entry_id.to_le_bytes());
        b[4..12].copy_from_slice(&self.base_ts.to_le_bytes());
        b[12..20].copy_from_slice(&self.min_ts.to_le_bytes());
        b[20..28].copy_from_slice(&self.max_ts.to_le_bytes());
        b[28..36].copy_from_slice(&self.records.to_le_bytes());
        b[36..44].copy_from_slice(&self.indexed_len.to_le_bytes());
        b[44] = u8::from(self.sealed);
        b
    }

    pub fn decode(b: &[u8]) -> Option<BlockMeta> {
        let mut r = Reader::new(b);
        Some(BlockMeta {
            entry_id: r.u32()?,
            base_ts: r.u64()?,
            min_ts: r.u64()?,
            max_ts: r.u64()?,
            records: r.u64()?,
            indexed_len: r.u64()?,
            sealed: r.u8()? != 0,
        })
    }
}

/// The opened LMDB environment and its tables.
pub struct Index {
    pub env: Env<WithoutTls>,
    pub records: Database<Bytes, Bytes>,
    pub blocks: Database<Bytes, Bytes>,
    pub entries: Database<Bytes, Bytes>,
    pub meta: Database<Bytes, Bytes>,
}

impl Index {
    pub fn open(dir: &Path, map_size: usize) -> Result<Index> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {dir:?}"), e))?;
        let mut opts = EnvOpenOptions::new().read_txn_without_tls();
        opts.map_size(map_size).max_dbs(8).max_readers(1024);
        // SAFETY: the data folder is locked by this process (see `Store::open`), so no
        // other process maps the same file; NO_SYNC because the store syncs on its own
        // terms (sync policy), and the index can be rebuilt from the block files.
        let env = unsafe {
            opts.flags(EnvFlags::NO_SYNC | EnvFlags::NO_READ_AHEAD);
            opts.open(dir)
        }
        .map_err(|e| OpenError::Index {
            path: dir.to_path_buf(),
            map_size,
            reason: e.to_string(),
        })?;
        let mut wtxn = env.write_txn()?;
        let records = env.create_database(&mut wtxn, Some("records"))?;
        let blocks = env.create_database(&mut wtxn, Some("blocks"))?;
        let entries = env.create_database(&mut wtxn, Some("entries"))?;
        let meta = env.create_database(&mut wtxn, Some("meta"))?;
        wtxn.commit()?;
        Ok(Index {
            env,
            records,
            blocks,
            entries,
            meta,
        })
    }

    pub fn read_txn(&self) -> Result<RoTxn<'_, WithoutTls>> {
        Ok(self.env.read_txn()?)
    }

    pub fn write_txn(&self) -> Result<RwTxn<'_>> {
        Ok(self.env.write_txn()?)
    }

    pub fn get_record(
        &self,
        txn: &RoTxn<'_, WithoutTls>,
        entry_id: u32,
        ts: u64,
    ) -> Result<Option<IndexValue>> {
        match self.records.get(txn, &rec_key(entry_id, ts))? {
            Some(v) => Ok(Some(decode_value(v)?)),
            None => Ok(None),
        }
    }

    pub fn contains(&self, txn: &RoTxn<'_, WithoutTls>, entry_id: u32, ts: u64) -> Result<bool> {
        Ok(self.records.get(txn, &rec_key(entry_id, ts))?.is_some())
    }

    /// Up to `max` records of an entry in `span` (`[start, stop)`), in the given direction.
    pub fn range(
        &self,
        txn: &RoTxn<'_, WithoutTls>,
        entry_id: u32,
        span: std::ops::Range<u64>,
        descending: bool,
        max: usize,
        out: &mut Vec<(u64, IndexValue)>,
    ) -> Result<()> {
        if span.is_empty() {
            return Ok(());
        }
        let lo = rec_key(entry_id, span.start);
        let hi = rec_key(entry_id, span.end);
        let range = (
            std::ops::Bound::Included(&lo[..]),
            std::ops::Bound::Excluded(&hi[..]),
        );
        if descending {
            for item in self.records.rev_range(txn, &range)?.take(max) {
                let (k, v) = item?;
                out.push((key_ts(k).unwrap_or(0), decode_value(v)?));
            }
        } else {
            for item in self.records.range(txn, &range)?.take(max) {
                let (k, v) = item?;
                out.push((key_ts(k).unwrap_or(0), decode_value(v)?));
            }
        }
        Ok(())
    }

    /// The newest record of an entry.
    pub fn last(
        &self,
        txn: &RoTxn<'_, WithoutTls>,
        entry_id: u32,
    ) -> Result<Option<(u64, IndexValue)>> {
        let mut out = Vec::with_capacity(1);
        self.range(txn, entry_id, 0..u64::MAX, true, 1, &mut out)?;
        // u64::MAX itself is never a valid timestamp (reserved), so the exclusive stop is fine.
        Ok(out.pop())
    }

    /// Deletes the records of `entry_id` in `[min, max]` that live in block `block_id`.
    pub fn delete_block_records(
        &self,
        txn: &mut RwTxn<'_>,
        entry_id: u32,
        min: u64,
        max: u64,
        block_id: u64,
    ) -> Result<()> {
        let lo = rec_key(entry_id, min);
        let hi = rec_key(entry_id, max);
        let range = (
            std::ops::Bound::Included(&lo[..]),
            std::ops::Bound::Included(&hi[..]),
        );
        let mut it = self.records.range_mut(txn, &range)?;
        while let Some(item) = it.next() {
            let (_, v) = item?;
            if IndexValue::decode_block_id(v) == Some(block_id) {
                // SAFETY: no reference into the database is kept across the deletion.
                unsafe { it.del_current()? };
            }
        }
        Ok(())
    }

    /// Deletes every record of an entry.
    pub fn delete_entry_records(&self, txn: &mut RwTxn<'_>, entry_id: u32) -> Result<()> {
        let lo = rec_key(entry_id, 0);
        let hi = rec_key(entry_id, u64::MAX);
        let range = (
            std::ops::Bound::Included(&lo[..]),
            std::ops::Bound::Included(&hi[..]),
        );
        self.records.delete_range(txn, &range)?;
        Ok(())
    }

    pub fn first(
        &self,
        txn: &RoTxn<'_, WithoutTls>,
        entry_id: u32,
    ) -> Result<Option<(u64, IndexValue)>> {
        let mut out = Vec::with_capacity(1);
        self.range(txn, entry_id, 0..u64::MAX, false, 1, &mut out)?;
        Ok(out.pop())
    }
}

pub fn decode_value(v: &[u8]) -> Result<IndexValue> {
    IndexValue::decode(v)
        .ok_or_else(|| Error::Index("undecodable index value: rebuild the index".into()))
}

/// Bytes of an entry-table key.
pub fn entry_key(bucket: &str, entry: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(bucket.len() + entry.len() + 1);
    k.extend_from_slice(bucket.as_bytes());
    k.push(0);
    k.extend_from_slice(entry.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_value_round_trips() {
        let mut labels = Labels::new();
        labels.insert("a".into(), "b".into());
        for labels in [Labels::new(), labels] {
            let v = IndexValue {
                block_id: 3,
                offset: 1 << 40,
                frame_len: 1040,
                stored: 1000,
                size: 1024,
                flags: 1,
                content_type: "image/png".into(),
                labels,
            };
            let mut b = Vec::new();
            v.encode(&mut b);
            assert_eq!(IndexValue::decode(&b), Some(v.clone()));
            assert_eq!(IndexValue::decode_block_id(&b), Some(3));
        }
        let m = BlockMeta {
            entry_id: 9,
            base_ts: 1,
            min_ts: 2,
            max_ts: 3,
            records: 4,
            indexed_len: 5,
            sealed: true,
        };
        assert_eq!(BlockMeta::decode(&m.encode()), Some(m));
    }
}
