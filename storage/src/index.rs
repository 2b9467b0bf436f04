//! The LMDB index (heed): where each record lives, and the state of each block.
//!
//! Tables (all keys big-endian so LMDB's byte order is numeric order):
//! - `chunks`:  `entry_id u32 ++ chunk_key u64` → up to 64 records of the entry, sorted by
//!   timestamp and delta-encoded (see [`crate::codec::chunk`]). Every record of a chunk has
//!   `ts >= chunk_key` and `ts <` the next chunk's key.
//! - `metas`:   `entry_id u32 ++ attrs_id u32` → [`Attrs`] (content type and labels), interned
//!   per entry
//! - `blocks`:  `block_id u64` → [`BlockState`]
//! - `entries`: `bucket \0 entry` → `entry_id u32`
//! - `meta`:    small named values (format version); in code `Index::info` ("meta" is a
//!   record's metadata everywhere else, see docs/architecture.md, "Words")
//!
//! The index is a cache of the block files: `recover::rebuild_index` recreates it.

use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use crate::lock::{Mutex, Rank, RwLock};
use heed::{RoTxn, RwTxn, WithoutTls};

use crate::codec;
use crate::codec::chunk::{
    append_at_end, chunk_count, chunk_end, decode_chunk, encode_chunks, merge, AttrsRef, ChunkEnd,
    ChunkReader, Chunks, Fill, Slot,
};
use crate::codec::frame::FLAG_ZSTD;
use crate::codec::index::{
    attrs_key, block_key, chunk_key, decode_block_key, decode_entry_id_value, decode_entry_key,
    entry_id_value, entry_key, key_attrs_id, key_entry, Attrs, BlockState, IndexValue,
};
use crate::codec::{DecodeError, Reader};
use crate::db::{Db, Table};
use crate::error::{Error, Result};

pub const INDEX_VERSION: &[u8] = b"tsblob-index-2";

/// Distinct (content type, labels) sets interned per entry; an entry with more stores the
/// rest inline in its chunks. Bounds the `metas` table and the in-memory interner.
pub const MAX_ATTRS: u32 = 256;
/// How many distinct attrs one [`Index::apply_changes`] remembers by address.
const ATTRS_BY_PTR: usize = 16;
/// Entries whose last chunk [`Index::apply_changes`] keeps in memory at most (each a copy
/// of one chunk value, about [`crate::codec::chunk::CHUNK_BYTES`] at most): past it the
/// cache starts over, and an append reads its chunk's end from the value again.
const MAX_TAILS: usize = 4096;

pub(crate) type Txn<'a> = RoTxn<'a, WithoutTls>;

/// The direction of a walk over an entry's records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Oldest first.
    Ascending,
    /// Newest first.
    Descending,
}

impl Order {
    /// `Descending` when a query asks for `descending`.
    pub fn of(descending: bool) -> Order {
        if descending {
            Order::Descending
        } else {
            Order::Ascending
        }
    }
}

/// A record put (`value: Some`) or delete (`None`) at a timestamp, for
/// [`Index::apply_changes`].
pub struct RecChange {
    pub ts: u64,
    pub value: Option<IndexValue>,
}

impl RecChange {
    pub fn put(ts: u64, value: IndexValue) -> RecChange {
        RecChange {
            ts,
            value: Some(value),
        }
    }

    pub fn delete(ts: u64) -> RecChange {
        RecChange { ts, value: None }
    }
}

fn key_ts(k: &[u8]) -> Result<u64> {
    codec::index::key_ts(k).map_err(|_| Error::Index("bad chunk key: rebuild the index".into()))
}

fn bad(_: DecodeError) -> Error {
    Error::Index("undecodable index chunk: rebuild the index".into())
}

/// The index value of a decoded chunk slot.
fn value_of_slot(s: Slot, meta: Arc<Attrs>) -> IndexValue {
    IndexValue {
        block_id: s.block_id,
        offset: s.offset,
        frame_len: s.frame_len,
        stored: s.stored,
        size: s.size,
        flags: if s.zstd { FLAG_ZSTD } else { 0 },
        attrs: meta,
    }
}

/// The chunk slot of an index value at `ts`.
fn slot_of(v: IndexValue, ts: u64, meta: AttrsRef) -> Slot {
    Slot {
        ts,
        block_id: v.block_id,
        offset: v.offset,
        frame_len: v.frame_len,
        stored: v.stored,
        size: v.size,
        zstd: v.flags & FLAG_ZSTD != 0,
        attrs: meta,
    }
}

/// One entry's interned attrs, both ways.
#[derive(Default)]
struct EntryAttrs {
    by_id: HashMap<u32, Arc<Attrs>>,
    ids: HashMap<Arc<Attrs>, u32>,
    next: u32,
    /// The whole `metas` range of the entry was read (by a writer): `ids` and `next` are
    /// complete. Readers only ever add single `by_id` entries.
    loaded: bool,
}

/// The record and block tables of the index environment ([`Db`]), with the interned attrs.
/// The tables are private: every key and value is encoded and decoded here, and the rest
/// of the engine speaks in entry ids, timestamps, block ids and names.
pub struct Index {
    db: Db,
    chunks: Table,
    /// The `metas` table (its on-disk name): interned [`Attrs`].
    attrs: Table,
    blocks: Table,
    entries: Table,
    /// The `meta` table (its on-disk name): the format version.
    info: Table,
    /// The `metas` table in memory, per entry id, filled lazily. It may run ahead of what
    /// is committed (ids a write transaction assigned): [`Index::forget_attrs`] clears it
    /// when a write transaction fails.
    interner: RwLock<HashMap<u32, EntryAttrs>>,
    /// Per entry, its last chunk as the last append wrote it, with that chunk's end: an
    /// append whose chunk still holds these bytes (the transaction that wrote them
    /// committed, and nothing rewrote the chunk since) encodes its records after the end
    /// instead of decoding the chunk's up to 64 records first. Checked against the stored
    /// value on every use, so it is never wrong, only stale (then not used).
    tails: Mutex<HashMap<u32, Tail>>,
}

