//! Queries: `Store::query` (one entry) and `Store::query_entries` (several) walk pages of
//! index records with a `Cursor` per entry, filtered by its `Selector` (`selector.rs`), and
//! `QueryIter` merges the cursors; `Store::histogram` counts per step.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::block::RecordReader;
use crate::codec::index::IndexValue;
use crate::entry::Entry;
use crate::error::{Error, QueryError, Result};
use crate::histogram::{Histogram, MAX_HISTOGRAM_RECORDS, MAX_HISTOGRAM_STEPS, PAGE_RECORDS};
use crate::index::{Index, Order};
use crate::pattern::{EntryPattern, EntrySelection};
use crate::payload::{Payload, Span, Spans, Windows};
use crate::read::{gone_is_not_found, meta_of, open_value, payload_of, read_payload, Sources};
use crate::record::{Query, Record, RecordMeta};
use crate::selector::{Selector, Verdict};
use crate::store::Store;
use crate::tier::Access;

/// How many index records a query fetches per LMDB read transaction (per entry, for a
/// merged query), and scans without a match before `next_bounded` hands back.
const PAGE: usize = 256;
/// How long `next_bounded` judges records without a match before it hands back, checked
/// every [`JUDGE_CHECK`] records: a costly condition (thousands of parts over large labels,
/// within their bounds) took ~15 ms a record, so a page of 256 ran ~4 s before its caller
/// could see that its client had gone (hostile probe of 2026-11-29: six abandoned queries
/// kept a CPU busy for 21 s). A clock read every 4 records cost the cheapest scan (a label
/// no record has) ~14 %, every 16 a few % (`filtered_scan` in `benches/benches/engine.rs`):
/// 16 it is, so a costly condition runs at most ~32 records past its client.
const JUDGE_TIME: std::time::Duration = std::time::Duration::from_millis(50);
const JUDGE_CHECK: usize = 16;
/// Index records the pages of a merge hold at most, over all its entries: a query of
/// many entries reads shorter pages (at least one record each), so that opening it holds
/// and decodes ~this many records, not 256 per entry (a ReductStore session over 2,000
/// entries held 512,000, ~350 MB, from its first read: hostile probe of 2026-11-28).
const MERGE_RECORDS: usize = 4096;
/// Bytes of label sets stored inline (over 4 KiB, each record's own) the pages of a query
/// hold at most, over all its entries (at least one record a page): 4,096 records with
/// 64 KiB label sets held 266 MB for one query of 16 entries, outside the memory budget,
/// 3.2 GB for 12 such queries a read-only token left unread (hostile probe of 2026-11-28).
/// They count in [`QueryIter::held_bytes`].
const PAGE_INLINE_BYTES: u64 = 4 << 20;

impl Store {
    /// Counts and payload bytes of an entry's records per `step` over `[start, stop)`.
    /// `start` defaults to the oldest record, `stop` to just after the latest, `step` to
    /// about [`DEFAULT_HISTOGRAM_STEPS`] steps; a `step` giving more than
    /// [`MAX_HISTOGRAM_STEPS`] steps is widened to fit. `start >= stop` gives no steps.
    pub fn histogram(
        &self,
        bucket: &str,
        entry: &str,
        start: Option<u64>,
        stop: Option<u64>,
        step: Option<u64>,
    ) -> Result<Histogram> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let index = &self.inner.index;
        let (start, stop) = {
            let txn = index.read_txn()?;
            let start = match start {
                Some(s) => s,
                None => index.first(&txn, e.id())?.map_or(0, |(ts, _)| ts),
            };
            let stop = match stop {
                Some(s) => s,
                None => index
                    .last(&txn, e.id())?
                    .map_or(start, |(ts, _)| ts.saturating_add(1)),
            };
            (start, stop.max(start))
        };
        let mut step = step
            .unwrap_or_else(|| Histogram::default_step(start, stop))
            .max(1);
        if Histogram::steps(start, stop, step) > MAX_HISTOGRAM_STEPS {
            step = stop.saturating_sub(start).div_ceil(MAX_HISTOGRAM_STEPS);
        }
        let n = Histogram::steps(start, stop, step) as usize;
        let mut bins = vec![(0u64, 0u64); n];
        let mut lo = start;
        let mut visited = 0u64;
        let mut truncated_at = None;
        while lo < stop {
            let budget = PAGE_RECORDS.min(MAX_HISTOGRAM_RECORDS - visited);
            let txn = index.read_txn()?;
            match index.histogram(&txn, e.id(), lo..stop, start, step, &mut bins, budget)? {
                None => break,
                Some(next) => {
                    visited += budget;
                    if visited >= MAX_HISTOGRAM_RECORDS {
                        truncated_at = Some(next);
                        break;
                    }
                    lo = next;
                }
            }
        }
        let (counts, bytes) = bins.into_iter().unzip();
        Ok(Histogram {
            start,
            stop,
            step,
            counts,
            bytes,
            truncated_at,
        })
    }
}

