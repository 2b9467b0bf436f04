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
use crate::entry::{Entry, EntryState};
use crate::lock::MutexGuard;
use crate::quota::Reservation;
use crate::write::{prepare, records_need, Prepared, RecordIn, Uncommitted, Undo};
use crate::*;

/// One group of [`Store::write_groups`]: a bucket, an entry and its records, each record
/// given as its meta and the pieces of its payload.
pub type Group<'a, P> = (&'a str, &'a str, &'a [(&'a WriteMeta, &'a [P])]);

/// A group's outcome: one result per record, or the group's own failure.
pub type GroupResult = Result<Vec<Result<u64>>>;

/// A group admitted (bucket found, bytes reserved, entry created, records prepared) and not
/// locked yet.
struct Admitted<'s, 'a, P> {
    at: usize,
    bucket: &'s Bucket,
    entry: Arc<Entry>,
    prepared: Vec<Prepared<'a, P>>,
    _reserved: Reservation<'s>,
}

impl Store {
    /// Writes groups of records of several entries: each group as [`Store::write_group`]
    /// (one append per entry, a result per record: a duplicate timestamp or bad labels fail
    /// only their record), all groups' index changes in **one** commit. One outcome per
    /// group, in order. A group fails as a whole (the outer error) for its own reasons
    /// (unknown bucket, bad entry name, quota, a failed append), which do not touch the
    /// other groups; a failed shared commit fails every group that took part, after
    /// cutting what each appended. Two groups of one entry are written one after the other.
    pub fn write_groups<P: AsRef<[u8]>>(&self, groups: &[Group<'_, P>]) -> Vec<GroupResult> {
        let mut out: Vec<Option<GroupResult>> = groups.iter().map(|_| None).collect();
        let mut buckets: Vec<Option<Arc<Bucket>>> = Vec::with_capacity(groups.len());
        for (at, &(bucket, entry, _)) in groups.iter().enumerate() {
            let found = self
                .get_bucket(bucket)
                .and_then(|b| Ok(validate_entry_name(entry).map(|()| b)?));
            match found {
                Ok(b) => buckets.push(Some(b)),
                Err(err) => {
                    out[at] = Some(Err(err));
                    buckets.push(None);
                }
            }
        }
        // Reservations, evictions and entry creation: before any entry lock.
        let mut admitted: Vec<Admitted<'_, '_, P>> = Vec::with_capacity(groups.len());
        for (at, (&(_, entry, records), b)) in groups.iter().zip(&buckets).enumerate() {
            let Some(bucket) = b.as_deref() else { continue };
            let recs = || {
                records
                    .iter()
                    .map(|&(meta, pieces)| RecordIn { meta, pieces })
            };
            let admit = self.reserve(bucket, records_need(recs())).and_then(|res| {
                let e = self.entry_or_create(bucket, entry)?;
                Ok((res, e))
            });
            match admit {
                Ok((reserved, entry)) => admitted.push(Admitted {
                    at,
                    bucket,
                    entry,
                    prepared: prepare(bucket, recs()),
                    _reserved: reserved,
                }),
                Err(err) => out[at] = Some(Err(err)),
            }
        }
        // Entry locks in increasing entry id order; a second group of an entry waits for
        // the round (it would need the lock the round holds).
        admitted.sort_by_key(|a| a.entry.id());
        let mut later = Vec::new();
        let mut round: Vec<Admitted<'_, '_, P>> = Vec::with_capacity(admitted.len());
        for a in admitted {
            match round.last() {
                Some(last) if last.entry.id() == a.entry.id() => later.push(a.at),
                _ => round.push(a),
            }
        }
        self.write_round(groups, round, &mut out);
        for at in later {
            let (bucket, entry, records) = groups[at];
            out[at] = Some(self.write_group(bucket, entry, records));
        }
        out.into_iter()
            .map(|o| {
                o.unwrap_or_else(|| Err(Error::Index("a group of a round had no outcome".into())))
            })
            .collect()
    }

    /// Locks, appends and commits the admitted groups (one per entry, in entry id order).
    fn write_round<P: AsRef<[u8]>>(
        &self,
        groups: &[Group<'_, P>],
        round: Vec<Admitted<'_, '_, P>>,
        out: &mut [Option<GroupResult>],
    ) {
        // The entries outlive their guards; the prepared records move into the appends;
        // the reservations are held until the commit is done.
        let mut entries = Vec::with_capacity(round.len());
        let mut jobs = Vec::with_capacity(round.len());
        let mut _reserved = Vec::with_capacity(round.len());
        for a in round {
            entries.push(a.entry);
            jobs.push((a.at, a.bucket, a.prepared));
            _reserved.push(a._reserved);
        }
        let mut ops = Vec::new();
        let mut answers: Vec<(usize, Vec<Result<u64>>)> = Vec::with_capacity(jobs.len());
        let mut guards: Vec<MutexGuard<'_, EntryState>> = Vec::with_capacity(jobs.len());
        let mut undos: Vec<(&Bucket, &Entry, Undo)> = Vec::with_capacity(jobs.len());
        for (entry, (at, bucket, prepared)) in entries.iter().zip(jobs) {
            let (bucket_name, _, records) = groups[at];
            let mut st = match entry.lock_live_ordered(bucket_name) {
                Ok(st) => st,
                Err(err) => {
                    out[at] = Some(Err(err));
                    continue;
                }
            };
            match self.append_entry(bucket, entry, &mut st, prepared, records.len()) {
                Ok((results, entry_ops, undo)) => {
                    ops.extend(entry_ops);
                    answers.push((at, results));
                    guards.push(st);
                    undos.push((bucket, entry, undo));
                }
                // Cut already; its lock goes now.
                Err(err) => out[at] = Some(Err(err)),
            }
        }
        let committed = if ops.is_empty() {
            Ok(())
        } else {
            let parts = guards
                .iter_mut()
                .zip(undos)
                .map(|(st, (b, e, undo))| Uncommitted { b, e, st, undo })
                .collect();
            self.commit_or_undo_all(ops, parts)
        };
        for (at, results) in answers {
            out[at] = Some(match &committed {
                Ok(()) => Ok(results),
                Err(err) => Err(err.duplicate()),
            });
        }
    }
}
