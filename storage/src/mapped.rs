//! Payloads handed out without a copy: a record's frame mapped from its block file.
//!
//! A read that copies a large payload into a buffer of its own touches every byte twice
//! (kernel to buffer, buffer to socket) and asks the allocator for fresh pages each time:
//! on the 2-vCPU machines of `docs/benchmarks/`, first touches of fresh memory cost more
//! than the copy (`clear_page` in the profiles). A mapped frame is the page cache itself:
//! the payload goes from there to the socket in one copy, as the `limit` server's reads do.
//!
//! Safety of the mapping: a mapped file must not shrink under the mapped bytes (that is a
//! `SIGBUS`). Block files only ever shrink in two places: recovery at open (no reader yet),
//! and [`crate::write`]'s undo of a write whose index commit failed, which cuts back to the
//! length before that write: past every committed record, so past every frame a reader can
//! find in the index and map. Removed blocks are unlinked, never truncated: a mapping keeps
//! an unlinked file's pages until it is dropped (as an open descriptor does).

use std::fs::File;
use std::path::PathBuf;

use memmap2::{Mmap, MmapOptions};

use crate::codec::frame::{check_head, FLAG_ZSTD, FRAME_PREFIX};
use crate::index::IndexValue;
use crate::{CorruptionError, Error, Result};

/// Payloads at least this large are mapped; smaller ones are read into a buffer (a
/// `preadv` costs less than `mmap`, its page-table setup and `munmap`).
pub const MAP_MIN: u64 = 256 << 10;
/// ... and at most this large: a larger payload is streamed in chunks, so its first bytes
/// leave before the whole of it was read and checked.
pub const MAP_MAX: u64 = 64 << 20;

/// A payload that cannot be mapped (compressed) is read whole into memory up to this
/// size; a larger one is streamed.
pub const MEMORY_MAX: u64 = 1 << 20;

/// A record's payload, CRC-checked: mapped from its block, a slice of a range fetched
/// from the object store (a tiered record stored raw), or in memory (small records,
/// compressed ones).
pub enum Payload {
    Mapped(MappedPayload),
    Shared(SharedPayload),
    Memory(Vec<u8>),
}

impl Payload {
    pub fn len(&self) -> usize {
        self.as_ref().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload in a buffer of its own (a copy unless it already is one).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Payload::Memory(v) => v,
            other => other.as_ref().to_vec(),
        }
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        match self {
            Payload::Mapped(m) => m.as_ref(),
            Payload::Shared(s) => s.as_ref(),
            Payload::Memory(v) => v,
        }
    }
}

/// A payload inside a range of a tiered block held in memory (the tier's range cache
/// holds the same buffer): handed out without copying it out of the range. It keeps the
/// whole range alive until dropped, also after the cache let it go.
pub struct SharedPayload {
    buf: std::sync::Arc<Vec<u8>>,
    range: std::ops::Range<usize>,
}

impl SharedPayload {
    /// `range` of `buf`; `None` if it is not inside it.
    pub(crate) fn new(
        buf: std::sync::Arc<Vec<u8>>,
        range: std::ops::Range<usize>,
    ) -> Option<SharedPayload> {
        buf.get(range.clone())?;
        Some(SharedPayload { buf, range })
    }
}

impl AsRef<[u8]> for SharedPayload {
    fn as_ref(&self) -> &[u8] {
        // `new` checked the range; the buffer is never changed while shared.
        self.buf.get(self.range.clone()).unwrap_or_default()
    }
}

/// A payload mapped read-only from its block file (the frame's head is mapped with it).
pub struct MappedPayload {
    map: Mmap,
    start: usize,
}

impl AsRef<[u8]> for MappedPayload {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.start..]
    }
}

impl std::fmt::Debug for MappedPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MappedPayload({} bytes)", self.as_ref().len())
    }
}

