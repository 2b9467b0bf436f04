//! The index's LMDB environment (heed) and its tables' handles, opened together.
//!
//! Two owners share the environment as siblings: [`Index`](crate::index::Index) (the
//! record and block tables) and [`Feed`](crate::feed::Feed) (the change feed's tables).
//! They are in one environment so a record's feed item commits in its index transaction
//! (`commit.rs`, above both, opens that transaction). Table names are on-disk names
//! (`docs/storage-format.md`, "LMDB index").

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, RoTxn, RwTxn, WithoutTls};

use crate::error::{Error, OpenError, Result};
use crate::resident::IndexFiles;

/// A table: keys and values are bytes, encoded by `codec/`.
pub(crate) type Table = Database<Bytes, Bytes>;

/// The opened environment and every table in it. Cheap to clone (handles).
#[derive(Clone)]
pub(crate) struct Db {
    env: Env<WithoutTls>,
    pub chunks: Table,
    /// The `open` table: each entry's open (last) chunk.
    pub open_chunks: Table,
    /// The `metas` table: interned attrs.
    pub attrs: Table,
    pub blocks: Table,
    pub entries: Table,
    /// The `meta` table: the format version.
    pub info: Table,
    /// The change feed's `feed` table.
    pub feed_items: Table,
    /// The change feed's `feed_state` table.
    pub feed_state: Table,
    /// The index files, to ask the page cache about ([`Db::read_txn_resident`]).
    files: Option<Arc<IndexFiles>>,
    /// How much of the data file the last check covered (it only grows): the meta pages
    /// are read before the used length is known, so the check starts from the last one.
    checked: Arc<AtomicU64>,
}

impl Db {
    pub fn open(dir: &Path, map_size: usize) -> Result<Db> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {dir:?}"), e))?;
        let mut opts = EnvOpenOptions::new().read_txn_without_tls();
        opts.map_size(map_size).max_dbs(12).max_readers(1024);
        // SAFETY: the data folder is locked by this process (see `Store::open`), so no
        // other process maps the same file; NO_SYNC because the store syncs on its own
        // terms (sync policy), and the index can be rebuilt from the block files.
        let env = unsafe {
            opts.flags(EnvFlags::NO_SYNC | EnvFlags::NO_READ_AHEAD);
            opts.open(dir)
        }
        .map_err(|e| OpenError::Index {
            path: dir.to_path_buf(),
            map_size,
            reason: e.to_string(),
        })?;
        let mut wtxn = env.write_txn()?;
        let chunks = env.create_database(&mut wtxn, Some("chunks"))?;
        let open_chunks = env.create_database(&mut wtxn, Some("open"))?;
        let attrs = env.create_database(&mut wtxn, Some("metas"))?;
        let blocks = env.create_database(&mut wtxn, Some("blocks"))?;
        let entries = env.create_database(&mut wtxn, Some("entries"))?;
        let info = env.create_database(&mut wtxn, Some("meta"))?;
        let feed_items = env.create_database(&mut wtxn, Some("feed"))?;
        let feed_state = env.create_database(&mut wtxn, Some("feed_state"))?;
        wtxn.commit()?;
        let files = IndexFiles::open(dir).map(Arc::new);
        Ok(Db {
            env,
            chunks,
            open_chunks,
            attrs,
            blocks,
            entries,
            info,
            feed_items,
            feed_state,
            files,
            checked: Arc::new(AtomicU64::new(0)),
        })
    }

    pub fn read_txn(&self) -> Result<RoTxn<'_, WithoutTls>> {
        Ok(self.env.read_txn()?)
    }

    pub fn write_txn(&self) -> Result<RwTxn<'_>> {
        Ok(self.env.write_txn()?)
    }

    /// A read transaction begun only if it and the look-ups in it cannot wait on the disk:
    /// every page LMDB may touch (the lock file, the data file up to its last used page,
    /// at most `max_bytes` of it) is in the page cache ([`IndexFiles`]); `None` otherwise.
    pub fn read_txn_resident(&self, max_bytes: u64) -> Result<Option<RoTxn<'_, WithoutTls>>> {
        let Some(files) = &self.files else {
            return Ok(None);
        };
        // LMDB's page size is the system's.
        let page = crate::resident::page_size();
        // Reading the last used page number reads the meta pages (the first two): check
        // them, with everything the last check covered, first.
        let checked = self.checked.load(Ordering::Relaxed).max(2 * page);
        if checked > max_bytes || !files.cached(0..checked) {
            return Ok(None);
        }
        let used = |info: heed::EnvInfo| {
            (info.last_page_number as u64)
                .saturating_add(1)
                .saturating_mul(page)
        };
        let len = used(self.env.info());
        if len > checked {
            if len > max_bytes || !files.data_cached(checked..len) {
                return Ok(None);
            }
            self.checked.fetch_max(len, Ordering::Relaxed);
        }
        let len = len.max(checked);
        let txn = self.env.read_txn()?;
        // A commit between the check and the transaction's start may have used more pages:
        // the pages this transaction can reach end at or before the last used page now.
        if used(self.env.info()) > len {
            return Ok(None);
        }
        Ok(Some(txn))
    }

    /// Makes every committed transaction durable (the environment runs with `NO_SYNC`).
    pub fn force_sync(&self) -> Result<()> {
        Ok(self.env.force_sync()?)
    }

    /// The `records` table of index version 1, if the file still has it.
    pub fn legacy_records(&self, txn: &RwTxn<'_>) -> Result<Option<Table>> {
        Ok(self.env.open_database(txn, Some("records"))?)
    }
}
