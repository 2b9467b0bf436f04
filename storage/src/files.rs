//! One budget of open block files for the whole store.
//!
//! Every block handle, for reading, appending or flagging, comes from this cache, keyed by
//! block id (ids are unique across the store). It holds at most `budget` handles; past
//! that, the least recently used quarter is dropped (a handle still in use elsewhere stays
//! open until its user lets go, so the bound is budget plus operations in flight). The
//! budget defaults to half of what `RLIMIT_NOFILE` leaves after a margin, so a store with
//! 10,000 entries works under `ulimit -n 1024`.
//!
//! Also the engine's one helper to make a folder's changes durable (`sync_dir`).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::block::{open_block, OpenedBlock};
use crate::error::{Error, Result};
use crate::lock::{Rank, RwLock};

/// A block's open handle and its base timestamp, from [`FileCache::get`].
pub(crate) struct CachedBlock {
    pub file: Arc<File>,
    pub base_ts: u64,
}

pub(crate) struct FileCache {
    /// Readers (every record read) share the lock; a hit only bumps its atomic stamp.
    map: RwLock<HashMap<u64, Slot>>,
    clock: AtomicU64,
    budget: usize,
    /// How many blocks were forgotten (deleted) so far ([`FileCache::epoch`]).
    forgotten: AtomicU64,
}

/// A cached handle, the block's base timestamp, and when it was last used.
struct Slot {
    file: Arc<File>,
    base_ts: u64,
    used: AtomicU64,
}

impl FileCache {
    pub fn new(budget: usize) -> FileCache {
        FileCache {
            map: RwLock::new(Rank::Files, HashMap::new()),
            clock: AtomicU64::new(0),
            budget: budget.max(8),
            forgotten: AtomicU64::new(0),
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// The handle of a block and its base timestamp, opened on first use.
    pub fn get(&self, id: u64, path: impl FnOnce() -> PathBuf) -> Result<CachedBlock> {
        if let Some(slot) = self.map.read().get(&id) {
            slot.used.store(self.tick(), Ordering::Relaxed);
            return Ok(CachedBlock {
                file: slot.file.clone(),
                base_ts: slot.base_ts,
            });
        }
        let OpenedBlock { file, base_ts, .. } = open_block(&path())?;
        self.insert(id, file.clone(), base_ts);
        Ok(CachedBlock { file, base_ts })
    }

    /// The handle of a block if it is open already (no `open`: it may wait on the disk).
    pub fn peek(&self, id: u64) -> Option<CachedBlock> {
        let map = self.map.read();
        let slot = map.get(&id)?;
        slot.used.store(self.tick(), Ordering::Relaxed);
        Some(CachedBlock {
            file: slot.file.clone(),
            base_ts: slot.base_ts,
        })
    }

    /// Keeps a handle just created (a new block).
    pub fn insert(&self, id: u64, file: Arc<File>, base_ts: u64) {
        let now = self.tick();
        let mut map = self.map.write();
        if map.len() >= self.budget {
            let mut stamps: Vec<u64> = map
                .values()
                .map(|v| v.used.load(Ordering::Relaxed))
                .collect();
            let cut = stamps.len() / 4;
            let (_, nth, _) = stamps.select_nth_unstable(cut);
            let limit = *nth;
            map.retain(|_, v| v.used.load(Ordering::Relaxed) > limit);
        }
        map.insert(
            id,
            Slot {
                file,
                base_ts,
                used: AtomicU64::new(now),
            },
        );
    }

    /// Drops a deleted block's handle: an unlinked file's space is freed only when its
    /// last descriptor closes.
    pub fn forget(&self, id: u64) {
        self.map.write().remove(&id);
        self.forgotten.fetch_add(1, Ordering::Release);
    }

    /// Changes whenever a block is forgotten (every deletion of a block goes through
    /// [`FileCache::forget`]). A reader of many records that took a handle from
    /// [`FileCache::get`] after reading the epoch may keep using it for that block while
    /// the epoch is unchanged: the block was not deleted since, and [`FileCache::get`]
    /// would hand out the same handle (an LRU drop of it from the cache does not change
    /// the file). One atomic load, not the map's lock, a hash and the shared LRU clock.
    pub fn epoch(&self) -> u64 {
        self.forgotten.load(Ordering::Acquire)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.read().len()
    }
}

/// Descriptors kept outside block files: the index, listeners, sockets, spools. The
/// server's default connection cap leaves them too.
pub const RESERVED_DESCRIPTORS: usize = 128;

/// The default budget: half of the soft `RLIMIT_NOFILE` after [`RESERVED_DESCRIPTORS`] kept for
/// the index, sockets and spools; at least 16, at most 4,096.
pub fn default_budget() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out-parameter.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur as usize
    } else {
        1024
    };
    (soft.saturating_sub(RESERVED_DESCRIPTORS) / 2).clamp(16, 4096)
}

/// Makes a folder's entries (files created, renamed or removed in it) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(format!("syncing folder {dir:?}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readers keep a block's handle while the epoch stands still: every forget (a
    /// deleted block) must move it, and a lookup must not.
    #[test]
    fn a_forgotten_block_moves_the_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(8);
        let f = Arc::new(File::create(dir.path().join("x")).unwrap());
        cache.insert(1, f, 0);
        let e0 = cache.epoch();
        assert!(cache.peek(1).is_some());
        assert_eq!(cache.epoch(), e0);
        cache.forget(1);
        assert_ne!(cache.epoch(), e0);
        let e1 = cache.epoch();
        cache.forget(2); // not cached: still a deletion
        assert_ne!(cache.epoch(), e1);
    }

    #[test]
    fn holds_at_most_its_budget() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(8);
        for id in 0..40u64 {
            let path = dir.path().join(format!("{id}"));
            let f = crate::block::create_block(&path, id, 1, "e")
                .expect("create")
                .file;
            cache.insert(id, f, 1);
            assert!(cache.len() <= 8, "{} handles", cache.len());
        }
        // An evicted handle reopens on demand.
        let base = cache
            .get(0, || dir.path().join("0"))
            .expect("reopen")
            .base_ts;
        assert_eq!(base, 1);
    }
}
