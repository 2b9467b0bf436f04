//! Receiving a payload before anything is reserved or locked.
//!
//! A [`Spool`] is an anonymous temporary file (`O_TMPFILE`) in the data folder: it has no
//! name, so a crash leaves nothing behind. A caller whose payload arrives slowly (a network
//! body) appends to it as bytes arrive, holding no engine lock and no quota reservation;
//! [`Store::write_spooled`] then reserves exactly what was received and copies it into the
//! entry's active block (`copy_file_range` where the payload is stored raw). A body that
//! stops short is a spool dropped: nothing stored, reserved or evicted.
//!
//! The spool's bytes are real disk space, so each append passes the free-space guard (a
//! FIFO bucket gives up old blocks for bytes received, never for bytes promised), and a
//! bucket with a HARD quota refuses a spool as soon as what it received cannot fit.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::bucket::Bucket;
use crate::error::{Error, Result};
use crate::spool::write_pieces_at;
use crate::store::Store;

/// A payload being received; see the module documentation.
pub struct Spool {
    pub(super) file: File,
    /// Where the payload starts in the file: room kept in front of it for a block header
    /// and a frame head, so the file can become the record's block (see [`Store::spool_for`]).
    pub(super) base: u64,
    pub(super) len: u64,
    pub(super) crc: u32,
    pub(super) store: Store,
    pub(super) bucket: Arc<Bucket>,
}

impl Spool {
    /// Appends received bytes. Fails with `WriteError::DiskFull` when the disk is short of
    /// them, and `WriteError::QuotaExceeded` as soon as a HARD quota cannot fit the total.
    pub fn append(&mut self, data: &[u8]) -> Result<()> {
        let n = data.len() as u64;
        self.store.admit_received(&self.bucket, self.len + n, n)?;
        self.file
            .write_all_at(data, self.base + self.len)
            .map_err(|e| Error::io("writing to a spool file", e))?;
        self.len += n;
        self.crc = crate::crc::crc32c_append(self.crc, data);
        Ok(())
    }

    /// Appends several received pieces with one admission and one `pwritev` (a network body
    /// arrives in pieces; gathering them into one buffer first would be a copy).
    pub fn append_pieces(&mut self, pieces: &[&[u8]]) -> Result<()> {
        let n: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        self.store.admit_received(&self.bucket, self.len + n, n)?;
        write_pieces_at(&self.file, pieces, self.base + self.len)
            .map_err(|e| Error::io("writing to a spool file", e))?;
        for p in pieces {
            self.crc = crate::crc::crc32c_append(self.crc, p);
        }
        self.len += n;
        Ok(())
    }

    /// Bytes received so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Where the payload starts in [`Spool::file`].
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// CRC32C of every byte received (computed as they were appended).
    pub fn crc(&self) -> u32 {
        self.crc
    }

    /// The whole payload, for small spools.
    pub(crate) fn read_all(&self) -> Result<Vec<u8>> {
        let mut data = vec![0u8; self.len as usize];
        self.file
            .read_exact_at(&mut data, self.base)
            .map_err(|e| Error::io("reading a spool file", e))?;
        Ok(data)
    }
}
