//! Payloads handed out without a copy: a record's frame mapped from its block file.
//!
//! A read that copies a large payload into a buffer of its own touches every byte twice
//! (kernel to buffer, buffer to socket) and asks the allocator for fresh pages each time:
//! on the 2-vCPU machines of `docs/benchmarks/`, first touches of fresh memory cost more
//! than the copy (`clear_page` in the profiles). A mapped frame is the page cache itself:
//! the payload goes from there to the socket in one copy, as the `limit` server's reads do.
//!
//! A point read maps its frame alone. A query maps a *window* of each block it reads
//! ([`Windows`]): the frames of the records it listed in that block, up to [`WINDOW_MAX`],
//! once, and slices every payload out of it, so a 100 KiB record costs neither a `pread`
//! into a buffer nor an `mmap` + `munmap` of its own
//! (`docs/benchmarks/range-read-2026-11-23.md`).
//!
//! Safety of the mapping: a mapped file must not shrink under the mapped bytes (that is a
//! `SIGBUS`). Block files only ever shrink in two places: recovery at open (no reader yet),
//! and [`crate::write`]'s undo of a write whose index commit failed, which cuts back to the
//! length before that write: past every committed record, so past every frame a reader can
//! find in the index and map (a window spans only such frames: [`Span`]). Removed blocks are unlinked, never truncated: a mapping keeps
//! an unlinked file's pages until it is dropped (as an open descriptor does).

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use memmap2::{Mmap, MmapOptions};

use crate::block::{check_frame, Expect};
use crate::codec::index::IndexValue;
use crate::error::{CorruptionError, Error, Result};

/// Payloads at least this large are mapped; smaller ones are read into a buffer (a
/// `preadv` costs less than `mmap`, its page-table setup and `munmap`).
pub const MAP_MIN: u64 = 256 << 10;
/// ... and at most this large: a larger payload is streamed in chunks, so its first bytes
/// leave before the whole of it was read and checked.
pub const MAP_MAX: u64 = 64 << 20;

/// A payload that cannot be mapped (compressed) is read whole into memory up to this
/// size; a larger one is streamed.
pub const MEMORY_MAX: u64 = 1 << 20;

/// A record's payload, CRC-checked: mapped from its block, a slice of a range fetched
/// from the object store (a tiered record stored raw), or in memory (small records,
/// compressed ones).
pub enum Payload {
    Mapped(MappedPayload),
    Shared(SharedPayload),
    Memory(Vec<u8>),
}

impl Payload {
    pub fn len(&self) -> usize {
        self.as_ref().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload in a buffer of its own (a copy unless it already is one).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Payload::Memory(v) => v,
            other => other.as_ref().to_vec(),
        }
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        match self {
            Payload::Mapped(m) => m.as_ref(),
            Payload::Shared(s) => s.as_ref(),
            Payload::Memory(v) => v,
        }
    }
}

/// A payload inside a range of a tiered block held in memory (the tier's range cache
/// holds the same buffer): handed out without copying it out of the range. It keeps the
/// whole range alive until dropped, also after the cache let it go.
pub struct SharedPayload {
    buf: std::sync::Arc<Vec<u8>>,
    range: std::ops::Range<usize>,
}

impl SharedPayload {
    /// `range` of `buf`; `None` if it is not inside it.
    pub(crate) fn new(
        buf: std::sync::Arc<Vec<u8>>,
        range: std::ops::Range<usize>,
    ) -> Option<SharedPayload> {
        buf.get(range.clone())?;
        Some(SharedPayload { buf, range })
    }
}

impl AsRef<[u8]> for SharedPayload {
    fn as_ref(&self) -> &[u8] {
        // `new` checked the range; the buffer is never changed while shared.
        self.buf.get(self.range.clone()).unwrap_or_default()
    }
}

/// A payload mapped read-only from its block file: a slice of a mapping of the block (its
/// frame alone for a point read, a window of several frames for a query's records:
/// [`Windows`]), which it keeps alive until dropped.
pub struct MappedPayload {
    map: Arc<Mmap>,
    range: std::ops::Range<usize>,
}

