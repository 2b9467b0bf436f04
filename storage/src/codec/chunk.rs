//! The codec of the index's `chunks` table: up to [`CHUNK_RECORDS`] records of one entry,
//! sorted by timestamp, delta-encoded against the record before them.
//!
//! A chunk value is a varint record count, then per record one *flags* byte saying which
//! fields repeat the previous record's (or follow from it), then the fields that do not:
//!
//! | flag | when set, the field is omitted because |
//! |---|---|
//! | `0x01` [`SAME_STEP`] | ts − previous ts equals the previous record's step |
//! | `0x02` [`CONTIGUOUS`] | same block, frame offset = previous frame's end |
//! | `0x04` [`SAME_HEAD`] | `head_len << 1 \| zstd` equals the previous record's |
//! | `0x08` [`SAME_SIZE`] | original and stored lengths equal the previous record's |
//! | `0x10` [`SAME_ATTRS`] | content type and labels equal the previous record's |
//!
//! The first record of a chunk is encoded against an imaginary previous record at the
//! chunk's key with step 0, block 0, offset 0, head 0, sizes 0 and no attributes. A record
//! written at a regular interval right after the previous one in the same block, with the
//! same size and labels, costs one byte. `docs/storage-format.md` draws the fields.

use std::sync::Arc;

use super::bytes::{put_varint, unzigzag, zigzag};
use super::{Attrs, DecodeError, Reader};

/// Records per chunk at most (below 128, so the count is always one varint byte).
pub const CHUNK_RECORDS: usize = 64;
/// A chunk is closed once its records take this many bytes (it keeps values well below
/// LMDB's largest in-page node, about 2 KiB with 4 KiB pages).
pub const CHUNK_BYTES: usize = 1024;
const _: () = assert!(CHUNK_RECORDS < 128);

pub const SAME_STEP: u8 = 0x01;
pub const CONTIGUOUS: u8 = 0x02;
pub const SAME_HEAD: u8 = 0x04;
pub const SAME_SIZE: u8 = 0x08;
pub const SAME_ATTRS: u8 = 0x10;
const KNOWN_FLAGS: u8 = 0x1f;

/// A record's [`Attrs`] inside a chunk: an id of the entry's `metas` table, or inline (an
/// entry with more distinct label sets than the interner keeps).
#[derive(Debug, Clone)]
pub enum AttrsRef {
    Id(u32),
    Inline(Arc<Attrs>),
}

impl PartialEq for AttrsRef {
    fn eq(&self, other: &AttrsRef) -> bool {
        match (self, other) {
            (AttrsRef::Id(a), AttrsRef::Id(b)) => a == b,
            (AttrsRef::Inline(a), AttrsRef::Inline(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        }
    }
}

/// One record of a chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    pub ts: u64,
    pub block_id: u64,
    pub offset: u64,
    pub frame_len: u64,
    /// Payload bytes as stored (compressed or not).
    pub stored: u64,
    /// Original payload length.
    pub size: u64,
    pub zstd: bool,
    pub attrs: AttrsRef,
}

impl Slot {
    fn head(&self) -> u64 {
        (self.frame_len.saturating_sub(self.stored) << 1) | u64::from(self.zstd)
    }
}

/// The previous record, as the next one is encoded against it.
#[derive(Clone, Debug, PartialEq)]
struct Prev {
    ts: u64,
    step: u64,
    block: u64,
    end: u64,
    head: u64,
    size: u64,
    stored: u64,
    meta: Option<AttrsRef>,
}

impl Prev {
    fn start(key: u64) -> Prev {
        Prev {
            ts: key,
            step: 0,
            block: 0,
            end: 0,
            head: 0,
            size: 0,
            stored: 0,
            meta: None,
        }
    }
}

/// Appends one record (`s.ts >= prev.ts`) and makes it the previous one.
fn encode_slot(out: &mut Vec<u8>, prev: &mut Prev, s: &Slot) {
    let delta = s.ts - prev.ts;
    let head = s.head();
    let mut flags = 0;
    if delta == prev.step {
        flags |= SAME_STEP;
    }
    if s.block_id == prev.block && s.offset == prev.end {
        flags |= CONTIGUOUS;
    }
    if head == prev.head {
        flags |= SAME_HEAD;
    }
    if s.size == prev.size && s.stored == prev.stored {
        flags |= SAME_SIZE;
    }
    let same_attrs = prev.meta.as_ref() == Some(&s.attrs);
    if same_attrs {
        flags |= SAME_ATTRS;
    }
    out.push(flags);
    if flags & SAME_STEP == 0 {
        put_varint(out, delta);
    }
    if flags & CONTIGUOUS == 0 {
        put_varint(out, zigzag(s.block_id.wrapping_sub(prev.block) as i64));
        let base = if s.block_id == prev.block {
            prev.end
        } else {
            0
        };
        put_varint(out, zigzag(s.offset.wrapping_sub(base) as i64));
    }
    if flags & SAME_HEAD == 0 {
        put_varint(out, head);
    }
    if flags & SAME_SIZE == 0 {
        put_varint(out, s.size);
        if s.zstd {
            put_varint(out, s.stored);
        }
    }
    if !same_attrs {
        match &s.attrs {
            AttrsRef::Id(id) => put_varint(out, u64::from(*id) + 1),
            AttrsRef::Inline(m) => {
                put_varint(out, 0);
                m.encode(out);
            }
        }
        prev.meta = Some(s.attrs.clone());
    }
    // What a reader of these bytes derives (not the slot's own fields, which a record
    // that is not self-consistent could differ from): so an append to a chunk continues
    // from the same state whether the chunk was just encoded or read back
    // ([`ChunkEnd`]).
    let stored = if s.zstd { s.stored } else { s.size };
    prev.ts = s.ts;
    prev.step = delta;
    prev.block = s.block_id;
    prev.end = s.offset.wrapping_add((head >> 1).wrapping_add(stored));
    prev.head = head;
    prev.size = s.size;
    prev.stored = stored;
}

/// How [`encode_chunks`] spreads records over chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Evenly over as few chunks as possible: a chunk in the middle of an entry, where
    /// later inserts land.
    Even,
    /// Each chunk filled up before the next starts: the entry's last chunk, where appends
    /// land.
    Packed,
}

