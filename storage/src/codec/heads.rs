//! The heads sidecar of a tiered block ("Heads sidecar" in `docs/storage-format.md`): the
//! block's live records as the index held them, so an index can be rebuilt from the object
//! store without reading a payload.
//!
//! | field | encoding |
//! |---|---|
//! | magic | 8 bytes `TSHDS002` (`TSHDS001`: the first layout, still read) |
//! | block id, base timestamp, block object length | u64 LE each |
//! | block object CRC32C | u32 LE |
//! | entry name | varint length + UTF-8 |
//! | attrs count (`TSHDS002` only) | varint, then each distinct `metas` value ([`Attrs`]) once |
//! | record count | varint |
//! | per record | varint ts, offset, frame length, stored length, original length; u8 flags; `TSHDS002`: varint index into the attrs; `TSHDS001`: a `metas` value |
//! | CRC32C | u32 LE of every byte before it |
//!
//! Each distinct content type and label set is written once: in the first layout every
//! record carried its own copy, so relabelling a block's million records with one 64 KiB
//! label set (one `PATCH` of a query) made a sidecar of 64 GB, built in memory. And the
//! encoding stops at a bound ([`HEADS_MAX`]): a block whose records' distinct label sets
//! exceed it is not tiered.

use std::collections::HashMap;
use std::sync::Arc;

use super::bytes::put_varint;
use super::index::IndexValue;
use super::{Attrs, DecodeError, Reader};

pub(crate) const HEADS_MAGIC: &[u8; 8] = b"TSHDS002";
/// The magic of the first layout, each record with its own attrs.
const HEADS_MAGIC_1: &[u8; 8] = b"TSHDS001";

/// The longest sidecar written: half of the most a tier reads whole (the server's
/// `WHOLE_MAX`, 256 MiB), which a reader must be able to fetch and decode in memory. A
/// 64 MiB block of 1 KiB records with a distinct small label set each makes ~4 MB.
pub const HEADS_MAX: usize = 128 << 20;

/// Where the block object's CRC32C lies in a sidecar (after the magic, the block id, the
/// base timestamp and the block object's length).
const BLOCK_CRC_AT: usize = 32;

/// Sets the block object's CRC32C in an encoded sidecar (known once the block is up, after
/// the sidecar was made) and the sidecar's own CRC32C after it.
pub(crate) fn set_block_crc(sidecar: &mut [u8], block_crc: u32) {
    let body = sidecar.len().saturating_sub(4);
    if body < BLOCK_CRC_AT + 4 {
        return; // (never: every encoded sidecar is longer)
    }
    sidecar[BLOCK_CRC_AT..BLOCK_CRC_AT + 4].copy_from_slice(&block_crc.to_le_bytes());
    let crc = crate::crc::crc32c(&sidecar[..body]);
    sidecar[body..].copy_from_slice(&crc.to_le_bytes());
}

