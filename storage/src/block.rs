//! Block files: creating them, appending frames, reading frames back, and streaming a
//! record's payload with its CRC checked at the end.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::block::{decode_block_header, encode_block_header, MAX_BLOCK_HEADER};
use crate::codec::frame::{
    check_head, decode_head, frame_crc_of, head_bytes_crc, FrameHead, HeadFields, FLAG_ZSTD,
};
use crate::codec::index::IndexValue;
use crate::codec::DecodeError;
use crate::error::{CorruptionError, Error, Result};
use crate::record::RecordMeta;

/// The file name of a block: its id in 16 hex digits, so names sort in id order.
pub fn block_path(entry_dir: &Path, id: u64) -> PathBuf {
    entry_dir.join(format!("{id:016x}.blk"))
}

pub fn parse_block_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".blk")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// A block file just created: its handle and its length (the header's).
pub struct NewBlock {
    pub file: Arc<File>,
    pub len: u64,
}

/// Creates a block file and writes its header; returns the file and the header length.
pub fn create_block(path: &Path, id: u64, base_ts: u64, entry: &str) -> Result<NewBlock> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(format!("creating block {path:?}"), e))?;
    let header = encode_block_header(id, base_ts, entry);
    file.write_all_at(&header, 0)
        .map_err(|e| Error::io(format!("writing block header {path:?}"), e))?;
    Ok(NewBlock {
        file: Arc::new(file),
        len: header.len() as u64,
    })
}

/// A block file opened by [`open_block`].
pub struct OpenedBlock {
    pub file: Arc<File>,
    pub base_ts: u64,
    /// The length of its header: where its first frame starts.
    pub header_len: u64,
}

/// Opens a block for reading (and in-place flag updates); returns it with its base ts.
pub fn open_block(path: &Path) -> Result<OpenedBlock> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(format!("opening block {path:?}"), e))?;
    let mut buf = vec![0u8; MAX_BLOCK_HEADER];
    let n =
        read_at_most(&file, &mut buf, 0).map_err(|e| Error::io(format!("reading {path:?}"), e))?;
    let h = decode_block_header(&buf[..n]).map_err(|_| CorruptionError::Record {
        path: path.to_path_buf(),
        offset: 0,
        reason: "bad block header".into(),
    })?;
    Ok(OpenedBlock {
        file: Arc::new(file),
        base_ts: h.base_ts,
        header_len: h.len as u64,
    })
}

/// Whether a block file ends before its header does (every byte of it a prefix of a header,
/// none past it): a crash between [`create_block`]'s creation of the file and its header
/// write. Such a file never held a record.
pub fn header_cut_short(path: &Path) -> Result<bool> {
    let mut buf = vec![0u8; MAX_BLOCK_HEADER + 1];
    let n = std::fs::File::open(path)
        .and_then(|f| read_at_most(&f, &mut buf, 0))
        .map_err(|e| Error::io(format!("reading {path:?}"), e))?;
    Ok(n <= MAX_BLOCK_HEADER && decode_block_header(&buf[..n]) == Err(DecodeError::Short))
}

pub fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> Error {
    Error::Corrupt(CorruptionError::Record {
        path: path.to_path_buf(),
        offset,
        reason: reason.into(),
    })
}

/// What a frame's own head must agree with: the index's length and timestamp for it, and
/// for a raw payload read into its own buffer, where the payload starts.
pub(crate) struct Expect {
    pub frame_len: u64,
    pub head_len: Option<usize>,
    pub ts: u64,
}

/// Why a frame was refused ([`check_frame`]); the reason of a
/// [`CorruptionError::Record`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameFault {
    #[error("{0:?}")]
    Head(DecodeError),
    #[error("frame length differs from the index")]
    Length,
    #[error("CRC32C mismatch")]
    Crc,
    #[error("index says timestamp {index}, block says {block}")]
    Timestamp { index: u64, block: u64 },
    #[error("zstd: {0}")]
    Zstd(io::Error),
    #[error("decompressed length differs")]
    RawLength,
}