/// Maps the frame the index value `v` locates and checks it as `block::read_frame` checks one it reads:
/// its head, its length against the index, its CRC32C, its timestamp. `None` for a
/// compressed frame (its payload must be decompressed into memory anyway) and when the
/// mapping cannot be made (the caller reads the frame instead).
pub(crate) fn map_frame(
    file: &File,
    path: &dyn Fn() -> PathBuf,
    v: &IndexValue,
    base_ts: u64,
    ts: u64,
) -> Result<Option<MappedPayload>> {
    let (offset, frame_len, size) = (v.offset, v.frame_len, v.size);
    if v.flags & FLAG_ZSTD != 0 || size > frame_len {
        return Ok(None);
    }
    let corrupt = |reason: &str| {
        Error::Corrupt(CorruptionError::Record {
            path: path(),
            offset,
            reason: reason.to_string(),
        })
    };
    // Never map past the end of the file: touching such a page is a SIGBUS, not an error.
    let file_len = file
        .metadata()
        .map_err(|e| Error::io(format!("stat {:?}", path()), e))?
        .len();
    if offset
        .checked_add(frame_len)
        .is_none_or(|end| end > file_len)
    {
        return Err(corrupt("record extends past the end of its block"));
    }
    let len = usize::try_from(frame_len).map_err(|_| corrupt("frame too large to map"))?;
    // SAFETY: the mapped range lies within the file (checked above) and block files never
    // shrink under a committed frame while the store is open (see the module comment);
    // the bytes of a committed frame are never rewritten.
    let map = match unsafe {
        MmapOptions::new()
            .offset(offset)
            .len(len)
            .populate()
            .map(file)
    } {
        Ok(map) => map,
        Err(e) => {
            // Out of mappings (`vm.max_map_count`: many slow readers each holding some) or
            // of address space: the caller reads the payload into memory instead.
            log::debug!("mapping {:?} failed ({e}): reading instead", path());
            return Ok(None);
        }
    };
    let head_len = (frame_len - size) as usize;
    let h = check_head(&map, base_ts).map_err(|f| corrupt(&format!("{f:?}")))?;
    if h.head_len != head_len || h.head_len as u64 + h.stored_len != frame_len {
        return Err(corrupt("frame length differs from the index"));
    }
    if crc32c::crc32c(&map[FRAME_PREFIX..]) != h.crc {
        return Err(corrupt("CRC32C mismatch"));
    }
    if h.ts != ts {
        return Err(corrupt(&format!(
            "index says timestamp {ts}, block says {}",
            h.ts
        )));
    }
    Ok(Some(MappedPayload {
        map,
        start: head_len,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::*;

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 253) as u8).collect()
    }

    /// Large raw payloads are mapped, small and compressed ones read into memory; all of
    /// them are the bytes written.
    #[test]
    fn large_raw_payloads_are_mapped_the_rest_read() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let (big, small) = (payload(super::MAP_MIN as usize), payload(1000));
        s.write("b", "e", &WriteMeta::at(1), &big).unwrap();
        s.write("b", "e", &WriteMeta::at(2), &small).unwrap();
        let (meta, p) = s.read_payload("b", "e", Some(1)).unwrap();
        assert_eq!(meta.size, big.len() as u64);
        let p = p.unwrap();
        assert!(matches!(p, Payload::Mapped(_)));
        assert!(p.as_ref() == big);
        let p = s.read_payload("b", "e", Some(2)).unwrap().1.unwrap();
        assert!(matches!(p, Payload::Memory(_)));
        assert_eq!(p.as_ref(), &small[..]);
        // Compressed: decompressed into memory.
        let z = BucketSettings {
            compression: Compression::Zstd { level: 3 },
            ..BucketSettings::default()
        };
        s.create_bucket("z", z).unwrap();
        s.write("z", "e", &WriteMeta::at(1), &big).unwrap();
        let p = s.read_payload("z", "e", Some(1)).unwrap().1.unwrap();
        assert!(matches!(p, Payload::Memory(_)));
        assert!(p.as_ref() == big);
        // Over MAP_MAX: streamed instead (None).
        let huge = vec![7u8; (super::MAP_MAX + 1) as usize];
        s.write("b", "e", &WriteMeta::at(3), &huge).unwrap();
        assert!(s.read_payload("b", "e", Some(3)).unwrap().1.is_none());
    }

    /// A mapping outlives the removal of its record's bucket (the block file is unlinked,
    /// not cut): the bytes handed out stay the bytes written.
    #[test]
    fn a_mapped_payload_survives_the_removal_of_its_block() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let big = payload(1 << 20);
        s.write("b", "e", &WriteMeta::at(1), &big).unwrap();
        let (_, p) = s.read_payload("b", "e", Some(1)).unwrap();
        let p = p.unwrap();
        s.remove_bucket("b").unwrap();
        assert!(p.as_ref() == big);
        assert!(s.read_payload("b", "e", Some(1)).is_err());
    }
}
