//! The write path: timestamps, appending frames to the active block, and committing them.
//!
//! Every write has its payload in hand before it reserves anything or takes a lock: in
//! memory (single and batch writes) or in a [`Spool`] (streamed writes). It then reserves
//! exactly its bytes (`quota.rs`), takes its entry's lock, appends, and commits. If the
//! append or the commit fails, what it appended is cut (`Undo`), so a failed write never
//! comes back after a restart.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::bucket::Bucket;
use crate::codec::index::IndexValue;
use crate::commit::{BlockFile, Op};
use crate::entry::{Active, Block, Entry, EntryState};
use crate::error::{Result, WriteError};
use crate::names::validate_label_key;
use crate::now_micros;
use crate::record::WriteMeta;
use crate::record::{MAX_LABELS, MAX_LABELS_BYTES, MAX_LABEL_VALUE};
use crate::settings::Compression;

pub(crate) type Txn<'a> = heed::RoTxn<'a, heed::WithoutTls>;

/// Bytes a frame adds beyond its payload, over-estimated for reservations.
pub(crate) const FRAME_SLACK: u64 = 64;
/// Payloads up to this size are compressed in one call; larger ones stream.
pub(crate) const SAMPLE: usize = 64 << 10;

/// Checks what a write says about its record: content type, timestamp and labels (each
/// key valid, each value at most 4 KiB, at most [`MAX_LABELS`] labels of at most
/// [`MAX_LABELS_BYTES`] bytes in all). The same check serves single, batch, streamed and
/// label-update writes.
pub(crate) fn check_meta(meta: &WriteMeta) -> Result<()> {
    check_ts(meta.ts)?;
    check_attrs(meta)
}

/// The timestamp part of [`check_meta`].
pub(crate) fn check_ts(ts: Option<u64>) -> Result<()> {
    if ts == Some(u64::MAX) {
        return Err(WriteError::InvalidTimestamp {
            ts: u64::MAX,
            reason: "u64::MAX is reserved (it means \"now\" in batch framing)",
        }
        .into());
    }
    Ok(())
}

/// The content type and labels part of [`check_meta`].
pub(crate) fn check_attrs(meta: &WriteMeta) -> Result<()> {
    if let Some(ct) = &meta.content_type {
        if ct.is_empty() || ct.len() > 255 || !ct.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(WriteError::InvalidContentType(ct.clone()).into());
        }
    }
    if meta.labels.len() > MAX_LABELS {
        return Err(WriteError::InvalidLabel(format!(
            "{} labels: a record may have at most {MAX_LABELS}",
            meta.labels.len()
        ))
        .into());
    }
    let mut bytes = 0usize;
    for (k, v) in &meta.labels {
        validate_label_key(k).map_err(|e| WriteError::InvalidLabel(e.to_string()))?;
        if v.len() > MAX_LABEL_VALUE {
            return Err(WriteError::InvalidLabel(format!(
                "value of {k:?} is longer than {MAX_LABEL_VALUE} bytes"
            ))
            .into());
        }
        bytes += k.len() + v.len();
    }
    if bytes > MAX_LABELS_BYTES {
        return Err(WriteError::InvalidLabel(format!(
            "labels of {bytes} bytes (keys and values): a record may have at most {MAX_LABELS_BYTES}"
        ))
        .into());
    }
    Ok(())
}

/// Bytes a record takes in a block, over-estimated, for its reservation.
pub(crate) fn frame_need(meta: &WriteMeta, payload: u64) -> u64 {
    let labels: usize = meta.labels.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
    let ct = meta.content_type.as_ref().map_or(0, |c| c.len());
    payload + FRAME_SLACK + (labels + ct) as u64
}

/// What a write changed in its entry's blocks before its commit: the active block's length
/// when it started, and the blocks it created. If the write fails, these are cut.
pub(crate) struct Undo {
    pub(crate) start: Option<Active>,
    pub(crate) created: Vec<u64>,
    /// Every block the write appended to, for the commit's fsync.
    pub(crate) touched: Vec<BlockFile>,
}

impl Undo {
    pub fn begin(st: &EntryState) -> Undo {
        Undo {
            start: st.active(),
            created: Vec::new(),
            touched: Vec::new(),
        }
    }

