//! The heads sidecar of a tiered block ("Heads sidecar" in `docs/storage-format.md`): the
//! block's live records as the index held them, so an index can be rebuilt from the object
//! store without reading a payload.
//!
//! | field | encoding |
//! |---|---|
//! | magic | 8 bytes `TSHDS001` |
//! | block id, base timestamp, block object length | u64 LE each |
//! | block object CRC32C | u32 LE |
//! | entry name | varint length + UTF-8 |
//! | record count | varint |
//! | per record | varint ts, offset, frame length, stored length, original length; u8 flags; a `metas` value ([`Attrs`]) |
//! | CRC32C | u32 LE of every byte before it |

use std::sync::Arc;

use super::bytes::put_varint;
use super::index::IndexValue;
use super::{Attrs, DecodeError, Reader};

pub(crate) const HEADS_MAGIC: &[u8; 8] = b"TSHDS001";

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
            v.attrs.encode(&mut out);
        }
        let crc = crate::crc::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// An error if the bytes are not a whole, CRC-valid sidecar.
    pub fn decode(buf: &[u8]) -> Result<Heads, DecodeError> {
        let body_len = buf.len().checked_sub(4).ok_or(DecodeError::Short)?;
        let (body, crc) = buf.split_at(body_len);
        if crate::crc::crc32c(body).to_le_bytes() != crc {
            return Err(DecodeError::Crc);
        }
        let mut r = Reader::new(body);
        if r.bytes(8)? != HEADS_MAGIC {
            return Err(DecodeError::Garbage("not a heads sidecar (bad magic)"));
        }
        let block_id = r.u64()?;
        let base_ts = r.u64()?;
        let block_len = r.u64()?;
        let block_crc = r.u32()?;
        let n = r.length()?;
        let entry = r.str(n)?.to_string();
        let count = r.varint()?;
        let mut records = Vec::new();
        let mut shared: Option<Arc<Attrs>> = None;
        for _ in 0..count {
            let ts = r.varint()?;
            let offset = r.varint()?;
            let frame_len = r.varint()?;
            let stored = r.varint()?;
            let size = r.varint()?;
            let flags = r.u8()?;
            let meta = Attrs::decode(&mut r)?;
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
                    attrs: meta,
                },
            ));
        }
        Ok(Heads {
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
    fn heads_round_trip_and_refuse_damage() {
        let meta = Arc::new(Attrs {
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
            attrs: meta.clone(),
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
        assert_eq!(Heads::decode(&bytes), Ok(h));
        let mut bad = bytes.clone();
        bad[20] ^= 1;
        assert_eq!(Heads::decode(&bad), Err(DecodeError::Crc));
        for cut in 0..bytes.len() {
            assert!(Heads::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(Heads::decode(&[]), Err(DecodeError::Short));
    }
}