/// The one check of a frame, wherever its bytes came from (read from a block file, mapped,
/// fetched from the object store): its head, its length against the index, its CRC32C, its
/// timestamp. `head` starts at the frame's first byte and `payload` follows it; a frame
/// in one piece is passed whole as `head` with an empty `payload`. Returns the head fields
/// (the stored payload starts `head_len` bytes into the frame).
pub(crate) fn check_frame(
    head: &[u8],
    payload: &[u8],
    base_ts: u64,
    want: &Expect,
) -> std::result::Result<HeadFields, FrameFault> {
    let h = check_head(head, base_ts).map_err(FrameFault::Head)?;
    if h.head_len as u64 + h.stored_len != want.frame_len
        || (head.len() + payload.len()) as u64 != want.frame_len
        || want.head_len.is_some_and(|n| n != h.head_len)
    {
        return Err(FrameFault::Length);
    }
    if frame_crc_of(head, payload) != h.crc {
        return Err(FrameFault::Crc);
    }
    if h.ts != want.ts {
        return Err(FrameFault::Timestamp {
            index: want.ts,
            block: h.ts,
        });
    }
    Ok(h)
}

/// Reads the whole frame the index value `v` locates and returns its original payload,
/// checked ([`check_frame`]) against `v` and the record's timestamp `ts`. A raw payload's
/// length tells where it starts, so head and payload land in separate buffers with one
/// `preadv` and the payload is never moved.
pub fn read_frame(
    file: &File,
    path: &dyn Fn() -> PathBuf,
    v: &IndexValue,
    base_ts: u64,
    ts: u64,
) -> Result<Vec<u8>> {
    match read_frame_in(file, path, v, base_ts, ts, false)? {
        Some(p) => Ok(p),
        None => Err(corrupt(&path(), v.offset, "frame cut short".to_string())),
    }
}

/// [`read_frame`] of a raw frame only if its bytes are in the page cache: one
/// `preadv2(RWF_NOWAIT)`, which never waits on the disk. `Ok(None)` when it would (or the
/// file system cannot say, or the frame is compressed): read it with [`read_frame`].
pub(crate) fn read_frame_now(
    file: &File,
    path: &dyn Fn() -> PathBuf,
    v: &IndexValue,
    base_ts: u64,
    ts: u64,
) -> Result<Option<Vec<u8>>> {
    read_frame_in(file, path, v, base_ts, ts, true)
}

/// `read_frame`, or with `now` only a raw frame whose bytes are all in the page cache
/// (`None` otherwise).
fn read_frame_in(
    file: &File,
    path: &dyn Fn() -> PathBuf,
    v: &IndexValue,
    base_ts: u64,
    ts: u64,
    now: bool,
) -> Result<Option<Vec<u8>>> {
    let (offset, frame_len, size) = (v.offset, v.frame_len, v.size);
    let corrupt_at = |reason: String| corrupt(&path(), offset, reason);
    // A raw payload's length tells where it starts; a compressed frame is read whole.
    let raw = v.raw();
    if now && !raw {
        return Ok(None);
    }
    let head_len = if raw {
        (frame_len - size) as usize
    } else {
        frame_len as usize
    };
    // Ordinary heads are a dozen bytes: keep them on the stack.
    let mut stack = [0u8; 128];
    let mut heap = Vec::new();
    let head: &mut [u8] = if head_len <= stack.len() {
        &mut stack[..head_len]
    } else {
        heap.resize(head_len, 0);
        &mut heap
    };
    // The payload buffer is not zero-filled first: the read overwrites all of it or the
    // frame is refused (zero-filling cost as much as the CRC on 100 KB range reads).
    let mut payload: Vec<u8> = Vec::with_capacity(if raw { size as usize } else { 0 });
    let n = if now {
        match preadv_now(file, head, payload.spare_capacity_mut(), offset) {
            Some(n) => n,
            None => return Ok(None),
        }
    } else {
        preadv2(file, head, payload.spare_capacity_mut(), offset)
            .map_err(|e| Error::io(format!("reading {:?}", path()), e))?
    };
    if n as u64 != frame_len {
        if now {
            // A short count without waiting: part of the frame is not in the page cache.
            return Ok(None);
        }
        return Err(corrupt_at(format!(
            "frame cut short: {n} of {frame_len} bytes"
        )));
    }
    if raw {
        // SAFETY: `preadv2` filled both buffers completely (n == head_len + size), so the
        // first `size` bytes of the capacity are initialised.
        unsafe { payload.set_len(size as usize) };
    }
    let want = Expect {
        frame_len,
        head_len: raw.then_some(head_len),
        ts,
    };
    let h = check_frame(head, &payload, base_ts, &want).map_err(|f| corrupt_at(f.to_string()))?;
    if raw {
        return Ok(Some(payload));
    }
    stored_payload(&h, &head[h.head_len..])
        .map(Some)
        .map_err(|f| corrupt_at(f.to_string()))
}

