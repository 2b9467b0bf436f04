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

use heed::{RoTxn, RwTxn, WithoutTls};

pub(crate) use crate::codec::feed::reader_key;
use crate::codec::feed::{
    decode_reader, decode_seq, encode_item, encode_reader, entry_key, seq_key, Item, NEXT_KEY,
    READER_PREFIX,
};
use crate::codec::{self, DecodeError};
use crate::db::{Db, Table};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::lock::{Rank, RwLock};
use crate::pattern::EntrySelection;
use crate::record::Labels;
use crate::record::Record;
use crate::record::RecordMeta;
use crate::when::Condition;
use crate::when::Matcher;

/// Feed items one [`Store::feed_read`] call looks at, at most (so a reader whose bucket is
/// quiet while another is busy still returns, and moves its position past them).
pub(crate) const SCAN_LIMIT: usize = 65_536;
/// Items [`Store::feed_pending`] counts exactly; beyond, the figures are lower bounds.
pub(crate) const PENDING_SCAN_LIMIT: usize = 1_000_000;

/// The feed's tables and the set of watched entries (ids → `bucket \0 entry`).
pub(crate) struct Feed {
    pub(crate) items: Table,
    pub(crate) state: Table,
    pub(crate) watch: RwLock<Watch>,
    /// Some bucket is watched: commits only gather their puts then.
    pub(crate) any: AtomicBool,
}

#[derive(Default)]
pub(crate) struct Watch {
    /// Watched buckets, with how many readers name each.
    pub(crate) buckets: HashMap<String, usize>,
    /// Entries of watched buckets: id → `bucket \0 entry`.
    pub(crate) entries: HashMap<u32, Arc<[u8]>>,
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

pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

pub(crate) fn bad_feed(what: &str) -> Error {
    Error::Index(format!(
        "undecodable change-feed {what}: remove the replication tasks and create them again"
    ))
}

/// A feed item from its key and value, or the error that says which part is damaged.
pub(crate) fn decode_item<'a>(k: &[u8], v: &'a [u8]) -> Result<Item<'a>> {
    codec::feed::decode_item(k, v).map_err(damaged)
}

/// The error of a damaged feed key or value.
fn damaged(e: DecodeError) -> Error {
    bad_feed(match e {
        DecodeError::Garbage(what) => what,
        _ => "item",
    })
}

impl Feed {
    /// The feed's tables of the index environment (watching nothing until
    /// [`Feed::rewatch`]).
    pub(crate) fn new(db: &Db) -> Feed {
        Feed {
            items: db.feed_items,
            state: db.feed_state,
            watch: RwLock::new(Rank::FeedWatch, Watch::default()),
            any: AtomicBool::new(false),
        }
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
            encode_item(&mut v, written, ts, &k);
            seq += 1;
            self.items.put(txn, &seq_key(seq), &v)?;
        }
        self.state.put(txn, NEXT_KEY, &seq_key(seq))?;
        Ok(())
    }

    /// The last sequence number given out (0: none yet).
    pub(crate) fn next(&self, txn: &RoTxn<'_, WithoutTls>) -> Result<u64> {
        match self.state.get(txn, NEXT_KEY)? {
            Some(b) => decode_seq(b).map_err(damaged),
            None => Ok(0),
        }
    }

    pub(crate) fn readers(
        &self,
        txn: &RoTxn<'_, WithoutTls>,
    ) -> Result<Vec<(String, u64, String)>> {
        let mut out = Vec::new();
        for item in self.state.prefix_iter(txn, READER_PREFIX)? {
            let (k, v) = item?;
            out.push(decode_reader(k, v).map_err(damaged)?);
        }
        Ok(out)
    }

    pub(crate) fn reader(
        &self,
        txn: &RoTxn<'_, WithoutTls>,
        name: &str,
    ) -> Result<Option<(u64, String)>> {
        Ok(self
            .readers(txn)?
            .into_iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, p, b)| (p, b)))
    }

    pub(crate) fn put_reader(
        &self,
        txn: &mut RwTxn<'_>,
        name: &str,
        pos: u64,
        bucket: &str,
    ) -> Result<()> {
        Ok(self
            .state
            .put(txn, &reader_key(name), &encode_reader(pos, bucket))?)
    }

    /// Rebuilds the watched set from the readers and the index's entries (under a write
    /// transaction, or at open).
    pub(crate) fn rewatch(&self, index: &Index, txn: &RoTxn<'_, WithoutTls>) -> Result<()> {
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

    /// A bucket renamed from `old` to `new` (in the rename's own transaction, after its
    /// entries moved): readers naming `old` name `new` at the same position, and the items
    /// of `old` not yet handled by every reader are rewritten under `new`, so what was
    /// pending is sent from the renamed bucket and the next writes are watched under the
    /// new name. (Bug: readers kept the old name, so after a rename the task's records
    /// were read from a bucket that no longer existed and counted as evicted.)
    pub(crate) fn rename_bucket(
        &self,
        index: &Index,
        txn: &mut RwTxn<'_>,
        old: &str,
        new: &str,
    ) -> Result<()> {
        let readers = self.readers(txn)?;
        let mut from = u64::MAX;
        for (name, pos, bucket) in &readers {
            if bucket == old {
                self.put_reader(txn, name, *pos, new)?;
                from = from.min(*pos);
            }
        }
        if from == u64::MAX {
            return Ok(());
        }
        let lo = seq_key(from.saturating_add(1));
        let mut moved: Vec<([u8; 8], Vec<u8>)> = Vec::new();
        for item in self
            .items
            .range(txn, &(Bound::Included(&lo[..]), Bound::Unbounded))?
        {
            let (k, v) = item?;
            let it = decode_item(k, v)?;
            if it.bucket != old.as_bytes() {
                continue;
            }
            let entry = String::from_utf8_lossy(it.entry).into_owned();
            let mut out = Vec::new();
            encode_item(&mut out, it.written_us, it.ts, &entry_key(new, &entry));
            moved.push((seq_key(it.seq), out));
        }
        for (k, v) in moved {
            self.items.put(txn, &k, &v)?;
        }
        self.rewatch(index, txn)
    }

    /// Drops the items every reader has handled (all of them when there is no reader).
    pub(crate) fn trim(&self, txn: &mut RwTxn<'_>) -> Result<()> {
        let upto = self
            .readers(txn)?
            .iter()
            .map(|(_, p, _)| *p)
            .min()
            .unwrap_or(u64::MAX);
        let hi = seq_key(upto);
        self.items
            .delete_range(txn, &(Bound::Unbounded, Bound::Included(&hi[..])))?;
        Ok(())
    }
}

