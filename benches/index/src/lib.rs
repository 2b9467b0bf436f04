//! The engine's index workload on three embedded key-value stores, for `benches/index.rs`:
//! LMDB through heed (what the engine uses, opened with the engine's flags), RocksDB and
//! redb.
//!
//! The keys are the engine's `chunks` keys (`storage/src/codec/index.rs`: entry id u32 BE
//! ++ chunk key u64 BE, 12 bytes), the values [`VALUE_LEN`] bytes, the size of a chunk of
//! 64 records written at a regular interval (a count byte, the first record's fields, then
//! one flags byte per record). [`KEYS`] keys over [`ENTRIES`] entries are inserted in time
//! order, interleaved across the entries as concurrent writers' group commits are, in
//! transactions of [`BATCH`] keys; no transaction syncs, and one sync ends the load (the
//! engine runs LMDB `NO_SYNC` and syncs on its own terms).
//!
//! A point lookup is the engine's `floor_chunk`: the greatest key `<= (entry, ts)` in a
//! fresh read transaction. A range scan reads [`SCAN`] consecutive keys of one entry.

use std::fs;
use std::path::Path;

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Keys of the loaded index.
pub const KEYS: u64 = 1_000_000;
/// Entries the keys are spread over.
pub const ENTRIES: u32 = 16;
/// Bytes of each value.
pub const VALUE_LEN: usize = 80;
/// Keys per write transaction (or RocksDB write batch).
pub const BATCH: u64 = 10_000;
/// Keys of one range scan.
pub const SCAN: usize = 1_000;
/// Timestamp of an entry's first chunk, µs.
pub const BASE_TS: u64 = 1_700_000_000_000_000;
/// Chunk keys of an entry are this far apart: 64 records 1 ms apart.
pub const CHUNK_STEP: u64 = 64 * 1_000;

/// The engine's `chunks` key (`storage/src/codec/index.rs`, `chunk_key`), mirrored here:
/// the engine's codec is private to the storage crate.
pub fn chunk_key(entry_id: u32, ts: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&entry_id.to_be_bytes());
    k[4..].copy_from_slice(&ts.to_be_bytes());
    k
}

/// The `i`-th key inserted: entries take turns, each advancing one chunk per turn.
pub fn key_of(i: u64) -> [u8; 12] {
    let entry = (i % u64::from(ENTRIES)) as u32;
    chunk_key(entry, BASE_TS + (i / u64::from(ENTRIES)) * CHUNK_STEP)
}

/// Chunks of each entry once [`KEYS`] are loaded.
pub fn chunks_per_entry() -> u64 {
    KEYS / u64::from(ENTRIES)
}

/// Seeded, incompressible values, one per key index.
pub struct Values(Xoshiro256PlusPlus);

impl Values {
    pub fn new(seed: u64) -> Values {
        Values(Xoshiro256PlusPlus::seed_from_u64(seed))
    }
    pub fn next(&mut self) -> [u8; VALUE_LEN] {
        let mut v = [0u8; VALUE_LEN];
        self.0.fill_bytes(&mut v);
        v
    }
}

/// Random (entry, timestamp) pairs inside the loaded index, and scan starts that leave
/// [`SCAN`] keys after them in their entry.
pub struct Probes(Xoshiro256PlusPlus);

impl Probes {
    pub fn new(seed: u64) -> Probes {
        Probes(Xoshiro256PlusPlus::seed_from_u64(seed))
    }
    /// A timestamp inside a chunk (not on its key), as a point read's usually is.
    pub fn point(&mut self) -> (u32, u64) {
        let entry = (self.0.next_u64() % u64::from(ENTRIES)) as u32;
        let chunk = self.0.next_u64() % chunks_per_entry();
        let within = self.0.next_u64() % CHUNK_STEP;
        (entry, BASE_TS + chunk * CHUNK_STEP + within)
    }
    pub fn scan_start(&mut self) -> (u32, u64) {
        let entry = (self.0.next_u64() % u64::from(ENTRIES)) as u32;
        let chunk = self.0.next_u64() % (chunks_per_entry() - SCAN as u64);
        (entry, BASE_TS + chunk * CHUNK_STEP)
    }
}

