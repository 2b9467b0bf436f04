//! The change feed: a durable log of the records committed to *watched* buckets, for
//! replication (the server's `replication/` module reads it).
//!
//! A bucket is watched while at least one feed *reader* names it. Every group commit
//! (`commit.rs`) that puts a record of a watched bucket's entry appends
//! `seq → (commit time, ts, bucket, entry)` to the `feed` table **in the same LMDB
//! transaction** as the record's index change: a write that was acknowledged is in the feed,
//! whatever kill comes after. Each reader has a durable position (the last sequence number
//! it handled, [`Store::feed_ack`]); the feed is trimmed behind the slowest reader.
//!
//! Why a feed and not "the last timestamp replicated": timestamps are not write order (a
//! client may write an old timestamp at any time), so a timestamp position misses records.
//!
//! Tables (in the index's LMDB environment, not touched by an index rebuild):
//! - `feed`:       `seq u64 BE` → `written µs u64 LE ++ ts u64 LE ++ bucket \0 entry`
//! - `feed_state`: `\0next` → the next `seq u64 BE`; `r ++ name` → `position u64 BE ++ bucket`
//!
//! What the feed holds is only a pointer: the record is read when it is sent. A record the
//! FIFO quota evicted (or a user removed) before that reads as gone
//! ([`FeedPayload::Gone`]): the reader counts it, never silently skips it.
//! Label updates put a record again and so appear in the feed again (the destination finds
//! the same payload there and counts it delivered). Records re-indexed by recovery (written
//! but never acknowledged before a crash) are not in the feed.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use heed::types::Bytes;
use heed::{Database, Env, RoTxn, RwTxn, WithoutTls};

use crate::index::Index;
use crate::lock::{Rank, RwLock};
use crate::multi::entry_pattern_matches;
use crate::record::RecordMeta;
use crate::when::{Matcher, Stop};
use crate::*;

const NEXT_KEY: &[u8] = b"\0next";
/// Feed items one [`Store::feed_read`] call looks at, at most (so a reader whose bucket is
/// quiet while another is busy still returns, and moves its position past them).
const SCAN_LIMIT: usize = 65_536;
/// Items [`Store::feed_pending`] counts exactly; beyond, the figures are lower bounds.
const PENDING_SCAN_LIMIT: usize = 1_000_000;

/// The feed's tables and the set of watched entries (ids → `bucket \0 entry`).
pub(crate) struct Feed {
    items: Database<Bytes, Bytes>,
    state: Database<Bytes, Bytes>,
    watch: RwLock<Watch>,
    /// Some bucket is watched: commits only gather their puts then.
    any: AtomicBool,
}

#[derive(Default)]
struct Watch {
    /// Watched buckets, with how many readers name each.
    buckets: HashMap<String, usize>,
    /// Entries of watched buckets: id → `bucket \0 entry`.
    entries: HashMap<u32, Arc<[u8]>>,
}

/// Record puts of one group commit, gathered while the group's ops are applied
/// (`None`: no bucket is watched, nothing gathered).
pub(crate) struct FeedBatch(Option<Vec<(u32, u64)>>);

impl FeedBatch {
    pub(crate) fn put(&mut self, entry_id: u32, ts: u64) {
        if let Some(v) = self.0.as_mut() {
            v.push((entry_id, ts));
        }
    }
}

fn entry_key(bucket: &str, entry: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(bucket.len() + 1 + entry.len());
    k.extend_from_slice(bucket.as_bytes());
    k.push(0);
    k.extend_from_slice(entry.as_bytes());
    k
}

fn reader_key(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + name.len());
    k.push(b'r');
    k.extend_from_slice(name.as_bytes());
    k
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn bad_feed(what: &str) -> Error {
    Error::Index(format!(
        "undecodable change-feed {what}: remove the replication tasks and create them again"
    ))
}

/// One decoded feed item.
struct Item<'a> {
    seq: u64,
    written_us: u64,
    ts: u64,
    bucket: &'a [u8],
    entry: &'a [u8],
}

