//! `Store`'s write path: single, streamed, spooled and batched writes (`write.rs` holds the
//! framing and the undo), write rounds (`write_round.rs`), large spooled records linked as
//! blocks of their own (`spool_block.rs`), and spools (`spool.rs`).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::sync::Arc;

use crate::block::{create_block, NewBlock};
use crate::bucket::Bucket;
use crate::codec::bytes::{put_padded_varint, PADDED_VARINT};
use crate::codec::frame::{
    encode_head, encode_head_attrs, encode_head_with_attrs, seal_head, seal_head_over, EncodedHead,
    HeadSpec, FLAG_ZSTD,
};
use crate::codec::index::{Attrs, BlockState, IndexValue};
use crate::commit::{Change, Op};
use crate::entry::{Active, Block, Entry, EntryState};
use crate::error::{Error, NotFound, Result, WriteError};
use crate::files::sync_dir;
use crate::lock::MutexGuard;
use crate::names::validate_entry_name;
use crate::now_micros;
use crate::record::DEFAULT_CONTENT_TYPE;
use crate::record::{BatchRecord, WriteMeta};
use crate::settings::Compression;
use crate::spool::{copy_range, SpoolReader};
use crate::spool_block::{link_file, linked_prefix, LINK_FROM};
use crate::store::spool::Spool;
use crate::store::Store;
use crate::write::{
    all_refused, check_meta, compress, frame_need, index_frames, pieces_len, prepare, records_need,
    BatchSeen, FrameAt, FrameWriter, Gather, PendingRec, Prepared, RecordIn, SeenMetas, Txn,
    Uncommitted, Undo, WriteFloor, GATHER_FROM, SAMPLE,
};
use crate::write_round::{Admitted, Group, GroupResult, TimedGroup, TimedRecord};

