//! A bucket's shared state: settings, entries, and the byte counters its quota reads.
//!
//! The counters change only through methods here, so the two numbers a quota compares
//! (`size`: bytes of block files; `reserved`: bytes promised to writes in flight) can never
//! be driven below zero or left out of step by a caller.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::entry::{Entry, SizeChange, TieredSize};
use crate::error::{BucketError, Error, Result};
use crate::files::sync_dir;
use crate::index::Index;
use crate::layout::SETTINGS_FILE;
use crate::lifecycle::RuleRun;
use crate::lock::{Mutex, MutexGuard, Rank, RwLock, WriteGuard};
use crate::record::BucketInfo;
use crate::settings::{BucketSettings, BucketSettingsUpdate, LifecycleRule};
use std::fs::File;

/// The value of `Bucket`'s `max_age` mirror for a bucket without age-based retention.
const NO_MAX_AGE: u64 = u64::MAX;

pub(crate) struct Bucket {
    name: String,
    dir: PathBuf,
    settings: RwLock<BucketSettings>,
    /// `settings.max_age` (µs), or [`NO_MAX_AGE`]: read by every write without the settings'
    /// lock (that read was 1.4 % of a 1 KiB single write's server CPU,
    /// `docs/benchmarks/reads-2-2026-11-26b.md`). Stored only while the settings' write
    /// lock is held, after the settings it mirrors were saved.
    max_age: AtomicU64,
    entries: RwLock<BTreeMap<String, Arc<Entry>>>,
    /// Bytes of block files, what the quota counts.
    size: AtomicU64,
    /// Bytes promised to writes in flight (received in full: see `spool.rs`).
    reserved: AtomicU64,
    evict_lock: Mutex<()>,
    evicted: AtomicU64,
    expired: AtomicU64,
    /// Its lifecycle rules' run state, by rule name (`max_age` for the shorthand).
    lifecycle: Mutex<BTreeMap<String, RuleRun>>,
    removed: AtomicBool,
}

