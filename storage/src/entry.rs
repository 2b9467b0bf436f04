//! An entry's shared state: its blocks, its active block, and what timestamps it has used.
//!
//! Everything here is behind the entry's mutex (`Rank::Entry`): writers, removals and label
//! updates of one entry take it for the whole of their change, so operations on one record
//! are serialized. Readers never take it; they look records up in the index and read block
//! files through the store's [`FileCache`](crate::files::FileCache).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::codec::index::BlockState;
use crate::error::{NotFound, Result};
use crate::index::Index;
use crate::lock::{Mutex, MutexGuard, Rank};
use crate::names::entry_dir_name;
use crate::record::EntryInfo;
use crate::settings::BucketSettings;

pub(crate) struct Entry {
    id: u32,
    name: String,
    dir: PathBuf,
    state: Mutex<EntryState>,
}

pub(crate) struct EntryState {
    /// Every block of the entry with its state, as committed (or about to be).
    blocks: BTreeMap<u64, BlockState>,
    /// The block appended to; always one of `blocks`.
    active: Option<Active>,
    pub last_auto_ts: u64,
    /// No record of the entry has a larger timestamp (`None`: the entry has never held
    /// one). Conservative: removals do not lower it. A timestamp above it needs no
    /// duplicate check in the index, which makes in-order writes skip an LMDB lookup.
    pub ceiling: Option<u64>,
    /// Lifecycle resume points of this entry are all at or below this timestamp (a pass
    /// raises it to its cutoff before it lists a page): a record put below it may be
    /// behind one of them, so it is noted in `behind`.
    lifecycle_horizon: u64,
    /// The lowest timestamp put (written, copied by a label update) below
    /// `lifecycle_horizon` since a lifecycle pass last took it (`u64::MAX`: none). A pass
    /// moves every rule's resume point of the entry back to it (`store/lifecycle.rs`).
    behind: u64,
    removed: bool,
}

/// A change of an entry's bytes on disk, which its bucket's total follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SizeChange {
    pub before: u64,
    pub after: u64,
}

/// A block of an entry with its state (as the entry holds it, or to be committed).
#[derive(Clone, Copy)]
pub(crate) struct Block {
    pub id: u64,
    pub state: BlockState,
}

/// What an entry keeps only in the object store.
#[derive(Clone, Copy, Default)]
pub(crate) struct TieredSize {
    pub bytes: u64,
    pub blocks: u64,
}

/// The block an entry appends to (its handle comes from the file cache).
#[derive(Clone, Copy)]
pub(crate) struct Active {
    pub id: u64,
    pub len: u64,
    pub base_ts: u64,
}

impl EntryState {
    pub fn new(blocks: BTreeMap<u64, BlockState>) -> EntryState {
        let ceiling = blocks
            .values()
            .filter(|m| m.records > 0)
            .map(|m| m.max_ts)
            .max();
        EntryState {
            blocks,
            active: None,
            last_auto_ts: 0,
            ceiling,
            lifecycle_horizon: 0,
            behind: u64::MAX,
            removed: false,
        }
    }

    /// A record was put at `ts` (a write, or a label update's copy): noted if it may be
    /// behind a lifecycle resume point.
    pub fn note_put(&mut self, ts: u64) {
        if ts < self.lifecycle_horizon {
            self.behind = self.behind.min(ts);
        }
    }

    /// A lifecycle pass is about to look at the entry below `cutoff`: records put below it
    /// from now on are noted. Returns (and forgets) the lowest one put behind a resume point
    /// since the last call, if any.
    pub fn lifecycle_look(&mut self, cutoff: u64) -> Option<u64> {
        self.lifecycle_horizon = self.lifecycle_horizon.max(cutoff);
        let low = std::mem::replace(&mut self.behind, u64::MAX);
        (low != u64::MAX).then_some(low)
    }

    /// What `note_put` noted so far, and back to it afterwards: a compress pass's copies
    /// (same timestamps, labels and bytes) change nothing a rule selects by.
    pub fn behind(&self) -> u64 {
        self.behind
    }

    pub fn restore_behind(&mut self, behind: u64) {
        self.behind = behind;
    }

    pub fn record_count(&self) -> u64 {
        self.blocks.values().map(|b| b.records).sum()
    }