    /// A block this write created: an undo deletes it.
    pub(crate) fn created_block(&mut self, id: u64) {
        self.created.push(id);
    }

    pub(crate) fn touch(&mut self, id: u64, file: &Arc<File>) {
        if !self.touched.iter().any(|t| t.id == id) {
            self.touched.push(BlockFile {
                id,
                file: file.clone(),
            });
        }
    }
}

/// A frame being assembled in a block: where it starts and its head.
pub(crate) struct FrameAt {
    pub block: Active,
    pub file: Arc<File>,
    pub start: u64,
}

/// Queues index ops for frames just appended to the active block and updates its state.
pub(crate) fn index_frames(
    e: &Entry,
    st: &mut EntryState,
    len: u64,
    pending: &mut Vec<PendingRec>,
    ops: &mut Vec<Op>,
) {
    for p in pending.iter() {
        st.note_put(p.ts);
    }
    if let Some(Block { id, state }) = st.appended(len, pending.iter().map(|p| p.ts)) {
        ops.extend(
            pending
                .drain(..)
                .map(|PendingRec { ts, value }| Op::PutRec {
                    entry_id: e.id(),
                    ts,
                    value,
                }),
        );
        ops.push(Op::PutBlock { id, state });
    }
}

/// One record given to [`Store::write_many`]: its timestamp (`None`: now), its content
/// type and labels (`meta`, whose own `ts` is not read here: records of one content type
/// and labels may share one), and its payload, as pieces.
pub(crate) struct RecordIn<'a, P> {
    pub ts: Option<u64>,
    pub meta: &'a WriteMeta,
    pub pieces: &'a [P],
}

impl<'a, P> RecordIn<'a, P> {
    /// A record whose timestamp is its meta's.
    pub(crate) fn of(meta: &'a WriteMeta, pieces: &'a [P]) -> RecordIn<'a, P> {
        RecordIn {
            ts: meta.ts,
            meta,
            pieces,
        }
    }
}

/// How many distinct metas [`SeenMetas`] remembers.
const SEEN_METAS: usize = 16;

/// Metas of a round met before, by address, with what was worked out for each: records
/// sharing one `WriteMeta` (the batch route gives one to every record of a body with the
/// same content type and labels) are checked once and share one `Attrs`. A few recent ones
/// only (records of one body cycle through a handful of label sets, or have their own).
pub(crate) struct SeenMetas<'a, T> {
    seen: Vec<(&'a WriteMeta, T)>,
    /// The slot the next one replaces once full.
    next: usize,
}

impl<'a, T> SeenMetas<'a, T> {
    pub(crate) fn new() -> SeenMetas<'a, T> {
        SeenMetas {
            seen: Vec::new(),
            next: 0,
        }
    }

    pub(crate) fn get(&self, meta: &WriteMeta) -> Option<&T> {
        self.seen
            .iter()
            .find(|(m, _)| std::ptr::eq(*m, meta))
            .map(|(_, t)| t)
    }

    pub(crate) fn put(&mut self, meta: &'a WriteMeta, t: T) {
        if self.seen.len() < SEEN_METAS {
            self.seen.push((meta, t));
        } else {
            self.seen[self.next] = (meta, t);
            self.next = (self.next + 1) % SEEN_METAS;
        }
    }
}

// Derived `Clone` would ask `P: Clone`; the fields are references.
impl<P> Clone for RecordIn<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P> Copy for RecordIn<'_, P> {}

/// A write to one entry appended under its lock (`st`) and waiting for its commit: what
/// [`Store::commit_or_undo_all`] cuts if the commit fails.
pub(crate) struct Uncommitted<'g> {
    pub b: &'g Bucket,
    pub e: &'g Entry,
    pub st: &'g mut EntryState,
    pub undo: Undo,
}

/// Bytes the records of a group reserve.
pub(crate) fn records_need<'a, P: AsRef<[u8]> + 'a>(
    records: impl Iterator<Item = RecordIn<'a, P>>,
) -> u64 {
    records
        .map(|r| frame_need(r.meta, pieces_len(r.pieces)))
        .sum()
}

