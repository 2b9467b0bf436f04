//! An entry's attachments file (`<entry>/attachments`): every attachment of the entry, one
//! file rewritten whole by each change (`attachments.rs`).
//!
//! ```text
//! magic "TSBA" (4 bytes), version (1 byte, 1), count (varint)
//! per attachment, by name: name length (varint), name (UTF-8), ts (varint),
//!                          data length (varint), data
//! CRC32C of every byte before it (4 bytes, little-endian)
//! ```

use super::bytes::{put_varint, Reader};
use super::DecodeError;

const MAGIC: &[u8; 4] = b"TSBA";
const VERSION: u8 = 1;

/// One stored attachment: its name, when it was written (µs, unique within its entry) and
/// its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub name: String,
    pub ts: u64,
    pub data: Vec<u8>,
}

/// The file's bytes for `items` (given in name order).
pub fn encode(items: &[Stored]) -> Vec<u8> {
    let size: usize = items.iter().map(|a| a.name.len() + a.data.len() + 30).sum();
    let mut out = Vec::with_capacity(size + 16);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    put_varint(&mut out, items.len() as u64);
    for a in items {
        put_varint(&mut out, a.name.len() as u64);
        out.extend_from_slice(a.name.as_bytes());
        put_varint(&mut out, a.ts);
        put_varint(&mut out, a.data.len() as u64);
        out.extend_from_slice(&a.data);
    }
    let crc = crate::crc::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The attachments of a file's bytes; damaged or truncated bytes are an error.
pub fn decode(bytes: &[u8]) -> Result<Vec<Stored>, DecodeError> {
    let body_len = bytes.len().checked_sub(4).ok_or(DecodeError::Short)?;
    let (body, crc) = bytes.split_at(body_len);
    let mut r = Reader::new(body);
    if r.bytes(4)? != MAGIC {
        return Err(DecodeError::Garbage("not an attachments file (bad magic)"));
    }
    if r.u8()? != VERSION {
        return Err(DecodeError::Garbage("unknown attachments file version"));
    }
    let mut want = [0u8; 4];
    want.copy_from_slice(crc);
    if crate::crc::crc32c(body) != u32::from_le_bytes(want) {
        return Err(DecodeError::Crc);
    }
    let count = r.length()?;
    // Each attachment takes at least 3 bytes: a count past that is garbage, not a reason
    // to reserve memory.
    if count > body.len() / 3 {
        return Err(DecodeError::Garbage("impossible attachment count"));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let n = r.length()?;
        let name = std::str::from_utf8(r.bytes(n)?)
            .map_err(|_| DecodeError::Garbage("an attachment name is not UTF-8"))?
            .to_string();
        let ts = r.varint()?;
        let n = r.length()?;
        let data = r.bytes(n)?.to_vec();
        out.push(Stored { name, ts, data });
    }
    if r.pos != body.len() {
        return Err(DecodeError::Garbage("bytes after the last attachment"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sample() -> Vec<Stored> {
        vec![
            Stored {
                name: "$plugin".into(),
                ts: 7,
                data: br#"{"a":1}"#.to_vec(),
            },
            Stored {
                name: "schema".into(),
                ts: 1_700_000_000_000_000,
                data: vec![b'x'; 300],
            },
        ]
    }

    #[test]
    fn round_trips() {
        assert_eq!(decode(&encode(&sample())).unwrap(), sample());
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
    }

    #[test]
    fn damaged_or_truncated_bytes_are_errors_never_panics() {
        let bytes = encode(&sample());
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x41;
            assert!(decode(&b).is_err(), "flip at {i}");
        }
    }
}
