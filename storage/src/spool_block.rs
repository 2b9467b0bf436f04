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
use std::path::Path;

use crate::codec::block::encode_block_header;
use crate::codec::frame::{encode_head, seal_head, HeadSpec};
use crate::record::WriteMeta;
use crate::record::DEFAULT_CONTENT_TYPE;

/// Raw spooled payloads from this size on become a block of their own; smaller ones are
/// copied into the active block (a block per small record would be a file per record).
pub(crate) const LINK_FROM: u64 = 1 << 20;

/// The block header and the frame head (CRC set) of `raw` payload bytes whose CRC32C is
/// `payload_crc`, as the only frame of block `id`.
pub(crate) fn linked_prefix(
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
pub(crate) fn link_file(file: &File, to: &Path) -> std::io::Result<()> {
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
