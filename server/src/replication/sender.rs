//! A task's sender: reads its feed (and first its backfill, if any) in bounded pages,
//! delivers each page with batch writes to the destination, and acknowledges the page to
//! the feed only once every record of it is resolved (stored, found with the same payload,
//! a conflict, refused for good, or gone at the source). Errors are retried with a doubling
//! backoff; nothing here ever blocks a writer (the feed is appended by the commits).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tsblob_storage::{FeedFilter, FeedLimits, FeedPage, FeedPayload, Query, RecordMeta, Store};

use super::metrics::TaskMetrics;
use super::{
    blocking, now_us, Backfill, Event, Mode, Phase, ReplicationError, Replications, Shared,
    TaskSpec,
};
use crate::batch_client::{post_batch, post_single, Destination, OutRecord, Single};
use tsblob_proto::ErrorCode;

/// A page holds at most this many records ...
const PAGE_RECORDS: usize = 2000;
/// ... and stops after the record that brings its payloads, content types and labels to
/// this many bytes (`RecordMeta::weight`; so a sender holds about this much, plus one
/// record, plus its compressed copy).
const PAGE_BYTES: u64 = 8 << 20;
/// The first wait after an error (it doubles up to `Options::max_backoff`).
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Payloads larger than this are not read into a page: they are streamed from the
/// source's block, each in a single-record write of its own.
const INLINE_MAX: u64 = 4 << 20;

/// A record to deliver.
#[derive(Debug)]
enum Out {
    /// In memory: sent in a batch.
    Whole(OutRecord),
    /// Too large for a batch (ours or the destination's): sent alone, streamed from the
    /// source's block.
    Large(String, RecordMeta),
}

impl Out {
    fn entry(&self) -> &str {
        match self {
            Out::Whole(r) => &r.entry,
            Out::Large(e, _) => e,
        }
    }
}

/// The task's filter over the feed: its entries (less the `!` ones) and condition.
pub fn feed_filter(spec: &TaskSpec) -> Result<FeedFilter, ReplicationError> {
    let when = condition(spec)?;
    Ok(FeedFilter::new(spec.entry_selection()?, when.as_ref()))
}

/// The task's entry filter without its condition (checked when the task was stored).
fn entry_filter(spec: &TaskSpec) -> Result<FeedFilter, ReplicationError> {
    Ok(FeedFilter::new(spec.entry_selection()?, None))
}

fn condition(spec: &TaskSpec) -> Result<Option<tsblob_storage::Condition>, ReplicationError> {
    spec.when
        .as_ref()
        .map(|w| crate::when::parse_text(&w.to_string()))
        .transpose()
        .map_err(ReplicationError::from)
}

pub fn spawn(
    repl: Arc<Replications>,
    name: String,
    spec: TaskSpec,
    shared: Arc<Mutex<Shared>>,
    cancel: CancellationToken,
) {
    // Taken now, while the task exists (the callers spawn after `add`): inert once it is
    // removed, and from the start if it already was.
    let metrics = repl.metrics.task(&name);
    tokio::spawn(async move {
        // A task trusting its own CA has its own client; the others share the server's.
        let http = match spec.dst_ca.as_deref() {
            None => Ok(repl.http().clone()),
            Some(ca) => super::http_client(Some(ca)),
        };
        let http = match http {
            Ok(h) => h,
            Err(e) => {
                // Checked at PUT: only a task file edited by hand gets here.
                tracing::warn!("replication: {}", repl.explain(e));
                return;
            }
        };
        let s = Sender {
            repl,
            name,
            spec,
            shared,
            cancel,
            metrics,
            single_from: AtomicU64::new(u64::MAX),
            reached: tokio::sync::RwLock::new(HashSet::new()),
            http,
        };
        Arc::new(s).run().await;
    });
}

struct Sender {
    repl: Arc<Replications>,
    name: String,
    spec: TaskSpec,
    shared: Arc<Mutex<Shared>>,
    cancel: CancellationToken,
    /// The task's series (they stay gone once it is removed, whatever this sender counts).
    metrics: TaskMetrics,
    /// Records of at least this many bytes go alone: the smallest the destination refused
    /// in a batch (`record_too_large`, over its `--max-batch-record`).
    single_from: AtomicU64,
    /// The entries this sender has stored a record in at the destination (so they exist
    /// there). A delivery that writes to an entry not in it runs alone (write guard):
    /// ReductStore 1.21.5 acknowledges two concurrent first writes into a new entry and
    /// keeps only one of them (`docs/reliability.md`, "Replication to a new entry"), and
    /// with two pages in flight the first records of a new entry raced. Deliveries into
    /// entries in it run side by side (read guard). At most one name per entry of the
    /// source's bucket.
    reached: tokio::sync::RwLock<HashSet<String>>,
    http: reqwest::Client,
}

