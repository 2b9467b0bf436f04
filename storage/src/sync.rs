//! Index commits and syncing: group commit and the periodic syncer.
//!
//! Every change to the index goes through [`Committer::commit`]. The first writer to arrive
//! becomes the leader and commits, in one LMDB transaction, everything that queued up
//! while the previous commit ran; followers wait for their slot to be filled. With
//! `SyncPolicy::Always` the leader also fdatasyncs the block files the group wrote (before
//! the index commit, so the index never points at bytes that are not on disk) and syncs the
//! index, so concurrent writers share one fsync.

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

use heed::RwTxn;
use parking_lot::{Condvar, Mutex};

use crate::index::{BlockMeta, Index};
use crate::{Error, Result, SyncPolicy};

/// One change to the index.
pub enum Op {
    PutRec {
        key: [u8; 12],
        value: Vec<u8>,
    },
    DelRec {
        key: [u8; 12],
    },
    PutBlock {
        id: u64,
        meta: BlockMeta,
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
        key: Vec<u8>,
        id: u32,
    },
    DelEntry {
        key: Vec<u8>,
    },
    /// Deletes every record of an entry.
    DelEntryRecords {
        entry_id: u32,
    },
}

/// A set of ops that succeed or fail together, with the block files they wrote.
#[derive(Default)]
pub struct Change {
    pub ops: Vec<Op>,
    pub files: Vec<(u64, Arc<File>)>,
}

type Slot = Arc<Mutex<Option<Result<(), String>>>>;

struct Queue {
    pending: Vec<(Change, Slot)>,
    leader: bool,
}

pub struct Committer {
    queue: Mutex<Queue>,
    cv: Condvar,
    policy: SyncPolicy,
    /// Block files written since the last periodic sync.
    dirty: Mutex<HashMap<u64, Arc<File>>>,
}

impl Committer {
    pub fn new(policy: SyncPolicy) -> Committer {
        Committer {
            queue: Mutex::new(Queue {
                pending: Vec::new(),
                leader: false,
            }),
            cv: Condvar::new(),
            policy,
            dirty: Mutex::new(HashMap::new()),
        }
    }

    /// Commits `change`; returns once it is in the index (and on disk, for `Always`).
    pub fn commit(&self, index: &Index, change: Change) -> Result<()> {
        let slot: Slot = Arc::new(Mutex::new(None));
        let mut q = self.queue.lock();
        q.pending.push((change, slot.clone()));
        loop {
            if let Some(res) = slot.lock().take() {
                return res.map_err(Error::Index);
            }
            if q.leader {
                self.cv.wait(&mut q);
                continue;
            }
            q.leader = true;
            let group = std::mem::take(&mut q.pending);
            drop(q);
            let res = self.run_group(index, &group);
            for (_, s) in &group {
                *s.lock() = Some(res.clone());
            }
            q = self.queue.lock();
            q.leader = false;
            self.cv.notify_all();
        }
    }

    fn run_group(&self, index: &Index, group: &[(Change, Slot)]) -> Result<(), String> {
        let mut files: HashMap<u64, Arc<File>> = HashMap::new();
        for (c, _) in group {
            for (id, f) in &c.files {
                files.insert(*id, f.clone());
            }
        }
        if self.policy == SyncPolicy::Always {
            for f in files.values() {
                f.sync_data()
                    .map_err(|e| format!("fsync of a block file failed: {e}"))?;
            }
        }
        let mut txn = index.write_txn().map_err(|e| e.to_string())?;
        for (c, _) in group {
            for op in &c.ops {
                apply(index, &mut txn, op).map_err(|e| e.to_string())?;
            }
        }
        txn.commit().map_err(|e| Error::from(e).to_string())?;
        match self.policy {
            SyncPolicy::Always => index
                .env
                .force_sync()
                .map_err(|e| format!("index fsync failed: {e}"))?,
            SyncPolicy::Periodic(_) => self.dirty.lock().extend(files),
            SyncPolicy::Never => {}
        }
        Ok(())
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
        index.env.force_sync()?;
        Ok(())
    }
}

fn apply(index: &Index, txn: &mut RwTxn<'_>, op: &Op) -> Result<()> {
    match op {
        Op::PutRec { key, value } => index.records.put(txn, key, value)?,
        Op::DelRec { key } => {
            index.records.delete(txn, key)?;
        }
        Op::PutBlock { id, meta } => index.blocks.put(txn, &id.to_be_bytes(), &meta.encode())?,
        Op::DelBlock { id } => {
            index.blocks.delete(txn, &id.to_be_bytes())?;
        }
        Op::DelBlockRecords {
            entry_id,
            min,
            max,
            block_id,
        } => index.delete_block_records(txn, *entry_id, *min, *max, *block_id)?,
        Op::PutEntry { key, id } => index.entries.put(txn, key, &id.to_be_bytes())?,
        Op::DelEntry { key } => {
            index.entries.delete(txn, key)?;
        }
        Op::DelEntryRecords { entry_id } => index.delete_entry_records(txn, *entry_id)?,
    }
    Ok(())
}
