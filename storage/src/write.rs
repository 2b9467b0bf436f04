//! The write path: timestamps, appending frames to the active block, and committing them.
//!
//! Every write has its payload in hand before it reserves anything or takes a lock: in
//! memory (single and batch writes) or in a [`Spool`] (streamed writes). It then reserves
//! exactly its bytes (`quota.rs`), takes its entry's lock, appends, and commits. If the
//! append or the commit fails, what it appended is cut (`Undo`), so a failed write never
//! comes back after a restart.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::block::{create_block, NewBlock};
use crate::bucket::Bucket;
use crate::codec::bytes::{put_padded_varint, PADDED_VARINT};
use crate::codec::frame::{encode_head, seal_head, EncodedHead, HeadSpec, FLAG_ZSTD, FRAME_PREFIX};
use crate::commit::{BlockFile, Change, Op};
use crate::entry::{Active, Block, Entry, EntryState};
use crate::index::{Attrs, BlockState, IndexValue};
use crate::spool::{copy_range, Spool, SpoolReader};
use crate::trash::sync_dir;
use crate::*;

type Txn<'a> = heed::RoTxn<'a, heed::WithoutTls>;

/// Bytes a frame adds beyond its payload, over-estimated for reservations.
const FRAME_SLACK: u64 = 64;
/// Payloads up to this size are compressed in one call; larger ones stream.
const SAMPLE: usize = 64 << 10;

