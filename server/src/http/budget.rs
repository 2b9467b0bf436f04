//! The memory that request bodies may hold at once while they are received whole before
//! their write (instead of into a spool file).
//!
//! A single-record body of known length up to [`MemoryBudget::LARGEST`] is collected in
//! memory when the budget has room for it: its write is then one `pwritev` into the block
//! (`Store::write`), where a spooled body is written to a temporary file and copied into the
//! block again. When the budget is spent, a body takes the spool path, so memory stays
//! bounded whatever the concurrency.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes of in-memory bodies, counted in KiB.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    kib: Arc<Semaphore>,
}

impl MemoryBudget {
    /// The largest body that may be held in memory. Larger ones are spooled: held whole,
    /// 10 MiB bodies kept the server's read buffers alive and made it fault in (and zero)
    /// fresh pages for new ones faster than the saved copy paid back (measured:
    /// docs/benchmarks/speed-2026-11-22.md).
    pub const LARGEST: u64 = 4 << 20;
    /// The default budget: room for 16 concurrent 1 MiB bodies and more.
    pub const DEFAULT: u64 = 32 << 20;

    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> MemoryBudget {
        let kib = usize::try_from(bytes >> 10).unwrap_or(Semaphore::MAX_PERMITS);
        MemoryBudget {
            kib: Arc::new(Semaphore::new(kib.min(Semaphore::MAX_PERMITS))),
        }
    }

    /// Room for a body of `len` bytes, held until the permit is dropped; `None` when the
    /// body is too large for memory or the budget is spent right now (it never waits).
    pub fn try_take(&self, len: u64) -> Option<OwnedSemaphorePermit> {
        if len > Self::LARGEST {
            return None;
        }
        let kib = u32::try_from(len.div_ceil(1024)).ok()?.max(1);
        Arc::clone(&self.kib).try_acquire_many_owned(kib).ok()
    }
}

impl Default for MemoryBudget {
    fn default() -> Self {
        MemoryBudget::new(MemoryBudget::DEFAULT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_bounds_what_is_held_and_frees_on_drop() {
        let b = MemoryBudget::new(3 << 20);
        assert!(b.try_take(MemoryBudget::LARGEST + 1).is_none(), "too large");
        let one = b.try_take(2 << 20).expect("room for 2 MiB");
        assert!(b.try_take(2 << 20).is_none(), "only 1 MiB left");
        let small = b.try_take(1).expect("a 1-byte body takes 1 KiB");
        drop(one);
        assert!(b.try_take(2 << 20).is_some(), "freed on drop");
        assert!(
            MemoryBudget::new(64 << 20).try_take(10 << 20).is_none(),
            "10 MiB spools"
        );
        drop(small);
    }
}
