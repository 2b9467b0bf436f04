//! The record frame ("Record frame" in `docs/storage-format.md`): a head, then the payload.
//!
//! | field | encoding |
//! |---|---|
//! | marker | `0xA5` |
//! | flags | u8: bit 0 zstd, bit 1 deleted |
//! | CRC32C | u32 LE of every byte after it to the end of the payload |
//! | timestamp | varint zigzag(ts − block base timestamp) |
//! | stored length S | varint (padded for a streamed write) |
//! | original length R | varint, only if compressed (padded likewise) |
//! | content type | varint length + ASCII (empty = the default) |
//! | labels | varint length L + L bytes: varint count, then key and value with varint lengths |
//! | payload | S bytes |
//!
//! The labels and content type encodings are shared with the index's `metas` values
//! ([`Attrs`](super::Attrs)) and the heads sidecar.

use super::bytes::{put_padded_varint, put_varint, unzigzag, zigzag, PADDED_VARINT};
use super::{DecodeError, Reader};
use crate::record::Labels;

pub const FRAME_MAGIC: u8 = 0xA5;
pub const FLAG_ZSTD: u8 = 0x01;
pub const FLAG_DELETED: u8 = 0x02;
/// Bytes before the CRC-covered part of a frame: magic, flags, CRC32C.
pub const FRAME_PREFIX: usize = 6;
/// The largest payload a frame may claim (256 TiB): anything beyond is garbage.
pub const MAX_RECORD_LEN: u64 = 1 << 48;

/// Labels as: varint count, then per label varint key length, key, varint value length, value.
pub fn encode_labels(out: &mut Vec<u8>, labels: &Labels) {
    put_varint(out, labels.len() as u64);
    for (k, v) in labels {
        put_varint(out, k.len() as u64);
        out.extend_from_slice(k.as_bytes());
        put_varint(out, v.len() as u64);
        out.extend_from_slice(v.as_bytes());
    }
}

pub fn decode_labels(r: &mut Reader<'_>) -> Result<Labels, DecodeError> {
    let n = r.varint()?;
    let mut labels = Labels::new();
    for _ in 0..n {
        let kl = r.length()?;
        let k = r.str(kl)?.to_string();
        let vl = r.length()?;
        let v = r.str(vl)?.to_string();
        labels.insert(k, v);
    }
    Ok(labels)
}

/// The content type as stored: empty means the default.
pub fn stored_content_type(ct: &str) -> &str {
    if ct == crate::DEFAULT_CONTENT_TYPE {
        ""
    } else {
        ct
    }
}

pub fn loaded_content_type(ct: &str) -> String {
    if ct.is_empty() {
        crate::DEFAULT_CONTENT_TYPE.to_string()
    } else {
        ct.to_string()
    }
}

/// The parsed head of a record frame (everything before the payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameHead {
    pub flags: u8,
    pub crc: u32,
    pub ts: u64,
    pub stored_len: u64,
    pub raw_len: u64,
    pub content_type: String,
    pub labels: Labels,
    /// Bytes from the frame start to the first payload byte.
    pub head_len: usize,
}

impl FrameHead {
    pub fn frame_len(&self) -> u64 {
        (self.head_len as u64).saturating_add(self.stored_len)
    }
}

/// Builds the head of a frame. `padded` reserves fixed-width length fields for a streamed
/// write whose lengths and CRC are patched once the payload has been written.
pub struct HeadSpec<'a> {
    pub flags: u8,
    pub ts: u64,
    pub base_ts: u64,
    pub stored_len: u64,
    pub raw_len: u64,
    pub content_type: &'a str,
    pub labels: &'a Labels,
    pub padded: bool,
}

/// A frame head built by [`encode_head`].
pub struct EncodedHead {
    /// The head bytes, CRC field zero.
    pub bytes: Vec<u8>,
    /// The offset of the stored-length field (patched by a padded, streamed write).
    pub len_at: usize,
}

/// Returns the head bytes (CRC field zero) and the offset of the stored-length field.
pub fn encode_head(spec: &HeadSpec<'_>) -> EncodedHead {
    let mut bytes = Vec::with_capacity(32 + spec.content_type.len());
    let len_at = encode_head_into(&mut bytes, spec);
    EncodedHead { bytes, len_at }
}

/// [`encode_head`] into a buffer the caller reuses (cleared first): no allocation per
/// record once it has grown. Returns the offset of the stored-length field.
pub fn encode_head_into(h: &mut Vec<u8>, spec: &HeadSpec<'_>) -> usize {
    let len_at = encode_head_lengths(h, spec);
    encode_head_attrs(h, spec.content_type, spec.labels);
    len_at
}

