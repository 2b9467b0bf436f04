//! Index commits and syncing: group commit and the periodic syncer.
//!
//! Errors stay typed from the leader to every follower (`Error::duplicate`): an ENOSPC
//! inside a group commit is `DiskFull` for each writer of the group.
//!
//! Every change to the index goes through [`Committer::commit`]. The first writer to arrive
//! becomes the leader and commits, in one LMDB transaction, everything that queued up
//! while the previous commit ran; followers wait for their slot to be filled. With
//! `SyncPolicy::Always` the leader also fdatasyncs the block files the group wrote (before
//! the index commit, so the index never points at bytes that are not on disk) and syncs the
//! index, so concurrent writers share one fsync.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use heed::RwTxn;
use parking_lot::Condvar;

use crate::codec::index::{BlockState, IndexValue};
use crate::error::{Error, Result};
use crate::feed::{Feed, FeedBatch};
use crate::index::{Index, RecChange};
use crate::lock::{Mutex, Rank};
use crate::settings::SyncPolicy;

/// At most this many block files wait for the periodic sync; past it, the committer syncs
/// them at once (so the store never keeps an unbounded number of handles open for it).
const MAX_DIRTY: usize = 64;

/// One change to the index.
#[derive(Clone)]
pub enum Op {
    /// Puts a record (replacing one at the same timestamp: a label update).
    PutRec {
        entry_id: u32,
        ts: u64,
        value: IndexValue,
    },
    DelRec {
        entry_id: u32,
        ts: u64,
    },
    PutBlock {
        id: u64,
        state: BlockState,
    },
    DelBlock {
        id: u64,
    },
    /// Deletes the records of `entry_id` in `[min, max]` that live in `block_id`.
    DelBlockRecords {
        entry_id: u32,
        min: u64,
        max: u64,
        block_id: u64,
    },
    PutEntry {
        bucket: String,
        entry: String,
        id: u32,
    },
    DelEntry {
        bucket: String,
        entry: String,
    },
    /// Deletes every record of an entry.
    DelEntryRecords {
        entry_id: u32,
    },
    /// A bucket renamed: the change feed's readers and pending items follow it (after the
    /// entries' ops of the same change).
    RenameFeedBucket {
        old: String,
        new: String,
    },
}

/// A set of ops that succeed or fail together, with the block files they wrote.
#[derive(Default, Clone)]
pub struct Change {
    pub ops: Vec<Op>,
    pub files: Vec<BlockFile>,
}

impl Change {
    /// Whether the change only takes away (records, blocks, entries, with the block
    /// states that follow): what frees a full disk.
    pub fn only_removes(&self) -> bool {
        self.ops.iter().all(|op| {
            matches!(
                op,
                Op::DelRec { .. }
                    | Op::PutBlock { .. }
                    | Op::DelBlock { .. }
                    | Op::DelBlockRecords { .. }
                    | Op::DelEntry { .. }
                    | Op::DelEntryRecords { .. }
            )
        })
    }
}

/// A block file a change wrote to, for the commit's fsync.
#[derive(Clone)]
pub struct BlockFile {
    pub id: u64,
    pub file: Arc<File>,
}

/// Called after every successful commit (see [`Committer::on_commit`]) with the ids of the
/// entries that got record puts in it (sorted, each once; empty for a commit without any).
pub type Listener = Arc<dyn Fn(&[u32]) + Send + Sync>;

/// A follower's outcome, filled in by the leader (typed: a follower sees `DiskFull` as
/// `DiskFull`, see `Error::duplicate`).
type Slot = Arc<Mutex<Option<Result<()>>>>;

/// A change waiting for a group commit, with the slot its writer waits on.
struct Queued {
    change: Change,
    slot: Slot,
}

struct Queue {
    pending: Vec<Queued>,
    leader: bool,
}

pub struct Committer {
    queue: Mutex<Queue>,
    cv: Condvar,
    policy: SyncPolicy,
    /// Block files written since the last periodic sync.
    dirty: Mutex<HashMap<u64, Arc<File>>>,
    /// Called by a group's leader after its commit (cloned out of the lock, then called).
    listeners: Mutex<Arc<[Listener]>>,
    /// The last group commit failed for want of room in the index map (`IndexFull`).
    index_full: AtomicBool,
}

