//! `Store`'s space keeping: FIFO quotas and free-space reservations (`quota.rs`); age-based
//! retention is `lifecycle.rs`.

use crate::bucket::Bucket;
use crate::commit::{Change, Op};
use crate::entry::{Entry, EntryState};
use crate::error::{Result, WriteError};
use crate::quota::{quota_exceeded, Reservation};
use crate::settings::{BucketSettings, QuotaType};
use crate::store::Store;

impl Store {
    /// Admits a write of `need` bytes, all of them received: checks the quota and the
    /// free-space guard, evicting FIFO blocks as needed. A FIFO bucket deletes its oldest
    /// blocks to fit its quota, and also when the file system runs short of free space:
    /// such a bucket keeps taking writes while it has a block to give up.
    pub(crate) fn reserve<'a>(&self, bucket: &'a Bucket, need: u64) -> Result<Reservation<'a>> {
        let settings = bucket.settings();
        let _g = bucket.lock_evict();
        match settings.quota_type {
            QuotaType::None => {}
            QuotaType::Hard => {
                if bucket.used() + need > settings.quota_size {
                    return Err(quota_exceeded(bucket, &settings, need));
                }
            }
            QuotaType::Fifo => {
                // Nothing left to delete ends the loop: the quota's precision is one block.
                while bucket.used() + need > settings.quota_size && self.evict_oldest(bucket)? {}
            }
        }
        self.guard_free(bucket, &settings, need)?;
        self.inner.free.written(need);
        bucket.reserve(need);
        Ok(Reservation {
            bucket,
            bytes: need,
        })
    }

    /// Admits `n` more bytes into a spool that now holds `total`: the free-space guard
    /// (a FIFO bucket evicts for bytes that arrived) and an early HARD-quota refusal. Reserves
    /// nothing: `write_spooled` reserves the final size.
    pub(crate) fn admit_received(&self, bucket: &Bucket, total: u64, n: u64) -> Result<()> {
        let settings = bucket.settings();
        if settings.quota_type == QuotaType::Hard && bucket.used() + total > settings.quota_size {
            return Err(quota_exceeded(bucket, &settings, total));
        }
        let _g = (settings.quota_type == QuotaType::Fifo).then(|| bucket.lock_evict());
        self.guard_free(bucket, &settings, n)?;
        self.inner.free.written(n);
        Ok(())
    }

    /// Refuses `need` more bytes when they would eat into the free-space reserve, unless a
    /// FIFO bucket can give up blocks for them.
    fn guard_free(&self, bucket: &Bucket, settings: &BucketSettings, need: u64) -> Result<()> {
        let reserve = self.inner.opts.free_space_reserve;
        let mut free = self.inner.free.get(&self.inner.path, false)?;
        while free < reserve.saturating_add(need) {
            if settings.quota_type != QuotaType::Fifo || !self.evict_oldest(bucket)? {
                return Err(WriteError::DiskFull {
                    path: self.inner.path.clone(),
                    available: free,
                    reserve,
                }
                .into());
            }
            free = self.inner.free.get(&self.inner.path, true)?;
        }
        Ok(())
    }

    /// Deletes the bucket's oldest block (lowest id: first written). False if none.
    /// The caller holds the bucket's evict lock and no entry lock.
    fn evict_oldest(&self, bucket: &Bucket) -> Result<bool> {
        loop {
            let oldest = bucket
                .entries()
                .into_iter()
                .filter_map(|e| {
                    let id = e.lock().oldest_block();
                    id.map(|id| (id, e))
                })
                .min_by_key(|(id, _)| *id);
            let Some((id, entry)) = oldest else {
                return Ok(false);
            };
            let mut st = entry.lock();
            // The block may have gone between the look and the lock (removed): look again.
            if !self.delete_block(bucket, &entry, &mut st, id)? {
                continue;
            }
            bucket.note_evicted();
            self.inner.note_evicted();
            log::debug!(
                "FIFO quota of bucket {}: evicted block {id:016x} of {}",
                bucket.name(),
                entry.name()
            );
            return Ok(true);
        }
    }

    /// Removes a block with its index records and its file (see `trash.rs` for the order
    /// that keeps a crash from bringing it back). False if the entry has no such block.
    pub(crate) fn delete_block(
        &self,
        bucket: &Bucket,
        entry: &Entry,
        st: &mut EntryState,
        id: u64,
    ) -> Result<bool> {
        let Some(meta) = st.block(id) else {
            return Ok(false);
        };
        let path = entry.block_path(id);
        let trashed = self.inner.trash.take(&path)?;
        crate::crash_point("block-trashed");
        let mut ops = Vec::with_capacity(2);
        if meta.records > 0 {
            ops.push(Op::DelBlockRecords {
                entry_id: entry.id(),
                min: meta.min_ts,
                max: meta.max_ts,
                block_id: id,
            });
        }
        ops.push(Op::DelBlock { id });
        if let Err(e) = self.inner.commit(Change { ops, files: vec![] }) {
            if let Some(t) = &trashed {
                self.inner.trash.restore(t, &path);
            }
            return Err(e);
        }
        crate::crash_point("block-removal-committed");
        st.forget_block(id);
        self.inner.files.forget(id);
        self.inner.committer.forget(id);
        if let Some(t) = &self.inner.tier {
            // A tiered block's objects go too (FIFO and retention count both tiers).
            t.forget(bucket.name(), entry.name(), id);
        }
        if let Some(t) = trashed {
            self.inner.trash.empty(&t);
        }
        bucket.shrink(meta.indexed_len);
        Ok(true)
    }
}