/// Set once `RWF_NOWAIT` is refused (a file system without it): no more attempts.
static NOWAIT_UNSUPPORTED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// One `preadv2(RWF_NOWAIT)` of two buffers at `offset`: the bytes read, or `None` when
/// the call would have waited on the disk (`EAGAIN`) or failed in any way (the caller
/// reads the usual way, which reports a real error). A short count means part of the range
/// was not cached; the caller treats it as `None`.
fn preadv_now(
    file: &File,
    a: &mut [u8],
    b: &mut [std::mem::MaybeUninit<u8>],
    offset: u64,
) -> Option<usize> {
    use std::os::unix::io::AsRawFd;
    use std::sync::atomic::Ordering;
    if NOWAIT_UNSUPPORTED.load(Ordering::Relaxed) {
        return None;
    }
    let iov = [
        libc::iovec {
            iov_base: a.as_mut_ptr().cast(),
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        },
    ];
    // SAFETY: both iovecs point into live, exclusively borrowed buffers of the given
    // lengths, and the fd stays open for the duration of the call.
    let n = unsafe {
        libc::preadv2(
            file.as_raw_fd(),
            iov.as_ptr(),
            2,
            offset as libc::off_t,
            libc::RWF_NOWAIT,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        if matches!(
            e.raw_os_error(),
            Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
        ) {
            NOWAIT_UNSUPPORTED.store(true, Ordering::Relaxed);
        }
        return None;
    }
    usize::try_from(n).ok()
}

/// The original payload of a CRC-checked frame from its stored bytes (decompressed if the
/// frame says so).
pub(crate) fn stored_payload(
    h: &HeadFields,
    stored: &[u8],
) -> std::result::Result<Vec<u8>, FrameFault> {
    if h.flags & FLAG_ZSTD == 0 {
        return Ok(stored.to_vec());
    }
    let out = zstd::bulk::decompress(stored, h.raw_len as usize).map_err(FrameFault::Zstd)?;
    if out.len() as u64 != h.raw_len {
        return Err(FrameFault::RawLength);
    }
    Ok(out)
}

/// `preadv` of two buffers at `offset`, retried until both are full or the file ends. The
/// second buffer may be uninitialised: the kernel only writes into it; the caller may treat
/// its first `answer - a.len()` bytes as initialised.
fn preadv2(
    file: &File,
    a: &mut [u8],
    b: &mut [std::mem::MaybeUninit<u8>],
    offset: u64,
) -> io::Result<usize> {
    use std::os::unix::io::AsRawFd;
    let total = a.len() + b.len();
    let mut done = 0usize;
    while done < total {
        let (pa, pb): (&mut [u8], &mut [std::mem::MaybeUninit<u8>]) = if done < a.len() {
            let (_, ra) = a.split_at_mut(done);
            (ra, &mut b[..])
        } else {
            let (_, rb) = b.split_at_mut(done - a.len());
            (&mut [][..], rb)
        };
        let iov = [
            libc::iovec {
                iov_base: pa.as_mut_ptr().cast(),
                iov_len: pa.len(),
            },
            libc::iovec {
                iov_base: pb.as_mut_ptr().cast(),
                iov_len: pb.len(),
            },
        ];
        // SAFETY: both iovecs point into live, exclusively borrowed buffers of the given
        // lengths, and the fd stays open for the duration of the call.
        let n = unsafe {
            libc::preadv(
                file.as_raw_fd(),
                iov.as_ptr(),
                2,
                (offset + done as u64) as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    Ok(done)
}

/// Reads the head of a frame at `offset`, growing the read until the head fits.
/// `Ok(None)`: the file ends inside the head (a torn tail).
pub fn read_head(
    file: &File,
    offset: u64,
    file_len: u64,
    base_ts: u64,
) -> io::Result<Result<Option<FrameHead>, &'static str>> {
    let mut want: u64 = 4096;
    loop {
        let avail = file_len.saturating_sub(offset);
        let n = want.min(avail) as usize;
        let mut buf = vec![0u8; n];
        let got = read_at_most(file, &mut buf, offset)?;
        buf.truncate(got);
        match decode_head(&buf, base_ts) {
            Ok(h) => return Ok(Ok(Some(h))),
            Err(DecodeError::Garbage(why)) => return Ok(Err(why)),
            Err(DecodeError::Crc) => return Ok(Err("bad CRC")),
            Err(DecodeError::Short) if (got as u64) < want || want >= (80 << 20) => {
                return Ok(Ok(None))
            }
            Err(DecodeError::Short) => want *= 8,
        }
    }
}

/// Streams the CRC over `[offset + head_len, offset + frame_len)` and compares.
pub fn verify_frame(
    file: &File,
    offset: u64,
    head: &FrameHead,
    head_bytes_crc: u32,
) -> io::Result<bool> {
    let mut crc = head_bytes_crc;
    let mut pos = offset + head.head_len as u64;
    let end = offset + head.frame_len();
    let mut buf = vec![0u8; (1 << 20).min(head.stored_len as usize).max(1)];
    while pos < end {
        let n = ((end - pos) as usize).min(buf.len());
        let got = read_at_most(file, &mut buf[..n], pos)?;
        if got < n {
            return Ok(false);
        }
        crc = crate::crc::crc32c_append(crc, &buf[..n]);
        pos += n as u64;
    }
    Ok(crc == head.crc)
}

/// CRC of the CRC-covered part of a frame's head, read from the file.
pub fn head_crc(file: &File, offset: u64, head: &FrameHead) -> io::Result<u32> {
    let mut buf = vec![0u8; head.head_len];
    read_at_most(file, &mut buf, offset)?;
    Ok(head_bytes_crc(&buf))
}

/// A byte range of a file as a `Read`.
struct FileSlice {
    file: Arc<File>,
    pos: u64,
    end: u64,
}

impl Read for FileSlice {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = ((self.end - self.pos) as usize).min(buf.len());
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read_at(&mut buf[..n], self.pos)?;
        if got == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "block file ends inside a record",
            ));
        }
        self.pos += got as u64;
        Ok(got)
    }
}