/// Encodes sorted, unique records into chunk values: `(key, value)` pairs. The first
/// chunk's key is `first_key` (at most the first record's timestamp); later chunks are keyed
/// by their first record's; `fill` says how records are spread over the chunks.
pub fn encode_chunks(first_key: u64, slots: &[Slot], fill: Fill) -> Chunks {
    let per = if fill == Fill::Even {
        let pieces = slots.len().div_ceil(CHUNK_RECORDS).max(1);
        slots.len().div_ceil(pieces)
    } else {
        CHUNK_RECORDS
    };
    let mut out = Vec::with_capacity(slots.len().div_ceil(per.max(1)));
    let mut i = 0;
    while i < slots.len() {
        let key = if out.is_empty() {
            first_key.min(slots[i].ts)
        } else {
            slots[i].ts
        };
        let mut v = Vec::with_capacity(16 + 4 * per.min(slots.len() - i));
        v.push(0); // the count, patched below (one byte: CHUNK_RECORDS < 128)
        let mut prev = Prev::start(key);
        let mut n = 0u8;
        while i < slots.len() && usize::from(n) < per && v.len() < CHUNK_BYTES {
            encode_slot(&mut v, &mut prev, &slots[i]);
            n += 1;
            i += 1;
        }
        v[0] = n;
        out.push((key, v));
    }
    out
}

/// Reads the records of one chunk in order.
pub struct ChunkReader<'a> {
    r: Reader<'a>,
    left: u64,
    first: bool,
    prev: Prev,
    /// Frame length of the record just read (for the next one's offset).
    frame_len: u64,
}

/// Encoded chunks: (chunk key, value) pairs, in key order.
pub type Chunks = Vec<(u64, Vec<u8>)>;

/// A field that overflows its type: the chunk is damaged.
const OVERFLOW: DecodeError = DecodeError::Garbage("a chunk field overflows");

/// A record that repeats every field of the one before it.
const ALL_SAME: u8 = SAME_STEP | CONTIGUOUS | SAME_HEAD | SAME_SIZE | SAME_ATTRS;

impl<'a> ChunkReader<'a> {
    pub fn new(key: u64, value: &'a [u8]) -> Result<ChunkReader<'a>, DecodeError> {
        let mut r = Reader::new(value);
        let left = r.varint()?;
        Ok(ChunkReader {
            r,
            left,
            first: true,
            prev: Prev::start(key),
            frame_len: 0,
        })
    }

    /// Records not read yet.
    pub fn left(&self) -> u64 {
        self.left
    }

    /// The next record, `None` after the last (then the value must be used up).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Slot>, DecodeError> {
        Ok(if self.advance()? {
            Some(self.current())
        } else {
            None
        })
    }

