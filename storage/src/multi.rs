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
use crate::pattern::EntryPattern;
use crate::read::QueryItem;
use crate::select::Selector;
use crate::*;

/// Index records fetched per entry and read transaction, and scanned without a match before
/// `next_bounded` hands back.
const PAGE: usize = 256;

/// One entry's part of a merged query: the window still to walk and a page of it.
struct Source {
    entry: Arc<Entry>,
    lo: u64,
    hi: u64,
    page: VecDeque<(u64, IndexValue)>,
    /// The walk of `[lo, hi)` is over.
    done: bool,
}

impl Source {
    fn fill(&mut self, store: &Store, order: Order) -> Result<()> {
        if self.lo >= self.hi {
            self.done = true;
            return Ok(());
        }
        let index = &store.inner.index;
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
            // Compiled once, matched in linear time (see `pattern.rs`).
            let pattern = EntryPattern::parse(p)?;
            if pattern.is_glob() {
                names.extend(all.iter().filter(|n| pattern.matches(n)).cloned());
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
            if s.page.is_empty() {
                s.hi = self.stop.min(horizon);
                s.done = false;
            }
        }
        open
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
                    if let Err(e) = s.fill(&self.store, self.order) {
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
        let entry_pattern_matches = |p: &str, n: &str| EntryPattern::parse(p).unwrap().matches(n);
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
}