impl AsRef<[u8]> for MappedPayload {
    fn as_ref(&self) -> &[u8] {
        // `frame_in` checked the range against the mapping.
        self.map.get(self.range.clone()).unwrap_or_default()
    }
}

impl MappedPayload {
    /// The mapping this payload is a slice of: equal for the payloads sliced from one
    /// window (while any of them is alive), different for payloads of different mappings.
    /// A reader holding many payloads counts with it the mappings they keep alive.
    pub fn mapping_id(&self) -> usize {
        Arc::as_ptr(&self.map) as usize
    }
}

impl std::fmt::Debug for MappedPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MappedPayload({} bytes)", self.as_ref().len())
    }
}

/// A query maps at most this many bytes of a block at once (more only for a frame that is
/// larger itself). A mapping stays alive while any payload sliced from it waits to be sent.
pub const WINDOW_MAX: u64 = 8 << 20;

/// A window of records smaller than this, spanning at most [`READ_WINDOW_MAX`] (the
/// window of a short query), is read into the query's buffer ([`Windows`]), not mapped: a
/// payload this small is copied next to its frame head by the server anyway (its
/// `MAPPED_PIECE`), so a mapping saves no copy, and for a few dozen records its `mmap`,
/// page faults and `munmap` (with a TLB flush sent to every core the process ran on)
/// cost more than one `pread` of the same bytes. Not larger windows: a `pread` of a
/// whole 256 KiB page of index records cost more than its mapping
/// (`docs/benchmarks/reads-2-2026-11-26b.md`).
pub const READ_BELOW: u64 = 4 << 10;

/// The longest window read into a buffer: the most of its own memory a query's reader
/// holds for it (one buffer, reused from window to window while no payload sliced from it
/// is alive).
pub const READ_WINDOW_MAX: u64 = 64 << 10;

/// The bytes of a block a query may map around one of its records: from the first to the
/// end of the last frame, in the record's block, of the records the query listed from the
/// index and has not returned yet (that record included). Every byte of it belongs to a
/// committed frame's block prefix: a window never reaches past the committed length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    block_id: u64,
    lo: u64,
    hi: u64,
}

impl Span {
    /// The span of `v`'s frame alone.
    pub(crate) fn of(v: &IndexValue) -> Span {
        Span {
            block_id: v.block_id,
            lo: v.offset,
            hi: v.offset.saturating_add(v.frame_len),
        }
    }

    /// More than `v`'s own frame.
    pub(crate) fn is_shared(&self, v: &IndexValue) -> bool {
        *self != Span::of(v)
    }

    fn covers(&self, v: &IndexValue) -> bool {
        self.block_id == v.block_id
            && v.offset >= self.lo
            && v.offset.saturating_add(v.frame_len) <= self.hi
    }

    /// The span of `v` and the records `rest` (listed after it) that are in its block,
    /// capped to [`WINDOW_MAX`] from `v` on in the walk's direction.
    fn around<'a>(
        v: &IndexValue,
        rest: impl Iterator<Item = &'a IndexValue>,
        descending: bool,
    ) -> Span {
        let mut s = Span::of(v);
        for r in rest.filter(|r| r.block_id == v.block_id) {
            s.lo = s.lo.min(r.offset);
            s.hi = s.hi.max(r.offset.saturating_add(r.frame_len));
        }
        let own = Span::of(v);
        let cap = WINDOW_MAX.max(v.frame_len);
        if s.hi - s.lo > cap {
            if descending {
                s.lo = s.lo.max(own.hi.saturating_sub(cap));
            } else {
                s.hi = s.hi.min(own.lo.saturating_add(cap));
            }
        }
        s
    }
}

/// The span of each record a query walk returns, computed once per window rather than per
/// record: [`Spans::next`] reuses the last span while it covers the record.
#[derive(Default)]
pub(crate) struct Spans {
    last: Option<Span>,
}

impl Spans {
    /// The span of `v`, about to be returned, with `rest` the listed records after it.
    pub(crate) fn next<'a>(
        &mut self,
        v: &IndexValue,
        rest: impl Iterator<Item = &'a IndexValue>,
        descending: bool,
    ) -> Span {
        if let Some(s) = self.last.filter(|s| s.covers(v)) {
            return s;
        }
        let s = Span::around(v, rest, descending);
        self.last = Some(s);
        s
    }
}