    /// The first record at or after `ts`; the records before it are skipped without being
    /// built (a run of records that repeat everything costs a byte compare each).
    pub fn seek(&mut self, ts: u64) -> Result<Option<Slot>, DecodeError> {
        loop {
            if !self.first && self.prev.step > 0 {
                let p = &mut self.prev;
                while self.left > 0 && self.r.buf.get(self.r.pos) == Some(&ALL_SAME) {
                    let next = p.ts.checked_add(p.step).ok_or(OVERFLOW)?;
                    if next >= ts {
                        break;
                    }
                    p.ts = next;
                    p.end = p.end.wrapping_add(self.frame_len);
                    self.r.pos += 1;
                    self.left -= 1;
                }
            }
            if !self.advance()? {
                return Ok(None);
            }
            if self.prev.ts >= ts {
                return Ok(Some(self.current()));
            }
        }
    }

    /// Reads past the last record (checking the value is used up).
    pub fn skip_to_end(&mut self) -> Result<(), DecodeError> {
        while self.seek(u64::MAX)?.is_some() {}
        Ok(())
    }

    /// The record just read.
    fn current(&self) -> Slot {
        let p = &self.prev;
        Slot {
            ts: p.ts,
            block_id: p.block,
            offset: p.end.wrapping_sub(self.frame_len),
            frame_len: self.frame_len,
            stored: p.stored,
            size: p.size,
            zstd: p.head & 1 == 1,
            // Set by the first record (which may not say SAME_ATTRS) and kept after.
            attrs: p.meta.clone().unwrap_or(AttrsRef::Id(0)),
        }
    }

    /// Reads the next record into `prev`; false after the last.
    fn advance(&mut self) -> Result<bool, DecodeError> {
        if self.left == 0 {
            return if self.r.pos == self.r.buf.len() {
                Ok(false)
            } else {
                Err(DecodeError::Garbage("bytes after a chunk's last record"))
            };
        }
        self.left -= 1;
        let r = &mut self.r;
        let p = &mut self.prev;
        let flags = r.u8()?;
        if flags & !KNOWN_FLAGS != 0 || (self.first && flags & SAME_ATTRS != 0) {
            return Err(DecodeError::Garbage("unknown chunk record flags"));
        }
        let delta = if flags & SAME_STEP != 0 {
            p.step
        } else {
            r.varint()?
        };
        if delta == 0 && !self.first {
            return Err(DecodeError::Garbage("timestamps do not increase")); // strictly, in a chunk
        }
        self.first = false;
        let ts = p.ts.checked_add(delta).ok_or(OVERFLOW)?;
        let (block_id, offset) = if flags & CONTIGUOUS != 0 {
            (p.block, p.end)
        } else {
            let block = p.block.wrapping_add(unzigzag(r.varint()?) as u64);
            let base = if block == p.block { p.end } else { 0 };
            (block, base.wrapping_add(unzigzag(r.varint()?) as u64))
        };
        let head = if flags & SAME_HEAD != 0 {
            p.head
        } else {
            r.varint()?
        };
        let (size, stored) = if flags & SAME_SIZE != 0 {
            (p.size, p.stored)
        } else {
            let size = r.varint()?;
            let stored = if head & 1 == 1 { r.varint()? } else { size };
            (size, stored)
        };
        let frame_len = (head >> 1).checked_add(stored).ok_or(OVERFLOW)?;
        if flags & SAME_ATTRS == 0 {
            p.meta = Some(match r.varint()? {
                0 => AttrsRef::Inline(Arc::new(Attrs::decode(r)?)),
                id => AttrsRef::Id(u32::try_from(id - 1).map_err(|_| OVERFLOW)?),
            });
        }
        p.ts = ts;
        p.step = delta;
        p.block = block_id;
        p.end = offset.wrapping_add(frame_len);
        p.head = head;
        p.size = size;
        p.stored = stored;
        self.frame_len = frame_len;
        Ok(true)
    }
}

/// Where a chunk ends: its record count and the state its last record left, which is all
/// an append encodes against. [`chunk_end`] reads it from the value; an append returns the
/// end of the chunk it leaves last, so the index can keep it between commits
/// (`Index::apply_changes`) and the next append to that chunk decodes nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkEnd {
    prev: Prev,
    count: u64,
}

