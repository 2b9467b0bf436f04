//! Payload bytes: what each record holds, and a check of bytes read back that costs the
//! client as little as a `memcmp`.
//!
//! A record's payload is a 16-byte tag (its timestamp and its key, little-endian) followed by
//! a window of a seeded random **pool** (one pool per seed and record size, `size + 4 KiB`
//! long), starting at `key % 4 KiB`. So every payload is distinct (the tag names the record;
//! the window start moves with the key), random (nothing compresses), and a reader checks it
//! by comparing against the pool in place: no generator runs on the read path, and a check
//! streams over the pieces a response arrives in without copying them. Earlier versions
//! generated every payload with a xorshift generator and compared 32 bytes at a time; the
//! client then spent more CPU per byte checking a range read than the fastest server spent
//! serving it (see `docs/benchmarking.md`). The pool comes from the workload's seeded RNG
//! (xoshiro256++, `rand_xoshiro`; before issue 16 four hand-written xorshift lanes, so the
//! bytes of a seed differ from older versions' — every target still gets the same bytes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Result;

use rand_xoshiro::rand_core::RngCore;

use crate::workload::{entry_name, mismatch, mix, rng};

/// Bytes of tag at the start of every payload.
pub const TAG_LEN: usize = 16;
/// Extra pool bytes past the record size: the range of window starts.
const SLACK: u64 = 4096;

/// Pools by (seed, size).
type Pools = Mutex<HashMap<(u64, u64), Arc<[u8]>>>;

/// The pool of random bytes of one (seed, size), built once and shared.
fn pool(seed: u64, size: u64) -> Arc<[u8]> {
    static POOLS: OnceLock<Pools> = OnceLock::new();
    let pools = POOLS.get_or_init(Default::default);
    let mut map = pools.lock().unwrap_or_else(|e| e.into_inner());
    map.entry((seed, size))
        .or_insert_with(|| {
            let mut out = vec![0u8; (size + SLACK) as usize];
            rng(seed ^ mix(size) ^ 0x9001).fill_bytes(&mut out);
            out.into()
        })
        .clone()
}

/// The pool of one (seed, size): every payload of that size is a tag and a window of it.
pub fn pool_bytes(seed: u64, size: u64) -> Arc<[u8]> {
    pool(seed, size)
}

/// The bytes one record must hold: a tag, then a window of the pool.
#[derive(Clone)]
pub struct Expected {
    tag: [u8; TAG_LEN],
    pool: Arc<[u8]>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expected")
            .field("len", &self.len)
            .field("start", &self.start)
            .finish()
    }
}

impl Expected {
    /// The payload of the record with `key` and timestamp `ts`, `size` bytes long.
    pub fn new(seed: u64, size: u64, key: u64, ts: u64) -> Expected {
        let mut tag = [0u8; TAG_LEN];
        tag[..8].copy_from_slice(&ts.to_le_bytes());
        tag[8..].copy_from_slice(&key.to_le_bytes());
        Expected {
            tag,
            pool: pool(seed, size),
            start: (key % SLACK) as usize,
            len: size as usize,
        }
    }

    /// Payload length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The payload as its 16-byte tag (only its first `min(len, 16)` bytes count) and the
    /// range of the pool ([`pool_bytes`]) that follows it: what the `limit` server sends
    /// from its copy of the pool.
    pub fn tag_and_window(&self) -> ([u8; TAG_LEN], std::ops::Range<usize>) {
        let head = self.len.min(TAG_LEN);
        (self.tag, self.start + head..self.start + self.len)
    }

