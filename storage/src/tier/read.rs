//! Reading tiered records: a cached range of the block, or a ranged GET (exactly the frame
//! for a point read; `read_ahead` bytes for a query, so the next frames come from the
//! cache). A query's miss also starts fetching the entry's next tiered block on a thread of
//! its own (at most [`PREFETCHES`] under way), so the round trips of consecutive blocks
//! overlap with the reading of the current one. The frame is checked as a local one (head, length, CRC32C) before a byte is
//! returned.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Tier, Tiered};
use crate::block::{check_frame, stored_payload, Expect};
use crate::codec::frame::{HeadFields, FLAG_ZSTD};
use crate::codec::index::IndexValue;
use crate::entry::Entry;
use crate::error::{CorruptionError, Error, Result, TierError};
use crate::object_store::{ObjectError, PendingGet};
use crate::payload::{Payload, SharedPayload};

impl Tier {
    /// The head fields and payload of a record of a tiered block; `Ok(None)` if the block
    /// is not tiered (the caller's own error stands).
    pub(crate) fn read_record(
        &self,
        e: &Entry,
        ts: u64,
        v: &IndexValue,
        access: Access,
    ) -> Result<Option<(HeadFields, Payload)>> {
        let Some(t) = self.get(v.block_id) else {
            return Ok(None);
        };
        // A prefetch of this block (a query's read-ahead) lands in the cache first; the one
        // of the block after it starts before that wait, so two GETs overlap (started
        // after it, the next block's GET waited for this one's last byte: one GET at a time).
        if access == Access::Scan && self.prefetching(v.block_id) {
            self.prefetch_next(t.entry_id, v.block_id);
        }
        self.take_prefetch(v.block_id);
        let (buf, at) = match self.cache.get_shared(v.block_id, v.offset, v.frame_len) {
            Some(found) => found,
            None => {
                let want = if access == Access::Scan {
                    // The next block of the entry is fetched meanwhile.
                    self.prefetch_next(t.entry_id, v.block_id);
                    self.ahead(&t, v.offset, v.frame_len)
                } else {
                    v.frame_len
                };
                self.gets.fetch_add(1, Ordering::Relaxed);
                let got = match self.cfg.store.get_range(&t.key, v.offset, want) {
                    Ok(b) => {
                        self.ok();
                        b
                    }
                    Err(err) => {
                        self.get_errors.fetch_add(1, Ordering::Relaxed);
                        // Damage of this object (500 `tier_damaged`) is no outage; any
                        // other failure answers 503 `tier_unavailable`, "retry once it is
                        // back (GET /health ...)", so the tier is unavailable too. Bug
                        // (hostile probe of 2026-11-30): a GET answered 403 or 307 made
                        // every read a 503 while `/health` said `available`.
                        let damage =
                            matches!(err, ObjectError::NotFound(_) | ObjectError::Damaged(_));
                        self.failed_as(&err, !damage);
                        return Err(match err {
                            ObjectError::NotFound(key) => TierError::Missing {
                                bucket: e.bucket_name(),
                                entry: e.name().into(),
                                block: v.block_id,
                                key,
                            },
                            ObjectError::Damaged(_) => TierError::Damaged {
                                bucket: e.bucket_name(),
                                entry: e.name().into(),
                                block: v.block_id,
                                key: t.key.clone(),
                                ts,
                                reason: err.to_string(),
                            },
                            other => TierError::Unavailable {
                                bucket: e.bucket_name(),
                                entry: e.name().into(),
                                ts,
                                reason: other.to_string(),
                            },
                        }
                        .into());
                    }
                };
                let got = Arc::new(got);
                if access == Access::Scan {
                    self.cache.insert_scan(v.block_id, v.offset, got.clone());
                } else {
                    self.cache.insert_shared(v.block_id, v.offset, got.clone());
                }
                (got, 0)
            }
        };
        let Some((frame, end)) = usize::try_from(v.frame_len)
            .ok()
            .and_then(|n| at.checked_add(n))
            .and_then(|end| Some((buf.get(at..end)?, end)))
        else {
            return Err(corrupt(
                &t.key,
                v.offset,
                "the object ends inside the record",
            ));
        };
        let want = Expect {
            frame_len: v.frame_len,
            head_len: None,
            ts,
        };
        let h = check_frame(frame, &[], t.base_ts, &want)
            .map_err(|f| corrupt(&t.key, v.offset, &f.to_string()))?;
        // A raw payload is handed out as a slice of the fetched range (no copy out of it).
        let data = match SharedPayload::new(buf.clone(), at + h.head_len..end) {
            Some(shared) if h.flags & FLAG_ZSTD == 0 => Payload::Shared(shared),
            _ => Payload::Memory(
                stored_payload(&h, &frame[h.head_len..])
                    .map_err(|f| corrupt(&t.key, v.offset, &f.to_string()))?,
            ),
        };
        Ok(Some((h, data)))
    }