/// Checks what a write says about its record: content type, timestamp and labels (each
/// key valid, each value at most 4 KiB, at most [`MAX_LABELS`] labels of at most
/// [`MAX_LABELS_BYTES`] bytes in all). The same check serves single, batch, streamed and
/// label-update writes.
pub(crate) fn check_meta(meta: &WriteMeta) -> Result<()> {
    if let Some(ct) = &meta.content_type {
        if ct.is_empty() || ct.len() > 255 || !ct.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(WriteError::InvalidContentType(ct.clone()).into());
        }
    }
    if meta.ts == Some(u64::MAX) {
        return Err(WriteError::InvalidTimestamp {
            ts: u64::MAX,
            reason: "u64::MAX is reserved (it means \"now\" in batch framing)",
        }
        .into());
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
    start: Option<Active>,
    created: Vec<u64>,
    /// Every block the write appended to, for the commit's fsync.
    touched: Vec<BlockFile>,
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

/// Refuses a record stamped before its bucket's `max_age` reaches back: retention would
/// delete it within a second of acknowledging it (issue 27). "Now" assigned timestamps are
/// never that old.
fn refuse_expired(bucket: &Bucket, ts: u64) -> Result<()> {
    let Some(max_age) = bucket.max_age() else {
        return Ok(());
    };
    let oldest = now_micros().saturating_sub(max_age);
    if ts < oldest {
        return Err(WriteError::TooOld {
            bucket: bucket.name().to_string(),
            ts,
            max_age,
            oldest,
        }
        .into());
    }
    Ok(())
}

impl Store {
    /// Picks the timestamp of a new record: checks a given one, or assigns a unique "now".
    fn pick_ts<'t>(
        &'t self,
        txn: &mut Option<Txn<'t>>,
        bucket: &Bucket,
        entry: &Entry,
        st: &mut EntryState,
        want: Option<u64>,
        batch: &mut BatchSeen,
    ) -> Result<u64> {
        // Taken: in the index, or earlier in this batch. Above the ceiling: neither.
        let mut taken = |ts: u64, st: &EntryState| -> Result<bool> {
            if st.ceiling.is_none_or(|c| ts > c) {
                return Ok(false);
            }
            if batch.contains(ts) {
                return Ok(true);
            }
            // Opened on the first probe only: in-order writes (the common case) never hold
            // a reader, and a reader held while other writers commit pins the pages their
            // commits free, which grows the index file.
            let txn = match txn {
                Some(t) => t,
                None => txn.insert(self.inner.index.read_txn()?),
            };
            self.inner.index.contains(txn, entry.id(), ts)
        };
        let ts = match want {
            Some(ts) => {
                refuse_expired(bucket, ts)?;
                if taken(ts, st)? {
                    return Err(WriteError::Conflict {
                        bucket: bucket.name().to_string(),
                        entry: entry.name().to_string(),
                        ts,
                    }
                    .into());
                }
                ts
            }
            None => {
                let mut ts = now_micros().max(st.last_auto_ts + 1);
                while taken(ts, st)? {
                    ts += 1;
                }
                st.last_auto_ts = ts;
                ts
            }
        };
        batch.push(ts);
        st.ceiling = Some(st.ceiling.map_or(ts, |c| c.max(ts)));
        Ok(ts)
    }

    /// The active block with room for `adding` more bytes (and one more record), sealing
    /// the current one and starting a new one if needed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn ensure_active(
        &self,
        bucket: &Bucket,
        entry: &Entry,
        st: &mut EntryState,
        first_ts: u64,
        adding: u64,
        ops: &mut Vec<Op>,
        undo: &mut Undo,
    ) -> Result<Active> {
        let settings = bucket.settings();
        if let Some(a) = st.active() {
            if st.active_has_room(&settings, 1, adding) {
                return Ok(a);
            }
        }
        if let Some(Block { id, state }) = st.seal_active() {
            ops.push(Op::PutBlock { id, state });
        }
        let id = self.inner.new_block_id();
        // The entry's folder may have gone to the trash (its bucket is being removed): then
        // the entry is not found, which is what a writer racing that removal should hear.
        let gone = |e: Error| match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                NotFound::Entry {
                    bucket: bucket.name().to_string(),
                    entry: entry.name().to_string(),
                }
                .into()
            }
            e => e,
        };
        let NewBlock { file, len } =
            create_block(&entry.block_path(id), id, first_ts, entry.name()).map_err(gone)?;
        undo.created.push(id);
        if self.inner.sync_dirs() {
            sync_dir(entry.dir()).map_err(gone)?;
        }
        self.inner.files.insert(id, file, first_ts);
        let state = BlockState::new_block(entry.id(), first_ts, len);
        ops.push(Op::PutBlock { id, state });
        bucket.grow(len);
        Ok(st.start_block(id, state, len))
    }

    /// The open handle of a block of `entry`.
    pub(crate) fn block_file(&self, entry: &Entry, id: u64) -> Result<Arc<File>> {
        Ok(self.inner.files.get(id, || entry.block_path(id))?.file)
    }

    /// Writes one record; returns its timestamp.
    pub fn write(&self, bucket: &str, entry: &str, meta: &WriteMeta, data: &[u8]) -> Result<u64> {
        self.write_pieces(bucket, entry, meta, &[data])
    }

    /// Writes one record whose payload is the concatenation of `pieces` (a network body as it
    /// arrived), without gathering them into one buffer first: they are appended with the
    /// frame's head in one `pwritev` (a compressed bucket compresses a joined copy).
    pub fn write_pieces<P: AsRef<[u8]>>(
        &self,
        bucket: &str,
        entry: &str,
        meta: &WriteMeta,
        pieces: &[P],
    ) -> Result<u64> {
        let mut r =
            self.write_many(bucket, entry, std::iter::once(RecordIn { meta, pieces }), 1)?;
        r.pop()
            .unwrap_or_else(|| Err(Error::Index("write produced no result".into())))
    }

    /// Writes several records of one entry, each given as the pieces it arrived in, with
    /// one append and one index commit; one result per record, in order (a duplicate
    /// timestamp or a bad label fails only its own record). The outer error is for failures
    /// of the whole group (unknown bucket, bad entry name, quota...). The server's writer
    /// thread uses it for concurrent single writes (`server/src/http/writer.rs`).
    pub fn write_group<P: AsRef<[u8]>>(
        &self,
        bucket: &str,
        entry: &str,
        records: &[(&WriteMeta, &[P])],
    ) -> Result<Vec<Result<u64>>> {
        self.write_many(
            bucket,
            entry,
            records
                .iter()
                .map(|&(meta, pieces)| RecordIn { meta, pieces }),
            records.len(),
        )
    }

    /// Writes many records with one index commit; one result per record, in order.
    /// The outer error is for failures of the whole batch (unknown bucket, disk full...).
    pub fn write_batch(
        &self,
        bucket: &str,
        entry: &str,
        records: impl AsRef<[BatchRecord]>,
    ) -> Result<Vec<Result<u64>>> {
        let records = records.as_ref();
        let n = records.len();
        self.write_many(
            bucket,
            entry,
            records.iter().map(|r| RecordIn {
                meta: &r.meta,
                pieces: std::slice::from_ref(&r.data),
            }),
            n,
        )
    }

    /// The write path of `write`, `write_pieces` and `write_batch`: each record's payload
    /// is the concatenation of its pieces.
    fn write_many<'a, P: AsRef<[u8]> + 'a>(
        &self,
        bucket: &str,
        entry: &str,
        records: impl Iterator<Item = RecordIn<'a, P>> + Clone,
        n: usize,
    ) -> Result<Vec<Result<u64>>> {
        let b = self.get_bucket(bucket)?;
        validate_entry_name(entry)?;
        let _res = self.reserve(&b, records_need(records.clone()))?;
        let e = self.entry_or_create(&b, entry)?;
        let prepared = prepare(&b, records);
        let mut st = e.lock_live(bucket)?;
        let (results, ops, undo) = self.append_entry(&b, &e, &mut st, prepared, n)?;
        if !ops.is_empty() {
            self.commit_or_undo(&b, &e, &mut st, ops, undo)?;
        }
        Ok(results)
    }

    /// Appends a group's prepared records to its entry (whose lock `st` is): one result
    /// per record, the index ops to commit and what to cut if the commit fails. A failed
    /// append is cut here and is the error.
    pub(crate) fn append_entry<'a, P: AsRef<[u8]> + 'a>(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        prepared: Vec<Prepared<'a, P>>,
        n: usize,
    ) -> Result<(Vec<Result<u64>>, Vec<Op>, Undo)> {
        let mut undo = Undo::begin(st);
        let mut results: Vec<Result<u64>> = Vec::with_capacity(n);
        let mut ops = Vec::with_capacity(n + 2);
        match self.append_many(b, e, st, prepared, &mut results, &mut ops, &mut undo) {
            Ok(()) => Ok((results, ops, undo)),
            Err(err) => {
                self.undo(b, e, st, undo);
                Err(err)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn append_many<'a, P: AsRef<[u8]> + 'a>(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        records: Vec<Prepared<'a, P>>,
        results: &mut Vec<Result<u64>>,
        ops: &mut Vec<Op>,
        undo: &mut Undo,
    ) -> Result<()> {
        let settings = b.settings();
        let mut buf = Gather::default();
        let mut seen = BatchSeen::default();
        let mut pending: Vec<PendingRec> = Vec::new();
        let mut start_len = 0;
        let mut block_id = 0;
        // One read transaction for every duplicate check of the batch (opened by the first
        // check that needs it): the entry's mutex is held, so nothing else can add this
        // entry's timestamps meanwhile.
        let mut txn = None;
        // Records of a batch mostly share their content type and labels: one copy.
        let mut shared: Option<Arc<Attrs>> = None;
        for Prepared {
            record: RecordIn { meta, pieces: data },
            check,
            packed,
        } in records
        {
            if let Err(err) = check {
                results.push(Err(err));
                continue;
            }
            let ts = match self.pick_ts(&mut txn, b, e, st, meta.ts, &mut seen) {
                Ok(ts) => ts,
                Err(err) => {
                    results.push(Err(err));
                    continue;
                }
            };
            // A block fills up inside a batch: flush what we have into it first.
            if !st.active_has_room(&settings, pending.len() as u64 + 1, buf.len() as u64) {
                self.flush_pending(b, e, st, &mut buf, &mut pending, ops, undo)?;
                self.ensure_active(b, e, st, ts, 0, ops, undo)?;
            }
            let Some(a) = st.active() else {
                return Err(Error::Index("no active block after ensure_active".into()));
            };
            if pending.is_empty() {
                start_len = a.len;
                block_id = a.id;
            }
            let raw_len = pieces_len(data);
            let (flags, stored_len) = match &packed {
                Some(c) => (FLAG_ZSTD, c.len() as u64),
                None => (0, raw_len),
            };
            let ct = meta.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE);
            let EncodedHead {
                bytes: mut head, ..
            } = encode_head(&HeadSpec {
                flags,
                ts,
                base_ts: a.base_ts,
                stored_len,
                raw_len,
                content_type: ct,
                labels: &meta.labels,
                padded: false,
            });
            let head_crc = crc32c::crc32c(&head[FRAME_PREFIX..]);
            let crc = match &packed {
                Some(c) => crc32c::crc32c_append(head_crc, c),
                None => data
                    .iter()
                    .fold(head_crc, |crc, p| crc32c::crc32c_append(crc, p.as_ref())),
            };
            head[2..6].copy_from_slice(&crc.to_le_bytes());
            let at = start_len + buf.len() as u64;
            let frame_len = head.len() as u64 + stored_len;
            buf.copy(&head);
            match &packed {
                // A compressed payload is the loop's own: copied (it is small or it would
                // not have compressed well enough to be kept).
                Some(c) => buf.copy(c),
                None => data.iter().for_each(|p| buf.payload(p.as_ref())),
            }
            let rec_attrs = match &shared {
                Some(m) if m.content_type == ct && m.labels == meta.labels => m.clone(),
                _ => {
                    let m = Arc::new(Attrs {
                        content_type: ct.to_string(),
                        labels: meta.labels.clone(),
                    });
                    shared = Some(m.clone());
                    m
                }
            };
            pending.push(PendingRec {
                ts,
                value: IndexValue {
                    block_id,
                    offset: at,
                    frame_len,
                    stored: stored_len,
                    size: raw_len,
                    flags,
                    attrs: rec_attrs,
                },
            });
            results.push(Ok(ts));
        }
        self.flush_pending(b, e, st, &mut buf, &mut pending, ops, undo)
    }

    /// Appends buffered frames to the active block and queues their index ops.
    #[allow(clippy::too_many_arguments)]
    fn flush_pending(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        buf: &mut Gather<'_>,
        pending: &mut Vec<PendingRec>,
        ops: &mut Vec<Op>,
        undo: &mut Undo,
    ) -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let Some(a) = st.active() else {
            return Err(Error::Index(
                "frames pending without an active block".into(),
            ));
        };
        let file = self.inner.files.get(a.id, || e.block_path(a.id))?.file;
        undo.touch(a.id, &file);
        buf.write_at(&file, a.len)
            .map_err(|err| Error::io(format!("appending to block {:016x}", a.id), err))?;
        b.grow(buf.len() as u64);
        index_frames(e, st, buf.len() as u64, pending, ops);
        buf.clear();
        Ok(())
    }

    /// Commits; if the commit fails, cuts what the write appended (see [`Undo`]).
    pub(crate) fn commit_or_undo(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        ops: Vec<Op>,
        undo: Undo,
    ) -> Result<()> {
        self.commit_or_undo_all(ops, vec![Uncommitted { b, e, st, undo }])
    }

    /// Commits the ops of writes to one or more entries (each entry's lock held) in one
    /// index transaction; if the commit fails, cuts what every one of them appended.
    pub(crate) fn commit_or_undo_all(
        &self,
        ops: Vec<Op>,
        parts: Vec<Uncommitted<'_>>,
    ) -> Result<()> {
        let files = parts
            .iter()
            .flat_map(|p| p.undo.touched.iter().cloned())
            .collect();
        crate::crash_point("frames-appended");
        match self
            .inner
            .committer
            .commit(&self.inner.index, Change { ops, files })
        {
            Ok(()) => {
                crate::crash_point("write-committed");
                Ok(())
            }
            Err(err) => {
                for Uncommitted { b, e, st, undo } in parts {
                    log::error!(
                        "index commit failed for {}/{}: {err}; cutting what the write appended",
                        b.name(),
                        e.name()
                    );
                    self.undo(b, e, st, undo);
                }
                Err(err)
            }
        }
    }

    /// Cuts the frames an uncommitted write appended and deletes the blocks it created,
    /// then reloads the entry's block list from the index (memory ran ahead of it).
    pub(crate) fn undo(&self, b: &Bucket, e: &Entry, st: &mut EntryState, undo: Undo) {
        if let Some(a) = undo.start {
            match self.block_file(e, a.id) {
                Ok(f) => {
                    if let Err(err) = f.set_len(a.len) {
                        log::error!("could not cut block {:016x} back: {err}", a.id);
                    }
                }
                Err(err) => log::error!("could not open block {:016x} to cut it: {err}", a.id),
            }
        }
        for id in undo.created {
            self.inner.files.forget(id);
            self.inner.committer.forget(id);
            if let Err(err) = std::fs::remove_file(e.block_path(id)) {
                log::error!("could not delete unfinished block {id:016x}: {err}");
            }
        }
        if let Err(err) = st.reload(&self.inner.index, b, e.id()) {
            log::error!(
                "could not reload {}/{} from the index: {err}",
                b.name(),
                e.name()
            );
        }
    }

    /// Writes one record from a reader without holding it in memory. `len`, when given,
    /// must match what the reader yields (`WriteError::LengthMismatch` otherwise). The
    /// payload is received into a [`Spool`] first: nothing is reserved or locked while the
    /// reader is slow.
    pub fn write_stream(
        &self,
        bucket: &str,
        entry: &str,
        meta: &WriteMeta,
        reader: &mut dyn Read,
        len: Option<u64>,
    ) -> Result<u64> {
        check_meta(meta)?;
        // Small known sizes take the in-memory path.
        if let Some(n) = len.filter(|n| *n <= SAMPLE as u64) {
            let mut data = Vec::with_capacity(n as usize);
            reader
                .take(n + 1)
                .read_to_end(&mut data)
                .map_err(|e| Error::io("reading the payload", e))?;
            if data.len() as u64 != n {
                return Err(WriteError::LengthMismatch {
                    expected: n,
                    got: data.len() as u64,
                }
                .into());
            }
            return self.write(bucket, entry, meta, &data);
        }
        validate_entry_name(entry)?;
        let mut spool = self.spool_for(bucket, entry, meta)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("reading the payload", e)),
            };
            spool.append(&buf[..n])?;
            if len.is_some_and(|l| spool.len() > l) {
                break;
            }
        }
        if let Some(n) = len {
            if n != spool.len() {
                return Err(WriteError::LengthMismatch {
                    expected: n,
                    got: spool.len(),
                }
                .into());
            }
        }
        self.write_spooled(bucket, entry, meta, spool)
    }

    /// Writes a record whose payload was received into `spool` (see [`Store::spool`]):
    /// reserves exactly its size, then copies it into the entry's active block, or, for a
    /// large raw payload in a spool made by [`Store::spool_for`], makes the spool file the
    /// entry's new active block (`link.rs`: no copy).
    pub fn write_spooled(
        &self,
        bucket: &str,
        entry: &str,
        meta: &WriteMeta,
        spool: Spool,
    ) -> Result<u64> {
        check_meta(meta)?;
        if spool.len() <= SAMPLE as u64 {
            return self.write(bucket, entry, meta, &spool.read_all()?);
        }
        let b = self.get_bucket(bucket)?;
        validate_entry_name(entry)?;
        let raw = spool.len();
        let _res = self.reserve(&b, frame_need(meta, raw))?;
        let e = self.entry_or_create(&b, entry)?;
        let settings = b.settings();
        // Sample the start to decide whether compression is worth it.
        let mut sample = vec![0u8; SAMPLE];
        spool
            .file()
            .read_exact_at(&mut sample, spool.base())
            .map_err(|e| Error::io("reading a spool file", e))?;
        let level = match settings.compression {
            Compression::Zstd { level } if compress(settings.compression, &sample).is_some() => {
                Some(level)
            }
            _ => None,
        };
        drop(sample);
        let mut st = e.lock_live(bucket)?;
        let mut undo = Undo::begin(&st);
        let mut ops = Vec::new();
        let ct = meta.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE);
        let written = (|| -> Result<u64> {
            let ts = self.pick_ts(
                &mut None,
                &b,
                &e,
                &mut st,
                meta.ts,
                &mut BatchSeen::default(),
            )?;
            if level.is_none() {
                if let Some(value) =
                    self.link_spool(&b, &e, &mut st, ts, meta, &spool, &mut ops, &mut undo)?
                {
                    self.frame_done(&b, &e, &mut st, ts, value, &mut ops);
                    return Ok(ts);
                }
            }
            let at = self.frame_at(&b, &e, &mut st, ts, raw, &mut ops, &mut undo)?;
            let flags = if level.is_some() { FLAG_ZSTD } else { 0 };
            let EncodedHead {
                bytes: mut head,
                len_at,
            } = encode_head(&HeadSpec {
                flags,
                ts,
                base_ts: at.block.base_ts,
                stored_len: raw,
                raw_len: raw,
                content_type: ct,
                labels: &meta.labels,
                padded: true,
            });
            let body_at = at.start + head.len() as u64;
            let (stored, payload_crc) = match level {
                Some(level) => {
                    let mut w = FrameWriter {
                        file: &at.file,
                        pos: body_at,
                        crc: 0,
                        stored: 0,
                    };
                    let mut enc = zstd::stream::write::Encoder::new(&mut w, level)
                        .map_err(|e| Error::io("zstd", e))?;
                    let mut r = SpoolReader {
                        file: spool.file(),
                        pos: spool.base(),
                        end: spool.base() + raw,
                    };
                    std::io::copy(&mut r, &mut enc)
                        .map_err(|e| Error::io("writing a record", e))?;
                    enc.finish().map_err(|e| Error::io("zstd", e))?;
                    (w.stored, w.crc)
                }
                None => {
                    copy_range(spool.file(), spool.base(), &at.file, body_at, raw)
                        .map_err(|e| Error::io("copying a spooled payload into its block", e))?;
                    (raw, spool.crc())
                }
            };
            put_padded_varint(&mut head[len_at..len_at + PADDED_VARINT], stored);
            if flags & FLAG_ZSTD != 0 {
                put_padded_varint(
                    &mut head[len_at + PADDED_VARINT..len_at + 2 * PADDED_VARINT],
                    raw,
                );
            }
            seal_head(&mut head, payload_crc, stored);
            at.file
                .write_all_at(&head, at.start)
                .map_err(|e| Error::io("writing a record head", e))?;
            let value = IndexValue {
                block_id: at.block.id,
                offset: at.start,
                frame_len: head.len() as u64 + stored,
                stored,
                size: raw,
                flags,
                attrs: Arc::new(Attrs {
                    content_type: ct.to_string(),
                    labels: meta.labels.clone(),
                }),
            };
            self.frame_done(&b, &e, &mut st, ts, value, &mut ops);
            Ok(ts)
        })();
        match written {
            Ok(ts) => {
                self.commit_or_undo(&b, &e, &mut st, ops, undo)?;
                Ok(ts)
            }
            Err(err) => {
                self.undo(&b, &e, &mut st, undo);
                Err(err)
            }
        }
    }

    /// Where one large frame of about `adding` bytes goes: the active block (a new one if
    /// the current one is full), at its end.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn frame_at(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        ts: u64,
        adding: u64,
        ops: &mut Vec<Op>,
        undo: &mut Undo,
    ) -> Result<FrameAt> {
        let block = self.ensure_active(b, e, st, ts, adding, ops, undo)?;
        let file = self.block_file(e, block.id)?;
        undo.touch(block.id, &file);
        Ok(FrameAt {
            block,
            file,
            start: block.len,
        })
    }

    /// Accounts for one frame written at the end of the active block and queues its index
    /// ops (as `flush_pending` does for buffered frames).
    pub(crate) fn frame_done(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        ts: u64,
        value: IndexValue,
        ops: &mut Vec<Op>,
    ) {
        let len = value.frame_len;
        b.grow(len);
        index_frames(e, st, len, &mut vec![PendingRec { ts, value }], ops);
    }
}