/// The oldest timestamp a write into a bucket may give, taken once per write: a record
/// stamped before its bucket's `max_age` reaches back is refused, as retention would delete
/// it within a second of acknowledging it (issue 27). "Now" assigned timestamps are never
/// that old. Checked before the entry is looked up or made, so that a write refused as too
/// old leaves no empty entry behind. Bug (probe of 2026-11-30): the check ran under the
/// entry's lock, after the entry was made, so stale writes into new entries used up
/// `--max-entries`.
pub(crate) struct WriteFloor(Option<(u64, u64)>);

impl WriteFloor {
    pub(crate) fn now(bucket: &Bucket) -> Self {
        WriteFloor(
            bucket
                .write_max_age()
                .map(|max_age| (max_age, now_micros().saturating_sub(max_age))),
        )
    }

    pub(crate) fn check(&self, bucket: &Bucket, ts: u64) -> Result<()> {
        match self.0 {
            Some((max_age, oldest)) if ts < oldest => Err(WriteError::TooOld {
                bucket: bucket.name().to_string(),
                ts,
                max_age,
                oldest,
            }
            .into()),
            _ => Ok(()),
        }
    }
}

/// Checks and compresses records outside the entry lock (compression is the costly part).
pub(crate) fn prepare<'a, P: AsRef<[u8]> + 'a>(
    b: &Bucket,
    records: impl Iterator<Item = RecordIn<'a, P>>,
) -> Vec<Prepared<'a, P>> {
    let settings = b.settings();
    let floor = WriteFloor::now(b);
    // Metas found valid: a meta shared by many records is checked once.
    let mut valid: SeenMetas<'a, ()> = SeenMetas::new();
    records
        .map(|record| {
            let d = record.pieces;
            let packed = match d {
                [one] => compress(settings.compression, one.as_ref()),
                _ if settings.compression == Compression::None => None,
                _ => compress(
                    settings.compression,
                    &d.iter()
                        .fold(Vec::with_capacity(pieces_len(d) as usize), |mut all, p| {
                            all.extend_from_slice(p.as_ref());
                            all
                        }),
                ),
            };
            let check = check_ts(record.ts)
                .and_then(|()| match valid.get(record.meta) {
                    Some(()) => Ok(()),
                    None => {
                        check_attrs(record.meta)?;
                        valid.put(record.meta, ());
                        Ok(())
                    }
                })
                .and_then(|()| record.ts.map_or(Ok(()), |ts| floor.check(b, ts)));
            Prepared {
                check,
                record,
                packed,
            }
        })
        .collect()
}

/// A record prepared outside the entry lock: its check and its compressed payload (`None`:
/// stored raw).
pub(crate) struct Prepared<'a, P> {
    pub(crate) record: RecordIn<'a, P>,
    pub(crate) check: Result<()>,
    pub(crate) packed: Option<Vec<u8>>,
}

/// The results of a group none of whose records passes its own check (content type,
/// labels, timestamp, `max_age`): each record's error, with nothing to create or lock.
/// `None` when one of them may be written (or there is none). Bug (hostile probe of
/// 2026-11-29): a write refused for a label value over 4 KiB still created its entry,
/// empty, which counted against `--max-entries`.
pub(crate) fn all_refused<P>(prepared: &mut Vec<Prepared<'_, P>>) -> Option<Vec<Result<u64>>> {
    if prepared.is_empty() || prepared.iter().any(|p| p.check.is_ok()) {
        return None;
    }
    Some(prepared.drain(..).map(|p| p.check.map(|()| 0)).collect())
}

/// A frame appended (or about to be) and not yet queued for the index.
pub(crate) struct PendingRec {
    pub(crate) ts: u64,
    pub(crate) value: IndexValue,
}

/// Timestamps picked earlier in one batch. Most batches are in order and never ask, so
/// the hash set is only built on the first question.
#[derive(Default)]
pub(crate) struct BatchSeen {
    pub(crate) all: Vec<u64>,
    pub(crate) set: Option<std::collections::HashSet<u64>>,
}

impl BatchSeen {
    pub(crate) fn push(&mut self, ts: u64) {
        match &mut self.set {
            Some(set) => {
                set.insert(ts);
            }
            None => self.all.push(ts),
        }
    }