fn decode_item<'a>(k: &[u8], v: &'a [u8]) -> Result<Item<'a>> {
    let seq = <[u8; 8]>::try_from(k)
        .map(u64::from_be_bytes)
        .map_err(|_| bad_feed("key"))?;
    let (Some(w), Some(t), Some(rest)) = (v.get(..8), v.get(8..16), v.get(16..)) else {
        return Err(bad_feed("item"));
    };
    let mut parts = rest.splitn(2, |b| *b == 0);
    let (Some(bucket), Some(entry)) = (parts.next(), parts.next()) else {
        return Err(bad_feed("item"));
    };
    Ok(Item {
        seq,
        written_us: u64::from_le_bytes(w.try_into().map_err(|_| bad_feed("item"))?),
        ts: u64::from_le_bytes(t.try_into().map_err(|_| bad_feed("item"))?),
        bucket,
        entry,
    })
}

impl Feed {
    pub(crate) fn open(env: &Env<WithoutTls>, txn: &mut RwTxn<'_>) -> Result<Feed> {
        Ok(Feed {
            items: env.create_database(txn, Some("feed"))?,
            state: env.create_database(txn, Some("feed_state"))?,
            watch: RwLock::new(Rank::FeedWatch, Watch::default()),
            any: AtomicBool::new(false),
        })
    }

    /// Called by a group commit's leader once its write transaction is open (so a reader
    /// registered before, under its own write transaction, is seen).
    pub(crate) fn batch(&self) -> FeedBatch {
        FeedBatch(self.any.load(Ordering::Acquire).then(Vec::new))
    }

    /// A new entry (committed in the same transaction): watched if its bucket is.
    pub(crate) fn learn_entry(&self, bucket: &str, entry: &str, id: u32) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut w = self.watch.write();
        if w.buckets.contains_key(bucket) {
            w.entries.insert(id, Arc::from(entry_key(bucket, entry)));
        }
    }

    /// Appends the gathered puts of watched entries, in the group's transaction.
    pub(crate) fn append(&self, txn: &mut RwTxn<'_>, batch: FeedBatch) -> Result<()> {
        let Some(puts) = batch.0 else { return Ok(()) };
        let keys: Vec<(Arc<[u8]>, u64)> = {
            let w = self.watch.read();
            puts.iter()
                .filter_map(|(id, ts)| w.entries.get(id).map(|k| (k.clone(), *ts)))
                .collect()
        };
        if keys.is_empty() {
            return Ok(());
        }
        let mut seq = self.next(txn)?;
        let written = now_us();
        let mut v = Vec::new();
        for (k, ts) in keys {
            v.clear();
            v.extend_from_slice(&written.to_le_bytes());
            v.extend_from_slice(&ts.to_le_bytes());
            v.extend_from_slice(&k);
            seq += 1;
            self.items.put(txn, &seq.to_be_bytes(), &v)?;
        }
        self.state.put(txn, NEXT_KEY, &seq.to_be_bytes())?;
        Ok(())
    }

    /// The last sequence number given out (0: none yet).
    fn next(&self, txn: &RoTxn<'_, WithoutTls>) -> Result<u64> {
        match self.state.get(txn, NEXT_KEY)? {
            Some(b) => <[u8; 8]>::try_from(b)
                .map(u64::from_be_bytes)
                .map_err(|_| bad_feed("counter")),
            None => Ok(0),
        }
    }

    fn readers(&self, txn: &RoTxn<'_, WithoutTls>) -> Result<Vec<(String, u64, String)>> {
        let mut out = Vec::new();
        for item in self.state.prefix_iter(txn, b"r")? {
            let (k, v) = item?;
            let name = String::from_utf8_lossy(&k[1..]).into_owned();
            let pos = v
                .get(..8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_be_bytes)
                .ok_or_else(|| bad_feed("reader"))?;
            let bucket = String::from_utf8_lossy(&v[8..]).into_owned();
            out.push((name, pos, bucket));
        }
        Ok(out)
    }

    fn reader(&self, txn: &RoTxn<'_, WithoutTls>, name: &str) -> Result<Option<(u64, String)>> {
        Ok(self
            .readers(txn)?
            .into_iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, p, b)| (p, b)))
    }

    fn put_reader(&self, txn: &mut RwTxn<'_>, name: &str, pos: u64, bucket: &str) -> Result<()> {
        let mut v = pos.to_be_bytes().to_vec();
        v.extend_from_slice(bucket.as_bytes());
        Ok(self.state.put(txn, &reader_key(name), &v)?)
    }

    /// Rebuilds the watched set from the readers and the index's entries (under a write
    /// transaction, or at open).
    fn rewatch(&self, index: &Index, txn: &RoTxn<'_, WithoutTls>) -> Result<()> {
        let mut w = Watch::default();
        for (_, _, bucket) in self.readers(txn)? {
            *w.buckets.entry(bucket).or_default() += 1;
        }
        for (bucket, entry, id) in index.entries(txn)? {
            if w.buckets.contains_key(&bucket) {
                w.entries.insert(id, Arc::from(entry_key(&bucket, &entry)));
            }
        }
        self.any.store(!w.buckets.is_empty(), Ordering::Release);
        *self.watch.write() = w;
        Ok(())
    }

    /// Drops the items every reader has handled (all of them when there is no reader).
    fn trim(&self, txn: &mut RwTxn<'_>) -> Result<()> {
        let upto = self
            .readers(txn)?
            .iter()
            .map(|(_, p, _)| *p)
            .min()
            .unwrap_or(u64::MAX);
        let hi = upto.to_be_bytes();
        self.items
            .delete_range(txn, &(Bound::Unbounded, Bound::Included(&hi[..])))?;
        Ok(())
    }
}

