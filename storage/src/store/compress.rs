//! `Store`'s compress passes of lifecycle rules (`LifecycleAction::Compress`): records older
//! than a rule's cutoff, stored raw, written again zstd-compressed.
//!
//! A page of index records is listed under the entry lock (as a removal pass does), the
//! lock released; each selected raw record is read and compressed with no lock held; then,
//! a batch of at most [`BATCH_BYTES`] compressed bytes at a time, under the entry lock: each
//! record is looked up again (skipped if it moved or went: a label update, a removal, a
//! compress of another rule), its compressed frame appended to a block of compressed copies
//! (the writers' active block sealed first; same timestamp, content type and labels; the
//! frame says zstd and the raw length), the old
//! frames retired in one index commit, then flagged deleted, and a block left with no live
//! record deleted: that is where the space comes back. Writers to the entry wait for one
//! batch's append and commit at most, as for another write.
//!
//! A kill -9 leaves each record old or new, never both or neither: before the commit the
//! index points at the raw frame and recovery finds the appended compressed one as a later
//! frame of the same timestamp (kept, as a label update's copy: the same bytes and
//! attributes); after it the index points at the compressed one, and a rebuild from the
//! block files keeps the later frame. Records already compressed, in a tiered block, under
//! 64 bytes, over [`RECORD_MAX`], or that zstd does not shrink are left as they are.

use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;

use crate::bucket::Bucket;
use crate::codec::frame::{encode_head, seal_head, HeadSpec, FLAG_DELETED, FLAG_ZSTD};
use crate::codec::index::IndexValue;
use crate::commit::Op;
use crate::entry::{Block, Entry};
use crate::error::{Error, Result};
use crate::index::Order;
use crate::lifecycle::PassReport;
use crate::read::read_payload;
use crate::record::Query;
use crate::selector::{Selector, REMOVE_PAGE};
use crate::settings::Compression;
use crate::store::lifecycle::look_behind;
use crate::store::Store;
use crate::tier::Access;
use crate::when::Condition;
use crate::write::{compress, Undo, FRAME_SLACK};

/// Compressed bytes written under one hold of the entry lock (and held in memory)...
const BATCH_BYTES: usize = 4 << 20;
/// ... and records.
const BATCH_RECORDS: usize = 256;

/// Records larger than this are left raw (a record is compressed in memory).
pub(crate) const RECORD_MAX: u64 = 64 << 20;

/// The zstd level of a compress rule: the bucket's, else zstd's default.
fn level_of(b: &Bucket) -> i32 {
    match b.settings().compression {
        Compression::Zstd { level } => level,
        Compression::None => 3,
    }
}

/// A record to compress: its timestamp, where it is, its compressed payload.
type Packed = (u64, IndexValue, Vec<u8>);

