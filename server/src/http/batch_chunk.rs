//! A batch body's records waiting for their write (`batch.rs` fills a [`Chunk`], the batch
//! writer thread, `batch_writer.rs`, writes it): its own module so that the two use it
//! without importing each other.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use tsblob_storage::{TimedRecord, WriteMeta};

/// A parsed record waiting in a chunk: its timestamp, metadata and where its payload
/// pieces are in the chunk's list.
pub(crate) struct Parsed {
    pub(super) ts: Option<u64>,
    pub(super) meta: Arc<WriteMeta>,
    pub(super) pieces: Range<usize>,
}

/// Records waiting for their write, with the payload pieces of all of them in one list:
/// one allocation per chunk, where a list per record was one per record (freed on another
/// thread) (docs/benchmarks/batch-2-2026-11-26.md).
#[derive(Default)]
pub(crate) struct Chunk {
    pub(super) records: Vec<Parsed>,
    pub(super) pieces: Vec<Bytes>,
    /// The memory the chunk holds (`held_bytes` (`batch.rs`) of each record and its payload).
    pub(super) bytes: usize,
}

impl Chunk {
    /// An empty chunk sized like `previous` (chunks of one body are alike).
    pub(super) fn like(previous: &Chunk) -> Chunk {
        Chunk::with_capacity(previous.records.len(), previous.pieces.len())
    }

    /// An empty chunk with room for `records` records and `pieces` payload pieces.
    pub(super) fn with_capacity(records: usize, pieces: usize) -> Chunk {
        Chunk {
            records: Vec::with_capacity(records),
            pieces: Vec::with_capacity(pieces),
            bytes: 0,
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn pieces_of(&self, r: &Parsed) -> &[Bytes] {
        self.pieces.get(r.pieces.clone()).unwrap_or_default()
    }

    /// The records as the engine takes them (`Store::write_groups_at`).
    pub(crate) fn timed(&self) -> Vec<TimedRecord<'_, Bytes>> {
        self.records
            .iter()
            .map(|r| (r.ts, &*r.meta, self.pieces_of(r)))
            .collect()
    }

    /// Takes the chunk's records, leaving an empty chunk sized alike.
    pub(super) fn take(&mut self) -> Chunk {
        let next = Chunk::like(self);
        std::mem::replace(self, next)
    }
}
