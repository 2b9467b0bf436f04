//! The block file header ("Block header" in `docs/storage-format.md`):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TSBLK001` |
//! | 8 | 8 | block id, u64 LE |
//! | 16 | 8 | base timestamp, u64 LE |
//! | 24 | 2 | entry name length N, u16 LE |
//! | 26 | N | entry name, UTF-8 |
//! | 26+N | 4 | CRC32C of bytes `0 .. 26+N`, u32 LE |

use super::{DecodeError, Reader};

pub const BLOCK_MAGIC: &[u8; 8] = b"TSBLK001";
/// The longest header: an entry name has at most 255 bytes.
pub const MAX_BLOCK_HEADER: usize = 8 + 8 + 8 + 2 + 255 + 4;

/// The block file header: magic, block id, base timestamp, entry name, CRC32C.
pub fn encode_block_header(block_id: u64, base_ts: u64, entry: &str) -> Vec<u8> {
    let mut h = Vec::with_capacity(32 + entry.len());
    h.extend_from_slice(BLOCK_MAGIC);
    h.extend_from_slice(&block_id.to_le_bytes());
    h.extend_from_slice(&base_ts.to_le_bytes());
    h.extend_from_slice(&(entry.len() as u16).to_le_bytes());
    h.extend_from_slice(entry.as_bytes());
    let crc = crate::crc::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockHeader {
    pub block_id: u64,
    pub base_ts: u64,
    pub entry: String,
    /// The header's length: where the first frame starts.
    pub len: usize,
}

/// Parses the header at the start of `buf` (which may hold more than the header).
pub fn decode_block_header(buf: &[u8]) -> Result<BlockHeader, DecodeError> {
    let mut r = Reader::new(buf);
    if r.bytes(8)? != BLOCK_MAGIC {
        return Err(DecodeError::Garbage("not a block file (bad magic)"));
    }
    let block_id = r.u64()?;
    let base_ts = r.u64()?;
    let n = r.u16()? as usize;
    let entry = r.str(n)?.to_string();
    let body_end = r.pos;
    let crc = r.u32()?;
    if crate::crc::crc32c(&buf[..body_end]) != crc {
        return Err(DecodeError::Crc);
    }
    Ok(BlockHeader {
        block_id,
        base_ts,
        entry,
        len: r.pos,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_header_round_trips_and_detects_damage() {
        let mut h = encode_block_header(7, 123, "robot/lidar");
        assert!(h.len() <= MAX_BLOCK_HEADER);
        let d = decode_block_header(&h).unwrap();
        assert_eq!(
            (d.block_id, d.base_ts, d.entry.as_str(), d.len),
            (7, 123, "robot/lidar", h.len())
        );
        for cut in 0..h.len() {
            assert_eq!(decode_block_header(&h[..cut]), Err(DecodeError::Short));
        }
        h[9] ^= 1;
        assert_eq!(decode_block_header(&h), Err(DecodeError::Crc));
        h[0] ^= 1;
        assert!(matches!(
            decode_block_header(&h),
            Err(DecodeError::Garbage(_))
        ));
    }
}
