//! The batch writer thread: the chunks of batch bodies (`batch.rs`) go to one thread per
//! store instead of tokio's blocking pool, as small single writes go to the writer thread
//! (`writer.rs`). It takes every chunk queued while it was busy and writes them with
//! `Store::write_groups_at`: one append per entry and **one index commit for the round**,
//! then hands each chunk back to its request with its results through a oneshot.
//!
//! Per chunk this replaces a hand-off to a pooled thread, a group-commit leader/follower
//! wake-up (16 batch writers of 16 entries were 16 pooled threads meeting in the committer)
//! and the wake-up back with one queue push and one oneshot
//! (docs/benchmarks/batch-2-2026-11-26.md).
//!
//! The ack rule is the engine's: a chunk's records are answered after `write_groups_at`
//! returned, that is after their frames were appended and the round's index commit went
//! through. One request's failure fails only itself: a record's own error (duplicate
//! timestamp, bad labels) is per record, and when a chunk fails as a whole in a round of
//! several (its own reason, or the round's commit) it is written again alone, so its
//! records get their own chunk's answer.

use tokio::sync::oneshot;
use tsblob_storage::{GroupResult, Store, TimedGroup, TimedRecord};

use super::batch_chunk::Chunk;
use super::budget::Held;
use super::round_thread::{self, Queue, Rounds};

/// A chunk handed back with its outcome: one result per record, or the chunk's own failure.
pub(crate) type Written = (Chunk, GroupResult);

struct Job {
    bucket: String,
    entry: String,
    chunk: Chunk,
    /// The chunk's share of the memory budget, given back once it is written.
    held: Held,
    reply: oneshot::Sender<Written>,
}

/// The sending side of a store's batch writer thread; the thread ends when the last clone
/// is dropped (after writing what was queued).
#[derive(Clone)]
pub(crate) struct BatchWriter {
    queue: Queue<Job>,
}

/// A chunk not taken by the writer thread (it has stopped): nothing of it was written.
pub(crate) struct Stopped(pub(crate) Chunk);

/// The batch writer thread's rounds: a store's batch chunks.
struct Chunks(Store);

impl Rounds for Chunks {
    type Job = Job;
    const THREAD: &'static str = "tsblob-batch";
    const MAX_JOBS: usize = 64;
    /// A chunk holds about 1 MiB.
    const MAX_BYTES: usize = 8 << 20;

    fn bytes(job: &Job) -> usize {
        job.chunk.bytes()
    }

    fn write_round(&self, jobs: Vec<Job>) {
        write_round(&self.0, jobs)
    }
}

impl BatchWriter {
    /// Starts the batch writer thread of `store`.
    pub(crate) fn start(store: Store) -> std::io::Result<BatchWriter> {
        Ok(BatchWriter {
            queue: round_thread::start(Chunks(store))?,
        })
    }

    /// Queues `chunk` for its write to `bucket`/`entry`; the receiver yields it back with
    /// its outcome once it is committed (or failed). A dropped sender is a round that
    /// panicked: its records were not confirmed.
    pub(crate) fn write(
        &self,
        bucket: String,
        entry: String,
        chunk: Chunk,
        held: Held,
    ) -> Result<oneshot::Receiver<Written>, Stopped> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            bucket,
            entry,
            chunk,
            held,
            reply,
        };
        match self.queue.send(job) {
            Ok(()) => Ok(answer),
            Err(job) => Err(Stopped(job.chunk)),
        }
    }
}

/// Writes a round of chunks (`Store::write_groups_at`: two chunks of one entry one after
/// the other, in arrival order), then answers each.
fn write_round(store: &Store, jobs: Vec<Job>) {
    let outcomes = {
        let timed: Vec<Vec<TimedRecord<'_, bytes::Bytes>>> =
            jobs.iter().map(|j| j.chunk.timed()).collect();
        let groups: Vec<TimedGroup<'_, bytes::Bytes>> = jobs
            .iter()
            .zip(&timed)
            .map(|(j, t)| (j.bucket.as_str(), j.entry.as_str(), t.as_slice()))
            .collect();
        store.write_groups_at(&groups)
    };
    let shared = jobs.len() > 1;
    for (j, outcome) in jobs.into_iter().zip(outcomes) {
        let outcome = match outcome {
            // Maybe the round's failure, not this chunk's: written again alone, for its
            // own answer (what the round appended for it was cut).
            Err(_) if shared => store.write_group_at(&j.bucket, &j.entry, &j.chunk.timed()),
            o => o,
        };
        let Job {
            chunk, held, reply, ..
        } = j;
        drop(held);
        // A dropped receiver is a request that went away: nothing to tell.
        let _ = reply.send((chunk, outcome));
    }
}
