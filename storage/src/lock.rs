//! The engine's locks, each with a rank: a thread may only take a lock whose rank is higher
//! than every lock it already holds. That one rule makes a lock cycle (a deadlock between
//! engine locks) impossible; `docs/architecture.md` lists the ranks and why.
//!
//! In debug builds (every test build) each thread keeps the ranks it holds and a lock taken
//! out of order panics at once with both ranks named, whether or not another thread was
//! there to deadlock with: a wrong order is found by any test that passes through it. In
//! release builds the check compiles away and these are plain `parking_lot` locks.

use std::ops::{Deref, DerefMut};

/// Lock ranks, lowest first: take them in this order only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    /// `Store`: serialises bucket and entry creation and removal.
    Structure = 10,
    /// `Bucket`: one eviction (or quota admission) at a time per bucket.
    Evict = 20,
    /// `Entry`: an entry's blocks and active block. Never two at once.
    Entry = 30,
    /// `Bucket`: its settings (read by writers under their entry lock).
    Settings = 40,
    /// `Store`: the bucket map (a leaf: held only to look up or change the map).
    Buckets = 50,
    /// `Bucket`: its entry map (a leaf).
    Entries = 51,
    /// `FileCache`: open block handles (a leaf).
    Files = 52,
    /// `Store`: the free-space measurement (a leaf).
    FreeSpace = 53,
    /// `Tier`: the set of tiered blocks, the pending object deletions (leaves).
    TierState = 54,
    /// `Tier`: the cache of block ranges (a leaf; never held across a fetch).
    TierCache = 55,
    /// `Committer`: its queue (taken under an entry lock; waits release it).
    CommitQueue = 60,
    /// `Committer`: a waiter's result slot, files to sync (leaves).
    CommitSlot = 61,
    CommitDirty = 62,
    /// `Index`: the label-set interner (taken inside index transactions).
    Interner = 70,
    /// `Feed`: the watched entries (taken inside index transactions, a leaf).
    FeedWatch = 71,
    /// The sync thread's handle (only at open and close).
    Syncer = 80,
    /// `Committer`: the commit listeners (a leaf: the list is cloned out, then called).
    Listeners = 90,
}

#[cfg(debug_assertions)]
mod check {
    use super::Rank;
    use std::cell::RefCell;

    thread_local! {
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
    }

    pub fn acquire(rank: Rank) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(top) = h.iter().max() {
                if *top >= rank {
                    let held = h.clone();
                    drop(h);
                    panic!("lock order violated: taking {rank:?} while holding {held:?} (see docs/architecture.md, lock order)");
                }
            }
            h.push(rank);
        });
    }

    pub fn release(rank: Rank) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|r| *r == rank) {
                h.remove(i);
            }
        });
    }
}

#[cfg(not(debug_assertions))]
mod check {
    use super::Rank;
    #[inline(always)]
    pub fn acquire(_: Rank) {}
    #[inline(always)]
    pub fn release(_: Rank) {}
}

/// A mutex with a rank.
pub(crate) struct Mutex<T> {
    rank: Rank,
    inner: parking_lot::Mutex<T>,
}

pub(crate) struct MutexGuard<'a, T> {
    rank: Rank,
    inner: parking_lot::MutexGuard<'a, T>,
}

impl<T> Mutex<T> {
    pub const fn new(rank: Rank, value: T) -> Mutex<T> {
        Mutex {
            rank,
            inner: parking_lot::const_mutex(value),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, T> {
        check::acquire(self.rank);
        MutexGuard {
            rank: self.rank,
            inner: self.inner.lock(),
        }
    }
}

impl<T> MutexGuard<'_, T> {
    /// Waits on `cv`, releasing the lock meanwhile (its rank stays with the thread: the
    /// waiting thread takes no other lock).
    pub fn wait(&mut self, cv: &parking_lot::Condvar) {
        cv.wait(&mut self.inner);
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        check::release(self.rank);
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

/// A reader-writer lock with a rank (readers and writers alike take it in order).
pub(crate) struct RwLock<T> {
    rank: Rank,
    inner: parking_lot::RwLock<T>,
}

pub(crate) struct ReadGuard<'a, T> {
    rank: Rank,
    inner: parking_lot::RwLockReadGuard<'a, T>,
}

pub(crate) struct WriteGuard<'a, T> {
    rank: Rank,
    inner: parking_lot::RwLockWriteGuard<'a, T>,
}

impl<T> RwLock<T> {
    pub const fn new(rank: Rank, value: T) -> RwLock<T> {
        RwLock {
            rank,
            inner: parking_lot::const_rwlock(value),
        }
    }

    pub fn read(&self) -> ReadGuard<'_, T> {
        check::acquire(self.rank);
        ReadGuard {
            rank: self.rank,
            inner: self.inner.read(),
        }
    }

    pub fn write(&self) -> WriteGuard<'_, T> {
        check::acquire(self.rank);
        WriteGuard {
            rank: self.rank,
            inner: self.inner.write(),
        }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    fn drop(&mut self) {
        check::release(self.rank);
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        check::release(self.rank);
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn in_order_is_fine_and_out_of_order_panics() {
        let a = Mutex::new(Rank::Entry, ());
        let b = RwLock::new(Rank::Entries, ());
        {
            let _a = a.lock();
            let _b = b.read();
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _b = b.write();
            let _a = a.lock();
        }));
        assert!(r.is_err(), "taking Entry under Entries must panic");
        // Two locks of one rank (two entry mutexes) are out of order too.
        let c = Mutex::new(Rank::Entry, ());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _a = a.lock();
            let _c = c.lock();
        }));
        assert!(r.is_err(), "two entry locks at once must panic");
    }
}