    /// Bytes a query's read fetches from `offset` of block `t`: the read-ahead, or the whole
    /// rest of the block when it is at most twice that (a second GET for a short tail costs
    /// a round trip).
    fn ahead(&self, t: &Tiered, offset: u64, frame_len: u64) -> u64 {
        let rest = t.len.saturating_sub(offset);
        let ahead = self.cfg.read_ahead.max(frame_len);
        if rest <= ahead.saturating_mul(2) {
            rest
        } else {
            ahead
        }
    }

    /// Whether a prefetch of block `id` was started and not yet taken.
    fn prefetching(&self, id: u64) -> bool {
        self.prefetch.lock().contains_key(&id)
    }

    /// Waits for a prefetch of block `id`, if one was started, and caches what it got.
    fn take_prefetch(&self, id: u64) {
        let taken = self.prefetch.lock().remove(&id);
        if let Some(p) = taken {
            self.land(id, p);
        }
    }

    fn land(&self, id: u64, p: Prefetch) {
        match p.get.wait() {
            Ok(bytes) => {
                self.ok();
                self.cache.insert_scan(id, p.start, Arc::new(bytes));
            }
            Err(err) => {
                // The read that wanted it fetches it again (and reports that error).
                self.get_errors.fetch_add(1, Ordering::Relaxed);
                self.failed(&err);
            }
        }
    }

    /// Starts fetching the first range of the entry's next tiered block after `after` (a
    /// query reads blocks in order), unless [`PREFETCHES`] are under way or it is already.
    /// Finished prefetches nobody took are moved into the cache (its budget bounds them).
    pub(crate) fn prefetch_next(&self, entry_id: u32, after: u64) {
        let next = self
            .blocks
            .read()
            .range(after.saturating_add(1)..)
            .find(|(_, t)| t.entry_id == entry_id)
            .map(|(id, t)| (*id, t.clone()));
        let Some((id, t)) = next else { return };
        let done: Vec<(u64, Prefetch)> = {
            let mut map = self.prefetch.lock();
            let finished: Vec<u64> = map
                .iter_mut()
                .filter_map(|(k, p)| p.get.is_finished().then_some(*k))
                .collect();
            finished
                .into_iter()
                .filter_map(|k| map.remove(&k).map(|p| (k, p)))
                .collect()
        };
        for (k, p) in done {
            self.land(k, p);
        }
        let mut map = self.prefetch.lock();
        if map.len() >= PREFETCHES || map.contains_key(&id) {
            return;
        }
        let want = self.ahead(&t, 0, 0);
        let store = &self.cfg.store;
        let started = match store.start_get_range(&t.key, 0, want) {
            Some(get) => Ok(get),
            None => PendingGet::on_thread(store.clone(), t.key.clone(), 0, want),
        };
        if let Ok(get) = started {
            self.gets.fetch_add(1, Ordering::Relaxed);
            map.insert(id, Prefetch { start: 0, get });
        }
    }
}

/// How a record is read: alone (a point read), or as one of a query's records, which
/// lets a tiered block's read fetch ahead into the cache for the records after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// One record by its timestamp.
    Point,
    /// The next record of a query (range scan).
    Scan,
}

/// Prefetches of next blocks under way at once, over all queries: each holds at most twice
/// the read-ahead in memory until a read takes it or it moves into the cache.
pub(crate) const PREFETCHES: usize = 2;

/// A fetch of a block's first range under way.
pub(crate) struct Prefetch {
    start: u64,
    get: PendingGet,
}

fn corrupt(key: &str, offset: u64, reason: &str) -> Error {
    CorruptionError::Record {
        path: std::path::PathBuf::from(format!("object {key}")),
        offset,
        reason: reason.to_string(),
    }
    .into()
}
