//! Queries over several entries of a bucket, merged in timestamp order.
//!
//! Each entry is walked like a single-entry query (pages of index records, one read
//! transaction per page) and the pages are merged: memory is one page per entry. The label
//! filters, the condition and the limit apply to the merged stream, so `$each_n`, `$each_t`
//! and `$limit` count records across entries. Two records with the same timestamp come in
//! the order of their entries' names (byte order), in both directions.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::entry::Entry;
use crate::index::{IndexValue, Order};
use crate::names::validate_entry_name;
use crate::read::{first_in, QueryItem};
use crate::select::Selector;
use crate::*;

/// Index records fetched per entry and read transaction, and scanned without a match before
/// `next_bounded` hands back.
const PAGE: usize = 256;

/// True when `name` matches `pattern`: `*` matches any characters but `/` (within one
/// segment), `**` any characters including `/`; everything else matches itself.
pub fn entry_pattern_matches(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match p.first() {
            None => n.is_empty(),
            Some(b'*') if p.get(1) == Some(&b'*') => {
                let rest = &p[2..];
                (0..=n.len()).any(|i| go(rest, &n[i..]))
            }
            Some(b'*') => {
                let rest = &p[1..];
                for i in 0..=n.len() {
                    if go(rest, &n[i..]) {
                        return true;
                    }
                    if n.get(i) == Some(&b'/') {
                        return false;
                    }
                }
                false
            }
            Some(c) => n.first() == Some(c) && go(&p[1..], &n[1..]),
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// One entry's part of a merged query: the window still to walk and a page of it.
struct Source {
    entry: Arc<Entry>,
    lo: u64,
    hi: u64,
    page: VecDeque<(u64, IndexValue)>,
    /// The walk of `[lo, hi)` is over.
    done: bool,
    /// As `QueryIter`'s: the first record past a horizon that ended the last walk.
    ahead: Option<u64>,
}

impl Source {
    /// Fetches the next page; `stop` is the query's (`hi` may be a live tail's horizon).
    fn fill(&mut self, store: &Store, order: Order, stop: u64) -> Result<()> {
        let index = &store.inner.index;
        let bounded = order == Order::Ascending && self.hi < stop;
        if self.lo >= self.hi {
            self.done = true;
            if bounded {
                let txn = index.read_txn()?;
                self.ahead = first_in(index, &txn, self.entry.id(), self.hi..stop)?;
            }
            return Ok(());
        }
        let txn = index.read_txn()?;
        let mut out = Vec::with_capacity(PAGE);
        index.range(
            &txn,
            self.entry.id(),
            self.lo..self.hi,
            order,
            PAGE,
            &mut out,
        )?;
        if out.len() < PAGE {
            self.done = true;
            if bounded {
                self.ahead = first_in(index, &txn, self.entry.id(), self.hi..stop)?;
            }
        }
        if let Some((ts, _)) = out.last() {
            if order == Order::Descending {
                self.hi = *ts;
            } else {
                self.lo = ts.saturating_add(1);
            }
        }
        self.page.extend(out);
        Ok(())
    }
}

/// Iterates the records of several entries merged in timestamp order (ties by entry
/// name), holding one page of index records per entry. Items name their entry
/// ([`QueryItem::entry`]).
pub struct MultiIter {
    store: Store,
    bucket: String,
    /// Sorted by entry name: the order of ties.
    sources: Vec<Source>,
    sel: Selector,
    order: Order,
    stop: u64,
    /// The last record merged (timestamp, source): a live tail's later walks drop what
    /// would come before it.
    last: Option<(u64, usize)>,
    failed: Option<Error>,
    /// A limit, a `$limit` or an error ended the query.
    ended: bool,
}

impl Store {
    /// The names of the entries of `bucket` that `patterns` name, sorted: plain names (which
    /// must exist) and globs (`*` within a segment, `**` across segments; matching nothing is
    /// not an error).
    pub fn match_entries(&self, bucket: &str, patterns: &[String]) -> Result<Vec<String>> {
        let b = self.get_bucket(bucket)?;
        let mut names: Vec<String> = Vec::new();
        let all: Vec<String> = b.entries().iter().map(|e| e.name().to_string()).collect();
        for p in patterns {
            if p.contains('*') {
                // A pattern obeys the name rules once its stars are letters.
                validate_entry_name(&p.replace('*', "x"))?;
                names.extend(all.iter().filter(|n| entry_pattern_matches(p, n)).cloned());
            } else {
                names.push(self.get_entry(&b, p)?.name().to_string());
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Records of the entries `patterns` name (see [`Store::match_entries`]) with
    /// `start <= ts < stop`, merged oldest first (newest first with `descending`), two
    /// records with one timestamp in the order of their entries' names. Label filters, the
    /// condition and the limit apply to the merged stream. Holds one page of index records
    /// per entry.
    pub fn query_entries(
        &self,
        bucket: &str,
        patterns: &[String],
        query: &Query,
    ) -> Result<MultiIter> {
        let b = self.get_bucket(bucket)?;
        let names = self.match_entries(bucket, patterns)?;
        let (lo, hi) = (query.start.unwrap_or(0), query.stop.unwrap_or(u64::MAX));
        let sources = names
            .iter()
            // An entry removed since it was listed simply has nothing.
            .filter_map(|n| b.entry(n))
            .map(|entry| Source {
                entry,
                lo,
                hi,
                page: VecDeque::new(),
                done: false,
                ahead: None,
            })
            .collect();
        Ok(MultiIter {
            store: self.clone(),
            bucket: bucket.to_string(),
            sources,
            sel: Selector::new(query),
            order: Order::of(query.descending),
            stop: hi,
            last: None,
            failed: None,
            ended: false,
        })
    }
}

impl MultiIter {
    /// The entries merged, in the order of ties.
    pub fn entries(&self) -> Vec<&str> {
        self.sources.iter().map(|s| s.entry.name()).collect()
    }

    /// As [`QueryIter::resume`]: walks every entry on from where it stopped, up to
    /// `min(stop, horizon)`, keeping the condition's state. A record whose (timestamp,
    /// entry) comes before the last one merged is dropped, so the stream stays in order.
    pub fn resume(&mut self, horizon: u64) -> bool {
        self.resume_where(horizon, |_| true)
    }

    /// [`MultiIter::resume`] for a live tail told which entries got records since its last
    /// walk (`changed`: entry ids, sorted, as a commit listener is given them): only those
    /// entries are walked again, and those whose last walk left a record past its horizon
    /// ([`MultiIter::ahead`]) that the new horizon lets through. A tail of many entries
    /// woken by a commit to one of them reads one entry's index, not every entry's.
    pub fn resume_changed(&mut self, horizon: u64, changed: &[u32]) -> bool {
        let hi = self.stop.min(horizon);
        self.resume_where(horizon, |s| {
            changed.binary_search(&s.entry.id()).is_ok() || s.ahead.is_some_and(|ts| ts < hi)
        })
    }

    fn resume_where(&mut self, horizon: u64, due: impl Fn(&Source) -> bool) -> bool {
        if self.ended || self.order == Order::Descending {
            return false;
        }
        if self.failed.is_some() {
            return true; // the error is still to be returned
        }
        let mut open = false;
        for s in &mut self.sources {
            if s.lo >= self.stop {
                continue;
            }
            open = true;
            if s.page.is_empty() && due(s) {
                s.hi = self.stop.min(horizon);
                s.done = false;
                s.ahead = None;
            }
        }
        open
    }

    /// The ids of the entries merged (what a commit listener is given).
    pub fn entry_ids(&self) -> Vec<u32> {
        self.sources.iter().map(|s| s.entry.id()).collect()
    }

    /// As [`QueryIter::ahead`]: the earliest record a walk bounded by a horizon left for
    /// later, over every entry.
    pub fn ahead(&self) -> Option<u64> {
        self.sources.iter().filter_map(|s| s.ahead).min()
    }

    /// Like [`QueryIter::next_bounded`]: the next record, `Some(Ok(None))` after a page's
    /// worth of index records without a match, `None` at the end.
    pub fn next_bounded(&mut self) -> Option<Result<Option<QueryItem>>> {
        let mut scanned = 0;
        loop {
            if let Some(e) = self.failed.take() {
                self.ended = true;
                return Some(Err(e));
            }
            if self.ended {
                return None;
            }
            for s in &mut self.sources {
                if s.page.is_empty() && !s.done {
                    if let Err(e) = s.fill(&self.store, self.order, self.stop) {
                        self.ended = true;
                        return Some(Err(e));
                    }
                }
            }
            let desc = self.order == Order::Descending;
            let pick = self
                .sources
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.page.front().map(|(ts, _)| (*ts, i)))
                .min_by_key(|&(ts, i)| (if desc { u64::MAX - ts } else { ts }, i));
            let (ts, i) = pick?;
            let Some((_, value)) = self.sources[i].page.pop_front() else {
                continue;
            };
            // A later walk of a live tail may find a record that belongs before one
            // already merged (committed late): it is not delivered.
            if !desc && self.last.is_some_and(|l| (ts, i) <= l) {
                continue;
            }
            self.last = Some((ts, i));
            let mut kept: Vec<(u64, IndexValue)> = Vec::with_capacity(1);
            match self.sel.select(vec![(ts, value)], &mut kept) {
                Ok(true) => self.ended = true,
                Ok(false) => {}
                Err(e) => self.failed = Some(e),
            }
            if let Some((ts, value)) = kept.pop() {
                let entry = self.sources[i].entry.clone();
                return Some(Ok(Some(QueryItem::new(
                    &self.store,
                    &self.bucket,
                    entry,
                    ts,
                    value,
                ))));
            }
            scanned += 1;
            if scanned >= PAGE {
                return Some(Ok(None));
            }
        }
    }
}

impl Iterator for MultiIter {
    type Item = Result<QueryItem>;

    fn next(&mut self) -> Option<Self::Item> {
        crate::read::walk_to_item(|| self.next_bounded())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        (dir, s)
    }

    fn merged(it: MultiIter) -> Vec<(u64, String)> {
        it.map(|i| {
            let i = i.unwrap();
            (i.meta.ts, i.entry().to_string())
        })
        .collect()
    }

    fn pats(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn globs() {
        assert!(entry_pattern_matches("cams/*", "cams/front"));
        assert!(!entry_pattern_matches("cams/*", "cams/front/left"));
        assert!(entry_pattern_matches("cams/**", "cams/front/left"));
        assert!(entry_pattern_matches("**", "a/b/c"));
        assert!(entry_pattern_matches("*/lidar", "robot1/lidar"));
        assert!(entry_pattern_matches("cam*", "camera"));
        assert!(!entry_pattern_matches("cam*", "cam/x"));
        assert!(entry_pattern_matches("imu", "imu"));
        assert!(!entry_pattern_matches("imu", "imu2"));
    }

    #[test]
    fn entries_merge_in_timestamp_order_with_ties_by_name() {
        let (_d, s) = store();
        // three entries, interleaved over more than one page each
        for ts in 0..600u64 {
            let e = ["cams/front", "cams/rear", "imu"][(ts % 3) as usize];
            s.write("b", e, &WriteMeta::at(ts), b"x").unwrap();
        }
        s.write("b", "imu", &WriteMeta::at(1), b"tie").unwrap(); // same ts as cams/rear
        s.write("b", "other", &WriteMeta::at(5), b"x").unwrap();
        let got = merged(
            s.query_entries("b", &pats(&["cams/*", "imu"]), &Query::default())
                .unwrap(),
        );
        assert_eq!(got.len(), 601);
        assert_eq!(
            &got[..4],
            &[
                (0, "cams/front".to_string()),
                (1, "cams/rear".to_string()),
                (1, "imu".to_string()),
                (2, "imu".to_string()),
            ]
        );
        assert!(got.windows(2).all(|w| w[0] <= w[1]));
        // descending: newest first, ties still by name
        let q = Query {
            descending: true,
            stop: Some(2),
            ..Query::default()
        };
        let got = merged(s.query_entries("b", &pats(&["**"]), &q).unwrap());
        assert_eq!(
            got,
            [
                (1, "cams/rear".to_string()),
                (1, "imu".to_string()),
                (0, "cams/front".to_string())
            ]
        );
        // a condition and a limit count over the merged stream
        let q = Query {
            when: Some(Condition::And(vec![
                Condition::EachN(2),
                Condition::Limit(3),
            ])),
            start: Some(10),
            ..Query::default()
        };
        let got = merged(s.query_entries("b", &pats(&["cams/*", "imu"]), &q).unwrap());
        assert_eq!(
            got,
            [
                (11, "imu".to_string()),
                (13, "cams/rear".to_string()),
                (15, "cams/front".to_string())
            ]
        );
        // a missing plain name is an error, a glob matching nothing is not
        assert!(matches!(
            s.query_entries("b", &pats(&["nope"]), &Query::default()),
            Err(Error::NotFound(_))
        ));
        assert!(s
            .query_entries("b", &pats(&["nope/*"]), &Query::default())
            .unwrap()
            .next()
            .is_none());
        assert!(matches!(
            s.query_entries("b", &pats(&["../*"]), &Query::default()),
            Err(Error::Name(_))
        ));
    }

    #[test]
    fn a_merged_query_can_follow() {
        let (_d, s) = store();
        s.write("b", "a", &WriteMeta::at(1), b"x").unwrap();
        s.write("b", "b", &WriteMeta::at(2), b"x").unwrap();
        let mut it = s
            .query_entries("b", &pats(&["a", "b"]), &Query::default())
            .unwrap();
        assert!(it.resume(u64::MAX));
        assert_eq!(it.by_ref().count(), 2);
        s.write("b", "a", &WriteMeta::at(5), b"x").unwrap();
        // committed late, below what was delivered: dropped
        s.write("b", "a", &WriteMeta::at(0), b"x").unwrap();
        s.write("b", "b", &WriteMeta::at(4), b"x").unwrap();
        assert!(it.resume(u64::MAX));
        let got: Vec<u64> = it.by_ref().map(|i| i.unwrap().meta.ts).collect();
        assert_eq!(got, [4, 5]);
    }

    /// Defect 4 of issue 27: every commit woke every tail and each walked all its entries.
    /// The commit listener now names the entries a commit put records into, and a tail walks
    /// only those again.
    #[test]
    fn a_tail_woken_by_a_commit_walks_only_the_entries_that_changed() {
        use std::sync::Arc;
        let (_d, s) = store();
        let named: Arc<parking_lot::Mutex<Vec<Vec<u32>>>> = Arc::default();
        let n = named.clone();
        s.on_commit(Box::new(move |ids: &[u32]| n.lock().push(ids.to_vec())));
        for e in ["a", "b", "c"] {
            s.write("b", e, &WriteMeta::at(1), b"x").unwrap();
        }
        let mut it = s
            .query_entries("b", &pats(&["a", "b", "c"]), &Query::default())
            .unwrap();
        let ids = it.entry_ids();
        assert_eq!(ids.len(), 3);
        assert!(it.resume(u64::MAX));
        assert_eq!(it.by_ref().count(), 3);
        named.lock().clear();
        s.write("b", "b", &WriteMeta::at(5), b"x").unwrap();
        s.write("b", "c", &WriteMeta::at(6), b"x").unwrap();
        // one commit per write, each naming its entry
        assert_eq!(*named.lock(), [vec![ids[1]], vec![ids[2]]]);
        // told only of b: c's record waits for the walk that is told of c
        assert!(it.resume_changed(u64::MAX, &[ids[1]]));
        let got: Vec<u64> = it.by_ref().map(|i| i.unwrap().meta.ts).collect();
        assert_eq!(got, [5]);
        assert!(it.resume_changed(u64::MAX, &[]));
        assert_eq!(it.by_ref().count(), 0);
        assert!(it.resume_changed(u64::MAX, &[ids[2]]));
        let got: Vec<u64> = it.by_ref().map(|i| i.unwrap().meta.ts).collect();
        assert_eq!(got, [6]);
        // a batch over two entries and a removal: puts named once each, a removal none
        named.lock().clear();
        s.write_batch(
            "b",
            "a",
            vec![
                BatchRecord {
                    meta: WriteMeta::at(7),
                    data: b"x".to_vec(),
                },
                BatchRecord {
                    meta: WriteMeta::at(8),
                    data: b"x".to_vec(),
                },
            ],
        )
        .unwrap();
        s.remove_record("b", "a", 7).unwrap();
        assert_eq!(*named.lock(), [vec![ids[0]], vec![]]);
    }

    /// Item 6 of issue 27: a walk bounded by a settle horizon tells what it left past it,
    /// so a tail knows when to walk again without a commit.
    #[test]
    fn a_walk_bounded_by_a_horizon_names_the_first_record_it_left() {
        let (_d, s) = store();
        s.write("b", "a", &WriteMeta::at(10), b"x").unwrap();
        s.write("b", "b", &WriteMeta::at(30), b"x").unwrap();
        s.write("b", "b", &WriteMeta::at(20), b"x").unwrap();
        let mut it = s
            .query_entries("b", &pats(&["a", "b"]), &Query::default())
            .unwrap();
        assert!(it.resume(15));
        assert_eq!(it.by_ref().count(), 1);
        assert_eq!(it.ahead(), Some(20));
        // nothing changed, the horizon has not reached it: no walk, still ahead
        assert!(it.resume_changed(18, &[]));
        assert_eq!(it.by_ref().count(), 0);
        assert_eq!(it.ahead(), Some(20));
        // the horizon passed it: walked without being told of a change
        assert!(it.resume_changed(25, &[]));
        let got: Vec<u64> = it.by_ref().map(|i| i.unwrap().meta.ts).collect();
        assert_eq!(got, [20]);
        assert_eq!(it.ahead(), Some(30));
        // single entry too
        let mut one = s.query("b", "b", &Query::default()).unwrap();
        assert!(one.resume(25));
        assert_eq!(one.by_ref().count(), 1);
        assert_eq!(one.ahead(), Some(30));
        assert!(one.resume_changed(26, &[]));
        assert_eq!(one.by_ref().count(), 0);
        assert!(one.resume_changed(31, &[]));
        assert_eq!(one.by_ref().count(), 1);
        assert_eq!(one.ahead(), None);
    }
}
