//! The read path: point reads, streamed reads and time-range queries.
//!
//! Reads take no entry lock: the index says where a record is, the block file is read with
//! `pread`, and the CRC is checked before a byte is returned (or, for a stream, at its end).

use std::sync::Arc;

use crate::block::RecordReader;
use crate::block::{read_frame, read_frame_now};
use crate::codec::index::IndexValue;
use crate::entry::Entry;
use crate::error::{Error, NotFound, Result};
use crate::files::{CachedBlock, FileCache};
use crate::payload::{map_frame, Payload, Span, Windows, MAP_MAX, MAP_MIN, MEMORY_MAX};
use crate::record::{Record, RecordMeta};
use crate::tier::{Access, Tier};

pub(crate) fn meta_of(ts: u64, v: &IndexValue) -> RecordMeta {
    RecordMeta {
        ts,
        size: v.size,
        content_type: v.attrs.content_type.clone(),
        labels: v.attrs.labels.clone(),
    }
}

/// A block that disappeared under a reader (removed or evicted) means the record is gone.
pub(crate) fn gone_is_not_found(err: Error, bucket: &str, entry: &str, ts: u64) -> Error {
    match &err {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            NotFound::Record {
                bucket: bucket.into(),
                entry: entry.into(),
                ts,
            }
            .into()
        }
        _ => err,
    }
}

/// Where payloads are read from: the block files (through the file cache) and, for a
/// tiered block, the tier.
#[derive(Clone, Copy)]
pub(crate) struct Sources<'a> {
    pub files: &'a FileCache,
    pub tier: Option<&'a Tier>,
}

/// A block file's handle and base timestamp; for a block that is not on the local disk
/// and is tiered, the record's head fields and payload read from the object store instead
/// (a query's read, [`Access::Scan`], fetches ahead into the cache).
pub(crate) enum Source {
    Local(Arc<std::fs::File>, u64),
    Tiered(Payload),
}

pub(crate) fn source(
    from: Sources<'_>,
    e: &Entry,
    ts: u64,
    v: &IndexValue,
    access: Access,
) -> Result<Source> {
    // A tiered block is read from the tier without trying its local file first: that copy
    // is deleted once the object is verified, and a failed open() per record (a path built,
    // a lookup, an error) cost a tiered query a few per cent of its CPU.
    if let Some(tier) = from.tier {
        if let Some((_, data)) = tier.read_record(e, ts, v, access)? {
            return Ok(Source::Tiered(data));
        }
    }
    let CachedBlock { file, base_ts } = from.files.get(v.block_id, || e.block_path(v.block_id))?;
    Ok(Source::Local(file, base_ts))
}

/// Reads and checks a record's payload (the path is only built for an error message).
pub(crate) fn read_payload(
    from: Sources<'_>,
    e: &Entry,
    ts: u64,
    v: &IndexValue,
    access: Access,
) -> Result<Vec<u8>> {
    let (file, base_ts) = match source(from, e, ts, v, access)? {
        Source::Local(file, base_ts) => (file, base_ts),
        Source::Tiered(data) => return Ok(data.into_vec()),
    };
    read_local(e, ts, v, &file, base_ts)
}

/// Reads and checks a record's payload from its local block `file`.
pub(crate) fn read_local(
    e: &Entry,
    ts: u64,
    v: &IndexValue,
    file: &std::fs::File,
    base_ts: u64,
) -> Result<Vec<u8>> {
    let path = || e.block_path(v.block_id);
    read_frame(file, &path, v, base_ts, ts)
}

