//! An index built from the object store alone: `--restore-from` (a lost device's tiered
//! history comes back into a new data folder) and `--read-replica` (a read-only server that
//! adopts newly tiered blocks periodically) share [`Store::tier_refresh`].
//!
//! It lists the prefix, and for every block object with a heads sidecar whose id the index
//! does not know, creates the bucket (settings from `<bucket>/settings`) and entry if
//! needed, then commits the sidecar's records and the block's metadata (`tiered`). On a
//! replica, tiered blocks whose objects are gone (FIFO or removal on the writer) are
//! dropped from its index, and those whose heads sidecar was uploaded again (its ETag
//! changed: records removed or relabelled on the writer) get the sidecar's records. No
//! payload is downloaded.

use crate::error::{Error, TierError};
use crate::object_store::ObjectError;

/// What a refresh did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefreshReport {
    /// Blocks adopted from the object store.
    pub adopted_blocks: u64,
    /// Records they hold.
    pub adopted_records: u64,
    /// Tiered blocks already in the index whose records were made those of their sidecar,
    /// uploaded again since it was read (removals and label updates on the writer).
    pub updated_blocks: u64,
    /// Tiered blocks dropped because their objects are gone (replicas).
    pub dropped_blocks: u64,
    /// Sidecars that could not be read (damaged): their blocks were skipped.
    pub skipped: Vec<String>,
}

pub(crate) fn refresh_err(e: ObjectError) -> Error {
    match e {
        ObjectError::Oversized(_) => TierError::Oversized(e.to_string()).into(),
        e => TierError::Refresh(e.to_string()).into(),
    }
}
