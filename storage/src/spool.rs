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
use crate::*;

/// A payload being received; see the module documentation.
pub struct Spool {
    file: File,
    /// Where the payload starts in the file: room kept in front of it for a block header
    /// and a frame head, so the file can become the record's block (see [`Store::spool_for`]).
    base: u64,
    len: u64,
    crc: u32,
    store: Store,
    bucket: Arc<Bucket>,
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
        self.crc = crc32c::crc32c_append(self.crc, data);
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
            self.crc = crc32c::crc32c_append(self.crc, p);
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

impl Store {
    /// Starts receiving a payload for `bucket` (see [`Spool`]): nothing is reserved yet.
    pub fn spool(&self, bucket: &str) -> Result<Spool> {
        self.new_spool(bucket, 0)
    }

    /// As [`Store::spool`], for the record `meta` of `entry`: the payload is received at
    /// the offset it would have as the only frame of a new block of that entry, so that a
    /// large raw payload becomes its block without being copied ([`Store::write_spooled`]
    /// writes the block header and the frame head in front of it and links the file in).
    pub fn spool_for(&self, bucket: &str, entry: &str, meta: &WriteMeta) -> Result<Spool> {
        self.new_spool(bucket, crate::link::room_for(entry, meta))
    }

    fn new_spool(&self, bucket: &str, base: u64) -> Result<Spool> {
        let bucket = self.get_bucket(bucket)?;
        let file = tempfile::tempfile_in(self.path())
            .map_err(|e| Error::io("creating a spool file in the data folder", e))?;
        Ok(Spool {
            file,
            base,
            len: 0,
            crc: 0,
            store: self.clone(),
            bucket,
        })
    }
}

/// Writes `pieces` one after the other at `offset` with `pwritev`, resuming after a short
/// write.
pub(crate) fn write_pieces_at(
    file: &File,
    pieces: &[&[u8]],
    mut offset: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut rest: Vec<&[u8]> = pieces.iter().copied().filter(|p| !p.is_empty()).collect();
    while !rest.is_empty() {
        let iov: Vec<libc::iovec> = rest
            .iter()
            .take(512)
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        // SAFETY: every iovec points into a live slice for the duration of the call.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                offset as libc::off_t,
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        offset += n as u64;
        let mut left = n as usize;
        while left > 0 {
            let first = rest[0];
            if left >= first.len() {
                left -= first.len();
                rest.remove(0);
            } else {
                rest[0] = &first[left..];
                left = 0;
            }
        }
    }
    Ok(())
}

/// Copies `len` bytes from `src` at `src_off` to `dst` at `dst_off`, in the kernel where the
/// file system allows it.
pub(crate) fn copy_range(
    src: &File,
    mut src_off: u64,
    dst: &File,
    mut dst_off: u64,
    len: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let end = src_off + len;
    while src_off < end {
        let mut i = src_off as libc::loff_t;
        let mut o = dst_off as libc::loff_t;
        let want = (end - src_off).min(1 << 30) as usize;
        // SAFETY: both descriptors are open for the duration of the call and the offsets
        // are valid pointers to locals.
        let n = unsafe {
            libc::copy_file_range(src.as_raw_fd(), &mut i, dst.as_raw_fd(), &mut o, want, 0)
        };
        if n > 0 {
            src_off += n as u64;
            dst_off += n as u64;
            continue;
        }
        let err = std::io::Error::last_os_error();
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the spool file is shorter than it was",
            ));
        }
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP) => {
                return copy_by_buffer(src, src_off, dst, dst_off, end - src_off)
            }
            _ => return Err(err),
        }
    }
    Ok(())
}

fn copy_by_buffer(
    src: &File,
    mut src_off: u64,
    dst: &File,
    mut dst_off: u64,
    len: u64,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    let end = src_off + len;
    while src_off < end {
        let n = ((end - src_off) as usize).min(buf.len());
        src.read_exact_at(&mut buf[..n], src_off)?;
        dst.write_all_at(&buf[..n], dst_off)?;
        src_off += n as u64;
        dst_off += n as u64;
    }
    Ok(())
}

/// Reads a spool from the start (for the compressing path).
pub(crate) struct SpoolReader<'a> {
    pub file: &'a File,
    pub pos: u64,
    pub end: u64,
}

impl std::io::Read for SpoolReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = ((self.end - self.pos) as usize).min(buf.len());
        if n == 0 {
            return Ok(0);
        }
        self.file.read_exact_at(&mut buf[..n], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}