/// Which records of its bucket a feed reader wants: entry names or globs (none: all), and
/// a condition, with the state of its aggregation operators (kept across reads).
pub struct FeedFilter {
    patterns: Vec<String>,
    matcher: Option<Matcher>,
}

impl FeedFilter {
    pub fn new(patterns: Vec<String>, when: Option<&Condition>) -> FeedFilter {
        FeedFilter {
            patterns,
            matcher: when.map(|c| Matcher::new(c, false, false)),
        }
    }

    /// Whether the entry is one the filter names.
    pub fn wants_entry(&self, entry: &str) -> bool {
        self.patterns.is_empty()
            || self
                .patterns
                .iter()
                .any(|p| entry_pattern_matches(p, entry))
    }

    /// Whether a record of a wanted entry matches the condition.
    pub fn wants(&mut self, ts: u64, labels: &Labels) -> bool {
        match self.matcher.as_mut() {
            None => true,
            Some(m) => match m.matches(ts, labels) {
                Ok(b) => b,
                // A reached `$limit` keeps nothing more; a missing label is false here.
                Err(Stop::Limit | Stop::Missing(_) | Stop::Invalid(_)) => false,
            },
        }
    }
}

/// A feed item of a reader's bucket that its filter wants.
#[derive(Debug)]
pub struct FeedRecord {
    pub seq: u64,
    pub entry: String,
    pub ts: u64,
    /// When the record was committed (µs since the epoch).
    pub written_us: u64,
    pub payload: FeedPayload,
}

/// What a feed item's record holds when it is read.
#[derive(Debug)]
pub enum FeedPayload {
    /// The record is gone (evicted by the FIFO quota, or removed) before it was read.
    Gone,
    /// The record with its payload in memory.
    Whole(Record),
    /// A record larger than the read's `max_inline`: its metadata only (stream the payload
    /// with [`Store::open_record`]).
    Large(RecordMeta),
}

impl FeedRecord {
    /// The record, when its payload was read into memory.
    pub fn whole(&self) -> Option<&Record> {
        match &self.payload {
            FeedPayload::Whole(r) => Some(r),
            _ => None,
        }
    }

    /// The record's metadata, unless it is gone.
    pub fn meta(&self) -> Option<&RecordMeta> {
        match &self.payload {
            FeedPayload::Gone => None,
            FeedPayload::Whole(r) => Some(&r.meta),
            FeedPayload::Large(m) => Some(m),
        }
    }
}

/// How much one [`Store::feed_read`] returns.
#[derive(Debug, Clone, Copy)]
pub struct FeedLimits {
    /// Records at most.
    pub records: usize,
    /// The page ends after the record that brings its payloads to this many bytes.
    pub bytes: u64,
    /// Payloads up to this many bytes are read into memory; larger ones are not.
    pub inline: u64,
}

