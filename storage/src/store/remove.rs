//! Removing records and ranges.
//!
//! A removed record gets the `deleted` flag in its frame header (the one byte of a block
//! that changes after it is written) and leaves the index. A block whose records are all
//! removed is deleted whole (`quota.rs`, `delete_block`), unless it is the block being
//! appended to. Everything happens under the entry's lock, with the record's location read
//! under that lock: a removal and a label update of one record are serialized, so neither
//! can retire a frame the other already moved, nor bring back one the other removed.
//!
//! The removal of the matches of a query lists them with `selector.rs`'s `Selector`.

use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;

use crate::bucket::Bucket;
use crate::codec::frame::FLAG_DELETED;
use crate::codec::index::IndexValue;
use crate::commit::{Change, Op};
use crate::entry::{Entry, EntryState};
use crate::error::{Error, NotFound, Result};
use crate::index::Order;
use crate::record::Query;
use crate::selector::{Selector, REMOVE_PAGE};
use crate::store::Store;

impl Store {
    pub fn remove_record(&self, bucket: &str, entry: &str, ts: u64) -> Result<()> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let mut st = e.lock_live(bucket)?;
        let v = {
            let txn = self.inner.index.read_txn()?;
            self.inner.index.get_record(&txn, e.id(), ts)?
        };
        let v = v.ok_or_else(|| NotFound::Record {
            bucket: bucket.into(),
            entry: entry.into(),
            ts,
        })?;
        self.remove_listed(&b, &e, &mut st, vec![(ts, v)])
    }

    /// Removes records with `start <= ts < stop`; returns how many.
    pub fn remove_range(&self, bucket: &str, entry: &str, start: u64, stop: u64) -> Result<u64> {
        // A range is a query without conditions: one removal loop serves both.
        self.remove_where(
            bucket,
            entry,
            &Query {
                start: Some(start),
                stop: Some(stop),
                ..Query::default()
            },
        )
    }

    /// Flags the frames deleted, drops them from the index, deletes emptied blocks.
    pub(crate) fn remove_listed(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        listed: Vec<(u64, IndexValue)>,
    ) -> Result<()> {
        let mut ops = Vec::with_capacity(listed.len() + 4);
        let mut touched = BTreeSet::new();
        for (ts, v) in &listed {
            self.flag_deleted(e, v)?;
            ops.push(Op::DelRec {
                entry_id: e.id(),
                ts: *ts,
            });
            if st.retire_one(v.block_id).is_some() {
                touched.insert(v.block_id);
            }
        }
        let mut emptied = Vec::new();
        // Tiered blocks are marked again after the commit (see `store/tier.rs`: a sidecar
        // upload that read the index before it must be followed by another).
        let tiered: Vec<u64> = match &self.inner.tier {
            Some(t) => touched
                .iter()
                .copied()
                .filter(|id| t.is_tiered(*id))
                .collect(),
            None => Vec::new(),
        };
        for id in touched {
            let Some(m) = st.block(id) else {
                continue;
            };
            if m.records == 0 && !st.is_active(id) {
                emptied.push(id);
            }
            ops.push(Op::PutBlock { id, state: m });
        }
        self.inner.commit(Change { ops, files: vec![] })?;
        crate::crash_point("records-removal-committed");
        if let Some(t) = &self.inner.tier {
            for id in tiered {
                t.mark_dirty(&e.bucket_name(), e.name(), id);
            }
        }
        for id in emptied {
            self.delete_block(b, e, st, id)?;
        }
        Ok(())
    }

    /// Sets a frame's `deleted` flag (outside its CRC), so a rebuild skips it. A tiered
    /// block has no local file: its heads sidecar is uploaded again without the record.
    pub(crate) fn flag_deleted(&self, e: &Entry, v: &IndexValue) -> Result<()> {
        if let Some(t) = self.inner.tier.as_ref().filter(|t| t.is_tiered(v.block_id)) {
            t.mark_dirty(&e.bucket_name(), e.name(), v.block_id);
            return Ok(());
        }
        let file = self.block_file(e, v.block_id)?;
        file.write_all_at(&[v.flags | FLAG_DELETED], v.offset + 1)
            .map_err(|err| {
                Error::io(
                    format!("flagging a record of block {:016x}", v.block_id),
                    err,
                )
            })
    }
}