impl Bucket {
    pub fn new(name: &str, dir: PathBuf, settings: BucketSettings) -> Bucket {
        Bucket {
            name: name.to_string(),
            dir,
            max_age: AtomicU64::new(settings.max_age.unwrap_or(NO_MAX_AGE)),
            settings: RwLock::new(Rank::Settings, settings),
            entries: RwLock::new(Rank::Entries, BTreeMap::new()),
            size: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            evict_lock: Mutex::new(Rank::Evict, ()),
            evicted: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            lifecycle: Mutex::new(Rank::Lifecycle, BTreeMap::new()),
            removed: AtomicBool::new(false),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn settings(&self) -> BucketSettings {
        self.settings.read().clone()
    }

    /// The bucket's age-based retention (`max_age`, µs), without cloning its settings.
    pub(crate) fn max_age(&self) -> Option<u64> {
        self.settings.read().max_age
    }

    /// `max_age` for the check of every write, without the settings' lock. A `max_age` of
    /// `u64::MAX` reads as none here, which refuses the same (nothing: now − `u64::MAX`
    /// saturates to 0).
    pub(crate) fn write_max_age(&self) -> Option<u64> {
        Some(self.max_age.load(Ordering::Acquire)).filter(|&a| a != NO_MAX_AGE)
    }

    /// Makes `new` the settings (the caller holds their write lock and has saved them).
    fn publish(&self, s: &mut WriteGuard<'_, BucketSettings>, new: BucketSettings) {
        self.max_age
            .store(new.max_age.unwrap_or(NO_MAX_AGE), Ordering::Release);
        **s = new;
    }

    /// Applies an update (validated, written to the settings file, then made visible).
    pub fn update_settings(&self, update: &BucketSettingsUpdate) -> Result<()> {
        self.update_settings_checked(update, |_| Ok(()))
    }

    /// [`Self::update_settings`], with `check` of the settings it would give (under the
    /// settings' lock: no other update comes between) refusing them with its message.
    pub fn update_settings_checked(
        &self,
        update: &BucketSettingsUpdate,
        check: impl FnOnce(&BucketSettings) -> std::result::Result<(), String>,
    ) -> Result<()> {
        let mut s = self.settings.write();
        let new = s.apply(update);
        new.validate().map_err(BucketError::InvalidSettings)?;
        check(&new).map_err(BucketError::InvalidSettings)?;
        write_settings(&self.dir, &new)?;
        self.publish(&mut s, new);
        Ok(())
    }

    /// The entries, as a snapshot: no lock is held when the caller goes on to lock them.
    pub fn entries(&self) -> Vec<Arc<Entry>> {
        self.entries.read().values().cloned().collect()
    }

    pub fn entry_count(&self) -> usize {
        self.entries.read().len()
    }

    pub fn entry(&self, name: &str) -> Option<Arc<Entry>> {
        self.entries.read().get(name).cloned()
    }

    pub fn insert_entry(&self, entry: Arc<Entry>) {
        self.entries.write().insert(entry.name().to_string(), entry);
    }

    /// Puts `new` in place of `old` (a rename: another name, the same records) in one step
    /// of the map: a lookup sees one or the other, never neither.
    pub fn swap_entry(&self, old: &Arc<Entry>, new: Arc<Entry>) {
        let mut map = self.entries.write();
        if map.get(old.name()).is_some_and(|e| Arc::ptr_eq(e, old)) {
            map.remove(old.name());
        }
        map.insert(new.name().to_string(), new);
    }

    /// This bucket's settings and counters under another name and folder, without its
    /// entries (`Store::rename_bucket` moves them).
    pub fn renamed(&self, name: &str, dir: PathBuf) -> Bucket {
        let b = Bucket::new(name, dir, self.settings());
        b.set_size(self.size());
        b.evicted
            .store(self.evicted.load(Ordering::Relaxed), Ordering::Relaxed);
        b.expired
            .store(self.expired.load(Ordering::Relaxed), Ordering::Relaxed);
        b
    }

    /// Removes `entry` from the map, if it is still the one under its name.
    pub fn forget_entry(&self, entry: &Arc<Entry>) {
        let mut map = self.entries.write();
        if map.get(entry.name()).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            map.remove(entry.name());
        }
    }

    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// Bytes the quota counts as taken: block files plus writes in flight.
    pub fn used(&self) -> u64 {
        self.size() + self.reserved.load(Ordering::Acquire)
    }

    pub fn grow(&self, bytes: u64) {
        self.size.fetch_add(bytes, Ordering::AcqRel);
    }

    pub fn shrink(&self, bytes: u64) {
        let _ = self
            .size
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some(s.saturating_sub(bytes))
            });
    }

    /// Follows a change of one of its entries' bytes.
    pub fn resize(&self, change: SizeChange) {
        if change.after < change.before {
            self.shrink(change.before - change.after);
        } else {
            self.grow(change.after - change.before);
        }
    }

    pub fn set_size(&self, bytes: u64) {
        self.size.store(bytes, Ordering::Release);
    }

    pub fn reserve(&self, bytes: u64) {
        self.reserved.fetch_add(bytes, Ordering::AcqRel);
    }

    pub fn release(&self, bytes: u64) {
        let _ = self
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some(s.saturating_sub(bytes))
            });
    }

    /// One quota admission or eviction at a time.
    pub fn lock_evict(&self) -> MutexGuard<'_, ()> {
        self.evict_lock.lock()
    }

    pub fn note_evicted(&self) {
        self.evicted.fetch_add(1, Ordering::Relaxed);
    }

    pub fn note_expired(&self) {
        self.expired.fetch_add(1, Ordering::Relaxed);
    }

    /// The lifecycle rules' run state (a leaf lock: copy out, never hold across a pass).
    pub fn lifecycle_runs(&self) -> MutexGuard<'_, BTreeMap<String, RuleRun>> {
        self.lifecycle.lock()
    }

    /// Applies `change` to the lifecycle rules, then validates and saves the settings as
    /// `update_settings` does.
    pub fn change_rules(
        &self,
        change: impl FnOnce(&mut Vec<LifecycleRule>) -> Result<()>,
    ) -> Result<()> {
        let mut s = self.settings.write();
        let mut new = s.clone();
        change(&mut new.lifecycle)?;
        new.validate().map_err(BucketError::InvalidSettings)?;
        write_settings(&self.dir, &new)?;
        self.publish(&mut s, new);
        Ok(())
    }

    pub fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
    }

    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    pub fn info(&self, index: &Index) -> Result<BucketInfo> {
        let entries = self.entries();
        let mut info = BucketInfo {
            name: self.name.clone(),
            settings: self.settings(),
            record_count: 0,
            size: self.size(),
            block_count: 0,
            tiered_size: 0,
            tiered_blocks: 0,
            entry_count: entries.len() as u64,
            oldest: None,
            latest: None,
            evicted_blocks: self.evicted.load(Ordering::Relaxed),
            expired_blocks: self.expired.load(Ordering::Relaxed),
        };
        for e in entries {
            let TieredSize { bytes, blocks } = e.lock().tiered();
            info.tiered_size += bytes;
            info.tiered_blocks += blocks;
            let ei = e.info(index)?;
            info.record_count += ei.record_count;
            info.block_count += ei.block_count;
            info.oldest = min_opt(info.oldest, ei.oldest);
            info.latest = info.latest.max(ei.latest);
        }
        Ok(info)
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
    sync_dir(dir)
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
