//! The keys and values of the index's tables other than the chunk values ([`super::chunk`]):
//! `metas` values ([`Attrs`]), `blocks` values ([`BlockState`]), the keys of `chunks`,
//! `metas`, `blocks` and `entries`, and the keys and values of `open` ("LMDB index" in
//! `docs/storage-format.md`). Keys are
//! big-endian, so LMDB's byte order is numeric order; values are little-endian.

use std::sync::Arc;

use super::frame::{
    decode_labels, encode_labels, loaded_content_type, stored_content_type, FLAG_ZSTD,
};
use super::{bytes::put_varint, DecodeError, Reader};
use crate::record::Labels;

/// A record's *attributes*: its content type and labels, what the index keeps of it
/// besides where it is and its size (a `metas` value, or inline in a chunk, or in a heads
/// sidecar). Part of the record's meta ([`crate::RecordMeta`]), shared by the records that
/// have the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Attrs {
    pub content_type: String,
    pub labels: Labels,
}

impl Attrs {
    /// Content type (varint length + ASCII, 0 = the default), then the labels as in a frame
    /// (varint count, then key and value with varint lengths).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let ct = stored_content_type(&self.content_type);
        put_varint(out, ct.len() as u64);
        out.extend_from_slice(ct.as_bytes());
        encode_labels(out, &self.labels);
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Attrs, DecodeError> {
        let ctl = r.length()?;
        let content_type = loaded_content_type(r.str(ctl)?);
        let labels = decode_labels(r)?;
        Ok(Attrs {
            content_type,
            labels,
        })
    }
}

/// Bytes of a `blocks` value.
pub const BLOCK_STATE_LEN: usize = 45;

impl BlockState {
    /// | offset | size | field |
    /// |---|---|---|
    /// | 0 | 4 | entry id |
    /// | 4 | 8 | base timestamp |
    /// | 12 | 8 | smallest live timestamp |
    /// | 20 | 8 | largest live timestamp |
    /// | 28 | 8 | live records |
    /// | 36 | 8 | indexed length |
    /// | 44 | 1 | bit 0 sealed, bit 1 tiered |
    pub fn encode(&self) -> [u8; BLOCK_STATE_LEN] {
        let mut b = [0u8; BLOCK_STATE_LEN];
        b[0..4].copy_from_slice(&self.entry_id.to_le_bytes());
        b[4..12].copy_from_slice(&self.base_ts.to_le_bytes());
        b[12..20].copy_from_slice(&self.min_ts.to_le_bytes());
        b[20..28].copy_from_slice(&self.max_ts.to_le_bytes());
        b[28..36].copy_from_slice(&self.records.to_le_bytes());
        b[36..44].copy_from_slice(&self.indexed_len.to_le_bytes());
        // Bit 0: sealed; bit 1: tiered (older indexes only ever wrote 0 or 1).
        b[44] = u8::from(self.sealed) | (u8::from(self.tiered) << 1);
        b
    }

    pub fn decode(b: &[u8]) -> Result<BlockState, DecodeError> {
        let mut r = Reader::new(b);
        let (entry_id, base_ts, min_ts, max_ts) = (r.u32()?, r.u64()?, r.u64()?, r.u64()?);
        let (records, indexed_len, state) = (r.u64()?, r.u64()?, r.u8()?);
        Ok(BlockState {
            entry_id,
            base_ts,
            min_ts,
            max_ts,
            records,
            indexed_len,
            sealed: state & 1 != 0,
            tiered: state & 2 != 0,
        })
    }
}

/// A `chunks` key: `entry_id` u32 BE ++ chunk key u64 BE.
pub fn chunk_key(entry_id: u32, ts: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&entry_id.to_be_bytes());
    k[4..].copy_from_slice(&ts.to_be_bytes());
    k
}

/// An `open` key: `entry_id` u32 BE (so an entry has at most one open chunk).
pub fn open_key(entry_id: u32) -> [u8; 4] {
    entry_id.to_be_bytes()
}

/// The bytes an `open` value takes before its chunk: the chunk key, u64 BE.
pub const OPEN_KEY_LEN: usize = 8;

