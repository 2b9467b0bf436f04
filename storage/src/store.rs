//! The public face of the engine: [`Store`], buckets and entries.
//!
//! State lives in three places: block files (the truth), the LMDB index (a rebuildable
//! cache of where records are), and in-memory maps of buckets, entries and block metadata
//! (loaded at open, kept in step with every commit). Writes, reads and removals live in
//! `write.rs`, `read.rs` and `remove.rs`.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use crate::block::{block_path, open_block};
use crate::index::{entry_key, BlockMeta, Index};
use crate::names::{entry_dir_name, validate_bucket_name, validate_entry_name};
use crate::sync::{Change, Committer, Op};
use crate::*;

pub(crate) const INDEX_DIR: &str = "index";
pub(crate) const LOCK_FILE: &str = "tsblob.lock";
pub(crate) const SETTINGS_FILE: &str = "settings";

/// An opened data folder. Cheap to clone; share it between threads.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub path: PathBuf,
    pub opts: StoreOptions,
    pub index: Index,
    pub committer: Committer,
    pub buckets: RwLock<BTreeMap<String, Arc<Bucket>>>,
    pub next_block: AtomicU64,
    pub next_entry: AtomicU32,
    /// Serialises entry creation (ids) and bucket creation/removal.
    pub create_lock: Mutex<()>,
    pub report: RecoveryReport,
    pub evicted_blocks: AtomicU64,
    /// Free bytes of the data folder's file system as last measured, when, and what was
    /// written since: `statvfs` runs at most every few milliseconds, not on every write.
    pub free_cache: Mutex<FreeCache>,
    pub closing: AtomicBool,
    pub syncer: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub _lock: File,
}

pub(crate) struct Bucket {
    pub name: String,
    pub dir: PathBuf,
    pub settings: RwLock<BucketSettings>,
    pub entries: RwLock<BTreeMap<String, Arc<Entry>>>,
    /// Bytes of block files, what the quota counts.
    pub size: AtomicU64,
    /// Bytes promised to writes in flight, so concurrent writers cannot overshoot a quota.
    pub reserved: AtomicU64,
    pub evict_lock: Mutex<()>,
    pub evicted: AtomicU64,
    pub removed: AtomicBool,
}

pub(crate) struct Entry {
    pub id: u32,
    pub name: String,
    pub dir: PathBuf,
    pub state: Mutex<EntryState>,
    /// Open block files for reading: id → (file, base ts).
    pub files: RwLock<HashMap<u64, (Arc<File>, u64)>>,
}

pub(crate) struct EntryState {
    pub blocks: BTreeMap<u64, BlockMeta>,
    pub active: Option<Active>,
    pub last_auto_ts: u64,
    /// No record of the entry has a larger timestamp (`None`: the entry has never held
    /// one). Conservative: removals do not lower it. A timestamp above it needs no
    /// duplicate check in the index, which makes in-order writes skip an LMDB lookup.
    pub ceiling: Option<u64>,
    pub removed: bool,
}

pub(crate) struct FreeCache {
    pub measured: Option<std::time::Instant>,
    pub free: u64,
    pub written_since: u64,
}

/// The block an entry appends to.
pub(crate) struct Active {
    pub id: u64,
    pub file: Arc<File>,
    pub len: u64,
    pub base_ts: u64,
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
    /// Free bytes on the data folder's file system.
    pub free_bytes: u64,
}

impl Entry {
    pub fn new(id: u32, name: &str, bucket_dir: &Path) -> Entry {
        Entry {
            id,
            name: name.to_string(),
            dir: bucket_dir.join(entry_dir_name(name)),
            state: Mutex::new(EntryState {
                blocks: BTreeMap::new(),
                active: None,
                last_auto_ts: 0,
                ceiling: None,
                removed: false,
            }),
            files: RwLock::new(HashMap::new()),
        }
    }

    /// Locks the entry's state for a write; an entry removed meanwhile is not found.
    pub fn lock_live(&self, bucket: &str) -> Result<parking_lot::MutexGuard<'_, EntryState>> {
        let st = self.state.lock();
        if st.removed {
            return Err(NotFound::Entry {
                bucket: bucket.into(),
                entry: self.name.clone(),
            }
            .into());
        }
        Ok(st)
    }

    /// A read handle on a block, opened on first use and cached.
    pub fn file(&self, block_id: u64) -> Result<(Arc<File>, u64)> {
        if let Some(f) = self.files.read().get(&block_id) {
            return Ok(f.clone());
        }
        let (file, base_ts, _) = open_block(&block_path(&self.dir, block_id))?;
        let mut files = self.files.write();
        if files.len() >= 512 {
            files.clear(); // a crude bound on open descriptors; handles reopen on demand
        }
        files.insert(block_id, (file.clone(), base_ts));
        Ok((file, base_ts))
    }

    pub fn info(&self, index: &Index) -> Result<EntryInfo> {
        let (record_count, size, block_count) = {
            let st = self.state.lock();
            let n = st.blocks.values().map(|b| b.records).sum();
            let s = st.blocks.values().map(|b| b.indexed_len).sum();
            (n, s, st.blocks.len() as u64)
        };
        let txn = index.read_txn()?;
        Ok(EntryInfo {
            name: self.name.clone(),
            record_count,
            size,
            block_count,
            oldest: index.first(&txn, self.id)?.map(|(ts, _)| ts),
            latest: index.last(&txn, self.id)?.map(|(ts, _)| ts),
        })
    }
}