    pub fn block_bytes(&self) -> u64 {
        self.blocks.values().map(|b| b.indexed_len).sum()
    }

    /// Bytes and number of blocks kept only in the object store.
    pub fn tiered(&self) -> TieredSize {
        self.blocks
            .values()
            .filter(|b| b.tiered)
            .fold(TieredSize::default(), |t, b| TieredSize {
                bytes: t.bytes + b.indexed_len,
                blocks: t.blocks + 1,
            })
    }

    /// Sealed blocks kept locally (not the active one), oldest first.
    pub fn local_sealed(&self) -> impl Iterator<Item = Block> + '_ {
        self.blocks
            .iter()
            .filter(|(id, m)| m.sealed && !m.tiered && !self.is_active(**id))
            .map(|(id, m)| Block { id: *id, state: *m })
    }

    /// A block was uploaded and verified: returns its state marked tiered (to be
    /// committed), or `None` if it is gone.
    pub fn mark_tiered(&mut self, id: u64) -> Option<BlockState> {
        let m = self.blocks.get_mut(&id)?;
        m.tiered = true;
        Some(*m)
    }

    /// A block adopted from the object store (restore, replica refresh).
    pub fn adopt(&mut self, id: u64, state: BlockState) {
        self.ceiling = self.ceiling.max(Some(state.max_ts));
        self.blocks.insert(id, state);
    }

    pub fn block(&self, id: u64) -> Option<BlockState> {
        self.blocks.get(&id).copied()
    }

    pub fn block_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.blocks.keys().copied()
    }

    pub fn block_count(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// The oldest block (lowest id: first written).
    pub fn oldest_block(&self) -> Option<u64> {
        self.blocks.keys().next().copied()
    }

    pub fn active(&self) -> Option<Active> {
        self.active
    }

    /// Whether the active block can take `records` more records (`records >= 1`) and
    /// `bytes` more bytes (a block that would hold only the one record takes it whatever
    /// its size).
    pub fn active_has_room(&self, settings: &BucketSettings, records: u64, bytes: u64) -> bool {
        let Some(a) = self.active else { return false };
        let m = self.block(a.id).unwrap_or_default();
        let alone = m.records + records <= 1;
        m.records + records <= settings.max_block_records
            && (a.len + bytes < settings.max_block_size || alone)
    }

    /// Seals the active block; returns its id and final state, to be committed.
    pub fn seal_active(&mut self) -> Option<Block> {
        let a = self.active.take()?;
        let m = self.blocks.get_mut(&a.id)?;
        m.sealed = true;
        Some(Block {
            id: a.id,
            state: *m,
        })
    }

    /// A new block becomes the active one.
    pub fn start_block(&mut self, id: u64, state: BlockState, len: u64) -> Active {
        let a = Active {
            id,
            len,
            base_ts: state.base_ts,
        };
        self.blocks.insert(id, state);
        self.active = Some(a);
        a
    }

    /// Frames of `len` bytes in all were appended to the active block, holding these
    /// timestamps: updates its state and returns it (to be committed).
    pub fn appended(&mut self, len: u64, ts: impl Iterator<Item = u64>) -> Option<Block> {
        let a = self.active.as_mut()?;
        a.len += len;
        let (id, new_len) = (a.id, a.len);
        let meta = self.blocks.get_mut(&id)?;
        for ts in ts {
            if meta.records == 0 {
                meta.min_ts = ts;
                meta.max_ts = ts;
            }
            meta.min_ts = meta.min_ts.min(ts);
            meta.max_ts = meta.max_ts.max(ts);
            meta.records += 1;
        }
        meta.indexed_len = new_len;
        Some(Block { id, state: *meta })
    }

    /// Drops a deleted block (and the active mark, if it was the active one).
    pub fn forget_block(&mut self, id: u64) -> Option<BlockState> {
        if self.is_active(id) {
            self.active = None;
        }
        self.blocks.remove(&id)
    }

    pub fn is_active(&self, block_id: u64) -> bool {
        self.active.is_some_and(|a| a.id == block_id)
    }

    /// One live record of `block_id` is gone (removed, or superseded by a label update):
    /// returns the block's new state.
    pub fn retire_one(&mut self, block_id: u64) -> Option<BlockState> {
        let m = self.blocks.get_mut(&block_id)?;
        m.records = m.records.saturating_sub(1);
        Some(*m)
    }

    /// After a failed write: reload an entry's block states from the index (memory ran ahead
    /// of it) and leave it without an active block, so memory agrees with what is committed.
    /// Returns the change of the entry's block bytes, for the bucket's total
    /// ([`Bucket::resize`](crate::bucket::Bucket::resize)).
    pub fn reload(&mut self, index: &Index, entry_id: u32) -> Result<SizeChange> {
        let txn = index.read_txn()?;
        let before = self.block_bytes();
        let blocks: BTreeMap<u64, BlockState> = index
            .blocks(&txn)?
            .into_iter()
            .filter_map(|(id, m)| m.filter(|m| m.entry_id == entry_id).map(|m| (id, m)))
            .collect();
        self.blocks = blocks;
        self.active = None;
        let after = self.block_bytes();
        Ok(SizeChange { before, after })
    }

    /// The entry is gone: nothing may be written to it again.
    pub fn mark_removed(&mut self) {
        self.removed = true;
        self.active = None;
        self.blocks.clear();
    }

    /// Whether any block is kept only in the object store.
    pub fn has_tiered(&self) -> bool {
        self.blocks.values().any(|m| m.tiered)
    }

    /// The state, moved out for the entry's new name (`Store::rename_entry`); this one is
    /// left removed, so a writer that took the old entry finds it gone.
    pub fn take_for_rename(&mut self) -> EntryState {
        let moved = EntryState {
            blocks: std::mem::take(&mut self.blocks),
            active: self.active.take(),
            last_auto_ts: self.last_auto_ts,
            ceiling: self.ceiling,
            lifecycle_horizon: self.lifecycle_horizon,
            behind: self.behind,
            removed: false,
        };
        self.mark_removed();
        moved
    }
}

