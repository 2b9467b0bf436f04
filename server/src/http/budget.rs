//! One memory budget for every byte a request holds in memory (`--memory-budget`): single
//! bodies received whole, batch records and chunks waiting for their write, zstd
//! decompression contexts and their pieces. Bug "batch records outside the budget" (issue
//! 27, defect 3): 200 connections each sending 4 MiB − 4 KiB of one batch record, then
//! stalling, took the server's RSS from 27 to 1,083 MB, since only single bodies counted.
//!
//! Query answers, live tails and MCAP exports count here too ("query pages were outside the
//! memory budget": 40 clients that stopped reading their queries held ~4 MiB each in the
//! answer's queue, outside any bound): a stream takes room for a step's page before it
//! runs the step (waiting at most `--memory-wait`, then 503 before the first byte, or an
//! error frame `busy` later), and each piece it sends carries its share ([`Held::attach`]),
//! given back when the connection has written it (or dropped it). A multi-entry merge's
//! pages of index records are counted after each step ([`Held::set`]).
//!
//! The count is one atomic (a compare-and-swap per reservation, no lock): a single body
//! grows its room as its bytes arrive ([`BodyRoom`]), a batch grows its reservation in
//! granules of [`GRANULE`] as bytes arrive and gives a chunk's share back when the chunk
//! is written. What cannot wait elsewhere waits for room at most `--memory-wait`, then is
//! answered 503 `busy` with a `Retry-After`; a single-record body that finds no room is
//! received into a spool file instead (disk, not memory), so small writes keep working
//! while the budget is spent.
//!
//! Bug "announced bodies spent the budget" (findings s12, F1): a single body took room for
//! its whole `Content-Length` before any byte arrived, so 32 connections announcing 4 MiB
//! and sending 1 byte held the whole 128 MiB for as long as they stalled (up to the body
//! deadline), and every query and batch of other clients waited `--memory-wait` and got
//! 503. Now a single body holds room only for bytes that arrived, and single bodies
//! together hold at most half the budget ([`BodyRoom`]): past it they spool, so uploads
//! that send real bytes and then stall cannot starve queries and batches either.
//!
//! Bug "stalled batches starve the readers" (hostile round of 2026-11-27): 32 connections
//! each sending a 4 MiB batch record and stalling before its end held the whole budget
//! until the body deadline, and every query of other clients got 503 `busy`. Uploads
//! (single bodies and batches, [`MemoryBudget::upload`]) together hold at most three
//! quarters of the budget now: the last quarter is always left to query answers, tails
//! and exports.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;

use super::errors::AppError;

/// A batch grows its reservation by at least this much at a time: one atomic operation per
/// 64 KiB received, not one per record.
pub const GRANULE: u64 = 64 << 10;

/// Bytes held in memory by requests, against one limit.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit: u64,
    used: AtomicU64,
    /// Requests waiting for room: releases wake them only when there are some.
    waiting: AtomicUsize,
    freed: Notify,
    wait: Duration,
    /// Bytes of `used` held by single-record bodies received in memory ([`BodyRoom`]),
    /// at most `limit / SINGLES_SHARE`.
    singles: AtomicU64,
    /// Bytes of `used` held by uploads (single bodies and batches), at most
    /// `limit * UPLOADS_SHARE`.
    uploads: AtomicU64,
}

/// Single-record bodies received in memory hold at most `1 / SINGLES_SHARE` of the budget
/// together: the rest is always left to batches, queries and exports (a single body never
/// needs it: past it, it spools).
const SINGLES_SHARE: u64 = 2;

/// Uploads (single bodies and batches received in memory) hold at most this part of the
/// budget together (3/4): the rest is always left to what answers (queries, tails,
/// exports), however many uploads stall.
fn uploads_cap(limit: u64) -> u64 {
    limit / 4 * 3
}

