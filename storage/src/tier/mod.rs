//! Tiering sealed blocks to an S3-compatible object store.
//!
//! - `../object_store.rs` (beside this folder; [`TierConfig`] is in `settings.rs`): the
//!   blocking [`ObjectStore`] trait an embedder implements (the server does, with aws-sdk-s3).
//! - `layout.rs`: object keys and the *heads* sidecar that makes a block object
//!   self-contained for rebuilding an index.
//! - `upload.rs`: how the tier thread uploads (its comment), and the tier's pieces of it
//!   (pending object deletions, an object's CRC by HEAD); the thread, its rounds and the
//!   commit that marks a block tiered are `Store`'s, in `store/tier.rs`.
//! - `read.rs`: reads of tiered records (one ranged GET per frame, read-ahead for queries,
//!   the range cache `cache.rs`), CRC-checked as local reads are.
//! - `refresh.rs`: [`RefreshReport`]; the index built from the object store alone
//!   (`--restore-from`, `--read-replica`) is `Store::tier_refresh` (`store/tier.rs`), as are
//!   label updates of tiered records.
//!
//! A tiered block keeps its state in the index (`BlockState::tiered`) and its records in
//! the chunks, so quotas and `max_age` count it and queries list it like a local one; only
//! payload reads differ. No engine lock is held across a network call.

mod cache;
pub(crate) mod layout;
mod read;
pub(crate) mod refresh;
pub(crate) mod upload;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use refresh::RefreshReport;

pub(crate) use layout::block_key;
pub(crate) use read::Access;

use crate::lock::{Mutex, Rank, RwLock};
use crate::object_store::ObjectError;
use crate::settings::TierConfig;
use cache::RangeCache;

/// Nice value of the threads that upload (the tier thread here; the object store's own
/// threads by [`lower_thread_priority`]): uploads are background work that must not take
/// CPU from writers on a small device.
const UPLOAD_NICE: libc::c_int = 10;

