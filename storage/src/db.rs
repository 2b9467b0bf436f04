//! The index's LMDB environment (heed) and its tables' handles, opened together.
//!
//! Two owners share the environment as siblings: [`Index`](crate::index::Index) (the
//! record and block tables) and [`Feed`](crate::feed::Feed) (the change feed's tables).
//! They are in one environment so a record's feed item commits in its index transaction
//! (`commit.rs`, above both, opens that transaction). Table names are on-disk names
//! (`docs/storage-format.md`, "LMDB index").

use std::path::Path;

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, RoTxn, RwTxn, WithoutTls};

use crate::error::{Error, OpenError, Result};

/// A table: keys and values are bytes, encoded by `codec/`.
pub(crate) type Table = Database<Bytes, Bytes>;

/// The opened environment and every table in it. Cheap to clone (handles).
#[derive(Clone)]
pub(crate) struct Db {
    env: Env<WithoutTls>,
    pub chunks: Table,
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
        let attrs = env.create_database(&mut wtxn, Some("metas"))?;
        let blocks = env.create_database(&mut wtxn, Some("blocks"))?;
        let entries = env.create_database(&mut wtxn, Some("entries"))?;
        let info = env.create_database(&mut wtxn, Some("meta"))?;
        let feed_items = env.create_database(&mut wtxn, Some("feed"))?;
        let feed_state = env.create_database(&mut wtxn, Some("feed_state"))?;
        wtxn.commit()?;
        Ok(Db {
            env,
            chunks,
            attrs,
            blocks,
            entries,
            info,
            feed_items,
            feed_state,
        })
    }

    pub fn read_txn(&self) -> Result<RoTxn<'_, WithoutTls>> {
        Ok(self.env.read_txn()?)
    }

    pub fn write_txn(&self) -> Result<RwTxn<'_>> {
        Ok(self.env.write_txn()?)
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
