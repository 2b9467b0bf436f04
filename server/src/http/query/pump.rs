//! The async pump of a query stream: drives a [`Producer`] step by step on the blocking
//! pool into the response's bounded channel, and keeps a live tail waiting between walks
//! (commits, its settle timer, heartbeats, a revoked token).

use std::time::Duration;

use super::page::CHUNK;
use super::parse::FollowOpts;
use super::produce::{Producer, Step};
use crate::http::auth::StreamGrant;
use crate::http::errors::AppError;

/// Steps queued between the producer and the socket. Each is one message however many
/// pieces it has (one wake-up of the connection's task per step, not per piece), and
/// this few keep the socket fed while the next step runs: a step of small records is a
/// page of `CHUNK` bytes, so a query holds about `STEPS_AHEAD + 2` pages, not 16
/// (fresh pages faulted in and zeroed were a quarter of the server's CPU in range reads of
/// 10 KiB records: `docs/benchmarks/range-pages-2026-11-26.md`).
///
/// Mapped pieces (page cache, not counted as memory) are bounded by the same steps: a step
/// keeps at most `produce::WINDOWS` mappings alive, and a query's pieces live in the step
/// being produced or waiting to be sent, the `STEPS_AHEAD` queued, and the connection's
/// write queue: at most `body::FRAMES_QUEUED` (2) steps handed to hyper as a frame each; and
/// a step is made only once at most [`UNWRITTEN_MAX`] bytes of the earlier ones are
/// unwritten. So however slowly its client reads, one query keeps at most
/// `(1 + STEPS_AHEAD + 2) × WINDOWS + 1` (its current window, let go of while it waits)
/// = 21 mappings alive, each of at most `tsblob_storage::WINDOW_MAX` (8 MiB) or one frame
/// of at most `MAP_MAX`, and at most one step and `UNWRITTEN_MAX` of pieces in them. (A
/// response not passed through `body::answer`, as in the in-process router of the tests,
/// is written a piece per frame: the step its body is yielding and hyper's queue of 16
/// pieces, `(STEPS_AHEAD + 2) × WINDOWS + 16 + 1` = 33.)
const STEPS_AHEAD: usize = 2;

/// The sending side of a query's response body: whole steps.
pub(super) type StepTx = crate::http::body::StepTx;

/// Bytes of a stream's answer that may wait unwritten (in its channel and the connection's
/// write queue) when its next step is made: the step waits until the connection has written
/// down to this. Bug "stalled readers hold streams forever" (findings s12, F2): the steps
/// alone bounded what a client that stops reading makes its stream hold, at up to 5 steps
/// of up to `produce::STEP` (4 MiB) of mapped pieces, ~18 MB of resident block pages per
/// stalled reader (1.15 GB for 64) outside the memory budget. Now it holds at most this
/// plus one step (and the mappings they keep) until `--send-timeout` ends its connection.
/// The step is made while the last MiB and the socket's buffer are still being sent, so
/// a client that reads keeps being fed.
const UNWRITTEN_MAX: u64 = 1 << 20;

/// A step that has waited this long for its client to read lets go of the producer's
/// current block window first: a slow reader holds no mapping of the producer's while it
/// is not reading (one more mapping of up to `tsblob_storage::WINDOW_MAX` otherwise).
/// Not at once: a client that reads keeps its window from step to step.
const LET_GO_AFTER: Duration = Duration::from_millis(200);

/// A response body fed by a pump: the pieces of each step in order, then the end (or
/// the error a step ended with). The connection writes each step as one HTTP chunk of
/// its pieces (`body::step_body`); the `StepAnswer` goes in the response's extensions.
pub(super) fn step_body(
    sent: prometheus::IntCounter,
) -> (StepTx, axum::body::Body, crate::http::body::StepAnswer) {
    crate::http::body::step_body(STEPS_AHEAD, sent)
}

