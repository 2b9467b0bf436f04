//! `Store`'s label updates (`labels.rs`: a record's frame copied with new labels).

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::block::{head_crc, read_head};
use crate::bucket::Bucket;
use crate::codec::frame::{combine_crc, encode_head, seal_head, HeadSpec, FLAG_DELETED};
use crate::codec::index::{Attrs, IndexValue};
use crate::commit::Op;
use crate::entry::{Entry, EntryState};
use crate::error::{CorruptionError, Error, NotFound, Result};
use crate::files::CachedBlock;
use crate::labels::{merged, meta_bytes};
use crate::read::meta_of;
use crate::record::{Labels, Query, DEFAULT_CONTENT_TYPE};
use crate::record::{RecordMeta, WriteMeta};
use crate::store::Store;
use crate::write::{check_meta, frame_need, Undo};

impl Store {
    /// Sets `set` and removes `remove` labels of every record `query` selects (its range,
    /// label filters, condition and limit; oldest first, evaluated on the labels before the
    /// update); returns how many. Matches are listed from the index a page at a time (no
    /// payload read), then updated one by one as [`Store::update_labels`]; a record removed
    /// meanwhile is skipped. A strict condition that meets a missing label stops with an
    /// error; the records updated before it stay updated.
    pub fn update_labels_where(
        &self,
        bucket: &str,
        entry: &str,
        query: &Query,
        set: &Labels,
        remove: &[String],
    ) -> Result<u64> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let mut updated = 0;
        // (each update takes the entry's lock itself)
        self.for_each_selected(
            e.id(),
            query,
            || Ok(()),
            |_, listed| {
                for (ts, _) in listed {
                    match self.update_labels(bucket, entry, ts, set, remove) {
                        Ok(_) => updated += 1,
                        Err(Error::NotFound(NotFound::Record { .. })) => {}
                        Err(err) => return Err(err),
                    }
                }
                Ok(())
            },
        )?;
        Ok(updated)
    }

    /// Label updates of several records (ReductStore's `PATCH …/batch`): one result per
    /// update, in order; a missing record is its `NotFound`, the others are updated all the
    /// same. An unknown bucket or entry fails the whole call.
    pub fn update_labels_batch(
        &self,
        bucket: &str,
        entry: &str,
        updates: &[(u64, Labels, Vec<String>)],
    ) -> Result<Vec<Result<RecordMeta>>> {
        let b = self.get_bucket(bucket)?;
        self.get_entry(&b, entry)?;
        Ok(updates
            .iter()
            .map(|(ts, set, remove)| self.update_labels(bucket, entry, *ts, set, remove))
            .collect())
    }

    /// Sets `set` and removes `remove` labels of a record.
    pub fn update_labels(
        &self,
        bucket: &str,
        entry: &str,
        ts: u64,
        set: &Labels,
        remove: &[String],
    ) -> Result<RecordMeta> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let not_found = || -> Error {
            NotFound::Record {
                bucket: bucket.into(),
                entry: entry.into(),
                ts,
            }
            .into()
        };
        // The copy's space is reserved before the entry lock (lock order: evict, then
        // entry), from a first look; the look that counts is the one under the lock.
        let first = self.lookup(&e, ts)?.ok_or_else(not_found)?;
        let estimate = WriteMeta {
            ts: Some(ts),
            content_type: Some(first.attrs.content_type.clone()),
            labels: merged(&first.attrs.labels, set, remove),
        };
        // A tiered record's update writes no frame (see `store/tier.rs`): nothing to reserve.
        let tier = self.inner.tier.as_ref();
        let _res = match tier.is_some_and(|t| t.is_tiered(first.block_id)) {
            true => None,
            false => Some(self.reserve(&b, frame_need(&estimate, first.frame_len))?),
        };
        let mut st = e.lock_live(bucket)?;
        let old = self.lookup(&e, ts)?.ok_or_else(not_found)?;
        if st.block(old.block_id).is_none() {
            return Err(not_found());
        }
        let meta = WriteMeta {
            ts: Some(ts),
            content_type: Some(old.attrs.content_type.clone()),
            labels: merged(&old.attrs.labels, set, remove),
        };
        check_meta(&meta)?;
        if let Some(t) = tier.filter(|t| t.is_tiered(old.block_id)) {
            let new = self.relabel_tiered(t, &b, &e, &mut st, ts, &old, meta.labels)?;
            return Ok(meta_of(ts, &new));
        }
        let mut undo = Undo::begin(&st);
        let mut ops = Vec::new();
        let copied = self.copy_frame(&b, &e, &mut st, ts, &old, &meta, &mut ops, &mut undo);
        let new = match copied {
            Ok(v) => v,
            Err(err) => {
                self.undo(&b, &e, &mut st, undo);
                return Err(err);
            }
        };
        let retired = st.retire_one(old.block_id);
        if let Some(m) = retired {
            ops.push(Op::PutBlock {
                id: old.block_id,
                state: m,
            });
        }
        self.commit_or_undo(&b, &e, &mut st, ops, undo)?;
        crate::crash_point("label-copy-committed");
        // Committed: the index points at the copy. Retire the old frame on disk too (if
        // this fails, a rebuild finds two frames of one timestamp and keeps the later).
        if let Err(err) = self.flag_deleted(&e, &old) {
            log::error!("could not flag the old copy of {bucket}/{entry}@{ts}: {err}");
        }
        if retired.is_some_and(|m| m.records == 0) && !st.is_active(old.block_id) {
            self.delete_block(&b, &e, &mut st, old.block_id)?;
        }
        Ok(meta_of(ts, &new))
    }

    fn lookup(&self, e: &Entry, ts: u64) -> Result<Option<IndexValue>> {
        let txn = self.inner.index.read_txn()?;
        self.inner.index.get_record(&txn, e.id(), ts)
    }

    /// Appends a copy of `old`'s frame with `meta`'s labels, checking the old frame's CRC
    /// as its bytes stream through.
    #[allow(clippy::too_many_arguments)]
    fn copy_frame(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        ts: u64,
        old: &IndexValue,
        meta: &WriteMeta,
        ops: &mut Vec<Op>,
        undo: &mut Undo,
    ) -> Result<IndexValue> {
        let CachedBlock {
            file: src,
            base_ts: src_base,
        } = self
            .inner
            .files
            .get(old.block_id, || e.block_path(old.block_id))?;
        let path = || e.block_path(old.block_id);
        let corrupt = |reason: String| -> Error {
            CorruptionError::Record {
                path: path(),
                offset: old.offset,
                reason,
            }
            .into()
        };
        let old_head = read_head(&src, old.offset, old.offset + old.frame_len, src_base)
            .map_err(|err| Error::io("reading a record head", err))?
            .map_err(|why| corrupt(why.to_string()))?
            .ok_or_else(|| corrupt("the record head is cut short".into()))?;
        let ct = meta.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE);
        let at = self.frame_at(b, e, st, ts, meta_bytes(meta) + old.frame_len, ops, undo)?;
        let flags = old.flags & !FLAG_DELETED;
        let mut head = encode_head(&HeadSpec {
            flags,
            ts,
            base_ts: at.block.base_ts,
            stored_len: old.stored,
            raw_len: old.size,
            content_type: ct,
            labels: &meta.labels,
            padded: false,
        })
        .bytes;
        // Stream the stored bytes across, with their CRC.
        let src_at = old.offset + old_head.head_len as u64;
        let dst_at = at.start + head.len() as u64;
        let mut buf = vec![0u8; (1 << 20).min(old.stored as usize).max(1)];
        let mut crc = 0u32;
        let mut done = 0u64;
        while done < old.stored {
            let n = ((old.stored - done) as usize).min(buf.len());
            src.read_exact_at(&mut buf[..n], src_at + done)
                .map_err(|err| Error::io("reading a record to copy it", err))?;
            at.file
                .write_all_at(&buf[..n], dst_at + done)
                .map_err(|err| Error::io("writing a record's copy", err))?;
            crc = crate::crc::crc32c_append(crc, &buf[..n]);
            done += n as u64;
        }
        let old_crc = head_crc(&src, old.offset, &old_head)
            .map_err(|err| Error::io("reading a record head", err))?;
        if combine_crc(old_crc, crc, old.stored) != old_head.crc {
            return Err(corrupt("CRC32C mismatch: the record is damaged".into()));
        }
        seal_head(&mut head, crc, old.stored);
        at.file
            .write_all_at(&head, at.start)
            .map_err(|err| Error::io("writing a record head", err))?;
        let value = IndexValue {
            block_id: at.block.id,
            offset: at.start,
            frame_len: head.len() as u64 + old.stored,
            stored: old.stored,
            size: old.size,
            flags,
            attrs: Arc::new(Attrs {
                content_type: ct.to_string(),
                labels: meta.labels.clone(),
            }),
        };
        self.frame_done(b, e, st, ts, value.clone(), ops);
        Ok(value)
    }
}