/// The block window a query reads its records' payloads from: one mapping of several
/// frames (a page of index records in one block, up to [`WINDOW_MAX`]) instead of a
/// `pread` into a fresh buffer, or an `mmap` and `munmap`, per record; for records under
/// [`READ_BELOW`], one `pread` of the window (up to [`READ_WINDOW_MAX`]) into a buffer the
/// reader reuses. Owned by the query's reader (the server's producer), one per query,
/// dropped with it.
#[derive(Default)]
pub struct Windows {
    current: Option<Window>,
    /// The buffer of the last read window, kept for the next one while no payload sliced
    /// from it is alive (then a new one is allocated).
    spare: Option<Arc<Vec<u8>>>,
    /// The handle of the block read last and the file cache's epoch before it was taken
    /// ([`crate::files::FileCache::epoch`]): the next records of that block skip the
    /// cache's lookup while no block was deleted since.
    block: Option<HeldBlock>,
}

/// (It keeps the block's descriptor open until the next block's replaces it or the
/// reader drops its `Windows`: one descriptor past the file cache's budget per reader, as
/// a mapped window keeps its file.)
struct HeldBlock {
    id: u64,
    epoch: u64,
    file: Arc<File>,
    base_ts: u64,
}

/// A part of a block file: `span`'s bytes, from `span.lo` on, mapped or read.
struct Window {
    span: Span,
    bytes: WindowBytes,
}

enum WindowBytes {
    Mapped(Arc<Mmap>),
    /// Read with `pread`: as many of the span's bytes as the file had (a frame past them
    /// is refused as past the end of its block, as a mapping refuses it).
    Read(Arc<Vec<u8>>),
}

impl WindowBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            WindowBytes::Mapped(m) => m,
            WindowBytes::Read(b) => b,
        }
    }
}

impl Windows {
    /// The handle and base timestamp of block `id` kept from the last record read, if it
    /// is that block's and no block was forgotten since (`epoch` is the cache's now).
    pub(crate) fn held_block(&self, id: u64, epoch: u64) -> Option<(Arc<File>, u64)> {
        self.block
            .as_ref()
            .filter(|b| b.id == id && b.epoch == epoch)
            .map(|b| (b.file.clone(), b.base_ts))
    }

    /// Keeps block `id`'s handle, taken from the file cache at `epoch` (read before it).
    pub(crate) fn hold_block(&mut self, id: u64, epoch: u64, file: &Arc<File>, base_ts: u64) {
        self.block = Some(HeldBlock {
            id,
            epoch,
            file: file.clone(),
            base_ts,
        });
    }

    /// `v`'s frame, checked, from the current window, or from a new one of `span`
    /// (read into a buffer for a record under [`READ_BELOW`] in a span of at most
    /// [`READ_WINDOW_MAX`], mapped otherwise); `None` for a compressed frame and when the
    /// mapping cannot be made (as [`map_frame`]).
    pub(crate) fn frame(
        &mut self,
        file: &File,
        path: &dyn Fn() -> PathBuf,
        v: &IndexValue,
        span: Span,
        base_ts: u64,
        ts: u64,
    ) -> Result<Option<Payload>> {
        if !v.raw() {
            return Ok(None);
        }
        let hit = self.current.as_ref().filter(|w| w.span.covers(v));
        let w = match hit {
            Some(w) => w,
            None => {
                // Let go of the old window before the next: its buffer is the next's if
                // no payload of it is alive.
                if let Some(Window {
                    bytes: WindowBytes::Read(buf),
                    ..
                }) = self.current.take()
                {
                    self.spare = Some(buf);
                }
                let bytes = if v.size < READ_BELOW && span.hi - span.lo <= READ_WINDOW_MAX {
                    WindowBytes::Read(self.read_span(file, path, span)?)
                } else {
                    match map_range(file, path, v, span)? {
                        Some(map) => WindowBytes::Mapped(Arc::new(map)),
                        None => return Ok(None),
                    }
                };
                self.current.insert(Window { span, bytes })
            }
        };
        let range = frame_in(w.bytes.as_slice(), w.span.lo, path, v, base_ts, ts)?;
        Ok(Some(match &w.bytes {
            WindowBytes::Mapped(map) => Payload::Mapped(MappedPayload {
                map: Arc::clone(map),
                range,
            }),
            WindowBytes::Read(buf) => Payload::Shared(SharedPayload {
                buf: Arc::clone(buf),
                range,
            }),
        }))
    }

