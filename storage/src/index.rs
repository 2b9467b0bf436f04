//! The LMDB index (heed): where each record lives, and the state of each block.
//!
//! Tables (all keys big-endian so LMDB's byte order is numeric order):
//! - `chunks`:  `entry_id u32 ++ chunk_key u64` → up to 64 records of the entry, sorted by
//!   timestamp and delta-encoded (see [`crate::codec::chunk`]). Every record of a chunk has
//!   `ts >= chunk_key` and `ts <` the next chunk's key.
//! - `open`:    `entry_id u32` → `chunk_key u64 ++ chunk`: the entry's open (last) chunk,
//!   keyed above every chunk of the entry in `chunks` and moved there once a later chunk
//!   opens. An entry's chunks are those in `chunks` plus at most this one (none: every
//!   chunk is in `chunks`, as in format 2). A round of appends to N entries rewrites the
//!   few leaves of this small table instead of N leaves of `chunks`
//!   (docs/benchmarks/open-chunk-2026-11-26.md).
//! - `metas`:   `entry_id u32 ++ attrs_id u32` → [`Attrs`] (content type and labels), interned
//!   per entry
//! - `blocks`:  `block_id u64` → [`BlockState`]
//! - `entries`: `bucket \0 entry` → `entry_id u32`
//! - `meta`:    small named values (format version); in code `Index::info` ("meta" is a
//!   record's metadata everywhere else, see docs/architecture.md, "Words")
//!
//! The index is a cache of the block files: `recover::rebuild_index` recreates it.

use std::collections::HashMap;
use std::io::Write;
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
    decode_open_value, entry_id_value, entry_key, key_attrs_id, key_entry, open_key, Attrs,
    BlockState, IndexValue, OPEN_KEY_LEN,
};
use crate::codec::{DecodeError, Reader};
use crate::db::{Db, Table};
use crate::error::{Error, Result};

/// The index format this code writes: 3 added the `open` table.
pub const INDEX_VERSION: &[u8] = b"tsblob-index-3";
/// The format before the `open` table (every chunk in `chunks`): a valid layout of
/// [`INDEX_VERSION`] (no entry has an open chunk), so it is opened as it is, with no data
/// migration, and its version is raised at open.
pub const INDEX_VERSION_NO_OPEN: &[u8] = b"tsblob-index-2";

/// N of a format version `tsblob-index-N`, if it is one.
pub fn version_number(v: &[u8]) -> Option<u32> {
    std::str::from_utf8(v.strip_prefix(b"tsblob-index-")?)
        .ok()?
        .parse()
        .ok()
}

/// Distinct (content type, labels) sets interned per entry; an entry with more stores the
/// rest inline in its chunks. Bounds the `metas` table and the in-memory interner.
pub const MAX_ATTRS: u32 = 256;
/// A label set counted for more than this ([`crate::interner`]'s measure) is kept inline
/// in its index record, never interned: a set this large is rarely repeated, and interned
/// sets of this size filled the interner with a few entries, so that each write into an
/// entry whose sets had been dropped read and decoded all of them again (up to 256 of
/// ~60 KB) on the writer thread: three writers made it 75× dearer per record and other
/// buckets' writes waited up to 2.1 s (hostile probe of 2026-11-28).
pub const INTERN_MAX_BYTES: usize = 4 << 10;
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

/// An `open` value's chunk key and chunk.
fn open_value(v: &[u8]) -> Result<(u64, &[u8])> {
    decode_open_value(v).ok_or_else(|| Error::Index("bad open chunk: rebuild the index".into()))
}

/// An entry's chunks in key order, one way or the other ([`Index::walk`]).
type ChunkWalk<'t> = Box<dyn Iterator<Item = Result<(u64, &'t [u8])>> + 't>;

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

/// How many attrs ids one walk of [`Index::range`] keeps resolved.
const SEEN_SLOTS: usize = 16;

/// The attrs ids one walk resolved, the most recent [`SEEN_SLOTS`] (a walk's records
/// usually take turns between a few label sets: each is resolved in the shared interner,
/// behind its lock, once per walk instead of once per record).
#[derive(Default)]
struct AttrsSeen {
    slots: Vec<(u32, Arc<Attrs>)>,
    /// The slot the next new id replaces once all are taken.
    next: usize,
}

impl AttrsSeen {
    fn get(&self, id: u32) -> Option<Arc<Attrs>> {
        self.slots
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, m)| m.clone())
    }

    fn put(&mut self, id: u32, meta: Arc<Attrs>) {
        if self.slots.len() < SEEN_SLOTS {
            self.slots.push((id, meta));
        } else {
            self.slots[self.next] = (id, meta);
            self.next = (self.next + 1) % SEEN_SLOTS;
        }
    }
}

