//! The read path: point reads, streamed reads and time-range queries.
//!
//! Reads take no entry lock: the index says where a record is, the block file is read with
//! `pread`, and the CRC is checked before a byte is returned (or, for a stream, at its end).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::block::read_frame;
use crate::entry::Entry;
use crate::files::CachedBlock;
use crate::index::{IndexValue, Order};
use crate::mapped::{map_frame, Payload, Span, Spans, Windows, MAP_MAX, MAP_MIN, MEMORY_MAX};
use crate::select::Selector;
use crate::store::Inner;
use crate::*;

/// How many index records a query fetches per LMDB read transaction.
const PAGE: usize = 256;

impl Store {
    fn locate(
        &self,
        bucket: &str,
        entry: &str,
        ts: Option<u64>,
    ) -> Result<(Arc<Entry>, u64, IndexValue)> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let txn = self.inner.index.read_txn()?;
        let found = match ts {
            Some(ts) => self
                .inner
                .index
                .get_record(&txn, e.id(), ts)?
                .map(|v| (ts, v)),
            None => self.inner.index.last(&txn, e.id())?,
        };
        let (ts, v) = found.ok_or_else(|| NotFound::Record {
            bucket: bucket.into(),
            entry: entry.into(),
            ts: ts.unwrap_or(0),
        })?;
        Ok((e, ts, v))
    }

    /// Reads a record (`ts = None`: the latest).
    pub fn read(&self, bucket: &str, entry: &str, ts: Option<u64>) -> Result<Record> {
        let (e, ts, v) = self.locate(bucket, entry, ts)?;
        read_value(&self.inner, &e, ts, v).map_err(|err| gone_is_not_found(err, bucket, entry, ts))
    }

    /// A record's metadata and, when its payload is at most `max_inline` bytes, the payload
    /// (a larger one stays on disk: read it with [`Store::open_record`]).
    pub(crate) fn read_bounded(
        &self,
        bucket: &str,
        entry: &str,
        ts: u64,
        max_inline: u64,
    ) -> Result<(RecordMeta, Option<Vec<u8>>)> {
        let (e, ts, v) = self.locate(bucket, entry, Some(ts))?;
        let meta = meta_of(ts, &v);
        if meta.size > max_inline {
            return Ok((meta, None));
        }
        let data = read_payload(&self.inner, &e, ts, &v, Access::Point)
            .map_err(|err| gone_is_not_found(err, bucket, entry, ts))?;
        Ok((meta, Some(data)))
    }

    /// A record's metadata and its CRC-checked payload: mapped from its block when it is
    /// large (no copy: [`Payload::Mapped`]), in memory otherwise. `None` for a payload to
    /// stream with [`Store::open_record`] instead (see `payload_of`).
    pub fn read_payload(
        &self,
        bucket: &str,
        entry: &str,
        ts: Option<u64>,
    ) -> Result<(RecordMeta, Option<Payload>)> {
        let (e, ts, v) = self.locate(bucket, entry, ts)?;
        let p = payload_of(&self.inner, &e, ts, &v, Access::Point, None)
            .map_err(|err| gone_is_not_found(err, bucket, entry, ts))?;
        Ok((meta_of(ts, &v), p))
    }

    /// The metadata of a record, from the index alone.
    pub fn head(&self, bucket: &str, entry: &str, ts: Option<u64>) -> Result<RecordMeta> {
        let (_, ts, v) = self.locate(bucket, entry, ts)?;
        Ok(meta_of(ts, &v))
    }

    /// A record's payload as a stream, for records too large to hold in memory.
    pub fn open_record(&self, bucket: &str, entry: &str, ts: Option<u64>) -> Result<RecordReader> {
        let (e, ts, v) = self.locate(bucket, entry, ts)?;
        open_value(&self.inner, &e, ts, &v, Access::Point)
            .map_err(|err| gone_is_not_found(err, bucket, entry, ts))
    }

    /// Records with `start <= ts < stop` matching every filter, oldest first (or newest
    /// first with `descending`). The iterator holds at most one page of index metadata.
    pub fn query(&self, bucket: &str, entry: &str, query: &Query) -> Result<QueryIter> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        Ok(QueryIter {
            store: self.clone(),
            bucket: bucket.to_string(),
            entry: e,
            lo: query.start.unwrap_or(0),
            hi: query.stop.unwrap_or(u64::MAX),
            stop: query.stop.unwrap_or(u64::MAX),
            descending: query.descending,
            sel: Selector::new(query),
            page: VecDeque::new(),
            spans: Spans::default(),
            failed: None,
            done: false,
            ended: false,
            ahead: None,
        })
    }
}

