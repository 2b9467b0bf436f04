//! The change feed's keys and values (the `feed` and `feed_state` tables: "`feed` and
//! `feed_state`" in `docs/storage-format.md`). Sequence numbers are big-endian keys, so LMDB's byte order
//! is their order; times and timestamps in values are little-endian.
//!
//! - `feed`:       `seq u64 BE` → `written µs u64 LE ++ ts u64 LE ++ bucket \0 entry`
//! - `feed_state`: `\0next` → the last `seq u64 BE` given out; `r ++ name` →
//!   `position u64 BE ++ bucket`

use super::DecodeError;

/// The `feed_state` key of the sequence counter.
pub const NEXT_KEY: &[u8] = b"\0next";
/// The prefix of the `feed_state` keys of readers.
pub const READER_PREFIX: &[u8] = b"r";

/// The key of an item (and a bound of a range of items).
pub fn seq_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// A sequence number stored as a key or as the counter's value.
pub fn decode_seq(b: &[u8]) -> Result<u64, DecodeError> {
    <[u8; 8]>::try_from(b)
        .map(u64::from_be_bytes)
        .map_err(|_| DecodeError::Garbage("counter"))
}

/// `bucket \0 entry`: how an item names its record's entry.
pub fn entry_key(bucket: &str, entry: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(bucket.len() + 1 + entry.len());
    k.extend_from_slice(bucket.as_bytes());
    k.push(0);
    k.extend_from_slice(entry.as_bytes());
    k
}

pub fn reader_key(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(READER_PREFIX.len() + name.len());
    k.extend_from_slice(READER_PREFIX);
    k.extend_from_slice(name.as_bytes());
    k
}

/// An item's value into `out` (cleared first): `entry_key` is [`entry_key`]'s bytes.
pub fn encode_item(out: &mut Vec<u8>, written_us: u64, ts: u64, entry_key: &[u8]) {
    out.clear();
    out.extend_from_slice(&written_us.to_le_bytes());
    out.extend_from_slice(&ts.to_le_bytes());
    out.extend_from_slice(entry_key);
}

/// One decoded feed item.
pub struct Item<'a> {
    pub seq: u64,
    pub written_us: u64,
    pub ts: u64,
    pub bucket: &'a [u8],
    pub entry: &'a [u8],
}

/// An item from its key and value; `Garbage("key")` or `Garbage("item")` says which part is
/// damaged.
pub fn decode_item<'a>(k: &[u8], v: &'a [u8]) -> Result<Item<'a>, DecodeError> {
    let seq = <[u8; 8]>::try_from(k)
        .map(u64::from_be_bytes)
        .map_err(|_| DecodeError::Garbage("key"))?;
    let bad = || DecodeError::Garbage("item");
    let (Some(w), Some(t), Some(rest)) = (v.get(..8), v.get(8..16), v.get(16..)) else {
        return Err(bad());
    };
    let mut parts = rest.splitn(2, |b| *b == 0);
    let (Some(bucket), Some(entry)) = (parts.next(), parts.next()) else {
        return Err(bad());
    };
    Ok(Item {
        seq,
        written_us: u64::from_le_bytes(w.try_into().map_err(|_| bad())?),
        ts: u64::from_le_bytes(t.try_into().map_err(|_| bad())?),
        bucket,
        entry,
    })
}

/// A reader's value: its position, then its bucket.
pub fn encode_reader(pos: u64, bucket: &str) -> Vec<u8> {
    let mut v = pos.to_be_bytes().to_vec();
    v.extend_from_slice(bucket.as_bytes());
    v
}

/// A reader from its key and value: (name, position, bucket); `Garbage("reader")` for a
/// value too short for its position.
pub fn decode_reader(k: &[u8], v: &[u8]) -> Result<(String, u64, String), DecodeError> {
    let name = String::from_utf8_lossy(k.get(READER_PREFIX.len()..).unwrap_or_default());
    let pos = v
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_be_bytes)
        .ok_or(DecodeError::Garbage("reader"))?;
    let bucket = String::from_utf8_lossy(&v[8..]).into_owned();
    Ok((name.into_owned(), pos, bucket))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn items_and_readers_round_trip_and_damage_names_its_part() {
        let mut v = Vec::new();
        encode_item(&mut v, 7, 9, &entry_key("b", "e/x"));
        let it = decode_item(&seq_key(3), &v).unwrap();
        assert_eq!((it.seq, it.written_us, it.ts), (3, 7, 9));
        assert_eq!((it.bucket, it.entry), (&b"b"[..], &b"e/x"[..]));
        assert_eq!(
            decode_item(&[1, 2], &v).err(),
            Some(DecodeError::Garbage("key"))
        );
        assert_eq!(
            decode_item(&seq_key(3), &v[..12]).err(),
            Some(DecodeError::Garbage("item"))
        );
        let r = encode_reader(42, "cams");
        assert_eq!(
            decode_reader(&reader_key("t1"), &r).unwrap(),
            ("t1".to_string(), 42, "cams".to_string())
        );
        assert_eq!(
            decode_reader(&reader_key("t1"), &r[..5]).err(),
            Some(DecodeError::Garbage("reader"))
        );
        assert_eq!(decode_seq(&seq_key(5)).unwrap(), 5);
    }
}
