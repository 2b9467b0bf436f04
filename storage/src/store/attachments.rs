//! An entry's attachments (`Store::write_attachments`, `attachments`, `remove_attachments`):
//! the file logic is `attachments.rs`; here the entry is found (created for a write) and its
//! mutex held from reading the file to replacing it, so changes of one entry are serialized
//! with each other, with the entry's rename (which moves the folder, file included) and with
//! its removal (which trashes it).

use std::sync::Arc;

use crate::attachments::{load, save, Attachment};
use crate::codec::attachments::Stored;
use crate::entry::{Entry, EntryState};
use crate::error::{AttachmentError, Error, NotFound, QueryError, Result};
use crate::lock::MutexGuard;
use crate::names::validate_attachment_name;
use crate::record::{Labels, Query};
use crate::store::Store;
use crate::when::{Matcher, Stop};

/// The label an attachment's name is under when it is taken as a record
/// ([`Store::select_attachments`]; ReductStore's `key`).
pub const ATTACHMENT_KEY_LABEL: &str = "key";

impl Store {
    /// [`Store::with_live_entry`] of the bucket named `bucket`, for the attachments' reads
    /// and changes. A bucket's removal moves its folder to the trash before it takes its
    /// entries' locks, so a change holding its entry's lock could find the folder gone: 500
    /// `internal` ("writing …/attachments.tmp: No such file or directory"; races probe of
    /// 2026-11-28). An I/O failure is looked at once any removal is over (`structure`,
    /// which a removal holds throughout, taken and let go): the bucket's absence if it was.
    fn attachments_entry<T>(
        &self,
        bucket: &str,
        entry: &str,
        create: bool,
        f: impl FnOnce(&Arc<Entry>, &mut MutexGuard<'_, EntryState>) -> Result<T>,
    ) -> Result<T> {
        let b = self.get_bucket(bucket)?;
        let r = self.with_live_entry(&b, entry, create, f);
        if matches!(r, Err(Error::Io { .. })) {
            drop(self.inner.structure.lock());
            if b.is_removed() {
                return Err(NotFound::Bucket(bucket.to_string()).into());
            }
        }
        r
    }

    /// Writes attachments of an entry (created if it does not exist), replacing those of the
    /// same names, all or none: returns them as stored. Each is at most
    /// `StoreOptions::attachments.max_size` bytes, the entry holds at most `max_count`.
    pub fn write_attachments(
        &self,
        bucket: &str,
        entry: &str,
        docs: Vec<(String, Vec<u8>)>,
    ) -> Result<Vec<Attachment>> {
        let limits = self.inner.opts.attachments;
        for (name, data) in &docs {
            validate_attachment_name(name)?;
            if data.len() > limits.max_size {
                return Err(AttachmentError::TooLarge {
                    name: name.clone(),
                    size: data.len(),
                    max: limits.max_size,
                }
                .into());
            }
        }
        let too_many = |count: usize| -> Error {
            AttachmentError::TooMany {
                bucket: bucket.to_string(),
                entry: entry.to_string(),
                count,
                max: limits.max_count,
            }
            .into()
        };
        // Refused before the entry is created: a refused write leaves nothing behind.
        let distinct: std::collections::BTreeSet<&str> =
            docs.iter().map(|(n, _)| n.as_str()).collect();
        if distinct.len() > limits.max_count {
            return Err(too_many(distinct.len()));
        }
        if docs.is_empty() {
            self.get_bucket(bucket)?;
            return Ok(Vec::new());
        }
        let sync = self.inner.sync_dirs();
        let written = self.attachments_entry(bucket, entry, true, |e, _st| {
            let mut all = load(e.dir(), bucket, entry)?;
            // Unique within the entry and increasing: a newer write has a larger one.
            let first = all
                .values()
                .map(|a| a.ts + 1)
                .max()
                .unwrap_or(0)
                .max(crate::now_micros());
            let mut names = Vec::with_capacity(docs.len());
            for (ts, (name, data)) in (first..).zip(docs) {
                let stored = Stored {
                    name: name.clone(),
                    ts,
                    data,
                };
                all.insert(name.clone(), stored);
                names.push(name);
            }
            if all.len() > limits.max_count {
                return Err(too_many(all.len()));
            }
            save(e.dir(), &all, sync)?;
            names.sort();
            names.dedup();
            Ok(names
                .iter()
                .filter_map(|n| all.get(n).cloned().map(Attachment::from))
                .collect())
        })?;
        self.attachments_changed(bucket, entry);
        Ok(written)
    }

    /// Tells the listener ([`Store::on_attachments`]) of a change, after it is saved.
    fn attachments_changed(&self, bucket: &str, entry: &str) {
        if let Some(l) = self.inner.attachment_listener.get() {
            l(bucket, entry);
        }
    }

    /// The attachments of an entry, by name.
    pub fn attachments(&self, bucket: &str, entry: &str) -> Result<Vec<Attachment>> {
        self.attachments_entry(bucket, entry, false, |e, _st| {
            Ok(load(e.dir(), bucket, entry)?
                .into_values()
                .map(Attachment::from)
                .collect())
        })
    }

    /// The attachments a record query of the entry selects when each attachment is taken
    /// as a record stamped with its `ts` and labelled `key=<name>` (ReductStore keeps its
    /// attachments as such records, in `<entry>/$meta`): `start`/`stop`, label filters,
    /// `when` (with `strict`), `descending` and `limit` apply as to records.
    pub fn select_attachments(
        &self,
        bucket: &str,
        entry: &str,
        query: &Query,
    ) -> Result<Vec<Attachment>> {
        let mut all = self.attachments(bucket, entry)?;
        all.sort_by_key(|a| a.ts);
        if query.descending {
            all.reverse();
        }
        let (start, stop) = (query.start.unwrap_or(0), query.stop.unwrap_or(u64::MAX));
        let mut matcher = query
            .when
            .as_ref()
            .map(|c| Matcher::new(c, query.strict, query.descending));
        let mut out = Vec::new();
        for a in all {
            if query.limit.is_some_and(|l| out.len() as u64 >= l) {
                break;
            }
            if a.ts < start || a.ts >= stop {
                continue;
            }
            let labels: Labels = [(ATTACHMENT_KEY_LABEL.to_string(), a.name.clone())].into();
            if !query.filters.iter().all(|f| f.matches(&labels)) {
                continue;
            }
            if let Some(m) = matcher.as_mut() {
                match m.matches(a.ts, &labels) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(Stop::Limit) => break,
                    Err(Stop::Missing(label)) => {
                        return Err(QueryError::MissingLabel { label, ts: a.ts }.into())
                    }
                    Err(Stop::Invalid(message)) => {
                        return Err(QueryError::Invalid { message, ts: a.ts }.into())
                    }
                }
            }
            out.push(a);
        }
        Ok(out)
    }