/// Queues index ops for frames just appended to the active block and updates its state.
fn index_frames(
    e: &Entry,
    st: &mut EntryState,
    len: u64,
    pending: &mut Vec<PendingRec>,
    ops: &mut Vec<Op>,
) {
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

/// One record given to [`Store::write_many`]: what it says and its payload, as pieces.
pub(crate) struct RecordIn<'a, P> {
    pub meta: &'a WriteMeta,
    pub pieces: &'a [P],
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

/// Checks and compresses records outside the entry lock (compression is the costly part).
pub(crate) fn prepare<'a, P: AsRef<[u8]> + 'a>(
    b: &Bucket,
    records: impl Iterator<Item = RecordIn<'a, P>>,
) -> Vec<Prepared<'a, P>> {
    let settings = b.settings();
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
            Prepared {
                check: check_meta(record.meta),
                record,
                packed,
            }
        })
        .collect()
}

/// A record prepared outside the entry lock: its check and its compressed payload (`None`:
/// stored raw).
pub(crate) struct Prepared<'a, P> {
    record: RecordIn<'a, P>,
    check: Result<()>,
    packed: Option<Vec<u8>>,
}

/// A frame appended (or about to be) and not yet queued for the index.
struct PendingRec {
    ts: u64,
    value: IndexValue,
}

