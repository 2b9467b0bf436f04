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
//! bucket with a HARD quota refuses a spool as soon as what it received cannot fit. A
//! payload whose length was announced ([`Spool::announce`]) is judged whole at its first
//! append: a FIFO bucket refuses one it could never hold (larger than its quota, or more
//! than the disk could take with the whole bucket given up) before evicting anything for
//! its first bytes.

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
    /// The payload's length as its sender announced it, if it did.
    pub(super) announced: Option<u64>,
    pub(super) store: Store,
    pub(super) bucket: Arc<Bucket>,
}

impl Spool {
    /// Appends received bytes. Fails with `WriteError::DiskFull` when the disk is short of
    /// them, `WriteError::QuotaExceeded` as soon as a HARD quota cannot fit the total, and
    /// `WriteError::LargerThanQuota` as soon as the payload is larger than a whole HARD or
    /// FIFO quota.
    pub fn append(&mut self, data: &[u8]) -> Result<()> {
        let n = data.len() as u64;
        self.admit(n)?;
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
        self.admit(n)?;
        write_pieces_at(&self.file, pieces, self.base + self.len)
            .map_err(|e| Error::io("writing to a spool file", e))?;
        for p in pieces {
            self.crc = crate::crc::crc32c_append(self.crc, p);
        }
        self.len += n;
        Ok(())
    }

    /// The payload's whole length, as its sender announced it (a `Content-Length`): each
    /// append is then admitted for what is still to come too, so a FIFO bucket refuses a
    /// payload it could never hold before it evicts anything for its first bytes. A wrong
    /// announcement only moves that judgement: the bytes that arrive are what is stored
    /// (and checked against the announcement by the caller).
    pub fn announce(&mut self, len: u64) {
        self.announced = Some(len);
    }

    fn admit(&self, n: u64) -> Result<()> {
        let total = self.len + n;
        let whole = self.announced.map_or(total, |a| a.max(total));
        self.store
            .admit_received(&self.bucket, total, n, whole - self.len)
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
