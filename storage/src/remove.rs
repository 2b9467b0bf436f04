//! Removing records and ranges, and updating labels.
//!
//! A removed record gets the `deleted` flag in its frame header (the one byte of a block
//! that changes after it is written) and leaves the index. A block whose records are all
//! removed is deleted whole, unless it is the block being appended to.

use std::os::unix::fs::FileExt;

use crate::frame::FLAG_DELETED;
use crate::index::IndexValue;
use crate::store::{Bucket, Entry, EntryState};
use crate::sync::{Change, Op};
use crate::*;

/// Records removed per index commit in a range removal.
const REMOVE_PAGE: usize = 4096;

impl Store {
    pub fn remove_record(&self, bucket: &str, entry: &str, ts: u64) -> Result<()> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let mut st = e.state.lock();
        let v = {
            let txn = self.inner.index.read_txn()?;
            self.inner.index.get_record(&txn, e.id, ts)?
        };
        let v = v.ok_or_else(|| NotFound::Record {
            bucket: bucket.into(),
            entry: entry.into(),
            ts,
        })?;
        self.remove_listed(&b, &e, &mut st, vec![(ts, v)])?;
        Ok(())
    }

    /// Removes records with `start <= ts < stop`; returns how many.
    pub fn remove_range(&self, bucket: &str, entry: &str, start: u64, stop: u64) -> Result<u64> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let mut st = e.state.lock();
        let mut removed = 0;
        loop {
            let mut page = Vec::with_capacity(REMOVE_PAGE);
            {
                let txn = self.inner.index.read_txn()?;
                self.inner
                    .index
                    .range(&txn, e.id, start..stop, false, REMOVE_PAGE, &mut page)?;
            }
            if page.is_empty() {
                return Ok(removed);
            }
            removed += page.len() as u64;
            self.remove_listed(&b, &e, &mut st, page)?;
        }
    }

    /// Flags the frames deleted, drops them from the index, deletes emptied blocks.
    fn remove_listed(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        listed: Vec<(u64, IndexValue)>,
    ) -> Result<()> {
        let mut ops = Vec::with_capacity(listed.len() + 4);
        let mut touched = std::collections::BTreeSet::new();
        for (ts, v) in &listed {
            let (file, _) = e.file(v.block_id)?;
            file.write_all_at(&[v.flags | FLAG_DELETED], v.offset + 1)
                .map_err(|err| {
                    Error::io(
                        format!("flagging a record of block {:016x}", v.block_id),
                        err,
                    )
                })?;
            ops.push(Op::DelRec {
                entry_id: e.id,
                ts: *ts,
            });
            if let Some(m) = st.blocks.get_mut(&v.block_id) {
                m.records = m.records.saturating_sub(1);
                touched.insert(v.block_id);
            }
        }
        let active = st.active.as_ref().map(|a| a.id);
        let mut emptied = Vec::new();
        for id in touched {
            let Some(m) = st.blocks.get(&id).copied() else {
                continue;
            };
            if m.records == 0 && Some(id) != active {
                emptied.push(id);
            } else {
                ops.push(Op::PutBlock { id, meta: m });
            }
        }
        self.inner
            .committer
            .commit(&self.inner.index, Change { ops, files: vec![] })?;
        for id in emptied {
            self.delete_block(b, e, st, id)?;
        }
        Ok(())
    }

    /// Sets `set` and removes `remove` labels of a record. Blocks are append-only, so the
    /// record is written again with the new labels and the old frame is flagged deleted.
    pub fn update_labels(
        &self,
        bucket: &str,
        entry: &str,
        ts: u64,
        set: &Labels,
        remove: &[String],
    ) -> Result<RecordMeta> {
        let old = self.read(bucket, entry, Some(ts))?;
        let mut labels = old.meta.labels.clone();
        for k in remove {
            labels.remove(k);
        }
        for (k, v) in set {
            labels.insert(k.clone(), v.clone());
        }
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let old_v = {
            let txn = self.inner.index.read_txn()?;
            self.inner.index.get_record(&txn, e.id, ts)?
        }
        .ok_or_else(|| NotFound::Record {
            bucket: bucket.into(),
            entry: entry.into(),
            ts,
        })?;
        let meta = WriteMeta {
            ts: Some(ts),
            content_type: Some(old.meta.content_type.clone()),
            labels,
        };
        // Write the copy first: a crash in between leaves two frames with one timestamp,
        // and the later one wins in a rebuild. Then retire the old frame.
        let records = [(&meta, old.data.as_slice())];
        let mut res = self.write_many(bucket, entry, records.iter().copied(), 1, true)?;
        res.pop()
            .unwrap_or_else(|| Err(Error::Index("write produced no result".into())))?;
        let mut st = e.state.lock();
        if !st.blocks.contains_key(&old_v.block_id) {
            // The old copy's block went (a FIFO eviction made room for the new copy).
            drop(st);
            return self.head(bucket, entry, Some(ts));
        }
        let (file, _) = e.file(old_v.block_id)?;
        file.write_all_at(&[old_v.flags | FLAG_DELETED], old_v.offset + 1)
            .map_err(|err| Error::io("flagging the old copy of a record", err))?;
        let active = st.active.as_ref().map(|a| a.id);
        if let Some(m) = st.blocks.get_mut(&old_v.block_id) {
            m.records = m.records.saturating_sub(1);
            let m = *m;
            if m.records == 0 && Some(old_v.block_id) != active {
                self.delete_block(&b, &e, &mut st, old_v.block_id)?;
            } else {
                let ops = vec![Op::PutBlock {
                    id: old_v.block_id,
                    meta: m,
                }];
                self.inner
                    .committer
                    .commit(&self.inner.index, Change { ops, files: vec![] })?;
            }
        }
        drop(st);
        self.head(bucket, entry, Some(ts))
    }
}
