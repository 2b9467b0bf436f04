//! The local cache of tiered block ranges: byte ranges of block objects fetched by ranged
//! GETs, kept in memory up to a byte budget (`--tier-cache`), least recently used first out.
//!
//! A read looks for a cached range of its block that covers its frame; a miss fetches
//! (outside any lock) and inserts. One mutex (`Rank::TierCache`, a leaf) guards the map:
//! it is held only to look up, insert or evict, never across a fetch.
//!
//! Ranges a query fetched ([`RangeCache::insert_scan`]: its read-ahead and prefetches) are
//! a ring inside the budget: together at most a quarter of it (and never fewer than the
//! newest [`SCAN_KEEP`], the block a query reads and the one prefetched after it), oldest
//! out first. A range query reads its blocks once, in order: without the ring, one large
//! query would push every range point reads use out of the cache, filling the whole budget
//! with blocks it has read past.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::lock::{Mutex, Rank};

pub(crate) struct RangeCache {
    state: Mutex<State>,
    budget: u64,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Ranges of queries kept at least, however small the budget's quarter.
pub(crate) const SCAN_KEEP: usize = 2;

struct Slot {
    bytes: Arc<Vec<u8>>,
    used: u64,
    /// Fetched by a query (in the scan ring).
    scan: bool,
}

#[derive(Default)]
struct State {
    /// block id → start offset → cached bytes.
    blocks: HashMap<u64, BTreeMap<u64, Slot>>,
    bytes: u64,
    clock: u64,
    /// The scan ring, oldest first: (block, start) of ranges inserted by queries (an entry
    /// whose slot has gone, or is no longer a scan slot, is skipped).
    ring: VecDeque<(u64, u64)>,
    /// Bytes of the slots marked `scan`.
    scan_bytes: u64,
}

impl State {
    /// Removes one slot, keeping the byte counts.
    fn remove(&mut self, id: u64, start: u64) {
        let Some(ranges) = self.blocks.get_mut(&id) else {
            return;
        };
        if let Some(slot) = ranges.remove(&start) {
            self.bytes -= slot.bytes.len() as u64;
            if slot.scan {
                self.scan_bytes -= slot.bytes.len() as u64;
            }
        }
        if ranges.is_empty() {
            self.blocks.remove(&id);
        }
    }

    fn is_scan(&self, id: u64, start: u64) -> bool {
        self.blocks
            .get(&id)
            .and_then(|r| r.get(&start))
            .is_some_and(|s| s.scan)
    }
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
    #[cfg(test)]
    pub fn insert(&self, id: u64, start: u64, bytes: Vec<u8>) {
        self.insert_shared(id, start, Arc::new(bytes));
    }

    /// As [`RangeCache::insert`], of bytes the caller goes on reading.
    pub fn insert_shared(&self, id: u64, start: u64, bytes: Arc<Vec<u8>>) {
        self.put(id, start, bytes, false);
    }

    /// As [`RangeCache::insert_shared`], of a range a query fetched: it joins the scan
    /// ring (see the module's comment).
    pub fn insert_scan(&self, id: u64, start: u64, bytes: Arc<Vec<u8>>) {
        self.put(id, start, bytes, true);
    }

    fn put(&self, id: u64, start: u64, bytes: Arc<Vec<u8>>, scan: bool) {
        let len = bytes.len() as u64;
        if len == 0 || len > self.budget {
            return;
        }
        let mut st = self.state.lock();
        st.clock += 1;
        let now = st.clock;
        st.remove(id, start);
        st.blocks.entry(id).or_default().insert(
            start,
            Slot {
                bytes,
                used: now,
                scan,
            },
        );
        st.bytes += len;
        if scan {
            st.scan_bytes += len;
            st.ring.retain(|r| *r != (id, start));
            st.ring.push_back((id, start));
            // The ring's oldest ranges go first, down to its share of the budget.
            while st.scan_bytes > self.budget / 4 {
                let live = st.ring.iter().filter(|(b, s)| st.is_scan(*b, *s)).count();
                if live <= SCAN_KEEP {
                    break;
                }
                let Some((b, s)) = st.ring.pop_front() else {
                    break;
                };
                if st.is_scan(b, s) {
                    st.remove(b, s);
                }
            }
            // Entries of slots evicted otherwise.
            while st.ring.front().is_some_and(|(b, s)| !st.is_scan(*b, *s)) {
                st.ring.pop_front();
            }
        }
        while st.bytes > self.budget {
            let oldest = st
                .blocks
                .iter()
                .flat_map(|(b, r)| r.iter().map(move |(s, slot)| (slot.used, *b, *s)))
                .min();
            let Some((_, b, s)) = oldest else { break };
            st.remove(b, s);
        }
    }

    /// Drops every range of a deleted block.
    pub fn forget(&self, id: u64) {
        let mut st = self.state.lock();
        let starts: Vec<u64> = st
            .blocks
            .get(&id)
            .map(|r| r.keys().copied().collect())
            .unwrap_or_default();
        for s in starts {
            st.remove(id, s);
        }
        st.ring.retain(|(b, _)| *b != id);
    }

    /// Empties the cache (tests and benchmarks: a cold read).
    pub fn clear(&self) {
        let mut st = self.state.lock();
        st.blocks.clear();
        st.ring.clear();
        st.bytes = 0;
        st.scan_bytes = 0;
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

    /// A cold range query filled the whole budget with blocks it had read past, evicting
    /// what point reads had cached.
    #[test]
    fn a_query_keeps_a_ring_of_its_ranges_and_leaves_point_reads_cached() {
        let c = RangeCache::new(1000);
        c.insert_shared(9, 0, Arc::new(vec![1; 100])); // a point read's range
        for block in 0..20u64 {
            c.insert_scan(block + 100, 0, Arc::new(vec![2; 100]));
        }
        assert_eq!(
            c.get(9, 0, 1),
            Some(vec![1]),
            "the point read's range stays"
        );
        // A quarter of 1000 holds two ranges of 100: the newest two blocks.
        assert_eq!(c.get(119, 0, 1), Some(vec![2]));
        assert_eq!(c.get(118, 0, 1), Some(vec![2]));
        assert_eq!(c.get(117, 0, 1), None, "older ranges of the query are gone");
        assert_eq!(c.bytes(), 300);
        // However small the budget's quarter, a query keeps its newest two ranges.
        let small = RangeCache::new(300);
        for block in 0..5u64 {
            small.insert_scan(block, 0, Arc::new(vec![3; 100]));
        }
        assert_eq!(small.get(4, 0, 1), Some(vec![3]));
        assert_eq!(small.get(3, 0, 1), Some(vec![3]));
        assert_eq!(small.get(2, 0, 1), None);
        small.forget(4);
        small.clear();
        assert_eq!(small.bytes(), 0);
    }
}
