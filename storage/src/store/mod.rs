//! The public face of the engine: [`Store`], a thin facade over the engine's modules.
//!
//! State lives in three places: block files (the truth), the LMDB index (a rebuildable
//! cache of where records are), and in-memory state (`Bucket`, `Entry`, built by
//! `recover.rs` at open and kept in step with every commit). `Store`'s methods are grouped
//! one file each in this folder (`buckets.rs`, `write.rs`, `read.rs`, `query.rs`, `remove.rs`,
//! `labels.rs`, `quota.rs`, `feed.rs`, `tier.rs`); the modules they call sit beside this
//! folder and never reach back into `Store` or [`Inner`]. Locks are ranked (`lock.rs`); the
//! order is written in `docs/architecture.md`.

mod attachments;
mod buckets;
mod compress;
mod feed;
mod labels;
mod lifecycle;
mod query;
mod quota;
mod read;
mod remove;
mod rename;
mod spool;
mod tier;
mod write;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::bucket::Bucket;
use crate::commit::{Change, Committer};
use crate::error::{Error, Result, WriteError};
use crate::feed::Feed;
use crate::files;
use crate::files::FileCache;
use crate::index::Index;
use crate::lock::{Mutex, Rank, RwLock};
use crate::quota::FreeSpace;
use crate::read::Sources;
use crate::record::RecoveryReport;
use crate::recover::Loaded;
use crate::settings::{StoreOptions, SyncPolicy};
use crate::tier::TierStats;
use crate::tier::{Tier, Tiered};
use crate::trash::Trash;

pub use attachments::ATTACHMENT_KEY_LABEL;
pub use query::{QueryItem, QueryIter, ScanBound};
pub use spool::Spool;

/// What [`Store::on_commit`] calls after each commit: given the ids of the entries the
/// commit put records into.
pub type CommitListener = dyn Fn(&[u32]) + Send + Sync;

/// What [`Store::on_attachments`] calls after each change of an entry's attachments:
/// given the bucket and the entry.
pub type AttachmentListener = dyn Fn(&str, &str) + Send + Sync;

/// An opened data folder. Cheap to clone; share it between threads.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub path: PathBuf,
    pub opts: StoreOptions,
    pub index: Index,
    /// The change feed, beside the index in its environment.
    pub feed: Feed,
    pub committer: Committer,
    pub files: FileCache,
    pub trash: Trash,
    pub free: FreeSpace,
    buckets: RwLock<BTreeMap<String, Arc<Bucket>>>,
    next_block: AtomicU64,
    next_entry: AtomicU32,
    /// Serialises bucket and entry creation and removal.
    structure: Mutex<()>,
    report: RecoveryReport,
    evicted_blocks: AtomicU64,
    expired_blocks: AtomicU64,
    closing: AtomicBool,
    /// `index/ballast` was given up (or could not be made) for want of room: the retention
    /// thread makes it again once there is ([`Inner::keep_ballast`]).
    ballast_owed: AtomicBool,
    syncer: Mutex<Option<std::thread::JoinHandle<()>>>,
    keeper: Mutex<Option<std::thread::JoinHandle<()>>>,
    tier_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Tiering to an object store (`tier/`), if configured.
    pub tier: Option<Tier>,
    /// Told of every change of an entry's attachments ([`Store::on_attachments`]).
    pub attachment_listener: std::sync::OnceLock<Box<AttachmentListener>>,
    _lock: crate::recover::FolderLock,
}

