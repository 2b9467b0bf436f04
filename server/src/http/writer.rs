//! The writer: single-record writes of small bodies (received whole in memory) are queued
//! per store and written in rounds: a round takes every write queued, groups them by entry
//! and writes them with `Store::write_groups`: one append per entry and **one index commit
//! for the whole round**, then answers each request through its oneshot.
//!
//! No thread of its own: the request that finds no round running writes one at once, on
//! the runtime worker it runs on, with its own write and every other one queued; writes
//! queued meanwhile wait for it, and when it is done and more are queued it spawns a task
//! for the next round. Per 1 KiB write this saves the wake-up of a writer thread and the
//! wake-up back from it (the thread slept and woke once per round, and its answers woke
//! the runtime's workers from outside: `docs/benchmarks/write-cpu-2-2026-11-23.md`). A
//! round is a few page-cache writes and one LMDB commit without fsync (tens of µs);
//! with `sync=always`, whose every commit waits for an fsync, rounds run on the blocking
//! pool instead. 16 writers of 16 entries still share one LMDB transaction per round
//! (`docs/benchmarks/write-cpu-2026-11-23.md`).
//!
//! The ack rule is the engine's: a request is answered after `write_groups` returned, that
//! is after its frames were appended and the round's index commit went through (fsynced
//! first with `SyncPolicy::Always`). One request's failure fails only itself: a record's own
//! error (duplicate timestamp, bad labels) is per record, and when a whole group fails
//! (unknown bucket, bad entry name, quota, a failed commit) its records are written again
//! one by one, so each gets its own answer. A round runs inside one poll of the request
//! that started it: a client that goes away cannot cut it short.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tsblob_storage::{Group, GroupResult, Store, WriteMeta};

use super::errors::AppError;

/// At most this many writes are taken into one round of groups...
const MAX_JOBS: usize = 256;
/// ...and at most this many payload bytes (the server sends bodies up to 256 KiB here).
const MAX_BYTES: usize = 8 << 20;

type Reply = oneshot::Sender<tsblob_storage::Result<u64>>;

struct Job {
    bucket: String,
    entry: String,
    meta: WriteMeta,
    pieces: Vec<Bytes>,
    reply: Reply,
}

impl Job {
    fn len(&self) -> usize {
        self.pieces.iter().map(Bytes::len).sum()
    }
}

/// A store's writer: the queue of single writes and who is writing it now.
#[derive(Clone)]
pub(crate) struct Writer {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    queue: Mutex<Queue>,
    /// Rounds run on the blocking pool instead of the runtime's worker (`sync=always`:
    /// every round's commit waits for an fsync).
    pooled: bool,
}

#[derive(Default)]
struct Queue {
    jobs: Vec<Job>,
    /// A task is writing a round (it takes the queue when it starts the next one).
    leading: bool,
}

impl Writer {
    /// The writer of `store`.
    pub(crate) fn new(store: Store) -> Writer {
        let pooled = store.options().sync == tsblob_storage::SyncPolicy::Always;
        Writer {
            inner: Arc::new(Inner {
                store,
                queue: Mutex::new(Queue::default()),
                pooled,
            }),
        }
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
        let lead = {
            let mut q = self.inner.queue.lock();
            q.jobs.push(job);
            !std::mem::replace(&mut q.leading, true)
        };
        if lead {
            self.inner.start_round();
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

impl Inner {
    /// Runs the next round: at once on this thread (a runtime worker), or on the blocking
    /// pool with `sync=always`.
    fn start_round(self: &Arc<Self>) {
        if self.pooled {
            let me = Arc::clone(self);
            tokio::task::spawn_blocking(move || me.round());
        } else {
            self.round();
        }
    }

    /// Writes one round: every job queued (up to `MAX_JOBS` / `MAX_BYTES`); when more
    /// arrived meanwhile, a task is spawned for the next round.
    fn round(self: &Arc<Self>) {
        let jobs = {
            let mut q = self.queue.lock();
            let mut bytes = 0;
            let n = q
                .jobs
                .iter()
                .take_while(|j| {
                    bytes += j.len();
                    bytes <= MAX_BYTES
                })
                .count()
                .clamp(1, MAX_JOBS)
                .min(q.jobs.len());
            let rest = q.jobs.split_off(n);
            std::mem::replace(&mut q.jobs, rest)
        };
        if !jobs.is_empty()
            && std::panic::catch_unwind(AssertUnwindSafe(|| write_round(&self.store, jobs)))
                .is_err()
        {
            tracing::error!("a round of writes panicked; they were refused");
        }
        let more = {
            let mut q = self.queue.lock();
            q.leading = !q.jobs.is_empty();
            q.leading
        };
        if more {
            if self.pooled {
                self.start_round();
            } else {
                let next = Arc::clone(self);
                tokio::spawn(async move { next.round() });
            }
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
