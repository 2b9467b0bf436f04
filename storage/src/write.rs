//! The write path: quota and free-space reservation, timestamps, appending frames to the
//! active block, and FIFO eviction of whole oldest blocks.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::block::{block_path, create_block};
use crate::frame::{
    encode_head, put_padded_varint, HeadSpec, FLAG_ZSTD, FRAME_PREFIX, PADDED_VARINT,
};
use crate::index::{BlockMeta, IndexValue, RecMeta};
use crate::store::{Active, Bucket, Entry, EntryState};
use crate::sync::{Change, Op};
use crate::*;

type Txn<'a> = heed::RoTxn<'a, heed::WithoutTls>;

/// Bytes a frame adds beyond its payload, over-estimated for reservations.
const FRAME_SLACK: u64 = 64;
/// Payloads up to this size are compressed in one call; larger ones stream.
const SAMPLE: usize = 64 << 10;

/// Free bytes for an unprivileged writer on the file system holding `path`.
pub(crate) fn free_space(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "path has a NUL byte")
    })?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized out-parameter.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Space promised to one write; given back when the write is done.
pub(crate) struct Reservation<'a> {
    bucket: &'a Bucket,
    bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.bucket.reserved.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

fn check_meta(meta: &WriteMeta) -> Result<()> {
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
    for (k, v) in &meta.labels {
        validate_label_key(k).map_err(|e| WriteError::InvalidLabel(e.to_string()))?;
        if v.len() > 4096 {
            return Err(WriteError::InvalidLabel(format!(
                "value of {k:?} is longer than 4096 bytes"
            ))
            .into());
        }
    }
    Ok(())
}

