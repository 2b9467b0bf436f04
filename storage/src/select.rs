//! Selecting records from the index alone: label filters, a condition and a limit, applied
//! to pages of index records by queries (`read.rs`) and by [`Store::remove_where`].

use crate::index::{IndexValue, Order};
use crate::when::{Matcher, Stop};
use crate::*;

/// Index records scanned per page by `remove_where` (one index commit per page at most).
/// Records removed per index commit in a removal (by range or condition).
const REMOVE_PAGE: usize = 4096;

/// What a query keeps of the records it walks, with the state of its condition.
pub(crate) struct Selector {
    filters: Vec<LabelFilter>,
    matcher: Option<Matcher>,
    /// Records still to keep (`Query::limit`).
    left: u64,
}

impl Selector {
    pub(crate) fn new(q: &Query) -> Selector {
        Selector {
            filters: q.filters.clone(),
            matcher: q
                .when
                .as_ref()
                .map(|c| Matcher::new(c, q.strict, q.descending)),
            left: q.limit.unwrap_or(u64::MAX),
        }
    }

    /// Moves the records of `page` that match into `out`, in order. `Ok(true)`: the query
    /// has ended (its limit or a `$limit` was reached); nothing after the last kept record
    /// may match. An `Err` (a strict condition met a missing label) comes after the records
    /// kept before it, which are in `out`.
    pub(crate) fn select(
        &mut self,
        page: Vec<(u64, IndexValue)>,
        out: &mut impl Extend<(u64, IndexValue)>,
    ) -> Result<bool> {
        for (ts, v) in page {
            if self.left == 0 {
                return Ok(true);
            }
            let labels = &v.attrs.labels;
            if !self.filters.iter().all(|f| f.matches(labels)) {
                continue;
            }
            if let Some(m) = self.matcher.as_mut() {
                match m.matches(ts, labels) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(Stop::Limit) => return Ok(true),
                    Err(Stop::Missing(label)) => {
                        return Err(QueryError::MissingLabel { label, ts }.into())
                    }
                    Err(Stop::Invalid(message)) => {
                        return Err(QueryError::Invalid { message, ts }.into())
                    }
                }
            }
            self.left -= 1;
            out.extend([(ts, v)]);
        }
        Ok(self.left == 0)
    }
}

impl Store {
    /// Removes the records of `query` (its range, label filters, condition and limit,
    /// oldest first); returns how many. Matches are listed from the index page by page under
    /// the entry's lock and removed like a range. A strict condition that meets a missing
    /// label stops with an error; the pages removed before it stay removed.
    pub fn remove_where(&self, bucket: &str, entry: &str, query: &Query) -> Result<u64> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let query = Query {
            descending: false,
            ..query.clone()
        };
        let mut sel = Selector::new(&query);
        let (mut lo, hi) = (query.start.unwrap_or(0), query.stop.unwrap_or(u64::MAX));
        let mut st = e.lock_live(bucket)?;
        let mut removed = 0;
        loop {
            let mut page = Vec::with_capacity(REMOVE_PAGE);
            {
                let txn = self.inner.index.read_txn()?;
                self.inner.index.range(
                    &txn,
                    e.id(),
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
            if !listed.is_empty() {
                removed += listed.len() as u64;
                self.remove_listed(&b, &e, &mut st, listed)?;
            }
            match last {
                Some(ts) if full && !ended && ts < u64::MAX => lo = ts + 1,
                _ => return Ok(removed),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        (dir, s)
    }

    /// Records 0..n with labels `n` = ts and `parity`, payloads of 1000 × `A`.
    fn fill(s: &Store, n: u64) {
        let batch: Vec<BatchRecord> = (0..n)
            .map(|ts| BatchRecord {
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
                data: vec![b'A'; 1000],
            })
            .collect();
        for r in s.write_batch("b", "e", batch).unwrap() {
            r.unwrap();
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
