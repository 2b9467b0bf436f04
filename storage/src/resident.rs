//! Whether the index can be read without waiting on the disk, for point reads served on a
//! runtime worker thread (`Store::read_payload_now`).
//!
//! LMDB reads its files through mappings: a look-up touches the meta pages, the reader
//! table (the lock file) and a B-tree path of pages, and a page that is not in the page
//! cache is a major fault: the thread waits on the disk. Which pages a look-up touches is
//! LMDB's business, so the check is over all of them: the lock file, and the data file up
//! to the last page LMDB has used, counted in the page cache with `cachestat(2)` (Linux
//! 6.5; on an older kernel the check always says no). When every page is cached, the
//! look-up costs memory accesses only (a cached page not yet mapped is a minor fault, no
//! I/O). The check walks the page cache over the used file (≈ 30 ns per 4 KiB page when
//! the pages are small, far less in large folios), so it is only made for an index of at
//! most a bound of bytes (`--inline-read-index-max`); a larger or partly cold index is
//! read on the blocking pool.
//!
//! What remains: a page evicted between the check and the look-up (microseconds later,
//! under memory pressure) is read from the disk on the worker thread.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Read-only handles of an index folder's files, to ask the page cache about them.
#[derive(Debug)]
pub(crate) struct IndexFiles {
    data: File,
    lock: File,
    lock_len: u64,
}

/// Set once the kernel refuses `cachestat` (older than 6.5, or filtered): no more tries.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// `cachestat`'s number on every Linux architecture (it came after the tables were
/// unified); the `libc` crate does not name it on all of them.
const SYS_CACHESTAT: libc::c_long = 451;

impl IndexFiles {
    /// Opens `dir`'s `data.mdb` and `lock.mdb` read-only. `None` when they cannot be
    /// opened: the check then always says no.
    pub(crate) fn open(dir: &Path) -> Option<IndexFiles> {
        let data = File::open(dir.join("data.mdb")).ok()?;
        let lock = File::open(dir.join("lock.mdb")).ok()?;
        let lock_len = lock.metadata().ok()?.len();
        Some(IndexFiles {
            data,
            lock,
            lock_len,
        })
    }

    /// Whether the lock file and the bytes `range` of the data file are all in the page
    /// cache now.
    pub(crate) fn cached(&self, range: std::ops::Range<u64>) -> bool {
        in_cache(&self.lock, 0..self.lock_len) && in_cache(&self.data, range)
    }

    /// Whether the bytes `range` of `file` are all in the page cache now (for tests).
    #[cfg(test)]
    pub(crate) fn cached_file(file: &File, range: std::ops::Range<u64>) -> bool {
        in_cache(file, range)
    }

    /// Whether the bytes `range` of the data file are all in the page cache now.
    pub(crate) fn data_cached(&self, range: std::ops::Range<u64>) -> bool {
        in_cache(&self.data, range)
    }
}

/// Whether this kernel has `cachestat` (for tests: without it nothing is read on a
/// worker thread).
#[cfg(test)]
pub(crate) fn kernel_has_cachestat() -> bool {
    // SAFETY: an invalid fd: the kernel answers EBADF (or ENOSYS) without touching memory.
    let rc = unsafe { libc::syscall(SYS_CACHESTAT, -1, 0usize, 0usize, 0u32) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}

/// The system's page size in bytes (LMDB's page size too), looked up once per process.
pub(crate) fn page_size() -> u64 {
    page_size::get() as u64
}

/// Whether every page of `range` of `file` is in the page cache (pages past the end of the
/// file are not).
fn in_cache(file: &File, range: std::ops::Range<u64>) -> bool {
    if range.is_empty() {
        return true;
    }
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return false;
    }
    let page = page_size();
    let first = range.start / page;
    let pages = range.end.div_ceil(page) - first;
    let r = CachestatRange {
        off: first * page,
        len: pages * page,
    };
    let mut cs = Cachestat::default();
    // SAFETY: `r` and `cs` are live, properly laid out (the kernel's `cachestat_range` and
    // `cachestat`), the fd is open for the call, and flags must be 0.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &r as *const CachestatRange,
            &mut cs as *mut Cachestat,
            0u32,
        )
    };
    if rc != 0 {
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            UNSUPPORTED.store(true, Ordering::Relaxed);
        }
        return false;
    }
    cs.nr_cache >= pages
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    /// A file just written is in the page cache; bytes past its end are not; a file whose
    /// pages were dropped from the cache is not (when the kernel lets us drop them).
    #[test]
    fn the_page_cache_check_counts_pages_of_the_range() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data.mdb"), vec![1u8; 64 << 10]).unwrap();
        std::fs::write(dir.path().join("lock.mdb"), vec![2u8; 8 << 10]).unwrap();
        let f = super::IndexFiles::open(dir.path()).unwrap();
        if !super::kernel_has_cachestat() {
            // A kernel without cachestat: the check says no, which is safe.
            assert!(!f.cached(0..4096));
            return;
        }
        assert!(f.cached(0..(64 << 10)));
        assert!(f.cached(4096..(32 << 10)));
        assert!(!f.data_cached(0..(128 << 10)), "pages past the end counted");
    }
}