impl Inner {
    fn new(loaded: Loaded, opts: StoreOptions) -> Inner {
        let tier = opts.tier.clone().map(Tier::new);
        if let Some(t) = &tier {
            t.load_dirty(&loaded.path);
            for b in loaded.buckets.values() {
                for e in b.entries() {
                    let st = e.lock();
                    for id in st.block_ids().collect::<Vec<_>>() {
                        if let Some(m) = st.block(id).filter(|m| m.tiered) {
                            t.add(
                                id,
                                Tiered {
                                    key: t.key(b.name(), e.name(), id, "blk"),
                                    base_ts: m.base_ts,
                                    len: m.indexed_len,
                                    entry_id: e.id(),
                                },
                            );
                        }
                    }
                }
            }
        }
        Inner {
            tier,
            tier_thread: Mutex::new(Rank::Syncer, None),
            committer: Committer::new(opts.sync),
            files: FileCache::new(opts.max_open_files.unwrap_or_else(files::default_budget)),
            free: FreeSpace::new(),
            path: loaded.path,
            opts,
            feed: Feed::new(loaded.index.db()),
            index: loaded.index,
            trash: loaded.trash,
            buckets: RwLock::new(Rank::Buckets, loaded.buckets),
            next_block: AtomicU64::new(loaded.next_block),
            next_entry: AtomicU32::new(loaded.next_entry),
            structure: Mutex::new(Rank::Structure, ()),
            report: loaded.report,
            evicted_blocks: AtomicU64::new(0),
            expired_blocks: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            ballast_owed: AtomicBool::new(loaded.ballast_owed),
            syncer: Mutex::new(Rank::Syncer, None),
            keeper: Mutex::new(Rank::Syncer, None),
            attachment_listener: std::sync::OnceLock::new(),
            _lock: loaded.lock,
        }
    }

    pub fn new_block_id(&self) -> u64 {
        self.next_block.fetch_add(1, Ordering::Relaxed)
    }

    /// The id the next new block will get (no block has an id this high yet).
    pub fn peek_next_block(&self) -> u64 {
        self.next_block.load(Ordering::Relaxed)
    }

    /// Block ids at least this high are new (restore and replicas adopt blocks by id).
    pub fn bump_next_block(&self, at_least: u64) {
        self.next_block.fetch_max(at_least, Ordering::Relaxed);
    }

    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    pub fn set_tier_thread(&self, handle: std::thread::JoinHandle<()>) {
        *self.tier_thread.lock() = Some(handle);
    }

    pub fn note_evicted(&self) {
        self.evicted_blocks.fetch_add(1, Ordering::Relaxed);
    }

    pub fn note_expired(&self) {
        self.expired_blocks.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether folder changes must be synced (`SyncPolicy::Always`).
    pub fn sync_dirs(&self) -> bool {
        self.opts.sync == SyncPolicy::Always
    }

    /// Commits `change` to the index (and the change feed) through the group committer.
    pub fn commit(&self, change: Change) -> Result<()> {
        // A removal is what frees a full disk, and its index commit may need room too (LMDB
        // writes new pages before it frees old ones): one that fails for want of space gets
        // the ballast's (`ballast.rs`), once. Before, removing data on a full disk answered
        // 507 "remove data" (kill -9 probe, R2).
        let again =
            (change.only_removes() && crate::ballast::held(&self.path)).then(|| change.clone());
        let full = |e| crate::quota::type_full_disk(e, &self.path);
        match (
            self.committer
                .commit(&self.index, &self.feed, change)
                .map_err(full),
            again,
        ) {
            (Err(e @ Error::Write(WriteError::DiskFull { .. })), Some(again))
                if crate::ballast::release(&self.path) =>
            {
                log::warn!("a removal met a full disk ({e}): deleted the ballast (index/ballast) to give its index commit room; it is made again when the disk has room");
                self.ballast_owed.store(true, Ordering::Relaxed);
                self.committer
                    .commit(&self.index, &self.feed, again)
                    .map_err(full)
            }
            (r, _) => r,
        }
    }

    /// Makes `index/ballast` again when it was given up and the disk has room now (one
    /// `statvfs` a call while it is owed, nothing otherwise).
    pub(crate) fn keep_ballast(&self) {
        if !self.ballast_owed.load(Ordering::Relaxed) {
            return;
        }
        match crate::ballast::ensure(&self.path, self.opts.free_space_reserve) {
            crate::ballast::Ensured::NoRoom => {}
            crate::ballast::Ensured::Held => {
                log::info!("the disk has room again: made the ballast (index/ballast) for repairs on a full disk");
                self.ballast_owed.store(false, Ordering::Relaxed);
            }
            crate::ballast::Ensured::Failed => {
                self.ballast_owed.store(false, Ordering::Relaxed);
            }
        }
    }

    /// Where record payloads are read from.
    pub fn sources(&self) -> Sources<'_> {
        Sources {
            files: &self.files,
            tier: self.tier.as_ref(),
        }
    }

