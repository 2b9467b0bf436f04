//! The tier thread: uploads sealed blocks, drops their local copies once the object is
//! verified, re-uploads sidecars of tiered blocks that lost records, and deletes objects of
//! blocks the store deleted.
//!
//! One round: pending object deletions; then per bucket with `tier_local_max` or
//! `tier_after`, the sealed local blocks to upload (oldest first while local bytes exceed
//! the budget, and any whose newest record is older than `tier_after`); up to
//! `TierConfig::uploads` of them go up at once (scoped threads), each:
//!
//! 1. PUT of the block, read once: the object store computes its CRC32C as it reads
//!    (multipart when large) and sends it as the checksum the store checks on receipt;
//! 2. its live records from the index (the heads sidecar), PUT of the sidecar, PUT of the
//!    bucket's settings if they changed since the last upload;
//! 3. HEAD: the object's size and stored CRC must be the file's;
//! 4. under the entry lock: if the block still has the records the sidecar lists, commit
//!    `tiered`; then the file is unlinked. A crash before the commit leaves a local block
//!    that is uploaded again (PUTs overwrite); after it, a leftover file that open deletes.
//!
//! Writers never wait on any of this: the thread holds an entry lock only for the commit.
//! A failed round backs off (250 ms doubling to 10 s).
//!
//! The thread and its rounds are `Store`'s methods (`store/tier.rs`: `start_tier_thread`,
//! `tier_round`); this file holds the tier's side of them.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Tier;
use crate::error::{Error, TierError};
use crate::object_store::ObjectError;

pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What one upload came to.
pub(crate) enum Outcome {
    Tiered(u64),
    /// The block changed or went while it was uploaded: looked at again next round.
    Changed,
    /// Its heads sidecar would be too long: the block stays local (`Tier::oversized`).
    KeptLocal,
}

impl Tier {
    /// Deletes pending objects; false if the object store failed (they stay pending).
    pub(crate) fn run_deletes(&self) -> bool {
        let keys: Vec<String> = std::mem::take(&mut *self.deletes.lock());
        for (i, key) in keys.iter().enumerate() {
            if let Err(e) = self.cfg.store.delete(key) {
                self.failed(&e);
                self.deletes.lock().extend(keys[i..].iter().cloned());
                return false;
            }
            self.deleted.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    pub(crate) fn head_crc(&self, key: &str) -> std::result::Result<u32, ObjectError> {
        self.cfg
            .store
            .head(key)?
            .and_then(|h| h.crc32c)
            .ok_or_else(|| ObjectError::NotFound(key.to_string()))
    }
}

/// Counts a sidecar upload under way while it lives.
pub(crate) struct InFlight<'a>(&'a std::sync::atomic::AtomicU64);

impl<'a> InFlight<'a> {
    pub(crate) fn new(n: &'a std::sync::atomic::AtomicU64) -> InFlight<'a> {
        n.fetch_add(1, Ordering::AcqRel);
        InFlight(n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

pub(crate) fn tier_error(e: ObjectError) -> Error {
    TierError::Upload(e.to_string()).into()
}