impl Bucket {
    pub fn new(name: &str, dir: PathBuf, settings: BucketSettings) -> Bucket {
        Bucket {
            name: name.to_string(),
            dir,
            settings: RwLock::new(settings),
            entries: RwLock::new(BTreeMap::new()),
            size: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            evict_lock: Mutex::new(()),
            evicted: AtomicU64::new(0),
            removed: AtomicBool::new(false),
        }
    }

    fn info(&self, index: &Index) -> Result<BucketInfo> {
        let entries: Vec<Arc<Entry>> = self.entries.read().values().cloned().collect();
        let mut info = BucketInfo {
            name: self.name.clone(),
            settings: self.settings.read().clone(),
            record_count: 0,
            size: self.size.load(Ordering::Relaxed),
            block_count: 0,
            entry_count: entries.len() as u64,
            oldest: None,
            latest: None,
            evicted_blocks: self.evicted.load(Ordering::Relaxed),
        };
        for e in entries {
            let ei = e.info(index)?;
            info.record_count += ei.record_count;
            info.block_count += ei.block_count;
            info.oldest = min_opt(info.oldest, ei.oldest);
            info.latest = info.latest.max(ei.latest);
        }
        Ok(info)
    }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

pub(crate) fn write_settings(dir: &Path, settings: &BucketSettings) -> Result<()> {
    let tmp = dir.join(format!("{SETTINGS_FILE}.tmp"));
    std::fs::write(&tmp, settings.to_file_text())
        .map_err(|e| Error::io(format!("writing {tmp:?}"), e))?;
    let f = File::open(&tmp).map_err(|e| Error::io(format!("opening {tmp:?}"), e))?;
    f.sync_all()
        .map_err(|e| Error::io(format!("syncing {tmp:?}"), e))?;
    std::fs::rename(&tmp, dir.join(SETTINGS_FILE))
        .map_err(|e| Error::io(format!("renaming {tmp:?}"), e))?;
    Ok(())
}

impl Store {
    /// Opens (creating if needed) a data folder. Checks and repairs what a crash may have
    /// left (see [`Store::recovery_report`]); rebuilds the index if it is missing or unusable.
    pub fn open(path: impl AsRef<Path>, opts: StoreOptions) -> Result<Store> {
        let inner = crate::recover::open_inner(path.as_ref(), opts)?;
        let inner = Arc::new(inner);
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
        Ok(Store { inner })
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

    pub(crate) fn get_bucket(&self, name: &str) -> Result<Arc<Bucket>> {
        validate_bucket_name(name)?;
        self.inner
            .buckets
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| NotFound::Bucket(name.to_string()).into())
    }

    pub(crate) fn get_entry(&self, bucket: &Bucket, name: &str) -> Result<Arc<Entry>> {
        validate_entry_name(name)?;
        bucket.entries.read().get(name).cloned().ok_or_else(|| {
            NotFound::Entry {
                bucket: bucket.name.clone(),
                entry: name.to_string(),
            }
            .into()
        })
    }

    /// The entry, created (folder and id) if it does not exist yet.
    pub(crate) fn entry_or_create(&self, bucket: &Bucket, name: &str) -> Result<Arc<Entry>> {
        validate_entry_name(name)?;
        if let Some(e) = bucket.entries.read().get(name) {
            return Ok(e.clone());
        }
        let _g = self.inner.create_lock.lock();
        if let Some(e) = bucket.entries.read().get(name) {
            return Ok(e.clone());
        }
        if bucket.removed.load(Ordering::Acquire) {
            return Err(NotFound::Bucket(bucket.name.clone()).into());
        }
        let id = self.inner.next_entry.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry::new(id, name, &bucket.dir));
        std::fs::create_dir_all(&entry.dir)
            .map_err(|e| Error::io(format!("creating {:?}", entry.dir), e))?;
        let change = Change {
            ops: vec![Op::PutEntry {
                key: entry_key(&bucket.name, name),
                id,
            }],
            files: vec![],
        };
        self.inner.committer.commit(&self.inner.index, change)?;
        bucket
            .entries
            .write()
            .insert(name.to_string(), entry.clone());
        Ok(entry)
    }

