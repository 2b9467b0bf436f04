//! One budget of open block files for the whole store.
//!
//! Every block handle, for reading, appending or flagging, comes from this cache, keyed by
//! block id (ids are unique across the store). It holds at most `budget` handles; past
//! that, the least recently used quarter is dropped (a handle still in use elsewhere stays
//! open until its user lets go, so the bound is budget plus operations in flight). The
//! budget defaults to half of what `RLIMIT_NOFILE` leaves after a margin, so a store with
//! 10,000 entries works under `ulimit -n 1024`.

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use crate::block::open_block;
use crate::lock::{Mutex, Rank};
use crate::Result;

pub(crate) struct FileCache {
    map: Mutex<Lru>,
    budget: usize,
}

struct Lru {
    clock: u64,
    /// Block id → (handle, the block's base timestamp, last use).
    map: HashMap<u64, (Arc<File>, u64, u64)>,
}

impl FileCache {
    pub fn new(budget: usize) -> FileCache {
        FileCache {
            map: Mutex::new(
                Rank::Files,
                Lru {
                    clock: 0,
                    map: HashMap::new(),
                },
            ),
            budget: budget.max(8),
        }
    }

    /// The handle of a block and its base timestamp, opened on first use.
    pub fn get(&self, id: u64, path: impl FnOnce() -> PathBuf) -> Result<(Arc<File>, u64)> {
        {
            let mut lru = self.map.lock();
            lru.clock += 1;
            let now = lru.clock;
            if let Some((f, base, used)) = lru.map.get_mut(&id) {
                *used = now;
                return Ok((f.clone(), *base));
            }
        }
        let (file, base_ts, _) = open_block(&path())?;
        self.insert(id, file.clone(), base_ts);
        Ok((file, base_ts))
    }

    /// Keeps a handle just created (a new block).
    pub fn insert(&self, id: u64, file: Arc<File>, base_ts: u64) {
        let mut lru = self.map.lock();
        if lru.map.len() >= self.budget {
            let mut stamps: Vec<u64> = lru.map.values().map(|v| v.2).collect();
            let cut = stamps.len() / 4;
            let (_, nth, _) = stamps.select_nth_unstable(cut);
            let limit = *nth;
            lru.map.retain(|_, v| v.2 > limit);
        }
        lru.clock += 1;
        let now = lru.clock;
        lru.map.insert(id, (file, base_ts, now));
    }

    /// Drops a deleted block's handle: an unlinked file's space is freed only when its
    /// last descriptor closes.
    pub fn forget(&self, id: u64) {
        self.map.lock().map.remove(&id);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.lock().map.len()
    }
}

/// The default budget: half of the soft `RLIMIT_NOFILE` after 128 descriptors kept for
/// the index, sockets and spools; at least 16, at most 4,096.
pub(crate) fn default_budget() -> usize {
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
    (soft.saturating_sub(128) / 2).clamp(16, 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_at_most_its_budget() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(8);
        for id in 0..40u64 {
            let path = dir.path().join(format!("{id}"));
            let (f, _) = crate::block::create_block(&path, id, 1, "e").expect("create");
            cache.insert(id, f, 1);
            assert!(cache.len() <= 8, "{} handles", cache.len());
        }
        // An evicted handle reopens on demand.
        let (_, base) = cache.get(0, || dir.path().join("0")).expect("reopen");
        assert_eq!(base, 1);
    }
}