/// Reads a chunk to its end (checking that the value is used up).
pub fn chunk_end(key: u64, value: &[u8]) -> Result<ChunkEnd, DecodeError> {
    let mut rd = ChunkReader::new(key, value)?;
    let count = rd.left();
    rd.skip_to_end()?;
    Ok(ChunkEnd {
        prev: rd.prev,
        count,
    })
}

/// Appends sorted records, all newer than the chunk's records, to the chunk `(key,
/// value)`: the chunk's new value (unless it was full), then new chunks after it, each
/// filled up. The old records are read only to their end ([`chunk_end`]: a record that
/// repeats everything costs a byte compare).
///
/// `Ok(None)` when the records are not all newer than the chunk's (the caller merges).
/// (The index appends through [`append_at_end`], with the end it kept.)
#[cfg(test)]
pub fn append_chunks(
    key: u64,
    value: &[u8],
    slots: &[Slot],
) -> Result<Option<Chunks>, DecodeError> {
    let end = chunk_end(key, value)?;
    Ok(append_at_end(key, value.to_vec(), &end, slots)?.map(|(chunks, _)| chunks))
}

/// [`append_chunks`] given the chunk's end (as [`chunk_end`] reads it from `value`, which
/// the caller vouches for) and the chunk's value as a buffer to extend; also returns the
/// end of the last chunk it returns (`None` when it returns none: nothing to append).
pub fn append_at_end(
    key: u64,
    mut value: Vec<u8>,
    end: &ChunkEnd,
    slots: &[Slot],
) -> Result<Option<(Chunks, Option<ChunkEnd>)>, DecodeError> {
    let count = end.count;
    if slots
        .first()
        .is_some_and(|s| s.ts <= end.prev.ts && count > 0)
    {
        return Ok(None); // not an append: the caller merges instead
    }
    let mut prev = end.prev.clone();
    let mut n = count;
    let mut i = 0;
    // A count of one byte (as this encoder writes) can be patched in place.
    if value.first() == Some(&(count as u8)) && count < CHUNK_RECORDS as u64 {
        value.reserve(2 * slots.len().min(CHUNK_RECORDS));
        while i < slots.len() && n < CHUNK_RECORDS as u64 && value.len() < CHUNK_BYTES {
            encode_slot(&mut value, &mut prev, &slots[i]);
            n += 1;
            i += 1;
        }
        value[0] = n as u8;
    }
    let mut out = Vec::with_capacity(1 + (slots.len() - i).div_ceil(CHUNK_RECORDS));
    let mut last_end = None;
    if n > count {
        out.push((key, value)); // else the chunk was full and stays as it is
        last_end = Some(ChunkEnd { prev, count: n });
    }
    if i < slots.len() {
        out.extend(encode_chunks(slots[i].ts, &slots[i..], Fill::Packed));
        // A new chunk: rare (once per CHUNK_RECORDS appends) and short, read back.
        last_end = match out.last() {
            Some((k, v)) => Some(chunk_end(*k, v)?),
            None => None,
        };
    }
    Ok(Some((out, last_end)))
}

/// Every record of a chunk.
pub fn decode_chunk(key: u64, value: &[u8]) -> Result<Vec<Slot>, DecodeError> {
    let mut rd = ChunkReader::new(key, value)?;
    let mut out = Vec::with_capacity(rd.left().min(CHUNK_RECORDS as u64) as usize);
    while let Some(s) = rd.next()? {
        out.push(s);
    }
    Ok(out)
}

/// The record count of a chunk value, without decoding it.
pub fn chunk_count(value: &[u8]) -> Result<u64, DecodeError> {
    Reader::new(value).varint()
}