    /// One attachment of an entry.
    pub fn attachment(&self, bucket: &str, entry: &str, name: &str) -> Result<Attachment> {
        validate_attachment_name(name)?;
        self.attachments_entry(bucket, entry, false, |e, _st| {
            load(e.dir(), bucket, entry)?
                .remove(name)
                .map(Attachment::from)
                .ok_or_else(|| {
                    AttachmentError::NotFound {
                        bucket: bucket.to_string(),
                        entry: entry.to_string(),
                        name: name.to_string(),
                    }
                    .into()
                })
        })
    }

    /// Removes attachments of an entry: those named (a name it does not have is skipped), or
    /// every one with `None`. Returns the names removed.
    pub fn remove_attachments(
        &self,
        bucket: &str,
        entry: &str,
        names: Option<&[String]>,
    ) -> Result<Vec<String>> {
        for n in names.unwrap_or_default() {
            validate_attachment_name(n)?;
        }
        let sync = self.inner.sync_dirs();
        let removed = self.attachments_entry(bucket, entry, false, |e, _st| {
            let mut all = match load(e.dir(), bucket, entry) {
                Ok(all) => all,
                // A damaged file is removed whole, so the entry can take attachments again.
                Err(Error::Attachment(AttachmentError::Damaged { reason, .. }))
                    if names.is_none() =>
                {
                    log::warn!(
                        "removing the damaged attachments file of {bucket}/{entry} ({reason})"
                    );
                    save(e.dir(), &Default::default(), sync)?;
                    return Ok(Vec::new());
                }
                Err(err) => return Err(err),
            };
            let removed: Vec<String> = match names {
                None => std::mem::take(&mut all).into_keys().collect(),
                Some(names) => {
                    let mut out: Vec<String> = names
                        .iter()
                        .filter(|n| all.remove(n.as_str()).is_some())
                        .cloned()
                        .collect();
                    out.sort();
                    out.dedup();
                    out
                }
            };
            if !removed.is_empty() {
                save(e.dir(), &all, sync)?;
            }
            Ok(removed)
        })?;
        if !removed.is_empty() {
            self.attachments_changed(bucket, entry);
        }
        Ok(removed)
    }
}