    pub(crate) fn contains(&mut self, ts: u64) -> bool {
        let all = &self.all;
        self.set
            .get_or_insert_with(|| all.iter().copied().collect())
            .contains(&ts)
    }
}

/// Compresses when it pays: `None` keeps the payload raw.
pub(crate) fn compress(c: Compression, data: &[u8]) -> Option<Vec<u8>> {
    let Compression::Zstd { level } = c else {
        return None;
    };
    if data.len() < 64 {
        return None;
    }
    let sample = &data[..data.len().min(SAMPLE)];
    let packed = zstd::bulk::compress(sample, level).ok()?;
    // Already-compressed payloads (JPEG, video) gain nothing: store them raw.
    if packed.len() as f64 > sample.len() as f64 * 0.9 {
        return None;
    }
    if sample.len() == data.len() {
        return Some(packed);
    }
    zstd::bulk::compress(data, level).ok()
}

/// Appends stored bytes at a position of a block file, keeping their CRC.
pub(crate) struct FrameWriter<'a> {
    pub(crate) file: &'a File,
    pub(crate) pos: u64,
    pub(crate) crc: u32,
    pub(crate) stored: u64,
}

impl std::io::Write for FrameWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write_all_at(buf, self.pos)?;
        self.pos += buf.len() as u64;
        self.stored += buf.len() as u64;
        self.crc = crate::crc::crc32c_append(self.crc, buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes of a payload given in pieces.
pub(crate) fn pieces_len<P: AsRef<[u8]>>(pieces: &[P]) -> u64 {
    pieces.iter().map(|p| p.as_ref().len() as u64).sum()
}

/// Payloads (or pieces of one) from this size on are appended from the caller's buffer (one `pwritev` of the
/// gathered pieces) instead of being copied behind their head first.
pub(crate) const GATHER_FROM: usize = 16 << 10;

/// The frames of one append: heads and small payloads copied together, large payloads
/// borrowed from the caller, written with one `pwritev`. A 10 MiB payload used to be copied
/// into one buffer with its head before the write: one more pass over every byte.
#[derive(Default)]
pub(crate) struct Gather<'a> {
    pub(crate) parts: Vec<GatherPart<'a>>,
    pub(crate) len: usize,
    /// Bytes still expected to be copied: a new copied part is allocated that large at once.
    expect: usize,
}

/// The most [`Gather::expecting`] reserves ahead (a round of small records rarely copies
/// more; past it the buffer grows as it goes).
const EXPECT_MAX: u64 = 8 << 20;

pub(crate) enum GatherPart<'a> {
    Copied(Vec<u8>),
    Borrowed(&'a [u8]),
}

impl<'a> Gather<'a> {
    /// A gather that expects to copy about `bytes` (heads and small payloads).
    pub(crate) fn expecting(bytes: u64) -> Gather<'a> {
        Gather {
            expect: bytes.min(EXPECT_MAX) as usize,
            ..Gather::default()
        }
    }

    /// Appends a copy of `bytes`.
    pub(crate) fn copy(&mut self, bytes: &[u8]) {
        match self.parts.last_mut() {
            Some(GatherPart::Copied(v)) => v.extend_from_slice(bytes),
            _ => {
                let mut v = Vec::with_capacity(bytes.len().max(self.expect));
                v.extend_from_slice(bytes);
                self.parts.push(GatherPart::Copied(v));
            }
        }
        self.len += bytes.len();
        self.expect = self.expect.saturating_sub(bytes.len());
    }

    /// Appends a payload: borrowed when large, copied when small.
    pub(crate) fn payload(&mut self, bytes: &'a [u8]) {
        if bytes.len() < GATHER_FROM {
            self.copy(bytes);
        } else {
            self.parts.push(GatherPart::Borrowed(bytes));
            self.len += bytes.len();
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn write_at(&self, file: &std::fs::File, offset: u64) -> std::io::Result<()> {
        let pieces: Vec<&[u8]> = self
            .parts
            .iter()
            .map(|p| match p {
                GatherPart::Copied(v) => v.as_slice(),
                GatherPart::Borrowed(b) => b,
            })
            .collect();
        crate::spool::write_pieces_at(file, &pieces, offset)
    }

    pub(crate) fn clear(&mut self) {
        self.parts.clear();
        self.len = 0;
    }
}
