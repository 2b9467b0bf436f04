//! Sync policies: group commit and the periodic syncer.