/// Pages a sender has in flight at most (read and being sent; a third is read only once
/// the oldest is acknowledged): the memory bound is two pages.
const MAX_IN_FLIGHT: usize = 2;

/// A feed page being sent by its own task.
struct InFlight {
    /// The feed position to acknowledge once it is delivered.
    end: u64,
    /// Records of it gone at the source (counted at the acknowledgement).
    gone: u64,
    more: bool,
    handle: tokio::task::JoinHandle<Result<(), Cancelled>>,
}

/// A feed read under way: the page (or the engine's error) and the filter back.
type ReadHandle = tokio::task::JoinHandle<
    Result<(tsblob_storage::Result<FeedPage>, FeedFilter), ReplicationError>,
>;

/// What became of a record sent alone.
enum Alone {
    /// The destination's entry holds it (stored, there already, or in conflict with one there).
    Landed,
    /// Resolved without a record at the destination (refused for good, gone at the source).
    Resolved,
    /// Not resolved: try again.
    Retry,
}

/// The task was cancelled (removed, replaced) while it waited.
struct Cancelled;

/// The sender ends: cancelled, or its filter no longer builds.
struct Ended;

impl From<Cancelled> for Ended {
    fn from(_: Cancelled) -> Ended {
        Ended
    }
}

/// The state of a sender's loop (`Sender::run`), kept across its turns.
struct Run {
    commits: tokio::sync::watch::Receiver<u64>,
    backoff: Duration,
    last_save: Instant,
    last_pending: Instant,
    /// The durable feed position; `None` until read (again after an error reading it).
    pos: Option<u64>,
    /// `None` while a failed read took it with it (built again when needed).
    filter: Option<FeedFilter>,
    /// Pages read and being sent, oldest first.
    in_flight: std::collections::VecDeque<InFlight>,
    /// Where the next read starts.
    read_at: Option<u64>,
}

impl Sender {
    fn store(&self) -> Store {
        self.repl.store().clone()
    }

    fn phase(&self, p: Phase) {
        self.shared.lock().phase = p;
    }

    fn error(&self, message: String) {
        super::count_task_error(
            &self.metrics,
            &self.name,
            &self.shared,
            "replication",
            message,
        );
    }

    async fn run(self: Arc<Self>) {
        let Some(filter) = self.start() else {
            return;
        };
        match entry_filter(&self.spec) {
            Ok(entries) => {
                let syncer = super::attachments::Syncer {
                    repl: self.repl.clone(),
                    name: self.name.clone(),
                    spec: self.spec.clone(),
                    shared: self.shared.clone(),
                    cancel: self.cancel.clone(),
                    http: self.http.clone(),
                    entries,
                    metrics: self.metrics.clone(),
                };
                tokio::spawn(syncer.run());
            }
            Err(e) => self.error(format!(
                "the task's entries do not parse: {}",
                self.repl.explain(e)
            )),
        }
        let mut run = Run {
            commits: self.repl.commits(),
            backoff: FIRST_BACKOFF,
            last_save: Instant::now(),
            last_pending: Instant::now() - Duration::from_secs(10),
            pos: None,
            filter: Some(filter),
            in_flight: Default::default(),
            read_at: None,
        };
        while !self.cancel.is_cancelled() {
            if self.turn(&mut run).await.is_err() {
                return;
            }
        }
    }

    /// The task's feed filter, or `None` when the task does not run (paused or
    /// disabled, or a condition that does not parse: reported).
    fn start(&self) -> Option<FeedFilter> {
        match self.spec.mode {
            Mode::Enabled => {}
            Mode::Paused => {
                self.phase(Phase::Paused);
                tracing::info!(task = %self.name, "replication task paused");
                return None;
            }
            Mode::Disabled => {
                self.phase(Phase::Disabled);
                tracing::info!(task = %self.name, "replication task disabled");
                return None;
            }
        }
        let filter = match feed_filter(&self.spec) {
            Ok(f) => f,
            Err(e) => {
                self.error(format!(
                    "the task's condition does not parse: {}",
                    self.repl.explain(e)
                ));
                return None;
            }
        };
        tracing::info!(task = %self.name, "replication sender started");
        Some(filter)
    }

