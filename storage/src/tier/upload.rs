//! The tier thread: uploads sealed blocks, drops their local copies once the object is
//! verified, re-uploads sidecars of tiered blocks that lost records, and deletes objects of
//! blocks the store deleted.
//!
//! One round: pending object deletions; then per bucket with `tier_local_max` or
//! `tier_after`, the sealed local blocks to upload (oldest first while local bytes exceed
//! the budget, and any whose newest record is older than `tier_after`); up to
//! `TierConfig::uploads` of them go up at once (scoped threads), each:
//!
//! 1. PUT of the block, read once: the object store computes its CRC32C as it reads
//!    (multipart when large) and sends it as the checksum the store checks on receipt;
//! 2. its live records from the index (the heads sidecar), PUT of the sidecar, PUT of the
//!    bucket's settings if they changed since the last upload;
//! 3. HEAD: the object's size and stored CRC must be the file's;
//! 4. under the entry lock: if the block still has the records the sidecar lists, commit
//!    `tiered`; then the file is unlinked. A crash before the commit leaves a local block
//!    that is uploaded again (PUTs overwrite); after it, a leftover file that open deletes.
//!
//! Writers never wait on any of this: the thread holds an entry lock only for the commit.
//! A failed round backs off (250 ms doubling to 10 s).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::layout::{parse_block_key, settings_key, Heads};
use super::{Tier, Tiered};
use crate::bucket::Bucket;
use crate::codec::index::BlockState;
use crate::commit::{Change, Op};
use crate::entry::Entry;
use crate::index::Order;
use crate::object_store::{ObjectError, ObjectHead};
use crate::*;

const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What one upload came to.
enum Outcome {
    Tiered(u64),
    /// The block changed or went while it was uploaded: looked at again next round.
    Changed,
}

impl Store {
    /// Starts the tier thread (stopped when the store closes).
    pub(crate) fn start_tier_thread(&self) -> Result<()> {
        let weak = Arc::downgrade(&self.inner);
        let every = match &self.inner.tier {
            Some(t) if t.config().upload => t.config().every,
            _ => return Ok(()),
        };
        let handle = std::thread::Builder::new()
            .name("tsblob-tier".into())
            .spawn(move || {
                super::lower_thread_priority();
                let mut backoff = every;
                let mut swept = false;
                loop {
                    std::thread::sleep(backoff);
                    let Some(inner) = weak.upgrade() else { return };
                    if inner.is_closing() {
                        return;
                    }
                    let store = Store { inner };
                    let ok = store.tier_round(&mut swept);
                    backoff = if ok {
                        every
                    } else {
                        (backoff * 2).clamp(every, MAX_BACKOFF)
                    };
                }
            })
            .map_err(|e| Error::io("starting the tier thread", e))?;
        self.inner.set_tier_thread(handle);
        Ok(())
    }

