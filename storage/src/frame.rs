//! Byte formats: varints, labels, the block file header and the record frame.
//! `docs/storage-format.md` draws these as tables; keep the two in step.

use crate::Labels;

pub const BLOCK_MAGIC: &[u8; 8] = b"TSBLK001";
pub const FRAME_MAGIC: u8 = 0xA5;
pub const FLAG_ZSTD: u8 = 0x01;
pub const FLAG_DELETED: u8 = 0x02;
/// Bytes before the CRC-covered part of a frame: magic, flags, CRC32C.
pub const FRAME_PREFIX: usize = 6;
/// A varint padded to its maximum length, so a streamed write can patch it in place.
pub const PADDED_VARINT: usize = 10;
/// The largest payload a frame may claim (256 TiB): anything beyond is garbage.
pub const MAX_RECORD_LEN: u64 = 1 << 48;

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Writes `v` in exactly [`PADDED_VARINT`] bytes (LEB128 allows redundant continuation).
pub fn put_padded_varint(out: &mut [u8], mut v: u64) {
    for (i, b) in out.iter_mut().enumerate().take(PADDED_VARINT) {
        let last = i == PADDED_VARINT - 1;
        *b = (v as u8 & 0x7f) | if last { 0 } else { 0x80 };
        v >>= 7;
    }
}

/// A cursor over bytes that fails (returns `None`) instead of panicking on short input.
pub struct Reader<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn varint(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        for i in 0..PADDED_VARINT {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return None; // would overflow u64
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }

    pub fn str(&mut self, n: usize) -> Option<&'a str> {
        std::str::from_utf8(self.bytes(n)?).ok()
    }
}

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

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