/// One store under the workload.
pub trait Index: Sized {
    const NAME: &'static str;
    fn open(dir: &Path) -> Self;
    /// Inserts keys `from..to` ([`key_of`]) in one transaction, not synced.
    fn insert(&mut self, from: u64, to: u64, values: &mut Values);
    /// Makes everything inserted durable.
    fn sync(&mut self);
    /// The greatest key `<= (entry, ts)` of that entry: its value's length.
    fn point(&self, entry: u32, ts: u64) -> Option<usize>;
    /// Reads [`SCAN`] keys of `entry` from `ts`: the bytes of their values.
    fn scan(&self, entry: u32, ts: u64) -> usize;
    /// Closes the store (every file handle and mapping released).
    fn close(self);
}

/// Opens a store in `dir` and loads [`KEYS`] keys, then syncs.
pub fn load<I: Index>(dir: &Path) -> I {
    let mut ix = I::open(dir);
    let mut values = Values::new(7);
    let mut i = 0;
    while i < KEYS {
        let to = (i + BATCH).min(KEYS);
        ix.insert(i, to, &mut values);
        i = to;
    }
    ix.sync();
    ix
}

/// Bytes the store's files take on disk (allocated blocks), everything under `dir`.
pub fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for e in fs::read_dir(dir)
        .expect("the store's folder is readable")
        .flatten()
    {
        let Ok(m) = e.metadata() else { continue };
        if m.is_dir() {
            total += disk_bytes(&e.path());
        } else {
            total += m.blocks() * 512;
        }
    }
    total
}