/// Passes bytes through while computing their CRC; fails at the end on a mismatch.
struct CrcCheck<R> {
    inner: R,
    crc: u32,
    expected: u32,
    what: String,
}

impl<R: Read> Read for CrcCheck<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            if self.crc != self.expected {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("corrupt record {}: CRC32C mismatch", self.what),
                ));
            }
        } else {
            self.crc = crate::crc::crc32c_append(self.crc, &buf[..n]);
        }
        Ok(n)
    }
}

impl CrcCheck<FileSlice> {
    /// Up to `max` bytes in a new buffer, read into its capacity without zero-filling it
    /// first; empty at the end, where the CRC is checked as `read` does.
    fn read_chunk(&mut self, max: usize) -> io::Result<Vec<u8>> {
        let n = ((self.inner.end - self.inner.pos) as usize).min(max);
        if n == 0 {
            let mut probe = [0u8; 1];
            // At the end `read` answers 0 after checking the CRC (or fails).
            let _at_end = self.read(&mut probe)?;
            return Ok(Vec::new());
        }
        let mut out: Vec<u8> = Vec::with_capacity(n);
        let got = preadv2(
            &self.inner.file,
            &mut [],
            &mut out.spare_capacity_mut()[..n],
            self.inner.pos,
        )?;
        if got < n {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "block file ends inside a record",
            ));
        }
        // SAFETY: `preadv2` filled all `n` bytes (<= capacity) of the spare capacity.
        unsafe { out.set_len(n) };
        self.inner.pos += n as u64;
        self.crc = crate::crc::crc32c_append(self.crc, &out);
        Ok(out)
    }
}