    /// The whole payload, for a writer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        let head = self.len.min(TAG_LEN);
        out.extend_from_slice(&self.tag[..head]);
        out.extend_from_slice(&self.pool[self.start + head..self.start + self.len]);
        out
    }

    /// Whether `piece` equals the payload's bytes at `pos..pos + piece.len()` (false when it
    /// runs past the end).
    pub fn matches_at(&self, pos: usize, piece: &[u8]) -> bool {
        let Some(end) = pos.checked_add(piece.len()) else {
            return false;
        };
        if end > self.len {
            return false;
        }
        let mut piece = piece;
        let mut pos = pos;
        if pos < TAG_LEN {
            let n = piece.len().min(TAG_LEN - pos);
            if piece[..n] != self.tag[pos..pos + n] {
                return false;
            }
            piece = &piece[n..];
            pos += n;
        }
        piece == &self.pool[self.start + pos..self.start + pos + piece.len()]
    }

    /// Where `piece`, read at `pos`, first departs from the payload: the position of the
    /// first differing byte, or of the first byte past the payload's end; `None` if it
    /// matches.
    pub fn first_difference(&self, pos: usize, piece: &[u8]) -> Option<usize> {
        if self.matches_at(pos, piece) {
            return None;
        }
        let at = piece
            .iter()
            .enumerate()
            .position(|(i, b)| !self.matches_at(pos + i, std::slice::from_ref(b)));
        Some(pos + at.unwrap_or(piece.len()))
    }
}

/// Checks one payload that arrives in pieces, without copying them.
#[derive(Debug)]
pub struct StreamCheck {
    expected: Expected,
    pos: usize,
    /// The record's entry and timestamp: its name is only formatted for an error.
    entry: u32,
    ts: u64,
}

impl StreamCheck {
    /// A check of `expected`, the payload of record `ts` of `entry`.
    pub fn new(expected: Expected, entry: u32, ts: u64) -> StreamCheck {
        StreamCheck {
            expected,
            pos: 0,
            entry,
            ts,
        }
    }

    /// The record, as error messages name it.
    fn what(&self) -> String {
        format!(
            "{} @ {}",
            entry_name(self.expected.len as u64, self.entry),
            self.ts
        )
    }

    /// Bytes still expected.
    pub fn remaining(&self) -> usize {
        self.expected.len - self.pos
    }

    /// Checks the next piece of the payload.
    pub fn feed(&mut self, piece: &[u8]) -> Result<()> {
        if let Some(near) = self.expected.first_difference(self.pos, piece) {
            return Err(mismatch(format!(
                "{} differs from the written payload at byte {near} (or is longer than the {} \
                 bytes written)",
                self.what(),
                self.expected.len
            )));
        }
        self.pos += piece.len();
        Ok(())
    }

    /// Ends the check: every byte must have arrived.
    pub fn finish(self) -> Result<()> {
        if self.pos != self.expected.len {
            return Err(mismatch(format!(
                "{} has {} bytes, {} were written",
                self.what(),
                self.pos,
                self.expected.len
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_of_any_split_check_and_a_flipped_byte_fails() -> Result<()> {
        let e = Expected::new(1, 1000, 77, 5);
        let bytes = e.to_vec();
        assert_eq!(bytes.len(), 1000);
        assert_eq!(&bytes[..8], &5u64.to_le_bytes());
        for split in [1, 7, 16, 17, 500, 999] {
            let mut c = StreamCheck::new(e.clone(), 0, 5);
            c.feed(&bytes[..split])?;
            c.feed(&bytes[split..])?;
            c.finish()?;
        }
        for flip in [0, 15, 16, 999] {
            let mut bad = bytes.clone();
            bad[flip] ^= 1;
            let mut c = StreamCheck::new(e.clone(), 0, 5);
            assert!(c.feed(&bad).is_err(), "flip at {flip} passed");
            assert_eq!(e.first_difference(0, &bad), Some(flip));
        }
        let mut short = StreamCheck::new(e.clone(), 0, 5);
        short.feed(&bytes[..999])?;
        assert!(short.finish().is_err());
        let mut long = StreamCheck::new(e, 0, 5);
        long.feed(&bytes)?;
        assert!(long.feed(b"x").is_err());
        Ok(())
    }

    #[test]
    fn records_differ_from_each_other_and_tiny_sizes_work() {
        let a = Expected::new(1, 64, 1, 10).to_vec();
        let b = Expected::new(1, 64, 2, 10).to_vec();
        assert_ne!(a, b);
        assert_ne!(
            a[TAG_LEN..],
            b[TAG_LEN..],
            "windows start at different offsets"
        );
        let tiny = Expected::new(1, 3, 9, 10);
        assert_eq!(tiny.to_vec(), 10u64.to_le_bytes()[..3].to_vec());
        assert!(tiny.matches_at(0, &10u64.to_le_bytes()[..3]));
        assert!(Expected::new(1, 0, 9, 10).to_vec().is_empty());
    }
}