/// One record found by a query: its metadata now, its payload on demand.
pub struct QueryItem {
    /// Its metadata. From a query read with [`QueryIter::shared_attrs`], `content_type` and
    /// `labels` are left empty here: read them with [`QueryItem::content_type`] and
    /// [`QueryItem::labels`] (which are right for every item).
    pub meta: RecordMeta,
    /// Its query's store, bucket and entries, shared by the query's items: one count
    /// taken per item, on a count only this query touches (a clone of the store and of
    /// the entry per record were two more, on counts every query of the store shares).
    query: Arc<QueryShared>,
    /// Its entry: `query.entries[cursor]`.
    cursor: usize,
    value: IndexValue,
    /// The committed bytes of its block around it that a window may map.
    span: Span,
}

/// What the items of one query share ([`QueryItem::query`]).
struct QueryShared {
    store: Store,
    bucket: String,
    /// The query's entries, in the order of its cursors.
    entries: Vec<Arc<Entry>>,
}

impl QueryItem {
    /// The entry the record belongs to.
    pub fn entry(&self) -> &str {
        self.entry_ref().name()
    }

    fn entry_ref(&self) -> &Entry {
        &self.query.entries[self.cursor]
    }

    /// Its content type, from the attrs its index record shares with the records of the
    /// same content type and labels (no copy).
    pub fn content_type(&self) -> &str {
        &self.value.attrs.content_type
    }

    /// Its labels, likewise.
    pub fn labels(&self) -> &crate::record::Labels {
        &self.value.attrs.labels
    }

    /// Reads this record the way `read` does, as one of a query's records; a block removed
    /// since the query listed it is `NotFound`.
    fn scan<T>(
        &self,
        read: impl FnOnce(Sources<'_>, &Entry, u64, &IndexValue, Access) -> Result<T>,
    ) -> Result<T> {
        let entry = self.entry_ref();
        read(
            self.query.store.inner.sources(),
            entry,
            self.meta.ts,
            &self.value,
            Access::Scan,
        )
        .map_err(|e| gone_is_not_found(e, &self.query.bucket, entry.name(), self.meta.ts))
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
        self.scan(|from, e, ts, v, access| payload_of(from, e, ts, v, access, None))
    }

    /// [`QueryItem::payload`] for a reader of many of a query's records: a raw payload is
    /// sliced from a mapped window of its block shared with the records after it
    /// (`windows`, one per query), not read or mapped alone.
    pub fn payload_in(&self, windows: &mut Windows) -> Result<Option<Payload>> {
        self.scan(|from, e, ts, v, access| {
            payload_of(from, e, ts, v, access, Some((windows, self.span)))
        })
    }

    /// The payload as a stream (for large records); the CRC is checked at its end.
    pub fn reader(&self) -> Result<RecordReader> {
        self.scan(open_value)
    }
}

/// One entry's walk through the index: the window still to visit, a page of index records
/// read from it (not yet selected), and the entry's filters and condition with their state.
/// A query walks one cursor per entry it reads; [`QueryIter`] merges them.
struct Cursor {
    entry: Arc<Entry>,
    /// The window still to visit: `[lo, hi)` (`hi` may be a live tail's horizon, below the
    /// query's `stop`: see [`QueryIter::resume`]).
    lo: u64,
    hi: u64,
    page: VecDeque<(u64, IndexValue)>,
    /// The walk of `[lo, hi)` is over (a later `resume` may start another).
    done: bool,
    /// The first record at or past `hi` (below `stop`) when the last walk ended at a
    /// horizon below `stop`: when a live tail's settle time lets it through.
    ahead: Option<u64>,
    /// This entry's filters and condition, with its own aggregation state.
    sel: Selector,
    /// Its condition's `$limit` ended this entry's part: never walked again.
    finished: bool,
    /// Records a page holds at most ([`PAGE`], less in a merge of many entries:
    /// [`MERGE_RECORDS`]).
    page_len: usize,
    /// Bytes of label sets stored inline (each record's own) a page holds at most (past
    /// the first record): its share of [`PAGE_INLINE_BYTES`]; and those of the page now.
    inline_cap: u64,
    page_inline: u64,
    /// The span of the records returned last (see [`Span`]), when this is the only cursor
    /// of its query or the reader maps windows per entry ([`QueryIter::windowed`]): one
    /// entry's records share mapped windows of their block. Not otherwise in a merge of
    /// several entries, whose records alternate between blocks (each would unmap the
    /// window of the one before).
    spans: Spans,
}

impl Cursor {
    /// `sel`: the query's [`Selector::per_entry`], cloned (its texts shared by every cursor).
    fn new(
        entry: Arc<Entry>,
        query: &Query,
        sel: Selector,
        page_len: usize,
        inline_cap: u64,
    ) -> Cursor {
        Cursor {
            entry,
            lo: query.start.unwrap_or(0),
            hi: query.stop.unwrap_or(u64::MAX),
            page: VecDeque::new(),
            done: false,
            ahead: None,
            sel,
            finished: false,
            page_len,
            inline_cap,
            page_inline: 0,
            spans: Spans::default(),
        }
    }

    /// Gives the page back, its records left to the next walk: the window starts again at
    /// the first record not yet taken.
    fn rewind(&mut self, order: Order) {
        if let Some((ts, _)) = self.page.front() {
            if order == Order::Descending {
                self.hi = ts.saturating_add(1);
            } else {
                self.lo = *ts;
            }
            self.done = self.finished;
            self.ahead = None;
        }
        self.page = VecDeque::new();
        self.page_inline = 0;
        self.spans = Spans::default();
    }