/// A content type and labels met in an append round: the index's `Attrs` (one shared by
/// every record of the set) and their encoding at the end of a frame head.
struct RoundAttrs {
    attrs: Arc<Attrs>,
    encoded: Vec<u8>,
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
                // Older than the bucket's `max_age` reaches back: refused before the entry
                // was looked up or made (`WriteFloor`, in `prepare` and `write_spooled`).
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
        // The entry's folder may have gone to the trash (its bucket is being removed: an
        // entry's own removal holds its lock): then the bucket is not found, which is what
        // a writer racing that removal should hear (it heard `entry_not_found`: races probe
        // of 2026-11-28).
        let gone = |e: Error| match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                NotFound::Bucket(bucket.name().to_string()).into()
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
        let mut r = self.write_many(
            bucket,
            entry,
            std::iter::once(RecordIn::of(meta, pieces)),
            1,
        )?;
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
                .map(|&(meta, pieces)| RecordIn::of(meta, pieces)),
            records.len(),
        )
    }

    /// As [`Store::write_group`], with each record's timestamp (`None`: now) given beside
    /// its content type and labels, whose `WriteMeta` (its own `ts` not read) records may
    /// share: a meta shared by many records is checked once and its index attrs are built
    /// once. The batch route gives one `WriteMeta` to every record of a body with the same
    /// content type and labels (docs/benchmarks/batch-1k-2026-11-26.md).
    pub fn write_group_at<P: AsRef<[u8]>>(
        &self,
        bucket: &str,
        entry: &str,
        records: &[TimedRecord<'_, P>],
    ) -> Result<Vec<Result<u64>>> {
        self.write_many(
            bucket,
            entry,
            records
                .iter()
                .map(|&(ts, meta, pieces)| RecordIn { ts, meta, pieces }),
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
            records
                .iter()
                .map(|r| RecordIn::of(&r.meta, std::slice::from_ref(&r.data))),
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
        let mut prepared = prepare(&b, records);
        if let Some(refused) = all_refused(&mut prepared) {
            return Ok(refused);
        }
        self.with_live_entry(&b, entry, true, |e, st| {
            let (results, ops, undo) = self.append_entry(&b, e, st, prepared, n)?;
            if !ops.is_empty() {
                self.commit_or_undo(&b, e, st, ops, undo)?;
            }
            Ok(results)
        })
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
        // The bytes the loop copies (heads and small payloads) reserved at once: growing
        // the buffer record by record reallocated and moved it over and over (a third of a
        // 1 KiB batch's user time in docs/benchmarks/batch-1k-2026-11-25.md).
        let mut buf = Gather::expecting(
            records
                .iter()
                .map(|p| {
                    let len = pieces_len(p.record.pieces);
                    frame_need(
                        p.record.meta,
                        if len < GATHER_FROM as u64 { len } else { 0 },
                    )
                })
                .sum(),
        );
        // One head buffer for every record of the round.
        let mut head = Vec::new();
        let mut seen = BatchSeen::default();
        let mut pending: Vec<PendingRec> = Vec::new();
        let mut start_len = 0;
        let mut block_id = 0;
        // One read transaction for every duplicate check of the batch (opened by the first
        // check that needs it): the entry's mutex is held, so nothing else can add this
        // entry's timestamps meanwhile.
        let mut txn = None;
        // Records of a batch mostly share their content type and labels: one copy. Records
        // given one `WriteMeta` share its `Attrs` (found by the meta's address, whatever
        // came between); others share the previous record's when equal.
        // With the attrs, their encoding at the end of a frame head: once per set too.
        let mut by_meta: SeenMetas<'a, Rc<RoundAttrs>> = SeenMetas::new();
        let mut shared: Option<Rc<RoundAttrs>> = None;
        for Prepared {
            record:
                RecordIn {
                    ts: want,
                    meta,
                    pieces: data,
                },
            check,
            packed,
        } in records
        {
            if let Err(err) = check {
                results.push(Err(err));
                continue;
            }
            let ts = match self.pick_ts(&mut txn, b, e, st, want, &mut seen) {
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
            let known = by_meta.get(meta).cloned();
            let rec_attrs = match (known, &shared) {
                (Some(m), _) => m,
                (None, Some(m)) if m.attrs.content_type == ct && m.attrs.labels == meta.labels => {
                    by_meta.put(meta, m.clone());
                    m.clone()
                }
                _ => {
                    let mut encoded = Vec::new();
                    encode_head_attrs(&mut encoded, ct, &meta.labels);
                    let m = Rc::new(RoundAttrs {
                        attrs: Arc::new(Attrs {
                            content_type: ct.to_string(),
                            labels: meta.labels.clone(),
                        }),
                        encoded,
                    });
                    by_meta.put(meta, m.clone());
                    m
                }
            };
            encode_head_with_attrs(
                &mut head,
                &HeadSpec {
                    flags,
                    ts,
                    base_ts: a.base_ts,
                    stored_len,
                    raw_len,
                    content_type: ct,
                    labels: &meta.labels,
                    padded: false,
                },
                &rec_attrs.encoded,
            );
            match &packed {
                Some(c) => seal_head_over(&mut head, [c.as_slice()]),
                None => seal_head_over(&mut head, data.iter().map(|p| p.as_ref())),
            }
            let at = start_len + buf.len() as u64;
            let frame_len = head.len() as u64 + stored_len;
            buf.copy(&head);
            match &packed {
                // A compressed payload is the loop's own: copied (it is small or it would
                // not have compressed well enough to be kept).
                Some(c) => buf.copy(c),
                None => data.iter().for_each(|p| buf.payload(p.as_ref())),
            }
            pending.push(PendingRec {
                ts,
                value: IndexValue {
                    block_id,
                    offset: at,
                    frame_len,
                    stored: stored_len,
                    size: raw_len,
                    flags,
                    attrs: rec_attrs.attrs.clone(),
                },
            });
            shared = Some(rec_attrs);
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
        match self.inner.commit(Change { ops, files }) {
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
        match st.reload(&self.inner.index, e.id()) {
            Ok(change) => b.resize(change),
            Err(err) => log::error!(
                "could not reload {}/{} from the index: {err}",
                b.name(),
                e.name()
            ),
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
        if let Some(n) = len {
            spool.announce(n);
        }
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
    /// entry's new active block (`spool_block.rs`: no copy).
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
        // Before the entry is made: a refused write leaves no entry behind.
        if let Some(ts) = meta.ts {
            WriteFloor::now(&b).check(&b, ts)?;
        }
        let raw = spool.len();
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
        // A payload that is to become its block is on disk already (its bytes passed the
        // free-space guard as they arrived): the disk needs only its header and head, written
        // into the room in front of it. A copy needs the whole frame beside the spool.
        let need = frame_need(meta, raw);
        let to_link = level.is_none() && links(&spool);
        let writing = if to_link { spool.base() } else { need };
        let _res = self.reserve_writing(&b, need, writing)?;
        let plan = SpooledPlan {
            level,
            to_link,
            need,
            writing,
            raw,
        };
        self.with_live_entry(&b, entry, true, |e, st| {
            self.spooled_into(&b, e, st, meta, &spool, &plan)
        })
    }

    /// [`Store::write_spooled`] under the entry's lock (`st`): the spool linked as the
    /// entry's new block, or its payload copied (compressed by `plan.level`) into a frame;
    /// committed, or undone on failure.
    fn spooled_into(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut MutexGuard<'_, EntryState>,
        meta: &WriteMeta,
        spool: &Spool,
        plan: &SpooledPlan,
    ) -> Result<u64> {
        let SpooledPlan {
            level,
            to_link,
            need,
            writing,
            raw,
        } = *plan;
        let mut undo = Undo::begin(st);
        let mut ops = Vec::new();
        let ct = meta.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE);
        let written = (|| -> Result<u64> {
            let ts = self.pick_ts(&mut None, b, e, st, meta.ts, &mut BatchSeen::default())?;
            if level.is_none() {
                if let Some(value) =
                    self.link_spool(b, e, st, ts, meta, spool, &mut ops, &mut undo)?
                {
                    self.frame_done(b, e, st, ts, value, &mut ops);
                    return Ok(ts);
                }
            }
            if to_link {
                // Not linked after all (no `linkat` here, or the room did not match): the
                // copy needs its bytes beside the spool, which the reservation did not ask
                // for. Checked without evicting: this thread holds the entry's lock.
                self.guard_free_no_evict(need.saturating_sub(writing))?;
            }
            let at = self.frame_at(b, e, st, ts, raw, &mut ops, &mut undo)?;
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
            self.frame_done(b, e, st, ts, value, &mut ops);
            Ok(ts)
        })();
        match written {
            Ok(ts) => {
                self.commit_or_undo(b, e, st, ops, undo)?;
                Ok(ts)
            }
            Err(err) => {
                self.undo(b, e, st, undo);
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

impl Store {
    /// Writes groups of records of several entries: each group as [`Store::write_group`]
    /// (one append per entry, a result per record: a duplicate timestamp or bad labels fail
    /// only their record), all groups' index changes in **one** commit. One outcome per
    /// group, in order. A group fails as a whole (the outer error) for its own reasons
    /// (unknown bucket, bad entry name, quota, a failed append), which do not touch the
    /// other groups; a failed shared commit fails every group that took part, after
    /// cutting what each appended. Two groups of one entry are written one after the other.
    pub fn write_groups<P: AsRef<[u8]>>(&self, groups: &[Group<'_, P>]) -> Vec<GroupResult> {
        self.write_groups_with(
            groups.len(),
            |at| (groups[at].0, groups[at].1, groups[at].2.len()),
            |at| {
                groups[at]
                    .2
                    .iter()
                    .map(|&(meta, pieces)| RecordIn::of(meta, pieces))
            },
        )
    }

    /// As [`Store::write_groups`], with each record's timestamp given beside a
    /// `WriteMeta` records may share (as [`Store::write_group_at`]): the server's batch
    /// writer thread writes the batch chunks queued while it was busy this way
    /// (`server/src/http/batch_writer.rs`).
    pub fn write_groups_at<P: AsRef<[u8]>>(
        &self,
        groups: &[TimedGroup<'_, P>],
    ) -> Vec<GroupResult> {
        self.write_groups_with(
            groups.len(),
            |at| (groups[at].0, groups[at].1, groups[at].2.len()),
            |at| {
                groups[at]
                    .2
                    .iter()
                    .map(|&(ts, meta, pieces)| RecordIn { ts, meta, pieces })
            },
        )
    }

    /// The round of [`Store::write_groups`] and [`Store::write_groups_at`]: `n` groups,
    /// group `at` named by `names(at)` (bucket, entry, how many records) with its records
    /// from `recs(at)`.
    fn write_groups_with<'a, P, I>(
        &self,
        n: usize,
        names: impl Fn(usize) -> (&'a str, &'a str, usize),
        recs: impl Fn(usize) -> I,
    ) -> Vec<GroupResult>
    where
        P: AsRef<[u8]> + 'a,
        I: Iterator<Item = RecordIn<'a, P>> + Clone,
    {
        let mut out: Vec<Option<GroupResult>> = (0..n).map(|_| None).collect();
        let mut buckets: Vec<Option<Arc<Bucket>>> = Vec::with_capacity(n);
        for (at, slot) in out.iter_mut().enumerate() {
            let (bucket, entry, _) = names(at);
            let found = self
                .get_bucket(bucket)
                .and_then(|b| Ok(validate_entry_name(entry).map(|()| b)?));
            match found {
                Ok(b) => buckets.push(Some(b)),
                Err(err) => {
                    *slot = Some(Err(err));
                    buckets.push(None);
                }
            }
        }
        // Reservations, evictions and entry creation: before any entry lock.
        let mut admitted: Vec<Admitted<'_, 'a, P>> = Vec::with_capacity(n);
        for (at, b) in buckets.iter().enumerate() {
            let Some(bucket) = b.as_deref() else { continue };
            let (_, entry, _) = names(at);
            let mut prepared = prepare(bucket, recs(at));
            if let Some(refused) = all_refused(&mut prepared) {
                out[at] = Some(Ok(refused));
                continue;
            }
            let admit = self
                .reserve(bucket, records_need(recs(at)))
                .and_then(|res| {
                    let e = self.entry_or_create(bucket, entry)?;
                    Ok((res, e))
                });
            match admit {
                Ok((reserved, entry)) => admitted.push(Admitted {
                    at,
                    bucket,
                    entry,
                    prepared,
                    _reserved: reserved,
                }),
                Err(err) => out[at] = Some(Err(err)),
            }
        }
        // Entry locks in increasing entry id order; a second group of an entry waits for
        // the round (it would need the lock the round holds).
        admitted.sort_by_key(|a| a.entry.id());
        let mut later = Vec::new();
        let mut round: Vec<Admitted<'_, 'a, P>> = Vec::with_capacity(admitted.len());
        for a in admitted {
            match round.last() {
                Some(last) if last.entry.id() == a.entry.id() => later.push(a.at),
                _ => round.push(a),
            }
        }
        // A group whose entry was renamed or removed before the round locked it goes after
        // the round (first: it came before the later ones of its entry), to the entry of
        // that name then (`Store::with_live_entry`).
        let gone = self.write_round(&names, round, &mut out);
        for at in gone.into_iter().chain(later) {
            let (bucket, entry, len) = names(at);
            out[at] = Some(self.write_many(bucket, entry, recs(at), len));
        }
        out.into_iter()
            .map(|o| {
                o.unwrap_or_else(|| Err(Error::Index("a group of a round had no outcome".into())))
            })
            .collect()
    }

    /// Locks, appends and commits the admitted groups (one per entry, in entry id order).
    /// Returns the groups not written because their entry was gone (renamed or removed)
    /// when locked, while its bucket stays.
    fn write_round<'a, P: AsRef<[u8]> + 'a>(
        &self,
        names: &impl Fn(usize) -> (&'a str, &'a str, usize),
        round: Vec<Admitted<'_, 'a, P>>,
        out: &mut [Option<GroupResult>],
    ) -> Vec<usize> {
        // The entries outlive their guards; the prepared records move into the appends;
        // the reservations are held until the commit is done.
        let mut entries = Vec::with_capacity(round.len());
        let mut jobs = Vec::with_capacity(round.len());
        let mut _reserved = Vec::with_capacity(round.len());
        for a in round {
            entries.push(a.entry);
            jobs.push((a.at, a.bucket, a.prepared));
            _reserved.push(a._reserved);
        }
        let mut ops = Vec::new();
        let mut answers: Vec<(usize, Vec<Result<u64>>)> = Vec::with_capacity(jobs.len());
        let mut guards: Vec<MutexGuard<'_, EntryState>> = Vec::with_capacity(jobs.len());
        let mut undos: Vec<(&Bucket, &Entry, Undo)> = Vec::with_capacity(jobs.len());
        let mut gone = Vec::new();
        for (entry, (at, bucket, prepared)) in entries.iter().zip(jobs) {
            let (bucket_name, _, len) = names(at);
            let mut st = match entry.lock_live_ordered(bucket_name) {
                Ok(st) => st,
                Err(_) if !bucket.is_removed() => {
                    gone.push(at);
                    continue;
                }
                // The bucket itself was removed or renamed meanwhile.
                Err(_) => {
                    out[at] = Some(Err(NotFound::Bucket(bucket.name().to_string()).into()));
                    continue;
                }
            };
            match self.append_entry(bucket, entry, &mut st, prepared, len) {
                Ok((results, entry_ops, undo)) => {
                    ops.extend(entry_ops);
                    answers.push((at, results));
                    guards.push(st);
                    undos.push((bucket, entry, undo));
                }
                // Cut already; its lock goes now.
                Err(err) => out[at] = Some(Err(err)),
            }
        }
        let committed = if ops.is_empty() {
            Ok(())
        } else {
            let parts = guards
                .iter_mut()
                .zip(undos)
                .map(|(st, (b, e, undo))| Uncommitted { b, e, st, undo })
                .collect();
            self.commit_or_undo_all(ops, parts)
        };
        for (at, results) in answers {
            out[at] = Some(match &committed {
                Ok(()) => Ok(results),
                Err(err) => Err(err.duplicate()),
            });
        }
        gone
    }
}

impl Store {
    /// Makes `spool` (payload stored raw, record timestamp `ts`) the entry's new active
    /// block holding its one frame, and queues the index ops; returns the frame's index
    /// value, or `None` when the spool cannot be linked (the caller copies it instead).
    /// Called with the entry's lock held (`st`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn link_spool(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        ts: u64,
        meta: &WriteMeta,
        spool: &Spool,
        ops: &mut Vec<Op>,
        undo: &mut Undo,
    ) -> Result<Option<IndexValue>> {
        let raw = spool.len();
        if !links(spool) {
            return Ok(None);
        }
        let id = self.inner.new_block_id();
        let (prefix, header_len) = linked_prefix(id, e.name(), ts, meta, raw, spool.crc());
        if prefix.len() as u64 != spool.base() {
            return Ok(None);
        }
        spool
            .file()
            .write_all_at(&prefix, 0)
            .map_err(|e| Error::io("writing the head of a spooled record", e))?;
        let file = Arc::new(
            spool
                .file()
                .try_clone()
                .map_err(|e| Error::io("duplicating a spool file's handle", e))?,
        );
        if let Err(err) = link_file(&file, &e.block_path(id)) {
            log::debug!("a spool could not become block {id:016x} ({err}): copying it");
            return Ok(None);
        }
        // From here the file is block `id`: an undo deletes it.
        undo.created_block(id);
        if self.inner.sync_dirs() {
            sync_dir(e.dir())?;
        }
        if let Some(Block { id, state }) = st.seal_active() {
            ops.push(Op::PutBlock { id, state });
        }
        self.inner.files.insert(id, file.clone(), ts);
        let header_len = header_len as u64;
        let state = BlockState::new_block(e.id(), ts, header_len);
        ops.push(Op::PutBlock { id, state });
        b.grow(header_len);
        st.start_block(id, state, header_len);
        undo.touch(id, &file);
        Ok(Some(IndexValue {
            block_id: id,
            offset: header_len,
            frame_len: prefix.len() as u64 - header_len + raw,
            stored: raw,
            size: raw,
            flags: 0,
            attrs: Arc::new(Attrs {
                content_type: meta
                    .content_type
                    .as_deref()
                    .unwrap_or(DEFAULT_CONTENT_TYPE)
                    .to_string(),
                labels: meta.labels.clone(),
            }),
        }))
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
        self.new_spool(bucket, crate::spool_block::room_for(entry, meta))
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
            announced: None,
            store: self.clone(),
            bucket,
        })
    }
}

/// What [`Store::write_spooled`] decided before the entry's lock: the zstd level (`None`:
/// stored raw), whether the spool is to become the record's block, and the bytes reserved.
#[derive(Clone, Copy)]
struct SpooledPlan {
    level: Option<i32>,
    to_link: bool,
    need: u64,
    writing: u64,
    raw: u64,
}

/// Whether `write_spooled` will try to make `spool` its record's block (the conditions of
/// [`Store::link_spool`] known before the entry lock: it may still copy).
fn links(spool: &Spool) -> bool {
    spool.len() >= LINK_FROM && spool.base() != 0
}

#[cfg(test)]
mod link_tests {
    #![allow(clippy::unwrap_used)]
    use crate::error::{Error, WriteError};
    use crate::record::Labels;
    use crate::record::WriteMeta;
    use crate::settings::{BucketSettings, Compression, QuotaType, StoreOptions};
    use crate::store::spool::Spool;
    use crate::store::Store;

    fn payload(n: usize, seed: u32) -> Vec<u8> {
        // Incompressible enough that a zstd bucket stores it raw.
        let mut x = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    fn spooled(s: &Store, entry: &str, meta: &WriteMeta, data: &[u8]) -> Spool {
        let mut spool = s.spool_for("b", entry, meta).unwrap();
        for piece in data.chunks(300_007) {
            spool.append(piece).unwrap();
        }
        spool
    }

    fn block_files(dir: &std::path::Path) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = std::fs::read_dir(dir.join("b").join("e"))
            .unwrap()
            .map(|d| d.unwrap())
            .filter(|d| d.file_name().to_string_lossy().ends_with(".blk"))
            .map(|d| {
                let len = d.metadata().unwrap().len();
                (d.file_name().to_string_lossy().into_owned(), len)
            })
            .collect();
        v.sort();
        v
    }

    /// A large raw spooled record becomes a block file of its own, exactly its frame; the
    /// small records after it go into that block (it is the active one); everything reads
    /// back byte-identical, before and after a reopen (recovery finds nothing to repair).
    #[test]
    fn a_large_spooled_record_becomes_its_own_block() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let small = payload(1000, 1);
        s.write("b", "e", &WriteMeta::at(1), &small).unwrap();
        let before = block_files(dir.path());
        assert_eq!(before.len(), 1);
        let big = payload(3 << 20, 2);
        let mut labels = Labels::new();
        labels.insert("cam".into(), "front".into());
        let meta = WriteMeta {
            ts: Some(2),
            content_type: Some("image/jpeg".into()),
            labels,
        };
        let spool = spooled(&s, "e", &meta, &big);
        let room = spool.base();
        assert!(room > 0);
        assert_eq!(s.write_spooled("b", "e", &meta, spool).unwrap(), 2);
        let after = block_files(dir.path());
        assert_eq!(after.len(), 2, "{after:?}");
        assert_eq!(after[0], before[0], "the old block is untouched");
        assert_eq!(
            after[1].1,
            room + big.len() as u64,
            "one frame, nothing else"
        );
        s.write("b", "e", &WriteMeta::at(3), &small).unwrap();
        let grown = block_files(dir.path());
        assert_eq!(grown.len(), 2, "the next record goes into the linked block");
        assert!(grown[1].1 > after[1].1);
        let check = |s: &Store| {
            let r = s.read("b", "e", Some(2)).unwrap();
            assert!(r.data == big);
            assert_eq!(r.meta.content_type, "image/jpeg");
            assert_eq!(r.meta.labels.get("cam").map(String::as_str), Some("front"));
            assert_eq!(s.read("b", "e", Some(1)).unwrap().data, small);
            assert_eq!(s.read("b", "e", Some(3)).unwrap().data, small);
            let (_, p) = s.read_payload("b", "e", Some(2)).unwrap();
            assert!(p.unwrap().as_ref() == big);
            assert_eq!(s.entry("b", "e").unwrap().record_count, 3);
        };
        check(&s);
        drop(s);
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert!(
            s.recovery_report().events.is_empty(),
            "{:?}",
            s.recovery_report()
        );
        check(&s);
    }

    /// What is not linked is copied as before: a compressible payload in a zstd bucket
    /// (stored compressed), one below `LINK_FROM`, one from a plain `spool` (no room), and
    /// a record whose timestamp is taken (409, nothing linked, the stored one kept).
    #[test]
    fn what_cannot_be_linked_is_copied_and_a_refused_spool_leaves_no_block() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let z = BucketSettings {
            compression: Compression::Zstd { level: 1 },
            ..BucketSettings::default()
        };
        s.create_bucket("b", z).unwrap();
        let text: Vec<u8> = (0..(2u32 << 20)).map(|i| (i % 7) as u8).collect();
        let meta = WriteMeta::at(1);
        s.write_spooled("b", "e", &meta, spooled(&s, "e", &meta, &text))
            .unwrap();
        let files = block_files(dir.path());
        assert_eq!(files.len(), 1);
        assert!(files[0].1 < 1 << 20, "stored compressed: {files:?}");
        let under = payload((super::LINK_FROM - 1) as usize, 3);
        let meta = WriteMeta::at(2);
        s.write_spooled("b", "e", &meta, spooled(&s, "e", &meta, &under))
            .unwrap();
        let plain = payload(2 << 20, 4);
        let mut spool = s.spool("b").unwrap();
        spool.append(&plain).unwrap();
        s.write_spooled("b", "e", &WriteMeta::at(3), spool).unwrap();
        assert_eq!(
            block_files(dir.path()).len(),
            1,
            "all copied into one block"
        );
        // Linked, then a second record at the same timestamp is refused before linking.
        let big = payload(2 << 20, 5);
        let meta = WriteMeta::at(4);
        s.write_spooled("b", "e", &meta, spooled(&s, "e", &meta, &big))
            .unwrap();
        assert_eq!(block_files(dir.path()).len(), 2);
        let other = payload(2 << 20, 6);
        let err = s
            .write_spooled("b", "e", &meta, spooled(&s, "e", &meta, &other))
            .unwrap_err();
        assert!(
            matches!(err, Error::Write(WriteError::Conflict { .. })),
            "{err:?}"
        );
        assert_eq!(block_files(dir.path()).len(), 2);
        for (ts, want) in [(1, &text), (2, &under), (3, &plain), (4, &big)] {
            assert!(s.read("b", "e", Some(ts)).unwrap().data == *want, "ts {ts}");
        }
    }

    /// Linked blocks are ordinary blocks to FIFO eviction: the oldest go first, a removed
    /// record stays removed after a reopen, and the kept ones read back whole.
    #[test]
    fn fifo_evicts_linked_blocks_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(
            dir.path(),
            StoreOptions {
                free_space_reserve: 0,
                ..StoreOptions::default()
            },
        )
        .unwrap();
        let fifo = BucketSettings {
            quota_type: QuotaType::Fifo,
            quota_size: 10 << 20,
            ..BucketSettings::default()
        };
        s.create_bucket("b", fifo).unwrap();
        let n = 8u64;
        for ts in 1..=n {
            let data = payload(2 << 20, ts as u32);
            let meta = WriteMeta::at(ts);
            s.write_spooled("b", "e", &meta, spooled(&s, "e", &meta, &data))
                .unwrap();
            assert!(s.bucket("b").unwrap().size <= 10 << 20);
        }
        let check = |s: &Store| {
            let info = s.entry("b", "e").unwrap();
            let oldest = info.oldest.unwrap();
            assert!(oldest > 1, "nothing evicted: {info:?}");
            assert_eq!(info.latest, Some(n));
            for ts in 1..oldest {
                assert!(s.read("b", "e", Some(ts)).is_err(), "ts {ts} came back");
            }
            for ts in oldest..=n {
                assert!(s.read("b", "e", Some(ts)).unwrap().data == payload(2 << 20, ts as u32));
            }
            oldest
        };
        let oldest = check(&s);
        drop(s);
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert_eq!(check(&s), oldest);
    }
}