impl Committer {
    pub fn new(policy: SyncPolicy) -> Committer {
        Committer {
            queue: Mutex::new(
                Rank::CommitQueue,
                Queue {
                    pending: Vec::new(),
                    leader: false,
                },
            ),
            cv: Condvar::new(),
            policy,
            dirty: Mutex::new(Rank::CommitDirty, HashMap::new()),
            listeners: Mutex::new(Rank::Listeners, Arc::from(Vec::new())),
            index_full: AtomicBool::new(false),
        }
    }

    /// Whether the last group commit failed for want of room in the index map, so that
    /// writes are refused with `IndexFull` (until one commits: a removal frees pages).
    pub fn index_full(&self) -> bool {
        self.index_full.load(Ordering::Relaxed)
    }

    /// Adds a listener, called by the leader of every group commit that succeeded (after
    /// its transaction committed: a read transaction opened after the call sees the
    /// group's changes) with the ids of the entries the group put records into. It runs on the leader's thread holding no lock of the committer,
    /// but possibly under the leader's own caller's entry or structure lock: it must be
    /// cheap, must not block and must not call back into the store.
    pub fn on_commit(&self, listener: Listener) {
        let mut l = self.listeners.lock();
        let mut all: Vec<Listener> = l.iter().cloned().collect();
        all.push(listener);
        *l = Arc::from(all);
    }

    fn notify(&self, entries: &[u32]) {
        let listeners = self.listeners.lock().clone();
        for l in listeners.iter() {
            l(entries);
        }
    }

    /// Commits `change`; returns once it is in the index (and on disk, for `Always`).
    pub fn commit(&self, index: &Index, feed: &Feed, change: Change) -> Result<()> {
        let slot: Slot = Arc::new(Mutex::new(Rank::CommitSlot, None));
        let mut q = self.queue.lock();
        q.pending.push(Queued {
            change,
            slot: slot.clone(),
        });
        loop {
            if let Some(res) = slot.lock().take() {
                return res;
            }
            if q.leader {
                q.wait(&self.cv);
                continue;
            }
            q.leader = true;
            let mut group = std::mem::take(&mut q.pending);
            drop(q);
            let res = self.run_group(index, feed, &mut group);
            if let Err(e) = &res {
                log::error!("index commit of {} change(s) failed: {e}", group.len());
            }
            let full = matches!(res, Err(Error::Write(crate::error::WriteError::IndexFull)));
            self.index_full.store(full, Ordering::Relaxed);
            for Queued { slot, .. } in &group {
                *slot.lock() = Some(res.as_ref().map(|_| ()).map_err(Error::duplicate));
            }
            drop(group);
            if let Ok(entries) = &res {
                self.notify(entries);
            }
            q = self.queue.lock();
            q.leader = false;
            self.cv.notify_all();
        }
    }

    /// Commits a group; returns the ids of the entries it put records into.
    fn run_group(&self, index: &Index, feed: &Feed, group: &mut [Queued]) -> Result<Vec<u32>> {
        let mut files: HashMap<u64, Arc<File>> = HashMap::new();
        for Queued { change, .. } in group.iter() {
            for f in &change.files {
                files.insert(f.id, f.file.clone());
            }
        }
        if self.policy == SyncPolicy::Always {
            for f in files.values() {
                f.sync_data()
                    .map_err(|e| Error::io("fsync of a block file", e))?;
            }
        }
        let res = write_group(index, feed, group);
        if res.is_err() {
            // The interner may hold attrs ids of the aborted transaction.
            index.forget_attrs();
        }
        let entries = res?;
        match self.policy {
            SyncPolicy::Always => index.force_sync()?,
            SyncPolicy::Periodic(_) => {
                let overflow = {
                    let mut dirty = self.dirty.lock();
                    dirty.extend(files);
                    if dirty.len() > MAX_DIRTY {
                        std::mem::take(&mut *dirty)
                    } else {
                        HashMap::new()
                    }
                };
                for f in overflow.values() {
                    f.sync_data()
                        .map_err(|e| Error::io("fsync of a block file", e))?;
                }
            }
            SyncPolicy::Never => {}
        }
        Ok(entries)
    }

    /// Drops a deleted block's descriptor: an unlinked file's space is only freed once its
    /// last descriptor closes, and a FIFO eviction is meant to free space now.
    pub fn forget(&self, block_id: u64) {
        self.dirty.lock().remove(&block_id);
    }

    /// Syncs every block file written since the last call, then the index.
    pub fn sync_now(&self, index: &Index) -> Result<()> {
        let files = std::mem::take(&mut *self.dirty.lock());
        for f in files.values() {
            f.sync_data()
                .map_err(|e| Error::io("fsync of a block file", e))?;
        }
        index.force_sync()
    }
}

