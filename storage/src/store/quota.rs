//! `Store`'s space keeping: FIFO quotas and free-space reservations (`quota.rs`); age-based
//! retention is `lifecycle.rs`.

use crate::bucket::Bucket;
use crate::commit::{Change, Op};
use crate::entry::{Entry, EntryState};
use crate::error::{Result, WriteError};
use crate::quota::{larger_than_quota, local_block_bytes, quota_exceeded, Reservation};
use crate::settings::{BucketSettings, QuotaType};
use crate::store::Store;

impl Store {
    /// Admits a write of `need` bytes, all of them received: checks the quota and the
    /// free-space guard, evicting FIFO blocks as needed. A FIFO bucket deletes its oldest
    /// blocks to fit its quota, and also when the file system runs short of free space:
    /// such a bucket keeps taking writes while it has a block to give up. It evicts only
    /// when that can make the write fit (see [`Store::reserve_writing`]).
    pub(crate) fn reserve<'a>(&self, bucket: &'a Bucket, need: u64) -> Result<Reservation<'a>> {
        self.reserve_writing(bucket, need, need)
    }

    /// As [`Store::reserve`], for a write the quota counts as `need` bytes of which only
    /// `writing` are new on disk: a spooled payload that becomes its block is on disk
    /// already, and its bytes passed the free-space guard as they arrived
    /// (`admit_received`). Demanding them again refused a large write that fitted, asking
    /// for about twice its size free.
    ///
    /// Nothing is evicted for a write that eviction cannot make fit: one larger than the
    /// whole quota (`LargerThanQuota`), or one the disk could not hold even with every
    /// block of the bucket given up (`DiskFull`). Both are refused first: evicting every
    /// block and then storing the record over the quota, or failing it, lost acknowledged
    /// records for nothing.
    pub(crate) fn reserve_writing<'a>(
        &self,
        bucket: &'a Bucket,
        need: u64,
        writing: u64,
    ) -> Result<Reservation<'a>> {
        let settings = bucket.settings();
        let _g = bucket.lock_evict();
        match settings.quota_type {
            QuotaType::None => {}
            QuotaType::Hard => {
                if need > settings.quota_size {
                    return Err(larger_than_quota(bucket, &settings, need));
                }
                if bucket.used() + need > settings.quota_size {
                    return Err(quota_exceeded(bucket, &settings, need));
                }
            }
            QuotaType::Fifo => {
                // A quota of no bytes is ReductStore's "keep only the newest block"
                // (settings.rs): every write gives up the older blocks, by definition.
                if settings.quota_size > 0 && need > settings.quota_size {
                    return Err(larger_than_quota(bucket, &settings, need));
                }
                // Quota evictions free disk too: the disk is judged before any of them.
                self.fifo_could_make_room(bucket, writing)?;
                // Nothing left to delete ends the loop: the quota's precision is one block.
                while bucket.used() + need > settings.quota_size && self.evict_oldest(bucket)? {}
            }
        }
        self.guard_free(bucket, &settings, writing)?;
        self.inner.free.written(writing);
        bucket.reserve(need);
        Ok(Reservation {
            bucket,
            bytes: need,
        })
    }

    /// Admits `n` more bytes into a spool that now holds `total`, of a payload of which
    /// `rest` bytes (these `n` included) are still to reach the disk (`n` itself when its
    /// length was not announced): the free-space guard (a FIFO bucket evicts for bytes that
    /// arrived, and only when that can make room for the rest too) and an early refusal of a
    /// total that the quota can never or no longer fit (HARD), or that is larger than the
    /// whole quota (FIFO: refused before the bucket evicts for its bytes). Reserves nothing:
    /// `write_spooled` reserves the final size.
    pub(crate) fn admit_received(
        &self,
        bucket: &Bucket,
        total: u64,
        n: u64,
        rest: u64,
    ) -> Result<()> {
        let settings = bucket.settings();
        match settings.quota_type {
            QuotaType::None => {}
            QuotaType::Hard => {
                if total > settings.quota_size {
                    return Err(larger_than_quota(bucket, &settings, total));
                }
                if bucket.used() + total > settings.quota_size {
                    return Err(quota_exceeded(bucket, &settings, total));
                }
            }
            QuotaType::Fifo => {
                let whole = total - n + rest;
                if settings.quota_size > 0 && whole > settings.quota_size {
                    return Err(larger_than_quota(bucket, &settings, whole));
                }
            }
        }
        let _g = (settings.quota_type == QuotaType::Fifo).then(|| bucket.lock_evict());
        if settings.quota_type == QuotaType::Fifo && rest > n {
            self.fifo_could_make_room(bucket, rest)?;
        }
        self.guard_free(bucket, &settings, n)?;
        self.inner.free.written(n);
        Ok(())
    }

    /// Refuses `need` more bytes when they would eat into the free-space reserve, unless a
    /// FIFO bucket can give up enough blocks for them: it then evicts, oldest first, until
    /// they fit. The caller holds the bucket's evict lock (FIFO) and no entry lock.
    fn guard_free(&self, bucket: &Bucket, settings: &BucketSettings, need: u64) -> Result<()> {
        let reserve = self.inner.opts.free_space_reserve;
        let mut free = self.inner.free.get(&self.inner.path, false)?;
        if free >= reserve.saturating_add(need) {
            return Ok(());
        }
        if settings.quota_type != QuotaType::Fifo {
            return Err(self.disk_full(free, need));
        }
        free = self.fifo_could_make_room(bucket, need)?;
        while free < reserve.saturating_add(need) {
            if !self.evict_oldest(bucket)? {
                return Err(self.disk_full(free, need));
            }
            free = self.inner.free.get(&self.inner.path, true)?;
        }
        Ok(())
    }

    /// The free bytes, or `DiskFull` unless the disk has room for `need` more bytes above
    /// the reserve now, or would have once every block of the FIFO `bucket` kept on this
    /// disk is deleted. Without this check a write that could never fit emptied the bucket,
    /// one block at a time, and was refused anyway. The estimate is the blocks' indexed
    /// bytes: space a reader still holds open comes back only when it closes, so eviction
    /// can still fall short, rarely.
    fn fifo_could_make_room(&self, bucket: &Bucket, need: u64) -> Result<u64> {
        let reserve = self.inner.opts.free_space_reserve;
        let want = reserve.saturating_add(need);
        let free = self.inner.free.get(&self.inner.path, false)?;
        if free >= want {
            return Ok(free);
        }
        // Refused on a fresh figure only (the cached one may be up to 20 ms old).
        let free = self.inner.free.get(&self.inner.path, true)?;
        if free >= want || free.saturating_add(local_block_bytes(bucket)) >= want {
            return Ok(free);
        }
        Err(self.disk_full(free, need))
    }

    /// Refuses `need` more bytes that would eat into the free-space reserve, evicting
    /// nothing: for a spooled payload that was to become its block and has to be copied
    /// after all (`write_spooled`), whose caller holds an entry lock (eviction takes entry
    /// locks).
    pub(crate) fn guard_free_no_evict(&self, need: u64) -> Result<()> {
        let reserve = self.inner.opts.free_space_reserve;
        let free = self.inner.free.get(&self.inner.path, true)?;
        if free < reserve.saturating_add(need) {
            return Err(self.disk_full(free, need));
        }
        self.inner.free.written(need);
        Ok(())
    }

    fn disk_full(&self, available: u64, needed: u64) -> crate::error::Error {
        self.inner.free.refused(needed);
        WriteError::DiskFull {
            path: self.inner.path.clone(),
            available,
            reserve: self.inner.opts.free_space_reserve,
            needed,
        }
        .into()
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