/// An entry's last chunk as an append left it (see `Index::tails`).
struct Tail {
    key: u64,
    value: Vec<u8>,
    end: ChunkEnd,
}

impl Index {
    pub fn open(dir: &Path, map_size: usize) -> Result<Index> {
        let db = Db::open(dir, map_size)?;
        Ok(Index {
            chunks: db.chunks,
            attrs: db.attrs,
            blocks: db.blocks,
            entries: db.entries,
            info: db.info,
            db,
            interner: RwLock::new(Rank::Interner, HashMap::new()),
            tails: Mutex::new(Rank::IndexTails, HashMap::new()),
        })
    }

    /// The environment, which the change feed ([`Feed`](crate::feed::Feed)) shares.
    pub(crate) fn db(&self) -> &Db {
        &self.db
    }

    pub fn read_txn(&self) -> Result<RoTxn<'_, WithoutTls>> {
        self.db.read_txn()
    }

    /// A read transaction whose look-ups cannot wait on the disk, or `None`
    /// ([`Db::read_txn_resident`]).
    pub fn read_txn_resident(&self, max_bytes: u64) -> Result<Option<RoTxn<'_, WithoutTls>>> {
        self.db.read_txn_resident(max_bytes)
    }

    pub fn write_txn(&self) -> Result<RwTxn<'_>> {
        self.db.write_txn()
    }

    /// Makes every committed transaction durable (the environment runs with `NO_SYNC`).
    pub fn force_sync(&self) -> Result<()> {
        self.db.force_sync()
    }

    /// The index format version, if one was written.
    pub fn version(&self, txn: &Txn<'_>) -> Result<Option<Vec<u8>>> {
        Ok(self.info.get(txn, b"version")?.map(|v| v.to_vec()))
    }

    pub fn set_version(&self, txn: &mut RwTxn<'_>) -> Result<()> {
        Ok(self.info.put(txn, b"version", INDEX_VERSION)?)
    }

    pub fn put_block(&self, txn: &mut RwTxn<'_>, id: u64, state: &BlockState) -> Result<()> {
        Ok(self.blocks.put(txn, &block_key(id), &state.encode())?)
    }

    pub fn delete_block(&self, txn: &mut RwTxn<'_>, id: u64) -> Result<()> {
        self.blocks.delete(txn, &block_key(id))?;
        Ok(())
    }

    /// Every block's id and state (`None`: undecodable).
    pub fn blocks(&self, txn: &Txn<'_>) -> Result<Vec<(u64, Option<BlockState>)>> {
        let mut out = Vec::new();
        for item in self.blocks.iter(txn)? {
            let (k, v) = item?;
            let id = decode_block_key(k)
                .map_err(|_| Error::Index("a block key is not 8 bytes".into()))?;
            out.push((id, BlockState::decode(v).ok()));
        }
        Ok(out)
    }

    pub fn put_entry(&self, txn: &mut RwTxn<'_>, bucket: &str, entry: &str, id: u32) -> Result<()> {
        Ok(self
            .entries
            .put(txn, &entry_key(bucket, entry), &entry_id_value(id))?)
    }

    pub fn delete_entry(&self, txn: &mut RwTxn<'_>, bucket: &str, entry: &str) -> Result<()> {
        self.entries.delete(txn, &entry_key(bucket, entry))?;
        Ok(())
    }

    /// Every entry: (bucket, entry, id).
    pub fn entries(&self, txn: &Txn<'_>) -> Result<Vec<(String, String, u32)>> {
        let mut out = Vec::new();
        for item in self.entries.iter(txn)? {
            let (k, v) = item?;
            let id = decode_entry_id_value(v)
                .map_err(|_| Error::Index("an entry id is not 4 bytes".into()))?;
            let (b, e) = decode_entry_key(k)
                .map_err(|_| Error::Index("an entry key has no separator".into()))?;
            out.push((
                String::from_utf8_lossy(b).into_owned(),
                String::from_utf8_lossy(e).into_owned(),
                id,
            ));
        }
        Ok(out)
    }

    /// Empties every table (and the `records` table of index version 1, whose pages go
    /// back to LMDB's free list), for a rebuild.
    pub fn clear_all(&self, txn: &mut RwTxn<'_>) -> Result<()> {
        self.chunks.clear(txn)?;
        self.attrs.clear(txn)?;
        self.blocks.clear(txn)?;
        self.entries.clear(txn)?;
        self.info.clear(txn)?;
        if let Some(db) = self.db.legacy_records(txn)? {
            db.clear(txn)?;
        }
        self.forget_attrs();
        self.tails.lock().clear();
        Ok(())
    }

    /// Drops the in-memory interner (after a failed write transaction, whose ids it may
    /// hold); it reloads from the `metas` table on demand.
    pub fn forget_attrs(&self) {
        self.interner.write().clear();
    }

    /// Records in the `chunks` table (the sum of the chunks' counts).
    pub fn count_records(&self, txn: &Txn<'_>) -> Result<u64> {
        let mut n = 0u64;
        for item in self.chunks.iter(txn)? {
            let (_, v) = item?;
            n += chunk_count(v).map_err(bad)?;
        }
        Ok(n)
    }

    /// The entry's chunk with the greatest key `<= ts`.
    fn floor_chunk<'t>(
        &self,
        txn: &'t Txn<'_>,
        entry_id: u32,
        ts: u64,
    ) -> Result<Option<(u64, &'t [u8])>> {
        match self
            .chunks
            .get_lower_than_or_equal_to(txn, &chunk_key(entry_id, ts))?
        {
            Some((k, v)) if key_entry(k) == Ok(entry_id) => Ok(Some((key_ts(k)?, v))),
            _ => Ok(None),
        }
    }

    /// The entry's chunk with the smallest key `>= ts`.
    fn ceil_chunk<'t>(
        &self,
        txn: &'t Txn<'_>,
        entry_id: u32,
        ts: u64,
    ) -> Result<Option<(u64, &'t [u8])>> {
        match self
            .chunks
            .get_greater_than_or_equal_to(txn, &chunk_key(entry_id, ts))?
        {
            Some((k, v)) if key_entry(k) == Ok(entry_id) => Ok(Some((key_ts(k)?, v))),
            _ => Ok(None),
        }
    }

    /// The record at `ts`, as its chunk holds it (attrs not resolved).
    pub fn find(&self, txn: &Txn<'_>, entry_id: u32, ts: u64) -> Result<Option<Slot>> {
        let Some((k, v)) = self.floor_chunk(txn, entry_id, ts)? else {
            return Ok(None);
        };
        let mut rd = ChunkReader::new(k, v).map_err(bad)?;
        Ok(rd.seek(ts).map_err(bad)?.filter(|s| s.ts == ts))
    }

    /// The content type and labels a chunk record refers to.
    fn resolve(&self, txn: &Txn<'_>, entry_id: u32, id: u32) -> Result<Arc<Attrs>> {
        if let Some(a) = self
            .interner
            .read()
            .get(&entry_id)
            .and_then(|e| e.by_id.get(&id))
        {
            return Ok(a.clone());
        }
        let v = self
            .attrs
            .get(txn, &attrs_key(entry_id, id))?
            .ok_or_else(|| {
                Error::Index(format!(
                    "index chunk refers to unknown metadata {id}: rebuild the index"
                ))
            })?;
        let a =
            Arc::new(Attrs::decode(&mut Reader::new(v)).map_err(|_| {
                Error::Index("undecodable index metadata: rebuild the index".into())
            })?);
        // Committed (this transaction sees it), and an id never changes meaning while its
        // entry lives: safe to share with every other reader.
        self.interner
            .write()
            .entry(entry_id)
            .or_default()
            .by_id
            .insert(id, a.clone());
        Ok(a)
    }

    /// The id of `meta` in the entry's `metas` table, assigned (and stored in `txn`) if
    /// new; inline once the entry has [`MAX_ATTRS`] ids.
    fn intern(&self, txn: &mut RwTxn<'_>, entry_id: u32, meta: &Arc<Attrs>) -> Result<AttrsRef> {
        if let Some(em) = self.interner.read().get(&entry_id) {
            if let (true, Some(id)) = (em.loaded, em.ids.get(meta)) {
                return Ok(AttrsRef::Id(*id));
            }
        }
        let mut cache = self.interner.write();
        let em = cache.entry(entry_id).or_default();
        if !em.loaded {
            let lo = attrs_key(entry_id, 0);
            let hi = attrs_key(entry_id, u32::MAX);
            let range = (Bound::Included(&lo[..]), Bound::Included(&hi[..]));
            for item in self.attrs.range(txn, &range)? {
                let (k, v) = item?;
                let (Ok(id), Ok(m)) = (key_attrs_id(k), Attrs::decode(&mut Reader::new(v))) else {
                    return Err(Error::Index(
                        "undecodable index metadata: rebuild the index".into(),
                    ));
                };
                let m = Arc::new(m);
                em.next = em.next.max(id.saturating_add(1));
                em.ids.insert(m.clone(), id);
                em.by_id.insert(id, m);
            }
            em.loaded = true;
        }
        if let Some(id) = em.ids.get(meta) {
            return Ok(AttrsRef::Id(*id));
        }
        if em.next >= MAX_ATTRS {
            return Ok(AttrsRef::Inline(meta.clone()));
        }
        let id = em.next;
        let mut v = Vec::with_capacity(32);
        meta.encode(&mut v);
        self.attrs.put(txn, &attrs_key(entry_id, id), &v)?;
        em.next += 1;
        em.ids.insert(meta.clone(), id);
        em.by_id.insert(id, meta.clone());
        Ok(AttrsRef::Id(id))
    }

    /// A chunk record with its attrs; `last` caches the previous id's.
    fn value(
        &self,
        txn: &Txn<'_>,
        entry_id: u32,
        s: Slot,
        last: &mut Option<(u32, Arc<Attrs>)>,
    ) -> Result<(u64, IndexValue)> {
        let meta = match (&s.attrs, &*last) {
            (AttrsRef::Id(id), Some((lid, m))) if id == lid => m.clone(),
            (AttrsRef::Id(id), _) => {
                let m = self.resolve(txn, entry_id, *id)?;
                *last = Some((*id, m.clone()));
                m
            }
            (AttrsRef::Inline(m), _) => m.clone(),
        };
        Ok((s.ts, value_of_slot(s, meta)))
    }

    pub fn get_record(&self, txn: &Txn<'_>, entry_id: u32, ts: u64) -> Result<Option<IndexValue>> {
        match self.find(txn, entry_id, ts)? {
            Some(s) => Ok(Some(self.value(txn, entry_id, s, &mut None)?.1)),
            None => Ok(None),
        }
    }

    pub fn contains(&self, txn: &Txn<'_>, entry_id: u32, ts: u64) -> Result<bool> {
        Ok(self.find(txn, entry_id, ts)?.is_some())
    }

    /// Up to `max` records of an entry in `span` (`[start, stop)`), in the given direction.
    pub fn range(
        &self,
        txn: &Txn<'_>,
        entry_id: u32,
        span: std::ops::Range<u64>,
        order: Order,
        max: usize,
        out: &mut Vec<(u64, IndexValue)>,
    ) -> Result<()> {
        if span.is_empty() || max == 0 {
            return Ok(());
        }
        // The chunk holding `start` may be keyed below it.
        let first = self
            .floor_chunk(txn, entry_id, span.start)?
            .map_or(span.start, |(k, _)| k);
        let lo = chunk_key(entry_id, first);
        let hi = chunk_key(entry_id, span.end);
        let range = (Bound::Included(&lo[..]), Bound::Excluded(&hi[..]));
        let mut last = None;
        let mut n = 0;
        if order == Order::Descending {
            for item in self.chunks.rev_range(txn, &range)? {
                let (k, v) = item?;
                let slots = decode_chunk(key_ts(k)?, v).map_err(bad)?;
                for s in slots.into_iter().rev() {
                    if s.ts < span.start {
                        return Ok(());
                    }
                    if s.ts < span.end {
                        out.push(self.value(txn, entry_id, s, &mut last)?);
                        n += 1;
                        if n == max {
                            return Ok(());
                        }
                    }
                }
            }
        } else {
            for item in self.chunks.range(txn, &range)? {
                let (k, v) = item?;
                let mut rd = ChunkReader::new(key_ts(k)?, v).map_err(bad)?;
                while let Some(s) = rd.next().map_err(bad)? {
                    if s.ts >= span.end {
                        return Ok(()); // later chunks are keyed above this record
                    }
                    if s.ts >= span.start {
                        out.push(self.value(txn, entry_id, s, &mut last)?);
                        n += 1;
                        if n == max {
                            return Ok(());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The newest record of an entry.
    pub fn last(&self, txn: &Txn<'_>, entry_id: u32) -> Result<Option<(u64, IndexValue)>> {
        let mut out = Vec::with_capacity(1);
        // u64::MAX itself is never a valid timestamp (reserved), so the exclusive stop is fine.
        self.range(txn, entry_id, 0..u64::MAX, Order::Descending, 1, &mut out)?;
        Ok(out.pop())
    }

    /// The oldest record of an entry.
    pub fn first(&self, txn: &Txn<'_>, entry_id: u32) -> Result<Option<(u64, IndexValue)>> {
        let mut out = Vec::with_capacity(1);
        self.range(txn, entry_id, 0..u64::MAX, Order::Ascending, 1, &mut out)?;
        Ok(out.pop())
    }

    /// Puts (`Some`, replacing a record at the same timestamp) and deletes (`None`) records
    /// of one entry. `changes` must be sorted by timestamp, without duplicates. Each chunk
    /// the changes fall in is read and written once: in-order appends touch only the
    /// entry's last chunk (and the new chunks after it).
    pub fn apply_changes(
        &self,
        txn: &mut RwTxn<'_>,
        entry_id: u32,
        changes: Vec<RecChange>,
    ) -> Result<()> {
        let mut slots_in: Vec<(u64, Option<Slot>)> = Vec::with_capacity(changes.len());
        // The attrs interned so far, by address (a batch's records share a few `Attrs`,
        // taking turns: docs/benchmarks/batch-1k-2026-11-26.md), a few recent ones only;
        // and the last one, also by value.
        let mut by_ptr: Vec<(Arc<Attrs>, AttrsRef)> = Vec::new();
        let mut last: Option<(Arc<Attrs>, AttrsRef)> = None;
        for RecChange { ts, value } in changes {
            let Some(v) = value else {
                slots_in.push((ts, None));
                continue;
            };
            let known = by_ptr
                .iter()
                .find(|(a, _)| Arc::ptr_eq(a, &v.attrs))
                .map(|(_, r)| r.clone());
            let m = match (known, &last) {
                (Some(r), _) => r,
                (None, Some((a, r))) if **a == *v.attrs => r.clone(),
                _ => {
                    let r = self.intern(txn, entry_id, &v.attrs)?;
                    if by_ptr.len() < ATTRS_BY_PTR {
                        by_ptr.push((v.attrs.clone(), r.clone()));
                    }
                    last = Some((v.attrs.clone(), r.clone()));
                    r
                }
            };
            slots_in.push((ts, Some(slot_of(v, ts, m))));
        }
        let mut it = slots_in.into_iter().peekable();
        while let Some((ts0, _)) = it.peek() {
            let ts0 = *ts0;
            // The chunk the first change falls in: the one keyed at or below it, else the
            // entry's first chunk (re-keyed below), else none (the entry has no chunks).
            // Appends land in the entry's last chunk: one look-up finds it.
            let last = self.floor_chunk(txn, entry_id, u64::MAX)?;
            let (target, next_key) = match last {
                Some((k, _)) if k <= ts0 => (last, None),
                None => (None, None),
                Some(_) => {
                    let target = match self.floor_chunk(txn, entry_id, ts0)? {
                        Some(c) => Some(c),
                        None => self.ceil_chunk(txn, entry_id, ts0)?,
                    };
                    let next_key = match target.and_then(|(k, _)| k.checked_add(1)) {
                        Some(k1) => self.ceil_chunk(txn, entry_id, k1)?.map(|(n, _)| n),
                        None => None,
                    };
                    (target, next_key)
                }
            };
            // Every change below the next chunk's key belongs to this chunk (at least the
            // first: the next key is above it).
            let batch: Vec<(u64, Option<Slot>)> =
                std::iter::from_fn(|| it.next_if(|(ts, _)| next_key.is_none_or(|n| *ts < n)))
                    .collect();
            // The common case: puts after the newest record of the entry's last chunk.
            if let (Some((k, v)), None) = (target, next_key) {
                if batch.iter().all(|(_, s)| s.is_some()) {
                    let slots: Vec<Slot> = batch.iter().filter_map(|(_, s)| s.clone()).collect();
                    if let Some((chunks, end)) = self.append_to(entry_id, k, v, &slots) {
                        self.put_appended(txn, entry_id, chunks, end)?;
                        continue;
                    }
                }
            }
            let (old_key, old_value, mut slots) = match target {
                Some((k, v)) => (Some(k), v.to_vec(), decode_chunk(k, v).map_err(bad)?),
                None => (None, Vec::new(), Vec::new()),
            };
            merge(&mut slots, batch);
            let first_key = slots.first().map(|s| old_key.map_or(s.ts, |k| k.min(s.ts)));
            if let Some(k) = old_key {
                if first_key != Some(k) {
                    self.chunks.delete(txn, &chunk_key(entry_id, k))?;
                }
            }
            if let Some(fk) = first_key {
                for (k, v) in encode_chunks(
                    fk,
                    &slots,
                    if next_key.is_some() {
                        Fill::Even
                    } else {
                        Fill::Packed
                    },
                ) {
                    if old_key == Some(k) && old_value == v {
                        continue; // unchanged
                    }
                    self.chunks.put(txn, &chunk_key(entry_id, k), &v)?;
                }
            }
        }
        Ok(())
    }

    /// The chunks of an append of `slots` to the entry's last chunk `(key, value)`, and
    /// the end of the last of them; `None` when it is not an append (or the chunk does not
    /// decode): the caller merges. The chunk's end comes from [`Index::tails`] when the
    /// value is the one the last append wrote, else from decoding it.
    fn append_to(
        &self,
        entry_id: u32,
        key: u64,
        value: &[u8],
        slots: &[Slot],
    ) -> Option<(Chunks, Option<ChunkEnd>)> {
        let kept = self.tails.lock().remove(&entry_id);
        let (end, buf) = match kept {
            Some(t) if t.key == key && t.value == value => {
                debug_assert_eq!(chunk_end(key, value).ok().as_ref(), Some(&t.end));
                (t.end, t.value)
            }
            _ => (chunk_end(key, value).ok()?, value.to_vec()),
        };
        append_at_end(key, buf, &end, slots).ok()?
    }

    /// Puts the chunks of an append; the last one (with its end) becomes the entry's tail.
    fn put_appended(
        &self,
        txn: &mut RwTxn<'_>,
        entry_id: u32,
        chunks: Chunks,
        end: Option<ChunkEnd>,
    ) -> Result<()> {
        let mut last = None;
        for (k, v) in chunks {
            self.chunks.put(txn, &chunk_key(entry_id, k), &v)?;
            last = Some((k, v));
        }
        if let (Some((key, value)), Some(end)) = (last, end) {
            let mut tails = self.tails.lock();
            if tails.len() >= MAX_TAILS {
                tails.clear();
            }
            tails.insert(entry_id, Tail { key, value, end });
        }
        Ok(())
    }

    /// Deletes the records of `entry_id` in `[min, max]` that live in block `block_id`.
    pub fn delete_block_records(
        &self,
        txn: &mut RwTxn<'_>,
        entry_id: u32,
        min: u64,
        max: u64,
        block_id: u64,
    ) -> Result<()> {
        if min > max {
            return Ok(());
        }
        let first = self
            .floor_chunk(txn, entry_id, min)?
            .map_or(min, |(k, _)| k);
        let lo = chunk_key(entry_id, first);
        let hi = chunk_key(entry_id, max);
        let range = (Bound::Included(&lo[..]), Bound::Included(&hi[..]));
        let gone = |s: &Slot| s.block_id == block_id && s.ts >= min && s.ts <= max;
        // (chunk key, records left): collected first, written once the cursor is done.
        let mut edits: Vec<(u64, Vec<Slot>)> = Vec::new();
        for item in self.chunks.range(txn, &range)? {
            let (k, v) = item?;
            let k = key_ts(k)?;
            let slots = decode_chunk(k, v).map_err(bad)?;
            if slots.iter().any(gone) {
                edits.push((k, slots.into_iter().filter(|s| !gone(s)).collect()));
            }
        }
        for (k, left) in edits {
            if left.is_empty() {
                self.chunks.delete(txn, &chunk_key(entry_id, k))?;
                continue;
            }
            // Keyed as before (at most its first record); a record's encoding may grow
            // when its neighbour goes, so this can split, below the next chunk's key.
            for (k, v) in encode_chunks(k, &left, Fill::Even) {
                self.chunks.put(txn, &chunk_key(entry_id, k), &v)?;
            }
        }
        Ok(())
    }

    /// Deletes every record of an entry, and its interned attrs.
    pub fn delete_entry_records(&self, txn: &mut RwTxn<'_>, entry_id: u32) -> Result<()> {
        let lo = chunk_key(entry_id, 0);
        let hi = chunk_key(entry_id, u64::MAX);
        let range = (Bound::Included(&lo[..]), Bound::Included(&hi[..]));
        self.chunks.delete_range(txn, &range)?;
        let lo = attrs_key(entry_id, 0);
        let hi = attrs_key(entry_id, u32::MAX);
        let range = (Bound::Included(&lo[..]), Bound::Included(&hi[..]));
        self.attrs.delete_range(txn, &range)?;
        self.interner.write().remove(&entry_id);
        self.tails.lock().remove(&entry_id);
        Ok(())
    }
}

impl Index {
    /// Adds the records of an entry in `span` (`[start, stop)`) into `bins` (count and
    /// payload bytes per `step` from `origin`), from the chunks alone: no metadata is
    /// resolved and no block is read. Visits at most `max` records; returns the timestamp
    /// of the first record it did not visit when it stopped early, `None` when the span
    /// is done.
    #[allow(clippy::too_many_arguments)]
    pub fn histogram(
        &self,
        txn: &Txn<'_>,
        entry_id: u32,
        span: std::ops::Range<u64>,
        origin: u64,
        step: u64,
        bins: &mut [(u64, u64)],
        max: u64,
    ) -> Result<Option<u64>> {
        if span.is_empty() {
            return Ok(None);
        }
        let step = step.max(1);
        let first = self
            .floor_chunk(txn, entry_id, span.start)?
            .map_or(span.start, |(k, _)| k);
        let lo = chunk_key(entry_id, first);
        let hi = chunk_key(entry_id, span.end);
        let range = (Bound::Included(&lo[..]), Bound::Excluded(&hi[..]));
        let mut n = 0u64;
        for item in self.chunks.range(txn, &range)? {
            let (k, v) = item?;
            let mut rd = ChunkReader::new(key_ts(k)?, v).map_err(bad)?;
            let mut slot = rd.seek(span.start).map_err(bad)?;
            while let Some(s) = slot {
                if s.ts >= span.end {
                    return Ok(None); // later chunks are keyed above this record
                }
                if n == max {
                    return Ok(Some(s.ts));
                }
                let i = usize::try_from(s.ts.saturating_sub(origin) / step).unwrap_or(usize::MAX);
                if let Some(b) = bins.get_mut(i) {
                    b.0 += 1;
                    b.1 = b.1.saturating_add(s.size);
                }
                n += 1;
                slot = rd.next().map_err(bad)?;
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::chunk::CHUNK_RECORDS;
    use crate::record::Labels;
    use std::collections::BTreeMap;

    fn rec_attrs(ct: &str, pairs: &[(&str, String)]) -> Arc<Attrs> {
        Arc::new(Attrs {
            content_type: ct.into(),
            labels: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect::<Labels>(),
        })
    }

    fn value(block_id: u64, offset: u64, meta: Arc<Attrs>) -> IndexValue {
        IndexValue {
            block_id,
            offset,
            frame_len: 1044,
            stored: 1024,
            size: 1024,
            flags: 0,
            attrs: meta,
        }
    }

    fn open() -> (tempfile::TempDir, Index) {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(dir.path(), 1 << 30).unwrap();
        (dir, index)
    }

    fn put(index: &Index, entry: u32, recs: Vec<(u64, Option<IndexValue>)>) {
        let mut txn = index.write_txn().unwrap();
        let recs = recs
            .into_iter()
            .map(|(ts, value)| RecChange { ts, value })
            .collect();
        index.apply_changes(&mut txn, entry, recs).unwrap();
        txn.commit().unwrap();
    }

    /// Every chunk of every entry: counts, keys below their records, records below the
    /// next chunk's key; returns the records per entry.
    fn check_chunks(index: &Index) -> BTreeMap<u32, Vec<u64>> {
        let txn = index.read_txn().unwrap();
        let mut out: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let mut prev: Option<(u32, u64)> = None;
        for item in index.chunks.iter(&txn).unwrap() {
            let (k, v) = item.unwrap();
            let (e, key) = (key_entry(k).unwrap(), key_ts(k).unwrap());
            let slots = decode_chunk(key, v).unwrap();
            assert!(!slots.is_empty() && slots.len() <= CHUNK_RECORDS);
            assert!(slots[0].ts >= key, "chunk {key} holds {}", slots[0].ts);
            let list = out.entry(e).or_default();
            if let (Some((pe, _)), Some(last)) = (prev, list.last()) {
                if pe == e {
                    assert!(*last < key, "record {last} at or above next chunk {key}");
                }
            }
            list.extend(slots.iter().map(|s| s.ts));
            prev = Some((e, key));
        }
        for l in out.values() {
            assert!(l.windows(2).all(|w| w[0] < w[1]));
        }
        assert_eq!(
            index.count_records(&txn).unwrap(),
            out.values().map(|l| l.len() as u64).sum::<u64>()
        );
        out
    }

    fn query(
        index: &Index,
        e: u32,
        span: std::ops::Range<u64>,
        desc: bool,
        max: usize,
    ) -> Vec<u64> {
        let txn = index.read_txn().unwrap();
        let mut out = Vec::new();
        index
            .range(&txn, e, span, Order::of(desc), max, &mut out)
            .unwrap();
        out.into_iter().map(|(ts, _)| ts).collect()
    }

    #[test]
    fn round_robin_single_puts_fill_chunks_and_queries_cross_them() {
        let (_d, index) = open();
        let metas: Vec<Arc<Attrs>> = (0..10)
            .map(|i| rec_attrs("", &[("l0", "cam".into()), ("l1", i.to_string())]))
            .collect();
        // 16 entries, one record per commit, round-robin: what the comparison writes.
        for i in 0..16 * 300u64 {
            let (e, seq) = ((i % 16) as u32 + 1, i / 16);
            let v = value(
                e.into(),
                100 + seq * 1044,
                metas[(seq % 10) as usize].clone(),
            );
            put(&index, e, vec![(1_000_000 + seq * 1000, Some(v))]);
        }
        let all = check_chunks(&index);
        assert_eq!(all.len(), 16);
        let want: Vec<u64> = (0..300).map(|s| 1_000_000 + s * 1000).collect();
        for l in all.values() {
            assert_eq!(*l, want);
        }
        // Two bytes per record (flags; the label set changes every record): a few KB.
        let txn = index.read_txn().unwrap();
        let bytes: usize = index
            .chunks
            .iter(&txn)
            .unwrap()
            .map(|i| i.unwrap().1.len())
            .sum();
        assert!(bytes < 16 * 300 * 5 / 2, "{bytes} bytes of chunks");
        // Ten label sets per entry, interned.
        assert_eq!(index.attrs.len(&txn).unwrap(), 16 * 10);
        drop(txn);
        // Windows crossing chunk boundaries, both directions, with limits.
        for (lo, hi) in [
            (0, u64::MAX),
            (1_063_500, 1_130_001),
            (1_064_000, 1_064_001),
            (5, 6),
        ] {
            let inside: Vec<u64> = want
                .iter()
                .copied()
                .filter(|t| *t >= lo && *t < hi)
                .collect();
            assert_eq!(query(&index, 3, lo..hi, false, usize::MAX), inside);
            let mut rev = inside.clone();
            rev.reverse();
            assert_eq!(query(&index, 3, lo..hi, true, usize::MAX), rev);
            assert_eq!(
                query(&index, 3, lo..hi, false, 70),
                inside[..inside.len().min(70)]
            );
            assert_eq!(query(&index, 3, lo..hi, true, 70), rev[..rev.len().min(70)]);
        }
        let txn = index.read_txn().unwrap();
        assert_eq!(index.first(&txn, 16).unwrap().unwrap().0, want[0]);
        let (ts, v) = index.last(&txn, 16).unwrap().unwrap();
        assert_eq!(ts, want[299]);
        assert_eq!(v.attrs, metas[9]);
        assert_eq!((v.block_id, v.offset), (16, 100 + 299 * 1044));
        let v = index
            .get_record(&txn, 5, 1_000_000 + 77_000)
            .unwrap()
            .unwrap();
        assert_eq!(v.attrs.labels["l1"], "7");
        assert!(index.contains(&txn, 5, 1_000_000 + 64_000).unwrap());
        assert!(!index.contains(&txn, 5, 1_000_000 + 64_001).unwrap());
        assert!(!index.contains(&txn, 17, 1_000_000).unwrap());
        assert!(index.first(&txn, 17).unwrap().is_none());
    }

    /// A model of the index under random puts, replacements, deletes and block drops, in
    /// random order and commit sizes.
    #[test]
    fn random_ops_agree_with_a_model() {
        let (_d, index) = open();
        let mut model: BTreeMap<u64, IndexValue> = BTreeMap::new();
        use rand_xoshiro::rand_core::{RngCore, SeedableRng};
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(1);
        let mut rnd = |n: u64| rng.next_u64() % n;
        // More label sets than the interner keeps: the rest go inline.
        let metas: Vec<Arc<Attrs>> = (0..MAX_ATTRS as u64 + 40)
            .map(|i| rec_attrs("image/jpeg", &[("n", i.to_string())]))
            .collect();
        for round in 0..300 {
            let mut changes: BTreeMap<u64, Option<IndexValue>> = BTreeMap::new();
            let ops = 1 + rnd(if round % 10 == 0 { 500 } else { 20 });
            for _ in 0..ops {
                let ts = if rnd(3) == 0 {
                    rnd(20_000)
                } else {
                    10_000 + round * 100 + rnd(100)
                };
                if rnd(4) == 0 {
                    changes.insert(ts, None);
                } else {
                    let m = metas[rnd(metas.len() as u64) as usize].clone();
                    changes.insert(ts, Some(value(1 + rnd(5), rnd(1 << 30), m)));
                }
            }
            for (ts, c) in &changes {
                match c {
                    Some(v) => model.insert(*ts, v.clone()),
                    None => model.remove(ts),
                };
            }
            let mut txn = index.write_txn().unwrap();
            index
                .apply_changes(
                    &mut txn,
                    7,
                    changes
                        .into_iter()
                        .map(|(ts, value)| RecChange { ts, value })
                        .collect(),
                )
                .unwrap();
            if round % 37 == 36 {
                let (b, lo, hi) = (1 + rnd(5), rnd(20_000), rnd(40_000));
                index.delete_block_records(&mut txn, 7, lo, hi, b).unwrap();
                model.retain(|ts, v| !(v.block_id == b && *ts >= lo && *ts <= hi));
            }
            txn.commit().unwrap();
            if round % 50 == 49 {
                index.forget_attrs(); // as after a failed commit: reloads from the table
            }
            let got = check_chunks(&index);
            let want: Vec<u64> = model.keys().copied().collect();
            assert_eq!(
                got.get(&7).cloned().unwrap_or_default(),
                want,
                "round {round}"
            );
        }
        let txn = index.read_txn().unwrap();
        for (ts, v) in &model {
            assert_eq!(index.get_record(&txn, 7, *ts).unwrap().as_ref(), Some(v));
        }
        let mut all = Vec::new();
        index
            .range(
                &txn,
                7,
                0..u64::MAX,
                Order::Descending,
                usize::MAX,
                &mut all,
            )
            .unwrap();
        let want: Vec<(u64, IndexValue)> = model.clone().into_iter().rev().collect();
        assert_eq!(all, want);
        assert_eq!(index.attrs.len(&txn).unwrap(), u64::from(MAX_ATTRS));
        drop(txn);
        let mut txn = index.write_txn().unwrap();
        index.delete_entry_records(&mut txn, 7).unwrap();
        txn.commit().unwrap();
        let txn = index.read_txn().unwrap();
        assert_eq!(index.count_records(&txn).unwrap(), 0);
        assert_eq!(index.attrs.len(&txn).unwrap(), 0);
    }

    #[test]
    fn ids_of_an_aborted_transaction_are_not_reused_wrongly() {
        let (_d, index) = open();
        let a = rec_attrs("a/a", &[]);
        let b = rec_attrs("b/b", &[("k", "v".into())]);
        let mut txn = index.write_txn().unwrap();
        index
            .apply_changes(&mut txn, 1, vec![RecChange::put(5, value(1, 0, a.clone()))])
            .unwrap();
        drop(txn); // aborted: id 0 = a was never committed
        index.forget_attrs();
        put(&index, 1, vec![(6, Some(value(1, 0, b.clone())))]);
        let txn = index.read_txn().unwrap();
        assert_eq!(index.get_record(&txn, 1, 6).unwrap().unwrap().attrs, b);
        assert!(index.get_record(&txn, 1, 5).unwrap().is_none());
    }

    /// The last chunk kept between appends (`Index::tails`) is used only while the stored
    /// chunk is the one it kept: not after the append that wrote it was aborted, nor after
    /// the chunk was rewritten by a block drop or a put in its middle.
    #[test]
    fn a_kept_last_chunk_is_not_appended_to_once_the_stored_one_differs() {
        let (_d, index) = open();
        let m = rec_attrs("a/b", &[]);
        let n = rec_attrs("a/b", &[("x", "y".into())]);
        let attrs_of = |t: u64| {
            if t.is_multiple_of(3) {
                n.clone()
            } else {
                m.clone()
            }
        };
        let v = |b: u64, t: u64| value(b, t * 1044, attrs_of(t));
        let mut want: BTreeMap<u64, u64> = BTreeMap::new();
        for t in 1..=20u64 {
            put(&index, 4, vec![(t * 10, Some(v(1, t)))]);
            want.insert(t * 10, 1);
        }
        // Aborted: the kept chunk holds record 210, the stored one does not.
        let mut txn = index.write_txn().unwrap();
        index
            .apply_changes(&mut txn, 4, vec![RecChange::put(210, v(1, 21))])
            .unwrap();
        drop(txn);
        index.forget_attrs();
        put(&index, 4, vec![(220, Some(v(2, 22)))]);
        want.insert(220, 2);
        // Rewritten in the middle (a replacement), then appended to.
        put(&index, 4, vec![(100, Some(v(3, 10)))]);
        want.insert(100, 3);
        put(&index, 4, vec![(230, Some(v(2, 23)))]);
        want.insert(230, 2);
        // A block drop rewrites the chunk, then appends go on.
        let mut txn = index.write_txn().unwrap();
        index.delete_block_records(&mut txn, 4, 0, 150, 1).unwrap();
        txn.commit().unwrap();
        want.retain(|ts, b| !(*b == 1 && *ts <= 150));
        for t in 24..=90u64 {
            put(&index, 4, vec![(t * 10, Some(v(2, t)))]);
            want.insert(t * 10, 2);
        }
        let got = check_chunks(&index);
        assert_eq!(got[&4], want.keys().copied().collect::<Vec<_>>());
        let txn = index.read_txn().unwrap();
        for (ts, b) in &want {
            let r = index.get_record(&txn, 4, *ts).unwrap().unwrap();
            assert_eq!(r.block_id, *b, "record {ts}");
            let t = ts / 10;
            assert_eq!(r.offset, t * 1044);
            assert_eq!(r.attrs, attrs_of(t));
        }
    }

    #[test]
    fn a_put_below_the_first_chunk_rekeys_it_and_replace_keeps_count() {
        let (_d, index) = open();
        let m = rec_attrs("", &[]);
        put(
            &index,
            2,
            (100..200)
                .map(|t| (t * 10, Some(value(1, t * 1044, m.clone()))))
                .collect(),
        );
        put(&index, 2, vec![(5, Some(value(2, 0, m.clone())))]);
        let n = rec_attrs("", &[("x", "y".into())]);
        put(&index, 2, vec![(1500, Some(value(3, 0, n.clone())))]);
        let got = check_chunks(&index);
        assert_eq!(got[&2].len(), 101);
        assert_eq!(got[&2][0], 5);
        let txn = index.read_txn().unwrap();
        let v = index.get_record(&txn, 2, 1500).unwrap().unwrap();
        assert_eq!((v.block_id, v.attrs), (3, n));
    }
}
