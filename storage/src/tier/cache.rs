//! The local cache of tiered block ranges: byte ranges of block objects fetched by ranged
//! GETs, kept in memory up to a byte budget (`--tier-cache`), least recently used first out.
//!
//! A read looks for a cached range of its block that covers its frame; a miss fetches
//! (outside any lock) and inserts. One mutex (`Rank::TierCache`, a leaf) guards the map:
//! it is held only to look up, insert or evict, never across a fetch.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::lock::{Mutex, Rank};

pub(crate) struct RangeCache {
    state: Mutex<State>,
    budget: u64,
    hits: AtomicU64,
    misses: AtomicU64,
}

struct Slot {
    bytes: Arc<Vec<u8>>,
    used: u64,
}

#[derive(Default)]
struct State {
    /// block id → start offset → cached bytes.
    blocks: HashMap<u64, BTreeMap<u64, Slot>>,
    bytes: u64,
    clock: u64,
}

impl RangeCache {
    pub fn new(budget: u64) -> RangeCache {
        RangeCache {
            state: Mutex::new(Rank::TierCache, State::default()),
            budget,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// `len` bytes of block `id` from `start`, if one cached range holds them all.
    #[cfg(test)]
    pub fn get(&self, id: u64, start: u64, len: u64) -> Option<Vec<u8>> {
        let (bytes, from) = self.get_shared(id, start, len)?;
        let to = from + usize::try_from(len).ok()?;
        Some(bytes[from..to].to_vec())
    }

    /// The cached range holding `len` bytes of block `id` from `start`, and where in it
    /// they begin (no copy: the caller reads them in place).
    pub fn get_shared(&self, id: u64, start: u64, len: u64) -> Option<(Arc<Vec<u8>>, usize)> {
        let mut st = self.state.lock();
        st.clock += 1;
        let now = st.clock;
        let found = st.blocks.get_mut(&id).and_then(|ranges| {
            let (s, slot) = ranges.range_mut(..=start).next_back()?;
            let from = usize::try_from(start - s).ok()?;
            let to = from.checked_add(usize::try_from(len).ok()?)?;
            slot.bytes.get(from..to)?;
            slot.used = now;
            Some((slot.bytes.clone(), from))
        });
        drop(st);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps `bytes` (block `id` from `start`), evicting least recently used ranges past
    /// the budget. A range larger than the whole budget is not kept.
    pub fn insert(&self, id: u64, start: u64, bytes: Vec<u8>) {
        self.insert_shared(id, start, Arc::new(bytes));
    }

    /// As [`RangeCache::insert`], of bytes the caller goes on reading.
    pub fn insert_shared(&self, id: u64, start: u64, bytes: Arc<Vec<u8>>) {
        let len = bytes.len() as u64;
        if len == 0 || len > self.budget {
            return;
        }
        let mut st = self.state.lock();
        st.clock += 1;
        let now = st.clock;
        let old = st
            .blocks
            .entry(id)
            .or_default()
            .insert(start, Slot { bytes, used: now });
        st.bytes += len;
        if let Some(old) = old {
            st.bytes -= old.bytes.len() as u64;
        }
        while st.bytes > self.budget {
            let oldest = st
                .blocks
                .iter()
                .flat_map(|(b, r)| r.iter().map(move |(s, slot)| (slot.used, *b, *s)))
                .min();
            let Some((_, b, s)) = oldest else { break };
            if let Some(ranges) = st.blocks.get_mut(&b) {
                if let Some(slot) = ranges.remove(&s) {
                    st.bytes -= slot.bytes.len() as u64;
                }
                if st.blocks.get(&b).is_some_and(BTreeMap::is_empty) {
                    st.blocks.remove(&b);
                }
            }
        }
    }

    /// Drops every range of a deleted block.
    pub fn forget(&self, id: u64) {
        let mut st = self.state.lock();
        if let Some(ranges) = st.blocks.remove(&id) {
            let freed: u64 = ranges.values().map(|s| s.bytes.len() as u64).sum();
            st.bytes -= freed;
        }
    }

    /// Empties the cache (tests and benchmarks: a cold read).
    pub fn clear(&self) {
        let mut st = self.state.lock();
        st.blocks.clear();
        st.bytes = 0;
    }

    pub fn bytes(&self) -> u64 {
        self.state.lock().bytes
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_covered_ranges_and_keeps_to_its_budget() {
        let c = RangeCache::new(100);
        c.insert(1, 10, (0..50).collect());
        assert_eq!(c.get(1, 20, 5), Some(vec![10, 11, 12, 13, 14]));
        assert_eq!(c.get(1, 55, 10), None, "past the cached range");
        assert_eq!(c.get(2, 20, 5), None, "another block");
        c.insert(2, 0, vec![7; 40]);
        let _ = c.get(1, 10, 1); // block 1 is now the most recently used
        c.insert(3, 0, vec![9; 40]); // 130 > 100: block 2 goes
        assert_eq!(c.get(2, 0, 1), None);
        assert_eq!(c.get(1, 10, 1), Some(vec![0]));
        assert!(c.bytes() <= 100);
        c.insert(4, 0, vec![0; 101]);
        assert_eq!(c.get(4, 0, 1), None, "larger than the budget");
        c.forget(1);
        assert_eq!(c.bytes(), 40);
        assert!(c.hits() >= 3 && c.misses() >= 4);
    }
}