    /// One turn of the sender's loop: where the feed stands, then a backfill step, or a
    /// page read into the pipeline, then a wait for a commit or the oldest page in flight
    /// acknowledged. `Err` ends the task.
    async fn turn(self: &Arc<Self>, run: &mut Run) -> Result<(), Ended> {
        let Some(p) = self.position(run).await? else {
            return Ok(());
        };
        let backfill = self.shared.lock().backfill.clone().filter(|b| !b.done);
        if let Some(bf) = backfill {
            let f = self.take_filter(run)?;
            let step = self.backfill_step(bf, &f, &mut run.backoff).await;
            run.filter = Some(f);
            return Ok(step?);
        }
        let Some(fresh) = self.fill(run, p).await? else {
            return Ok(());
        };
        if fresh && run.in_flight.len() < MAX_IN_FLIGHT {
            return Ok(()); // read the next page at once
        }
        let Some(oldest) = run.in_flight.pop_front() else {
            return self.idle(run).await;
        };
        self.acknowledge(run, oldest).await
    }

    /// Where the feed stands (read again after an error reading it); `None` to go round
    /// again (the reader gone and subscribed again, or an error waited out).
    async fn position(&self, run: &mut Run) -> Result<Option<u64>, Ended> {
        if let Some(p) = run.pos {
            return Ok(Some(p));
        }
        let (store, n) = (self.store(), self.name.clone());
        match blocking(move || {
            Ok(store
                .feed_readers()?
                .into_iter()
                .find(|(r, _, _)| *r == n)
                .map(|(_, _, p)| p))
        })
        .await
        {
            Ok(Some(p)) => {
                run.pos = Some(p);
                Ok(Some(p))
            }
            Ok(None) if self.cancel.is_cancelled() => Err(Ended), // removed
            Ok(None) => {
                // The reader is gone with the index (rebuilt, or restored from
                // a copy without it): nothing says what was delivered, so
                // everything the task selects is sent again (what the
                // destination has counts as existing).
                self.resubscribe(&mut run.backoff).await?;
                Ok(None)
            }
            Err(e) => {
                self.error(format!(
                    "cannot read the feed position: {}",
                    self.repl.explain(e)
                ));
                self.pause(&mut run.backoff).await?;
                Ok(None)
            }
        }
    }

    /// The feed filter, built again when a failed read took it with it.
    fn take_filter(&self, run: &mut Run) -> Result<FeedFilter, Ended> {
        match run.filter.take() {
            Some(f) => Ok(f),
            None => feed_filter(&self.spec).map_err(|_| Ended),
        }
    }

    /// Fills the pipeline: reads the page after the last one read (while the pages in
    /// flight are sent by their own tasks), up to MAX_IN_FLIGHT pages, and starts its
    /// delivery. `Some(fresh)`: whether a new page was read; `None` to go round again
    /// (a failed read waited out).
    async fn fill(self: &Arc<Self>, run: &mut Run, p: u64) -> Result<Option<bool>, Ended> {
        let at = *run.read_at.get_or_insert(p);
        if run.in_flight.len() >= MAX_IN_FLIGHT {
            return Ok(Some(false));
        }
        // Mark the commits seen before reading: one that lands after the read
        // wakes us.
        run.commits.borrow_and_update();
        let f = self.take_filter(run)?;
        let page = match self.spawn_read(at, f).await {
            Ok(Ok((page, f))) => {
                run.filter = Some(f);
                page
            }
            failed => {
                let why = match failed {
                    Ok(Err(e)) => self.repl.explain(e),
                    Err(e) => e.to_string(),
                    Ok(Ok(_)) => String::new(),
                };
                // The filter went with the failed read: it is built again.
                self.error(format!("cannot read the change feed: {why}"));
                self.pause(&mut run.backoff).await?;
                return Ok(None);
            }
        };
        let page = match page {
            Ok(p) => p,
            Err(e) => {
                self.error(format!("cannot read the change feed: {e}"));
                // Start again from the durable position (what was in flight is
                // sent again: the destination finds it existing).
                for f in run.in_flight.drain(..) {
                    f.handle.abort();
                }
                run.pos = None;
                run.read_at = None;
                self.pause(&mut run.backoff).await?;
                return Ok(None);
            }
        };
        if page.end == at {
            return Ok(Some(false));
        }
        run.read_at = Some(page.end);
        let (outs, gone) = self.outs(page.records);
        let me = self.clone();
        let handle = tokio::spawn(async move {
            let mut backoff = FIRST_BACKOFF;
            if outs.is_empty() {
                return Ok(());
            }
            me.deliver(outs, &mut backoff).await
        });
        run.in_flight.push_back(InFlight {
            end: page.end,
            gone,
            more: page.more,
            handle,
        });
        Ok(Some(true))
    }