/// Timestamps picked earlier in one batch. Most batches are in order and never ask, so
/// the hash set is only built on the first question.
#[derive(Default)]
struct BatchSeen {
    all: Vec<u64>,
    set: Option<std::collections::HashSet<u64>>,
}

impl BatchSeen {
    fn push(&mut self, ts: u64) {
        match &mut self.set {
            Some(set) => {
                set.insert(ts);
            }
            None => self.all.push(ts),
        }
    }

    fn contains(&mut self, ts: u64) -> bool {
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
    file: &'a File,
    pos: u64,
    crc: u32,
    stored: u64,
}

impl std::io::Write for FrameWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write_all_at(buf, self.pos)?;
        self.pos += buf.len() as u64;
        self.stored += buf.len() as u64;
        self.crc = crc32c::crc32c_append(self.crc, buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes of a payload given in pieces.
fn pieces_len<P: AsRef<[u8]>>(pieces: &[P]) -> u64 {
    pieces.iter().map(|p| p.as_ref().len() as u64).sum()
}

/// Payloads (or pieces of one) from this size on are appended from the caller's buffer (one `pwritev` of the
/// gathered pieces) instead of being copied behind their head first.
const GATHER_FROM: usize = 16 << 10;

/// The frames of one append: heads and small payloads copied together, large payloads
/// borrowed from the caller, written with one `pwritev`. A 10 MiB payload used to be copied
/// into one buffer with its head before the write: one more pass over every byte.
#[derive(Default)]
struct Gather<'a> {
    parts: Vec<GatherPart<'a>>,
    len: usize,
}

enum GatherPart<'a> {
    Copied(Vec<u8>),
    Borrowed(&'a [u8]),
}

impl<'a> Gather<'a> {
    /// Appends a copy of `bytes`.
    fn copy(&mut self, bytes: &[u8]) {
        match self.parts.last_mut() {
            Some(GatherPart::Copied(v)) => v.extend_from_slice(bytes),
            _ => self.parts.push(GatherPart::Copied(bytes.to_vec())),
        }
        self.len += bytes.len();
    }

    /// Appends a payload: borrowed when large, copied when small.
    fn payload(&mut self, bytes: &'a [u8]) {
        if bytes.len() < GATHER_FROM {
            self.copy(bytes);
        } else {
            self.parts.push(GatherPart::Borrowed(bytes));
            self.len += bytes.len();
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn write_at(&self, file: &std::fs::File, offset: u64) -> std::io::Result<()> {
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

    fn clear(&mut self) {
        self.parts.clear();
        self.len = 0;
    }
}
