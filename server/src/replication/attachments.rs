//! A task's attachments (issue 28): the attachments of the entries a task selects (its
//! `entries`, less the `!` ones; its `when` does not apply, as in ReductStore, whose
//! replication skips its filters for `$meta` entries) are carried to the destination
//! beside the records, by a syncer running next to the task's sender (same cancellation,
//! same client, same bounds).
//!
//! When: at the sender's start (server start, a `PUT` of the task, a resume) every
//! attachment of every selected entry is written; then each change the engine reports
//! ([`tsblob_storage::Store::on_attachments`]) is sent: the names written since, and the
//! names removed since (a removal while the task did not run is not seen: the start
//! writes what exists, removes nothing). What was delivered is kept in memory (name and
//! source timestamp per entry, only for entries with attachments), so a change sends only
//! the documents that changed.
//!
//! To a tsblob destination: `PUT …/{entry}/attachments` (the changed documents, one JSON
//! object) and `DELETE …/attachments?names=`. To a ReductStore destination, as ReductStore
//! replicates them: records of `<entry>/$meta` at the source's timestamps, labelled
//! `key=<name>` (batch protocol v1), and a removal as the update `remove=true` of that
//! record (a v1 `PATCH …/batch`).
//!
//! Bounded: one entry's attachments are held at a time (at most the source's
//! `--max-attachments` × `--max-attachment-size`); entries waiting with a change are at
//! most [`DIRTY_MAX`] (past it, and when the change queue overflows, the syncer forgets
//! them and goes over every selected entry again); every answer is read up to the task's
//! outbound bounds, no redirect is followed, and of an error answer only one short line
//! is kept. Failures are retried with the sender's backoff; a document the destination
//! refuses for good (a 4xx but 401, 403, 404, 408, 429: too large for its limits, say) is
//! counted in `errors` and not sent again until it changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tsblob_proto::outbound;
use tsblob_storage::{Attachment, FeedFilter, Labels, ATTACHMENT_KEY_LABEL};

use super::metrics::TaskMetrics;
use super::{Replications, Shared, TaskSpec};
use crate::batch_client::{post_batch, Destination, DstApi, OutRecord, REDUCT_BATCH_RECORDS};
use crate::cli::client::{entry_seg, seg};
use crate::reduct_header::BatchHeaderV1;

/// Entries with a change waiting, at most: past it they are forgotten and every selected
/// entry is gone over again.
const DIRTY_MAX: usize = 10_000;
/// Changes queued for the syncers (a broadcast channel): a syncer that falls this far
/// behind goes over every selected entry again.
pub(super) const CHANGES_QUEUE: usize = 1024;
/// The first wait after an error (it doubles up to `Options::max_backoff`).
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// A request may take the timeout plus the time to move its body at this rate.
const MIN_RATE: f64 = 64.0 * 1024.0;
/// ReductStore's attachment entries: `<entry>/$meta`.
const META_SEGMENT: &str = "$meta";
/// The label whose `true` removes a ReductStore attachment.
const REMOVE_LABEL: &str = "remove";

/// An attachment change the engine reported: bucket, entry.
pub(super) type Change = (Arc<str>, Arc<str>);

/// What the syncer needs of its task (built by the sender).
pub(super) struct Syncer {
    pub repl: Arc<Replications>,
    pub name: String,
    pub spec: TaskSpec,
    pub shared: Arc<Mutex<Shared>>,
    pub cancel: CancellationToken,
    pub http: reqwest::Client,
    /// The task's entries (no condition).
    pub entries: FeedFilter,
    /// The task's metric series, taken when the task started (inert once it is removed:
    /// errors of a removed task never count in a task re-created under its name).
    pub metrics: TaskMetrics,
}

/// What the destination did with a request.
enum Outcome {
    Done,
    /// Refused for good: counted, not sent again until it changes.
    Refused(String),
    /// Failed as a whole: tried again after a backoff.
    Retry(String),
}