    /// `span`'s bytes read into the spare buffer (a new one if a payload of it is still
    /// alive); fewer where the file ends first.
    fn read_span(
        &mut self,
        file: &File,
        path: &dyn Fn() -> PathBuf,
        span: Span,
    ) -> Result<Arc<Vec<u8>>> {
        let len = usize::try_from(span.hi - span.lo)
            .map_err(|_| corrupt(path, span.lo, "frame too large to map"))?;
        let mut buf = self
            .spare
            .take()
            .and_then(|b| Arc::try_unwrap(b).ok())
            .unwrap_or_default();
        // (Only the bytes past the buffer's longest length so far are zeroed.)
        buf.resize(len, 0);
        let got = crate::block::read_at_most(file, &mut buf, span.lo)
            .map_err(|e| Error::io(format!("read {:?}", path()), e))?;
        buf.truncate(got);
        Ok(Arc::new(buf))
    }
}

/// Maps `span` of a block file, after checking that `v`'s frame, inside it, lies within the
/// file. `None` when the mapping cannot be made.
///
/// Not populated (`MAP_POPULATE`): every frame sliced from a mapping is read whole by its
/// CRC check before a byte of it is handed out, and those first touches fault its pages in
/// through the kernel's fault-around (a batch of page-cache pages mapped per fault, large
/// folios at once), which costs less than `populate`'s page-by-page walk
/// (`get_user_pages`): about 20 µs instead of 50 µs per MiB of a block written as 1 MiB
/// frames (`docs/benchmarks/range-windows-2026-11-26.md`). The check runs on the blocking
/// pool, so a page not in the page cache is read there, as `populate` read it; and only
/// the pages of frames already checked are resident in the mapping (`RssFile`), not a
/// whole window from the start.
fn map_range(
    file: &File,
    path: &dyn Fn() -> PathBuf,
    v: &IndexValue,
    span: Span,
) -> Result<Option<Mmap>> {
    // Never map past the end of the file: touching such a page is a SIGBUS, not an error.
    let file_len = file
        .metadata()
        .map_err(|e| Error::io(format!("stat {:?}", path()), e))?
        .len();
    if v.offset
        .checked_add(v.frame_len)
        .is_none_or(|end| end > file_len)
    {
        return Err(corrupt(
            path,
            v.offset,
            "record extends past the end of its block",
        ));
    }
    let hi = span.hi.min(file_len);
    let len = usize::try_from(hi - span.lo)
        .map_err(|_| corrupt(path, v.offset, "frame too large to map"))?;
    // SAFETY: the mapped range lies within the file (checked above) and within the frames
    // of committed records (`Span`); block files never shrink under a committed frame
    // while the store is open (see the module comment), and the bytes of a committed
    // frame are never rewritten (only its flags byte, which no reader relies on).
    match unsafe { MmapOptions::new().offset(span.lo).len(len).map(file) } {
        Ok(map) => Ok(Some(map)),
        Err(e) => {
            // Out of mappings (`vm.max_map_count`: many slow readers each holding some) or
            // of address space: the caller reads the payload into memory instead.
            log::debug!("mapping {:?} failed ({e}): reading instead", path());
            Ok(None)
        }
    }
}

fn corrupt(path: &dyn Fn() -> PathBuf, offset: u64, reason: &str) -> Error {
    Error::Corrupt(CorruptionError::Record {
        path: path(),
        offset,
        reason: reason.to_string(),
    })
}

