//! A large spooled payload becomes a block of its own, without being copied.
//!
//! A spool made by [`Store::spool_for`] receives its payload at the offset the payload
//! would have as the only frame of a new block of its entry: room is left in front for the
//! block header and the frame head, whose lengths are known before the first byte arrives
//! (the timestamp is stored relative to the block's base, which is the record's own, and
//! the length fields of a spooled frame are fixed-width). Under the entry lock,
//! [`Store::write_spooled`] then writes that header and head into the room, links the
//! anonymous file into the entry's folder under the next block id (`linkat`), seals the
//! entry's active block and makes the new one active. The payload is written to the page
//! cache once, where a copy into the active block wrote it twice (and touched twice the
//! fresh pages, which is what costs most on a VM).
//!
//! Everything a crash can leave is what an ordinary new block can leave: the file is
//! complete (header, head with its CRC, payload) before it gets a name, and until the index
//! commit a restart finds it as a block the index does not know, re-indexed whole by
//! recovery; a failed commit deletes it (`Undo`). Where the file cannot be linked (no
//! `O_TMPFILE` on the file system, no `/proc`), or the room does not match, the payload
//! is copied into the active block as before.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::bucket::Bucket;
use crate::codec::block::encode_block_header;
use crate::codec::frame::{encode_head, seal_head, HeadSpec};
use crate::codec::index::{Attrs, BlockState, IndexValue};
use crate::commit::Op;
use crate::entry::{Block, Entry, EntryState};
use crate::spool::Spool;
use crate::trash::sync_dir;
use crate::write::Undo;
use crate::*;

/// Raw spooled payloads from this size on become a block of their own; smaller ones are
/// copied into the active block (a block per small record would be a file per record).
pub(crate) const LINK_FROM: u64 = 1 << 20;

/// The block header and the frame head (CRC set) of `raw` payload bytes whose CRC32C is
/// `payload_crc`, as the only frame of block `id`.
fn linked_prefix(
    id: u64,
    entry: &str,
    ts: u64,
    meta: &WriteMeta,
    raw: u64,
    payload_crc: u32,
) -> (Vec<u8>, usize) {
    let mut bytes = encode_block_header(id, ts, entry);
    let header_len = bytes.len();
    let mut head = encode_head(&HeadSpec {
        flags: 0,
        ts,
        base_ts: ts,
        stored_len: raw,
        raw_len: raw,
        content_type: meta.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE),
        labels: &meta.labels,
        padded: true,
    })
    .bytes;
    seal_head(&mut head, payload_crc, raw);
    bytes.extend_from_slice(&head);
    (bytes, header_len)
}

/// The room a spool for `meta` of `entry` keeps in front of its payload.
pub(crate) fn room_for(entry: &str, meta: &WriteMeta) -> u64 {
    linked_prefix(0, entry, 0, meta, 0, 0).0.len() as u64
}