impl Store {
    /// Checks free space and the quota for `need` more bytes, evicting FIFO blocks.
    /// Checks the quota and the free-space guard for `need` more bytes. A FIFO bucket
    /// deletes its oldest blocks to fit its quota, and also when the file system runs
    /// short of free space: such a bucket keeps taking writes while it has a block to
    /// give up, so the disk never fills with it.
    pub(crate) fn reserve<'a>(&self, bucket: &'a Bucket, need: u64) -> Result<Reservation<'a>> {
        let settings = bucket.settings.read().clone();
        let _g = match settings.quota_type {
            QuotaType::None => None,
            _ => Some(bucket.evict_lock.lock()),
        };
        let used = || bucket.size.load(Ordering::Acquire) + bucket.reserved.load(Ordering::Acquire);
        match settings.quota_type {
            QuotaType::None => {}
            QuotaType::Hard => {
                if used() + need > settings.quota_size {
                    return Err(WriteError::QuotaExceeded {
                        bucket: bucket.name.clone(),
                        quota: settings.quota_size,
                        used: used(),
                        needed: need,
                    }
                    .into());
                }
            }
            QuotaType::Fifo => {
                // Nothing left to delete ends the loop: the quota's precision is one block.
                while used() + need > settings.quota_size && self.evict_oldest(bucket)? {}
            }
        }
        let reserve = self.inner.opts.free_space_reserve;
        let mut free = self.free_space_cached(false)?;
        while free < reserve.saturating_add(need) {
            if settings.quota_type != QuotaType::Fifo || !self.evict_oldest(bucket)? {
                return Err(WriteError::DiskFull {
                    path: self.inner.path.clone(),
                    available: free,
                    reserve,
                }
                .into());
            }
            free = self.free_space_cached(true)?;
        }
        self.inner.free_cache.lock().written_since += need;
        bucket.reserved.fetch_add(need, Ordering::AcqRel);
        Ok(Reservation {
            bucket,
            bytes: need,
        })
    }

    /// Deletes the bucket's oldest block (lowest id: first written). False if none.
    fn evict_oldest(&self, bucket: &Bucket) -> Result<bool> {
        let entries: Vec<Arc<Entry>> = bucket.entries.read().values().cloned().collect();
        let oldest = entries
            .iter()
            .filter_map(|e| {
                e.state
                    .lock()
                    .blocks
                    .keys()
                    .next()
                    .map(|id| (*id, e.clone()))
            })
            .min_by_key(|(id, _)| *id);
        let Some((id, entry)) = oldest else {
            return Ok(false);
        };
        let mut st = entry.state.lock();
        self.delete_block(bucket, &entry, &mut st, id)?;
        bucket.evicted.fetch_add(1, Ordering::Relaxed);
        self.inner.evicted_blocks.fetch_add(1, Ordering::Relaxed);
        log::debug!(
            "FIFO quota of bucket {}: evicted block {id:016x} of {}",
            bucket.name,
            entry.name
        );
        Ok(true)
    }

    /// Removes a block with its index records and its file.
    pub(crate) fn delete_block(
        &self,
        bucket: &Bucket,
        entry: &Entry,
        st: &mut EntryState,
        id: u64,
    ) -> Result<()> {
        let Some(meta) = st.blocks.get(&id).copied() else {
            return Ok(());
        };
        let mut ops = Vec::with_capacity(2);
        if meta.records > 0 {
            ops.push(Op::DelBlockRecords {
                entry_id: entry.id,
                min: meta.min_ts,
                max: meta.max_ts,
                block_id: id,
            });
        }
        ops.push(Op::DelBlock { id });
        self.inner
            .committer
            .commit(&self.inner.index, Change { ops, files: vec![] })?;
        st.blocks.remove(&id);
        if st.active.as_ref().is_some_and(|a| a.id == id) {
            st.active = None;
        }
        entry.files.write().remove(&id);
        self.inner.committer.forget(id);
        let path = block_path(&entry.dir, id);
        if let Err(e) = std::fs::remove_file(&path) {
            log::warn!("could not delete block {path:?}: {e}");
        }
        bucket.size.fetch_sub(
            meta.indexed_len.min(bucket.size.load(Ordering::Acquire)),
            Ordering::AcqRel,
        );
        Ok(())
    }

    /// Free bytes, measured with `statvfs` at most every 20 ms or 64 MiB of writes (or
    /// now, with `fresh`), minus what was written since the measurement.
    fn free_space_cached(&self, fresh: bool) -> Result<u64> {
        let mut c = self.inner.free_cache.lock();
        let stale = c
            .measured
            .is_none_or(|t| t.elapsed() > std::time::Duration::from_millis(20));
        if fresh || stale || c.written_since > (64 << 20) {
            c.free = free_space(&self.inner.path)
                .map_err(|e| Error::io("statvfs of the data folder", e))?;
            c.measured = Some(std::time::Instant::now());
            c.written_since = 0;
        }
        Ok(c.free.saturating_sub(c.written_since))
    }

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
            self.inner.index.contains(txn, entry.id, ts)
        };
        let ts = match want {
            Some(ts) => {
                if taken(ts, st)? {
                    return Err(WriteError::Conflict {
                        bucket: bucket.name.clone(),
                        entry: entry.name.clone(),
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

    /// The active block with room for one more frame, sealing and starting one if needed.
    /// Returns the ops that record a sealed block.
    fn ensure_active(
        &self,
        bucket: &Bucket,
        entry: &Entry,
        st: &mut EntryState,
        first_ts: u64,
        ops: &mut Vec<Op>,
    ) -> Result<()> {
        let settings = bucket.settings.read().clone();
        if let Some(a) = &st.active {
            let meta = st.blocks.get(&a.id).copied().unwrap_or_default();
            if a.len < settings.max_block_size && meta.records < settings.max_block_records {
                return Ok(());
            }
            let mut sealed = meta;
            sealed.sealed = true;
            st.blocks.insert(a.id, sealed);
            ops.push(Op::PutBlock {
                id: a.id,
                meta: sealed,
            });
            st.active = None;
        }
        let id = self.inner.next_block.fetch_add(1, Ordering::Relaxed);
        let path = block_path(&entry.dir, id);
        let (file, len) = create_block(&path, id, first_ts, &entry.name)?;
        let meta = BlockMeta {
            entry_id: entry.id,
            base_ts: first_ts,
            min_ts: first_ts,
            max_ts: first_ts,
            records: 0,
            indexed_len: len,
            sealed: false,
        };
        st.blocks.insert(id, meta);
        ops.push(Op::PutBlock { id, meta });
        bucket.size.fetch_add(len, Ordering::AcqRel);
        st.active = Some(Active {
            id,
            file,
            len,
            base_ts: first_ts,
        });
        Ok(())
    }

    /// Writes one record; returns its timestamp.
    pub fn write(&self, bucket: &str, entry: &str, meta: &WriteMeta, data: &[u8]) -> Result<u64> {
        let mut r = self.write_many(bucket, entry, std::iter::once((meta, data)), 1, false)?;
        r.pop()
            .unwrap_or_else(|| Err(Error::Index("write produced no result".into())))
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
            records.iter().map(|r| (&r.meta, r.data.as_slice())),
            n,
            false,
        )
    }

    /// The write path of `write`, `write_batch` and label updates (`replace`: an existing
    /// record at the same timestamp is superseded instead of being a conflict).
    pub(crate) fn write_many<'a>(
        &self,
        bucket: &str,
        entry: &str,
        records: impl Iterator<Item = (&'a WriteMeta, &'a [u8])> + Clone,
        n: usize,
        replace: bool,
    ) -> Result<Vec<Result<u64>>> {
        let b = self.get_bucket(bucket)?;
        validate_entry_name(entry)?;
        let need: u64 = records
            .clone()
            .map(|(_, d)| d.len() as u64 + FRAME_SLACK)
            .sum();
        let _res = self.reserve(&b, need)?;
        let e = self.entry_or_create(&b, entry)?;
        let settings = b.settings.read().clone();
        // Compress outside the entry lock: it is the costly part.
        let prepared: Vec<(Result<()>, Option<Vec<u8>>)> = records
            .clone()
            .map(|(m, d)| (check_meta(m), compress(settings.compression, d)))
            .collect();
        let mut st = e.lock_live(bucket)?;
        let mut results: Vec<Result<u64>> = Vec::with_capacity(n);
        let mut ops = Vec::with_capacity(n + 2);
        let mut buf: Vec<u8> = Vec::new();
        let mut seen = BatchSeen::default();
        let mut pending: Vec<(u64, u64, u64, IndexValue)> = Vec::with_capacity(n); // ts, at, len, value
        let mut start_len = 0;
        let mut block_id = 0;
        // One read transaction for every duplicate check of the batch (opened by the first
        // check that needs it): the entry's mutex is held, so nothing else can add this
        // entry's timestamps meanwhile.
        let mut txn = None;
        // Records of a batch mostly share their content type and labels: one copy.
        let mut shared: Option<Arc<RecMeta>> = None;
        for ((meta, data), (check, packed)) in records.zip(prepared) {
            if let Err(err) = check {
                results.push(Err(err));
                continue;
            }
            let want = if replace { None } else { meta.ts };
            let picked = match (replace, meta.ts) {
                (true, Some(ts)) => Ok(ts),
                _ => self.pick_ts(&mut txn, &b, &e, &mut st, want, &mut seen),
            };
            let ts = match picked {
                Ok(ts) => ts,
                Err(err) => {
                    results.push(Err(err));
                    continue;
                }
            };
            // A block fills up inside a batch: flush what we have into it first.
            let full = st.active.as_ref().is_some_and(|a| {
                let m = st.blocks.get(&a.id).copied().unwrap_or_default();
                a.len + (buf.len() as u64) >= settings.max_block_size
                    || m.records + pending.len() as u64 >= settings.max_block_records
            });
            if st.active.is_none() || full {
                self.flush_pending(&b, &e, &mut st, &mut buf, &mut pending, &mut ops)?;
                self.ensure_active(&b, &e, &mut st, ts, &mut ops)?;
            }
            let Some(a) = st.active.as_ref() else {
                return Err(Error::Index("no active block after ensure_active".into()));
            };
            if pending.is_empty() {
                start_len = a.len;
                block_id = a.id;
            }
            let (flags, stored) = match &packed {
                Some(c) => (FLAG_ZSTD, c.as_slice()),
                None => (0, data),
            };
            let ct = meta.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE);
            let (mut head, _) = encode_head(&HeadSpec {
                flags,
                ts,
                base_ts: a.base_ts,
                stored_len: stored.len() as u64,
                raw_len: data.len() as u64,
                content_type: ct,
                labels: &meta.labels,
                padded: false,
            });
            let crc = crc32c::crc32c_append(crc32c::crc32c(&head[FRAME_PREFIX..]), stored);
            head[2..6].copy_from_slice(&crc.to_le_bytes());
            let at = start_len + buf.len() as u64;
            let frame_len = (head.len() + stored.len()) as u64;
            buf.extend_from_slice(&head);
            buf.extend_from_slice(stored);
            let rec_meta = match &shared {
                Some(m) if m.content_type == ct && m.labels == meta.labels => m.clone(),
                _ => {
                    let m = Arc::new(RecMeta {
                        content_type: ct.to_string(),
                        labels: meta.labels.clone(),
                    });
                    shared = Some(m.clone());
                    m
                }
            };
            pending.push((
                ts,
                at,
                frame_len,
                IndexValue {
                    block_id,
                    offset: at,
                    frame_len,
                    stored: stored.len() as u64,
                    size: data.len() as u64,
                    flags,
                    meta: rec_meta,
                },
            ));
            results.push(Ok(ts));
        }
        self.flush_pending(&b, &e, &mut st, &mut buf, &mut pending, &mut ops)?;
        drop(txn);
        if !ops.is_empty() {
            let files = st
                .active
                .as_ref()
                .map(|a| vec![(a.id, a.file.clone())])
                .unwrap_or_default();
            self.commit_or_undo(&b, &e, &mut st, ops, files)?;
        }
        Ok(results)
    }

    /// Appends buffered frames to the active block and queues their index ops.
    fn flush_pending(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        buf: &mut Vec<u8>,
        pending: &mut Vec<(u64, u64, u64, IndexValue)>,
        ops: &mut Vec<Op>,
    ) -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let Some(a) = st.active.as_mut() else {
            return Err(Error::Index(
                "frames pending without an active block".into(),
            ));
        };
        if let Err(err) = a.file.write_all_at(buf, a.len) {
            let _ = a.file.set_len(a.len);
            return Err(Error::io(format!("appending to block {:016x}", a.id), err));
        }
        a.len += buf.len() as u64;
        b.size.fetch_add(buf.len() as u64, Ordering::AcqRel);
        index_frames(e, st, pending, ops);
        buf.clear();
        Ok(())
    }

    /// Commits; if the commit fails, cuts the frames it covered from the active block so
    /// that nothing unacknowledged is resurrected by a later index rebuild.
    fn commit_or_undo(
        &self,
        b: &Bucket,
        e: &Entry,
        st: &mut EntryState,
        ops: Vec<Op>,
        files: Vec<(u64, Arc<File>)>,
    ) -> Result<()> {
        match self
            .inner
            .committer
            .commit(&self.inner.index, Change { ops, files })
        {
            Ok(()) => Ok(()),
            Err(err) => {
                log::error!(
                    "index commit failed for {}/{}: {err}; reloading entry state",
                    b.name,
                    e.name
                );
                // The in-memory block metadata ran ahead of the index: reload it.
                crate::recover::reload_entry(self, b, e, st)?;
                Err(err)
            }
        }
    }

    /// Writes one record from a reader without holding it in memory. `len`, when given,
    /// must match what the reader yields (`WriteError::LengthMismatch` otherwise).
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
        let b = self.get_bucket(bucket)?;
        validate_entry_name(entry)?;
        let _res = self.reserve(&b, len.unwrap_or(0) + FRAME_SLACK)?;
        let e = self.entry_or_create(&b, entry)?;
        let settings = b.settings.read().clone();
        // Sample the start to decide whether compression is worth it.
        let mut sample = Vec::with_capacity(SAMPLE);
        reader
            .take(SAMPLE as u64)
            .read_to_end(&mut sample)
            .map_err(|e| Error::io("reading the payload", e))?;
        let level = match settings.compression {
            Compression::Zstd { level } if compress(settings.compression, &sample).is_some() => {
                Some(level)
            }
            _ => None,
        };
        let mut st = e.lock_live(bucket)?;
        let ts = self.pick_ts(
            &mut None,
            &b,
            &e,
            &mut st,
            meta.ts,
            &mut BatchSeen::default(),
        )?;
        let mut ops = Vec::new();
        self.ensure_active(&b, &e, &mut st, ts, &mut ops)?;
        let Some(a) = st.active.as_ref() else {
            return Err(Error::Index("no active block after ensure_active".into()));
        };
        let (file, start, base_ts, block_id) = (a.file.clone(), a.len, a.base_ts, a.id);
        let ct = meta.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE);
        let flags = if level.is_some() { FLAG_ZSTD } else { 0 };
        let spec = HeadSpec {
            flags,
            ts,
            base_ts,
            stored_len: 0,
            raw_len: 0,
            content_type: ct,
            labels: &meta.labels,
            padded: true,
        };
        let (mut head, len_at) = encode_head(&spec);
        let undo = |err: Error| {
            let _ = file.set_len(start);
            err
        };
        let mut w = FrameWriter {
            file: &file,
            pos: start + head.len() as u64,
            crc: 0,
            stored: 0,
        };
        let raw = match level {
            Some(level) => {
                let mut enc = zstd::stream::write::Encoder::new(&mut w, level)
                    .map_err(|e| undo(Error::io("zstd", e)))?;
                let raw = copy_all(&sample, reader, &mut enc).map_err(undo)?;
                enc.finish().map_err(|e| undo(Error::io("zstd", e)))?;
                raw
            }
            None => copy_all(&sample, reader, &mut w).map_err(undo)?,
        };
        if let Some(n) = len {
            if n != raw {
                return Err(undo(
                    WriteError::LengthMismatch {
                        expected: n,
                        got: raw,
                    }
                    .into(),
                ));
            }
        }
        let (stored, payload_crc) = (w.stored, w.crc);
        put_padded_varint(&mut head[len_at..len_at + PADDED_VARINT], stored);
        if flags & FLAG_ZSTD != 0 {
            put_padded_varint(
                &mut head[len_at + PADDED_VARINT..len_at + 2 * PADDED_VARINT],
                raw,
            );
        }
        let crc = crc32c::crc32c_combine(
            crc32c::crc32c(&head[FRAME_PREFIX..]),
            payload_crc,
            stored as usize,
        );
        head[2..6].copy_from_slice(&crc.to_le_bytes());
        file.write_all_at(&head, start)
            .map_err(|e| undo(Error::io("writing a record head", e)))?;
        let frame_len = head.len() as u64 + stored;
        let value = IndexValue {
            block_id,
            offset: start,
            frame_len,
            stored,
            size: raw,
            flags,
            meta: Arc::new(RecMeta {
                content_type: ct.to_string(),
                labels: meta.labels.clone(),
            }),
        };
        // The bytes are already in the file: account for them as flush_pending would.
        if let Some(a) = st.active.as_mut() {
            a.len = start + frame_len;
        }
        b.size.fetch_add(frame_len, Ordering::AcqRel);
        index_frames(
            &e,
            &mut st,
            &mut vec![(ts, start, frame_len, value)],
            &mut ops,
        );
        self.commit_or_undo(&b, &e, &mut st, ops, vec![(block_id, file.clone())])?;
        Ok(ts)
    }
}