    pub fn create_bucket(&self, name: &str, settings: BucketSettings) -> Result<BucketInfo> {
        validate_bucket_name(name)?;
        settings.validate().map_err(BucketError::InvalidSettings)?;
        let _g = self.inner.create_lock.lock();
        if self.inner.buckets.read().contains_key(name) {
            return Err(BucketError::Exists(name.to_string()).into());
        }
        let dir = self.inner.path.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {dir:?}"), e))?;
        write_settings(&dir, &settings)?;
        let bucket = Arc::new(Bucket::new(name, dir, settings));
        self.inner
            .buckets
            .write()
            .insert(name.to_string(), bucket.clone());
        bucket.info(&self.inner.index)
    }

    pub fn bucket(&self, name: &str) -> Result<BucketInfo> {
        self.get_bucket(name)?.info(&self.inner.index)
    }

    pub fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        let buckets: Vec<Arc<Bucket>> = self.inner.buckets.read().values().cloned().collect();
        buckets.iter().map(|b| b.info(&self.inner.index)).collect()
    }

    /// Changes settings; a smaller FIFO quota takes effect at the next write.
    pub fn update_bucket(&self, name: &str, update: &BucketSettingsUpdate) -> Result<BucketInfo> {
        let bucket = self.get_bucket(name)?;
        {
            let mut s = bucket.settings.write();
            let new = s.apply(update);
            new.validate().map_err(BucketError::InvalidSettings)?;
            write_settings(&bucket.dir, &new)?;
            *s = new;
        }
        bucket.info(&self.inner.index)
    }

    /// Removes a bucket with all its entries and records.
    pub fn remove_bucket(&self, name: &str) -> Result<()> {
        let bucket = self.get_bucket(name)?;
        let entries: Vec<String> = bucket.entries.read().keys().cloned().collect();
        for e in entries {
            self.remove_entry(name, &e)?;
        }
        let _g = self.inner.create_lock.lock();
        bucket.removed.store(true, Ordering::Release);
        self.inner.buckets.write().remove(name);
        std::fs::remove_dir_all(&bucket.dir)
            .map_err(|e| Error::io(format!("removing {:?}", bucket.dir), e))?;
        Ok(())
    }

    pub fn list_entries(&self, bucket: &str) -> Result<Vec<EntryInfo>> {
        let b = self.get_bucket(bucket)?;
        let entries: Vec<Arc<Entry>> = b.entries.read().values().cloned().collect();
        entries.iter().map(|e| e.info(&self.inner.index)).collect()
    }

    pub fn entry(&self, bucket: &str, entry: &str) -> Result<EntryInfo> {
        let b = self.get_bucket(bucket)?;
        self.get_entry(&b, entry)?.info(&self.inner.index)
    }

    /// Removes an entry with all its records and block files.
    pub fn remove_entry(&self, bucket: &str, entry: &str) -> Result<()> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let mut st = e.state.lock();
        let freed: u64 = st.blocks.values().map(|m| m.indexed_len).sum();
        let mut ops = vec![Op::DelEntryRecords { entry_id: e.id }];
        ops.extend(st.blocks.keys().map(|id| Op::DelBlock { id: *id }));
        ops.push(Op::DelEntry {
            key: entry_key(&b.name, entry),
        });
        self.inner
            .committer
            .commit(&self.inner.index, Change { ops, files: vec![] })?;
        st.removed = true;
        st.active = None;
        for id in st.blocks.keys() {
            self.inner.committer.forget(*id);
        }
        st.blocks.clear();
        e.files.write().clear();
        b.entries.write().remove(entry);
        b.size
            .fetch_sub(freed.min(b.size.load(Ordering::Relaxed)), Ordering::Relaxed);
        std::fs::remove_dir_all(&e.dir)
            .map_err(|err| Error::io(format!("removing {:?}", e.dir), err))?;
        Ok(())
    }

    /// Forces everything written so far to stable storage.
    pub fn sync(&self) -> Result<()> {
        self.inner.committer.sync_now(&self.inner.index)
    }

    pub fn stats(&self) -> StoreStats {
        let buckets: Vec<Arc<Bucket>> = self.inner.buckets.read().values().cloned().collect();
        let mut s = StoreStats {
            bucket_count: buckets.len() as u64,
            evicted_blocks: self.inner.evicted_blocks.load(Ordering::Relaxed),
            free_bytes: crate::write::free_space(&self.inner.path).unwrap_or(0),
            ..StoreStats::default()
        };
        for b in buckets {
            s.disk_bytes += b.size.load(Ordering::Relaxed);
            for e in b.entries.read().values() {
                s.record_count += e
                    .state
                    .lock()
                    .blocks
                    .values()
                    .map(|m| m.records)
                    .sum::<u64>();
            }
        }
        s
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Relaxed);
        if self.opts.sync != SyncPolicy::Never {
            if let Err(e) = self.committer.sync_now(&self.index) {
                log::error!("final sync failed: {e}");
            }
        }
    }
}