impl MemoryBudget {
    /// The largest single-record body that may be held in memory. Larger ones are spooled:
    /// held whole, 10 MiB bodies kept the server's read buffers alive and made it fault in
    /// (and zero) fresh pages for new ones faster than the saved copy paid back (measured:
    /// docs/benchmarks/speed-2026-11-22.md).
    pub const LARGEST: u64 = 4 << 20;
    /// The default budget (`--memory-budget`): sized for an edge device (a few hundred MiB
    /// of RAM) while leaving room for 16 concurrent 4 MiB batch records and more.
    pub const DEFAULT: u64 = 128 << 20;
    /// How long a request waits for room by default (`--memory-wait`) before its 503.
    pub const DEFAULT_WAIT: Duration = Duration::from_secs(2);

    /// A budget of `bytes`; a request waits at most `wait` for room.
    pub fn new(bytes: u64, wait: Duration) -> MemoryBudget {
        MemoryBudget {
            inner: Arc::new(Inner {
                limit: bytes,
                used: AtomicU64::new(0),
                waiting: AtomicUsize::new(0),
                freed: Notify::new(),
                wait,
                singles: AtomicU64::new(0),
                uploads: AtomicU64::new(0),
            }),
        }
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.inner.used.load(Ordering::Relaxed)
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// Bytes held by uploads now (single bodies and batches).
    pub fn uploads(&self) -> u64 {
        self.inner.uploads.load(Ordering::Relaxed)
    }

    /// Adds `bytes` if the budget (and, for an upload, the uploads' share) has room.
    fn try_add(&self, bytes: u64, upload: bool) -> bool {
        let inner = &self.inner;
        if upload && !add_within(&inner.uploads, bytes, uploads_cap(inner.limit)) {
            return false;
        }
        if add_within(&inner.used, bytes, inner.limit) {
            return true;
        }
        if upload {
            inner.uploads.fetch_sub(bytes, Ordering::AcqRel);
            // Another upload may have been refused for what this one held for a moment:
            // it is woken as by a release, not left to wait out `--memory-wait`.
            if inner.waiting.load(Ordering::Acquire) > 0 {
                inner.freed.notify_waiters();
            }
        }
        false
    }

    /// Adds `bytes` whatever the limit: memory that is held already (a step's output larger
    /// than its reservation). Later reservations wait until it is given back.
    fn add_over(&self, bytes: u64, upload: bool) {
        if upload {
            self.inner.uploads.fetch_add(bytes, Ordering::AcqRel);
        }
        self.inner.used.fetch_add(bytes, Ordering::AcqRel);
    }

    fn release(&self, bytes: u64, upload: bool) {
        if bytes == 0 {
            return;
        }
        if upload {
            self.inner.uploads.fetch_sub(bytes, Ordering::AcqRel);
        }
        self.inner.used.fetch_sub(bytes, Ordering::AcqRel);
        if self.inner.waiting.load(Ordering::Acquire) > 0 {
            self.inner.freed.notify_waiters();
        }
    }

    /// An empty reservation for what answers a request (a query's pages, a tail, an
    /// export), grown with [`Held::cover`].
    pub fn empty(&self) -> Held {
        Held {
            budget: self.clone(),
            bytes: 0,
            upload: false,
        }
    }

    /// An empty reservation for an upload (a batch's records and chunks, a decompression
    /// of a body): within the uploads' share of the budget.
    pub fn upload(&self) -> Held {
        Held {
            budget: self.clone(),
            bytes: 0,
            upload: true,
        }
    }

    /// Room for a single-record body received in memory, empty: grown with
    /// [`BodyRoom::try_cover`] as its bytes arrive, held until dropped.
    pub fn body_room(&self) -> BodyRoom {
        BodyRoom {
            held: self.upload(),
        }
    }

    /// Waits at most `--memory-wait` for `bytes` of room; `false` when none came.
    async fn add_waiting(&self, bytes: u64, upload: bool) -> bool {
        if self.try_add(bytes, upload) {
            return true;
        }
        let cap = if upload {
            uploads_cap(self.inner.limit)
        } else {
            self.inner.limit
        };
        if bytes > cap {
            return false;
        }
        self.inner.waiting.fetch_add(1, Ordering::AcqRel);
        let got = tokio::time::timeout(self.inner.wait, async {
            loop {
                let freed = self.inner.freed.notified();
                if self.try_add(bytes, upload) {
                    return;
                }
                freed.await;
            }
        })
        .await
        .is_ok();
        self.inner.waiting.fetch_sub(1, Ordering::AcqRel);
        got
    }

    /// The 503 of a request that found no room in time.
    pub fn busy(&self, what: &str) -> AppError {
        AppError::busy(format!(
            "the server's memory budget for requests ({}, --memory-budget) is in use by other requests and {what} found no room within {} ms (--memory-wait): retry after the Retry-After delay, send smaller batches or records, or raise --memory-budget",
            tsblob_proto::format_size(self.inner.limit),
            self.inner.wait.as_millis()
        ))
    }
}

impl Default for MemoryBudget {
    fn default() -> Self {
        MemoryBudget::new(MemoryBudget::DEFAULT, MemoryBudget::DEFAULT_WAIT)
    }
}

/// Adds `bytes` to `count` if it stays at most `limit`; `false` (nothing added) otherwise.
fn add_within(count: &AtomicU64, bytes: u64, limit: u64) -> bool {
    let mut now = count.load(Ordering::Relaxed);
    loop {
        let Some(next) = now.checked_add(bytes).filter(|n| *n <= limit) else {
            return false;
        };
        match count.compare_exchange_weak(now, next, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(seen) => now = seen,
        }
    }
}

/// The room a single-record body received in memory holds: only the bytes that arrived
/// (never what its `Content-Length` announced), counted in the budget and in the single
/// bodies' share of it. It never waits: a body that finds no room goes on into a spool.
#[derive(Debug)]
pub struct BodyRoom {
    held: Held,
}

impl BodyRoom {
    /// Makes the room cover `total` bytes received (exactly: a body's chunks are the
    /// hyper reads, several KiB each, so this is one or two atomic operations a read),
    /// if the budget and the single bodies' share have room now; `false` takes nothing.
    pub fn try_cover(&mut self, total: u64) -> bool {
        let Some(more) = total.checked_sub(self.held.bytes).filter(|m| *m > 0) else {
            return true;
        };
        let inner = &self.held.budget.inner;
        if !add_within(&inner.singles, more, inner.limit / SINGLES_SHARE) {
            return false;
        }
        if !self.held.budget.try_add(more, true) {
            inner.singles.fetch_sub(more, Ordering::AcqRel);
            return false;
        }
        self.held.bytes += more;
        true
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.held.bytes
    }
}

impl Drop for BodyRoom {
    fn drop(&mut self) {
        // (`held` gives its bytes back to the budget itself, when it is dropped after this.)
        let inner = &self.held.budget.inner;
        inner.singles.fetch_sub(self.held.bytes, Ordering::AcqRel);
    }
}

/// Bytes of a [`MemoryBudget`] held by one request (or one part of it), given back when
/// dropped.
#[derive(Debug)]
pub struct Held {
    budget: MemoryBudget,
    bytes: u64,
    /// Counted in the uploads' share too ([`MemoryBudget::upload`]).
    upload: bool,
}

impl Held {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The 503 of its budget for `what`, which found no room ([`MemoryBudget::busy`]).
    pub fn budget_busy(&self, what: &str) -> AppError {
        self.budget.busy(what)
    }

