//! An index built from the object store alone: `--restore-from` (a lost device's tiered
//! history comes back into a new data folder) and `--read-replica` (a read-only server that
//! adopts newly tiered blocks periodically) share [`Store::tier_refresh`].
//!
//! It lists the prefix, and for every block object with a heads sidecar whose id the index
//! does not know, creates the bucket (settings from `<bucket>/settings`) and entry if
//! needed, then commits the sidecar's records and the block's metadata (`tiered`). On a
//! replica, tiered blocks whose objects are gone (FIFO or removal on the writer) are
//! dropped from its index, and those whose heads sidecar was uploaded again (its ETag
//! changed: records removed or relabelled on the writer) get the sidecar's records. No
//! payload is downloaded.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::layout::{parse_block_key, settings_key, Heads};
use super::{Tier, Tiered};
use crate::bucket::Bucket;
use crate::codec::index::BlockState;
use crate::commit::{Change, Op};
use crate::entry::{Entry, EntryState};
use crate::object_store::ObjectError;
use crate::*;

/// What a refresh did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefreshReport {
    /// Blocks adopted from the object store.
    pub adopted_blocks: u64,
    /// Records they hold.
    pub adopted_records: u64,
    /// Tiered blocks already in the index whose records were made those of their sidecar,
    /// uploaded again since it was read (removals and label updates on the writer).
    pub updated_blocks: u64,
    /// Tiered blocks dropped because their objects are gone (replicas).
    pub dropped_blocks: u64,
    /// Sidecars that could not be read (damaged): their blocks were skipped.
    pub skipped: Vec<String>,
}

fn refresh_err(e: ObjectError) -> Error {
    TierError::Refresh(e.to_string()).into()
}

impl Store {
    /// Adopts every block of the object store that the index does not know (see the
    /// module comment). Fails when no tier is configured or the object store cannot be
    /// listed.
    pub fn tier_refresh(&self) -> Result<RefreshReport> {
        let tier = self
            .inner
            .tier
            .as_ref()
            .ok_or_else(|| TierError::Refresh("no object store is configured".into()))?;
        let prefix = tier.config().prefix.clone();
        let list_prefix = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        let keys = tier.config().store.list(&list_prefix).map_err(|e| {
            tier.failed(&e);
            refresh_err(e)
        })?;
        tier.ok();
        let mut heads: BTreeMap<u64, (String, String, String, String)> = BTreeMap::new();
        let mut present: HashSet<u64> = HashSet::new();
        for o in &keys {
            match parse_block_key(&prefix, &o.key) {
                Some((b, e, id, ext)) if ext == "heads" => {
                    heads.insert(id, (b, e, o.key.clone(), o.etag.clone()));
                }
                Some((_, _, id, ext)) if ext == "blk" => {
                    present.insert(id);
                }
                _ => {}
            }
        }
        let mut report = RefreshReport::default();
        if !tier.config().upload {
            report.dropped_blocks = self.drop_vanished(tier, &present)?;
        }
        let known: HashSet<u64> = self
            .inner
            .buckets()
            .iter()
            .flat_map(|b| b.entries())
            .flat_map(|e| e.lock().block_ids().collect::<Vec<_>>())
            .collect();
        let mut settings: HashMap<String, BucketSettings> = HashMap::new();
        for (id, (bname, ename, key, etag)) in heads {
            if !present.contains(&id) {
                continue;
            }
            let seen = tier.heads_seen.lock().get(&id) == Some(&etag);
            if known.contains(&id) && (seen || !tier.is_tiered(id)) {
                continue;
            }
            let bytes = tier.config().store.get(&key).map_err(refresh_err)?;
            let Some(h) = Heads::decode(&bytes).ok().filter(|h| h.block_id == id) else {
                log::warn!("the heads sidecar {key:?} is damaged: its block is skipped");
                report.skipped.push(key);
                continue;
            };
            if known.contains(&id) {
                // A tiered block whose sidecar was uploaded again (records removed or
                // relabelled on the writer): its records are made the sidecar's.
                if let Some(e) = self.get_bucket(&bname).ok().and_then(|b| b.entry(&ename)) {
                    self.reapply_heads(&e, h)?;
                    report.updated_blocks += 1;
                }
                tier.heads_seen.lock().insert(id, etag);
                continue;
            }
            if !settings.contains_key(&bname) {
                let s = match tier.config().store.get(&settings_key(&prefix, &bname)) {
                    Ok(text) => BucketSettings::from_file_text(&String::from_utf8_lossy(&text))
                        .unwrap_or_default(),
                    Err(ObjectError::NotFound(_)) => BucketSettings::default(),
                    Err(e) => return Err(refresh_err(e)),
                };
                settings.insert(bname.clone(), s);
            }
            let b = match self.get_bucket(&bname) {
                Ok(b) => b,
                Err(Error::NotFound(_)) => {
                    let s = settings.get(&bname).cloned().unwrap_or_default();
                    match self.create_bucket(&bname, s) {
                        Ok(_) | Err(Error::Bucket(BucketError::Exists(_))) => {}
                        Err(e) => return Err(e),
                    }
                    self.get_bucket(&bname)?
                }
                Err(e) => return Err(e),
            };
            let e = self.entry_or_create(&b, &ename)?;
            report.adopted_records += h.records.len() as u64;
            self.adopt_block(tier, &b, &e, h)?;
            tier.heads_seen.lock().insert(id, etag);
            report.adopted_blocks += 1;
        }
        Ok(report)
    }