/// Applies a group's ops in one transaction and commits it. Record puts and deletes are
/// gathered per entry and applied chunk by chunk (each chunk read and written once); ops
/// that scan records (block and entry removal) first apply what was gathered, so the
/// order of the ops is kept. Returns the ids of the entries that got record puts (for the
/// commit listeners), sorted and each once.
fn write_group(index: &Index, feed: &Feed, group: &mut [Queued]) -> Result<Vec<u32>> {
    let mut txn = index.write_txn()?;
    // Record puts of watched buckets go to the change feed in this same transaction.
    let mut fed = feed.batch();
    let mut recs = RecordOps::default();
    let mut put_into: Vec<u32> = Vec::new();
    for Queued { change, .. } in group.iter_mut() {
        for op in std::mem::take(&mut change.ops) {
            if let Op::PutRec { entry_id, .. } = &op {
                // Records of a change come entry by entry: a look at the last id keeps the
                // list short before the sort below.
                if put_into.last() != Some(entry_id) {
                    put_into.push(*entry_id);
                }
            }
            apply(index, feed, &mut txn, op, &mut recs, &mut fed)?;
        }
    }
    recs.flush(index, &mut txn)?;
    feed.append(&mut txn, fed)?;
    txn.commit()?;
    put_into.sort_unstable();
    put_into.dedup();
    Ok(put_into)
}

/// Record puts (`Some`) and deletes (`None`) not applied yet, per entry, in op order.
#[derive(Default)]
struct RecordOps {
    by_entry: Vec<EntryChanges>,
}

/// One entry's record changes gathered in a group, in op order.
struct EntryChanges {
    entry_id: u32,
    changes: Vec<RecChange>,
}

impl RecordOps {
    fn push(&mut self, entry_id: u32, change: RecChange) {
        match self.by_entry.iter_mut().find(|e| e.entry_id == entry_id) {
            Some(e) => e.changes.push(change),
            None => self.by_entry.push(EntryChanges {
                entry_id,
                changes: vec![change],
            }),
        }
    }

    fn flush(&mut self, index: &Index, txn: &mut RwTxn<'_>) -> Result<()> {
        for EntryChanges {
            entry_id,
            mut changes,
        } in self.by_entry.drain(..)
        {
            if !changes.is_sorted_by(|a, b| a.ts < b.ts) {
                // Stable: of two ops on one timestamp, the later one stays last...
                changes.sort_by_key(|c| c.ts);
                // ...and wins.
                let mut out: Vec<RecChange> = Vec::with_capacity(changes.len());
                for c in changes {
                    match out.last_mut() {
                        Some(l) if l.ts == c.ts => *l = c,
                        _ => out.push(c),
                    }
                }
                changes = out;
            }
            index.apply_changes(txn, entry_id, changes)?;
        }
        Ok(())
    }
}

fn apply(
    index: &Index,
    feed: &Feed,
    txn: &mut RwTxn<'_>,
    op: Op,
    recs: &mut RecordOps,
    fed: &mut FeedBatch,
) -> Result<()> {
    match op {
        Op::PutRec {
            entry_id,
            ts,
            value,
        } => {
            fed.put(entry_id, ts);
            recs.push(entry_id, RecChange::put(ts, value))
        }
        Op::DelRec { entry_id, ts } => recs.push(entry_id, RecChange::delete(ts)),
        Op::PutBlock { id, state } => index.put_block(txn, id, &state)?,
        Op::DelBlock { id } => index.delete_block(txn, id)?,
        Op::DelBlockRecords {
            entry_id,
            min,
            max,
            block_id,
        } => {
            recs.flush(index, txn)?;
            index.delete_block_records(txn, entry_id, min, max, block_id)?
        }
        Op::PutEntry { bucket, entry, id } => {
            feed.learn_entry(&bucket, &entry, id);
            index.put_entry(txn, &bucket, &entry, id)?
        }
        Op::DelEntry { bucket, entry } => index.delete_entry(txn, &bucket, &entry)?,
        Op::DelEntryRecords { entry_id } => {
            recs.flush(index, txn)?;
            index.delete_entry_records(txn, entry_id)?
        }
        Op::RenameFeedBucket { old, new } => {
            recs.flush(index, txn)?;
            feed.rename_bucket(index, txn, &old, &new)?
        }
    }
    Ok(())
}