/// A record's payload without a copy where it can be ([`Payload::Mapped`]: a raw payload
/// of [`MAP_MIN`] to [`MAP_MAX`] bytes in a local block, or of any size up to `MAP_MAX`
/// inside a query's shared window: `window`), read into memory where it is small, tiered,
/// or compressed and at most [`MEMORY_MAX`]; `None` otherwise (stream it).
pub(crate) fn payload_of(
    from: Sources<'_>,
    e: &Entry,
    ts: u64,
    v: &IndexValue,
    access: Access,
    mut window: Option<(&mut Windows, Span)>,
) -> Result<Option<Payload>> {
    if v.size > MAP_MAX {
        return Ok(None);
    }
    // The block is looked up as for any read, also when a window of it is mapped: a block
    // deleted since the query listed its records reads as gone (`NotFound`), as before. A
    // reader of a window keeps the block's handle while the file cache says no block was
    // deleted since it took it (its epoch): the same answer without the cache's lookup
    // per record (~4 % of the CPU of range reads of 1 KiB records).
    let held = match (&window, from.tier) {
        (Some((w, _)), None) => w.held_block(v.block_id, from.files.epoch()),
        _ => None,
    };
    let (file, base_ts) = match held {
        Some(h) => h,
        None => {
            let epoch = from.files.epoch();
            match source(from, e, ts, v, access)? {
                Source::Local(file, base_ts) => {
                    if let Some((w, _)) = &mut window {
                        w.hold_block(v.block_id, epoch, &file, base_ts);
                    }
                    (file, base_ts)
                }
                Source::Tiered(data) => return Ok(Some(data)),
            }
        }
    };
    let path = || e.block_path(v.block_id);
    match window {
        // A window of several frames costs one mapping (or one `pread`, for small
        // records) for all of them: worth it at any size (a frame alone is not mapped
        // below MAP_MIN).
        Some((w, span)) if v.size >= MAP_MIN || span.is_shared(v) => {
            if let Some(p) = w.frame(&file, &path, v, span, base_ts, ts)? {
                return Ok(Some(p));
            }
        }
        _ if v.size >= MAP_MIN => {
            if let Some(m) = map_frame(&file, &path, v, base_ts, ts)? {
                return Ok(Some(Payload::Mapped(m)));
            }
        }
        _ => {}
    }
    if v.size > MEMORY_MAX {
        return Ok(None);
    }
    read_local(e, ts, v, &file, base_ts).map(|d| Some(Payload::Memory(d)))
}

/// A point read's payload only if reading it cannot wait on the disk or the network: a
/// raw payload under [`MAP_MIN`] in a local block whose file is open already, all of its
/// bytes in the page cache (`RWF_NOWAIT`), CRC-checked. `None` otherwise: read it with
/// [`payload_of`] on the blocking pool (which also reports any error the way it does).
pub(crate) fn payload_now(
    from: Sources<'_>,
    e: &Entry,
    ts: u64,
    v: &IndexValue,
) -> Result<Option<Payload>> {
    if v.size >= MAP_MIN || from.tier.is_some_and(|t| t.is_tiered(v.block_id)) {
        return Ok(None);
    }
    let Some(CachedBlock { file, base_ts }) = from.files.peek(v.block_id) else {
        return Ok(None);
    };
    let path = || e.block_path(v.block_id);
    Ok(read_frame_now(&file, &path, v, base_ts, ts)?.map(Payload::Memory))
}

pub(crate) fn read_value(from: Sources<'_>, e: &Entry, ts: u64, v: IndexValue) -> Result<Record> {
    let data = read_payload(from, e, ts, &v, Access::Point)?;
    Ok(Record {
        meta: meta_of(ts, &v),
        data,
    })
}

pub(crate) fn open_value(
    from: Sources<'_>,
    e: &Entry,
    ts: u64,
    v: &IndexValue,
    access: Access,
) -> Result<RecordReader> {
    match source(from, e, ts, v, access)? {
        Source::Local(file, base_ts) => RecordReader::open(
            file,
            &e.block_path(v.block_id),
            v.offset,
            v.frame_len,
            base_ts,
        ),
        Source::Tiered(data) => Ok(RecordReader::checked(meta_of(ts, v), data.into_vec())),
    }
}