/// A record's payload as a stream. The CRC is checked when the end is reached: a reader
/// that returns an error there has served corrupted bytes and they must be discarded.
pub struct RecordReader {
    meta: RecordMeta,
    body: Body,
}

type Zstd = zstd::stream::read::Decoder<'static, io::BufReader<CrcCheck<FileSlice>>>;

enum Body {
    Raw(CrcCheck<FileSlice>),
    Zstd(Box<Zstd>),
    /// A payload already read and checked (a tiered record: `check_frame_bytes`).
    Checked(io::Cursor<Vec<u8>>),
}

impl RecordReader {
    pub(crate) fn open(
        file: Arc<File>,
        path: &Path,
        offset: u64,
        frame_len: u64,
        base_ts: u64,
    ) -> Result<RecordReader> {
        let file_len = file
            .metadata()
            .map_err(|e| Error::io(format!("stat {path:?}"), e))?
            .len();
        if offset + frame_len > file_len {
            return Err(corrupt(
                path,
                offset,
                "record extends past the end of its block",
            ));
        }
        let head = read_head(&file, offset, offset + frame_len, base_ts)
            .map_err(|e| Error::io(format!("reading {path:?}"), e))?
            .map_err(|why| corrupt(path, offset, why))?
            .ok_or_else(|| corrupt(path, offset, "record head cut short"))?;
        let hcrc = head_crc(&file, offset, &head)
            .map_err(|e| Error::io(format!("reading {path:?}"), e))?;
        let slice = FileSlice {
            file,
            pos: offset + head.head_len as u64,
            end: offset + head.frame_len(),
        };
        let check = CrcCheck {
            inner: slice,
            crc: hcrc,
            expected: head.crc,
            what: format!("in {path:?} at offset {offset}"),
        };
        let body = if head.flags & FLAG_ZSTD != 0 {
            Body::Zstd(Box::new(
                zstd::stream::read::Decoder::new(check)
                    .map_err(|e| Error::io("starting zstd decoder", e))?,
            ))
        } else {
            Body::Raw(check)
        };
        Ok(RecordReader {
            meta: RecordMeta {
                ts: head.ts,
                size: head.raw_len,
                content_type: head.content_type,
                labels: head.labels,
            },
            body,
        })
    }

    /// A reader over a payload already read whole and CRC-checked.
    pub(crate) fn checked(meta: RecordMeta, data: Vec<u8>) -> RecordReader {
        RecordReader {
            meta,
            body: Body::Checked(io::Cursor::new(data)),
        }
    }

    pub fn meta(&self) -> &RecordMeta {
        &self.meta
    }
}