    /// One round of the tier thread; false if the object store failed.
    pub(crate) fn tier_round(&self, swept: &mut bool) -> bool {
        let Some(tier) = &self.inner.tier else {
            return true;
        };
        let mut ok = tier.run_deletes();
        if !*swept && tier.may_sweep() {
            match self.sweep_orphans(tier) {
                Ok(()) => *swept = true,
                Err(e) => {
                    tier.failed(&e);
                    ok = false;
                }
            }
        }
        ok &= self.reupload_dirty(tier);
        let jobs = self.upload_candidates();
        for batch in jobs.chunks(tier.config().uploads.max(1)) {
            let results: Vec<Result<Outcome>> = std::thread::scope(|s| {
                let handles: Vec<_> = batch
                    .iter()
                    .map(|(b, e, id)| s.spawn(move || self.upload_block(tier, b, e, *id)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(Error::Index("an upload thread panicked".into()))
                        })
                    })
                    .collect()
            });
            let mut failed = false;
            for (r, (b, e, id)) in results.into_iter().zip(batch) {
                match r {
                    Ok(Outcome::Tiered(bytes)) => {
                        tier.uploaded_blocks.fetch_add(1, Ordering::Relaxed);
                        tier.uploaded_bytes.fetch_add(bytes, Ordering::Relaxed);
                    }
                    Ok(Outcome::Changed) => {}
                    Err(err) => {
                        tier.upload_errors.fetch_add(1, Ordering::Relaxed);
                        log::warn!(
                            "upload of block {id:016x} of {}/{} failed (retried with backoff): {err}",
                            b.name(),
                            e.name()
                        );
                        failed = true;
                    }
                }
            }
            if failed {
                return false;
            }
        }
        ok
    }

    /// Sealed local blocks to upload now, oldest first.
    pub(crate) fn upload_candidates(&self) -> Vec<(Arc<Bucket>, Arc<Entry>, u64)> {
        let now = now_micros();
        let mut out = Vec::new();
        for b in self.inner.buckets() {
            let s = b.settings();
            if s.tier_local_max.is_none() && s.tier_after.is_none() {
                continue;
            }
            let mut local: Vec<(u64, BlockState, Arc<Entry>)> = Vec::new();
            let mut local_bytes = 0u64;
            for e in b.entries() {
                let st = e.lock();
                let tiered_bytes = st.tiered().bytes;
                local_bytes += st.block_bytes() - tiered_bytes;
                local.extend(st.local_sealed().map(|b| (b.id, b.state, e.clone())));
            }
            local.sort_by_key(|(id, _, _)| *id);
            for (id, m, e) in local {
                let over = s.tier_local_max.is_some_and(|max| local_bytes > max);
                let old = s
                    .tier_after
                    .is_some_and(|age| m.max_ts < now.saturating_sub(age));
                if over || old {
                    local_bytes = local_bytes.saturating_sub(m.indexed_len);
                    out.push((b.clone(), e, id));
                }
            }
        }
        out
    }

    /// Uploads, verifies and commits one block (see the module comment).
    fn upload_block(&self, tier: &Tier, b: &Bucket, e: &Entry, id: u64) -> Result<Outcome> {
        let Some(meta) = e.lock().block(id).filter(|m| m.sealed && !m.tiered) else {
            return Ok(Outcome::Changed);
        };
        let path = e.block_path(id);
        let len = meta.indexed_len;
        let key = tier.key(b.name(), e.name(), id, "blk");
        let store = &tier.config().store;
        let up = |err: ObjectError| {
            tier.failed(&err);
            tier_error(err)
        };
        let crc = store.put_file(&key, &path, len).map_err(up)?;
        let heads = self.heads_of(e, id, &meta, crc)?;
        store
            .put_bytes(&tier.key(b.name(), e.name(), id, "heads"), &heads.encode())
            .map_err(up)?;
        let settings = b.settings().to_file_text();
        let sent = tier.settings_sent.lock().get(b.name()) == Some(&settings);
        if !sent {
            store
                .put_bytes(
                    &settings_key(&tier.config().prefix, b.name()),
                    settings.as_bytes(),
                )
                .map_err(up)?;
            tier.settings_sent
                .lock()
                .insert(b.name().to_string(), settings);
        }
        let head = store.head(&key).map_err(up)?;
        if head
            != Some(ObjectHead {
                len,
                crc32c: Some(crc),
            })
        {
            return Err(TierError::Upload(format!(
                "the object {key:?} does not match the block after upload (expected {len} bytes, CRC32C {crc:08x}; found {head:?}): it is uploaded again"
            ))
            .into());
        }
        tier.ok();
        crate::crash_point("tier-uploaded");
        let mut st = e.lock();
        match st.block(id) {
            Some(now) if now.records == meta.records && !now.tiered => {}
            Some(_) => return Ok(Outcome::Changed), // a record was removed meanwhile
            None => {
                // Deleted meanwhile (FIFO, retention, removal): the objects go too.
                drop(st);
                let mut d = tier.deletes.lock();
                d.push(tier.key(b.name(), e.name(), id, "heads"));
                d.push(key);
                return Ok(Outcome::Changed);
            }
        }
        let Some(m) = st.mark_tiered(id) else {
            return Ok(Outcome::Changed);
        };
        let change = Change {
            ops: vec![Op::PutBlock { id, state: m }],
            files: vec![],
        };
        if let Err(err) = self.inner.commit(change) {
            if let Some(mut back) = st.block(id) {
                back.tiered = false;
                st.adopt(id, back);
            }
            return Err(err);
        }
        tier.add(
            id,
            Tiered {
                key,
                base_ts: m.base_ts,
                len,
                entry_id: e.id(),
            },
        );
        crate::crash_point("tier-committed");
        drop(st);
        self.inner.files.forget(id);
        self.inner.committer.forget(id);
        if let Err(err) = std::fs::remove_file(&path) {
            log::warn!("could not delete the local copy {path:?} of a tiered block: {err}");
        }
        Ok(Outcome::Tiered(len))
    }

    /// The heads sidecar of a block: its live records, from the index.
    fn heads_of(&self, e: &Entry, id: u64, meta: &BlockState, crc: u32) -> Result<Heads> {
        let mut records = Vec::new();
        if meta.records > 0 {
            let txn = self.inner.index.read_txn()?;
            let mut all = Vec::new();
            self.inner.index.range(
                &txn,
                e.id(),
                meta.min_ts..meta.max_ts.saturating_add(1),
                Order::Ascending,
                usize::MAX,
                &mut all,
            )?;
            records.extend(all.into_iter().filter(|(_, v)| v.block_id == id));
        }
        Ok(Heads {
            block_id: id,
            base_ts: meta.base_ts,
            block_len: meta.indexed_len,
            block_crc: crc,
            entry: e.name().to_string(),
            records,
        })
    }

    /// Sidecars of tiered blocks that lost records are uploaded again.
    fn reupload_dirty(&self, tier: &Tier) -> bool {
        let dirty: Vec<_> = tier.dirty.lock().iter().cloned().collect();
        for (bname, ename, id) in dirty {
            let found = self
                .get_bucket(&bname)
                .ok()
                .and_then(|b| b.entry(&ename))
                .and_then(|e| {
                    let m = e.lock().block(id);
                    m.map(|m| (e, m))
                });
            let Some((e, meta)) = found.filter(|(_, m)| m.tiered) else {
                tier.dirty.lock().remove(&(bname, ename, id));
                tier.clean(id);
                continue;
            };
            // Out of the set before the index is read: a removal or label update committed
            // after this read marks the block again, and it goes up once more.
            let _flight = InFlight::new(&tier.sidecars_in_flight);
            tier.dirty
                .lock()
                .remove(&(bname.clone(), ename.clone(), id));
            let crc = match tier.head_crc(&tier.key(&bname, &ename, id, "blk")) {
                Ok(c) => c,
                Err(err) => {
                    tier.failed(&err);
                    tier.dirty.lock().insert((bname, ename, id));
                    return false;
                }
            };
            let heads = match self.heads_of(&e, id, &meta, crc) {
                Ok(h) => h,
                Err(err) => {
                    log::error!("listing the records of block {id:016x}: {err}");
                    tier.dirty.lock().insert((bname, ename, id));
                    return false;
                }
            };
            if let Err(err) = tier
                .config()
                .store
                .put_bytes(&tier.key(&bname, &ename, id, "heads"), &heads.encode())
            {
                tier.failed(&err);
                tier.dirty.lock().insert((bname, ename, id));
                return false;
            }
            tier.clean(id);
        }
        true
    }

    /// Objects of blocks the index no longer knows (deleted while their deletion was
    /// pending when the process stopped) are deleted, once per start.
    fn sweep_orphans(&self, tier: &Tier) -> std::result::Result<(), ObjectError> {
        let prefix = &tier.config().prefix;
        let list_prefix = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        let known: std::collections::HashSet<u64> = self
            .inner
            .buckets()
            .iter()
            .flat_map(|b| b.entries())
            .flat_map(|e| e.lock().block_ids().collect::<Vec<_>>())
            .collect();
        let limit = self.inner.peek_next_block();
        for o in tier.config().store.list(&list_prefix)? {
            if let Some((_, _, id, _)) = parse_block_key(prefix, &o.key) {
                if id < limit && !known.contains(&id) {
                    tier.config().store.delete(&o.key)?;
                    tier.deleted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }
}

impl Tier {
    /// Deletes pending objects; false if the object store failed (they stay pending).
    fn run_deletes(&self) -> bool {
        let keys: Vec<String> = std::mem::take(&mut *self.deletes.lock());
        for (i, key) in keys.iter().enumerate() {
            if let Err(e) = self.cfg.store.delete(key) {
                self.failed(&e);
                self.deletes.lock().extend(keys[i..].iter().cloned());
                return false;
            }
            self.deleted.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    fn head_crc(&self, key: &str) -> std::result::Result<u32, ObjectError> {
        self.cfg
            .store
            .head(key)?
            .and_then(|h| h.crc32c)
            .ok_or_else(|| ObjectError::NotFound(key.to_string()))
    }
}

/// Counts a sidecar upload under way while it lives.
struct InFlight<'a>(&'a std::sync::atomic::AtomicU64);

impl<'a> InFlight<'a> {
    fn new(n: &'a std::sync::atomic::AtomicU64) -> InFlight<'a> {
        n.fetch_add(1, Ordering::AcqRel);
        InFlight(n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn tier_error(e: ObjectError) -> Error {
    TierError::Upload(e.to_string()).into()
}