/// The record and block tables of the index environment ([`Db`]), with the interned attrs.
/// The tables are private: every key and value is encoded and decoded here, and the rest
/// of the engine speaks in entry ids, timestamps, block ids and names.
pub struct Index {
    db: Db,
    chunks: Table,
    /// The `open` table: each entry's open (last) chunk (module comment).
    open_chunks: Table,
    /// The `metas` table (its on-disk name): interned [`Attrs`].
    attrs: Table,
    blocks: Table,
    entries: Table,
    /// The `meta` table (its on-disk name): the format version.
    info: Table,
    /// The `metas` table in memory, per entry id, filled lazily, bounded
    /// ([`crate::interner::INTERNER_MAX_BYTES`]). It may run ahead of what is committed (ids a write
    /// transaction assigned): [`Index::forget_attrs`] clears it when a write transaction
    /// fails. An entry dropped for the bound reloads from the table, which the writer
    /// reads in its own transaction (its uncommitted ids included).
    interner: RwLock<crate::interner::Interner>,
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
            open_chunks: db.open_chunks,
            attrs: db.attrs,
            blocks: db.blocks,
            entries: db.entries,
            info: db.info,
            db,
            interner: RwLock::new(Rank::Interner, crate::interner::Interner::default()),
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
        self.open_chunks.clear(txn)?;
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

    /// Empties the `open` table alone (an index of format 2 being raised: recover.rs),
    /// returning how many chunks it held.
    pub fn clear_open_chunks(&self, txn: &mut RwTxn<'_>) -> Result<u64> {
        let n = self.open_chunks.len(txn)?;
        self.open_chunks.clear(txn)?;
        self.tails.lock().clear();
        Ok(n)
    }

    /// Drops the in-memory interner (after a failed write transaction, whose ids it may
    /// hold); it reloads from the `metas` table on demand.
    pub fn forget_attrs(&self) {
        self.interner.write().clear();
    }

    /// Records in the index (the sum of the counts of the chunks, open ones included).
    pub fn count_records(&self, txn: &Txn<'_>) -> Result<u64> {
        let mut n = 0u64;
        for item in self.chunks.iter(txn)? {
            let (_, v) = item?;
            n += chunk_count(v).map_err(bad)?;
        }
        for item in self.open_chunks.iter(txn)? {
            let (_, v) = item?;
            n += chunk_count(open_value(v)?.1).map_err(bad)?;
        }
        Ok(n)
    }