/// Lowers the calling thread's CPU priority to the uploads' (Linux: nice 10 for this
/// thread only). An embedder's [`ObjectStore`] calls it on the threads that send uploads.
/// Failure only costs priority, so it is logged, not returned.
pub fn lower_thread_priority() {
    // SAFETY: gettid and setpriority take no pointers; on Linux PRIO_PROCESS with a
    // thread id sets that thread's nice value.
    let rc = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, UPLOAD_NICE)
    };
    if rc != 0 {
        log::debug!(
            "could not lower an upload thread's priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The folder (in the data folder) of blocks whose sidecars must be uploaded again.
pub(crate) const DIRTY_DIR: &str = ".tier-dirty";

/// The tier's counters, for metrics and `/health`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TierStats {
    /// Where the tier points.
    pub target: String,
    /// False after a failed object store call, until one succeeds.
    pub available: bool,
    /// The last object store failure, if the store is unavailable.
    pub last_error: Option<String>,
    /// Sealed blocks that the buckets' settings say should be uploaded now.
    pub upload_queue: u64,
    pub uploaded_blocks: u64,
    pub uploaded_bytes: u64,
    pub upload_errors: u64,
    /// Ranged GETs of tiered records, and those that failed.
    pub gets: u64,
    pub get_errors: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_bytes: u64,
    /// Objects deleted (FIFO, retention, removals), and deletions waiting.
    pub deleted_objects: u64,
    pub pending_deletes: u64,
    /// Heads sidecars of tiered blocks waiting to be uploaded again (records removed or
    /// relabelled).
    pub pending_sidecars: u64,
    /// Blocks whose heads sidecar would be longer than [`crate::codec::heads::HEADS_MAX`]
    /// (their records' distinct label sets): kept local if not yet tiered, else their
    /// sidecar stays the last one uploaded. Since start.
    pub oversized_sidecars: u64,
    /// Whether this store uploads (false: a read replica).
    pub uploads_enabled: bool,
    /// A call has waited for the store's answer past what a healthy store takes
    /// ([`ObjectStore::stalled`]): why.
    pub stalled: Option<String>,
}

/// Where a tiered block's object is and what reading it needs.
#[derive(Debug, Clone)]
pub(crate) struct Tiered {
    pub key: String,
    pub base_ts: u64,
    pub len: u64,
    /// The entry the block belongs to (a query's read-ahead fetches that entry's next one).
    pub entry_id: u32,
}

/// The tier's shared state (one per store, in `Inner`).
pub(crate) struct Tier {
    pub(crate) cfg: TierConfig,
    /// Tiered blocks by id (ordered: a query's next block of an entry is the next id of
    /// that entry).
    pub(crate) blocks: RwLock<BTreeMap<u64, Tiered>>,
    /// Fetches of a query's next tiered block under way (block id → first byte and the
    /// thread fetching), at most [`read::PREFETCHES`] at once.
    pub(crate) prefetch: Mutex<HashMap<u64, read::Prefetch>>,
    /// Tiered blocks whose heads sidecar must be uploaded again (a record was removed):
    /// (bucket, entry, id).
    pub(crate) dirty: Mutex<BTreeSet<(String, String, u64)>>,
    /// Where `dirty` is kept across restarts: one file per block, named by its id, holding
    /// `bucket\nentry` (`<data>/.tier-dirty/`).
    pub(crate) dirty_dir: std::sync::OnceLock<std::path::PathBuf>,
    /// The settings text last uploaded per bucket (`<bucket>/settings` goes up when it
    /// changes, not with every block).
    pub(crate) settings_sent: Mutex<HashMap<String, String>>,
    /// The ETag of each tiered block's heads sidecar as last read (read replicas: a
    /// sidecar uploaded again after a removal or label update is read again).
    pub(crate) heads_seen: Mutex<HashMap<u64, String>>,
    /// Object keys to delete (blocks evicted, expired or removed).
    pub(crate) deletes: Mutex<Vec<String>>,
    pub(crate) cache: RangeCache,
    /// False when orphan objects must not be swept (an index rebuilt without the object
    /// store's sidecars would call every tiered block an orphan).
    pub(crate) sweep: AtomicBool,
    pub(crate) available: AtomicBool,
    pub(crate) last_error: Mutex<Option<String>>,
    pub(crate) uploaded_blocks: AtomicU64,
    pub(crate) uploaded_bytes: AtomicU64,
    pub(crate) upload_errors: AtomicU64,
    pub(crate) gets: AtomicU64,
    pub(crate) get_errors: AtomicU64,
    pub(crate) deleted: AtomicU64,
    /// Sidecars out of `dirty` whose upload is under way (counted as pending).
    pub(crate) sidecars_in_flight: AtomicU64,
    /// Blocks whose sidecar was too long ([`crate::codec::heads::HEADS_MAX`]): not offered
    /// for upload again until the next start.
    pub(crate) oversized: Mutex<HashSet<u64>>,
}

impl Tier {
    pub fn new(cfg: TierConfig) -> Tier {
        Tier {
            cache: RangeCache::new(cfg.cache_bytes),
            cfg,
            blocks: RwLock::new(Rank::TierState, BTreeMap::new()),
            prefetch: Mutex::new(Rank::TierState, HashMap::new()),
            dirty: Mutex::new(Rank::TierState, BTreeSet::new()),
            dirty_dir: std::sync::OnceLock::new(),
            settings_sent: Mutex::new(Rank::TierState, HashMap::new()),
            heads_seen: Mutex::new(Rank::TierState, HashMap::new()),
            deletes: Mutex::new(Rank::TierState, Vec::new()),
            sweep: AtomicBool::new(true),
            available: AtomicBool::new(true),
            last_error: Mutex::new(Rank::TierState, None),
            uploaded_blocks: AtomicU64::new(0),
            uploaded_bytes: AtomicU64::new(0),
            upload_errors: AtomicU64::new(0),
            gets: AtomicU64::new(0),
            get_errors: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            sidecars_in_flight: AtomicU64::new(0),
            oversized: Mutex::new(Rank::TierState, HashSet::new()),
        }
    }

    pub fn config(&self) -> &TierConfig {
        &self.cfg
    }

    pub fn key(&self, bucket: &str, entry: &str, id: u64, ext: &str) -> String {
        block_key(&self.cfg.prefix, bucket, entry, id, ext)
    }

    /// A block is now tiered (uploaded and committed, or found so at open).
    pub fn add(&self, id: u64, t: Tiered) {
        self.blocks.write().insert(id, t);
    }

    pub fn get(&self, id: u64) -> Option<Tiered> {
        self.blocks.read().get(&id).cloned()
    }

    pub fn is_tiered(&self, id: u64) -> bool {
        self.blocks.read().contains_key(&id)
    }

    pub fn tiered_ids(&self) -> Vec<u64> {
        self.blocks.read().keys().copied().collect()
    }

    /// A tiered block was deleted from the index: its objects go too (in the background).
    pub fn forget(&self, bucket: &str, entry: &str, id: u64) {
        let was = self.blocks.write().remove(&id);
        self.cache.forget(id);
        drop(self.prefetch.lock().remove(&id));
        self.dirty.lock().retain(|(_, _, d)| *d != id);
        self.oversized.lock().remove(&id);
        self.clean(id);
        if was.is_some() && self.cfg.upload {
            let mut d = self.deletes.lock();
            d.push(self.key(bucket, entry, id, "heads"));
            d.push(self.key(bucket, entry, id, "blk"));
        }
    }

    /// Loads the blocks whose sidecars still have to be uploaded again (a removal before a
    /// restart) from `<data>/.tier-dirty/`.
    pub fn load_dirty(&self, root: &std::path::Path) {
        let dir = root.join(DIRTY_DIR);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            log::warn!("cannot create {dir:?}: {e}");
        }
        if let Ok(rd) = std::fs::read_dir(&dir) {
            let mut set = self.dirty.lock();
            for d in rd.flatten() {
                let name = d.file_name().to_string_lossy().into_owned();
                let text = std::fs::read_to_string(d.path()).unwrap_or_default();
                match (u64::from_str_radix(&name, 16), text.split_once('\n')) {
                    (Ok(id), Some((b, e))) => {
                        set.insert((b.to_string(), e.to_string(), id));
                    }
                    _ => {
                        let _ = std::fs::remove_file(d.path());
                    }
                }
            }
        }
        let _ = self.dirty_dir.set(dir);
    }

    /// A record of tiered block `id` was removed or relabelled: its sidecar is uploaded
    /// again (noted on disk first, so a restart does not forget it).
    pub fn mark_dirty(&self, bucket: &str, entry: &str, id: u64) {
        if !self.cfg.upload {
            return;
        }
        // The note and the set change together (under the set's lock), so `clean` cannot
        // delete a note written after it looked at the set.
        let mut set = self.dirty.lock();
        if let Some(dir) = self.dirty_dir.get() {
            let path = dir.join(format!("{id:016x}"));
            if let Err(e) = std::fs::write(&path, format!("{bucket}\n{entry}")) {
                log::warn!("cannot note {path:?} (the sidecar is still uploaded again unless the process stops first): {e}");
            }
        }
        set.insert((bucket.to_string(), entry.to_string(), id));
    }

    /// The sidecar of `id` was uploaded again (or its block is gone): forgets the note,
    /// unless a removal marked the block again meanwhile.
    pub fn clean(&self, id: u64) {
        let set = self.dirty.lock();
        if set.iter().any(|(_, _, d)| *d == id) {
            return;
        }
        if let Some(dir) = self.dirty_dir.get() {
            let _ = std::fs::remove_file(dir.join(format!("{id:016x}")));
        }
        drop(set);
    }

    pub(crate) fn ok(&self) {
        if !self.available.swap(true, Ordering::AcqRel) {
            log::info!(
                "the object store {} is available again",
                self.cfg.store.describe()
            );
        }
        *self.last_error.lock() = None;
    }

    pub(crate) fn failed(&self, e: &ObjectError) {
        let outage = matches!(e, ObjectError::Unavailable(_) | ObjectError::Tls(_));
        self.failed_as(e, outage);
    }

    /// A failed call: its error is the tier's last (`/health`'s `tier.error`), and when it
    /// is an `outage` the tier is unavailable until a call succeeds ([`Tier::ok`]).
    /// [`Tier::failed`] takes an outage from the error's kind; a read that answers 503
    /// `tier_unavailable` ("retry once it is back") passes `true` whatever the store
    /// answered, so that `/health` says what the read said.
    pub(crate) fn failed_as(&self, e: &ObjectError, outage: bool) {
        if outage && self.available.swap(false, Ordering::AcqRel) {
            log::warn!("the object store is unavailable: {e}");
        }
        *self.last_error.lock() = Some(e.to_string());
    }

    pub fn forbid_sweep(&self) {
        self.sweep.store(false, Ordering::Release);
    }

    pub fn may_sweep(&self) -> bool {
        self.sweep.load(Ordering::Acquire)
    }

    pub fn is_available(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    /// Empties the range cache (benchmarks and tests: the next read is cold).
    pub fn clear_cache(&self) {
        self.prefetch.lock().clear();
        self.cache.clear();
    }

    pub fn stats(&self) -> TierStats {
        // One leaf lock at a time (a struct expression would hold both guards).
        let last_error = self.last_error.lock().clone();
        let pending_deletes = self.deletes.lock().len() as u64;
        let pending_sidecars =
            self.dirty.lock().len() as u64 + self.sidecars_in_flight.load(Ordering::Acquire);
        let oversized_sidecars = self.oversized.lock().len() as u64;
        TierStats {
            target: self.cfg.store.describe(),
            available: self.is_available(),
            last_error,
            upload_queue: 0,
            uploaded_blocks: self.uploaded_blocks.load(Ordering::Relaxed),
            uploaded_bytes: self.uploaded_bytes.load(Ordering::Relaxed),
            upload_errors: self.upload_errors.load(Ordering::Relaxed),
            gets: self.gets.load(Ordering::Relaxed),
            get_errors: self.get_errors.load(Ordering::Relaxed),
            cache_hits: self.cache.hits(),
            cache_misses: self.cache.misses(),
            cache_bytes: self.cache.bytes(),
            deleted_objects: self.deleted.load(Ordering::Relaxed),
            pending_deletes,
            pending_sidecars,
            oversized_sidecars,
            uploads_enabled: self.cfg.upload,
            stalled: self.cfg.store.stalled(),
        }
    }
}