/// Applies sorted, unique changes (`Some`: put, replacing a record at the same timestamp;
/// `None`: delete) to sorted records.
pub fn merge(slots: &mut Vec<Slot>, changes: impl IntoIterator<Item = (u64, Option<Slot>)>) {
    let mut changes = changes.into_iter().peekable();
    // The common case: appends after the last record.
    if let Some((ts, _)) = changes.peek() {
        if slots.last().is_none_or(|l| l.ts < *ts) {
            slots.extend(changes.filter_map(|(_, s)| s));
            return;
        }
    }
    let old = std::mem::take(slots);
    let mut old = old.into_iter().peekable();
    loop {
        match (old.peek(), changes.peek()) {
            (Some(o), Some((ts, _))) if o.ts < *ts => slots.extend(old.next()),
            (Some(o), Some((ts, _))) => {
                if o.ts == *ts {
                    old.next();
                }
                if let Some((_, Some(s))) = changes.next() {
                    slots.push(s);
                }
            }
            (Some(_), None) => slots.extend(old.next()),
            (None, Some(_)) => {
                if let Some((_, Some(s))) = changes.next() {
                    slots.push(s);
                }
            }
            (None, None) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(ct: &str, labels: &[(&str, &str)]) -> Arc<Attrs> {
        Arc::new(Attrs {
            content_type: ct.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
    }

    /// Records of a camera: 1 KiB frames every 1000 µs, back to back in block 7.
    fn regular(n: u64, t0: u64) -> Vec<Slot> {
        (0..n)
            .map(|i| Slot {
                ts: t0 + i * 1000,
                block_id: 7,
                offset: 40 + i * 1040,
                frame_len: 1040,
                stored: 1024,
                size: 1024,
                zstd: false,
                attrs: AttrsRef::Id((i % 3) as u32),
            })
            .collect()
    }

    fn round_trip(slots: &[Slot], fill: Fill) -> Vec<(u64, Vec<u8>)> {
        let chunks = encode_chunks(slots.first().map_or(0, |s| s.ts), slots, fill);
        let mut back = Vec::new();
        let mut last_key = None;
        for (k, v) in &chunks {
            assert!(last_key < Some(*k), "keys increase");
            last_key = Some(*k);
            let got = decode_chunk(*k, v).unwrap();
            assert!(!got.is_empty() && got.len() <= CHUNK_RECORDS);
            assert_eq!(chunk_count(v), Ok(got.len() as u64));
            assert!(got.iter().all(|s| s.ts >= *k));
            back.extend(got);
        }
        assert_eq!(back, slots);
        chunks
    }

    #[test]
    fn regular_records_cost_about_a_byte() {
        let mut slots = regular(64, 1_700_000_000_000_000);
        for s in &mut slots {
            s.attrs = AttrsRef::Id(0);
        }
        let chunks = round_trip(&slots, Fill::Packed);
        assert_eq!(chunks.len(), 1);
        // count, first record (flags, block, offset, head, size, attrs), second record's
        // step, then one flags byte per record.
        assert!(chunks[0].1.len() <= 64 + 16, "{} bytes", chunks[0].1.len());
    }

    #[test]
    fn irregular_records_round_trip() {
        let m = meta("image/png", &[("a", "b"), ("camera", "front")]);
        let mut slots = Vec::new();
        let mut ts = 5u64;
        for i in 0..300u64 {
            ts += 1 + (i * 7919) % 5000;
            let zstd = i % 3 == 0;
            slots.push(Slot {
                ts,
                block_id: 1 + i / 50 + (i % 7 == 0) as u64 * 1000,
                offset: (i * 104_729) % 1_000_000,
                frame_len: 2000 + i,
                stored: if zstd { 1000 + i } else { 1990 + i },
                size: 1990 + i,
                zstd,
                attrs: match i % 4 {
                    0 => AttrsRef::Inline(m.clone()),
                    1 => AttrsRef::Id(u32::MAX - 1),
                    2 => AttrsRef::Inline(meta(crate::DEFAULT_CONTENT_TYPE, &[])),
                    _ => AttrsRef::Id(0),
                },
            });
        }
        let chunks = round_trip(&slots, Fill::Packed);
        assert!(chunks.len() >= 300 / CHUNK_RECORDS);
        round_trip(&slots, Fill::Even);
        // A big timestamp and block ids going down round-trip too.
        let mut s2 = regular(3, u64::MAX - 10_000);
        s2[1].block_id = 2;
        s2[2].offset = 0;
        round_trip(&s2, Fill::Packed);
    }

    #[test]
    fn byte_cap_splits_big_records() {
        let big = meta("x/y", &[("k", &"v".repeat(400))]);
        let slots: Vec<Slot> = regular(10, 0)
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                // Inline attrs that change every record: ~410 bytes each.
                s.attrs = AttrsRef::Inline(if i % 2 == 0 {
                    big.clone()
                } else {
                    meta("x/z", &[("k", &"w".repeat(400))])
                });
                s
            })
            .collect();
        let chunks = round_trip(&slots, Fill::Packed);
        assert!(chunks.len() >= 3, "{} chunks", chunks.len());
        assert!(chunks.iter().all(|(_, v)| v.len() < CHUNK_BYTES + 500));
    }

    #[test]
    fn split_fills_or_spreads() {
        let slots = regular(130, 1000);
        let filled = round_trip(&slots, Fill::Packed);
        let counts: Vec<u64> = filled
            .iter()
            .map(|(_, v)| chunk_count(v).unwrap())
            .collect();
        assert_eq!(counts, [64, 64, 2]);
        let even = round_trip(&slots, Fill::Even);
        let counts: Vec<u64> = even.iter().map(|(_, v)| chunk_count(v).unwrap()).collect();
        assert_eq!(counts, [44, 44, 42]);
        assert_eq!(even[1].0, slots[44].ts);
        // A first key below the first record is kept.
        let chunks = encode_chunks(500, &slots, Fill::Packed);
        assert_eq!(chunks[0].0, 500);
        assert_eq!(decode_chunk(500, &chunks[0].1).unwrap()[0], slots[0]);
    }

    #[test]
    fn merge_inserts_replaces_and_deletes() {
        let all = regular(10, 0);
        let base: Vec<Slot> = all.iter().step_by(2).cloned().collect(); // 0, 2000, ...
                                                                        // Out-of-order insert in the middle, before the first, after the last.
        let mut s = base.clone();
        merge(
            &mut s,
            [
                (0, None),
                (1000, Some(all[1].clone())),
                (5000, Some(all[5].clone())),
                (9000, Some(all[9].clone())),
            ],
        );
        let ts: Vec<u64> = s.iter().map(|s| s.ts).collect();
        assert_eq!(ts, [1000, 2000, 4000, 5000, 6000, 8000, 9000]);
        let chunks = round_trip(&s, Fill::Packed);
        assert_eq!(chunks.len(), 1);
        // Replace: a later copy of a record (label update) takes its place.
        let mut s = base.clone();
        let mut newer = base[2].clone();
        newer.block_id = 8;
        newer.offset = 40;
        newer.attrs = AttrsRef::Inline(meta("a/b", &[("x", "y")]));
        merge(&mut s, [(4000, Some(newer.clone()))]);
        assert_eq!(s.len(), base.len());
        assert_eq!(s[2], newer);
        round_trip(&s, Fill::Packed);
        // Delete first, middle, last; deleting a missing record does nothing.
        for (del, left) in [
            (0u64, vec![2000u64, 4000, 6000, 8000]),
            (4000, vec![0, 2000, 6000, 8000]),
            (8000, vec![0, 2000, 4000, 6000]),
            (3000, vec![0, 2000, 4000, 6000, 8000]),
        ] {
            let mut s = base.clone();
            merge(&mut s, [(del, None)]);
            assert_eq!(s.iter().map(|s| s.ts).collect::<Vec<_>>(), left);
            // Re-encoded under the old key (which is at most the first record's ts).
            let chunks = encode_chunks(0, &s, Fill::Even);
            assert_eq!(chunks.len(), 1);
            assert_eq!(chunks[0].0, 0);
            assert_eq!(decode_chunk(0, &chunks[0].1).unwrap(), s);
        }
        // Appends take the fast path.
        let mut s = base.clone();
        merge(&mut s, [(9000, Some(all[9].clone())), (9500, None)]);
        assert_eq!(s.len(), base.len() + 1);
        let mut s = Vec::new();
        merge(&mut s, [(3, None)]);
        assert!(s.is_empty());
    }

    #[test]
    fn appends_equal_a_fresh_encoding() {
        let slots = regular(200, 1000);
        for (have, add) in [
            (1usize, 1usize),
            (10, 1),
            (63, 1),
            (64, 1),
            (30, 100),
            (5, 195),
        ] {
            let (k, v) = encode_chunks(1000, &slots[..have], Fill::Packed).remove(0);
            let got = append_chunks(k, &v, &slots[have..have + add])
                .unwrap()
                .unwrap();
            let mut want = encode_chunks(1000, &slots[..have + add], Fill::Packed);
            if have == CHUNK_RECORDS {
                want.remove(0); // a full chunk is not written again
            }
            assert_eq!(got, want, "{have}+{add}");
        }
        // Not an append: refused.
        let (k, v) = encode_chunks(1000, &slots[5..10], Fill::Packed).remove(0);
        assert_eq!(append_chunks(k, &v, &slots[..1]), Ok(None));
    }

    #[test]
    fn an_append_ends_where_reading_its_chunk_back_ends() {
        // Irregular records (steps, blocks, sizes, compression, inline attrs) appended one
        // to three at a time, each append continuing from the end the one before returned:
        // the bytes equal a fresh encoding, and every returned end equals the end read
        // back from its chunk.
        let m = meta("a/b", &[("k", "v")]);
        let mut slots = regular(300, 1000);
        for (i, s) in slots.iter_mut().enumerate() {
            s.ts += (i as u64 * 7919) % 997;
            if i.is_multiple_of(5) {
                (s.zstd, s.stored) = (true, 300 + i as u64);
                s.frame_len = s.stored + 16;
            }
            if i.is_multiple_of(7) {
                s.block_id += 1;
            }
            if i.is_multiple_of(11) {
                s.attrs = AttrsRef::Inline(m.clone());
            }
        }
        let (mut key, mut value) = encode_chunks(1000, &slots[..1], Fill::Packed).remove(0);
        let mut end = chunk_end(key, &value).unwrap();
        let mut all: Chunks = Vec::new();
        let mut i = 1;
        while i < slots.len() {
            let add = (1 + i % 3).min(slots.len() - i);
            let (chunks, e) = append_at_end(key, value.clone(), &end, &slots[i..i + add])
                .unwrap()
                .unwrap();
            let (k, v) = chunks.last().cloned().unwrap();
            let e = e.unwrap();
            assert_eq!(chunk_end(k, &v).unwrap(), e, "after record {i}");
            for c in chunks {
                match all.last_mut() {
                    Some(l) if l.0 == c.0 => *l = c,
                    _ => all.push(c),
                }
            }
            (key, value, end) = (k, v, e);
            i += add;
        }
        if all.first().map(|c| c.0) != Some(1000) {
            all.insert(0, encode_chunks(1000, &slots[..1], Fill::Packed).remove(0));
        }
        assert_eq!(all, encode_chunks(1000, &slots, Fill::Packed));
    }

    #[test]
    fn seek_finds_what_a_scan_finds() {
        let mut slots = regular(64, 1000);
        // Irregular records among regular runs.
        (slots[10].size, slots[10].stored, slots[10].frame_len) = (5, 5, 21);
        slots[30].attrs = AttrsRef::Inline(meta("a/b", &[("k", "v")]));
        slots[31].ts += 1;
        slots[50].offset += 1;
        let (k, v) = encode_chunks(1000, &slots, Fill::Packed).remove(0);
        for probe in [
            0,
            1000,
            1001,
            10_999,
            11_000,
            31_001,
            31_002,
            63_000,
            63_001,
            u64::MAX,
        ] {
            let want = slots.iter().find(|s| s.ts >= probe).cloned();
            let mut rd = ChunkReader::new(k, &v).unwrap();
            assert_eq!(rd.seek(probe).unwrap(), want, "seek {probe}");
            // The reader goes on from there.
            let i = slots.iter().position(|s| s.ts >= probe).unwrap_or(64);
            assert_eq!(rd.next().unwrap(), slots.get(i + 1).cloned());
        }
    }

    #[test]
    fn damaged_chunks_are_errors_not_panics() {
        let slots = regular(20, 1);
        let (k, v) = encode_chunks(1, &slots, Fill::Packed).remove(0);
        for cut in 0..v.len() {
            assert!(
                matches!(decode_chunk(k, &v[..cut]), Err(DecodeError::Short)),
                "cut at {cut}"
            );
        }
        let mut extra = v.clone();
        extra.push(0);
        assert!(decode_chunk(k, &extra).is_err());
        let mut bad = v.clone();
        bad[1] = 0xff; // unknown flags
        assert!(decode_chunk(k, &bad).is_err());
        let mut bad = v.clone();
        bad[1] |= SAME_ATTRS; // the first record has no previous attrs
        assert!(decode_chunk(k, &bad).is_err());
        // Random bytes never panic.
        use rand_xoshiro::rand_core::{RngCore, SeedableRng};
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0x2545_f491_4f6c_dd1d);
        for _ in 0..2000 {
            let mut bytes = vec![0u8; (rng.next_u64() % 40) as usize];
            rng.fill_bytes(&mut bytes);
            let _ = decode_chunk(rng.next_u64(), &bytes);
        }
    }
}