    /// Nothing new: waits for a commit (or a second, for the figures).
    async fn idle(&self, run: &mut Run) -> Result<(), Ended> {
        self.phase(Phase::Idle);
        self.update_pending(&mut run.last_pending, false).await;
        self.save_now_and_then(&mut run.last_save).await;
        tokio::select! {
            _ = self.cancel.cancelled() => return Err(Ended),
            _ = run.commits.changed() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        Ok(())
    }

    /// The oldest page in flight: once delivered, the position moves past it (pages
    /// are acknowledged in feed order, only once every record of them is resolved).
    async fn acknowledge(&self, run: &mut Run, oldest: InFlight) -> Result<(), Ended> {
        match oldest.handle.await {
            Ok(Ok(())) => {}
            _ => {
                // Cancelled (the task was removed or replaced).
                for f in run.in_flight.drain(..) {
                    f.handle.abort();
                }
                return Err(Ended);
            }
        }
        let (store, n, end) = (self.store(), self.name.clone(), oldest.end);
        loop {
            let (store, n) = (store.clone(), n.clone());
            match blocking(move || Ok(store.feed_ack(&n, end)?)).await {
                Ok(()) => break,
                Err(e) => {
                    self.error(format!(
                        "cannot store the feed position: {}",
                        self.repl.explain(e)
                    ));
                    if self.pause(&mut run.backoff).await.is_err() {
                        for f in run.in_flight.drain(..) {
                            f.handle.abort();
                        }
                        return Err(Ended);
                    }
                }
            }
        }
        run.pos = Some(end);
        // Counted once the page is acknowledged (a page read again is not counted twice).
        self.evicted(oldest.gone);
        self.update_pending(
            &mut run.last_pending,
            !oldest.more && run.in_flight.is_empty(),
        )
        .await;
        self.save_now_and_then(&mut run.last_save).await;
        Ok(())
    }

    /// The records of a feed page to send, and how many were gone at the source.
    fn outs(&self, records: Vec<tsblob_storage::FeedRecord>) -> (Vec<Out>, u64) {
        let mut outs = Vec::with_capacity(records.len());
        let mut gone = 0u64;
        for r in records {
            match r.payload {
                FeedPayload::Whole(rec) => outs.push(Out::Whole(OutRecord {
                    entry: r.entry,
                    ts: r.ts,
                    content_type: rec.meta.content_type,
                    labels: rec.meta.labels,
                    data: rec.data,
                })),
                FeedPayload::Large(meta) => outs.push(Out::Large(r.entry, meta)),
                FeedPayload::Gone => {
                    gone += 1;
                    // (one line a record: throttled, the counters keep the count)
                    crate::throttled!(warn, "replication_evicted", task = %self.name, entry = %r.entry, ts = r.ts,
                        "replication: the record was evicted (or removed) at the source before it was sent");
                }
            }
        }
        (outs, gone)
    }

    /// Reads the feed page after `after` on the blocking pool (the filter travels with it:
    /// its aggregation state goes on from page to page).
    fn spawn_read(&self, after: u64, mut filter: FeedFilter) -> ReadHandle {
        let (store, n) = (self.store(), self.name.clone());
        tokio::spawn(blocking(move || {
            let limits = FeedLimits {
                records: PAGE_RECORDS,
                bytes: PAGE_BYTES,
                inline: INLINE_MAX,
            };
            let page = store.feed_read(&n, after, &mut filter, limits);
            Ok((page, filter))
        }))
    }

    /// Subscribes the task again after its feed reader was lost, with a backfill of
    /// everything it selects (from its `from`, or the beginning).
    async fn resubscribe(&self, backoff: &mut Duration) -> Result<(), Cancelled> {
        let (store, n, b) = (
            self.store(),
            self.name.clone(),
            self.spec.src_bucket.clone(),
        );
        if let Err(e) = blocking(move || Ok(store.feed_subscribe(&n, &b)?)).await {
            self.error(format!(
                "cannot subscribe to the change feed again: {}",
                self.repl.explain(e)
            ));
            return self.pause(backoff).await;
        }
        self.shared.lock().backfill = super::lost_reader(&self.name, self.spec.from);
        if let Err(e) = self.repl.save().await {
            self.error(format!(
                "cannot save the backfill position: {}",
                self.repl.explain(e)
            ));
        }
        Ok(())
    }

    /// Sends one page of the backfill and records how far it got.
    async fn backfill_step(
        &self,
        bf: Backfill,
        filter: &FeedFilter,
        backoff: &mut Duration,
    ) -> Result<(), Cancelled> {
        let store = self.store();
        let spec = self.spec.clone();
        let entries: Vec<String> = match store.list_entries(&spec.src_bucket) {
            Ok(list) => list
                .into_iter()
                .map(|e| e.name)
                .filter(|n| filter.wants_entry(n))
                .collect(),
            Err(e) => {
                self.error(format!("backfill: {e}"));
                return self.pause(backoff).await;
            }
        };
        let read = blocking(move || read_backfill(&store, &spec, &entries, bf)).await;
        let (outs, next) = match read {
            Ok(r) => r,
            Err(e) => {
                self.error(format!("backfill: {}", self.repl.explain(e)));
                return self.pause(backoff).await;
            }
        };
        if !outs.is_empty() {
            self.deliver(outs, backoff).await?;
        }
        if next.done {
            tracing::info!(task = %self.name, "replication backfill done");
        }
        self.shared.lock().backfill = Some(next);
        if let Err(e) = self.repl.save().await {
            self.error(format!(
                "cannot save the backfill position: {}",
                self.repl.explain(e)
            ));
        }
        Ok(())
    }

    /// Counts records the source lost before they were sent.
    fn evicted(&self, gone: u64) {
        if gone == 0 {
            return;
        }
        self.metrics.evicted_before_sent(gone);
        let mut s = self.shared.lock();
        s.counters.evicted_before_sent += gone;
        s.dirty = true;
    }

    async fn pause(&self, backoff: &mut Duration) -> Result<(), Cancelled> {
        self.phase(Phase::Backoff);
        let wait = *backoff;
        *backoff = (*backoff * 2).min(self.repl.options().max_backoff);
        tokio::select! {
            _ = self.cancel.cancelled() => Err(Cancelled),
            _ = tokio::time::sleep(wait) => Ok(()),
        }
    }

    /// Delivers every record (retrying what is not resolved) or is cancelled.
    async fn deliver(&self, mut todo: Vec<Out>, backoff: &mut Duration) -> Result<(), Cancelled> {
        let (mut last_pending, mut first) = (Instant::now(), true);
        loop {
            self.phase(Phase::Sending);
            let left = tokio::select! {
                _ = self.cancel.cancelled() => return Err(Cancelled),
                left = self.attempt(todo) => left,
            };
            if left.is_empty() {
                *backoff = FIRST_BACKOFF;
                return Ok(());
            }
            // The figures while the destination fails: the loop that refreshes them when
            // idle or acknowledging waits for this delivery, so the pending and lag gauges
            // stayed 0 while a destination was down (hostile probe of 2026-11-29), and an
            // alert on the lag never fired.
            self.update_pending(&mut last_pending, first).await;
            first = false;
            self.pause(backoff).await?;
            todo = left;
        }
    }

    /// One attempt: a batch per entry. Returns the records to try again. Runs alone when
    /// it writes to an entry not yet reached at the destination (see `Sender::reached`).
    async fn attempt(&self, todo: Vec<Out>) -> Vec<Out> {
        let mut by_entry: BTreeMap<String, Vec<Out>> = BTreeMap::new();
        for o in todo {
            by_entry.entry(o.entry().to_string()).or_default().push(o);
        }
        {
            let reached = self.reached.read().await;
            if by_entry.keys().all(|e| reached.contains(e)) {
                let mut left = Vec::new();
                for (entry, recs) in by_entry {
                    left.extend(self.send_entry(&entry, recs).await.0);
                }
                return left;
            }
        }
        let mut reached = self.reached.write().await;
        let mut left = Vec::new();
        for (entry, recs) in by_entry {
            let (rest, stored) = self.send_entry(&entry, recs).await;
            left.extend(rest);
            if stored {
                reached.insert(entry);
            }
        }
        left
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

    /// Sends the records of one entry: those in memory in batches, the large ones (and any
    /// the destination finds too large for a batch) alone. Returns the records to retry
    /// and whether the destination's entry now holds a record (one was stored, found
    /// there, or in conflict with one there).
    async fn send_entry(&self, entry: &str, recs: Vec<Out>) -> (Vec<Out>, bool) {
        let single_from = self.single_from.load(Ordering::Relaxed);
        let (mut batch, mut alone) = (Vec::new(), Vec::new());
        for o in recs {
            match o {
                Out::Whole(r) if r.data.len() as u64 >= single_from => {
                    alone.push(Out::Large(entry.to_string(), meta_of(r)))
                }
                Out::Whole(r) => batch.push(r),
                large => alone.push(large),
            }
        }
        let mut left = Vec::new();
        let mut stored = false;
        while !batch.is_empty() {
            let (retry, rest, too_large, landed) = self.send_batch(entry, batch).await;
            stored |= landed;
            left.extend(retry.into_iter().map(Out::Whole));
            if let Some(r) = too_large {
                self.single_from
                    .fetch_min(r.data.len() as u64, Ordering::Relaxed);
                alone.push(Out::Large(entry.to_string(), meta_of(r)));
            }
            batch = rest;
        }
        for o in alone {
            if let Out::Large(_, meta) = &o {
                match self.send_alone(entry, meta).await {
                    Alone::Retry => left.push(o),
                    Alone::Landed => stored = true,
                    Alone::Resolved => {}
                }
            }
        }
        (left, stored)
    }

    /// One batch. Returns the records to retry, those after a record the destination
    /// found too large (to send next, without it), that record, and whether the
    /// destination's entry holds a record now (stored, existing or in conflict).
    async fn send_batch(
        &self,
        entry: &str,
        recs: Vec<OutRecord>,
    ) -> (Vec<OutRecord>, Vec<OutRecord>, Option<OutRecord>, bool) {
        let dst = self.destination();
        let timeout = self.repl.options().timeout;
        let to = self.spec.dst_entry(entry);
        let (recs, answer) = post_batch(&self.http, &dst, &to, recs, timeout).await;
        let answer = match answer {
            Ok(a) => a,
            Err(message) => {
                self.error(message);
                return (recs, Vec::new(), None, false);
            }
        };
        let dst = format!("{dst}/{to}");
        let mut left = Vec::new();
        let (count, answered) = (recs.len(), answer.results.len());
        let stopped = answer.error.as_ref().map(|e| e.message.clone());
        let mut results = answer.results.into_iter();
        let (mut sent, mut sent_bytes, mut existing, mut conflicts) = (0u64, 0u64, 0u64, 0u64);
        let mut recs = recs.into_iter();
        let mut too_large = None;
        for r in recs.by_ref() {
            let Some(res) = results.next() else {
                left.push(r);
                continue;
            };
            let why = || {
                res.error
                    .as_ref()
                    .map_or_else(String::new, |e| e.message.clone())
            };
            match res.status {
                201 => {
                    sent += 1;
                    sent_bytes += r.data.len() as u64;
                }
                200 => existing += 1,
                409 => {
                    conflicts += 1;
                    self.conflict(res.error.as_ref().map_or_else(
                        || format!("a different record is stored at {} in {dst}", r.ts),
                        |e| e.message.clone(),
                    ))
                }
                413 if res
                    .error
                    .as_ref()
                    .is_some_and(|e| e.code == ErrorCode::RecordTooLarge.as_str()) =>
                {
                    tracing::info!(task = %self.name,
                        "replication: record {} ({} bytes) is over {dst}'s batch limit: it goes alone", r.ts, r.data.len());
                    too_large = Some(r);
                    break;
                }
                s if crate::batch_client::refused_for_good(s) => self.error(format!(
                    "{dst} refused record {} for good ({s}): {}; it is skipped",
                    r.ts,
                    why()
                )),
                _ => {
                    if left.is_empty() {
                        self.error(format!(
                            "{dst} could not store record {} ({}): {}",
                            r.ts,
                            res.status,
                            why()
                        ));
                    }
                    left.push(r);
                }
            }
        }
        // Records the answer said nothing of are sent again, and that is an error to show:
        // a destination answering 200 with no results held the task in backoff for ever
        // with no error, no log line and `errors 0` (hostile probe of 2026-11-29).
        if answered < count && too_large.is_none() {
            self.error(match stopped {
                Some(why) => format!(
                    "{dst} stopped the batch after {answered} of {count} records: {why}; the rest are sent again"
                ),
                None => format!(
                    "{dst} answered {answered} results for a batch of {count} records; the rest are sent again"
                ),
            });
        }
        self.count_sent(sent, sent_bytes, existing);
        let landed = sent + existing + conflicts > 0;
        (left, recs.collect(), too_large, landed)
    }

    /// Sends one record alone, its payload streamed from the source's block.
    async fn send_alone(&self, entry: &str, meta: &RecordMeta) -> Alone {
        let (store, bucket, e, ts) = (
            self.store(),
            self.spec.src_bucket.clone(),
            entry.to_string(),
            meta.ts,
        );
        let reader = match blocking(move || Ok(store.open_record(&bucket, &e, Some(ts))?)).await {
            Ok(r) => r,
            // The record (or its entry, or bucket) is gone at the source.
            Err(ReplicationError::Storage(tsblob_storage::Error::NotFound(_))) => {
                crate::throttled!(warn, "replication_evicted", task = %self.name, entry, ts,
                    "replication: the record was evicted (or removed) at the source before it was sent");
                self.evicted(1);
                return Alone::Resolved;
            }
            Err(e) => {
                self.error(format!(
                    "cannot read record {ts} of {entry}: {}",
                    self.repl.explain(e)
                ));
                return Alone::Retry;
            }
        };
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(crate::record_stream::stream_record(reader, tx, || Ok(())));
        let body = reqwest::Body::wrap_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
        let dst = self.destination();
        let timeout = self.repl.options().timeout;
        let to = self.spec.dst_entry(entry);
        match post_single(&self.http, &dst, &to, meta, body, timeout).await {
            Single::Stored => self.count_sent(1, meta.size, 0),
            Single::Existing => self.count_sent(0, 0, 1),
            Single::Conflict(message) => self.conflict(message),
            Single::Refused(message) => {
                self.error(format!("{message}; it is skipped"));
                return Alone::Resolved;
            }
            Single::Retry(message) => {
                self.error(message);
                return Alone::Retry;
            }
        }
        Alone::Landed
    }

    fn conflict(&self, message: String) {
        // One a record a destination refuses: throttled (a destination answering every
        // record 409 wrote a line a record); the counters and `last_conflict` keep it all.
        crate::throttled!(warn, "replication_conflict", task = %self.name, "replication conflict: {message}");
        self.metrics.conflict();
        let mut s = self.shared.lock();
        s.counters.conflicts += 1;
        s.counters.last_conflict = Some(Event {
            message,
            at: now_us(),
        });
        s.dirty = true;
    }

    fn count_sent(&self, sent: u64, sent_bytes: u64, existing: u64) {
        self.metrics.sent(sent + existing, sent_bytes);
        let mut s = self.shared.lock();
        s.counters.sent_records += sent;
        s.counters.sent_bytes += sent_bytes;
        s.counters.existing_records += existing;
        if sent + existing > 0 {
            s.counters.last_sent_at = Some(now_us());
        }
        s.dirty = true;
    }

    async fn update_pending(&self, last: &mut Instant, force: bool) {
        if !force && last.elapsed() < Duration::from_secs(1) {
            return;
        }
        *last = Instant::now();
        let (store, n, spec) = (self.store(), self.name.clone(), self.spec.clone());
        let pending = blocking(move || {
            let filter = entry_filter(&spec)?;
            Ok(store.feed_pending(&n, &filter)?)
        })
        .await;
        if let Ok(p) = pending {
            let lag = p
                .oldest_written_us
                .map_or(0, |w| now_us().saturating_sub(w) / 1_000_000);
            self.metrics.pending(p.records as i64, lag as i64);
        }
    }

    async fn save_now_and_then(&self, last: &mut Instant) {
        if last.elapsed() < Duration::from_secs(3) || !self.shared.lock().dirty {
            return;
        }
        *last = Instant::now();
        if let Err(e) = self.repl.save().await {
            tracing::warn!(task = %self.name, "cannot save the replication counters: {}", self.repl.explain(e));
        }
    }
}

/// The next page of a backfill: records of `entries` with `ts >= bf.ts` (after `bf.entry`
/// at `bf.ts`), in timestamp order, bounded like a feed page.
fn read_backfill(
    store: &Store,
    spec: &TaskSpec,
    entries: &[String],
    bf: Backfill,
) -> Result<(Vec<Out>, Backfill), ReplicationError> {
    let mut next = bf.clone();
    let mut outs = Vec::new();
    if entries.is_empty() {
        next.done = true;
        return Ok((outs, next));
    }
    let q = Query {
        start: Some(bf.ts),
        ..Query::default()
    };
    // The condition per entry, as the feed's (its aggregation state starts again with
    // each page).
    let mut filter = feed_filter(spec)?;
    let mut bytes = 0u64;
    for item in store.query_entries(&spec.src_bucket, entries, &q)? {
        let item = item?;
        let (ts, entry) = (item.meta.ts, item.entry().to_string());
        if ts == bf.ts && bf.entry.as_ref().is_some_and(|e| entry <= *e) {
            continue;
        }
        if !filter.wants_in(&entry, ts, &item.meta.labels) {
            next.ts = ts;
            next.entry = Some(entry);
            continue;
        }
        bytes += item.meta.weight();
        if item.meta.size > INLINE_MAX {
            outs.push(Out::Large(entry.clone(), item.meta.clone()));
        } else {
            let data = match item.data() {
                Ok(d) => d,
                Err(tsblob_storage::Error::NotFound(_)) => continue, // removed meanwhile
                Err(e) => return Err(e.into()),
            };
            outs.push(Out::Whole(OutRecord {
                entry: entry.clone(),
                ts,
                content_type: item.meta.content_type.clone(),
                labels: item.meta.labels.clone(),
                data,
            }));
        }
        next.ts = ts;
        next.entry = Some(entry);
        if outs.len() >= PAGE_RECORDS || bytes >= PAGE_BYTES {
            return Ok((outs, next));
        }
    }
    next.done = true;
    Ok((outs, next))
}

/// The metadata of a record in memory (sent alone, its payload streamed from the source).
fn meta_of(r: OutRecord) -> RecordMeta {
    RecordMeta {
        ts: r.ts,
        size: r.data.len() as u64,
        content_type: r.content_type,
        labels: r.labels,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tsblob_storage::{BucketSettings, StoreOptions, WriteMeta};

    /// Bug: a backfill page counted payload bytes only: 2,000 records of one byte with
    /// 60 KB of labels each were one page (120 MB), and the source held 310 MB more while
    /// it replicated 3,000 of them. Labels count now: a page ends near `PAGE_BYTES`.
    #[test]
    fn a_backfill_page_counts_labels() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        store.create_bucket("a", BucketSettings::default()).unwrap();
        for ts in 1..=300u64 {
            let mut m = WriteMeta::at(ts);
            for i in 0..15 {
                m.labels
                    .insert(format!("l{i}"), format!("{ts}-{}", "x".repeat(3990)));
            }
            store.write("a", "e", &m, b"x").unwrap();
        }
        let spec: TaskSpec = serde_json::from_str(
            r#"{"src_bucket": "a", "dst_url": "http://h:1", "dst_bucket": "b"}"#,
        )
        .unwrap();
        let bf = Backfill {
            ts: 0,
            entry: None,
            done: false,
        };
        let (outs, next) = read_backfill(&store, &spec, &["e".to_string()], bf).unwrap();
        let held: usize = outs
            .iter()
            .map(|o| match o {
                Out::Whole(r) => r.labels.iter().map(|(k, v)| k.len() + v.len()).sum(),
                Out::Large(..) => 0,
            })
            .sum();
        assert!(!next.done);
        assert_eq!(
            outs.len(),
            140,
            "8 MiB of 60 KB records, and the one past it"
        );
        assert!(held < (PAGE_BYTES as usize) + 61_000, "{held}");
    }
}