/// Where `v`'s payload lies in `bytes` (a block's bytes from file offset `at` on), its frame
/// checked as `block::read_frame` checks one it reads: its head, its length against the
/// index, its CRC32C, its timestamp.
fn frame_in(
    bytes: &[u8],
    at: u64,
    path: &dyn Fn() -> PathBuf,
    v: &IndexValue,
    base_ts: u64,
    ts: u64,
) -> Result<std::ops::Range<usize>> {
    let bad = |reason: &str| corrupt(path, v.offset, reason);
    let start = usize::try_from(v.offset - at).map_err(|_| bad("frame too large to map"))?;
    let frame = usize::try_from(v.frame_len)
        .ok()
        .and_then(|len| bytes.get(start..start.checked_add(len)?))
        .ok_or_else(|| bad("record extends past the end of its block"))?;
    let head_len = (v.frame_len - v.size) as usize;
    let want = Expect {
        frame_len: v.frame_len,
        head_len: Some(head_len),
        ts,
    };
    check_frame(frame, &[], base_ts, &want).map_err(|f| bad(&f.to_string()))?;
    Ok(start + head_len..start + frame.len())
}

/// Maps the frame the index value `v` locates, alone, and checks it ([`frame_in`]).
/// `None` for a compressed frame (its payload must be decompressed into memory anyway) and
/// when the mapping cannot be made (the caller reads the frame instead).
pub(crate) fn map_frame(
    file: &File,
    path: &dyn Fn() -> PathBuf,
    v: &IndexValue,
    base_ts: u64,
    ts: u64,
) -> Result<Option<MappedPayload>> {
    if !v.raw() {
        return Ok(None);
    }
    let span = Span::of(v);
    let Some(map) = map_range(file, path, v, span)? else {
        return Ok(None);
    };
    let range = frame_in(&map, span.lo, path, v, base_ts, ts)?;
    Ok(Some(MappedPayload {
        map: Arc::new(map),
        range,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    fn value(block_id: u64, offset: u64, frame_len: u64) -> crate::codec::index::IndexValue {
        crate::codec::index::IndexValue {
            block_id,
            offset,
            frame_len,
            stored: frame_len - 10,
            size: frame_len - 10,
            flags: 0,
            attrs: Default::default(),
        }
    }

    /// Risk "a window past the committed length": a window spans only the frames of the
    /// records the query listed (committed: they are in the index) in the record's block,
    /// capped to WINDOW_MAX in the walk's direction; never the bytes after the last one.
    #[test]
    fn a_window_spans_only_listed_frames_of_its_block() {
        use super::{Span, Spans, WINDOW_MAX};
        let v = value(1, 100, 1000);
        let rest = [value(1, 1100, 1000), value(2, 0, 5000), value(1, 2100, 500)];
        let s = Span::around(&v, rest.iter(), false);
        assert_eq!((s.block_id, s.lo, s.hi), (1, 100, 2600));
        // alone, a record's span is its frame, which is not worth a window below MAP_MIN
        assert_eq!(Span::around(&v, [].iter(), false), Span::of(&v));
        assert!(!Span::of(&v).is_shared(&v) && s.is_shared(&v));
        // capped from the record on, forwards or backwards
        let far = [value(1, 100 + 2 * WINDOW_MAX, 1000)];
        let s = Span::around(&v, far.iter(), false);
        assert_eq!((s.lo, s.hi), (100, 100 + WINDOW_MAX));
        let last = value(1, 100 + 2 * WINDOW_MAX, 1000);
        let s = Span::around(&last, [v.clone()].iter(), true);
        assert_eq!(s.hi, last.offset + 1000);
        assert_eq!(s.hi - s.lo, WINDOW_MAX);
        // a frame larger than the cap still fits its own span
        let huge = value(1, 0, 3 * WINDOW_MAX);
        assert_eq!(Span::around(&huge, far.iter(), false), Span::of(&huge));
        // Spans reuses a span that covers the next record, and only then
        let mut spans = Spans::default();
        let first = spans.next(&v, rest.iter(), false);
        assert_eq!(spans.next(&rest[0], [].iter(), false), first);
        assert_eq!(spans.next(&rest[1], [].iter(), false), Span::of(&rest[1]));
    }
}