/// Queues index ops for frames just appended to the active block and updates its metadata.
fn index_frames(
    e: &Entry,
    st: &mut EntryState,
    pending: &mut Vec<(u64, u64, u64, IndexValue)>,
    ops: &mut Vec<Op>,
) {
    let Some(a) = st.active.as_ref() else { return };
    let (id, new_len) = (a.id, a.len);
    let meta = st.blocks.entry(id).or_default();
    for (ts, _, _, value) in pending.drain(..) {
        if meta.records == 0 {
            meta.min_ts = ts;
            meta.max_ts = ts;
        }
        meta.min_ts = meta.min_ts.min(ts);
        meta.max_ts = meta.max_ts.max(ts);
        meta.records += 1;
        ops.push(Op::PutRec {
            entry_id: e.id,
            ts,
            value,
        });
    }
    meta.indexed_len = new_len;
    ops.push(Op::PutBlock { id, meta: *meta });
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
struct FrameWriter<'a> {
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

/// Copies the sample, then the rest of the reader, in 1 MiB chunks; returns bytes copied.
fn copy_all(sample: &[u8], reader: &mut dyn Read, w: &mut dyn std::io::Write) -> Result<u64> {
    w.write_all(sample)
        .map_err(|e| Error::io("writing a record", e))?;
    let mut total = sample.len() as u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("reading the payload", e)),
        };
        w.write_all(&buf[..n])
            .map_err(|e| Error::io("writing a record", e))?;
        total += n as u64;
    }
    Ok(total)
}