/// Which records of its bucket a feed reader wants: entry names or globs (none: all) less
/// the excluded ones (`!pattern`, as ReductStore's replication entries), and a condition,
/// with the state of its aggregation operators (kept across reads). `$limit`, `$each_n` and
/// `$each_t` count **per entry** for a reader ([`FeedFilter::wants_in`]), as ReductStore
/// applies them in a replication task (`$limit: 5` over three entries sends 15 records).
pub struct FeedFilter {
    pub(crate) entries: EntrySelection,
    /// The condition compiled, never evaluated: each entry's matcher is a clone of it
    /// (sharing its texts).
    pub(crate) compiled: Option<Matcher>,
    /// The matcher of [`FeedFilter::wants`] (one stream).
    pub(crate) matcher: Option<Matcher>,
    /// The matchers of [`FeedFilter::wants_in`], one per entry met (bounded by the
    /// bucket's entries).
    pub(crate) per_entry: HashMap<String, Matcher>,
}

impl FeedFilter {
    pub fn new(entries: EntrySelection, when: Option<&Condition>) -> FeedFilter {
        let compiled = when.map(|c| Matcher::new(c, false, false));
        FeedFilter {
            entries,
            matcher: compiled.clone(),
            compiled,
            per_entry: HashMap::new(),
        }
    }

    /// Whether the entry is one the filter names (and does not exclude).
    pub fn wants_entry(&self, entry: &str) -> bool {
        self.entries.selects(entry)
    }

    /// Whether a record matches the condition, evaluated over one stream (every entry
    /// together: `tsblob cp`'s single source).
    pub fn wants(&mut self, ts: u64, labels: &Labels) -> bool {
        match self.matcher.as_mut() {
            None => true,
            // A reached `$limit` keeps nothing more; a missing label (or a condition that
            // cannot be evaluated) is false here.
            Some(m) => m.matches(ts, labels).unwrap_or_default(),
        }
    }

    /// Whether a record of `entry` matches the condition, its aggregation operators
    /// counting that entry's records only (bug: a task's `$limit: 5` stopped after five
    /// records of all its entries together; ReductStore keeps one filter per entry).
    pub fn wants_in(&mut self, entry: &str, ts: u64, labels: &Labels) -> bool {
        let Some(c) = self.compiled.as_ref() else {
            return true;
        };
        let m = match self.per_entry.get_mut(entry) {
            Some(m) => m,
            None => self
                .per_entry
                .entry(entry.to_string())
                .or_insert_with(|| c.clone()),
        };
        m.matches(ts, labels).unwrap_or_default()
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
    /// The page ends after the record that brings its payloads, content types and labels
    /// to this many bytes ([`crate::RecordMeta::weight`]).
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