    /// Commits a block read from a heads sidecar into the index and memory.
    fn adopt_block(&self, tier: &Tier, b: &Bucket, e: &Entry, h: Heads) -> Result<()> {
        let mut st = e.lock_live(b.name())?;
        if st.block(h.block_id).is_some() {
            return Ok(());
        }
        let mut meta = BlockState {
            entry_id: e.id(),
            base_ts: h.base_ts,
            min_ts: h.base_ts,
            max_ts: h.base_ts,
            records: h.records.len() as u64,
            indexed_len: h.block_len,
            sealed: true,
            tiered: true,
        };
        if let (Some((first, _)), Some((last, _))) = (h.records.first(), h.records.last()) {
            meta.min_ts = h.records.iter().map(|(t, _)| *t).min().unwrap_or(*first);
            meta.max_ts = h.records.iter().map(|(t, _)| *t).max().unwrap_or(*last);
        }
        let ops: Vec<Op> = h
            .records
            .into_iter()
            .map(|(ts, value)| Op::PutRec {
                entry_id: e.id(),
                ts,
                value,
            })
            .collect();
        self.commit_block(&mut st, ops, h.block_id, meta)?;
        b.grow(meta.indexed_len);
        self.inner.bump_next_block(h.block_id + 1);
        tier.add(
            h.block_id,
            Tiered {
                key: tier.key(b.name(), e.name(), h.block_id, "blk"),
                base_ts: h.base_ts,
                len: h.block_len,
                entry_id: e.id(),
            },
        );
        Ok(())
    }

    /// Makes the index's records of tiered block `h.block_id` those of its sidecar `h`:
    /// labels as the sidecar has them, records it no longer lists removed.
    fn reapply_heads(&self, e: &Entry, h: Heads) -> Result<()> {
        let mut st = e.lock();
        let Some(mut meta) = st.block(h.block_id).filter(|m| m.tiered) else {
            return Ok(());
        };
        let mut now = Vec::new();
        {
            let txn = self.inner.index.read_txn()?;
            self.inner.index.range(
                &txn,
                e.id(),
                meta.min_ts..meta.max_ts.saturating_add(1),
                crate::index::Order::Ascending,
                usize::MAX,
                &mut now,
            )?;
        }
        let listed: HashMap<u64, &crate::codec::index::IndexValue> =
            h.records.iter().map(|(ts, v)| (*ts, v)).collect();
        let mut ops = Vec::new();
        for (ts, v) in now.iter().filter(|(_, v)| v.block_id == h.block_id) {
            match listed.get(ts) {
                None => ops.push(Op::DelRec {
                    entry_id: e.id(),
                    ts: *ts,
                }),
                Some(new) if *new != v => ops.push(Op::PutRec {
                    entry_id: e.id(),
                    ts: *ts,
                    value: (*new).clone(),
                }),
                Some(_) => {}
            }
        }
        if ops.is_empty() {
            return Ok(());
        }
        let removed = ops
            .iter()
            .filter(|o| matches!(o, Op::DelRec { .. }))
            .count() as u64;
        meta.records = meta.records.saturating_sub(removed);
        self.commit_block(&mut st, ops, h.block_id, meta)
    }

    /// Commits `ops` with the block's new state, then adopts that state in memory (under
    /// the entry lock `st` the caller holds).
    fn commit_block(
        &self,
        st: &mut EntryState,
        mut ops: Vec<Op>,
        id: u64,
        state: BlockState,
    ) -> Result<()> {
        ops.push(Op::PutBlock { id, state });
        self.inner.commit(Change { ops, files: vec![] })?;
        st.adopt(id, state);
        Ok(())
    }

    /// A replica drops tiered blocks whose objects the writer deleted.
    fn drop_vanished(&self, tier: &Tier, present: &HashSet<u64>) -> Result<u64> {
        let mut n = 0;
        for id in tier.tiered_ids() {
            if present.contains(&id) {
                continue;
            }
            for b in self.inner.buckets() {
                for e in b.entries() {
                    let mut st = e.lock();
                    if st.block(id).is_some() && self.delete_block(&b, &e, &mut st, id)? {
                        n += 1;
                    }
                }
            }
        }
        Ok(n)
    }
}