/// What a live tail needs besides its producer. Dropped when its stream ends (or its
/// client leaves): nothing of it outlives the response.
pub(super) struct Live {
    pub(super) opts: FollowOpts,
    /// Admitted, counted, and registered under its entries before the first walk.
    pub(super) tail: crate::http::tails::Tail,
}

/// The longest a live tail's settle timer waits at once (a record stamped years ahead
/// re-arms it after each wait).
const MAX_SETTLE_WAIT: Duration = Duration::from_secs(24 * 3600);

/// When a live tail with a settle time walks again without a commit: once its horizon
/// (now minus `settle`) has passed `ahead`, the first record its last walk left for later.
fn settle_deadline(ahead: Option<u64>, settle: Duration) -> Option<tokio::time::Instant> {
    let ts = ahead?;
    let due = ts
        .saturating_add(settle.as_micros() as u64)
        .saturating_add(1);
    let wait = Duration::from_micros(due.saturating_sub(tsblob_storage::now_micros()))
        .min(MAX_SETTLE_WAIT)
        + Duration::from_millis(1);
    Some(tokio::time::Instant::now() + wait)
}

/// Drives a producer into `tx` until the end, an abort or the client leaving; returns the
/// bytes sent and the production steps run after `first`. A step that found nothing to
/// send (a long scan without a match) sends a heartbeat once nothing was sent for
/// `heartbeat`, so that clients and proxies with a read timeout see a live connection. A
/// live tail waits between walks for a commit (or its settle timer), sending a heartbeat
/// whenever nothing was sent for `heartbeat`.
pub(super) async fn pump(
    mut p: Producer,
    first: Step,
    tx: StepTx,
    mut live: Option<Live>,
    mut grant: StreamGrant,
    heartbeat: std::time::Duration,
    scans: crate::blocking::Scans,
) -> (u64, u64) {
    use tokio::time::Instant;
    let mut sent = 0u64;
    let mut steps = 0u64;
    // The token again before a byte is sent: one removed or rotated while the stream
    // opened (after its request was admitted) ends it here (`Auth::grant`).
    if let Err(e) = grant.check() {
        return (revoked(&p, &tx, e).await, steps);
    }
    let mut next = Some(first);
    let mut last_sent = Instant::now();
    // With a settle time: the next walk without a commit, once the horizon passes the
    // first record the last walk left past it (a record stamped ahead of the clock, or
    // committed within the settle time), so it is delivered with no other write.
    let mut settle_at = None;
    loop {
        let step = match next.take() {
            Some(s) => s,
            None => {
                // A long scan without matches sends nothing: look for a closed channel.
                if tx.is_closed() {
                    return (sent, steps);
                }
                // A token removed (or no longer allowed to read the bucket) ends the stream.
                if let Err(e) = grant.check() {
                    return (sent + revoked(&p, &tx, e).await, steps);
                }
                // The client has read all but `UNWRITTEN_MAX` of what was sent (or left).
                if !written_down(&mut p, &tx).await {
                    return (sent, steps);
                }
                // Room for the step's page in the memory budget; none within
                // --memory-wait ends the stream with a `busy` error (resume from the last
                // ts + 1).
                if let Err(e) = p.room.cover(CHUNK as u64, "a query page").await {
                    return (sent + revoked(&p, &tx, e).await, steps);
                }
                // Through the gate of steps running at once (`blocking::Scans`).
                let Ok((back, step)) = scans
                    .run(move || {
                        let step = p.counted_step();
                        Ok::<_, crate::blocking::TaskFailed>((p, step))
                    })
                    .await
                else {
                    let _ = tx
                        .send(Err(std::io::Error::other("the query task failed")))
                        .await;
                    return (sent, steps);
                };
                p = back;
                steps += 1;
                step
            }
        };
        let (mut pieces, last, caught) = match step {
            Step::More(b) => (b, false, false),
            Step::Caught(b, ahead) => {
                if let Some(l) = &live {
                    settle_at = settle_deadline(ahead, l.opts.settle);
                }
                (b, false, true)
            }
            Step::Last(b) => (b, true, false),
            Step::Fail(mut b, e) => {
                b.push(p.error_piece(&e));
                (b, true, false)
            }
            Step::Abort(e) => {
                let _ = tx.send(Err(e)).await;
                return (sent, steps);
            }
        };
        // A long scan that matches nothing (a query's, or a live tail's catch-up) still
        // keeps the connection alive. (Only between frames: never inside a large record's
        // payload.)
        if pieces.is_empty() && !last && p.large.is_none() && last_sent.elapsed() >= heartbeat {
            pieces.push(p.heartbeat_piece());
        }
        if !pieces.is_empty() {
            sent += pieces.iter().map(|p| p.len() as u64).sum::<u64>();
            if tx.send(Ok(pieces)).await.is_err() {
                return (sent, steps); // the client went away
            }
            last_sent = Instant::now();
        }
        if last {
            return (sent, steps);
        }
        if !caught {
            continue;
        }
        let Some(l) = live.as_mut() else {
            return (sent, steps); // only a live tail catches up
        };
        // Wait for a commit to one of its entries, the settle timer, the client leaving or
        // the server stopping; heartbeats meanwhile.
        let mut closing = std::pin::pin!(l.tail.closing());
        loop {
            let beat_at = last_sent + heartbeat;
            tokio::select! {
                _ = tx.closed() => return (sent, steps),
                _ = &mut closing => {
                    let e = AppError::busy("the server is stopping: follow again once it is back, from the last timestamp delivered (dropping the records at it already received; `start` = last + 1 only for one entry)");
                    return (sent + revoked(&p, &tx, e).await, steps);
                }
                _ = l.tail.wake().notified() => break,
                _ = grant.changed() => {
                    if let Err(e) = grant.check() {
                        return (sent + revoked(&p, &tx, e).await, steps);
                    }
                }
                _ = tokio::time::sleep_until(settle_at.unwrap_or(beat_at)), if settle_at.is_some() => {
                    settle_at = None;
                    break;
                }
                _ = tokio::time::sleep_until(beat_at) => {
                    if let Some(e) = p.removed_entry() {
                        return (sent + revoked(&p, &tx, e).await, steps);
                    }
                    let beat = p.heartbeat_piece();
                    sent += beat.len() as u64;
                    if tx.send(Ok(vec![beat])).await.is_err() {
                        return (sent, steps);
                    }
                    last_sent = Instant::now();
                }
            }
        }
        // Taken before the walk's read transaction begins: a commit after this wakes the
        // tail again (no lost wake-ups).
        p.changed = l.tail.wake().take();
    }
}

/// Waits until the connection has written all but [`UNWRITTEN_MAX`] bytes of what the
/// stream sent, letting go of the producer's block window if that takes a while; `false`
/// when the client left meanwhile.
async fn written_down(p: &mut Producer, tx: &StepTx) -> bool {
    if tx.unwritten() <= UNWRITTEN_MAX {
        return true;
    }
    if let Ok(drained) = tokio::time::timeout(LET_GO_AFTER, tx.drained(UNWRITTEN_MAX)).await {
        return drained;
    }
    p.let_go_of_windows();
    tx.drained(UNWRITTEN_MAX).await
}

/// Ends a stream whose token was removed or lost its permission (`StreamGrant::check`),
/// or that found no room in the memory budget: an error frame (an `{"error": ...}` line with `meta=true`) between records, a cut
/// inside a large record's payload (the client sees a short body, never wrong bytes).
/// Returns the bytes sent.
async fn revoked(p: &Producer, tx: &StepTx, e: AppError) -> u64 {
    tracing::info!("query stream ended: {e}");
    if p.large.is_some() {
        e.log();
        let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
        return 0;
    }
    let piece = p.error_piece(&e);
    let n = piece.len() as u64;
    let _ = tx.send(Ok(vec![piece])).await;
    n
}
