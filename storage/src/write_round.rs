//! A round of group writes to several entries with one index commit
//! ([`Store::write_groups`]): the server's writer thread writes the single writes queued
//! while it was busy this way (`server/src/http/writer.rs`).
//!
//! Each group is one entry's records, appended with one `pwritev` as
//! [`Store::write_group`] does; what differs is the commit: the ops of every group go to
//! the index in **one** transaction, where a group per entry used to cost one transaction
//! each (16 concurrent writers of 16 entries: 16 commits of ~4 page writes each).
//!
//! The ack rule and the cut rule stay those of a single write: every entry's lock is held
//! from its append until the shared commit went through (or failed, and what every entry
//! appended was cut). So the round holds several entry locks at once; it takes them in
//! increasing entry id order, keyed (`Entry::lock_live_ordered`, checked in debug builds):
//! any other code holds at most one entry lock, so no cycle can form. Everything ranked
//! below the entry lock (bucket look-up, quota reservation and eviction, entry creation) is
//! done for every group before the first entry lock is taken.

use std::sync::Arc;

use crate::bucket::Bucket;
use crate::entry::Entry;
use crate::error::Result;
use crate::quota::Reservation;
use crate::record::WriteMeta;
use crate::write::Prepared;

/// One group of [`Store::write_groups`]: a bucket, an entry and its records, each record
/// given as its meta and the pieces of its payload.
pub type Group<'a, P> = (&'a str, &'a str, &'a [(&'a WriteMeta, &'a [P])]);

/// One record of [`Store::write_group_at`]: its timestamp (`None`: now), its content type
/// and labels (a `WriteMeta` other records may share; its own `ts` is not read) and the
/// pieces of its payload.
pub type TimedRecord<'a, P> = (Option<u64>, &'a WriteMeta, &'a [P]);

/// One group of [`Store::write_groups_at`]: a bucket, an entry and its records, each with
/// its own timestamp beside a meta records may share.
pub type TimedGroup<'a, P> = (&'a str, &'a str, &'a [TimedRecord<'a, P>]);

/// A group's outcome: one result per record, or the group's own failure.
pub type GroupResult = Result<Vec<Result<u64>>>;

/// A group admitted (bucket found, bytes reserved, entry created, records prepared) and not
/// locked yet.
pub(crate) struct Admitted<'s, 'a, P> {
    pub(crate) at: usize,
    pub(crate) bucket: &'s Bucket,
    pub(crate) entry: Arc<Entry>,
    pub(crate) prepared: Vec<Prepared<'a, P>>,
    pub(crate) _reserved: Reservation<'s>,
}