/// An `open` value: the chunk key (u64 BE) and the chunk; `None` if it is shorter than a
/// key or holds an empty chunk.
pub fn decode_open_value(v: &[u8]) -> Option<(u64, &[u8])> {
    let (k, chunk) = v.split_first_chunk::<OPEN_KEY_LEN>()?;
    (!chunk.is_empty()).then_some((u64::from_be_bytes(*k), chunk))
}

/// A `metas` key: `entry_id` u32 BE ++ `meta_id` u32 BE.
pub fn attrs_key(entry_id: u32, id: u32) -> [u8; 8] {
    let mut k = [0u8; 8];
    k[..4].copy_from_slice(&entry_id.to_be_bytes());
    k[4..].copy_from_slice(&id.to_be_bytes());
    k
}

/// The entry id a `chunks` or `metas` key starts with.
pub fn key_entry(k: &[u8]) -> Result<u32, DecodeError> {
    Ok(u32::from_be_bytes(be(k.get(..4))?))
}

/// The chunk key (timestamp) of a `chunks` key.
pub fn key_ts(k: &[u8]) -> Result<u64, DecodeError> {
    Ok(u64::from_be_bytes(be(k.get(4..12))?))
}

/// The attrs id of a `metas` key.
pub fn key_attrs_id(k: &[u8]) -> Result<u32, DecodeError> {
    Ok(u32::from_be_bytes(be(k.get(4..8))?))
}

/// A `blocks` key: the block id, u64 BE.
pub fn block_key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

pub fn decode_block_key(k: &[u8]) -> Result<u64, DecodeError> {
    Ok(u64::from_be_bytes(be(Some(k))?))
}

/// An `entries` key: `bucket` ++ `0x00` ++ entry name.
pub fn entry_key(bucket: &str, entry: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(bucket.len() + entry.len() + 1);
    k.extend_from_slice(bucket.as_bytes());
    k.push(0);
    k.extend_from_slice(entry.as_bytes());
    k
}

/// An `entries` key read back: (bucket, entry) as bytes.
pub fn decode_entry_key(k: &[u8]) -> Result<(&[u8], &[u8]), DecodeError> {
    let mut parts = k.splitn(2, |b| *b == 0);
    match (parts.next(), parts.next()) {
        (Some(b), Some(e)) => Ok((b, e)),
        _ => Err(DecodeError::Garbage("an entry key has no separator")),
    }
}

/// An `entries` value: the entry id, u32 BE.
pub fn entry_id_value(id: u32) -> [u8; 4] {
    id.to_be_bytes()
}

pub fn decode_entry_id_value(v: &[u8]) -> Result<u32, DecodeError> {
    Ok(u32::from_be_bytes(be(Some(v))?))
}

/// Exactly `N` bytes, else the key or value is short (or too long, for a whole value).
fn be<const N: usize>(b: Option<&[u8]>) -> Result<[u8; N], DecodeError> {
    let b = b.ok_or(DecodeError::Short)?;
    <[u8; N]>::try_from(b).map_err(|_| {
        if b.len() < N {
            DecodeError::Short
        } else {
            DecodeError::Garbage("a key or value is longer than its type")
        }
    })
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
    /// Content type and labels, shared by the records that have the same.
    pub attrs: Arc<Attrs>,
}

impl IndexValue {
    /// Whether the payload is stored as is at the end of its frame (not compressed): its
    /// length tells where it starts, so it can be read or sliced without its head.
    pub fn raw(&self) -> bool {
        self.flags & FLAG_ZSTD == 0 && self.size <= self.frame_len
    }
}

/// The state of one block file as the index knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockState {
    pub entry_id: u32,
    pub base_ts: u64,
    pub min_ts: u64,
    pub max_ts: u64,
    /// Live (not removed) records.
    pub records: u64,
    /// Bytes of the block file up to the end of the last frame the index has seen.
    pub indexed_len: u64,
    pub sealed: bool,
    /// Uploaded to the object store and verified: the local file is gone (`tier/`).
    pub tiered: bool,
}