/// A sidecar would be longer than the bound it was encoded with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLarge {
    /// Bytes encoded when it went past the bound.
    pub at_least: usize,
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
    /// The sidecar's bytes, or [`TooLarge`] as soon as they go past `max`.
    pub fn encode(&self, max: usize) -> Result<Vec<u8>, TooLarge> {
        let over = |out: &Vec<u8>| {
            if out.len() > max {
                Err(TooLarge {
                    at_least: out.len(),
                })
            } else {
                Ok(())
            }
        };
        let mut out = Vec::with_capacity(64 + self.records.len().min(1 << 16) * 16);
        out.extend_from_slice(HEADS_MAGIC);
        out.extend_from_slice(&self.block_id.to_le_bytes());
        out.extend_from_slice(&self.base_ts.to_le_bytes());
        out.extend_from_slice(&self.block_len.to_le_bytes());
        out.extend_from_slice(&self.block_crc.to_le_bytes());
        put_varint(&mut out, self.entry.len() as u64);
        out.extend_from_slice(self.entry.as_bytes());
        // The distinct attrs, by the index's shared `Arc` first (records of one label set
        // share it), by content for the rest (attrs kept inline in the index).
        let mut by_ptr: HashMap<*const Attrs, u64> = HashMap::new();
        let mut by_content: HashMap<&Attrs, u64> = HashMap::new();
        let mut table = Vec::new();
        let mut refs = Vec::with_capacity(self.records.len());
        for (_, v) in &self.records {
            let ptr = Arc::as_ptr(&v.attrs);
            let i = match by_ptr.get(&ptr) {
                Some(&i) => i,
                None => {
                    let next = by_content.len() as u64;
                    let i = *by_content.entry(&v.attrs).or_insert_with(|| {
                        v.attrs.encode(&mut table);
                        next
                    });
                    by_ptr.insert(ptr, i);
                    over(&table)?;
                    i
                }
            };
            refs.push(i);
        }
        put_varint(&mut out, by_content.len() as u64);
        out.extend_from_slice(&table);
        drop(table);
        over(&out)?;
        put_varint(&mut out, self.records.len() as u64);
        for ((ts, v), i) in self.records.iter().zip(refs) {
            put_varint(&mut out, *ts);
            put_varint(&mut out, v.offset);
            put_varint(&mut out, v.frame_len);
            put_varint(&mut out, v.stored);
            put_varint(&mut out, v.size);
            out.push(v.flags);
            put_varint(&mut out, i);
            over(&out)?;
        }
        let crc = crate::crc::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        over(&out)?;
        Ok(out)
    }

    /// An error if the bytes are not a whole, CRC-valid sidecar.
    pub fn decode(buf: &[u8]) -> Result<Heads, DecodeError> {
        let body_len = buf.len().checked_sub(4).ok_or(DecodeError::Short)?;
        let (body, crc) = buf.split_at(body_len);
        if crate::crc::crc32c(body).to_le_bytes() != crc {
            return Err(DecodeError::Crc);
        }
        let mut r = Reader::new(body);
        let first_layout = match r.bytes(8)? {
            m if m == HEADS_MAGIC => false,
            m if m == HEADS_MAGIC_1 => true,
            _ => return Err(DecodeError::Garbage("not a heads sidecar (bad magic)")),
        };
        let block_id = r.u64()?;
        let base_ts = r.u64()?;
        let block_len = r.u64()?;
        let block_crc = r.u32()?;
        let n = r.length()?;
        let entry = r.str(n)?.to_string();
        let mut table = Vec::new();
        if !first_layout {
            for _ in 0..r.varint()? {
                table.push(Arc::new(Attrs::decode(&mut r)?));
            }
        }
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
            let meta = if first_layout {
                let meta = Attrs::decode(&mut r)?;
                match &shared {
                    Some(m) if **m == meta => m.clone(),
                    _ => {
                        let m = Arc::new(meta);
                        shared = Some(m.clone());
                        m
                    }
                }
            } else {
                usize::try_from(r.varint()?)
                    .ok()
                    .and_then(|i| table.get(i))
                    .ok_or(DecodeError::Garbage(
                        "a record refers to attrs the sidecar lacks",
                    ))?
                    .clone()
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

    fn value(offset: u64, attrs: Arc<Attrs>) -> IndexValue {
        IndexValue {
            block_id: 9,
            offset,
            frame_len: 30,
            stored: 10,
            size: 10,
            flags: 0,
            attrs,
        }
    }

    fn heads(records: Vec<(u64, IndexValue)>) -> Heads {
        Heads {
            block_id: 9,
            base_ts: 100,
            block_len: 1000,
            block_crc: 0xdead_beef,
            entry: "e/1".into(),
            records,
        }
    }

    fn attrs(labels: &[(&str, &str)]) -> Arc<Attrs> {
        Arc::new(Attrs {
            content_type: "image/jpeg".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
    }

    #[test]
    fn heads_round_trip_and_refuse_damage() {
        let (a, b) = (attrs(&[("k", "v")]), attrs(&[]));
        let h = heads(vec![
            (100, value(40, a.clone())),
            (150, value(55, b)),
            (200, value(70, a)),
        ]);
        let bytes = h.encode(HEADS_MAX).unwrap();
        assert_eq!(Heads::decode(&bytes), Ok(h));
        let mut bad = bytes.clone();
        bad[20] ^= 1;
        assert_eq!(Heads::decode(&bad), Err(DecodeError::Crc));
        for cut in 0..bytes.len() {
            assert!(Heads::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(Heads::decode(&[]), Err(DecodeError::Short));
    }

    /// Bug: every record carried its own copy of its content type and labels, so one
    /// `PATCH` of a query giving a block's records one large label set made the sidecar
    /// records × labels long (a million records and 64 KiB of labels: 64 GB, built in
    /// memory on the device). Each distinct set is written once now, whether the records
    /// share the index's `Arc` or only equal contents.
    #[test]
    fn a_label_set_shared_by_every_record_is_written_once() {
        let big = "x".repeat(4000);
        let labels: Vec<(String, String)> =
            (0..16).map(|i| (format!("k{i}"), big.clone())).collect();
        let refs: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let shared = attrs(&refs);
        let records: Vec<_> = (0..20_000u64)
            .map(|i| {
                // every tenth record with an equal set of its own (attrs inline in the index)
                let a = if i % 10 == 0 {
                    attrs(&refs)
                } else {
                    shared.clone()
                };
                (1_000 + i, value(i * 30, a))
            })
            .collect();
        let h = heads(records);
        let bytes = h.encode(HEADS_MAX).unwrap();
        assert!(bytes.len() < 2 << 20, "{} bytes", bytes.len());
        assert_eq!(Heads::decode(&bytes), Ok(h));
    }

    /// The block's CRC set after encoding gives the bytes encoding with it gives.
    #[test]
    fn the_block_crc_is_set_in_place() {
        let mut h = heads(vec![(100, value(40, attrs(&[("k", "v")])))]);
        h.block_crc = 0;
        let mut bytes = h.encode(HEADS_MAX).unwrap();
        set_block_crc(&mut bytes, 0xdead_beef);
        h.block_crc = 0xdead_beef;
        assert_eq!(bytes, h.encode(HEADS_MAX).unwrap());
        assert_eq!(Heads::decode(&bytes).unwrap().block_crc, 0xdead_beef);
    }

    /// Distinct label sets past the bound: the encoding stops there, not at the end.
    #[test]
    fn distinct_label_sets_past_the_bound_are_too_large() {
        let v = "y".repeat(1000);
        let records: Vec<_> = (0..1_000u64)
            .map(|i| (i, value(i * 30, attrs(&[("n", &format!("{i}{v}"))]))))
            .collect();
        let h = heads(records);
        let err = h.encode(100_000).unwrap_err();
        assert!(err.at_least > 100_000 && err.at_least < 110_000, "{err:?}");
        assert!(h.encode(HEADS_MAX).is_ok());
    }

    /// Sidecars uploaded before `TSHDS002` (each record with its attrs) still decode.
    #[test]
    fn the_first_layout_still_decodes() {
        let (a, b) = (attrs(&[("k", "v")]), attrs(&[("k", "w")]));
        let h = heads(vec![
            (100, value(40, a.clone())),
            (150, value(55, b)),
            (200, value(70, a)),
        ]);
        let mut out = HEADS_MAGIC_1.to_vec();
        out.extend_from_slice(&h.block_id.to_le_bytes());
        out.extend_from_slice(&h.base_ts.to_le_bytes());
        out.extend_from_slice(&h.block_len.to_le_bytes());
        out.extend_from_slice(&h.block_crc.to_le_bytes());
        put_varint(&mut out, h.entry.len() as u64);
        out.extend_from_slice(h.entry.as_bytes());
        put_varint(&mut out, h.records.len() as u64);
        for (ts, v) in &h.records {
            for n in [*ts, v.offset, v.frame_len, v.stored, v.size] {
                put_varint(&mut out, n);
            }
            out.push(v.flags);
            v.attrs.encode(&mut out);
        }
        let crc = crate::crc::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(Heads::decode(&out), Ok(h));
    }

    #[test]
    fn a_record_referring_past_the_attrs_table_is_refused() {
        let h = heads(vec![(100, value(40, attrs(&[])))]);
        let mut bytes = h.encode(HEADS_MAX).unwrap();
        let body = bytes.len() - 4;
        bytes[body - 1] = 5; // the last record's attrs index (one table entry)
        let crc = crate::crc::crc32c(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Heads::decode(&bytes),
            Err(DecodeError::Garbage(_))
        ));
    }
}