/// Names and source timestamps delivered, per entry.
type Delivered = HashMap<String, BTreeMap<String, u64>>;

impl Syncer {
    /// Runs until the task is cancelled.
    pub async fn run(self) {
        // Subscribed before the first pass: no change after it is missed.
        let mut changes = self.repl.attachment_changes();
        let mut delivered = Delivered::new();
        let mut dirty = BTreeSet::new();
        let mut full = true;
        let mut backoff = FIRST_BACKOFF;
        loop {
            if full {
                match self.selected_entries().await {
                    Ok(all) => {
                        dirty = all;
                        full = false;
                    }
                    Err(message) => {
                        self.error(message);
                        if self.pause(&mut backoff).await.is_err() {
                            return;
                        }
                        continue;
                    }
                }
            }
            while let Some(entry) = dirty.first().cloned() {
                if self.cancel.is_cancelled() {
                    return;
                }
                // A removed or changed task stops at once, not after a request's timeout.
                let synced = tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    r = self.sync_entry(&entry, &mut delivered) => r,
                };
                match synced {
                    Ok(()) => {
                        dirty.remove(&entry);
                        backoff = FIRST_BACKOFF;
                    }
                    Err(message) => {
                        self.error(message);
                        if self.pause(&mut backoff).await.is_err() {
                            return;
                        }
                    }
                }
                // Changes that came meanwhile.
                loop {
                    match changes.try_recv() {
                        Ok(c) => self.note(c, &mut dirty, &mut full),
                        Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => full = true,
                        Err(_) => break,
                    }
                }
                if full {
                    break;
                }
            }
            if full {
                continue;
            }
            let got = tokio::select! {
                _ = self.cancel.cancelled() => return,
                got = changes.recv() => got,
            };
            match got {
                Ok(c) => self.note(c, &mut dirty, &mut full),
                Err(RecvError::Lagged(_)) => full = true,
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Queues a change of one of the task's entries (or, past [`DIRTY_MAX`], a full pass).
    fn note(&self, (bucket, entry): Change, dirty: &mut BTreeSet<String>, full: &mut bool) {
        if *bucket != *self.spec.src_bucket || !self.entries.wants_entry(&entry) {
            return;
        }
        if dirty.len() >= DIRTY_MAX {
            dirty.clear();
            *full = true;
        } else {
            dirty.insert(entry.to_string());
        }
    }

    async fn pause(&self, backoff: &mut Duration) -> Result<(), ()> {
        let wait = *backoff;
        *backoff = (*backoff * 2).min(self.repl.options().max_backoff);
        tokio::select! {
            _ = self.cancel.cancelled() => Err(()),
            _ = tokio::time::sleep(wait) => Ok(()),
        }
    }

    fn error(&self, message: String) {
        super::count_task_error(
            &self.metrics,
            &self.name,
            &self.shared,
            "replication of attachments",
            message,
        );
    }

    fn destination(&self) -> Destination {
        Destination {
            url: self.spec.dst_url.clone(),
            bucket: self.spec.dst_bucket.clone(),
            token: self.spec.dst_token.clone(),
            bounds: self.repl.options().outbound,
            api: self.spec.dst_api,
            compression: self.spec.compression,
        }
    }

    /// The source bucket's entries the task selects.
    async fn selected_entries(&self) -> Result<BTreeSet<String>, String> {
        let store = self.repl.store().clone();
        let bucket = self.spec.src_bucket.clone();
        let listed = crate::blocking::run(move || {
            match store.list_entries(&bucket) {
                // No bucket (removed; the records' sender reports it): nothing to send
                // until an attachment of it changes.
                Err(tsblob_storage::Error::NotFound(_)) => Ok(Vec::new()),
                other => other.map_err(super::ReplicationError::from),
            }
        })
        .await
        .map_err(|e| {
            format!(
                "listing the entries of the source bucket: {}",
                self.repl.explain(e)
            )
        })?;
        Ok(listed
            .into_iter()
            .map(|e| e.name)
            .filter(|n| self.entries.wants_entry(n))
            .collect())
    }

    /// Sends what changed in one entry's attachments since it was last delivered. `Err`: try
    /// again later.
    async fn sync_entry(&self, entry: &str, delivered: &mut Delivered) -> Result<(), String> {
        let store = self.repl.store().clone();
        let (b, e) = (self.spec.src_bucket.clone(), entry.to_string());
        let read = crate::blocking::run(move || {
            Ok::<_, super::ReplicationError>(store.attachments(&b, &e))
        })
        .await
        .map_err(|e| self.repl.explain(e))?;
        let now: Vec<Attachment> = match read {
            Ok(all) => all,
            // The entry (or bucket) is gone: removals of entries are not replicated.
            Err(tsblob_storage::Error::NotFound(_)) => {
                delivered.remove(entry);
                return Ok(());
            }
            // A damaged file: reported, not retried until it changes.
            Err(e @ tsblob_storage::Error::Attachment(_)) => {
                self.error(format!(
                    "the attachments of {entry} are not sent: {}",
                    self.repl.explain(e.into())
                ));
                return Ok(());
            }
            Err(e) => return Err(self.repl.explain(e.into())),
        };
        let before = delivered.get(entry).cloned().unwrap_or_default();
        let changed: Vec<&Attachment> = now
            .iter()
            .filter(|a| before.get(&a.name) != Some(&a.ts))
            .collect();
        let gone: Vec<(String, u64)> = before
            .iter()
            .filter(|(n, _)| !now.iter().any(|a| &a.name == *n))
            .map(|(n, ts)| (n.clone(), *ts))
            .collect();
        let dst_entry = self.spec.dst_entry(entry);
        if !changed.is_empty() {
            match self.write(&dst_entry, &changed).await {
                Outcome::Done => self.sent(changed.len()),
                Outcome::Refused(m) => self.error(m),
                Outcome::Retry(m) => return Err(m),
            }
        }
        if !gone.is_empty() {
            match self.remove(&dst_entry, &gone).await {
                Outcome::Done => {}
                Outcome::Refused(m) => self.error(m),
                Outcome::Retry(m) => return Err(m),
            }
        }
        let state: BTreeMap<String, u64> = now.into_iter().map(|a| (a.name, a.ts)).collect();
        if state.is_empty() {
            delivered.remove(entry);
        } else {
            delivered.insert(entry.to_string(), state);
        }
        Ok(())
    }

    fn sent(&self, n: usize) {
        let mut s = self.shared.lock();
        s.counters.attachments_sent += n as u64;
        s.dirty = true;
    }

    fn timeout(&self, body: usize) -> Duration {
        self.repl.options().timeout + Duration::from_secs_f64(body as f64 / MIN_RATE)
    }

    /// Writes the documents of `docs` to the destination's entry.
    async fn write(&self, dst_entry: &str, docs: &[&Attachment]) -> Outcome {
        let dst = self.destination();
        if dst.api == DstApi::Reductstore {
            return self.reduct_write(&dst, dst_entry, docs).await;
        }
        let doc: BTreeMap<&str, Box<serde_json::value::RawValue>> = docs
            .iter()
            .map(|a| (a.name.as_str(), crate::answers::attachment_json(a)))
            .collect();
        let body = match serde_json::to_vec(&doc) {
            Ok(b) => b,
            Err(e) => return Outcome::Refused(format!("encoding the attachments failed: {e}")),
        };
        let what = format!("{} attachment(s) of {dst}/{dst_entry}", docs.len());
        let req = self
            .http
            .put(self.url(&dst, dst_entry, ""))
            .timeout(self.timeout(body.len()))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        self.send(&dst, req, &what, false).await
    }

    /// Removes the names of `gone` at the destination's entry.
    async fn remove(&self, dst_entry: &str, gone: &[(String, u64)]) -> Outcome {
        let dst = self.destination();
        if dst.api == DstApi::Reductstore {
            return self.reduct_remove(&dst, dst_entry, gone).await;
        }
        let names: Vec<&str> = gone.iter().map(|(n, _)| n.as_str()).collect();
        let what = format!(
            "the removal of {} attachment(s) of {dst}/{dst_entry}",
            names.len()
        );
        let req = self
            .http
            .delete(self.url(&dst, dst_entry, ""))
            .query(&[("names", names.join(","))])
            .timeout(self.timeout(0));
        // The entry not there (never written, or removed) has nothing to remove.
        self.send(&dst, req, &what, true).await
    }

    /// `…/b/{bucket}/{entry}/attachments{tail}` at a tsblob destination.
    fn url(&self, dst: &Destination, dst_entry: &str, tail: &str) -> String {
        format!(
            "{}/api/v1/b/{}/{}/attachments{tail}",
            dst.url.trim_end_matches('/'),
            seg(&dst.bucket),
            entry_seg(dst_entry)
        )
    }

    /// Sends a request to a tsblob destination and reads its answer, bounded; with
    /// `no_entry_is_done`, its 404 `entry_not_found` is a success.
    async fn send(
        &self,
        dst: &Destination,
        req: reqwest::RequestBuilder,
        what: &str,
        no_entry_is_done: bool,
    ) -> Outcome {
        let req = match &dst.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let resp = match crate::batch_client::send_once(req, what, dst).await {
            Ok(r) => r,
            Err(message) => return Outcome::Retry(message),
        };
        let status = resp.status();
        let limit = if status.is_success() {
            dst.bounds.answer_max
        } else {
            dst.bounds.error_max
        };
        let body = match outbound::read_bounded(resp, limit).await {
            Ok(b) => b,
            Err(e) => {
                return Outcome::Retry(format!("{dst} answered {status} for {what}, but {e}"))
            }
        };
        if status.is_success() {
            return Outcome::Done;
        }
        let (code, why) = match outbound::error_fields(&body) {
            Some((code, message)) => (code.unwrap_or_default(), message),
            None => (
                String::new(),
                format!("{} bytes that are not a tsblob error document", body.len()),
            ),
        };
        if no_entry_is_done && status.as_u16() == 404 && code == "entry_not_found" {
            return Outcome::Done;
        }
        let why = format!("{code} {why}");
        let message = format!("{dst} answered {} for {what}: {why}", status.as_u16());
        if crate::batch_client::refused_for_good(status.as_u16()) {
            Outcome::Refused(message)
        } else {
            Outcome::Retry(message)
        }
    }

    /// Attachments as records of `<entry>/$meta` at a ReductStore destination (batch
    /// protocol v1; a missing bucket is created as for records).
    async fn reduct_write(
        &self,
        dst: &Destination,
        dst_entry: &str,
        docs: &[&Attachment],
    ) -> Outcome {
        // Batch protocol v1 carries the payloads in timestamp order (its headers are a set).
        let mut docs = docs.to_vec();
        docs.sort_by_key(|a| a.ts);
        let recs: Vec<OutRecord> = docs
            .iter()
            .map(|a| OutRecord {
                entry: dst_entry.to_string(),
                ts: a.ts,
                content_type: "application/json".to_string(),
                labels: Labels::from([(ATTACHMENT_KEY_LABEL.to_string(), a.name.clone())]),
                data: a.data.clone(),
            })
            .collect();
        let meta = format!("{dst_entry}/{META_SEGMENT}");
        let timeout = self.repl.options().timeout;
        let (_, answer) = post_batch(&self.http, dst, &meta, recs, timeout).await;
        let answer = match answer {
            Ok(a) => a,
            Err(m) => return Outcome::Retry(m),
        };
        if answer.results.len() < docs.len() {
            return Outcome::Retry(format!(
                "{dst}/{meta} stored {} of {} attachment record(s)",
                answer.results.len(),
                docs.len()
            ));
        }
        let failed: Vec<String> = answer
            .results
            .iter()
            .filter(|r| r.status != 200 && r.status != 201)
            .map(|r| {
                let m = r.error.as_ref().map(|e| e.message.as_str()).unwrap_or("");
                format!("{} at {}: {m}", r.status, r.ts.unwrap_or_default())
            })
            .collect();
        if failed.is_empty() {
            Outcome::Done
        } else {
            Outcome::Refused(format!(
                "{dst}/{meta} refused attachment record(s): {}",
                failed.join("; ")
            ))
        }
    }

    /// Removals at a ReductStore destination: the attachments' records updated with
    /// `remove=true` (batch protocol v1 `PATCH …/<entry>/$meta/batch`, as ReductStore's
    /// replication sends updates); a record not there (404) has nothing to remove.
    async fn reduct_remove(
        &self,
        dst: &Destination,
        dst_entry: &str,
        gone: &[(String, u64)],
    ) -> Outcome {
        let meta = format!("{dst_entry}/{META_SEGMENT}");
        let url = format!(
            "{}/api/v1/b/{}/{}/batch",
            dst.url.trim_end_matches('/'),
            seg(&dst.bucket),
            entry_seg(&meta)
        );
        let what = format!(
            "the removal of {} attachment(s) of {dst}/{meta}",
            gone.len()
        );
        let mut refused = Vec::new();
        for chunk in gone.chunks(REDUCT_BATCH_RECORDS) {
            let mut headers = reqwest::header::HeaderMap::new();
            for (name, ts) in chunk {
                let labels = Labels::from([
                    (ATTACHMENT_KEY_LABEL.to_string(), name.clone()),
                    (REMOVE_LABEL.to_string(), "true".to_string()),
                ]);
                let value = BatchHeaderV1::format(&tsblob_storage::RecordMeta {
                    ts: *ts,
                    size: 0,
                    content_type: String::new(),
                    labels,
                });
                let name_h = reqwest::header::HeaderName::from_bytes(
                    format!("x-reduct-time-{ts}").as_bytes(),
                );
                match (name_h, reqwest::header::HeaderValue::from_str(&value)) {
                    (Ok(n), Ok(v)) => drop(headers.insert(n, v)),
                    _ => refused.push(format!("{name:?} cannot go in a ReductStore header")),
                }
            }
            if headers.is_empty() {
                continue;
            }
            let mut req = self
                .http
                .patch(&url)
                .timeout(self.timeout(0))
                .headers(headers);
            if let Some(t) = &dst.token {
                req = req.bearer_auth(t);
            }
            let resp = match crate::batch_client::send_once(req, &what, dst).await {
                Ok(r) => r,
                Err(message) => return Outcome::Retry(message),
            };
            let status = resp.status();
            let one = |v: &reqwest::header::HeaderValue| {
                outbound::one_line(
                    &String::from_utf8_lossy(v.as_bytes()),
                    dst.bounds.message_max,
                )
            };
            let why = resp
                .headers()
                .get("x-reduct-error")
                .map(one)
                .unwrap_or_default();
            // Per record: `x-reduct-error-<ts>: <status>,<message>`; a 404 is done.
            for (k, v) in resp.headers() {
                if k.as_str().starts_with("x-reduct-error-") {
                    let text = one(v);
                    if !text.starts_with("404") {
                        refused.push(text);
                    }
                }
            }
            if let Err(e) = outbound::read_bounded(resp, dst.bounds.error_max).await {
                return Outcome::Retry(format!("{dst} answered {status} for {what}, but {e}"));
            }
            let message = format!("{dst} answered {} for {what}: {why}", status.as_u16());
            match status.as_u16() {
                // A missing bucket or entry holds nothing to remove.
                200..=299 | 404 => {}
                s if crate::batch_client::refused_for_good(s) => refused.push(message),
                _ => return Outcome::Retry(message),
            }
        }
        if refused.is_empty() {
            Outcome::Done
        } else {
            Outcome::Refused(format!("{what}: {}", refused.join("; ")))
        }
    }
}