impl Store {
    /// Removes the records at `timestamps` (a batch removal, ReductStore's `DELETE …/batch`):
    /// one result per timestamp, in order; a missing record is its `NotFound`, the others
    /// are removed all the same. An unknown bucket or entry fails the whole call.
    pub fn remove_records(
        &self,
        bucket: &str,
        entry: &str,
        timestamps: &[u64],
    ) -> Result<Vec<Result<()>>> {
        let b = self.get_bucket(bucket)?;
        self.get_entry(&b, entry)?;
        Ok(timestamps
            .iter()
            .map(|ts| self.remove_record(bucket, entry, *ts))
            .collect())
    }

    /// Removes the records of `query` (its range, label filters, condition and limit,
    /// oldest first); returns how many. Matches are listed from the index page by page, each
    /// page under the entry's lock, and removed like a range; writers to the entry go on
    /// between pages (a record they add to a page not yet listed is removed if it matches).
    /// A strict condition that meets a missing label stops with an error; the pages removed
    /// before it stay removed. An entry removed during the walk ends it with what was
    /// removed until then.
    pub fn remove_where(&self, bucket: &str, entry: &str, query: &Query) -> Result<u64> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let mut removed = 0;
        let walked = self.for_each_selected(
            e.id(),
            query,
            || e.lock_live(bucket),
            |st, listed| {
                if !listed.is_empty() {
                    removed += listed.len() as u64;
                    self.remove_listed(&b, &e, st, listed)?;
                }
                Ok(())
            },
        );
        match walked {
            Err(Error::NotFound(NotFound::Entry { .. })) if removed > 0 => Ok(removed),
            other => other.map(|()| removed),
        }
    }

    /// Hands the records `query` selects in entry `entry_id` (its range, label filters,
    /// condition and limit; oldest first) to `each`, one index page at a time: matches are
    /// listed from the index alone (no payload read), each page under what `lock` takes
    /// (released between pages, so that a long walk does not hold the entry's writers for
    /// all of it). The one walk of `remove_where` and `update_labels_where`.
    pub(super) fn for_each_selected<G>(
        &self,
        entry_id: u32,
        query: &Query,
        mut lock: impl FnMut() -> Result<G>,
        mut each: impl FnMut(&mut G, Vec<(u64, IndexValue)>) -> Result<()>,
    ) -> Result<()> {
        let query = Query {
            descending: false,
            ..query.clone()
        };
        let mut sel = Selector::new(&query);
        let (mut lo, hi) = (query.start.unwrap_or(0), query.stop.unwrap_or(u64::MAX));
        loop {
            let mut guard = lock()?;
            let mut page = Vec::with_capacity(REMOVE_PAGE);
            {
                let txn = self.inner.index.read_txn()?;
                self.inner.index.range(
                    &txn,
                    entry_id,
                    lo..hi,
                    Order::Ascending,
                    REMOVE_PAGE,
                    &mut page,
                )?;
            }
            let last = page.last().map(|(ts, _)| *ts);
            let full = page.len() == REMOVE_PAGE;
            let mut listed = Vec::new();
            let ended = sel.select(page, &mut listed)?;
            each(&mut guard, listed)?;
            drop(guard);
            match last {
                Some(ts) if full && !ended && ts < u64::MAX => lo = ts + 1,
                _ => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod select_tests {
    use crate::error::{Error, QueryError};
    use crate::record::{BatchRecord, Query, WriteMeta};
    use crate::settings::{BucketSettings, StoreOptions};
    use crate::store::Store;
    use crate::when::{CmpOp, Condition, Operand, Value};

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        (dir, s)
    }

    /// Records 0..n with labels `n` = ts and `parity`, payloads of 1000 × `A`.
    fn fill(s: &Store, n: u64) {
        fill_sized(s, n, 1000);
    }

    /// As `fill`, with payloads of `size` × `A` (written in batches of 50,000).
    fn fill_sized(s: &Store, n: u64, size: usize) {
        for chunk in (0..n).collect::<Vec<_>>().chunks(50_000) {
            let batch: Vec<BatchRecord> = chunk
                .iter()
                .map(|&ts| BatchRecord {
                    meta: WriteMeta {
                        ts: Some(ts),
                        content_type: None,
                        labels: [
                            ("n".to_string(), ts.to_string()),
                            (
                                "parity".into(),
                                if ts % 2 == 0 { "even" } else { "odd" }.into(),
                            ),
                        ]
                        .into(),
                    },
                    data: vec![b'A'; size],
                })
                .collect();
            for r in s.write_batch("b", "e", batch).unwrap() {
                r.unwrap();
            }
        }
    }

    fn when(c: Condition) -> Query {
        Query {
            when: Some(c),
            ..Query::default()
        }
    }

    fn gt(label: &str, v: i64) -> Condition {
        Condition::Compare(
            CmpOp::Gt,
            Operand::Label(label.into()),
            Operand::Const(Value::Int(v)),
        )
    }

    fn ts_of(s: &Store, q: &Query) -> Vec<u64> {
        s.query("b", "e", q)
            .unwrap()
            .map(|i| i.unwrap().meta.ts)
            .collect()
    }

    #[test]
    fn queries_keep_matching_records_across_pages() {
        let (_d, s) = store();
        fill(&s, 2000);
        let q = when(Condition::And(vec![
            gt("n", 1500),
            Condition::Compare(
                CmpOp::Eq,
                Operand::Label("parity".into()),
                Operand::Const(Value::Str("odd".into())),
            ),
        ]));
        let got = ts_of(&s, &q);
        assert_eq!(got, (1501..2000).step_by(2).collect::<Vec<_>>());
        // with the query's own limit, descending
        let q = Query {
            limit: Some(3),
            descending: true,
            ..q
        };
        assert_eq!(ts_of(&s, &q), [1999, 1997, 1995]);
        // aggregation state spans pages: every 300th record, then a $limit
        let q = when(Condition::And(vec![
            Condition::EachN(300),
            Condition::Limit(4),
        ]));
        assert_eq!(ts_of(&s, &q), [299, 599, 899, 1199]);
        let q = when(Condition::EachT(500));
        assert_eq!(ts_of(&s, &q), [500, 1000, 1500]);
    }

    #[test]
    fn a_strict_query_fails_after_the_records_before_the_missing_label() {
        let (_d, s) = store();
        fill(&s, 10);
        s.write("b", "e", &WriteMeta::at(10), b"no labels").unwrap();
        let q = Query {
            strict: true,
            ..when(gt("n", 7))
        };
        let items: Vec<_> = s.query("b", "e", &q).unwrap().collect();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].as_ref().unwrap().meta.ts, 8);
        assert_eq!(items[1].as_ref().unwrap().meta.ts, 9);
        match &items[2] {
            Err(Error::Query(QueryError::MissingLabel { label, ts })) => {
                assert_eq!((label.as_str(), *ts), ("n", 10))
            }
            other => panic!("{:?}", other.as_ref().map(|i| i.meta.ts)),
        }
        // not strict: the record just does not match
        assert_eq!(ts_of(&s, &when(gt("n", 7))), [8, 9]);
    }

    #[test]
    fn a_query_that_matches_nothing_reads_no_payload() {
        let (d, s) = store();
        fill(&s, 3000);
        // Spoil every payload byte on disk: a payload read would fail its CRC.
        let mut spoiled = 0;
        let mut dirs = vec![d.path().join("b")];
        while let Some(dir) = dirs.pop() {
            for f in std::fs::read_dir(dir).unwrap() {
                let p = f.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                    continue;
                }
                let mut bytes = std::fs::read(&p).unwrap();
                let mut i = 0;
                while i + 1000 <= bytes.len() {
                    if bytes[i..i + 1000].iter().all(|&b| b == b'A') {
                        bytes[i..i + 1000].fill(b'B');
                        spoiled += 1;
                        i += 1000;
                    } else {
                        i += 1;
                    }
                }
                std::fs::write(&p, bytes).unwrap();
            }
        }
        assert_eq!(spoiled, 3000);
        let none = when(gt("n", 5000));
        let mut steps = 0;
        let mut it = s.query("b", "e", &none).unwrap();
        while let Some(step) = it.next_bounded() {
            assert!(step.unwrap().is_none());
            steps += 1;
        }
        // one bounded step per page of 256 index records
        assert_eq!(steps, 3000usize.div_ceil(256));
        // the same walk over matching records does read them, and finds them spoiled
        let some = when(gt("n", 2990));
        let reads: Vec<_> = s
            .query("b", "e", &some)
            .unwrap()
            .map(|i| i.unwrap().data())
            .collect();
        assert_eq!(reads.len(), 9);
        assert!(reads.iter().all(|r| matches!(r, Err(Error::Corrupt(_)))));
    }

    /// The one bound of the walks that hand back (query steps, MCAP export steps,
    /// ReductStore reads): `next_within` stops after its pages without a match, walks no
    /// further with that bound (a ReductStore read's look-ahead walked one more page after
    /// its bound was reached), and a new bound walks on from where it stopped, skipping
    /// and repeating nothing.
    #[test]
    fn a_walk_within_a_bound_stops_at_it_and_the_next_bound_walks_on() {
        let (_d, s) = store();
        fill(&s, 3000);
        // matches only the last record: 12 pages of 256, the match on the last
        let q = when(gt("n", 2998));
        let mut it = s.query("b", "e", &q).unwrap();
        let mut bound = crate::ScanBound::pages(4);
        assert!(matches!(it.next_within(&mut bound), Some(Ok(None))));
        assert!(bound.out());
        let left = it.held_bytes();
        // (seven more pages, had these walked, would leave the match in the next page)
        for _ in 0..7 {
            assert!(matches!(it.next_within(&mut bound), Some(Ok(None))));
        }
        // nothing was walked after the bound: the match (after 11 pages without one) is
        // reached by the second fresh bound of 4 only if the first bound walked exactly 4
        let mut steps = 0;
        let found = loop {
            steps += 1;
            let mut bound = crate::ScanBound::pages(4);
            match it.next_within(&mut bound) {
                Some(Ok(Some(item))) => break item.meta.ts,
                Some(Ok(None)) => assert!(bound.out()),
                other => panic!("{:?}", other.map(|r| r.map(|o| o.map(|i| i.meta.ts)))),
            }
        };
        assert_eq!((found, steps), (2999, 2));
        assert!(left > 0);
        assert!(it.next_within(&mut crate::ScanBound::pages(4)).is_none());
        // a time bound stops a walk too: an elapsed one after its first page
        let mut it = s.query("b", "e", &q).unwrap();
        let mut bound = crate::ScanBound::pages_or_time(1000, std::time::Duration::ZERO);
        assert!(matches!(it.next_within(&mut bound), Some(Ok(None))));
        let mut rest = crate::ScanBound::pages(1000);
        assert!(matches!(it.next_within(&mut rest), Some(Ok(Some(i))) if i.meta.ts == 2999));
    }

    /// A removal by condition held the entry's lock for its whole walk: over a large
    /// entry, writes to it waited for all of it (a write token's `DELETE …/q?when=` or
    /// ReductStore `REMOVE` query matching little). Now the lock is taken per page.
    #[test]
    fn a_long_removal_by_condition_lets_writers_to_its_entry_in_between_pages() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let (_d, s) = store();
        let n: u64 = 300_000;
        fill_sized(&s, n, 1);
        let (removing, done) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let written = Arc::new(AtomicU64::new(0));
        let writer = {
            let (s, removing, done, written) =
                (s.clone(), removing.clone(), done.clone(), written.clone());
            std::thread::spawn(move || {
                while !removing.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                let mut ts = 10 * n;
                while !done.load(Ordering::SeqCst) {
                    s.write("b", "e", &WriteMeta::at(ts), b"w").unwrap();
                    // counted only while the removal still runs
                    if !done.load(Ordering::SeqCst) {
                        written.fetch_add(1, Ordering::SeqCst);
                    }
                    ts += 1;
                }
            })
        };
        removing.store(true, Ordering::SeqCst);
        let started = std::time::Instant::now();
        // matches nothing: every page of the entry is walked
        let removed = s
            .remove_where("b", "e", &when(gt("n", 100 * n as i64)))
            .unwrap();
        done.store(true, Ordering::SeqCst);
        let took = started.elapsed();
        writer.join().unwrap();
        assert_eq!(removed, 0);
        // With the lock held for the whole walk, the writer's first write waited for its end.
        let during = written.load(Ordering::SeqCst);
        assert!(
            during >= 2,
            "{during} writes in the {took:?} of the removal"
        );
    }

    /// Removals that walk one entry at once each take its lock per page: a record two of
    /// them match is removed (and counted) by one only, and the entry's counts stay exact,
    /// also after a reopen.
    #[test]
    fn concurrent_removals_of_one_entry_remove_each_record_once() {
        let (d, s) = store();
        fill_sized(&s, 20_000, 1);
        let odd = Condition::Compare(
            CmpOp::Eq,
            Operand::Label("parity".into()),
            Operand::Const(Value::Str("odd".into())),
        );
        let walks: Vec<_> = (0..3)
            .map(|i| {
                let (s, odd) = (s.clone(), odd.clone());
                std::thread::spawn(move || match i {
                    2 => s.remove_range("b", "e", 0, 5_000).unwrap(),
                    _ => s.remove_where("b", "e", &when(odd)).unwrap(),
                })
            })
            .collect();
        let removed: u64 = walks.into_iter().map(|w| w.join().unwrap()).sum();
        // every odd record, and the even ones under 5,000
        assert_eq!(removed, 10_000 + 2_500);
        assert_eq!(s.entry("b", "e").unwrap().record_count, 7_500);
        assert_eq!(ts_of(&s, &Query::default()).len(), 7_500);
        drop(s);
        let s = Store::open(d.path(), StoreOptions::default()).unwrap();
        assert_eq!(s.entry("b", "e").unwrap().record_count, 7_500);
        let left = ts_of(&s, &Query::default());
        assert_eq!(left.len(), 7_500);
        assert!(left.iter().all(|t| t % 2 == 0 && *t >= 5_000));
    }

    #[test]
    fn remove_where_removes_only_matches() {
        let (_d, s) = store();
        fill(&s, 10_000);
        let odd = Condition::Compare(
            CmpOp::Eq,
            Operand::Label("parity".into()),
            Operand::Const(Value::Str("odd".into())),
        );
        let q = Query {
            start: Some(100),
            stop: Some(9000),
            ..when(odd.clone())
        };
        assert_eq!(s.remove_where("b", "e", &q).unwrap(), 4450);
        let left = ts_of(&s, &Query::default());
        assert_eq!(left.len(), 10_000 - 4450);
        assert!(left.iter().all(|t| t % 2 == 0 || *t < 100 || *t >= 9000));
        // a limit and a $limit bound what goes
        let q = Query {
            limit: Some(5),
            ..when(odd.clone())
        };
        assert_eq!(s.remove_where("b", "e", &q).unwrap(), 5);
        let q = when(Condition::And(vec![odd, Condition::Limit(7)]));
        assert_eq!(s.remove_where("b", "e", &q).unwrap(), 7);
        assert_eq!(ts_of(&s, &Query::default()).len(), 10_000 - 4462);
        // strict: the first record without the label stops it
        s.write("b", "e", &WriteMeta::at(20_000), b"x").unwrap();
        let q = Query {
            strict: true,
            start: Some(9990),
            ..when(gt("n", 0))
        };
        assert!(matches!(
            s.remove_where("b", "e", &q),
            Err(Error::Query(QueryError::MissingLabel { .. }))
        ));
    }
}
