//! The engine's locks, each with a rank: a thread may only take a lock whose rank is higher
//! than every lock it already holds. That one rule makes a lock cycle (a deadlock between
//! engine locks) impossible; `docs/architecture.md` lists the ranks and why.
//!
//! In debug builds (every test build) each thread keeps the ranks it holds and a lock taken
//! out of order panics at once with both ranks named, whether or not another thread was
//! there to deadlock with: a wrong order is found by any test that passes through it. In
//! release builds the check compiles away and these are plain `parking_lot` locks.
//!
//! One exception to "strictly increasing": locks of one rank taken with a key
//! ([`Mutex::lock_keyed`]) may be held together when they are taken in increasing key
//! order, every one of them keyed. The writer thread's round takes its entries' locks so
//! (by entry id, `Rank::Entry`), to commit them in one index transaction: two threads that
//! each take keyed locks in increasing order cannot wait on each other in a cycle, and any
//! other thread holds at most one entry lock.

use std::ops::{Deref, DerefMut};

/// Lock ranks, lowest first: take them in this order only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    /// `Store`: serialises bucket and entry creation and removal.
    Structure = 10,
    /// `Bucket`: one eviction (or quota admission) at a time per bucket.
    Evict = 20,
    /// `Entry`: an entry's blocks and active block. Never two at once, except keyed by
    /// entry id in increasing order (`Store::write_groups`).
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
    /// `Bucket`: its lifecycle rules' run state (a leaf; never held across a pass).
    Lifecycle = 56,
    /// `Committer`: its queue (taken under an entry lock; waits release it).
    CommitQueue = 60,
    /// `Committer`: a waiter's result slot, files to sync (leaves).
    CommitSlot = 61,
    CommitDirty = 62,
    /// `Index`: the label-set interner (taken inside index transactions).
    Interner = 70,
    /// `Feed`: the watched entries (taken inside index transactions, a leaf).
    FeedWatch = 71,
    /// `Index`: the entries' last chunks kept between appends (a leaf).
    IndexTails = 72,
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
        /// The ranks this thread holds, with the key of a keyed acquisition.
        static HELD: RefCell<Vec<(Rank, Option<u64>)>> = const { RefCell::new(Vec::new()) };
    }

    /// Takes `rank` (with `key` for a keyed acquisition): every lock held must have a lower
    /// rank, or the same rank and a lower key, both keyed.
    pub fn acquire(rank: Rank, key: Option<u64>) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            let fine = h.iter().all(|&(r, k)| {
                r < rank || (r == rank && matches!((k, key), (Some(k), Some(key)) if k < key))
            });
            if !fine {
                let held = h.clone();
                drop(h);
                panic!("lock order violated: taking {rank:?} (key {key:?}) while holding {held:?} (see docs/architecture.md, lock order)");
            }
            h.push((rank, key));
        });
    }

    pub fn release(rank: Rank, key: Option<u64>) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|held| *held == (rank, key)) {
                h.remove(i);
            }
        });
    }
}

#[cfg(not(debug_assertions))]
mod check {
    use super::Rank;
    #[inline(always)]
    pub fn acquire(_: Rank, _: Option<u64>) {}
    #[inline(always)]
    pub fn release(_: Rank, _: Option<u64>) {}
}

/// A mutex with a rank.
pub(crate) struct Mutex<T> {
    rank: Rank,
    inner: parking_lot::Mutex<T>,
}

pub(crate) struct MutexGuard<'a, T> {
    rank: Rank,
    key: Option<u64>,
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
        check::acquire(self.rank, None);
        MutexGuard {
            rank: self.rank,
            key: None,
            inner: self.inner.lock(),
        }
    }

    /// The lock if no one holds it, without waiting.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let inner = self.inner.try_lock()?;
        check::acquire(self.rank, None);
        Some(MutexGuard {
            rank: self.rank,
            key: None,
            inner,
        })
    }

    /// Locks as one of several locks of this rank held together: they must be taken in
    /// increasing `key` order, each with its key (see the module's comment).
    pub fn lock_keyed(&self, key: u64) -> MutexGuard<'_, T> {
        check::acquire(self.rank, Some(key));
        MutexGuard {
            rank: self.rank,
            key: Some(key),
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
        check::release(self.rank, self.key);
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
        check::acquire(self.rank, None);
        ReadGuard {
            rank: self.rank,
            inner: self.inner.read(),
        }
    }

    pub fn write(&self) -> WriteGuard<'_, T> {
        check::acquire(self.rank, None);
        WriteGuard {
            rank: self.rank,
            inner: self.inner.write(),
        }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    fn drop(&mut self) {
        check::release(self.rank, None);
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        check::release(self.rank, None);
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

    /// The writer thread's round (`Store::write_groups`) holds several entry locks at once,
    /// taken by increasing entry id: keyed locks of one rank in increasing key order pass;
    /// a decreasing or repeated key, an unkeyed lock of the rank among keyed ones, or a
    /// lower rank under them panics.
    #[test]
    fn keyed_locks_of_one_rank_in_increasing_order_only() {
        let e1 = Mutex::new(Rank::Entry, ());
        let e2 = Mutex::new(Rank::Entry, ());
        let e3 = Mutex::new(Rank::Entry, ());
        let queue = Mutex::new(Rank::CommitQueue, ());
        {
            let _a = e1.lock_keyed(1);
            let _b = e2.lock_keyed(2);
            let _c = e3.lock_keyed(3);
            let _q = queue.lock();
        }
        type Case = fn(&Mutex<()>, &Mutex<()>);
        let cases: [(&str, Case); 4] = [
            ("decreasing keys", |a, b| {
                let _b = b.lock_keyed(2);
                let _a = a.lock_keyed(1);
            }),
            ("a repeated key", |a, b| {
                let _a = a.lock_keyed(1);
                let _b = b.lock_keyed(1);
            }),
            ("an unkeyed lock after a keyed one", |a, b| {
                let _a = a.lock_keyed(1);
                let _b = b.lock();
            }),
            ("a keyed lock after an unkeyed one", |a, b| {
                let _a = a.lock();
                let _b = b.lock_keyed(2);
            }),
        ];
        for (what, case) in cases {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(&e1, &e2)));
            assert!(r.is_err(), "{what} must panic");
        }
        let evict = Mutex::new(Rank::Evict, ());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _a = e1.lock_keyed(1);
            let _e = evict.lock();
        }));
        assert!(r.is_err(), "Evict under a keyed entry lock must panic");
        // Every guard released its rank: in order works again.
        let _a = e1.lock_keyed(1);
        let _b = e2.lock_keyed(2);
    }
}