impl FeedLimits {
    /// Everything in memory (tests, small pages).
    pub fn new(records: usize, bytes: u64) -> FeedLimits {
        FeedLimits {
            records,
            bytes,
            inline: u64::MAX,
        }
    }
}

/// What [`Store::feed_read`] found.
#[derive(Debug, Default)]
pub struct FeedPage {
    pub records: Vec<FeedRecord>,
    /// The last sequence number looked at: once `records` are delivered, acknowledge it.
    pub end: u64,
    /// More items wait after `end`.
    pub more: bool,
}

/// A reader's backlog (items of its bucket and entries after its position).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FeedPending {
    pub records: u64,
    /// Payload bytes of the pending records that still exist.
    pub bytes: u64,
    /// Commit time (µs) of the oldest pending item.
    pub oldest_written_us: Option<u64>,
    /// More than the counting limit wait: the figures are lower bounds.
    pub truncated: bool,
}

impl Store {
    fn feed(&self) -> &Feed {
        self.inner.index.feed()
    }

    /// Loads the watched set at open.
    pub(crate) fn feed_load(&self) -> Result<()> {
        let txn = self.inner.index.read_txn()?;
        self.feed().rewatch(&self.inner.index, &txn)
    }

    /// Registers reader `name` on `bucket` (a replication task): from now on every record
    /// put into the bucket is in the feed for it. Returns its position and whether it was
    /// created now: a new reader starts at the current end of the feed, one that exists
    /// with the same bucket keeps its stored position (a reader moved to another bucket
    /// starts again at the end).
    pub fn feed_subscribe(&self, name: &str, bucket: &str) -> Result<(u64, bool)> {
        self.get_bucket(bucket)?;
        let index = &self.inner.index;
        let feed = self.feed();
        let mut txn = index.write_txn()?;
        let (pos, created) = match feed.reader(&txn, name)? {
            Some((pos, b)) if b == bucket => (pos, false),
            _ => {
                let pos = feed.next(&txn)?;
                feed.put_reader(&mut txn, name, pos, bucket)?;
                (pos, true)
            }
        };
        // The watched set changes under the write transaction: the next group commit sees it.
        feed.rewatch(index, &txn)?;
        feed.trim(&mut txn)?;
        txn.commit()?;
        Ok((pos, created))
    }

    /// Removes reader `name` (no error if there is none) and trims what only it needed.
    pub fn feed_unsubscribe(&self, name: &str) -> Result<()> {
        let index = &self.inner.index;
        let feed = self.feed();
        let mut txn = index.write_txn()?;
        feed.state.delete(&mut txn, &reader_key(name))?;
        feed.rewatch(index, &txn)?;
        feed.trim(&mut txn)?;
        txn.commit()?;
        Ok(())
    }

    /// Every reader: (name, bucket, position).
    pub fn feed_readers(&self) -> Result<Vec<(String, String, u64)>> {
        let txn = self.inner.index.read_txn()?;
        Ok(self
            .feed()
            .readers(&txn)?
            .into_iter()
            .map(|(n, p, b)| (n, b, p))
            .collect())
    }

    /// Moves reader `name`'s durable position to `seq` (never back) and trims the feed.
    /// Call it once everything up to `seq` is delivered.
    pub fn feed_ack(&self, name: &str, seq: u64) -> Result<()> {
        let index = &self.inner.index;
        let feed = self.feed();
        let mut txn = index.write_txn()?;
        let Some((pos, bucket)) = feed.reader(&txn, name)? else {
            return Ok(()); // removed meanwhile
        };
        if seq > pos {
            feed.put_reader(&mut txn, name, seq, &bucket)?;
            feed.trim(&mut txn)?;
            txn.commit()?;
            if self.inner.opts.sync == SyncPolicy::Always {
                index.force_sync()?;
            }
        }
        Ok(())
    }

