//! Quotas and the free-space guard: what a write may take, and FIFO eviction of whole
//! oldest blocks to make room.
//!
//! Only bytes actually received count: a write reserves its exact size after its payload
//! is in memory or in a spool (`spool.rs`), and a spool's appends pass the free-space guard
//! and an early HARD-quota check as bytes arrive. Admission runs under the bucket's evict
//! lock and takes entry locks one at a time, never while the caller holds one (lock order:
//! `Evict` before `Entry`).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::bucket::Bucket;
use crate::error::{Error, Result, WriteError};
use crate::lock::{Mutex, Rank};
use crate::settings::BucketSettings;

/// Free bytes for an unprivileged writer on the file system holding `path`.
pub fn free_space(path: &Path) -> std::io::Result<u64> {
    disk_space(path).map(|(free, _)| free)
}

/// Free bytes below which a disk counts as full for the index: a short write of LMDB's fills
/// the file system to its last block.
pub(crate) const NEARLY_FULL: u64 = 1 << 20;

/// Whether `e` is the EIO that LMDB makes of a short write (`mdb_page_flush`) on a file
/// system that ran out of space mid-commit: an index I/O error while less than 1 MiB is
/// free. (A real I/O error on a disk with room stays one.)
pub(crate) fn full_disk_eio(e: &Error, data: &Path) -> bool {
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EIO))
        && free_space(data).is_ok_and(|free| free < NEARLY_FULL)
}

/// An index commit's error, with a full disk's EIO ([`full_disk_eio`]) typed as `DiskFull`.
pub(crate) fn type_full_disk(e: Error, data: &Path) -> Error {
    if !full_disk_eio(&e, data) {
        return e;
    }
    Error::Write(WriteError::DiskFull {
        path: data.to_path_buf(),
        available: 0,
        reserve: 0,
        needed: 0,
    })
}

/// Free bytes for an unprivileged writer, and the size, of the file system holding `path`.
pub(crate) fn disk_space(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "path has a NUL byte")
    })?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized out-parameter.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok((st.f_bavail as u64 * frsize, st.f_blocks as u64 * frsize))
}

/// Free bytes of the data folder's file system as last measured, when, and what was
/// written since: `statvfs` runs at most every 20 ms or 64 MiB of writes.
pub(crate) struct FreeSpace {
    pub(crate) state: Mutex<FreeState>,
}

pub(crate) struct FreeState {
    pub(crate) measured: Option<Instant>,
    pub(crate) free: u64,
    pub(crate) written_since: u64,
    /// What the last write refused for space needed, until a write is let through.
    pub(crate) refused_need: Option<u64>,
}

impl FreeSpace {
    pub fn new() -> FreeSpace {
        FreeSpace {
            state: Mutex::new(
                Rank::FreeSpace,
                FreeState {
                    measured: None,
                    free: 0,
                    written_since: 0,
                    refused_need: None,
                },
            ),
        }
    }

    /// Free bytes now (measured if stale, or with `fresh`), less what was written since.
    pub(crate) fn get(&self, path: &Path, fresh: bool) -> Result<u64> {
        let mut c = self.state.lock();
        let stale = c
            .measured
            .is_none_or(|t| t.elapsed() > Duration::from_millis(20));
        if fresh || stale || c.written_since > (64 << 20) {
            c.free = free_space(path).map_err(|e| Error::io("statvfs of the data folder", e))?;
            c.measured = Some(Instant::now());
            c.written_since = 0;
        }
        Ok(c.free.saturating_sub(c.written_since))
    }

    pub(crate) fn written(&self, bytes: u64) {
        let mut c = self.state.lock();
        c.written_since += bytes;
        c.refused_need = None;
    }

    /// A write needing `need` bytes was refused for want of space.
    pub(crate) fn refused(&self, need: u64) {
        self.state.lock().refused_need = Some(need);
    }

    /// Whether writes are being refused for space: no byte is free, or the free bytes are
    /// below `reserve`, or below what the last refused write needed on top of it (until a
    /// write gets through or space is freed). An error reading the figure counts as short.
    pub(crate) fn short(&self, path: &Path, reserve: u64) -> bool {
        let Ok(free) = self.get(path, false) else {
            return true;
        };
        let need = self.state.lock().refused_need.unwrap_or(0);
        free == 0 || free < reserve.saturating_add(need)
    }
}

/// How often (at most) retention looks at a bucket's blocks.
pub(crate) const EXPIRY_EVERY_MS: u64 = 1000;

/// Space promised to one write; given back when the write is done.
pub(crate) struct Reservation<'a> {
    pub(crate) bucket: &'a Bucket,
    pub(crate) bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.bucket.release(self.bytes);
    }
}

pub(crate) fn quota_exceeded(bucket: &Bucket, settings: &BucketSettings, need: u64) -> Error {
    WriteError::QuotaExceeded {
        bucket: bucket.name().to_string(),
        quota: settings.quota_size,
        used: bucket.used(),
        needed: need,
    }
    .into()
}

/// A write of `need` bytes larger than the bucket's whole quota: no eviction can fit it.
pub(crate) fn larger_than_quota(bucket: &Bucket, settings: &BucketSettings, need: u64) -> Error {
    WriteError::LargerThanQuota {
        bucket: bucket.name().to_string(),
        quota_type: settings.quota_type,
        quota: settings.quota_size,
        needed: need,
    }
    .into()
}

/// Bytes of the bucket's blocks kept on the local disk (a tiered block's local copy is
/// gone): what evicting all of them could give back to the file system. Takes each entry's
/// lock in turn: the caller holds none.
pub(crate) fn local_block_bytes(bucket: &Bucket) -> u64 {
    bucket
        .entries()
        .iter()
        .map(|e| {
            let st = e.lock();
            st.block_bytes().saturating_sub(st.tiered().bytes)
        })
        .sum()
}
