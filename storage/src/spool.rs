//! The byte-moving helpers of spooled writes ([`Spool`](crate::Spool), in `store/spool.rs`):
//! writes of several pieces with `pwritev`, copies between files with `copy_file_range`,
//! and a reader over a range of a file.
use std::fs::File;
use std::os::unix::fs::FileExt;

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

pub(crate) fn copy_by_buffer(
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