/// [`encode_head_into`] with the head's content type and labels given already encoded by
/// [`encode_head_attrs`] (`spec.content_type` and `spec.labels` are not read): records
/// that share them encode them once.
pub fn encode_head_with_attrs(h: &mut Vec<u8>, spec: &HeadSpec<'_>, attrs: &[u8]) -> usize {
    let len_at = encode_head_lengths(h, spec);
    h.extend_from_slice(attrs);
    len_at
}

/// The end of a frame head: its content type and labels.
pub fn encode_head_attrs(h: &mut Vec<u8>, content_type: &str, labels: &Labels) {
    let ct = stored_content_type(content_type);
    put_varint(h, ct.len() as u64);
    h.extend_from_slice(ct.as_bytes());
    if labels.is_empty() {
        put_varint(h, 0);
    } else {
        // The labels' length prefix is computed, not measured on a copy: they are encoded
        // once, in place.
        put_varint(h, labels_len(labels) as u64);
        encode_labels(h, labels);
    }
}

/// The start of a frame head (into `h`, cleared first): everything up to its content type.
/// Returns the offset of the stored-length field.
fn encode_head_lengths(h: &mut Vec<u8>, spec: &HeadSpec<'_>) -> usize {
    h.clear();
    h.push(FRAME_MAGIC);
    h.push(spec.flags);
    h.extend_from_slice(&[0; 4]);
    put_varint(h, zigzag(spec.ts.wrapping_sub(spec.base_ts) as i64));
    let len_at = h.len();
    if spec.padded {
        h.extend_from_slice(&[0; PADDED_VARINT]);
        if spec.flags & FLAG_ZSTD != 0 {
            h.extend_from_slice(&[0; PADDED_VARINT]);
        }
        put_padded_varint(&mut h[len_at..len_at + PADDED_VARINT], spec.stored_len);
        if spec.flags & FLAG_ZSTD != 0 {
            put_padded_varint(
                &mut h[len_at + PADDED_VARINT..len_at + 2 * PADDED_VARINT],
                spec.raw_len,
            );
        }
    } else {
        put_varint(h, spec.stored_len);
        if spec.flags & FLAG_ZSTD != 0 {
            put_varint(h, spec.raw_len);
        }
    }
    len_at
}

/// Bytes [`encode_labels`] writes for `labels`.
fn labels_len(labels: &Labels) -> usize {
    let varint = |v: usize| (64 - (v as u64 | 1).leading_zeros() as usize).div_ceil(7);
    varint(labels.len())
        + labels
            .iter()
            .map(|(k, v)| varint(k.len()) + k.len() + varint(v.len()) + v.len())
            .sum::<usize>()
}

/// The fixed fields of a frame head, parsed without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadFields {
    pub flags: u8,
    pub crc: u32,
    pub ts: u64,
    pub stored_len: u64,
    pub raw_len: u64,
    pub head_len: usize,
}

/// Parses the fixed fields of a frame head and skips its content type and labels.
pub fn check_head(buf: &[u8], base_ts: u64) -> Result<HeadFields, DecodeError> {
    let (f, ct, lab) = split_head(buf, base_ts)?;
    let _ = (ct, lab);
    Ok(f)
}

/// Parses the head of a frame from `buf` (which may hold more or less than the frame).
pub fn decode_head(buf: &[u8], base_ts: u64) -> Result<FrameHead, DecodeError> {
    let (f, ct, lab) = split_head(buf, base_ts)?;
    let ct = std::str::from_utf8(ct).map_err(|_| DecodeError::Garbage("content type"))?;
    let labels = if lab.is_empty() {
        Labels::new()
    } else {
        decode_labels(&mut Reader::new(lab)).map_err(|_| DecodeError::Garbage("labels"))?
    };
    Ok(FrameHead {
        flags: f.flags,
        crc: f.crc,
        ts: f.ts,
        stored_len: f.stored_len,
        raw_len: f.raw_len,
        content_type: loaded_content_type(ct),
        labels,
        head_len: f.head_len,
    })
}