    /// Makes the reservation cover `total` bytes, growing by at least [`GRANULE`] (waiting at
    /// most `--memory-wait` for room); never shrinks. Err: 503 `busy`, naming `what`.
    /// Callers on a per-record path call [`Held::try_cover`] first (most calls need no
    /// more room, and then no future is built), then [`Held::wait_cover`] when it refused.
    pub async fn cover(&mut self, total: u64, what: &str) -> Result<(), AppError> {
        if self.try_cover(total) {
            return Ok(());
        }
        self.wait_cover(total, what).await
    }

    /// [`Held::cover`]'s wait, for a caller whose [`Held::try_cover`] just refused (so it
    /// is not tried a second time).
    pub async fn wait_cover(&mut self, total: u64, what: &str) -> Result<(), AppError> {
        if total <= self.bytes {
            return Ok(());
        }
        let exact = total - self.bytes;
        // No room for a granule: wait for the exact need only.
        if self.budget.add_waiting(exact, self.upload).await {
            self.bytes += exact;
            return Ok(());
        }
        Err(self.budget.busy(what))
    }

    /// Makes the reservation cover `total` bytes if that needs no wait: `true` when it
    /// already did, or when a growth of at least [`GRANULE`] was taken at once. `false`:
    /// no room now (nothing taken; [`Held::cover`] waits for it).
    pub fn try_cover(&mut self, total: u64) -> bool {
        if total <= self.bytes {
            return true;
        }
        let more = (total - self.bytes).max(GRANULE);
        if self.budget.try_add(more, self.upload) {
            self.bytes += more;
            return true;
        }
        false
    }