    pub(crate) fn buckets(&self) -> Vec<Arc<Bucket>> {
        self.buckets.read().values().cloned().collect()
    }
}

/// Totals of the whole store, for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub bucket_count: u64,
    pub record_count: u64,
    /// Bytes of block files on disk.
    pub disk_bytes: u64,
    /// Blocks deleted by FIFO quotas since open.
    pub evicted_blocks: u64,
    /// Blocks deleted by age-based retention (`max_age`) since open.
    pub expired_blocks: u64,
    /// Free bytes on the data folder's file system.
    pub free_bytes: u64,
}

impl Store {
    /// Opens (creating if needed) a data folder. Checks and repairs what a crash may have
    /// left (see [`Store::recovery_report`]); rebuilds the index if it is missing or unusable.
    pub fn open(path: impl AsRef<Path>, opts: StoreOptions) -> Result<Store> {
        let loaded = crate::recover::open(path.as_ref(), &opts)?;
        let inner = Arc::new(Inner::new(loaded, opts));
        Store {
            inner: inner.clone(),
        }
        .feed_load()?;
        Store {
            inner: inner.clone(),
        }
        .load_resume_points();
        if let SyncPolicy::Periodic(every) = inner.opts.sync {
            let weak: Weak<Inner> = Arc::downgrade(&inner);
            let handle = std::thread::Builder::new()
                .name("tsblob-sync".into())
                .spawn(move || loop {
                    std::thread::sleep(every);
                    let Some(inner) = weak.upgrade() else { return };
                    if inner.closing.load(Ordering::Relaxed) {
                        return;
                    }
                    if let Err(e) = inner.committer.sync_now(&inner.index) {
                        log::error!("periodic sync failed: {e}");
                    }
                })
                .map_err(|e| Error::io("starting the sync thread", e))?;
            *inner.syncer.lock() = Some(handle);
        }
        // Lifecycle rules (max_age included) in the background: writes never wait on them.
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        let handle = std::thread::Builder::new()
            .name("tsblob-retention".into())
            .spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_millis(
                    crate::quota::EXPIRY_EVERY_MS,
                ));
                let Some(inner) = weak.upgrade() else { return };
                if inner.closing.load(Ordering::Relaxed) {
                    return;
                }
                inner.keep_ballast();
                Store { inner }.lifecycle_tick();
            })
            .map_err(|e| Error::io("starting the retention thread", e))?;
        *inner.keeper.lock() = Some(handle);
        let store = Store { inner };
        if let Some(t) = &store.inner.tier {
            if store.inner.report.rebuilt.is_some() && t.config().upload {
                // A rebuilt index knows only local blocks: tiered ones come back from the
                // object store's sidecars, and until they do no object may be swept as an
                // orphan.
                match store.tier_refresh() {
                    Ok(r) => log::warn!(
                        "index rebuilt: adopted {} tiered blocks ({} records) from {}",
                        r.adopted_blocks,
                        r.adopted_records,
                        t.config().store.describe()
                    ),
                    Err(e) => {
                        log::error!("index rebuilt, but the object store could not be read ({e}): tiered records are missing until a restart with the store reachable");
                        t.forbid_sweep();
                    }
                }
            }
        }
        store.start_tier_thread()?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn options(&self) -> &StoreOptions {
        &self.inner.opts
    }

    /// What opening found and repaired.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.report
    }

    /// Calls `listener` after every successful index commit (a write, a batch, a label
    /// update, a removal...), so that a reader can wait for new records without polling:
    /// a query started after the call sees what that commit added. Called on the
    /// committing thread, holding no lock of the committer but possibly its caller's entry
    /// lock: a listener must be cheap and non-blocking (bump a counter, wake a waiter) and
    /// must never call back into the store. There is no unregistering: register one
    /// listener that fans out. It is given the ids of the entries the commit put records
    /// into (new records or label updates; sorted, each once, empty when it put none), so
    /// that it wakes only the readers of those entries ([`QueryIter::entry_ids`]
    /// names what a query reads).
    pub fn on_commit(&self, listener: Box<CommitListener>) {
        self.inner.committer.on_commit(Arc::from(listener));
    }

    /// Calls `listener` with the bucket and entry after every change of an entry's
    /// attachments (a write, a removal of some), once the change is saved, holding no lock
    /// of the store: it must be cheap and non-blocking (replication senders queue the
    /// entry). One listener per store: a second registration is refused (`false`).
    pub fn on_attachments(&self, listener: Box<AttachmentListener>) -> bool {
        self.inner.attachment_listener.set(listener).is_ok()
    }

    /// The object store this store is a read-only replica of (a tier that does not
    /// upload), if it is one: its server refuses writes.
    pub fn read_replica_of(&self) -> Option<String> {
        self.inner
            .tier
            .as_ref()
            .filter(|t| !t.config().upload)
            .map(|t| t.config().store.describe())
    }

    /// The tier's state and counters (`None` without a tier).
    pub fn tier_stats(&self) -> Option<TierStats> {
        let mut stats = self.inner.tier.as_ref().map(Tier::stats)?;
        if stats.uploads_enabled {
            stats.upload_queue = self.upload_candidates().len() as u64;
        }
        Some(stats)
    }

    /// Empties the cache of tiered block ranges, so the next read of a tiered record goes to
    /// the object store (benchmarks of cold reads).
    pub fn tier_clear_cache(&self) {
        if let Some(t) = &self.inner.tier {
            t.clear_cache();
        }
    }

    /// Forces everything written so far to stable storage.
    pub fn sync(&self) -> Result<()> {
        self.inner.committer.sync_now(&self.inner.index)
    }

    /// Totals for metrics. Takes each entry's lock in turn, holding no map lock meanwhile
    /// (a map lock held across an entry lock deadlocked with `remove_entry`).
    /// Whether writes are refused for disk space now (`DiskFull`): the data folder's free
    /// space is below the free-space reserve (`StoreOptions::free_space_reserve`), or below
    /// what the last refused write needed on top of it, until a write gets through or space
    /// is freed. Buckets with a FIFO quota may still make room. The free space is a figure
    /// at most 20 ms old.
    pub fn disk_short(&self) -> bool {
        self.inner
            .free
            .short(&self.inner.path, self.inner.opts.free_space_reserve)
    }

    /// Whether the last index commit failed for want of room in the LMDB map
    /// (`StoreOptions::map_size`): writes are refused with `IndexFull` until one commits.
    pub fn index_full(&self) -> bool {
        self.inner.committer.index_full()
    }

    pub fn stats(&self) -> StoreStats {
        let buckets = self.inner.buckets();
        let mut s = StoreStats {
            bucket_count: buckets.len() as u64,
            evicted_blocks: self.inner.evicted_blocks.load(Ordering::Relaxed),
            expired_blocks: self.inner.expired_blocks.load(Ordering::Relaxed),
            free_bytes: crate::quota::free_space(&self.inner.path).unwrap_or(0),
            ..StoreStats::default()
        };
        for b in buckets {
            s.disk_bytes += b.size();
            for e in b.entries() {
                s.record_count += e.lock().record_count();
            }
        }
        s
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Relaxed);
        if let Err(e) = Store::save_resume_points(self) {
            log::error!(
                "lifecycle resume points not saved ({e}): rules start over after the restart"
            );
        }
        if self.opts.sync != SyncPolicy::Never {
            if let Err(e) = self.committer.sync_now(&self.index) {
                log::error!("final sync failed: {e}");
            }
        }
    }
}

/// A store in a fresh folder (no free-space reserve, a 1 GiB index map) with bucket `b`:
/// the engine's unit tests' usual start.
#[cfg(test)]
pub(crate) fn test_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let opts = StoreOptions {
        free_space_reserve: 0,
        map_size: 1 << 30,
        ..StoreOptions::default()
    };
    let s = Store::open(dir.path(), opts).expect("a store");
    s.create_bucket("b", crate::settings::BucketSettings::default())
        .expect("bucket b");
    (dir, s)
}