    fn finish(&mut self) {
        self.finished = true;
        self.done = true;
        self.page.clear();
        self.ahead = None;
    }

    /// Fetches the next page; `stop` is the query's (`hi` may be a live tail's horizon).
    fn fill(&mut self, index: &Index, order: Order, stop: u64) -> Result<()> {
        if self.finished {
            self.done = true;
            return Ok(());
        }
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
        let mut out = Vec::with_capacity(self.page_len);
        self.page_inline = index.range_bounded(
            &txn,
            self.entry.id(),
            self.lo..self.hi,
            order,
            self.page_len,
            self.inline_cap,
            &mut out,
        )?;
        if out.len() < self.page_len && self.page_inline < self.inline_cap {
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
        // (Called with an empty page: the page takes the buffer over.)
        self.page = out.into();
        Ok(())
    }
}

/// Iterates the records of a query: one entry's ([`Store::query`]) or several merged in
/// timestamp order, ties by entry name ([`Store::query_entries`]), holding one page of index
/// records per entry. Items name their entry ([`QueryItem::entry`]). The condition is
/// evaluated per entry (each has its own `$limit`/`$each_n`/`$each_t`/`$gate` state, as in
/// ReductStore); the query's `limit` counts the merged stream.
pub struct QueryIter {
    store: Store,
    /// Shared by its items (one allocation per query, not per record).
    shared: Arc<QueryShared>,
    /// One per entry, sorted by entry name: the order of ties.
    cursors: Vec<Cursor>,
    /// Records still to deliver (`Query::limit`).
    left: u64,
    order: Order,
    /// The query's own `stop`.
    stop: u64,
    /// The last record merged (timestamp, cursor): a live tail's later walks drop what
    /// would come before it.
    last: Option<(u64, usize)>,
    /// An error to return once the records selected before it are out.
    failed: Option<Error>,
    /// The query is over for good: its limit or an error ended it.
    ended: bool,
    /// Items carry the span of their page's records in their block
    /// ([`QueryIter::windowed`]; always for a query of one entry).
    windowed: bool,
    /// Items leave their content type and labels in the shared attrs
    /// ([`QueryIter::shared_attrs`]).
    shared_attrs: bool,
}

impl Store {
    /// Records with `start <= ts < stop` matching every filter, oldest first (or newest
    /// first with `descending`). The iterator holds at most one page of index metadata.
    pub fn query(&self, bucket: &str, entry: &str, query: &Query) -> Result<QueryIter> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        self.walk(bucket, vec![e], query)
    }