    /// Moves `bytes` (at most what is held) into a reservation of their own, e.g. a chunk
    /// handed to its write.
    pub fn split(&mut self, bytes: u64) -> Held {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Held {
            budget: self.budget.clone(),
            bytes,
            upload: self.upload,
        }
    }

    /// Sets the reservation to `total` bytes at once when there is room (never waits):
    /// for a size only known after the fact (a decompression context). `false`: no room.
    pub fn try_resize(&mut self, total: u64) -> bool {
        if total <= self.bytes {
            self.budget.release(self.bytes - total, self.upload);
            self.bytes = total;
            return true;
        }
        if self.budget.try_add(total - self.bytes, self.upload) {
            self.bytes = total;
            return true;
        }
        false
    }
}

impl Held {
    /// Sets the reservation to `total` bytes of memory already held (never waits; may go
    /// past the limit, which then makes other requests wait).
    pub fn set(&mut self, total: u64) {
        if total <= self.bytes {
            self.budget.release(self.bytes - total, self.upload);
        } else {
            self.budget.add_over(total - self.bytes, self.upload);
        }
        self.bytes = total;
    }

    /// `data`, which keeps `len` bytes of memory alive (its length, or the capacity of the
    /// buffer under it), carrying its share of this reservation (over it if it is larger:
    /// the bytes exist already): the share is given back when the last clone of the
    /// returned `Bytes` is dropped (once the connection wrote it).
    pub fn attach(&mut self, data: Bytes, len: u64) -> Bytes {
        if len == 0 {
            return data;
        }
        if len > self.bytes {
            self.set(len);
        }
        let share = self.split(len);
        Bytes::from_owner(Counted { data, _held: share })
    }
}

/// Bytes and the room they take in the budget.
struct Counted {
    data: Bytes,
    _held: Held,
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.release(self.bytes, self.upload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body's room grows with what arrived, single bodies stop at half the budget, and
    /// everything is given back on drop (bug "announced bodies spent the budget").
    #[test]
    fn a_body_room_holds_what_arrived_within_the_single_bodies_share() {
        let b = MemoryBudget::new(6 << 20, Duration::from_millis(10));
        let mut one = b.body_room();
        assert!(one.try_cover(1), "the first byte");
        assert_eq!((one.bytes(), b.used()), (1, 1), "exactly what arrived");
        assert!(one.try_cover(2 << 20));
        let mut two = b.body_room();
        assert!(two.try_cover(1 << 20), "3 MiB of single bodies: the share");
        assert!(!two.try_cover((1 << 20) + 1), "past half the budget");
        assert_eq!((two.bytes(), b.used()), (1 << 20, 3 << 20), "nothing taken");
        // The other half stays for batches and queries.
        let mut batch = b.empty();
        assert!(batch.try_cover(3 << 20));
        drop(one);
        assert!(two.try_cover(2 << 20), "freed on drop");
        assert!(!b.body_room().try_cover(2 << 20), "the budget is full");
        drop((two, batch));
        assert_eq!(b.used(), 0);
        assert!(b.body_room().try_cover(3 << 20), "the share is whole again");
        assert_eq!(b.used(), 0);
    }

    /// Bug "stalled batches starve the readers": uploads stop at three quarters of the
    /// budget, single bodies included, and the last quarter stays for answers.
    #[tokio::test]
    async fn uploads_leave_a_quarter_of_the_budget_to_answers() {
        let b = MemoryBudget::new(8 << 20, Duration::from_millis(50));
        let mut single = b.body_room();
        assert!(single.try_cover(2 << 20));
        let mut batch = b.upload();
        batch.cover(4 << 20, "a batch").await.unwrap();
        assert_eq!((b.uploads(), b.used()), (6 << 20, 6 << 20));
        let mut other = b.upload();
        let e = other.cover(1, "a batch").await.unwrap_err();
        assert_eq!(e.code.as_str(), "busy", "past the uploads' share");
        assert!(!b.body_room().try_cover(1), "single bodies spool then");
        let chunk = batch.split(1 << 20);
        assert_eq!(chunk.bytes(), 1 << 20);
        // A query's page still finds the last quarter.
        let mut answer = b.empty();
        answer.cover(2 << 20, "a query page").await.unwrap();
        assert_eq!((b.uploads(), b.used()), (6 << 20, 8 << 20));
        drop((chunk, answer));
        assert_eq!(
            b.uploads(),
            5 << 20,
            "a split share is given back as an upload"
        );
        assert!(other.try_cover(1), "room again");
        drop((single, batch, other));
        assert_eq!((b.uploads(), b.used()), (0, 0));
    }

    #[test]
    fn try_cover_grows_by_a_granule_at_once_or_takes_nothing() {
        let b = MemoryBudget::new(GRANULE + 100, Duration::from_millis(10));
        let mut a = b.empty();
        assert!(a.try_cover(0), "nothing needed");
        assert_eq!(a.bytes(), 0);
        assert!(a.try_cover(10));
        assert_eq!(a.bytes(), GRANULE, "grown by a granule, not by 10 bytes");
        assert!(a.try_cover(GRANULE), "already covered");
        assert_eq!(b.used(), GRANULE);
        assert!(!a.try_cover(GRANULE + 200), "no room for a granule more");
        assert_eq!(
            (a.bytes(), b.used()),
            (GRANULE, GRANULE),
            "nothing taken on a refusal"
        );
        drop(a);
        assert_eq!(b.used(), 0);
    }

    #[tokio::test]
    async fn a_growing_reservation_waits_for_room_then_is_busy() {
        let b = MemoryBudget::new(1 << 20, Duration::from_millis(200));
        let mut a = b.empty();
        a.cover(1000, "a batch").await.unwrap();
        assert_eq!(a.bytes(), GRANULE, "grown by a granule");
        a.cover((1 << 20) - 10, "a batch").await.unwrap();
        let mut other = b.empty();
        let started = std::time::Instant::now();
        let e = other.cover(100, "a batch record").await.unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!((e.status.as_u16(), e.code.as_str()), (503, "busy"));
        assert!(e.message.contains("--memory-budget"), "{}", e.message);
        // Room freed while waiting is taken.
        let chunk = a.split(GRANULE);
        let waiter =
            tokio::spawn(async move { other.cover(GRANULE, "x").await.map(|_| other.bytes()) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(chunk);
        assert_eq!(waiter.await.unwrap().unwrap(), GRANULE);
        drop(a);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn attached_pieces_hold_their_share_until_dropped() {
        let b = MemoryBudget::new(1 << 20, Duration::ZERO);
        let mut room = b.empty();
        assert!(room.try_resize(1000));
        let piece = room.attach(Bytes::from(vec![1u8; 600]), 600);
        let clone = piece.clone();
        assert_eq!((room.bytes(), b.used()), (400, 1000));
        // Larger than what is left: counted anyway (the bytes exist).
        let big = room.attach(Bytes::from(vec![2u8; 3000]), 3000);
        assert_eq!((room.bytes(), b.used()), (0, 3600));
        drop(piece);
        assert_eq!(b.used(), 3600, "a clone still holds it");
        drop(clone);
        drop(big);
        assert_eq!(b.used(), 0);
        let mut merge = b.empty();
        merge.set(2 << 20);
        assert!(!b.body_room().try_cover(1), "over the limit: no room");
        merge.set(0);
        assert_eq!(b.used(), 0);
    }
}