impl BlockState {
    /// A block just created for `entry_id` (its first record at `base_ts`), holding only its
    /// header of `header_len` bytes so far.
    pub fn new_block(entry_id: u32, base_ts: u64, header_len: u64) -> BlockState {
        BlockState {
            entry_id,
            base_ts,
            min_ts: base_ts,
            max_ts: base_ts,
            records: 0,
            indexed_len: header_len,
            ..BlockState::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_meta_round_trips_and_short_values_are_errors() {
        let m = BlockState {
            entry_id: 9,
            base_ts: 1,
            min_ts: 2,
            max_ts: 3,
            records: 4,
            indexed_len: 5,
            sealed: true,
            tiered: false,
        };
        assert_eq!(BlockState::decode(&m.encode()), Ok(m));
        let t = BlockState { tiered: true, ..m };
        assert_eq!(BlockState::decode(&t.encode()), Ok(t));
        let bytes = t.encode();
        for cut in 0..bytes.len() {
            assert_eq!(BlockState::decode(&bytes[..cut]), Err(DecodeError::Short));
        }
    }

    #[test]
    fn rec_meta_round_trips_and_damage_is_an_error() {
        let m = Attrs {
            content_type: "image/jpeg".into(),
            labels: [("k".to_string(), "v".to_string())].into_iter().collect(),
        };
        let mut v = Vec::new();
        m.encode(&mut v);
        assert_eq!(Attrs::decode(&mut Reader::new(&v)), Ok(m));
        for cut in 0..v.len() {
            assert_eq!(
                Attrs::decode(&mut Reader::new(&v[..cut])),
                Err(DecodeError::Short)
            );
        }
        // The default content type is stored empty and read back as itself.
        let d = Attrs {
            content_type: crate::DEFAULT_CONTENT_TYPE.into(),
            labels: Labels::new(),
        };
        let mut v = Vec::new();
        d.encode(&mut v);
        assert_eq!(v, [0, 0]);
        assert_eq!(Attrs::decode(&mut Reader::new(&v)), Ok(d));
        // Not UTF-8.
        assert!(matches!(
            Attrs::decode(&mut Reader::new(&[1, 0xff, 0])),
            Err(DecodeError::Garbage(_))
        ));
    }

    #[test]
    fn keys_round_trip_and_short_keys_are_errors() {
        let k = chunk_key(7, 0x0102_0304_0506_0708);
        assert_eq!(key_entry(&k), Ok(7));
        assert_eq!(key_ts(&k), Ok(0x0102_0304_0506_0708));
        assert_eq!(key_ts(&k[..11]), Err(DecodeError::Short));
        assert_eq!(key_entry(&k[..3]), Err(DecodeError::Short));
        // Big-endian: byte order is numeric order.
        assert!(chunk_key(1, 255) < chunk_key(1, 256));
        assert!(chunk_key(1, u64::MAX) < chunk_key(2, 0));
        let mut v = 77u64.to_be_bytes().to_vec();
        assert_eq!(decode_open_value(&v), None);
        v.extend_from_slice(b"chunk");
        assert_eq!(decode_open_value(&v), Some((77, &b"chunk"[..])));
        assert_eq!(decode_open_value(&v[..5]), None);
        let m = attrs_key(3, 4);
        assert_eq!((key_entry(&m), key_attrs_id(&m)), (Ok(3), Ok(4)));
        assert_eq!(decode_block_key(&block_key(42)), Ok(42));
        assert_eq!(decode_block_key(&[0; 7]), Err(DecodeError::Short));
        assert!(decode_block_key(&[0; 9]).is_err());
        let e = entry_key("b", "robot/lidar");
        assert_eq!(decode_entry_key(&e), Ok((&b"b"[..], &b"robot/lidar"[..])));
        assert!(decode_entry_key(b"no separator").is_err());
        assert_eq!(decode_entry_id_value(&entry_id_value(9)), Ok(9));
        assert_eq!(decode_entry_id_value(&[0; 3]), Err(DecodeError::Short));
    }
}