/// Gives the anonymous file `file` the name `to` (`linkat` of its `/proc/self/fd` link,
/// which needs no privilege).
fn link_file(file: &File, to: &Path) -> std::io::Result<()> {
    let from = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    let to = CString::new(to.as_os_str().as_bytes())?;
    // SAFETY: both are valid NUL-terminated paths for the duration of the call.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Store {
    /// Makes `spool` (payload stored raw, record timestamp `ts`) the entry's new active
    /// block holding its one frame, and queues the index ops; returns the frame's index
    /// value, or `None` when the spool cannot be linked (the caller copies it instead).
    /// Called with the entry's lock held (`st`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn link_spool(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        ts: u64,
        meta: &WriteMeta,
        spool: &Spool,
        ops: &mut Vec<Op>,
        undo: &mut Undo,
    ) -> Result<Option<IndexValue>> {
        let raw = spool.len();
        if raw < LINK_FROM || spool.base() == 0 {
            return Ok(None);
        }
        let id = self.inner.new_block_id();
        let (prefix, header_len) = linked_prefix(id, e.name(), ts, meta, raw, spool.crc());
        if prefix.len() as u64 != spool.base() {
            return Ok(None);
        }
        spool
            .file()
            .write_all_at(&prefix, 0)
            .map_err(|e| Error::io("writing the head of a spooled record", e))?;
        let file = Arc::new(
            spool
                .file()
                .try_clone()
                .map_err(|e| Error::io("duplicating a spool file's handle", e))?,
        );
        if let Err(err) = link_file(&file, &e.block_path(id)) {
            log::debug!("a spool could not become block {id:016x} ({err}): copying it");
            return Ok(None);
        }
        // From here the file is block `id`: an undo deletes it.
        undo.created_block(id);
        if self.inner.sync_dirs() {
            sync_dir(e.dir())?;
        }
        if let Some(Block { id, state }) = st.seal_active() {
            ops.push(Op::PutBlock { id, state });
        }
        self.inner.files.insert(id, file.clone(), ts);
        let header_len = header_len as u64;
        let state = BlockState::new_block(e.id(), ts, header_len);
        ops.push(Op::PutBlock { id, state });
        b.grow(header_len);
        st.start_block(id, state, header_len);
        undo.touch(id, &file);
        Ok(Some(IndexValue {
            block_id: id,
            offset: header_len,
            frame_len: prefix.len() as u64 - header_len + raw,
            stored: raw,
            size: raw,
            flags: 0,
            attrs: Arc::new(Attrs {
                content_type: meta
                    .content_type
                    .as_deref()
                    .unwrap_or(DEFAULT_CONTENT_TYPE)
                    .to_string(),
                labels: meta.labels.clone(),
            }),
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::*;

    fn payload(n: usize, seed: u32) -> Vec<u8> {
        // Incompressible enough that a zstd bucket stores it raw.
        let mut x = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    fn spooled(s: &Store, entry: &str, meta: &WriteMeta, data: &[u8]) -> Spool {
        let mut spool = s.spool_for("b", entry, meta).unwrap();
        for piece in data.chunks(300_007) {
            spool.append(piece).unwrap();
        }
        spool
    }

    fn block_files(dir: &std::path::Path) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = std::fs::read_dir(dir.join("b").join("e"))
            .unwrap()
            .map(|d| d.unwrap())
            .filter(|d| d.file_name().to_string_lossy().ends_with(".blk"))
            .map(|d| {
                let len = d.metadata().unwrap().len();
                (d.file_name().to_string_lossy().into_owned(), len)
            })
            .collect();
        v.sort();
        v
    }

    /// A large raw spooled record becomes a block file of its own, exactly its frame; the
    /// small records after it go into that block (it is the active one); everything reads
    /// back byte-identical, before and after a reopen (recovery finds nothing to repair).
    #[test]
    fn a_large_spooled_record_becomes_its_own_block() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let small = payload(1000, 1);
        s.write("b", "e", &WriteMeta::at(1), &small).unwrap();
        let before = block_files(dir.path());
        assert_eq!(before.len(), 1);
        let big = payload(3 << 20, 2);
        let mut labels = Labels::new();
        labels.insert("cam".into(), "front".into());
        let meta = WriteMeta {
            ts: Some(2),
            content_type: Some("image/jpeg".into()),
            labels,
        };
        let spool = spooled(&s, "e", &meta, &big);
        let room = spool.base();
        assert!(room > 0);
        assert_eq!(s.write_spooled("b", "e", &meta, spool).unwrap(), 2);
        let after = block_files(dir.path());
        assert_eq!(after.len(), 2, "{after:?}");
        assert_eq!(after[0], before[0], "the old block is untouched");
        assert_eq!(
            after[1].1,
            room + big.len() as u64,
            "one frame, nothing else"
        );
        s.write("b", "e", &WriteMeta::at(3), &small).unwrap();
        let grown = block_files(dir.path());
        assert_eq!(grown.len(), 2, "the next record goes into the linked block");
        assert!(grown[1].1 > after[1].1);
        let check = |s: &Store| {
            let r = s.read("b", "e", Some(2)).unwrap();
            assert!(r.data == big);
            assert_eq!(r.meta.content_type, "image/jpeg");
            assert_eq!(r.meta.labels.get("cam").map(String::as_str), Some("front"));
            assert_eq!(s.read("b", "e", Some(1)).unwrap().data, small);
            assert_eq!(s.read("b", "e", Some(3)).unwrap().data, small);
            let (_, p) = s.read_payload("b", "e", Some(2)).unwrap();
            assert!(p.unwrap().as_ref() == big);
            assert_eq!(s.entry("b", "e").unwrap().record_count, 3);
        };
        check(&s);
        drop(s);
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert!(
            s.recovery_report().events.is_empty(),
            "{:?}",
            s.recovery_report()
        );
        check(&s);
    }

    /// What is not linked is copied as before: a compressible payload in a zstd bucket
    /// (stored compressed), one below `LINK_FROM`, one from a plain `spool` (no room), and
    /// a record whose timestamp is taken (409, nothing linked, the stored one kept).
    #[test]
    fn what_cannot_be_linked_is_copied_and_a_refused_spool_leaves_no_block() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let z = BucketSettings {
            compression: Compression::Zstd { level: 1 },
            ..BucketSettings::default()
        };
        s.create_bucket("b", z).unwrap();
        let text: Vec<u8> = (0..(2u32 << 20)).map(|i| (i % 7) as u8).collect();
        let meta = WriteMeta::at(1);
        s.write_spooled("b", "e", &meta, spooled(&s, "e", &meta, &text))
            .unwrap();
        let files = block_files(dir.path());
        assert_eq!(files.len(), 1);
        assert!(files[0].1 < 1 << 20, "stored compressed: {files:?}");
        let under = payload((super::LINK_FROM - 1) as usize, 3);
        let meta = WriteMeta::at(2);
        s.write_spooled("b", "e", &meta, spooled(&s, "e", &meta, &under))
            .unwrap();
        let plain = payload(2 << 20, 4);
        let mut spool = s.spool("b").unwrap();
        spool.append(&plain).unwrap();
        s.write_spooled("b", "e", &WriteMeta::at(3), spool).unwrap();
        assert_eq!(
            block_files(dir.path()).len(),
            1,
            "all copied into one block"
        );
        // Linked, then a second record at the same timestamp is refused before linking.
        let big = payload(2 << 20, 5);
        let meta = WriteMeta::at(4);
        s.write_spooled("b", "e", &meta, spooled(&s, "e", &meta, &big))
            .unwrap();
        assert_eq!(block_files(dir.path()).len(), 2);
        let other = payload(2 << 20, 6);
        let err = s
            .write_spooled("b", "e", &meta, spooled(&s, "e", &meta, &other))
            .unwrap_err();
        assert!(
            matches!(err, Error::Write(WriteError::Conflict { .. })),
            "{err:?}"
        );
        assert_eq!(block_files(dir.path()).len(), 2);
        for (ts, want) in [(1, &text), (2, &under), (3, &plain), (4, &big)] {
            assert!(s.read("b", "e", Some(ts)).unwrap().data == *want, "ts {ts}");
        }
    }

    /// Linked blocks are ordinary blocks to FIFO eviction: the oldest go first, a removed
    /// record stays removed after a reopen, and the kept ones read back whole.
    #[test]
    fn fifo_evicts_linked_blocks_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(
            dir.path(),
            StoreOptions {
                free_space_reserve: 0,
                ..StoreOptions::default()
            },
        )
        .unwrap();
        let fifo = BucketSettings {
            quota_type: QuotaType::Fifo,
            quota_size: 10 << 20,
            ..BucketSettings::default()
        };
        s.create_bucket("b", fifo).unwrap();
        let n = 8u64;
        for ts in 1..=n {
            let data = payload(2 << 20, ts as u32);
            let meta = WriteMeta::at(ts);
            s.write_spooled("b", "e", &meta, spooled(&s, "e", &meta, &data))
                .unwrap();
            assert!(s.bucket("b").unwrap().size <= 10 << 20);
        }
        let check = |s: &Store| {
            let info = s.entry("b", "e").unwrap();
            let oldest = info.oldest.unwrap();
            assert!(oldest > 1, "nothing evicted: {info:?}");
            assert_eq!(info.latest, Some(n));
            for ts in 1..oldest {
                assert!(s.read("b", "e", Some(ts)).is_err(), "ts {ts} came back");
            }
            for ts in oldest..=n {
                assert!(s.read("b", "e", Some(ts)).unwrap().data == payload(2 << 20, ts as u32));
            }
            oldest
        };
        let oldest = check(&s);
        drop(s);
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert_eq!(check(&s), oldest);
    }
}