impl Store {
    /// Compresses (or counts, `dry`) the entry's raw records in `[from, cutoff)` that
    /// `condition` keeps; returns where the next pass resumes (`cutoff` once done).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn compress_older(
        &self,
        b: &Bucket,
        e: &Entry,
        from: u64,
        cutoff: u64,
        condition: Option<&Condition>,
        dry: bool,
        limit: u64,
        report: &mut PassReport,
    ) -> Result<u64> {
        let query = Query {
            when: condition.cloned(),
            ..Query::default()
        };
        let mut sel = Selector::new(&query);
        let level = Compression::Zstd { level: level_of(b) };
        let tier = self.inner.tier.as_ref();
        let mut lo = from;
        while lo < cutoff {
            let room = limit.saturating_sub(report.looked_at);
            if room == 0 {
                return Ok(lo);
            }
            let n = (room as usize).min(REMOVE_PAGE);
            let mut page = Vec::with_capacity(n);
            {
                // Listed under the entry lock, as a removal pass does: a write the page
                // misses commits after it (see `Entry::note_change`).
                let mut st = match e.lock_live(b.name()) {
                    Ok(st) => st,
                    Err(Error::NotFound(_)) => return Ok(cutoff),
                    Err(err) => return Err(err),
                };
                look_behind(b, e, &mut st, cutoff);
                let txn = self.inner.index.read_txn()?;
                self.inner
                    .index
                    .range(&txn, e.id(), lo..cutoff, Order::Ascending, n, &mut page)?;
            }
            let last = page.last().map(|(ts, _)| *ts);
            let full = page.len() == n;
            report.looked_at += page.len() as u64;
            let mut listed = Vec::new();
            let ended = sel.select(page, &mut listed)?;
            let mut batch: Vec<Packed> = Vec::new();
            let mut batch_bytes = 0;
            for (ts, v) in listed {
                let raw = v.flags & FLAG_ZSTD == 0;
                let local = !tier.is_some_and(|t| t.is_tiered(v.block_id));
                if !raw || !local || v.size < 64 || v.size > RECORD_MAX {
                    continue;
                }
                if dry {
                    report.compressed += 1;
                    continue;
                }
                let data = match read_payload(self.inner.sources(), e, ts, &v, Access::Point) {
                    Ok(d) => d,
                    // Removed or moved since it was listed: nothing to compress.
                    Err(Error::NotFound(_)) => continue,
                    Err(err) => return Err(err),
                };
                let Some(packed) = compress(level, &data).filter(|p| p.len() < data.len()) else {
                    continue;
                };
                batch_bytes += packed.len();
                batch.push((ts, v, packed));
                if batch_bytes >= BATCH_BYTES || batch.len() >= BATCH_RECORDS {
                    self.write_compressed(b, e, std::mem::take(&mut batch), report)?;
                    batch_bytes = 0;
                }
            }
            if !batch.is_empty() {
                self.write_compressed(b, e, batch, report)?;
            }
            match last {
                Some(ts) if full && !ended => lo = ts + 1,
                _ => return Ok(cutoff),
            }
        }
        Ok(lo)
    }

    /// Appends the compressed frames of `batch` and retires the raw ones, in one commit
    /// under the entry lock (see the module's comment).
    fn write_compressed(
        &self,
        b: &Bucket,
        e: &Entry,
        batch: Vec<Packed>,
        report: &mut PassReport,
    ) -> Result<()> {
        let need = batch
            .iter()
            .map(|(_, v, p)| p.len() as u64 + (v.frame_len - v.stored) + FRAME_SLACK)
            .sum();
        let _res = self.reserve(b, need)?;
        let mut st = match e.lock_live(b.name()) {
            Ok(st) => st,
            Err(Error::NotFound(_)) => return Ok(()),
            Err(err) => return Err(err),
        };
        // Still where they were listed? (A label update, removal or another compress moved
        // or dropped the others: they are skipped.)
        let mut still = Vec::with_capacity(batch.len());
        {
            let txn = self.inner.index.read_txn()?;
            for (ts, v, packed) in batch {
                let now = self.inner.index.get_record(&txn, e.id(), ts)?;
                if now.as_ref() == Some(&v) && st.block(v.block_id).is_some() {
                    still.push((ts, v, packed));
                }
            }
        }
        if still.is_empty() {
            return Ok(());
        }
        // The compressed frames go to blocks of their own, never the writers' active block:
        // a block that held both would never empty (its raw records compressed later, the
        // compressed ones kept alive), and the space would not come back. The active block
        // is sealed first, so the copies' blocks are newer than every block holding a raw
        // copy (recovery keeps the later frame of a timestamp) and the writers' next block
        // is newer still (a label update's copy then wins over a compressed one).
        let mut ops = Vec::new();
        if let Some(Block { id, state }) = st.seal_active() {
            ops.push(Op::PutBlock { id, state });
        }
        let mut undo = Undo::begin(&st);
        // The copies are puts behind the rules' resume points, but change nothing a rule
        // selects by (timestamp, labels, bytes): not noted (see `EntryState::note_put`).
        let behind = st.behind();
        let mut done: Vec<(u64, IndexValue, IndexValue)> = Vec::with_capacity(still.len());
        let appended = (|| -> Result<()> {
            for (ts, old, packed) in still {
                let stored = packed.len() as u64;
                let at = self.frame_at(
                    b,
                    e,
                    &mut st,
                    ts,
                    stored + (old.frame_len - old.stored),
                    &mut ops,
                    &mut undo,
                )?;
                let flags = (old.flags & !FLAG_DELETED) | FLAG_ZSTD;
                let mut head = encode_head(&HeadSpec {
                    flags,
                    ts,
                    base_ts: at.block.base_ts,
                    stored_len: stored,
                    raw_len: old.size,
                    content_type: &old.attrs.content_type,
                    labels: &old.attrs.labels,
                    padded: false,
                })
                .bytes;
                seal_head(&mut head, crate::crc::crc32c(&packed), stored);
                at.file
                    .write_all_at(&packed, at.start + head.len() as u64)
                    .map_err(|err| Error::io("writing a compressed record", err))?;
                at.file
                    .write_all_at(&head, at.start)
                    .map_err(|err| Error::io("writing a record head", err))?;
                let value = IndexValue {
                    block_id: at.block.id,
                    offset: at.start,
                    frame_len: head.len() as u64 + stored,
                    stored,
                    size: old.size,
                    flags,
                    attrs: old.attrs.clone(),
                };
                self.frame_done(b, e, &mut st, ts, value.clone(), &mut ops);
                done.push((ts, old, value));
            }
            Ok(())
        })();
        st.restore_behind(behind);
        if let Err(err) = appended {
            self.undo(b, e, &mut st, undo);
            return Err(err);
        }
        if let Some(Block { id, state }) = st.seal_active() {
            ops.push(Op::PutBlock { id, state });
        }
        let mut touched = BTreeSet::new();
        for (_, old, _) in &done {
            if st.retire_one(old.block_id).is_some() {
                touched.insert(old.block_id);
            }
        }
        let mut emptied = Vec::new();
        for &id in &touched {
            if let Some(m) = st.block(id) {
                if m.records == 0 && !st.is_active(id) {
                    emptied.push(id);
                }
                ops.push(Op::PutBlock { id, state: m });
            }
        }
        self.commit_or_undo(b, e, &mut st, ops, undo)?;
        crate::crash_point("compress-committed");
        // Committed: the index points at the compressed copies. Retire the raw frames on
        // disk too (if this fails, a rebuild finds two frames of one timestamp and keeps
        // the later, the compressed one).
        for (ts, old, new) in &done {
            if let Err(err) = self.flag_deleted(e, old) {
                log::error!(
                    "could not flag the raw copy of {}/{}@{ts}: {err}",
                    b.name(),
                    e.name()
                );
            }
            report.compressed += 1;
            report.saved = report
                .saved
                .saturating_add(old.frame_len.saturating_sub(new.frame_len));
        }
        crate::crash_point("compress-flagged");
        for id in emptied {
            self.delete_block(b, e, &mut st, id)?;
            report.blocks += 1;
        }
        Ok(())
    }
}
