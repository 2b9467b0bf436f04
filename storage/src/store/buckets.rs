//! `Store`'s buckets and entries: creation, listing, settings updates and removal (the
//! folder to the trash, the index commit, then the folder deleted), under `structure`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::bucket::{write_settings, Bucket};
use crate::commit::{Change, Op};
use crate::entry::{Entry, EntryState};
use crate::error::{BucketError, Error, NotFound, Result, WriteError};
use crate::files::sync_dir;
use crate::lock::MutexGuard;
use crate::names::{validate_bucket_name, validate_entry_name};
use crate::record::{BucketInfo, EntryInfo};
use crate::settings::{BucketSettings, BucketSettingsUpdate};
use crate::store::Store;

/// Looks of [`Store::with_live_entry`] for an entry that stays live until locked.
const LIVE_ENTRY_TRIES: u32 = 16;

impl Store {
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
        bucket.entry(name).ok_or_else(|| {
            NotFound::Entry {
                bucket: bucket.name().to_string(),
                entry: name.to_string(),
            }
            .into()
        })
    }

    /// Runs `f` with the entry's mutex held, the entry created first when `create`. An
    /// entry renamed or removed between its look-up and the lock is looked up (or created)
    /// again, while its bucket stays: a write racing its entry's removal goes to the new
    /// entry of that name, as one just after the removal would (it was answered 404
    /// `entry_not_found` on a route that creates entries: hostile probe of 2026-11-28). A
    /// bucket removed or renamed meanwhile is `NotFound::Bucket`.
    /// After [`LIVE_ENTRY_TRIES`] looks the last one's error is the answer.
    pub(crate) fn with_live_entry<T>(
        &self,
        b: &Bucket,
        entry: &str,
        create: bool,
        f: impl FnOnce(&Arc<Entry>, &mut MutexGuard<'_, EntryState>) -> Result<T>,
    ) -> Result<T> {
        let mut tries = 0;
        loop {
            tries += 1;
            let e = if create {
                self.entry_or_create(b, entry)?
            } else {
                self.get_entry(b, entry)?
            };
            let mut st = match e.lock_live(b.name()) {
                Ok(st) => st,
                Err(_) if tries < LIVE_ENTRY_TRIES && !b.is_removed() => continue,
                // The bucket itself was removed or renamed meanwhile: said so, as a write
                // just after it would be (races probe of 2026-11-28: 404 `entry_not_found`
                // on routes that create their entry).
                Err(_) if b.is_removed() => {
                    return Err(NotFound::Bucket(b.name().to_string()).into())
                }
                Err(err) => return Err(err),
            };
            return f(&e, &mut st);
        }
    }

    /// The entry, created (folder and id) if it does not exist yet, within
    /// `StoreOptions::max_entries`.
    pub(crate) fn entry_or_create(&self, bucket: &Bucket, name: &str) -> Result<Arc<Entry>> {
        self.entry_or_create_bounded(bucket, name, true)
    }

    /// [`Store::entry_or_create`]; `bounded: false` for an entry adopted from the tier (its
    /// records exist already; a replica or a restore must not stop short of them).
    pub(crate) fn entry_or_create_bounded(
        &self,
        bucket: &Bucket,
        name: &str,
        bounded: bool,
    ) -> Result<Arc<Entry>> {
        validate_entry_name(name)?;
        if let Some(e) = bucket.entry(name) {
            return Ok(e);
        }
        let _g = self.inner.structure.lock();
        if let Some(e) = bucket.entry(name) {
            return Ok(e);
        }
        if bucket.is_removed() {
            return Err(NotFound::Bucket(bucket.name().to_string()).into());
        }
        // Counted under `structure`, which every creation holds: two writers into new
        // entries cannot both pass at the last place.
        let limit = self.inner.opts.max_entries;
        if bounded {
            let held: usize = self.inner.buckets().iter().map(|b| b.entry_count()).sum();
            if held >= limit {
                return Err(WriteError::TooManyEntries { held, limit }.into());
            }
        }
        let id = self.inner.next_entry.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry::new(
            id,
            name,
            bucket.dir(),
            EntryState::new(BTreeMap::new()),
        ));
        std::fs::create_dir_all(entry.dir())
            .map_err(|e| Error::io(format!("creating {:?}", entry.dir()), e))?;
        if self.inner.sync_dirs() {
            sync_dir(bucket.dir())?;
        }
        let change = Change {
            ops: vec![Op::PutEntry {
                bucket: bucket.name().to_string(),
                entry: name.to_string(),
                id,
            }],
            files: vec![],
        };
        self.inner.commit(change)?;
        bucket.insert_entry(entry.clone());
        Ok(entry)
    }

    pub fn create_bucket(&self, name: &str, settings: BucketSettings) -> Result<BucketInfo> {
        validate_bucket_name(name)?;
        settings.validate().map_err(BucketError::InvalidSettings)?;
        let _g = self.inner.structure.lock();
        if self.inner.buckets.read().contains_key(name) {
            return Err(BucketError::Exists(name.to_string()).into());
        }
        let dir = self.inner.path.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {dir:?}"), e))?;
        write_settings(&dir, &settings)?;
        sync_dir(&self.inner.path)?;
        let bucket = Arc::new(Bucket::new(name, dir, settings));
        self.inner
            .buckets
            .write()
            .insert(name.to_string(), bucket.clone());
        bucket.info(&self.inner.index)
    }

    /// Fails as a write to the bucket would if it does not exist (a bad name, no such
    /// bucket); a map look-up, where [`Store::bucket`] walks every entry for its info.
    pub fn check_bucket(&self, name: &str) -> Result<()> {
        self.get_bucket(name).map(|_| ())
    }

    pub fn bucket(&self, name: &str) -> Result<BucketInfo> {
        self.get_bucket(name)?.info(&self.inner.index)
    }

    pub fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        self.inner
            .buckets()
            .iter()
            .map(|b| b.info(&self.inner.index))
            .collect()
    }

    /// Changes settings; a smaller FIFO quota takes effect at the next write.
    pub fn update_bucket(&self, name: &str, update: &BucketSettingsUpdate) -> Result<BucketInfo> {
        self.update_bucket_checked(name, update, |_| Ok(()))
    }

    /// [`Self::update_bucket`], refused with `check`'s message when the settings it would
    /// give fail it (see [`Bucket::update_settings_checked`]).
    pub fn update_bucket_checked(
        &self,
        name: &str,
        update: &BucketSettingsUpdate,
        check: impl FnOnce(&BucketSettings) -> std::result::Result<(), String>,
    ) -> Result<BucketInfo> {
        let bucket = self.get_bucket(name)?;
        {
            // Serialized with removal and creation: the settings file of a bucket removed
            // meanwhile is not written into the trash (an I/O error), nor over the file of
            // a bucket created again under its name; such a bucket is not found.
            let _g = self.inner.structure.lock();
            self.still_registered(name, &bucket)?;
            bucket.update_settings_checked(update, check)?;
        }
        bucket.info(&self.inner.index)
    }

    /// `NotFound` unless `bucket` is still the bucket registered as `name` (under
    /// `structure`, it stays so until the lock is released).
    pub(super) fn still_registered(&self, name: &str, bucket: &Arc<Bucket>) -> Result<()> {
        let registered = self
            .inner
            .buckets
            .read()
            .get(name)
            .is_some_and(|b| Arc::ptr_eq(b, bucket));
        if registered {
            Ok(())
        } else {
            Err(NotFound::Bucket(name.to_string()).into())
        }
    }

    /// Removes a bucket with all its entries and records. The bucket's folder goes to the
    /// trash first (one atomic step: after a crash the bucket is gone), then the index
    /// forgets each entry, then the folder is deleted.
    pub fn remove_bucket(&self, name: &str) -> Result<()> {
        let bucket = self.get_bucket(name)?;
        // The structure lock is held throughout: a bucket or entry of the same name created
        // meanwhile could otherwise lose its index key to this removal's commits.
        let _g = self.inner.structure.lock();
        self.still_registered(name, &bucket)?;
        let trashed = self.inner.trash.take(bucket.dir())?;
        self.inner.buckets.write().remove(name);
        bucket.mark_removed();
        crate::crash_point("bucket-trashed");
        let mut result = Ok(());
        for e in bucket.entries() {
            // An entry removed meanwhile (by `remove_entry`) is skipped.
            let Ok(mut st) = e.lock_live(name) else {
                continue;
            };
            let r = self.forget_entry(&bucket, &e, &mut st);
            if result.is_ok() {
                result = r;
            }
        }
        if let Some(t) = trashed {
            self.inner.trash.empty(&t);
        }
        result
    }

    /// The index commit and memory side of an entry's removal (its folder is already in
    /// the trash or about to be). Holds the entry's lock.
    fn forget_entry(&self, b: &Bucket, e: &Arc<Entry>, st: &mut EntryState) -> Result<()> {
        let mut ops = vec![Op::DelEntryRecords { entry_id: e.id() }];
        ops.extend(st.block_ids().map(|id| Op::DelBlock { id }));
        ops.push(Op::DelEntry {
            bucket: b.name().to_string(),
            entry: e.name().to_string(),
        });
        self.inner.commit(Change { ops, files: vec![] })?;
        b.shrink(st.block_bytes());
        for id in st.block_ids() {
            self.inner.committer.forget(id);
            self.inner.files.forget(id);
            if let Some(t) = &self.inner.tier {
                t.forget(b.name(), e.name(), id);
            }
        }
        st.mark_removed();
        b.forget_entry(e);
        Ok(())
    }

    pub fn list_entries(&self, bucket: &str) -> Result<Vec<EntryInfo>> {
        let b = self.get_bucket(bucket)?;
        b.entries()
            .iter()
            .map(|e| e.info(&self.inner.index))
            .collect()
    }

    /// Fails as a read of the entry would if it does not exist (a bad name, no such bucket
    /// or entry); map look-ups, where [`Store::entry`] reads the entry's index for its info.
    pub fn check_entry(&self, bucket: &str, entry: &str) -> Result<()> {
        let b = self.get_bucket(bucket)?;
        self.get_entry(&b, entry).map(|_| ())
    }

    pub fn entry(&self, bucket: &str, entry: &str) -> Result<EntryInfo> {
        let b = self.get_bucket(bucket)?;
        self.get_entry(&b, entry)?.info(&self.inner.index)
    }

    /// Removes an entry with all its records and block files: its folder goes to the
    /// trash (atomic), the index forgets it, then the folder is deleted. A failed commit
    /// puts the folder back.
    pub fn remove_entry(&self, bucket: &str, entry: &str) -> Result<()> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let mut st = e.lock_live(bucket)?;
        let trashed = self.inner.trash.take(e.dir())?;
        crate::crash_point("entry-trashed");
        if let Err(err) = self.forget_entry(&b, &e, &mut st) {
            if let Some(t) = &trashed {
                self.inner.trash.restore(t, e.dir());
            }
            return Err(err);
        }
        crate::crash_point("entry-removal-committed");
        drop(st);
        if let Some(t) = trashed {
            self.inner.trash.empty(&t);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::record::WriteMeta;

    /// Hostile probe of 2026-11-28: a write racing its entry's removal was answered
    /// `NotFound::Entry` (HTTP 404 `entry_not_found`, on a route that creates entries):
    /// the writer had looked the entry up before the removal and locked it after. Each
    /// write path (one record, a round of groups as the server's writer thread makes, a
    /// spooled record) now goes to the entry of that name made after the removal.
    #[test]
    fn a_write_racing_its_entrys_removal_was_answered_entry_not_found() {
        let (_dir, s) = crate::store::test_store();
        let big = vec![7u8; 200 << 10];
        for (round, path) in ["write", "groups", "spooled"].into_iter().enumerate() {
            let ts = 10 + round as u64;
            s.write("b", "e", &WriteMeta::at(1), b"old").unwrap();
            let b = s.get_bucket("b").unwrap();
            let e = s.get_entry(&b, "e").unwrap();
            let mut held = e.lock(); // as the removal holds it
            let s2 = s.clone();
            let data = if path == "spooled" {
                big.clone()
            } else {
                b"new".to_vec()
            };
            let writer = std::thread::spawn(move || {
                let meta = WriteMeta::at(ts);
                match path {
                    "write" => s2.write("b", "e", &meta, &data),
                    "groups" => {
                        let recs = [(&meta, &[data.as_slice()][..])];
                        let groups = [("b", "e", &recs[..])];
                        let mut out = s2.write_groups(&groups);
                        out.remove(0).and_then(|mut r| r.remove(0))
                    }
                    _ => {
                        let mut spool = s2.spool_for("b", "e", &meta).unwrap();
                        spool.append(&data).unwrap();
                        s2.write_spooled("b", "e", &meta, spool)
                    }
                }
            });
            std::thread::sleep(Duration::from_millis(200)); // the writer waits for the lock
            s.forget_entry(&b, &e, &mut held).unwrap();
            drop(held);
            let got = writer.join().unwrap();
            assert_eq!(got.ok(), Some(ts), "{path}: the write was refused");
            let info = s.entry("b", "e").unwrap();
            assert_eq!(info.record_count, 1, "{path}: only the new record");
            assert_eq!(
                s.read("b", "e", Some(ts)).unwrap().data.len(),
                data_len(path)
            );
            s.remove_entry("b", "e").unwrap();
        }
        fn data_len(path: &str) -> usize {
            if path == "spooled" {
                200 << 10
            } else {
                3
            }
        }
    }

    /// Races probe of 2026-11-28: a write (or an attachment change) racing its bucket's
    /// removal was answered 404 `entry_not_found` on routes that create their entry, and an
    /// attachment change 500 `internal` when the removal had moved the bucket's folder to
    /// the trash before it took the entry's lock (writing `attachments.tmp` failed). Each
    /// is now the bucket's absence. The removal's steps are taken by hand, in its order,
    /// around a writer waiting for the entry's lock.
    #[test]
    fn writes_racing_their_buckets_removal_were_entry_not_found_or_a_500() {
        use crate::error::{Error, NotFound};
        // `entry_forgotten: false`: the writer runs with its entry still live but the
        // folder trashed (a new block's file, an attachment's, cannot be made).
        for (path, entry_forgotten) in [
            ("write", true),
            ("write", false),
            ("groups", true),
            ("groups", false),
            ("attachments", true),
            ("attachments", false),
        ] {
            let (_dir, s) = crate::store::test_store();
            s.remove_bucket("b").unwrap();
            let one_a_block = crate::settings::BucketSettings {
                max_block_records: 1,
                ..Default::default()
            };
            s.create_bucket("b", one_a_block).unwrap();
            s.write("b", "e", &WriteMeta::at(1), b"old").unwrap();
            let b = s.get_bucket("b").unwrap();
            let e = s.get_entry(&b, "e").unwrap();
            // The removal holds `structure` throughout, and takes the entry's lock after
            // trashing the folder: here it is held from the start, to hold the writer.
            let removal = s.inner.structure.lock();
            let mut held = e.lock();
            let s2 = s.clone();
            let writer = std::thread::spawn(move || match path {
                "write" => s2.write("b", "e", &WriteMeta::at(2), b"new").map(|_| ()),
                "groups" => {
                    let meta = WriteMeta::at(2);
                    let recs = [(&meta, &[&b"new"[..]][..])];
                    let groups = [("b", "e", &recs[..])];
                    s2.write_groups(&groups)
                        .remove(0)
                        .and_then(|mut r| r.remove(0))
                        .map(|_| ())
                }
                _ => s2
                    .write_attachments("b", "e", vec![("a".into(), b"{}".to_vec())])
                    .map(|_| ()),
            });
            std::thread::sleep(Duration::from_millis(200)); // the writer waits for the lock
            let trashed = s.inner.trash.take(b.dir()).unwrap();
            s.inner.buckets.write().remove("b");
            b.mark_removed();
            if entry_forgotten {
                s.forget_entry(&b, &e, &mut held).unwrap();
            }
            drop(held); // the writer runs (with the folder gone)
            std::thread::sleep(Duration::from_millis(200));
            drop(removal);
            let got = writer.join().unwrap();
            assert!(
                matches!(got, Err(Error::NotFound(NotFound::Bucket(ref n))) if n == "b"),
                "{path} (entry forgotten: {entry_forgotten}): {got:?}"
            );
            if let Some(t) = trashed {
                s.inner.trash.empty(&t);
            }
        }
    }
}