    /// The names of the entries of `bucket` that `patterns` name, sorted: plain names (which
    /// must exist) and globs (`*` within a segment, `**` across segments; matching nothing is
    /// not an error).
    pub fn match_entries(&self, bucket: &str, patterns: &[String]) -> Result<Vec<String>> {
        crate::pattern::check_pattern_count(patterns.len()).map_err(Error::Pattern)?;
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
    /// records with one timestamp in the order of their entries' names. Label filters and the
    /// condition apply to each entry's records (a `$limit: 5` over three entries gives up to
    /// 15 records, as in ReductStore), the limit to the merged stream. Holds one page of
    /// index records per entry.
    pub fn query_entries(
        &self,
        bucket: &str,
        patterns: &[String],
        query: &Query,
    ) -> Result<QueryIter> {
        let b = self.get_bucket(bucket)?;
        let names = self.match_entries(bucket, patterns)?;
        // An entry removed since it was listed simply has nothing.
        let entries = names.iter().filter_map(|n| b.entry(n)).collect();
        self.walk(bucket, entries, query)
    }

    /// The names of the entries of `bucket` that `selection` picks, sorted (ReductStore's
    /// multi-entry queries: a plain name of a missing entry picks nothing).
    pub fn select_entries(&self, bucket: &str, selection: &EntrySelection) -> Result<Vec<String>> {
        let b = self.get_bucket(bucket)?;
        let mut names: Vec<String> = b
            .entries()
            .iter()
            .map(|e| e.name().to_string())
            .filter(|n| selection.selects(n))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Records of the entries `selection` picks, merged as [`Store::query_entries`] merges
    /// them.
    pub fn query_selected(
        &self,
        bucket: &str,
        selection: &EntrySelection,
        query: &Query,
    ) -> Result<QueryIter> {
        let b = self.get_bucket(bucket)?;
        let mut entries: Vec<Arc<Entry>> = b
            .entries()
            .into_iter()
            .filter(|e| selection.selects(e.name()))
            .collect();
        entries.sort_by(|x, y| x.name().cmp(y.name()));
        self.walk(bucket, entries, query)
    }

    /// A query over `entries` (sorted by name): a cursor each, merged. Each cursor holds a
    /// copy of the condition: their parts together are bounded
    /// ([`crate::when::MAX_QUERY_CONDITION_PARTS`]).
    fn walk(&self, bucket: &str, entries: Vec<Arc<Entry>>, query: &Query) -> Result<QueryIter> {
        if let Some(c) = &query.when {
            let parts = c.parts();
            let max = crate::when::MAX_QUERY_CONDITION_PARTS;
            if parts.saturating_mul(entries.len()) > max {
                return Err(QueryError::TooLarge {
                    parts,
                    entries: entries.len(),
                    max,
                }
                .into());
            }
        }
        // Compiled once: each cursor's clone shares the condition's texts and the filters.
        let sel = Selector::per_entry(query);
        let page_len = (MERGE_RECORDS / entries.len().max(1)).clamp(1, PAGE);
        let inline_cap = (PAGE_INLINE_BYTES / entries.len().max(1) as u64).max(1);
        Ok(QueryIter {
            store: self.clone(),
            shared: Arc::new(QueryShared {
                store: self.clone(),
                bucket: bucket.to_string(),
                entries: entries.clone(),
            }),
            cursors: entries
                .into_iter()
                .map(|e| Cursor::new(e, query, sel.clone(), page_len, inline_cap))
                .collect(),
            left: query.limit.unwrap_or(u64::MAX),
            order: Order::of(query.descending),
            stop: query.stop.unwrap_or(u64::MAX),
            last: None,
            failed: None,
            ended: query.limit == Some(0),
            windowed: false,
            shared_attrs: false,
        })
    }
}

impl QueryIter {
    /// Items carry the span of the records listed after them in their block (as those of
    /// a query of one entry always do), so [`QueryItem::payload_in`] slices their payloads
    /// from one mapped window instead of reading each alone. For a reader of several
    /// entries holding one [`Windows`] per entry: with one for all, records of entries
    /// taking turns would map a new window at every turn.
    pub fn windowed(mut self) -> Self {
        self.windowed = true;
        self
    }

    /// Items leave `meta.content_type` and `meta.labels` empty, for a reader that takes
    /// them from [`QueryItem::content_type`] and [`QueryItem::labels`]: no copy of the
    /// content type and labels into every item (and no freeing of them after it), which
    /// was ~8 % of the server's CPU in range reads of 1 KiB records
    /// (`docs/benchmarks/range-windows-2026-11-26.md`).
    pub fn shared_attrs(mut self) -> Self {
        self.shared_attrs = true;
        self
    }

    /// The entries read, in the order of ties.
    pub fn entries(&self) -> Vec<&str> {
        self.cursors.iter().map(|c| c.entry.name()).collect()
    }

    /// The name of an entry it reads that was removed (or renamed) since it began, found
    /// without waiting (an entry busy now is taken as live: asked again later). A live
    /// tail's records of an entry made again under that name are another entry's, which it
    /// would never see: the server ends such a tail (reads probe of 2026-11-28: 64 tails of
    /// a removed entry sent heartbeats for ever).
    pub fn removed_entry(&self) -> Option<&str> {
        self.cursors
            .iter()
            .find(|c| c.entry.removed_now() == Some(true))
            .map(|c| c.entry.name())
    }

    /// As [`QueryIter::removed_entry`], waiting for each entry's lock (off the async
    /// runtime: a live tail's step, before its walk).
    pub fn removed_entry_waiting(&self) -> Option<&str> {
        self.cursors
            .iter()
            .find(|c| c.entry.removed())
            .map(|c| c.entry.name())
    }

    /// The ids of the entries read (what a commit listener is given).
    pub fn entry_ids(&self) -> Vec<u32> {
        self.cursors.iter().map(|c| c.entry.id()).collect()
    }

    /// Following a stream of records as they are written: once this iterator has returned
    /// `None`, walks every entry again from just after the last index record it scanned
    /// (matching or not) up to `min(stop, horizon)`, keeping the condition's state
    /// (`$each_n`, `$each_t`, `$limit` and the query's limit count over the whole stream).
    /// Also sets the bound of the first walk when called before it. Returns false when the
    /// query cannot yield more: it is descending, a limit or an error ended it, or its range
    /// is used up. A record committed after the walk passed its timestamp is never returned,
    /// nor one whose (timestamp, entry) comes before the last one merged, so the stream
    /// stays in order.
    pub fn resume(&mut self, horizon: u64) -> bool {
        self.resume_where(horizon, |_| true)
    }

    /// [`QueryIter::resume`] for a live tail told which entries got records since its last
    /// walk (`changed`: entry ids, sorted, as a commit listener is given them): only those
    /// entries are walked again, and those whose last walk left a record past its horizon
    /// ([`QueryIter::ahead`]) that the new horizon lets through. Otherwise the next walk is
    /// empty and costs nothing: a tail of many entries woken by a commit to one of them
    /// reads one entry's index, not every entry's. Returns what `resume` returns.
    pub fn resume_changed(&mut self, horizon: u64, changed: &[u32]) -> bool {
        let hi = self.stop.min(horizon);
        self.resume_where(horizon, |c| {
            changed.binary_search(&c.entry.id()).is_ok() || c.ahead.is_some_and(|ts| ts < hi)
        })
    }

    fn resume_where(&mut self, horizon: u64, due: impl Fn(&Cursor) -> bool) -> bool {
        if self.ended || self.order == Order::Descending {
            return false;
        }
        if self.failed.is_some() {
            return true; // the error is still to be returned
        }
        let mut open = false;
        for c in &mut self.cursors {
            if c.lo >= self.stop || c.finished {
                continue;
            }
            open = true;
            if c.page.is_empty() && due(c) {
                c.hi = self.stop.min(horizon);
                c.done = false;
                c.ahead = None;
            }
        }
        open
    }

    /// The timestamp the next walk starts from (ascending): one past the last index record
    /// scanned, the lowest over the entries.
    pub fn cursor(&self) -> u64 {
        self.cursors.iter().map(|c| c.lo).min().unwrap_or(self.stop)
    }

    /// After a walk bounded by a horizon below the query's `stop` (a live tail with a
    /// settle time): the timestamp of the first record it left for a later walk, the
    /// earliest over the entries, if there is one. A tail waits until its horizon passes it
    /// (no commit needs to wake it).
    pub fn ahead(&self) -> Option<u64> {
        self.cursors.iter().filter_map(|c| c.ahead).min()
    }

    /// Gives back the pages of index records it holds (an idle ReductStore session keeps
    /// positions only, not a page per entry until its TTL); the next step reads them again
    /// from the first record not yet returned. Nothing is skipped or returned twice.
    pub fn rest(&mut self) {
        let order = self.order;
        for c in &mut self.cursors {
            c.rewind(order);
        }
    }

    /// Bytes its pages of index records hold (one page per entry, up to 256 records each),
    /// with the label sets stored inline that they decoded (the interned ones, shared, are
    /// not counted): what a server counts in its memory budget
    /// for a merge. A walk that ended gives its pages back (an idle live tail holds none).
    pub fn held_bytes(&self) -> u64 {
        let slots: usize = self.cursors.iter().map(|c| c.page.capacity()).sum();
        let inline: u64 = self.cursors.iter().map(|c| c.page_inline).sum();
        (slots * std::mem::size_of::<(u64, IndexValue)>()) as u64 + inline
    }

    /// The cursor whose next record comes first (ties: the first, by entry name); `None`
    /// when every page is empty.
    fn pick(&self) -> Option<usize> {
        let desc = self.order == Order::Descending;
        self.cursors
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.page.front().map(|(ts, _)| (*ts, i)))
            .min_by_key(|&(ts, i)| (if desc { u64::MAX - ts } else { ts }, i))
            .map(|(_, i)| i)
    }

    /// One bounded step: the next record (`Some(Ok(Some(item)))`), or `Some(Ok(None))` when
    /// a page's worth of index records was scanned, or a walk's last page was read, and none
    /// matched, so a caller walking a long range that matches little can look up (has its
    /// client gone?) between pages. `None` at the end.
    pub fn next_bounded(&mut self) -> Option<Result<Option<QueryItem>>> {
        let mut scanned = 0;
        let mut filled = false;
        // Taken at the first check only: a record that matches at once costs no clock read.
        let mut judging_since: Option<std::time::Instant> = None;
        loop {
            if let Some(e) = self.failed.take() {
                self.ended = true;
                return Some(Err(e));
            }
            if self.ended {
                return None;
            }
            let index = &self.store.inner.index;
            for c in &mut self.cursors {
                if c.page.is_empty() && !c.done {
                    filled = true;
                    if let Err(e) = c.fill(index, self.order, self.stop) {
                        self.ended = true;
                        return Some(Err(e));
                    }
                }
            }
            let Some(i) = self.pick() else {
                if filled {
                    return Some(Ok(None)); // the end comes with the next step
                }
                // The walk is over: its pages are empty, give their memory back.
                for c in &mut self.cursors {
                    c.page = VecDeque::new();
                }
                return None;
            };
            let desc = self.order == Order::Descending;
            let windowed = self.windowed || self.cursors.len() == 1;
            let c = &mut self.cursors[i];
            let Some((ts, value)) = c.page.pop_front() else {
                continue;
            };
            // A later walk of a live tail may find a record that belongs before one
            // already merged (committed late): it is not delivered.
            if !desc && self.last.is_some_and(|l| (ts, i) <= l) {
                continue;
            }
            self.last = Some((ts, i));
            match c.sel.judge(ts, &value) {
                Ok(Verdict::Keep) => {
                    self.left -= 1;
                    if self.left == 0 {
                        self.ended = true;
                    }
                    let span = if windowed {
                        let rest = c.page.iter().map(|(_, v)| v);
                        c.spans.next(&value, rest, desc)
                    } else {
                        Span::of(&value)
                    };
                    let meta = if self.shared_attrs {
                        RecordMeta {
                            ts,
                            size: value.size,
                            content_type: String::new(),
                            labels: Default::default(),
                        }
                    } else {
                        meta_of(ts, &value)
                    };
                    return Some(Ok(Some(QueryItem {
                        meta,
                        query: self.shared.clone(),
                        cursor: i,
                        value,
                        span,
                    })));
                }
                Ok(Verdict::Skip) => {}
                // this entry's `$limit` was reached: the others go on
                Ok(Verdict::End) => c.finish(),
                Err(e) => self.failed = Some(e),
            }
            scanned += 1;
            if scanned >= PAGE {
                return Some(Ok(None));
            }
            if scanned % JUDGE_CHECK == 0 {
                let now = std::time::Instant::now();
                if now.duration_since(*judging_since.get_or_insert(now)) >= JUDGE_TIME {
                    return Some(Ok(None));
                }
            }
        }
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

/// How far one caller's step may walk index pages that match nothing: at most `pages`
/// pages, and (if given) until `deadline` passes. The one bound of the bounded walks
/// ([`QueryIter::next_within`]): a query step, an MCAP export step, a ReductStore read.
#[derive(Debug)]
pub struct ScanBound {
    pages: u32,
    deadline: Option<std::time::Instant>,
    idle: u32,
    out: bool,
}

impl ScanBound {
    /// At most `pages` pages without a match.
    pub fn pages(pages: u32) -> Self {
        ScanBound {
            pages,
            deadline: None,
            idle: 0,
            out: false,
        }
    }

    /// At most `pages` pages without a match, and no longer than `time` from now.
    pub fn pages_or_time(pages: u32, time: std::time::Duration) -> Self {
        ScanBound {
            deadline: std::time::Instant::now().checked_add(time),
            ..Self::pages(pages)
        }
    }

    /// Whether the walk reached its bound (and walks no further).
    pub fn out(&self) -> bool {
        self.out
    }

    /// Counts a page without a match; `false` once the bound is reached.
    fn idle_page(&mut self) -> bool {
        self.idle += 1;
        if self.idle >= self.pages
            || self
                .deadline
                .is_some_and(|d| std::time::Instant::now() >= d)
        {
            self.out = true;
        }
        !self.out
    }
}

impl QueryIter {
    /// The next record, walking on through pages without a match within `bound`:
    /// `Some(Ok(None))` once the bound is reached (then at once, without walking, on every
    /// later call with the same bound), `None` at the end.
    pub fn next_within(&mut self, bound: &mut ScanBound) -> Option<Result<Option<QueryItem>>> {
        if bound.out {
            return Some(Ok(None));
        }
        loop {
            match self.next_bounded()? {
                Ok(None) if bound.idle_page() => continue,
                step => return Some(step),
            }
        }
    }
}

impl Iterator for QueryIter {
    type Item = Result<QueryItem>;

    /// The next item of a walk that hands back between pages (`Ok(None)`): walks on until
    /// an item, an error or the end.
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_bounded()? {
                Ok(Some(item)) => return Some(Ok(item)),
                Ok(None) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The timestamp of an entry's first record in `span` (oldest first): what a live tail's
/// walk, bounded by its horizon, left for later ([`QueryIter::ahead`]).
fn first_in(
    index: &Index,
    txn: &heed::RoTxn<'_, heed::WithoutTls>,
    entry_id: u32,
    span: std::ops::Range<u64>,
) -> Result<Option<u64>> {
    let mut out = Vec::with_capacity(1);
    index.range(txn, entry_id, span, Order::Ascending, 1, &mut out)?;
    Ok(out.first().map(|(ts, _)| *ts))
}

#[cfg(test)]
mod histogram_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::record::{BatchRecord, WriteMeta};

    use crate::store::test_store as store;

    /// Each entry's cursor holds its own copy of the condition: a query's copies are
    /// bounded in all (`MAX_QUERY_CONDITION_PARTS`), a typed error past them.
    #[test]
    fn a_condition_copied_into_every_entry_is_bounded_in_all() {
        use crate::when::{Condition, Operand, Value, MAX_QUERY_CONDITION_PARTS};
        let (_d, s) = store();
        for i in 0..300 {
            s.write("b", &format!("e{i}"), &WriteMeta::at(1), b"x")
                .unwrap();
        }
        let values = (0..3998).map(|v| Operand::Const(Value::Int(v))).collect();
        let when = Condition::In(Operand::Label("x".into()), values);
        assert_eq!(when.parts(), 4000);
        let q = Query {
            when: Some(when),
            ..Query::default()
        };
        let all = ["**".to_string()];
        match s.query_entries("b", &all, &q) {
            Err(Error::Query(QueryError::TooLarge {
                parts,
                entries,
                max,
            })) => {
                assert_eq!(
                    (parts, entries, max),
                    (4000, 300, MAX_QUERY_CONDITION_PARTS)
                );
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("4,000 parts over 300 entries were accepted"),
        }
        let few = ["e1*".to_string()]; // e1, e10–e19, e100–e199: 111 entries
        assert!(s.query_entries("b", &few, &q).is_ok());
    }

    /// Hostile probe of 2026-11-28: a ReductStore session over many entries held a page of
    /// 256 decoded index records per entry from its first read until its TTL. A merge of
    /// many entries reads shorter pages ([`MERGE_RECORDS`] in all), and `rest` gives the
    /// pages back between reads; the records come out the same, each once, in order.
    #[test]
    fn a_merge_of_many_entries_holds_short_pages_and_rests_without_losing_its_place() {
        let (_d, s) = store();
        let entries = 40u64;
        for e in 0..entries {
            for i in 0..300u64 {
                // interleaved: entry e's records at e, e + 40, e + 80, ...
                let ts = 1 + i * entries + e;
                s.write("b", &format!("e{e:02}"), &WriteMeta::at(ts), b"x")
                    .unwrap();
            }
        }
        let all = ["**".to_string()];
        for descending in [false, true] {
            let q = Query {
                descending,
                ..Query::default()
            };
            let whole: Vec<(String, u64)> = s
                .query_entries("b", &all, &q)
                .unwrap()
                .map(|i| {
                    let i = i.unwrap();
                    (i.entry().to_string(), i.meta.ts)
                })
                .collect();
            assert_eq!(whole.len(), 12_000);
            let mut it = s.query_entries("b", &all, &q).unwrap();
            let mut rested = Vec::new();
            let mut n = 0u64;
            while let Some(item) = it.next() {
                let item = item.unwrap();
                rested.push((item.entry().to_string(), item.meta.ts));
                n += 1;
                // 40 entries: pages of 4096 / 40 = 102 records, not 256.
                let held = it.held_bytes();
                let page = std::mem::size_of::<(u64, IndexValue)>() as u64;
                assert!(held <= 40 * 102 * page, "{held} bytes held");
                if n.is_multiple_of(7) || n % 1000 == 999 {
                    it.rest();
                    assert_eq!(it.held_bytes(), 0);
                }
            }
            assert_eq!(rested, whole, "descending {descending}");
        }
    }

    #[test]
    fn steps_count_records_and_bytes() {
        let (_d, s) = store();
        // 1,000 records 10 µs apart from 1,000, payload size ts % 7.
        let batch: Vec<_> = (0..1000u64)
            .map(|i| {
                let ts = 1000 + i * 10;
                (WriteMeta::at(ts), vec![0u8; (ts % 7) as usize])
            })
            .collect();
        for (m, d) in &batch {
            s.write("b", "e", m, d).unwrap();
        }
        let h = s
            .histogram("b", "e", Some(1000), Some(11_000), Some(1000))
            .unwrap();
        assert_eq!((h.start, h.stop, h.step), (1000, 11_000, 1000));
        assert_eq!(h.counts, vec![100; 10]);
        let expect: Vec<u64> = (0..10u64)
            .map(|b| {
                (0..100u64)
                    .map(|i| (1000 + b * 1000 + i * 10) % 7)
                    .sum::<u64>()
            })
            .collect();
        assert_eq!(h.bytes, expect);
        assert_eq!(h.truncated_at, None);

        // Defaults: the whole entry in about 200 steps; every record counted once.
        let h = s.histogram("b", "e", None, None, None).unwrap();
        assert_eq!((h.start, h.stop), (1000, 10_991));
        assert_eq!(h.step, 50);
        assert_eq!(h.counts.len(), 200);
        assert_eq!(h.counts.iter().sum::<u64>(), 1000);

        // A window starting inside a chunk, cut at a stop inside another.
        let h = s
            .histogram("b", "e", Some(1005), Some(2005), Some(100))
            .unwrap();
        assert_eq!(h.counts.iter().sum::<u64>(), 100);
        assert_eq!(h.counts[0], 10);

        // Too fine a step is widened to MAX_HISTOGRAM_STEPS steps.
        let h = s
            .histogram("b", "e", Some(0), Some(1 << 40), Some(1))
            .unwrap();
        assert_eq!(h.counts.len() as u64, MAX_HISTOGRAM_STEPS);
        assert_eq!(h.counts.iter().sum::<u64>(), 1000);

        // An empty window, and an empty entry.
        let h = s.histogram("b", "e", Some(5), Some(5), None).unwrap();
        assert!(h.counts.is_empty());
        s.write("b", "empty", &WriteMeta::at(1), b"x").unwrap();
        s.remove_record("b", "empty", 1).unwrap();
        let h = s.histogram("b", "empty", None, None, None).unwrap();
        assert!(h.counts.is_empty());
        assert!(s.histogram("b", "nope", None, None, None).is_err());
    }

    #[test]
    fn pages_of_many_records_add_up() {
        let (_d, s) = store();
        let n = PAGE_RECORDS * 2 + 17;
        let recs: Vec<BatchRecord> = (0..n)
            .map(|i| BatchRecord {
                meta: WriteMeta::at(i + 1),
                data: vec![1, 2],
            })
            .collect();
        for r in s.write_batch("b", "e", recs).unwrap() {
            r.unwrap();
        }
        let h = s.histogram("b", "e", None, None, Some(n)).unwrap();
        assert_eq!(h.counts, vec![n]);
        assert_eq!(h.bytes, vec![2 * n]);
    }
}

#[cfg(test)]
mod multi_tests {
    use super::*;
    use crate::record::WriteMeta;
    use crate::when::Condition;

    use crate::store::test_store as store;

    fn merged(it: QueryIter) -> Vec<(u64, String)> {
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
        // a condition counts per entry (see the test below), the limit the merged stream
        let q = Query {
            when: Some(Condition::EachN(2)),
            start: Some(10),
            limit: Some(3),
            ..Query::default()
        };
        let got = merged(s.query_entries("b", &pats(&["cams/*", "imu"]), &q).unwrap());
        assert_eq!(
            got,
            [
                (13, "cams/rear".to_string()),
                (14, "imu".to_string()),
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

    /// Issue 28: ReductStore applies `$limit`, `$each_n` and `$each_t` to each entry of a
    /// multi-entry query (`$limit: 5` over 3 entries gives 15 records); tsblob applied them
    /// to the merged stream (5 records).
    #[test]
    fn aggregates_of_a_multi_entry_query_counted_the_merged_stream_not_each_entry() {
        let (_d, s) = store();
        for ts in 0..600u64 {
            let e = ["cams/front", "cams/rear", "imu"][(ts % 3) as usize];
            s.write("b", e, &WriteMeta::at(ts), b"x").unwrap();
        }
        let all = pats(&["cams/*", "imu"]);
        let run = |when: Condition, limit: Option<u64>, descending: bool| {
            let q = Query {
                when: Some(when),
                start: Some(10),
                limit,
                descending,
                ..Query::default()
            };
            merged(s.query_entries("b", &all, &q).unwrap())
        };
        let of = |v: &[(u64, &str)]| -> Vec<(u64, String)> {
            v.iter().map(|(t, e)| (*t, e.to_string())).collect()
        };
        // $limit: 5 over 3 entries: 15 records, each entry's first 5
        let got = run(Condition::Limit(5), None, false);
        assert_eq!(got.len(), 15);
        for e in ["cams/front", "cams/rear", "imu"] {
            assert_eq!(got.iter().filter(|(_, n)| n == e).count(), 5, "{e}");
        }
        assert_eq!(got.last(), Some(&(24, "cams/front".to_string())));
        // ... but the query's limit still counts the merged stream
        assert_eq!(run(Condition::Limit(5), Some(4), false).len(), 4);
        // $each_n then $limit, per entry
        let got = run(
            Condition::And(vec![Condition::EachN(2), Condition::Limit(3)]),
            None,
            false,
        );
        assert_eq!(
            got,
            of(&[
                (13, "cams/rear"),
                (14, "imu"),
                (15, "cams/front"),
                (19, "cams/rear"),
                (20, "imu"),
                (21, "cams/front"),
                (25, "cams/rear"),
                (26, "imu"),
                (27, "cams/front"),
            ])
        );
        // $each_t: one record per 9 µs of each entry (each entry's clock starts at its first)
        let got = run(
            Condition::And(vec![Condition::EachT(9), Condition::Limit(2)]),
            None,
            false,
        );
        assert_eq!(
            got,
            of(&[
                (19, "cams/rear"),
                (20, "imu"),
                (21, "cams/front"),
                (28, "cams/rear"),
                (29, "imu"),
                (30, "cams/front"),
            ])
        );
        // descending: each entry's newest
        let got = run(Condition::Limit(1), None, true);
        assert_eq!(
            got,
            of(&[(599, "imu"), (598, "cams/rear"), (597, "cams/front")])
        );
    }

    /// Range reads of 1 KiB records spent ~8 % of the server's CPU copying each record's
    /// content type and labels out of the index's shared attrs into its item, and freeing
    /// them again. A query read with `shared_attrs` copies neither, and its items still
    /// give each record's own content type and labels.
    #[test]
    fn items_of_a_query_with_shared_attrs_keep_their_own_content_type_and_labels() {
        let (_d, s) = store();
        for ts in 0..600u64 {
            let meta = WriteMeta {
                content_type: Some(format!("type/{}", ts % 3)),
                labels: [("n".to_string(), (ts % 5).to_string())].into(),
                ..WriteMeta::at(ts)
            };
            let e = ["a", "b"][(ts % 2) as usize];
            s.write("b", e, &meta, b"x").unwrap();
        }
        let copied: Vec<QueryItem> = s
            .query_entries("b", &pats(&["a", "b"]), &Query::default())
            .unwrap()
            .map(|i| i.unwrap())
            .collect();
        let shared: Vec<QueryItem> = s
            .query_entries("b", &pats(&["a", "b"]), &Query::default())
            .unwrap()
            .shared_attrs()
            .map(|i| i.unwrap())
            .collect();
        assert_eq!(copied.len(), 600);
        assert_eq!(shared.len(), 600);
        for (c, i) in copied.iter().zip(&shared) {
            let ts = i.meta.ts;
            assert_eq!((c.meta.ts, c.meta.size), (ts, i.meta.size));
            assert_eq!(i.content_type(), format!("type/{}", ts % 3));
            assert_eq!(i.labels().get("n"), Some(&(ts % 5).to_string()));
            // the same as a copied item's metadata ...
            assert_eq!(i.content_type(), c.meta.content_type);
            assert_eq!(i.labels(), &c.meta.labels);
            assert_eq!(c.content_type(), c.meta.content_type);
            // ... which a shared item does not carry
            assert!(i.meta.content_type.is_empty() && i.meta.labels.is_empty());
        }
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
                crate::record::BatchRecord {
                    meta: WriteMeta::at(7),
                    data: b"x".to_vec(),
                },
                crate::record::BatchRecord {
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

#[cfg(test)]
mod follow_tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use crate::record::{Query, WriteMeta};
    use crate::store::query::QueryIter;
    use crate::when::Condition;

    fn drain(it: &mut QueryIter) -> Vec<u64> {
        it.by_ref().map(|i| i.unwrap().meta.ts).collect()
    }

    #[test]
    fn a_resumed_query_sees_new_records_once_and_keeps_its_condition_state() {
        let (_dir, s) = crate::store::test_store();
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
