//! Renaming entries and buckets (`Store::rename_entry`, `Store::rename_bucket`). Records,
//! blocks and entry ids do not change: the folder is renamed (one atomic `rename(2)`, the
//! parent folder synced), then one index commit moves the names to the same entry ids,
//! then memory follows. A crash between the folder rename and the commit leaves a folder
//! whose blocks the index files under its old name: recovery gives the folder its entry id
//! back (`recover.rs`, "a rename a crash interrupted"), so nothing is re-read or lost.
//!
//! Both run under `structure` with the entry locks held (every entry's, in id order, for a
//! bucket): a write acknowledged before is in the moved state; a writer that took the old
//! entry finds it removed and, as it was renamed, looks its name up again (a new entry).
//! Entries with tiered blocks are refused (their object keys carry the names).

use std::sync::Arc;

use crate::commit::{Change, Op};
use crate::entry::{Entry, EntryState};
use crate::error::{BucketError, Error, RenameError, Result};
use crate::files::sync_dir;
use crate::lock::MutexGuard;
use crate::names::{entry_dir_name, validate_bucket_name, validate_entry_name};
use crate::record::{BucketInfo, EntryInfo};
use crate::store::Store;

fn rename_dir(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    std::fs::rename(from, to).map_err(|e| Error::io(format!("renaming {from:?} to {to:?}"), e))
}

impl Store {
    /// Renames an entry of `bucket` from `old` to `new` (which must not exist), keeping its
    /// records. Renaming to the same name changes nothing.
    pub fn rename_entry(&self, bucket: &str, old: &str, new: &str) -> Result<EntryInfo> {
        let b = self.get_bucket(bucket)?;
        validate_entry_name(new)?;
        let e = self.get_entry(&b, old)?;
        if old == new {
            return e.info(&self.inner.index);
        }
        // The store-wide lock, then the entry's: never waiting for the entry's while
        // holding the other, which every new entry and bucket change needs (a long range
        // removal holds the entry's, and a rename waiting behind it stopped them all).
        let (_g, mut st) = loop {
            let g = self.inner.structure.lock();
            self.still_registered(bucket, &b)?;
            if b.entry(new).is_some() {
                return Err(RenameError::EntryExists {
                    bucket: bucket.to_string(),
                    entry: new.to_string(),
                }
                .into());
            }
            if let Some(st) = e.try_lock_live(bucket)? {
                break (g, st);
            }
            drop(g);
            drop(e.lock_live(bucket)?);
        };
        if st.has_tiered() {
            return Err(RenameError::Tiered {
                what: format!("entry {bucket}/{old}"),
            }
            .into());
        }
        let to_dir = b.dir().join(entry_dir_name(new));
        if to_dir.exists() {
            return Err(RenameError::FolderExists {
                name: format!("{bucket}/{}", entry_dir_name(new)),
            }
            .into());
        }
        rename_dir(e.dir(), &to_dir)?;
        sync_dir(b.dir())?;
        crate::crash_point("entry-rename-moved");
        let change = Change {
            ops: vec![
                Op::DelEntry {
                    bucket: bucket.to_string(),
                    entry: old.to_string(),
                },
                Op::PutEntry {
                    bucket: bucket.to_string(),
                    entry: new.to_string(),
                    id: e.id(),
                },
            ],
            files: vec![],
        };
        if let Err(err) = self.inner.commit(change) {
            if let Err(back) = rename_dir(&to_dir, e.dir()) {
                log::error!("could not move {to_dir:?} back after a failed rename: {back}; the next open finds it under the new name");
            }
            return Err(err);
        }
        crate::crash_point("entry-rename-committed");
        let to = Arc::new(Entry::new(e.id(), new, b.dir(), st.take_for_rename()));
        b.swap_entry(&e, to.clone());
        drop(st);
        to.info(&self.inner.index)
    }