    /// Items after `after` for reader `name`'s bucket that `filter` wants, with their
    /// records read (payloads of at most `max_inline` bytes in memory, larger ones as
    /// [`FeedPayload::Large`]): at most `max_records`, and stopping once the records
    /// reach `max_bytes` of payload.
    pub fn feed_read(
        &self,
        name: &str,
        after: u64,
        filter: &mut FeedFilter,
        limits: FeedLimits,
    ) -> Result<FeedPage> {
        let FeedLimits {
            records: max_records,
            bytes: max_bytes,
            inline: max_inline,
        } = limits;
        let feed = self.feed();
        let txn = self.inner.index.read_txn()?;
        let Some((_, bucket)) = feed.reader(&txn, name)? else {
            return Err(NotFound::FeedReader(name.to_string()).into());
        };
        let mut page = FeedPage {
            end: after,
            ..FeedPage::default()
        };
        let lo = after.saturating_add(1).to_be_bytes();
        let mut bytes = 0u64;
        let mut wanted: Vec<(u64, u64, String, u64)> = Vec::new();
        for (scanned, item) in feed
            .items
            .range(&txn, &(Bound::Included(&lo[..]), Bound::Unbounded))?
            .enumerate()
        {
            let (k, v) = item?;
            if scanned >= SCAN_LIMIT || wanted.len() >= max_records {
                page.more = true;
                break;
            }
            let it = decode_item(k, v)?;
            page.end = it.seq;
            if it.bucket != bucket.as_bytes() {
                continue;
            }
            let entry = String::from_utf8_lossy(it.entry).into_owned();
            if filter.wants_entry(&entry) {
                wanted.push((it.seq, it.ts, entry, it.written_us));
            }
        }
        drop(txn);
        for (seq, ts, entry, written_us) in wanted {
            let payload = match self.read_bounded(&bucket, &entry, ts, max_inline) {
                Ok((meta, data)) => {
                    if !filter.wants(ts, &meta.labels) {
                        continue;
                    }
                    bytes += meta.size;
                    match data {
                        Some(data) => FeedPayload::Whole(Record { meta, data }),
                        None => FeedPayload::Large(meta),
                    }
                }
                Err(Error::NotFound(_)) => FeedPayload::Gone,
                Err(e) => return Err(e),
            };
            page.records.push(FeedRecord {
                seq,
                entry,
                ts,
                written_us,
                payload,
            });
            if bytes >= max_bytes {
                // Stop after this one: the page ends at its sequence number.
                page.end = seq;
                page.more = true;
                break;
            }
        }
        Ok(page)
    }

    /// Reader `name`'s backlog: items after its position in its bucket and the entries
    /// `filter` names (the condition is not evaluated: an upper bound of what will be sent).
    pub fn feed_pending(&self, name: &str, filter: &FeedFilter) -> Result<FeedPending> {
        let feed = self.feed();
        let index = &self.inner.index;
        let txn = index.read_txn()?;
        let Some((pos, bucket)) = feed.reader(&txn, name)? else {
            return Ok(FeedPending::default());
        };
        let lo = pos.saturating_add(1).to_be_bytes();
        let mut out = FeedPending::default();
        let mut ids: HashMap<Vec<u8>, Option<u32>> = HashMap::new();
        let entries = index.entries(&txn)?;
        for (n, item) in feed
            .items
            .range(&txn, &(Bound::Included(&lo[..]), Bound::Unbounded))?
            .enumerate()
        {
            if n >= PENDING_SCAN_LIMIT {
                out.truncated = true;
                break;
            }
            let (k, v) = item?;
            let it = decode_item(k, v)?;
            if it.bucket != bucket.as_bytes() {
                continue;
            }
            let entry = String::from_utf8_lossy(it.entry);
            if !filter.wants_entry(&entry) {
                continue;
            }
            out.records += 1;
            out.oldest_written_us = Some(out.oldest_written_us.unwrap_or(it.written_us));
            let id = *ids.entry(it.entry.to_vec()).or_insert_with(|| {
                entries
                    .iter()
                    .find(|(b, e, _)| *b == bucket && *e == entry)
                    .map(|(_, _, id)| *id)
            });
            if let Some(id) = id {
                if let Some(v) = index.get_record(&txn, id, it.ts)? {
                    out.bytes += v.size;
                }
            }
        }
        Ok(out)
    }
}