pub(crate) fn meta_of(ts: u64, v: &IndexValue) -> RecordMeta {
    RecordMeta {
        ts,
        size: v.size,
        content_type: v.attrs.content_type.clone(),
        labels: v.attrs.labels.clone(),
    }
}

/// A block that disappeared under a reader (removed or evicted) means the record is gone.
fn gone_is_not_found(err: Error, bucket: &str, entry: &str, ts: u64) -> Error {
    match &err {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            NotFound::Record {
                bucket: bucket.into(),
                entry: entry.into(),
                ts,
            }
            .into()
        }
        _ => err,
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

/// A block file's handle and base timestamp; for a block that is not on the local disk
/// and is tiered, the record's head fields and payload read from the object store instead
/// (a query's read, [`Access::Scan`], fetches ahead into the cache).
enum Source {
    Local(Arc<std::fs::File>, u64),
    Tiered(Payload),
}

fn source(inner: &Inner, e: &Entry, ts: u64, v: &IndexValue, access: Access) -> Result<Source> {
    // A tiered block is read from the tier without trying its local file first: that copy
    // is deleted once the object is verified, and a failed open() per record (a path built,
    // a lookup, an error) cost a tiered query a few per cent of its CPU.
    if let Some(tier) = &inner.tier {
        if let Some((_, data)) = tier.read_record(e, ts, v, access)? {
            return Ok(Source::Tiered(data));
        }
    }
    let CachedBlock { file, base_ts } = inner.files.get(v.block_id, || e.block_path(v.block_id))?;
    Ok(Source::Local(file, base_ts))
}

/// Reads and checks a record's payload (the path is only built for an error message).
fn read_payload(
    inner: &Inner,
    e: &Entry,
    ts: u64,
    v: &IndexValue,
    access: Access,
) -> Result<Vec<u8>> {
    let (file, base_ts) = match source(inner, e, ts, v, access)? {
        Source::Local(file, base_ts) => (file, base_ts),
        Source::Tiered(data) => return Ok(data.into_vec()),
    };
    read_local(e, ts, v, &file, base_ts)
}

/// Reads and checks a record's payload from its local block `file`.
fn read_local(
    e: &Entry,
    ts: u64,
    v: &IndexValue,
    file: &std::fs::File,
    base_ts: u64,
) -> Result<Vec<u8>> {
    let path = || e.block_path(v.block_id);
    read_frame(file, &path, v, base_ts, ts)
}

/// A record's payload without a copy where it can be ([`Payload::Mapped`]: a raw payload
/// of [`MAP_MIN`] to [`MAP_MAX`] bytes in a local block, or of any size up to `MAP_MAX`
/// inside a query's shared window: `window`), read into memory where it is small, tiered,
/// or compressed and at most [`MEMORY_MAX`]; `None` otherwise (stream it).
fn payload_of(
    inner: &Inner,
    e: &Entry,
    ts: u64,
    v: &IndexValue,
    access: Access,
    window: Option<(&mut Windows, Span)>,
) -> Result<Option<Payload>> {
    if v.size > MAP_MAX {
        return Ok(None);
    }
    // The block is looked up as for any read, also when a window of it is mapped: a block
    // deleted since the query listed its records reads as gone (`NotFound`), as before.
    let (file, base_ts) = match source(inner, e, ts, v, access)? {
        Source::Local(file, base_ts) => (file, base_ts),
        Source::Tiered(data) => return Ok(Some(data)),
    };
    let path = || e.block_path(v.block_id);
    match window {
        // A window of several frames costs one mapping for all of them: worth it at
        // any size (a frame alone is not, below MAP_MIN).
        Some((w, span)) if v.size >= MAP_MIN || span.is_shared(v) => {
            if let Some(m) = w.frame(&file, &path, v, span, base_ts, ts)? {
                return Ok(Some(Payload::Mapped(m)));
            }
        }
        _ if v.size >= MAP_MIN => {
            if let Some(m) = map_frame(&file, &path, v, base_ts, ts)? {
                return Ok(Some(Payload::Mapped(m)));
            }
        }
        _ => {}
    }
    if v.size > MEMORY_MAX {
        return Ok(None);
    }
    read_local(e, ts, v, &file, base_ts).map(|d| Some(Payload::Memory(d)))
}

fn read_value(inner: &Inner, e: &Entry, ts: u64, v: IndexValue) -> Result<Record> {
    let data = read_payload(inner, e, ts, &v, Access::Point)?;
    Ok(Record {
        meta: meta_of(ts, &v),
        data,
    })
}

fn open_value(
    inner: &Inner,
    e: &Entry,
    ts: u64,
    v: &IndexValue,
    access: Access,
) -> Result<RecordReader> {
    match source(inner, e, ts, v, access)? {
        Source::Local(file, base_ts) => RecordReader::open(
            file,
            &e.block_path(v.block_id),
            v.offset,
            v.frame_len,
            base_ts,
        ),
        Source::Tiered(data) => Ok(RecordReader::checked(meta_of(ts, v), data.into_vec())),
    }
}

/// The timestamp of an entry's first record in `span` (oldest first): what a live tail's
/// walk, bounded by its horizon, left for later ([`QueryIter::ahead`]).
pub(crate) fn first_in(
    index: &crate::index::Index,
    txn: &heed::RoTxn<'_, heed::WithoutTls>,
    entry_id: u32,
    span: std::ops::Range<u64>,
) -> Result<Option<u64>> {
    let mut out = Vec::with_capacity(1);
    index.range(txn, entry_id, span, Order::Ascending, 1, &mut out)?;
    Ok(out.first().map(|(ts, _)| *ts))
}

/// One record found by a query: its metadata now, its payload on demand.
pub struct QueryItem {
    pub meta: RecordMeta,
    store: Store,
    entry: Arc<Entry>,
    value: IndexValue,
    /// The committed bytes of its block around it that a window may map.
    span: Span,
    bucket: String,
}

impl QueryItem {
    pub(crate) fn new(
        store: &Store,
        bucket: &str,
        entry: Arc<Entry>,
        ts: u64,
        value: IndexValue,
    ) -> QueryItem {
        QueryItem {
            meta: meta_of(ts, &value),
            store: store.clone(),
            entry,
            span: Span::of(&value),
            value,
            bucket: bucket.to_string(),
        }
    }

    /// The entry the record belongs to.
    pub fn entry(&self) -> &str {
        self.entry.name()
    }

    /// Reads this record the way `read` does, as one of a query's records; a block removed
    /// since the query listed it is `NotFound`.
    fn scan<T>(
        &self,
        read: impl FnOnce(&Inner, &Entry, u64, &IndexValue, Access) -> Result<T>,
    ) -> Result<T> {
        read(
            &self.store.inner,
            &self.entry,
            self.meta.ts,
            &self.value,
            Access::Scan,
        )
        .map_err(|e| gone_is_not_found(e, &self.bucket, self.entry.name(), self.meta.ts))
    }

    /// The whole payload, CRC-checked. `NotFound` if the record was removed (or evicted
    /// by a FIFO quota) after the query listed it: callers skip such items.
    pub fn data(&self) -> Result<Vec<u8>> {
        self.scan(read_payload)
    }

    /// The payload, CRC-checked, mapped from its block when it is large (see
    /// [`Store::read_payload`]); `None` for one to stream with [`QueryItem::reader`].
    /// `NotFound` as for [`QueryItem::data`].
    pub fn payload(&self) -> Result<Option<Payload>> {
        self.scan(|inner, e, ts, v, access| payload_of(inner, e, ts, v, access, None))
    }

    /// [`QueryItem::payload`] for a reader of many of a query's records: a raw payload is
    /// sliced from a mapped window of its block shared with the records after it
    /// (`windows`, one per query), not read or mapped alone.
    pub fn payload_in(&self, windows: &mut Windows) -> Result<Option<Payload>> {
        self.scan(|inner, e, ts, v, access| {
            payload_of(inner, e, ts, v, access, Some((windows, self.span)))
        })
    }

    /// The payload as a stream (for large records); the CRC is checked at its end.
    pub fn reader(&self) -> Result<RecordReader> {
        self.scan(open_value)
    }
}

/// Iterates the records of a query, holding O(1) records in memory.
pub struct QueryIter {
    store: Store,
    bucket: String,
    entry: Arc<Entry>,
    /// The window still to visit: `[lo, hi)`.
    lo: u64,
    hi: u64,
    /// The query's own `stop` (`hi` may be lower while following: see [`QueryIter::resume`]).
    stop: u64,
    descending: bool,
    sel: Selector,
    page: VecDeque<(u64, IndexValue)>,
    /// The span of the records returned last (see [`Span`]).
    spans: Spans,
    /// An error to return once the records selected before it are out.
    failed: Option<Error>,
    /// The walk of `[lo, hi)` is over (a later `resume` may start another).
    done: bool,
    /// The query is over for good: a limit, a `$limit` or an error ended it.
    ended: bool,
    /// The first record at or past `hi` (below `stop`) when the last walk ended at a
    /// horizon below `stop`: when a live tail's settle time lets it through.
    ahead: Option<u64>,
}

impl QueryIter {
    /// Following a stream of records as they are written: once this iterator has returned
    /// `None`, walks again from just after the last index record it scanned (matching or
    /// not) up to `min(stop, horizon)`, keeping the condition's state (`$each_n`,
    /// `$each_t`, `$limit` and the query's limit count over the whole stream). Also sets
    /// the bound of the first walk when called before it. Returns false when the query
    /// cannot yield more: it is descending, a limit or an error ended it, or its range is
    /// used up. A record committed after the walk passed its timestamp is never returned.
    pub fn resume(&mut self, horizon: u64) -> bool {
        self.resume_if(horizon, true)
    }

    /// [`QueryIter::resume`] for a live tail told which entries got records since its last
    /// walk (`changed`: entry ids, sorted, as a commit listener is given them): walks again
    /// only when its entry is among them, or when a record the last walk found past its
    /// horizon ([`QueryIter::ahead`]) is now below the new one. Otherwise the next walk is
    /// empty and costs nothing. Returns what `resume` returns.
    pub fn resume_changed(&mut self, horizon: u64, changed: &[u32]) -> bool {
        let due = changed.binary_search(&self.entry.id()).is_ok()
            || self.ahead.is_some_and(|ts| ts < self.stop.min(horizon));
        self.resume_if(horizon, due)
    }

    fn resume_if(&mut self, horizon: u64, walk: bool) -> bool {
        if self.ended || self.descending || self.lo >= self.stop {
            return false;
        }
        if !self.page.is_empty() || self.failed.is_some() {
            return true; // the current walk has not been consumed yet
        }
        if walk {
            self.hi = self.stop.min(horizon);
            self.done = false;
            self.ahead = None;
        }
        true
    }

    /// The timestamp the next walk starts from (ascending): one past the last index record
    /// scanned.
    pub fn cursor(&self) -> u64 {
        self.lo
    }

    /// The id of the entry this query reads (what a commit listener is given).
    pub fn entry_id(&self) -> u32 {
        self.entry.id()
    }

    /// After a walk bounded by a horizon below the query's `stop` (a live tail with a
    /// settle time): the timestamp of the first record it left for a later walk, if there
    /// is one. A tail waits until its horizon passes it (no commit needs to wake it).
    pub fn ahead(&self) -> Option<u64> {
        self.ahead
    }

    fn fill(&mut self) -> Result<()> {
        let index = &self.store.inner.index;
        if self.lo >= self.hi {
            self.done = true;
            if self.bounded() {
                let txn = index.read_txn()?;
                self.ahead = first_in(index, &txn, self.entry.id(), self.hi..self.stop)?;
            }
            return Ok(());
        }
        let txn = index.read_txn()?;
        let mut out = Vec::with_capacity(PAGE);
        index.range(
            &txn,
            self.entry.id(),
            self.lo..self.hi,
            Order::of(self.descending),
            PAGE,
            &mut out,
        )?;
        if out.len() < PAGE {
            self.done = true;
            if self.bounded() {
                self.ahead = first_in(index, &txn, self.entry.id(), self.hi..self.stop)?;
            }
        }
        if let Some((ts, _)) = out.last() {
            if self.descending {
                self.hi = *ts;
            } else {
                self.lo = ts.saturating_add(1);
            }
        }
        match self.sel.select(out, &mut self.page) {
            Ok(true) => {
                self.done = true;
                self.ended = true;
            }
            Ok(false) => {}
            Err(e) => {
                self.done = true;
                self.ended = true;
                self.failed = Some(e);
            }
        }
        Ok(())
    }

    /// An ascending walk stopped by a horizon below `stop` (a live tail's settle time).
    fn bounded(&self) -> bool {
        !self.descending && self.hi < self.stop
    }

    /// One bounded step: the next record (`Some(Ok(Some(item)))`), or `Some(Ok(None))` when
    /// a page of index records was scanned and none matched, so a caller walking a long range
    /// that matches little can look up (has its client gone?) between pages. `None` at the end.
    pub fn next_bounded(&mut self) -> Option<Result<Option<QueryItem>>> {
        if self.page.is_empty() {
            if let Some(e) = self.failed.take() {
                return Some(Err(e));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.fill() {
                self.done = true;
                self.ended = true;
                return Some(Err(e));
            }
        }
        let Some((ts, value)) = self.page.pop_front() else {
            return Some(Ok(None));
        };
        let rest = self.page.iter().map(|(_, v)| v);
        let span = self.spans.next(&value, rest, self.descending);
        Some(Ok(Some(QueryItem {
            meta: meta_of(ts, &value),
            store: self.store.clone(),
            entry: self.entry.clone(),
            value,
            span,
            bucket: self.bucket.clone(),
        })))
    }

    /// Like `next`, but reads each payload, skipping records removed since they were
    /// listed: what a reader of a bucket under FIFO eviction wants.
    pub fn next_record(&mut self) -> Option<Result<Record>> {
        loop {
            let item = match self.next()? {
                Ok(i) => i,
                Err(e) => return Some(Err(e)),
            };
            match item.data() {
                Ok(data) => {
                    return Some(Ok(Record {
                        meta: item.meta,
                        data,
                    }))
                }
                Err(Error::NotFound(_)) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The next item of a walk that hands back between pages (`Ok(None)`): walks on until an
/// item, an error or the end. The `Iterator` of `QueryIter` and `MultiIter`.
pub(crate) fn walk_to_item(
    mut step: impl FnMut() -> Option<Result<Option<QueryItem>>>,
) -> Option<Result<QueryItem>> {
    loop {
        match step()? {
            Ok(Some(item)) => return Some(Ok(item)),
            Ok(None) => continue,
            Err(e) => return Some(Err(e)),
        }
    }
}

impl Iterator for QueryIter {
    type Item = Result<QueryItem>;

    fn next(&mut self) -> Option<Self::Item> {
        walk_to_item(|| self.next_bounded())
    }
}

#[cfg(test)]
mod follow_tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use crate::*;

    fn drain(it: &mut QueryIter) -> Vec<u64> {
        it.by_ref().map(|i| i.unwrap().meta.ts).collect()
    }

    #[test]
    fn a_resumed_query_sees_new_records_once_and_keeps_its_condition_state() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let commits = Arc::new(AtomicU64::new(0));
        let c = commits.clone();
        s.on_commit(Box::new(move |_: &[u32]| {
            c.fetch_add(1, Ordering::SeqCst);
        }));
        for ts in 0..10 {
            s.write("b", "e", &WriteMeta::at(ts), b"x").unwrap();
        }
        // one commit per write, and one that created the entry
        assert_eq!(commits.load(Ordering::SeqCst), 11);
        let q = Query {
            when: Some(Condition::And(vec![
                Condition::EachN(3),
                Condition::Limit(5),
            ])),
            ..Query::default()
        };
        let mut it = s.query("b", "e", &q).unwrap();
        assert!(it.resume(u64::MAX));
        assert_eq!(drain(&mut it), [2, 5, 8]);
        // nothing new: the next walk is empty and the query goes on
        assert!(it.resume(u64::MAX));
        assert_eq!(drain(&mut it), Vec::<u64>::new());
        for ts in 10..30 {
            s.write("b", "e", &WriteMeta::at(ts), b"x").unwrap();
        }
        // a horizon bounds a walk; the rest comes with the next one
        assert!(it.resume(12));
        assert_eq!(drain(&mut it), [11]);
        assert_eq!(it.cursor(), 12);
        assert!(it.resume(u64::MAX));
        // $each_n counted on from 11; $limit(5) ends the stream after 14
        assert_eq!(drain(&mut it), [14]);
        assert!(!it.resume(u64::MAX));
        // a query's stop ends following once the cursor reaches it
        let mut it = s
            .query(
                "b",
                "e",
                &Query {
                    stop: Some(30),
                    ..Query::default()
                },
            )
            .unwrap();
        assert_eq!(drain(&mut it).len(), 30);
        assert!(!it.resume(u64::MAX));
        // descending queries cannot follow
        let mut it = s
            .query(
                "b",
                "e",
                &Query {
                    descending: true,
                    ..Query::default()
                },
            )
            .unwrap();
        assert!(!it.resume(u64::MAX));
    }
}