/// The fixed fields, the content type bytes and the label bytes of a frame head.
fn split_head(buf: &[u8], base_ts: u64) -> Result<(HeadFields, &[u8], &[u8]), DecodeError> {
    let mut r = Reader::new(buf);
    let magic = r.u8()?;
    if magic != FRAME_MAGIC {
        return Err(DecodeError::Garbage("bad frame marker"));
    }
    let flags = r.u8()?;
    if flags & !(FLAG_ZSTD | FLAG_DELETED) != 0 {
        return Err(DecodeError::Garbage("unknown flags"));
    }
    let crc = r.u32()?;
    let short_or = |r: &Reader<'_>, why| {
        if r.pos + PADDED_VARINT >= r.buf.len() {
            DecodeError::Short
        } else {
            DecodeError::Garbage(why)
        }
    };
    let dts = r.varint().map_err(|_| short_or(&r, "bad timestamp"))?;
    let ts = base_ts.wrapping_add(unzigzag(dts) as u64);
    let stored_len = r.varint().map_err(|_| short_or(&r, "bad length"))?;
    let raw_len = if flags & FLAG_ZSTD != 0 {
        r.varint().map_err(|_| short_or(&r, "bad length"))?
    } else {
        stored_len
    };
    // No record is anywhere near 2^48 bytes; a larger length is garbage, and rejecting
    // it here keeps every `offset + length` sum below from overflowing.
    if stored_len > MAX_RECORD_LEN || raw_len > MAX_RECORD_LEN {
        return Err(DecodeError::Garbage("impossible length"));
    }
    let ctl = r.varint().map_err(|_| short_or(&r, "bad content type"))? as usize;
    if ctl > 255 {
        return Err(DecodeError::Garbage("content type too long"));
    }
    let ct = r.bytes(ctl)?;
    let ll = r.varint().map_err(|_| short_or(&r, "bad labels"))? as usize;
    if ll > (64 << 20) {
        return Err(DecodeError::Garbage("labels too long"));
    }
    let lab = r.bytes(ll)?;
    let fields = HeadFields {
        flags,
        crc,
        ts,
        stored_len,
        raw_len,
        head_len: r.pos,
    };
    Ok((fields, ct, lab))
}

/// Sets the CRC field of `head` for a frame whose `stored` payload bytes (written apart
/// from the head) have the CRC32C `payload_crc`: the head's covered bytes, then the payload.
pub fn seal_head(head: &mut [u8], payload_crc: u32, stored: u64) {
    put_crc(head, combine_crc(head_bytes_crc(head), payload_crc, stored));
}

/// CRC32C of the bytes of a frame's head that the frame CRC covers (after the prefix).
pub fn head_bytes_crc(head: &[u8]) -> u32 {
    crc32c::crc32c(&head[FRAME_PREFIX..])
}

/// The frame CRC from its head's part ([`head_bytes_crc`]) and its `stored` payload
/// bytes' CRC32C.
pub fn combine_crc(head_crc: u32, payload_crc: u32, stored: u64) -> u32 {
    crate::crc::combine(head_crc, payload_crc, stored)
}

/// The frame CRC of a head and its stored payload, both in memory.
pub fn frame_crc_of(head: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(head_bytes_crc(head), payload)
}

/// Sets the CRC field of `head` for a frame whose stored payload is `pieces`, in order (a
/// payload in memory, however it is split): the head's covered bytes, then each piece.
///
/// The same CRC32C (CRC-32/ISCSI) as everywhere else, taken with the `crc-fast` crate
/// (carry-less multiply folding) rather than `crc32c`'s one `crc32` instruction per 8
/// bytes: every record written from memory pays it, and it was 5.5 % of the server's time
/// in a batch of 1 KiB records, where `crc-fast` takes 40 % of the time at 1 KiB and
/// 10 KiB (docs/benchmarks/batch-3-2026-11-26.md). Pinned against `crc32c` by
/// `seal_head_over_is_the_crc32c_of_the_frame`.
pub fn seal_head_over<'p>(head: &mut [u8], pieces: impl IntoIterator<Item = &'p [u8]>) {
    let mut crc = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    crc.update(head.get(FRAME_PREFIX..).unwrap_or_default());
    for p in pieces {
        crc.update(p);
    }
    // A 32-bit CRC: the digest's state has no bits above them.
    put_crc(head, crc.finalize() as u32);
}

fn put_crc(head: &mut [u8], crc: u32) {
    head[2..6].copy_from_slice(&crc.to_le_bytes());
}