    /// The entry's open chunk (key, value), if it has one.
    fn open_chunk<'t>(&self, txn: &'t Txn<'_>, entry_id: u32) -> Result<Option<(u64, &'t [u8])>> {
        match self.open_chunks.get(txn, &open_key(entry_id))? {
            Some(v) => Ok(Some(open_value(v)?)),
            None => Ok(None),
        }
    }

    /// The entry's chunk with the greatest key `<= ts`: the open one if it is keyed at or
    /// below `ts` (it is above all others), else one of `chunks`.
    fn floor_chunk<'t>(
        &self,
        txn: &'t Txn<'_>,
        entry_id: u32,
        ts: u64,
    ) -> Result<Option<(u64, &'t [u8])>> {
        match self.open_chunk(txn, entry_id)? {
            Some((k, v)) if k <= ts => Ok(Some((k, v))),
            _ => self.stored_floor(txn, entry_id, ts),
        }
    }

    /// The entry's chunk in `chunks` (not the open one) with the greatest key `<= ts`.
    fn stored_floor<'t>(
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

    /// The entry's chunk with the smallest key `>= ts`: one of `chunks`, else the open one.
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
            _ => Ok(self.open_chunk(txn, entry_id)?.filter(|(k, _)| *k >= ts)),
        }
    }

    /// The entry's chunks keyed from `from` to `to`, in `order`: those in `chunks`, then
    /// the open one (ascending); the open one, then those in `chunks` (descending). The
    /// open chunk is keyed above every other chunk of its entry.
    fn walk<'t>(
        &self,
        txn: &'t Txn<'_>,
        entry_id: u32,
        from: u64,
        to: Bound<u64>,
        order: Order,
    ) -> Result<ChunkWalk<'t>> {
        let below_to = |k: u64| match to {
            Bound::Included(t) => k <= t,
            Bound::Excluded(t) => k < t,
            Bound::Unbounded => true,
        };
        let open = self
            .open_chunk(txn, entry_id)?
            .filter(|(k, _)| *k >= from && below_to(*k));
        let lo = chunk_key(entry_id, from);
        let hi = match to {
            Bound::Excluded(t) => Bound::Excluded(chunk_key(entry_id, t)),
            Bound::Included(t) => Bound::Included(chunk_key(entry_id, t)),
            Bound::Unbounded => Bound::Included(chunk_key(entry_id, u64::MAX)),
        };
        let range = (Bound::Included(&lo[..]), hi.as_ref().map(|k| &k[..]));
        let decode = |item: heed::Result<(&'t [u8], &'t [u8])>| {
            let (k, v) = item?;
            Ok((key_ts(k)?, v))
        };
        Ok(match order {
            Order::Ascending => Box::new(
                self.chunks
                    .range(txn, &range)?
                    .map(decode)
                    .chain(open.map(Ok)),
            ),
            Order::Descending => Box::new(
                open.map(Ok)
                    .into_iter()
                    .chain(self.chunks.rev_range(txn, &range)?.map(decode)),
            ),
        })
    }

    /// Writes the entry's chunk keyed `key` where it belongs: in `open` if it is the
    /// entry's highest chunk (a lower open chunk moves to `chunks` first), else in
    /// `chunks`. An entry with no open chunk (format 2, or after its open chunk was
    /// removed) gets one when its highest chunk is written: moved out of `chunks`.
    fn put_chunk(&self, txn: &mut RwTxn<'_>, entry_id: u32, key: u64, value: &[u8]) -> Result<()> {
        enum Open {
            Same,
            Above,
            Below(u64, Vec<u8>),
            None,
        }
        let open = match self.open_chunk(txn, entry_id)? {
            Some((k, _)) if k == key => Open::Same,
            Some((k, _)) if k > key => Open::Above,
            Some((k, v)) => Open::Below(k, v.to_vec()),
            None => Open::None,
        };
        match open {
            Open::Same => {}
            Open::Above => {
                self.chunks.put(txn, &chunk_key(entry_id, key), value)?;
                return Ok(());
            }
            Open::Below(k, v) => self.chunks.put(txn, &chunk_key(entry_id, k), &v)?,
            Open::None => match self.stored_floor(txn, entry_id, u64::MAX)? {
                Some((k, _)) if k > key => {
                    self.chunks.put(txn, &chunk_key(entry_id, key), value)?;
                    return Ok(());
                }
                Some((k, _)) if k == key => {
                    self.chunks.delete(txn, &chunk_key(entry_id, k))?;
                }
                _ => {}
            },
        }
        self.open_chunks.put_reserved(
            txn,
            &open_key(entry_id),
            OPEN_KEY_LEN + value.len(),
            |out| {
                out.write_all(&key.to_be_bytes())?;
                out.write_all(value)
            },
        )?;
        Ok(())
    }

    /// Deletes the entry's chunk keyed `key`, open or not.
    fn delete_chunk(&self, txn: &mut RwTxn<'_>, entry_id: u32, key: u64) -> Result<()> {
        if self
            .open_chunk(txn, entry_id)?
            .is_some_and(|(k, _)| k == key)
        {
            self.open_chunks.delete(txn, &open_key(entry_id))?;
        } else {
            self.chunks.delete(txn, &chunk_key(entry_id, key))?;
        }
        Ok(())
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
        if let Some(a) = self.interner.read().attrs(entry_id, id) {
            return Ok(a);
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
        self.interner.write().resolved(entry_id, id, a.clone());
        Ok(a)
    }

    /// The id of `meta` in the entry's `metas` table, assigned (and stored in `txn`) if
    /// new; inline once the entry has [`MAX_ATTRS`] ids, or when the set is larger than
    /// [`INTERN_MAX_BYTES`].
    fn intern(&self, txn: &mut RwTxn<'_>, entry_id: u32, meta: &Arc<Attrs>) -> Result<AttrsRef> {
        if crate::interner::attrs_bytes(meta) > INTERN_MAX_BYTES {
            return Ok(AttrsRef::Inline(meta.clone()));
        }
        if let Some(id) = self.interner.read().id_of(entry_id, meta) {
            return Ok(AttrsRef::Id(id));
        }
        let mut cache = self.interner.write();
        if !cache.is_loaded(entry_id) {
            // (Dropped for the interner's bound, or never read: the write transaction sees
            // its own uncommitted ids too.)
            let lo = attrs_key(entry_id, 0);
            let hi = attrs_key(entry_id, u32::MAX);
            let range = (Bound::Included(&lo[..]), Bound::Included(&hi[..]));
            let mut all = Vec::new();
            for item in self.attrs.range(txn, &range)? {
                let (k, v) = item?;
                let (Ok(id), Ok(m)) = (key_attrs_id(k), Attrs::decode(&mut Reader::new(v))) else {
                    return Err(Error::Index(
                        "undecodable index metadata: rebuild the index".into(),
                    ));
                };
                all.push((id, Arc::new(m)));
            }
            cache.loaded(entry_id, all);
        }
        if let Some(id) = cache.id_of(entry_id, meta) {
            return Ok(AttrsRef::Id(id));
        }
        let Some(id) = cache.assign(entry_id, meta, MAX_ATTRS) else {
            return Ok(AttrsRef::Inline(meta.clone()));
        };
        let mut v = Vec::with_capacity(32);
        meta.encode(&mut v);
        self.attrs.put(txn, &attrs_key(entry_id, id), &v)?;
        Ok(AttrsRef::Id(id))
    }

    /// A chunk record with its attrs; `seen` caches the ids resolved so far in this walk.
    fn value(
        &self,
        txn: &Txn<'_>,
        entry_id: u32,
        s: Slot,
        seen: &mut AttrsSeen,
    ) -> Result<(u64, IndexValue)> {
        let meta = match &s.attrs {
            AttrsRef::Id(id) => match seen.get(*id) {
                Some(m) => m,
                None => {
                    let m = self.resolve(txn, entry_id, *id)?;
                    seen.put(*id, m.clone());
                    m
                }
            },
            AttrsRef::Inline(m) => m.clone(),
        };
        Ok((s.ts, value_of_slot(s, meta)))
    }

    pub fn get_record(&self, txn: &Txn<'_>, entry_id: u32, ts: u64) -> Result<Option<IndexValue>> {
        match self.find(txn, entry_id, ts)? {
            Some(s) => Ok(Some(
                self.value(txn, entry_id, s, &mut AttrsSeen::default())?.1,
            )),
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
        self.range_bounded(txn, entry_id, span, order, max, u64::MAX, out)
            .map(|_| ())
    }

    /// [`Index::range`], ending also once the label sets stored inline (over
    /// [`INTERN_MAX_BYTES`]: each record's own, decoded for it) of the records taken reach
    /// `max_inline` bytes (at least one record is taken); returns those bytes. Interned
    /// sets are shared, and bounded by the interner. Hostile probe of 2026-11-28: a page of
    /// 4,096 records with 64 KiB label sets held 266 MB for one query of 16 entries.
    #[allow(clippy::too_many_arguments)]
    pub fn range_bounded(
        &self,
        txn: &Txn<'_>,
        entry_id: u32,
        span: std::ops::Range<u64>,
        order: Order,
        max: usize,
        max_inline: u64,
        out: &mut Vec<(u64, IndexValue)>,
    ) -> Result<u64> {
        let mut inline = 0u64;
        let mut full = |s: &Slot| {
            if let AttrsRef::Inline(m) = &s.attrs {
                inline += crate::interner::attrs_bytes(m) as u64;
            }
            inline >= max_inline
        };
        if span.is_empty() || max == 0 {
            return Ok(0);
        }
        // The chunk holding `start` may be keyed below it.
        let first = self
            .floor_chunk(txn, entry_id, span.start)?
            .map_or(span.start, |(k, _)| k);
        let chunks = self.walk(txn, entry_id, first, Bound::Excluded(span.end), order)?;
        let mut seen = AttrsSeen::default();
        let mut n = 0;
        if order == Order::Descending {
            for item in chunks {
                let (k, v) = item?;
                let slots = decode_chunk(k, v).map_err(bad)?;
                for s in slots.into_iter().rev() {
                    if s.ts < span.start {
                        return Ok(inline);
                    }
                    if s.ts < span.end {
                        let stop = full(&s);
                        out.push(self.value(txn, entry_id, s, &mut seen)?);
                        n += 1;
                        if n == max || stop {
                            return Ok(inline);
                        }
                    }
                }
            }
        } else {
            for item in chunks {
                let (k, v) = item?;
                let mut rd = ChunkReader::new(k, v).map_err(bad)?;
                while let Some(s) = rd.next().map_err(bad)? {
                    if s.ts >= span.end {
                        return Ok(inline); // later chunks are keyed above this record
                    }
                    if s.ts >= span.start {
                        let stop = full(&s);
                        out.push(self.value(txn, entry_id, s, &mut seen)?);
                        n += 1;
                        if n == max || stop {
                            return Ok(inline);
                        }
                    }
                }
            }
        }
        Ok(inline)
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
            // The old chunk is deleted when the merge re-keys it below; then none of the
            // new chunks is "unchanged", even one with the old key and value (bug "a
            // re-keyed chunk's unchanged successor was skipped after its delete": a put
            // below an entry's first chunk whose merge split off a chunk equal to the old
            // one lost that chunk's records from the index).
            let kept_old = old_key.is_some() && first_key == old_key;
            if let Some(k) = old_key.filter(|_| !kept_old) {
                self.delete_chunk(txn, entry_id, k)?;
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
                    if kept_old && old_key == Some(k) && old_value == v {
                        continue; // unchanged
                    }
                    self.put_chunk(txn, entry_id, k, &v)?;
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
            self.put_chunk(txn, entry_id, k, &v)?;
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
        let gone = |s: &Slot| s.block_id == block_id && s.ts >= min && s.ts <= max;
        // (chunk key, records left): collected first, written once the cursor is done.
        let mut edits: Vec<(u64, Vec<Slot>)> = Vec::new();
        for item in self.walk(txn, entry_id, first, Bound::Included(max), Order::Ascending)? {
            let (k, v) = item?;
            let slots = decode_chunk(k, v).map_err(bad)?;
            if slots.iter().any(gone) {
                edits.push((k, slots.into_iter().filter(|s| !gone(s)).collect()));
            }
        }
        for (k, left) in edits {
            if left.is_empty() {
                self.delete_chunk(txn, entry_id, k)?;
                continue;
            }
            // Keyed as before (at most its first record); a record's encoding may grow
            // when its neighbour goes, so this can split, below the next chunk's key.
            for (k, v) in encode_chunks(k, &left, Fill::Even) {
                self.put_chunk(txn, entry_id, k, &v)?;
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
        self.open_chunks.delete(txn, &open_key(entry_id))?;
        let lo = attrs_key(entry_id, 0);
        let hi = attrs_key(entry_id, u32::MAX);
        let range = (Bound::Included(&lo[..]), Bound::Included(&hi[..]));
        self.attrs.delete_range(txn, &range)?;
        self.interner.write().remove(entry_id);
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
        let chunks = self.walk(
            txn,
            entry_id,
            first,
            Bound::Excluded(span.end),
            Order::Ascending,
        )?;
        let mut n = 0u64;
        for item in chunks {
            let (k, v) = item?;
            let mut rd = ChunkReader::new(k, v).map_err(bad)?;
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

    /// Every chunk of every entry, the open ones included: counts, keys below their
    /// records, records below the next chunk's key, the open chunk keyed above the entry's
    /// other chunks; returns the records per entry.
    fn check_chunks(index: &Index) -> BTreeMap<u32, Vec<u64>> {
        let txn = index.read_txn().unwrap();
        let mut all: BTreeMap<u32, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
        for item in index.chunks.iter(&txn).unwrap() {
            let (k, v) = item.unwrap();
            let (e, key) = (key_entry(k).unwrap(), key_ts(k).unwrap());
            all.entry(e).or_default().push((key, v.to_vec()));
        }
        for item in index.open_chunks.iter(&txn).unwrap() {
            let (k, v) = item.unwrap();
            let e = u32::from_be_bytes(k.try_into().unwrap());
            let (key, v) = open_value(v).unwrap();
            let list = all.entry(e).or_default();
            if let Some((last, _)) = list.last() {
                assert!(*last < key, "open chunk {key} not above chunk {last}");
            }
            list.push((key, v.to_vec()));
        }
        let mut out: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (e, chunks) in all {
            let list = out.entry(e).or_default();
            for (key, v) in chunks {
                let slots = decode_chunk(key, &v).unwrap();
                assert!(!slots.is_empty() && slots.len() <= CHUNK_RECORDS);
                assert!(slots[0].ts >= key, "chunk {key} holds {}", slots[0].ts);
                if let Some(last) = list.last() {
                    assert!(*last < key, "record {last} at or above next chunk {key}");
                }
                list.extend(slots.iter().map(|s| s.ts));
            }
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
        records(index, e, span, desc, max)
            .into_iter()
            .map(|(ts, _)| ts)
            .collect()
    }

    /// The records of `span` with their values, as `Index::range` walks them.
    fn records(
        index: &Index,
        e: u32,
        span: std::ops::Range<u64>,
        desc: bool,
        max: usize,
    ) -> Vec<(u64, IndexValue)> {
        let txn = index.read_txn().unwrap();
        let mut out = Vec::new();
        index
            .range(&txn, e, span, Order::of(desc), max, &mut out)
            .unwrap();
        out
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
            .chain(index.open_chunks.iter(&txn).unwrap())
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

    /// A walk's cache of resolved ids: records that take turns between 10 label sets, and
    /// between 20 (more than the cache holds: its slots are replaced), each come back with
    /// their own attrs, both directions; the cache never holds more than its slots.
    #[test]
    fn a_walk_resolves_each_records_attrs_through_its_bounded_cache() {
        let (_d, index) = open();
        for (e, sets) in [(1u32, 10u64), (2, 20)] {
            let metas: Vec<Arc<Attrs>> = (0..sets)
                .map(|i| rec_attrs("", &[("set", i.to_string())]))
                .collect();
            let changes = (0..600u64)
                .map(|i| {
                    (
                        1_000 + i,
                        Some(value(1, i * 10, metas[(i % sets) as usize].clone())),
                    )
                })
                .collect();
            put(&index, e, changes);
            let txn = index.read_txn().unwrap();
            for order in [Order::Ascending, Order::Descending] {
                let mut out = Vec::new();
                index
                    .range(&txn, e, 0..u64::MAX, order, usize::MAX, &mut out)
                    .unwrap();
                assert_eq!(out.len(), 600);
                for (ts, v) in out {
                    let want = ((ts - 1_000) % sets).to_string();
                    assert_eq!(v.attrs.labels["set"], want, "entry {e}, record {ts}");
                }
            }
        }
        let mut seen = AttrsSeen::default();
        for id in 0..40u32 {
            seen.put(id, rec_attrs("", &[("id", id.to_string())]));
            assert!(seen.slots.len() <= SEEN_SLOTS);
            assert_eq!(seen.get(id).unwrap().labels["id"], id.to_string());
        }
        assert!(seen.get(40 - SEEN_SLOTS as u32 - 1).is_none());
        assert!(seen.get(40 - SEEN_SLOTS as u32).is_some());
    }

    /// Entries dropped from the interner for its bound (`interner.rs`) read back the attrs
    /// their records were written with, and a writer adding to them reloads their ids
    /// instead of assigning one twice.
    #[test]
    fn entries_dropped_from_the_interner_read_and_write_the_same_attrs() {
        let (_d, index) = open();
        // Sets of ~3.9 KB (under INTERN_MAX_BYTES, so interned): 40 entries of 250 of them,
        // ~39 MB, over the 32 MiB the interner keeps.
        let big = |e: u32, n: u64| {
            let v = format!("{e:02}-{n:04}-{}", "x".repeat(3700));
            rec_attrs("a/b", &[("l", v)])
        };
        for e in 1..=40u32 {
            let recs = (0..250u64)
                .map(|n| (n, Some(value(1, n * 100, big(e, n)))))
                .collect();
            put(&index, e, recs);
        }
        let dropped: Vec<u32> = {
            let i = index.interner.read();
            assert!(i.bytes() <= crate::interner::INTERNER_MAX_BYTES);
            (1..=40).filter(|e| !i.is_loaded(*e)).collect()
        };
        assert!(dropped.len() >= 4, "{dropped:?}");
        // A dropped entry: one more record with one of its sets, and one with a new set.
        let d = dropped[0];
        put(
            &index,
            d,
            vec![
                (1000, Some(value(1, 0, big(d, 5)))),
                (1001, Some(value(1, 0, big(d, 999)))),
            ],
        );
        let txn = index.read_txn().unwrap();
        for e in 1..=40u32 {
            for n in [0u64, 5, 249] {
                let v = index.get_record(&txn, e, n).unwrap().unwrap();
                assert_eq!(v.attrs, big(e, n), "entry {e} record {n}");
            }
        }
        assert_eq!(
            index.get_record(&txn, d, 1000).unwrap().unwrap().attrs,
            big(d, 5)
        );
        assert_eq!(
            index.get_record(&txn, d, 1001).unwrap().unwrap().attrs,
            big(d, 999)
        );
        // 251 distinct sets in that entry: one table row each, none twice.
        let lo = attrs_key(d, 0);
        let hi = attrs_key(d, u32::MAX);
        let rows = index
            .attrs
            .range(&txn, &(Bound::Included(&lo[..]), Bound::Included(&hi[..])))
            .unwrap()
            .count();
        assert_eq!(rows, 251);
    }

    /// Hostile probe of 2026-11-28: records each with a large label set of its own filled
    /// the interner, and every write into an entry whose sets had been dropped reloaded all
    /// of them on the writer thread. A set over `INTERN_MAX_BYTES` is kept inline: it takes
    /// no id, no `metas` row and no room in the interner, and reads back whole.
    #[test]
    fn a_large_label_set_is_kept_inline_not_interned() {
        let (_d, index) = open();
        let big = |i: u64| {
            rec_attrs(
                "text/plain",
                &[("k", format!("{i}-{}", "x".repeat(8 << 10)))],
            )
        };
        let small = rec_attrs("text/plain", &[("k", "v".to_string())]);
        let mut txn = index.write_txn().unwrap();
        let changes = (1..=20u64)
            .map(|ts| RecChange {
                ts,
                value: Some(value(1, ts, if ts == 20 { small.clone() } else { big(ts) })),
            })
            .collect();
        index.apply_changes(&mut txn, 7, changes).unwrap();
        txn.commit().unwrap();
        let txn = index.read_txn().unwrap();
        assert_eq!(
            index.attrs.len(&txn).unwrap(),
            1,
            "only the small set is interned"
        );
        assert!(index.interner.read().bytes() < 4 << 10);
        for ts in 1..=20u64 {
            let got = index.get_record(&txn, 7, ts).unwrap().unwrap();
            let want = if ts == 20 { small.clone() } else { big(ts) };
            assert_eq!(got.attrs, want, "{ts}");
        }
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
            if round % 23 == 22 {
                close_open_chunks(&index); // the layout of format 2: no open chunk
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
        let all = records(&index, 7, 0..u64::MAX, true, usize::MAX);
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

    /// Puts of the `n` records `base..base + n` of block 1 with attrs `m`.
    fn consecutive(base: u64, n: u64, m: &Arc<Attrs>) -> Vec<(u64, Option<IndexValue>)> {
        (base..base + n)
            .map(|ts| (ts, Some(value(1, ts, m.clone()))))
            .collect()
    }

    /// Runs of consecutive timestamps written in a random order of their time ranges (the
    /// shape of batches that reach one entry out of order: every merge below the first
    /// chunk, with every split), each entry checked against a model after each run.
    #[test]
    fn runs_written_out_of_time_order_agree_with_a_model() {
        use rand::{seq::SliceRandom, Rng, SeedableRng};
        let (_d, index) = open();
        let m = rec_attrs("", &[]);
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(7);
        for entry in 0..60u32 {
            let mut model = std::collections::BTreeSet::new();
            let mut runs: Vec<u64> = (0..8).collect();
            runs.shuffle(&mut rng);
            for run in runs {
                let (base, n) = ((run + 1) * 1000, rng.random_range(1..=130));
                put(&index, entry, consecutive(base, n, &m));
                model.extend(base..base + n);
                let got = check_chunks(&index);
                let want: Vec<u64> = model.iter().copied().collect();
                assert_eq!(got.get(&entry), Some(&want), "entry {entry}");
                assert_eq!(query(&index, entry, 0..u64::MAX, false, usize::MAX), want);
            }
        }
    }

    /// Bug "a re-keyed chunk's unchanged successor was skipped after its delete": the
    /// fourth put merges below the first chunk, re-keys it, and splits off a chunk with
    /// the old key and the old value; that one was skipped as unchanged after the old
    /// chunk was deleted, and its 56 records left the index (found by
    /// `router::batch_rounds` when batches of one entry landed out of time order).
    #[test]
    fn a_put_below_the_first_chunk_that_splits_off_its_old_twin_loses_nothing() {
        let (_d, index) = open();
        let m = rec_attrs("", &[]);
        put(&index, 4, consecutive(17000, 44, &m));
        put(&index, 4, consecutive(23000, 44, &m));
        put(&index, 4, consecutive(11000, 48, &m));
        put(&index, 4, consecutive(5000, 56, &m));
        let got = check_chunks(&index);
        assert_eq!(got[&4].len(), 192);
        assert_eq!(query(&index, 4, 0..u64::MAX, false, usize::MAX).len(), 192);
        assert_eq!(query(&index, 4, 0..u64::MAX, true, usize::MAX).len(), 192);
        let txn = index.read_txn().unwrap();
        for base in [5000u64, 11000, 17000, 23000] {
            assert!(index.contains(&txn, 4, base).unwrap(), "{base}");
        }
    }

    /// Moves every open chunk into `chunks`: the layout of index format 2.
    fn close_open_chunks(index: &Index) {
        let mut txn = index.write_txn().unwrap();
        let open: Vec<(u32, u64, Vec<u8>)> = index
            .open_chunks
            .iter(&txn)
            .unwrap()
            .map(|i| {
                let (k, v) = i.unwrap();
                let (key, v) = open_value(v).unwrap();
                (u32::from_be_bytes(k.try_into().unwrap()), key, v.to_vec())
            })
            .collect();
        for (e, key, v) in open {
            index.chunks.put(&mut txn, &chunk_key(e, key), &v).unwrap();
        }
        index.open_chunks.clear(&mut txn).unwrap();
        txn.commit().unwrap();
    }

    /// The keys of an entry's chunks in `chunks`, and its open chunk's key.
    fn layout(index: &Index, e: u32) -> (Vec<u64>, Option<u64>) {
        let txn = index.read_txn().unwrap();
        let lo = chunk_key(e, 0);
        let hi = chunk_key(e, u64::MAX);
        let stored = index
            .chunks
            .range(&txn, &(Bound::Included(&lo[..]), Bound::Included(&hi[..])))
            .unwrap()
            .map(|i| key_ts(i.unwrap().0).unwrap())
            .collect();
        let open = index.open_chunk(&txn, e).unwrap().map(|(k, _)| k);
        (stored, open)
    }

    /// Checks every reader of an entry against the model: ranges both ways (whole, with
    /// limits, windows around every chunk key), first and last, point look-ups, counts and
    /// a histogram.
    fn check_readers(index: &Index, e: u32, model: &BTreeMap<u64, IndexValue>) {
        let got = check_chunks(index);
        let want: Vec<u64> = model.keys().copied().collect();
        assert_eq!(got.get(&e).cloned().unwrap_or_default(), want);
        let (stored, open) = layout(index, e);
        let mut edges: Vec<u64> = stored.iter().copied().chain(open).collect();
        edges.extend(want.iter().step_by(17).copied());
        for edge in edges {
            for (lo, hi) in [
                (edge.saturating_sub(25), edge + 25),
                (edge, u64::MAX),
                (0, edge),
                (edge, edge + 1),
            ] {
                let inside: Vec<u64> = want
                    .iter()
                    .copied()
                    .filter(|t| *t >= lo && *t < hi)
                    .collect();
                let mut rev = inside.clone();
                rev.reverse();
                assert_eq!(query(index, e, lo..hi, false, usize::MAX), inside);
                assert_eq!(query(index, e, lo..hi, true, usize::MAX), rev);
                assert_eq!(
                    query(index, e, lo..hi, false, 3),
                    inside[..inside.len().min(3)]
                );
                assert_eq!(query(index, e, lo..hi, true, 3), rev[..rev.len().min(3)]);
            }
        }
        let txn = index.read_txn().unwrap();
        let all = records(index, e, 0..u64::MAX, true, usize::MAX);
        let rev: Vec<(u64, IndexValue)> = model.clone().into_iter().rev().collect();
        assert_eq!(all, rev);
        assert_eq!(
            index.first(&txn, e).unwrap(),
            model.iter().next().map(|(t, v)| (*t, v.clone()))
        );
        assert_eq!(
            index.last(&txn, e).unwrap(),
            model.iter().next_back().map(|(t, v)| (*t, v.clone()))
        );
        for (ts, v) in model {
            assert_eq!(index.get_record(&txn, e, *ts).unwrap().as_ref(), Some(v));
            assert!(!index.contains(&txn, e, ts + 1).unwrap() || model.contains_key(&(ts + 1)));
        }
        // Bins of 100 µs from 0, and a stop after 7 records.
        let mut bins = vec![(0u64, 0u64); 40];
        assert_eq!(
            index
                .histogram(&txn, e, 0..4000, 0, 100, &mut bins, u64::MAX)
                .unwrap(),
            None
        );
        let mut want_bins = vec![(0u64, 0u64); 40];
        for (ts, v) in model.range(..4000) {
            let b = &mut want_bins[(*ts / 100) as usize];
            b.0 += 1;
            b.1 += v.size;
        }
        assert_eq!(bins, want_bins);
        let mut bins = vec![(0u64, 0u64); 40];
        let stop = index
            .histogram(&txn, e, 0..4000, 0, 100, &mut bins, 7)
            .unwrap();
        assert_eq!(stop, model.range(..4000).nth(7).map(|(t, _)| *t));
    }

    /// The open chunk is seen by every reader and every kind of removal: ranges both ways
    /// across it and the full chunks, a put below its first key, a delete inside it, a
    /// block drop and an entry removal touching it, histograms and counts.
    #[test]
    fn the_open_chunk_is_seen_by_every_reader_and_removal() {
        let (_d, index) = open();
        let m = rec_attrs("a/b", &[("k", "v".into())]);
        let v = |t: u64| value(1 + t % 3, t * 1044, m.clone());
        let mut model: BTreeMap<u64, IndexValue> = BTreeMap::new();
        // Another entry on both sides, so no walk strays into a neighbour's chunks.
        for other in [1u32, 3] {
            put(
                &index,
                other,
                (1..=70).map(|t| (t * 10, Some(v(t)))).collect(),
            );
        }
        // Appends one record per commit: two full chunks in `chunks`, the rest open.
        for t in 1..=150u64 {
            put(&index, 2, vec![(t * 10, Some(v(t)))]);
            model.insert(t * 10, v(t));
        }
        let (stored, open_key) = layout(&index, 2);
        assert_eq!(stored.len(), 2, "{stored:?}");
        let open_key = open_key.unwrap();
        assert!(open_key > stored[1]);
        check_readers(&index, 2, &model);
        let txn = index.read_txn().unwrap();
        assert_eq!(index.count_records(&txn).unwrap(), 150 + 140);
        drop(txn);
        // A put below the open chunk's first key (above the full chunk's last record)
        // goes into the full chunk: the open one keeps its key.
        put(&index, 2, vec![(open_key - 5, Some(v(7)))]);
        model.insert(open_key - 5, v(7));
        assert_eq!(layout(&index, 2).1, Some(open_key));
        check_readers(&index, 2, &model);
        // A put below every record re-keys the first chunk.
        put(&index, 2, vec![(1, Some(v(1)))]);
        model.insert(1, v(1));
        // A delete inside the open chunk, and one of its first record (the key stays).
        put(&index, 2, vec![(open_key, None), (open_key + 30, None)]);
        model.remove(&(open_key + 30));
        model.remove(&open_key);
        assert_eq!(layout(&index, 2).1, Some(open_key));
        check_readers(&index, 2, &model);
        // A block drop across the last full chunk and the open one.
        let mut txn = index.write_txn().unwrap();
        index
            .delete_block_records(&mut txn, 2, open_key - 200, open_key + 200, 2)
            .unwrap();
        txn.commit().unwrap();
        model.retain(|ts, r| !(r.block_id == 2 && *ts >= open_key - 200 && *ts <= open_key + 200));
        check_readers(&index, 2, &model);
        // Block drops that empty the open chunk: the entry has none, then appends open
        // one again (the highest chunk of `chunks` moves back into `open`).
        let mut txn = index.write_txn().unwrap();
        for b in 1..=3 {
            index
                .delete_block_records(&mut txn, 2, open_key, u64::MAX - 1, b)
                .unwrap();
        }
        txn.commit().unwrap();
        model.retain(|ts, _| *ts < open_key);
        assert_eq!(layout(&index, 2).1, None);
        check_readers(&index, 2, &model);
        let (stored_before, _) = layout(&index, 2);
        for t in 200..=210u64 {
            put(&index, 2, vec![(t * 10, Some(v(t)))]);
            model.insert(t * 10, v(t));
        }
        let (stored, open_now) = layout(&index, 2);
        assert!(open_now.is_some());
        assert!(stored.len() < stored_before.len() + 1);
        check_readers(&index, 2, &model);
        // The neighbours are untouched.
        let all = check_chunks(&index);
        for other in [1u32, 3] {
            assert_eq!(all[&other], (1..=70).map(|t| t * 10).collect::<Vec<_>>());
        }
        // Removing the entry removes its open chunk.
        let mut txn = index.write_txn().unwrap();
        index.delete_entry_records(&mut txn, 2).unwrap();
        txn.commit().unwrap();
        assert_eq!(layout(&index, 2), (vec![], None));
        let txn = index.read_txn().unwrap();
        assert_eq!(index.count_records(&txn).unwrap(), 140);
        assert!(index.last(&txn, 2).unwrap().is_none());
        drop(txn);
        // And a clear empties both tables.
        let mut txn = index.write_txn().unwrap();
        index.clear_all(&mut txn).unwrap();
        txn.commit().unwrap();
        let txn = index.read_txn().unwrap();
        assert_eq!(index.count_records(&txn).unwrap(), 0);
        assert_eq!(index.open_chunks.len(&txn).unwrap(), 0);
    }

    /// An index of format 2 keeps every chunk in `chunks`: it is read as it is, and the
    /// first append to an entry moves its last chunk into `open`.
    #[test]
    fn entries_of_format_2_are_read_as_they_are_and_their_last_chunk_opens_on_append() {
        let (_d, index) = open();
        let m = rec_attrs("", &[]);
        let v = |t: u64| value(1, t, m.clone());
        let mut model: BTreeMap<u64, IndexValue> = BTreeMap::new();
        for t in 1..=100u64 {
            put(&index, 5, vec![(t * 10, Some(v(t)))]);
            model.insert(t * 10, v(t));
        }
        close_open_chunks(&index);
        let (stored, open_key) = layout(&index, 5);
        assert_eq!((stored.len(), open_key), (2, None));
        check_readers(&index, 5, &model);
        // A put in the middle of the old last chunk leaves the layout as it is.
        put(&index, 5, vec![(705, Some(v(705)))]);
        model.insert(705, v(705));
        check_readers(&index, 5, &model);
        put(&index, 5, vec![(1010, Some(v(101)))]);
        model.insert(1010, v(101));
        assert_eq!(layout(&index, 5), (vec![stored[0]], Some(stored[1])));
        check_readers(&index, 5, &model);
    }
}
