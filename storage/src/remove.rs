//! Removing records and ranges.
//!
//! A removed record gets the `deleted` flag in its frame header (the one byte of a block
//! that changes after it is written) and leaves the index. A block whose records are all
//! removed is deleted whole (`quota.rs`, `delete_block`), unless it is the block being
//! appended to. Everything happens under the entry's lock, with the record's location read
//! under that lock: a removal and a label update of one record are serialized, so neither
//! can retire a frame the other already moved, nor bring back one the other removed.

use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;

use crate::bucket::Bucket;
use crate::codec::frame::FLAG_DELETED;
use crate::codec::index::IndexValue;
use crate::commit::{Change, Op};
use crate::entry::{Entry, EntryState};
use crate::*;

impl Store {
    pub fn remove_record(&self, bucket: &str, entry: &str, ts: u64) -> Result<()> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let mut st = e.lock_live(bucket)?;
        let v = {
            let txn = self.inner.index.read_txn()?;
            self.inner.index.get_record(&txn, e.id(), ts)?
        };
        let v = v.ok_or_else(|| NotFound::Record {
            bucket: bucket.into(),
            entry: entry.into(),
            ts,
        })?;
        self.remove_listed(&b, &e, &mut st, vec![(ts, v)])
    }

    /// Removes records with `start <= ts < stop`; returns how many.
    pub fn remove_range(&self, bucket: &str, entry: &str, start: u64, stop: u64) -> Result<u64> {
        // A range is a query without conditions: one removal loop serves both.
        self.remove_where(
            bucket,
            entry,
            &Query {
                start: Some(start),
                stop: Some(stop),
                ..Query::default()
            },
        )
    }

    /// Flags the frames deleted, drops them from the index, deletes emptied blocks.
    pub(crate) fn remove_listed(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        listed: Vec<(u64, IndexValue)>,
    ) -> Result<()> {
        let mut ops = Vec::with_capacity(listed.len() + 4);
        let mut touched = BTreeSet::new();
        for (ts, v) in &listed {
            self.flag_deleted(e, v)?;
            ops.push(Op::DelRec {
                entry_id: e.id(),
                ts: *ts,
            });
            if st.retire_one(v.block_id).is_some() {
                touched.insert(v.block_id);
            }
        }
        let mut emptied = Vec::new();
        // Tiered blocks are marked again after the commit (see `tier/labels.rs`: a sidecar
        // upload that read the index before it must be followed by another).
        let tiered: Vec<u64> = match &self.inner.tier {
            Some(t) => touched
                .iter()
                .copied()
                .filter(|id| t.is_tiered(*id))
                .collect(),
            None => Vec::new(),
        };
        for id in touched {
            let Some(m) = st.block(id) else {
                continue;
            };
            if m.records == 0 && !st.is_active(id) {
                emptied.push(id);
            }
            ops.push(Op::PutBlock { id, state: m });
        }
        self.inner.commit(Change { ops, files: vec![] })?;
        crate::crash_point("records-removal-committed");
        if let Some(t) = &self.inner.tier {
            for id in tiered {
                t.mark_dirty(&e.bucket_name(), e.name(), id);
            }
        }
        for id in emptied {
            self.delete_block(b, e, st, id)?;
        }
        Ok(())
    }

    /// Sets a frame's `deleted` flag (outside its CRC), so a rebuild skips it. A tiered
    /// block has no local file: its heads sidecar is uploaded again without the record.
    pub(crate) fn flag_deleted(&self, e: &Entry, v: &IndexValue) -> Result<()> {
        if let Some(t) = self.inner.tier.as_ref().filter(|t| t.is_tiered(v.block_id)) {
            t.mark_dirty(&e.bucket_name(), e.name(), v.block_id);
            return Ok(());
        }
        let file = self.block_file(e, v.block_id)?;
        file.write_all_at(&[v.flags | FLAG_DELETED], v.offset + 1)
            .map_err(|err| {
                Error::io(
                    format!("flagging a record of block {:016x}", v.block_id),
                    err,
                )
            })
    }
}