impl Entry {
    pub fn new(id: u32, name: &str, bucket_dir: &Path, state: EntryState) -> Entry {
        Entry {
            id,
            name: name.to_string(),
            dir: bucket_dir.join(entry_dir_name(name)),
            state: Mutex::new(Rank::Entry, state),
        }
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The name of the bucket the entry is in (its folder's parent).
    pub fn bucket_name(&self) -> String {
        self.dir
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    pub fn block_path(&self, block_id: u64) -> PathBuf {
        crate::block::block_path(&self.dir, block_id)
    }

    /// Whether the entry was removed (or renamed away), if its lock is free now; `None`
    /// while another holds it.
    pub fn removed_now(&self) -> Option<bool> {
        self.state.try_lock().map(|st| st.removed)
    }

    /// Whether the entry was removed (or renamed away), waiting for its lock.
    pub fn removed(&self) -> bool {
        self.state.lock().removed
    }

    /// Locks the entry's state, removed or not (removal, statistics).
    pub fn lock(&self) -> MutexGuard<'_, EntryState> {
        self.state.lock()
    }

    /// Locks the entry's state for a change; an entry removed meanwhile is not found.
    pub fn lock_live(&self, bucket: &str) -> Result<MutexGuard<'_, EntryState>> {
        self.live(bucket, self.state.lock())
    }

    /// As [`Entry::lock_live`] without waiting: `None` while another holds the lock.
    pub fn try_lock_live(&self, bucket: &str) -> Result<Option<MutexGuard<'_, EntryState>>> {
        match self.state.try_lock() {
            Some(st) => self.live(bucket, st).map(Some),
            None => Ok(None),
        }
    }

    /// As [`Entry::lock_live`], as one of several entry locks held at once: taken in
    /// increasing entry id order (`Store::write_groups`; debug builds check it).
    pub fn lock_live_ordered(&self, bucket: &str) -> Result<MutexGuard<'_, EntryState>> {
        self.live(bucket, self.state.lock_keyed(u64::from(self.id)))
    }

    fn live<'a>(
        &self,
        bucket: &str,
        st: MutexGuard<'a, EntryState>,
    ) -> Result<MutexGuard<'a, EntryState>> {
        if st.removed {
            return Err(NotFound::Entry {
                bucket: bucket.into(),
                entry: self.name.clone(),
            }
            .into());
        }
        Ok(st)
    }

    pub fn info(&self, index: &Index) -> Result<EntryInfo> {
        let (record_count, size, block_count) = {
            let st = self.state.lock();
            (st.record_count(), st.block_bytes(), st.block_count())
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