/// CRC32C over a whole frame's covered bytes (head after the prefix, then payload).
pub fn frame_crc(frame: &[u8]) -> u32 {
    crc32c::crc32c(&frame[FRAME_PREFIX..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_head_over_is_the_crc32c_of_the_frame() {
        let data: Vec<u8> = (0..40_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let mut labels = Labels::new();
        labels.insert("cam".into(), "front".into());
        for len in [0usize, 1, 7, 63, 64, 255, 256, 1024, 1031, 10_240, 40_000] {
            let payload = &data[..len];
            let spec = HeadSpec {
                flags: 0,
                ts: 1_000 + len as u64,
                base_ts: 1_000,
                stored_len: len as u64,
                raw_len: len as u64,
                content_type: "application/octet-stream",
                labels: &labels,
                padded: false,
            };
            let mut head = encode_head(&spec).bytes;
            let want = frame_crc_of(&head, payload);
            // However the payload is split into pieces.
            for cuts in [
                vec![],
                vec![len / 2],
                vec![1.min(len), len / 3, len - len / 5],
            ] {
                let mut pieces = Vec::new();
                let mut at = 0;
                for c in cuts.iter().copied().chain([len]) {
                    let c = c.max(at);
                    pieces.push(&payload[at..c]);
                    at = c;
                }
                seal_head_over(&mut head, pieces.iter().copied());
                let mut frame = head.clone();
                frame.extend_from_slice(payload);
                assert_eq!(frame_crc(&frame), want, "{len} bytes in {cuts:?}");
                assert_eq!(head[2..6], want.to_le_bytes(), "{len} bytes in {cuts:?}");
            }
        }
    }

    #[test]
    fn labels_len_is_what_encode_labels_writes() {
        for (k, v) in [(0usize, 0usize), (1, 1), (127, 128), (300, 20_000)] {
            let mut labels = Labels::new();
            labels.insert("k".repeat(k.max(1)), "v".repeat(v));
            labels.insert("a".into(), String::new());
            let mut out = Vec::new();
            encode_labels(&mut out, &labels);
            assert_eq!(labels_len(&labels), out.len());
        }
    }

    #[test]
    fn head_round_trips() {
        let mut labels = Labels::new();
        labels.insert("cam".into(), "front".into());
        for padded in [false, true] {
            for flags in [0, FLAG_ZSTD] {
                let spec = HeadSpec {
                    flags,
                    ts: 1_000,
                    base_ts: 5_000,
                    stored_len: 42,
                    raw_len: 99,
                    content_type: "image/jpeg",
                    labels: &labels,
                    padded,
                };
                let head = encode_head(&spec).bytes;
                // (the attrs encoded apart, as a batch's shared ones are: the same bytes)
                let mut attrs = Vec::new();
                encode_head_attrs(&mut attrs, spec.content_type, spec.labels);
                let mut apart = vec![7; 3];
                let len_at = encode_head_with_attrs(&mut apart, &spec, &attrs);
                assert_eq!(
                    (apart.as_slice(), len_at),
                    (head.as_slice(), encode_head(&spec).len_at)
                );
                let h = decode_head(&head, 5_000).unwrap();
                assert_eq!(h.ts, 1_000);
                assert_eq!(h.stored_len, 42);
                assert_eq!(h.raw_len, if flags == 0 { 42 } else { 99 });
                assert_eq!(h.content_type, "image/jpeg");
                assert_eq!(h.labels, labels);
                assert_eq!(h.head_len, head.len());
                assert_eq!(
                    decode_head(&head[..head.len() - 1], 5_000),
                    Err(DecodeError::Short)
                );
            }
        }
    }

    /// Regression: a garbage length varint near u64::MAX made `frame_len` overflow
    /// (found by the `block_parser` fuzz target; a debug build panicked opening the block).
    #[test]
    fn impossible_lengths_are_garbage() {
        let mut h = vec![FRAME_MAGIC, 0, 0, 0, 0, 0, 0];
        h.extend_from_slice(&[0xff; 9]);
        h.push(0x01);
        h.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(
            decode_head(&h, 0),
            Err(DecodeError::Garbage("impossible length"))
        );
    }

    #[test]
    fn truncated_and_damaged_heads_are_typed_errors() {
        let labels: Labels = [("k".to_string(), "v".to_string())].into_iter().collect();
        let head = encode_head(&HeadSpec {
            flags: FLAG_ZSTD,
            ts: 7,
            base_ts: 3,
            stored_len: 5,
            raw_len: 9,
            content_type: "text/plain",
            labels: &labels,
            padded: false,
        })
        .bytes;
        for cut in 0..head.len() {
            assert_eq!(
                decode_head(&head[..cut], 3),
                Err(DecodeError::Short),
                "{cut}"
            );
        }
        // Any flipped bit: an error or a head that still parses, never a panic.
        for i in 0..head.len() {
            for bit in 0..8 {
                let mut bad = head.clone();
                bad[i] ^= 1 << bit;
                let _ = decode_head(&bad, 3);
            }
        }
        let mut bad = head.clone();
        bad[0] = 0;
        assert_eq!(
            decode_head(&bad, 3),
            Err(DecodeError::Garbage("bad frame marker"))
        );
        bad[0] = FRAME_MAGIC;
        bad[1] = 0x80;
        assert_eq!(
            decode_head(&bad, 3),
            Err(DecodeError::Garbage("unknown flags"))
        );
    }
}