impl RecordReader {
    /// Up to `max` bytes of the payload in a new buffer; empty at the end, where (as with
    /// `read`) the CRC is checked and a mismatch is an error. A raw payload is read straight
    /// into the buffer's capacity, never zero-filled first (for large records the
    /// zero-filling cost as much as the CRC).
    pub fn read_chunk(&mut self, max: usize) -> io::Result<Vec<u8>> {
        match &mut self.body {
            Body::Raw(r) => r.read_chunk(max),
            Body::Zstd(_) | Body::Checked(_) => {
                let mut buf = vec![0u8; max.max(1)];
                let n = self.read(&mut buf)?;
                buf.truncate(n);
                Ok(buf)
            }
        }
    }
}

impl Read for RecordReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.body {
            Body::Raw(r) => r.read(buf),
            Body::Checked(c) => c.read(buf),
            Body::Zstd(d) => {
                let n = d.read(buf)?;
                if n == 0 && !buf.is_empty() {
                    // The decoder may stop at the end of the zstd frame without reading the
                    // stored bytes to their end; drain them so the CRC check runs.
                    io::copy(d.get_mut(), &mut io::sink())?;
                }
                Ok(n)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::frame::{encode_head, seal_head, HeadSpec};

    /// A sealed raw frame of `payload` at `ts` (base 1000), and its head's length.
    fn frame(payload: &[u8], ts: u64) -> (Vec<u8>, usize) {
        let labels = crate::Labels::new();
        let mut head = encode_head(&HeadSpec {
            flags: 0,
            ts,
            base_ts: 1000,
            stored_len: payload.len() as u64,
            raw_len: payload.len() as u64,
            content_type: "text/plain",
            labels: &labels,
            padded: false,
        })
        .bytes;
        seal_head(&mut head, crate::crc::crc32c(payload), payload.len() as u64);
        let head_len = head.len();
        head.extend_from_slice(payload);
        (head, head_len)
    }

    /// The three frame checks that were twins (a frame read from a file, mapped, fetched
    /// from the object store) are one: a frame passed whole and the same frame split into
    /// head and payload get the same answer, and each fault is told apart.
    #[test]
    fn check_frame_is_one_check_for_whole_and_split_frames() {
        let (f, hl) = frame(b"hello, frame", 1234);
        let want = Expect {
            frame_len: f.len() as u64,
            head_len: Some(hl),
            ts: 1234,
        };
        let whole = check_frame(&f, &[], 1000, &want).unwrap();
        let split = check_frame(&f[..hl], &f[hl..], 1000, &want).unwrap();
        assert_eq!((whole.head_len, whole.ts), (hl, 1234));
        assert_eq!((split.head_len, split.stored_len), (hl, 12));

        let mut flipped = f.clone();
        *flipped.last_mut().unwrap() ^= 1;
        for (head, payload) in [(&flipped[..], &[][..]), (&flipped[..hl], &flipped[hl..])] {
            let e = check_frame(head, payload, 1000, &want).unwrap_err();
            assert!(matches!(e, FrameFault::Crc), "{e}");
        }
        let e = check_frame(&f, &[], 1000, &Expect { ts: 1235, ..want }).unwrap_err();
        assert_eq!(e.to_string(), "index says timestamp 1235, block says 1234");
        let longer = Expect {
            frame_len: f.len() as u64 + 1,
            head_len: None,
            ts: 1234,
        };
        assert!(matches!(
            check_frame(&f, &[], 1000, &longer),
            Err(FrameFault::Length)
        ));
        let moved = Expect {
            frame_len: f.len() as u64,
            head_len: Some(hl + 1),
            ts: 1234,
        };
        assert!(matches!(
            check_frame(&f, &[], 1000, &moved),
            Err(FrameFault::Length)
        ));
        let e = check_frame(&f[..3], &[], 1000, &want).unwrap_err();
        assert!(matches!(e, FrameFault::Head(_) | FrameFault::Length), "{e}");
    }
}