pub fn decode_labels(r: &mut Reader<'_>) -> Option<Labels> {
    let n = r.varint()?;
    let mut labels = Labels::new();
    for _ in 0..n {
        let kl = r.varint()? as usize;
        let k = r.str(kl)?.to_string();
        let vl = r.varint()? as usize;
        let v = r.str(vl)?.to_string();
        labels.insert(k, v);
    }
    Some(labels)
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

/// The block file header: magic, block id, base timestamp, entry name, CRC32C.
pub fn encode_block_header(block_id: u64, base_ts: u64, entry: &str) -> Vec<u8> {
    let mut h = Vec::with_capacity(32 + entry.len());
    h.extend_from_slice(BLOCK_MAGIC);
    h.extend_from_slice(&block_id.to_le_bytes());
    h.extend_from_slice(&base_ts.to_le_bytes());
    h.extend_from_slice(&(entry.len() as u16).to_le_bytes());
    h.extend_from_slice(entry.as_bytes());
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockHeader {
    pub block_id: u64,
    pub base_ts: u64,
    pub entry: String,
    pub len: usize,
}

pub fn decode_block_header(buf: &[u8]) -> Option<BlockHeader> {
    let mut r = Reader::new(buf);
    if r.bytes(8)? != BLOCK_MAGIC {
        return None;
    }
    let block_id = r.u64()?;
    let base_ts = r.u64()?;
    let n = r.u16()? as usize;
    let entry = r.str(n)?.to_string();
    let body_end = r.pos;
    let crc = r.u32()?;
    if crc32c::crc32c(&buf[..body_end]) != crc {
        return None;
    }
    Some(BlockHeader {
        block_id,
        base_ts,
        entry,
        len: r.pos,
    })
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
    let mut h = Vec::with_capacity(32 + spec.content_type.len());
    h.push(FRAME_MAGIC);
    h.push(spec.flags);
    h.extend_from_slice(&[0; 4]);
    put_varint(&mut h, zigzag(spec.ts.wrapping_sub(spec.base_ts) as i64));
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
        put_varint(&mut h, spec.stored_len);
        if spec.flags & FLAG_ZSTD != 0 {
            put_varint(&mut h, spec.raw_len);
        }
    }
    let ct = stored_content_type(spec.content_type);
    put_varint(&mut h, ct.len() as u64);
    h.extend_from_slice(ct.as_bytes());
    let mut lab = Vec::new();
    if !spec.labels.is_empty() {
        encode_labels(&mut lab, spec.labels);
    }
    put_varint(&mut h, lab.len() as u64);
    h.extend_from_slice(&lab);
    EncodedHead { bytes: h, len_at }
}

/// Why a frame does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameFault {
    /// More bytes are needed than `buf` holds (possibly a torn tail).
    Short,
    /// The bytes are not a frame.
    Garbage(&'static str),
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
pub fn check_head(buf: &[u8], base_ts: u64) -> Result<HeadFields, FrameFault> {
    let (f, ct, lab) = split_head(buf, base_ts)?;
    let _ = (ct, lab);
    Ok(f)
}

/// Parses the head of a frame from `buf` (which may hold more or less than the frame).
pub fn decode_head(buf: &[u8], base_ts: u64) -> Result<FrameHead, FrameFault> {
    let (f, ct, lab) = split_head(buf, base_ts)?;
    let ct = std::str::from_utf8(ct).map_err(|_| FrameFault::Garbage("content type"))?;
    let labels = if lab.is_empty() {
        Labels::new()
    } else {
        decode_labels(&mut Reader::new(lab)).ok_or(FrameFault::Garbage("labels"))?
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
fn split_head(buf: &[u8], base_ts: u64) -> Result<(HeadFields, &[u8], &[u8]), FrameFault> {
    let mut r = Reader::new(buf);
    let magic = r.u8().ok_or(FrameFault::Short)?;
    if magic != FRAME_MAGIC {
        return Err(FrameFault::Garbage("bad frame marker"));
    }
    let flags = r.u8().ok_or(FrameFault::Short)?;
    if flags & !(FLAG_ZSTD | FLAG_DELETED) != 0 {
        return Err(FrameFault::Garbage("unknown flags"));
    }
    let crc = r.u32().ok_or(FrameFault::Short)?;
    let short_or = |r: &Reader<'_>, why| {
        if r.pos + PADDED_VARINT >= r.buf.len() {
            FrameFault::Short
        } else {
            FrameFault::Garbage(why)
        }
    };
    let dts = r.varint().ok_or_else(|| short_or(&r, "bad timestamp"))?;
    let ts = base_ts.wrapping_add(unzigzag(dts) as u64);
    let stored_len = r.varint().ok_or_else(|| short_or(&r, "bad length"))?;
    let raw_len = if flags & FLAG_ZSTD != 0 {
        r.varint().ok_or_else(|| short_or(&r, "bad length"))?
    } else {
        stored_len
    };
    // No record is anywhere near 2^48 bytes; a larger length is garbage, and rejecting
    // it here keeps every `offset + length` sum below from overflowing.
    if stored_len > MAX_RECORD_LEN || raw_len > MAX_RECORD_LEN {
        return Err(FrameFault::Garbage("impossible length"));
    }
    let ctl = r.varint().ok_or_else(|| short_or(&r, "bad content type"))? as usize;
    if ctl > 255 {
        return Err(FrameFault::Garbage("content type too long"));
    }
    let ct = r.bytes(ctl).ok_or(FrameFault::Short)?;
    let ll = r.varint().ok_or_else(|| short_or(&r, "bad labels"))? as usize;
    if ll > (64 << 20) {
        return Err(FrameFault::Garbage("labels too long"));
    }
    let lab = r.bytes(ll).ok_or(FrameFault::Short)?;
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

/// CRC32C over a whole frame's covered bytes (head after the prefix, then payload).
pub fn frame_crc(frame: &[u8]) -> u32 {
    crc32c::crc32c(&frame[FRAME_PREFIX..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_pad() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(Reader::new(&b).varint(), Some(v));
            let mut p = [0u8; PADDED_VARINT];
            put_padded_varint(&mut p, v);
            assert_eq!(Reader::new(&p).varint(), Some(v));
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
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
                let h = decode_head(&head, 5_000).unwrap();
                assert_eq!(h.ts, 1_000);
                assert_eq!(h.stored_len, 42);
                assert_eq!(h.raw_len, if flags == 0 { 42 } else { 99 });
                assert_eq!(h.content_type, "image/jpeg");
                assert_eq!(h.labels, labels);
                assert_eq!(h.head_len, head.len());
                assert_eq!(
                    decode_head(&head[..head.len() - 1], 5_000),
                    Err(FrameFault::Short)
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
            Err(FrameFault::Garbage("impossible length"))
        );
    }

    #[test]
    fn block_header_round_trips_and_detects_damage() {
        let mut h = encode_block_header(7, 123, "robot/lidar");
        let d = decode_block_header(&h).unwrap();
        assert_eq!(
            (d.block_id, d.base_ts, d.entry.as_str(), d.len),
            (7, 123, "robot/lidar", h.len())
        );
        h[9] ^= 1;
        assert!(decode_block_header(&h).is_none());
    }
}
