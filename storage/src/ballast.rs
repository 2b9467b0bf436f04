//! Space the data folder keeps for its own repair: `<data>/index/ballast`, a file of up to
//! [`MAX_BALLAST`] bytes allocated at open while the disk has room.
//!
//! Opening a folder a crash left may need an index commit (re-indexed records, a rename or
//! removal finished, a rebuild), and LMDB may have to make `data.mdb` bigger for it. On a
//! disk another program filled, that commit failed, the server did not start, and the API
//! that removes data to free space was out of reach (kill -9 probe, F1). An open on a disk
//! with less than 1 MiB free deletes the ballast first (LMDB cannot even make a missing
//! `lock.mdb` there: a page fault on its map is a SIGBUS); an open that fails for want of
//! space deletes it and tries once more. A removal whose index commit fails for want of
//! space while the server runs gets its room the same way (LMDB writes new pages before it
//! frees old ones). The file is made again once the disk has room (free space above
//! `--free-space-reserve` plus four times its size): at open, and while the store runs by
//! its retention thread, once a second until it is there. Before, it came back only at the
//! next start, so a second full disk in one run found no room left for a removal.

use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, WriteError};
use crate::layout::INDEX_DIR;
use crate::quota::disk_space;

/// The most the ballast holds: enough for the index commits of a crash's repairs (a few
/// pages each) and the rebuild of an index of some 10,000s of records.
pub(crate) const MAX_BALLAST: u64 = 8 << 20;

fn path(data: &Path) -> PathBuf {
    data.join(INDEX_DIR).join("ballast")
}

/// The ballast's size on a file system of `total` bytes: [`MAX_BALLAST`], or 1/64 of a
/// small file system.
fn size_for(total: u64) -> u64 {
    MAX_BALLAST.min(total / 64)
}

/// Whether the ballast is there to give room.
pub(crate) fn held(data: &Path) -> bool {
    std::fs::metadata(path(data)).is_ok_and(|m| m.len() > 0)
}

/// Deletes the ballast; whether it held space to give.
pub(crate) fn release(data: &Path) -> bool {
    held(data) && std::fs::remove_file(path(data)).is_ok()
}

/// What [`ensure`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ensured {
    /// The ballast is there (or the disk is too small to keep one).
    Held,
    /// No room for it yet.
    NoRoom,
    /// Room, but allocating failed (logged): not worth trying again before the next open.
    Failed,
}

/// Makes the ballast when it is missing (or short) and the disk has room for it beyond
/// `reserve` (the free-space guard's) and four times its size. Best effort: a failure is
/// logged, nothing else.
pub(crate) fn ensure(data: &Path, reserve: u64) -> Ensured {
    let p = path(data);
    let Ok((free, total)) = disk_space(data) else {
        return Ensured::Failed;
    };
    let size = size_for(total);
    let have = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
    if size == 0 || have >= size {
        return Ensured::Held;
    }
    if free < reserve.saturating_add(size.saturating_mul(4)) {
        return Ensured::NoRoom;
    }
    match allocate(&p, size) {
        Ok(()) => Ensured::Held,
        Err(e) => {
            let _ = std::fs::remove_file(&p);
            log::warn!("could not keep {size} bytes of ballast for repairs on a full disk ({e})");
            Ensured::Failed
        }
    }
}

/// Allocates `size` bytes to `p` for real (a sparse file would free nothing).
fn allocate(p: &Path, size: u64) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(p)?;
    let len = libc::off_t::try_from(size).map_err(std::io::Error::other)?;
    // SAFETY: `f` is an open file descriptor for the call's duration.
    let rc = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    f.sync_all()
}

/// Whether the disk holding `data` has (nearly) no byte free: less than 1 MiB, or less than
/// the ballast's size on a small disk (on a disk of a few MiB, less than 1 MiB free is the
/// usual state: the ballast was deleted and made again at every open, saying "full").
pub(crate) fn nearly_full(data: &Path) -> bool {
    disk_space(data).is_ok_and(|(free, total)| {
        free < crate::quota::NEARLY_FULL.min(size_for(total).max(1 << 16))
    })
}

/// Whether an open failed for want of disk space (see [`crate::quota::full_disk_eio`]).
pub(crate) fn out_of_space(e: &Error, data: &Path) -> bool {
    matches!(e, Error::Write(WriteError::DiskFull { .. })) || crate::quota::full_disk_eio(e, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ballast_is_small_on_a_small_disk_and_released_once() {
        assert_eq!(size_for(64 << 20), 1 << 20);
        assert_eq!(size_for(1 << 40), MAX_BALLAST);
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(INDEX_DIR)).unwrap();
        assert!(!release(dir.path()), "nothing to release yet");
        ensure(dir.path(), 0);
        let len = std::fs::metadata(path(dir.path())).map(|m| m.len());
        let (_, total) = disk_space(dir.path()).unwrap();
        assert_eq!(len.unwrap(), size_for(total));
        assert!(release(dir.path()));
        assert!(!release(dir.path()), "released twice");
    }
}
