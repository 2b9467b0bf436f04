//! The writer thread: single-record writes of small bodies (received whole in memory) go to
//! one thread per store instead of tokio's blocking pool. It takes every write queued while
//! it was busy, groups them by entry and writes the round with `Store::write_groups`: one
//! append per entry and **one index commit for the whole round**, then answers each request
//! through its oneshot.
//!
//! Per 1 KiB write this replaces a hand-off to a pooled thread, a group-commit
//! leader/follower wake-up and the wake-up back with one queue push and one oneshot: under
//! load the thread never sleeps between groups (`docs/benchmarks/speed-2026-11-23.md`); and
//! 16 writers of 16 entries share one LMDB transaction instead of 16
//! (`docs/benchmarks/write-cpu-2026-11-23.md`).
//!
//! The ack rule is the engine's: a request is answered after `write_groups` returned, that
//! is after its frames were appended and the round's index commit went through (fsynced
//! first with `SyncPolicy::Always`). One request's failure fails only itself: a record's own
//! error (duplicate timestamp, bad labels) is per record, and when a whole group fails
//! (unknown bucket, bad entry name, quota, a failed commit) its records are written again
//! one by one, so each gets its own answer.

use bytes::Bytes;
use tokio::sync::oneshot;
use tsblob_storage::{Group, GroupResult, Store, WriteMeta};

use super::errors::AppError;
use super::round_thread::{self, Queue, Rounds};

type Reply = oneshot::Sender<tsblob_storage::Result<u64>>;

struct Job {
    bucket: String,
    entry: String,
    meta: WriteMeta,
    pieces: Vec<Bytes>,
    reply: Reply,
}

/// The sending side of a store's writer thread; the thread ends when the last clone is
/// dropped (after answering what was queued).
#[derive(Clone)]
pub(crate) struct Writer {
    queue: Queue<Job>,
}

/// The writer thread's rounds: a store's single writes.
struct Singles(Store);

impl Rounds for Singles {
    type Job = Job;
    const THREAD: &'static str = "tsblob-writer";
    const MAX_JOBS: usize = 256;
    /// The server sends bodies up to 256 KiB here.
    const MAX_BYTES: usize = 8 << 20;

    fn bytes(job: &Job) -> usize {
        job.pieces.iter().map(Bytes::len).sum()
    }

    fn write_round(&self, jobs: Vec<Job>) {
        write_round(&self.0, jobs)
    }
}

impl Writer {
    /// Starts the writer thread of `store`.
    pub(crate) fn start(store: Store) -> std::io::Result<Writer> {
        Ok(Writer {
            queue: round_thread::start(Singles(store))?,
        })
    }

    /// Writes one record whose payload is `pieces`; answers once it is committed.
    pub(crate) async fn write(
        &self,
        bucket: String,
        entry: String,
        meta: WriteMeta,
        pieces: Vec<Bytes>,
    ) -> Result<u64, AppError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            bucket,
            entry,
            meta,
            pieces,
            reply,
        };
        if self.queue.send(job).is_err() {
            return Err(AppError::internal(
                "the writer thread has stopped; nothing was stored: restart the server",
            ));
        }
        match answer.await {
            Ok(r) => Ok(r?),
            Err(_) => Err(AppError::internal(
                "the write failed inside the server (see its log); it may not have been \
                 stored: read it back or write it again",
            )),
        }
    }
}

/// Writes a round of jobs: grouped by entry (arrival order kept within an entry), one
/// append per entry and one index commit for the round (`Store::write_groups`).
fn write_round(store: &Store, jobs: Vec<Job>) {
    // A round holds at most `MAX_JOBS` writes over a few entries: a linear look-up.
    let mut groups: Vec<Vec<Job>> = Vec::new();
    for j in jobs {
        match groups.iter_mut().find(|g| {
            g.first()
                .is_some_and(|f| f.bucket == j.bucket && f.entry == j.entry)
        }) {
            Some(g) => g.push(j),
            None => groups.push(vec![j]),
        }
    }
    let records: Vec<Vec<(&WriteMeta, &[Bytes])>> = groups
        .iter()
        .map(|g| g.iter().map(|j| (&j.meta, j.pieces.as_slice())).collect())
        .collect();
    let round: Vec<Group<'_, Bytes>> = groups
        .iter()
        .zip(&records)
        .filter_map(|(g, r)| {
            g.first()
                .map(|f| (f.bucket.as_str(), f.entry.as_str(), r.as_slice()))
        })
        .collect();
    let outcomes = store.write_groups(&round);
    drop(round);
    drop(records);
    for (g, outcome) in groups.into_iter().zip(outcomes) {
        answer(store, g, outcome);
    }
}

/// Answers a group's requests from its outcome.
fn answer(store: &Store, jobs: Vec<Job>, outcome: GroupResult) {
    match outcome {
        Ok(results) => {
            for (j, r) in jobs.into_iter().zip(results) {
                // A dropped receiver is a client that went away: nothing to tell.
                let _ = j.reply.send(r);
            }
        }
        Err(e) if jobs.len() == 1 => {
            if let Some(j) = jobs.into_iter().next() {
                let _ = j.reply.send(Err(e));
            }
        }
        Err(_) => {
            // The group failed as a whole (e.g. a quota that one record fits but not all,
            // or the round's commit): each record again on its own, for its own answer.
            for j in jobs {
                let r = store.write_pieces(&j.bucket, &j.entry, &j.meta, &j.pieces);
                let _ = j.reply.send(r);
            }
        }
    }
}