    /// Renames a bucket from `old` to `new` (which must not exist), keeping its settings,
    /// entries and records. Renaming to the same name changes nothing.
    pub fn rename_bucket(&self, old: &str, new: &str) -> Result<BucketInfo> {
        let b = self.get_bucket(old)?;
        validate_bucket_name(new)?;
        if old == new {
            return b.info(&self.inner.index);
        }
        let _g = self.inner.structure.lock();
        self.still_registered(old, &b)?;
        if self.inner.buckets.read().contains_key(new) {
            return Err(BucketError::Exists(new.to_string()).into());
        }
        let to_dir = self.inner.path.join(new);
        if to_dir.exists() {
            return Err(RenameError::FolderExists {
                name: new.to_string(),
            }
            .into());
        }
        // Every entry's lock, in id order (keyed: see `lock.rs`), held to the end.
        let mut entries = b.entries();
        entries.sort_by_key(|e| e.id());
        let mut held: Vec<(Arc<Entry>, MutexGuard<'_, EntryState>)> = Vec::new();
        for e in &entries {
            // An entry removed meanwhile is skipped.
            if let Ok(st) = e.lock_live_ordered(old) {
                if st.has_tiered() {
                    return Err(RenameError::Tiered {
                        what: format!("bucket {old} (entry {})", e.name()),
                    }
                    .into());
                }
                held.push((e.clone(), st));
            }
        }
        rename_dir(b.dir(), &to_dir)?;
        sync_dir(&self.inner.path)?;
        crate::crash_point("bucket-rename-moved");
        let mut ops = Vec::with_capacity(held.len() * 2);
        for (e, _) in &held {
            ops.push(Op::DelEntry {
                bucket: old.to_string(),
                entry: e.name().to_string(),
            });
            ops.push(Op::PutEntry {
                bucket: new.to_string(),
                entry: e.name().to_string(),
                id: e.id(),
            });
        }
        // Replication readers of the bucket follow it (their pending items too).
        ops.push(Op::RenameFeedBucket {
            old: old.to_string(),
            new: new.to_string(),
        });
        if let Err(err) = self.inner.commit(Change { ops, files: vec![] }) {
            if let Err(back) = rename_dir(&to_dir, b.dir()) {
                log::error!("could not move {to_dir:?} back after a failed rename: {back}; the next open finds it under the new name");
            }
            // The watched set may have followed the aborted change: load it again.
            if let Err(e) = self.feed_load() {
                log::error!(
                    "could not reload the change feed's watched set after a failed rename: {e}"
                );
            }
            return Err(err);
        }
        crate::crash_point("bucket-rename-committed");
        let to = Arc::new(b.renamed(new, to_dir));
        for (e, st) in &mut held {
            let moved = Entry::new(e.id(), e.name(), to.dir(), st.take_for_rename());
            to.insert_entry(Arc::new(moved));
        }
        b.mark_removed();
        {
            let mut map = self.inner.buckets.write();
            map.remove(old);
            map.insert(new.to_string(), to.clone());
        }
        drop(held);
        to.info(&self.inner.index)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::record::WriteMeta;
    use std::time::Duration;

    /// Bug "rename behind a removal": a rename took the store-wide lock, then waited for
    /// the entry's, which a long range removal held: every new entry and bucket change
    /// (they take the store-wide lock) waited with it. The rename now waits for the
    /// entry without holding the store-wide lock.
    #[test]
    fn a_rename_waiting_for_a_busy_entry_stops_no_new_entry() {
        let (_dir, s) = crate::store::test_store();
        s.write("b", "busy", &WriteMeta::at(1), b"x").unwrap();
        let b = s.get_bucket("b").unwrap();
        let e = s.get_entry(&b, "busy").unwrap();
        let held = e.lock(); // as a long removal holds it
        let s2 = s.clone();
        let renamer =
            std::thread::spawn(move || s2.rename_entry("b", "busy", "renamed").map(|_| ()));
        std::thread::sleep(Duration::from_millis(200));
        let (tx, rx) = std::sync::mpsc::channel();
        let s3 = s.clone();
        std::thread::spawn(move || {
            let _ = tx.send(s3.write("b", "fresh", &WriteMeta::at(1), b"y").map(|_| ()));
        });
        let got = rx.recv_timeout(Duration::from_secs(5));
        drop(held);
        assert!(
            matches!(got, Ok(Ok(()))),
            "a new entry waited behind the rename: {got:?}"
        );
        renamer.join().unwrap().unwrap();
        assert_eq!(s.entry("b", "renamed").unwrap().record_count, 1);
        assert_eq!(s.entry("b", "fresh").unwrap().record_count, 1);
    }
}