/// Drops the page cache's copy of every file under `dir` (clean pages only: the store was
/// synced and closed), so the next open reads from the disk. Only these files: the
/// machine's other users keep their cache.
pub fn evict(dir: &Path) {
    use std::os::fd::AsRawFd;
    for e in fs::read_dir(dir)
        .expect("the store's folder is readable")
        .flatten()
    {
        let p = e.path();
        if p.is_dir() {
            evict(&p);
        } else if let Ok(f) = fs::File::open(&p) {
            let _ = f.sync_all();
            // SAFETY: a valid open descriptor; the advice changes no memory of ours.
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    }
}

/// LMDB through heed, as `storage/src/db.rs` opens it.
pub struct Lmdb {
    env: heed::Env<heed::WithoutTls>,
    db: heed::Database<heed::types::Bytes, heed::types::Bytes>,
}

impl Index for Lmdb {
    const NAME: &'static str = "lmdb";
    fn open(dir: &Path) -> Lmdb {
        let mut opts = heed::EnvOpenOptions::new().read_txn_without_tls();
        opts.map_size(4 << 30).max_dbs(12).max_readers(1024);
        // SAFETY: the folder is this process's alone (a fresh temporary folder).
        let env = unsafe {
            opts.flags(heed::EnvFlags::NO_SYNC | heed::EnvFlags::NO_READ_AHEAD);
            opts.open(dir)
        }
        .expect("LMDB opens");
        let mut w = env.write_txn().expect("write txn");
        let db = env
            .create_database(&mut w, Some("chunks"))
            .expect("the chunks table");
        w.commit().expect("commit");
        Lmdb { env, db }
    }
    fn insert(&mut self, from: u64, to: u64, values: &mut Values) {
        let mut w = self.env.write_txn().expect("write txn");
        for i in from..to {
            self.db
                .put(&mut w, &key_of(i), &values.next())
                .expect("put");
        }
        w.commit().expect("commit");
    }
    fn sync(&mut self) {
        self.env.force_sync().expect("sync");
    }
    fn point(&self, entry: u32, ts: u64) -> Option<usize> {
        let r = self.env.read_txn().expect("read txn");
        match self
            .db
            .get_lower_than_or_equal_to(&r, &chunk_key(entry, ts))
            .expect("get")
        {
            Some((k, v)) if k[..4] == entry.to_be_bytes() => Some(v.len()),
            _ => None,
        }
    }
    fn scan(&self, entry: u32, ts: u64) -> usize {
        let r = self.env.read_txn().expect("read txn");
        let (from, to) = (chunk_key(entry, ts), chunk_key(entry, u64::MAX));
        let range = (
            std::ops::Bound::Included(&from[..]),
            std::ops::Bound::Included(&to[..]),
        );
        let mut bytes = 0;
        for item in self.db.range(&r, &range).expect("range").take(SCAN) {
            bytes += item.expect("item").1.len();
        }
        bytes
    }
    fn close(self) {
        self.env.prepare_for_closing().wait();
    }
}

/// RocksDB with its defaults (block cache, write buffer, WAL without fsync per write) and
/// no compression.
pub struct Rocks(rocksdb::DB);

impl Index for Rocks {
    const NAME: &'static str = "rocksdb";
    fn open(dir: &Path) -> Rocks {
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.set_compression_type(rocksdb::DBCompressionType::None);
        Rocks(rocksdb::DB::open(&o, dir).expect("RocksDB opens"))
    }
    fn insert(&mut self, from: u64, to: u64, values: &mut Values) {
        let mut b = rocksdb::WriteBatch::default();
        for i in from..to {
            b.put(key_of(i), values.next());
        }
        self.0.write(b).expect("write");
    }
    fn sync(&mut self) {
        self.0.flush_wal(true).expect("flush WAL");
        self.0.flush().expect("flush memtable");
    }
    fn point(&self, entry: u32, ts: u64) -> Option<usize> {
        let mut it = self.0.raw_iterator();
        it.seek_for_prev(chunk_key(entry, ts));
        match (it.key(), it.value()) {
            (Some(k), Some(v)) if k[..4] == entry.to_be_bytes() => Some(v.len()),
            _ => None,
        }
    }
    fn scan(&self, entry: u32, ts: u64) -> usize {
        let mut it = self.0.raw_iterator();
        it.seek(chunk_key(entry, ts));
        let mut bytes = 0;
        for _ in 0..SCAN {
            match (it.key(), it.value()) {
                (Some(k), Some(v)) if k[..4] == entry.to_be_bytes() => bytes += v.len(),
                _ => break,
            }
            it.next();
        }
        bytes
    }
    fn close(self) {
        drop(self.0);
    }
}

const REDB_TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("chunks");

/// redb with its defaults; load transactions commit with `Durability::None`, the sync is
/// one `Immediate` commit.
pub struct Redb(redb::Database);

impl Index for Redb {
    const NAME: &'static str = "redb";
    fn open(dir: &Path) -> Redb {
        let db = redb::Database::create(dir.join("index.redb")).expect("redb opens");
        let w = db.begin_write().expect("write txn");
        w.open_table(REDB_TABLE).expect("the chunks table");
        w.commit().expect("commit");
        Redb(db)
    }
    fn insert(&mut self, from: u64, to: u64, values: &mut Values) {
        let mut w = self.0.begin_write().expect("write txn");
        w.set_durability(redb::Durability::None);
        {
            let mut t = w.open_table(REDB_TABLE).expect("table");
            for i in from..to {
                t.insert(&key_of(i)[..], &values.next()[..])
                    .expect("insert");
            }
        }
        w.commit().expect("commit");
    }
    fn sync(&mut self) {
        let mut w = self.0.begin_write().expect("write txn");
        w.set_durability(redb::Durability::Immediate);
        w.commit().expect("commit");
    }
    fn point(&self, entry: u32, ts: u64) -> Option<usize> {
        let r = self.0.begin_read().expect("read txn");
        let t = r.open_table(REDB_TABLE).expect("table");
        let key = chunk_key(entry, ts);
        let found = t
            .range::<&[u8]>(..=&key[..])
            .expect("range")
            .next_back()
            .map(|item| item.expect("item"));
        match found {
            Some((k, v)) if k.value()[..4] == entry.to_be_bytes() => Some(v.value().len()),
            _ => None,
        }
    }
    fn scan(&self, entry: u32, ts: u64) -> usize {
        let r = self.0.begin_read().expect("read txn");
        let t = r.open_table(REDB_TABLE).expect("table");
        let (from, to) = (chunk_key(entry, ts), chunk_key(entry, u64::MAX));
        let mut bytes = 0;
        for item in t
            .range::<&[u8]>(&from[..]..=&to[..])
            .expect("range")
            .take(SCAN)
        {
            bytes += item.expect("item").1.value().len();
        }
        bytes
    }
    fn close(self) {
        drop(self.0);
    }
}

/// Debian's RocksDB 7.8 (`librocksdb-dev`, linked with `ROCKSDB_LIB_DIR`: the bundled C++
/// build takes hours on a loaded 2-core machine) has no write buffer manager in its C API,
/// which the `rocksdb` crate's `Options` references when dropping one. No write buffer
/// manager is ever made here, so this is never called; the feature `system-rocksdb` adds
/// it only for that link.
#[cfg(feature = "system-rocksdb")]
#[no_mangle]
pub extern "C" fn rocksdb_write_buffer_manager_destroy(_: *mut libc::c_void) {
    unreachable!("no write buffer manager is made by this bench")
}
