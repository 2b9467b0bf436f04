//! Replication tasks: records of a source bucket pushed to a bucket of another tsblob
//! (`docs/replication.md`).
//!
//! A task is a name, its settings ([`TaskSpec`], kept in `<data>/replications`, mode 0600,
//! with the destination token: it must be sent, so it is stored as given, like the admin
//! token in the server's environment, and never answered back) and a feed reader of the
//! engine (`storage/src/feed.rs`) whose durable position says what was delivered. A sender
//! ([`sender`]) per task reads the feed in bounded pages, sends them with the batch
//! framing (`if_exists=compare`: a record already at the destination with the same payload
//! counts as delivered) and acknowledges the page to the feed only then: at-least-once,
//! idempotent at the destination, and the write path never waits for it.

mod attachments;
mod error;
pub mod metrics;
pub mod sender;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tsblob_storage::Store;

pub use error::{Explain, ReplicationError};

/// Tasks a server keeps at most (each is a sender and a label value of the metrics).
pub const MAX_TASKS: usize = 64;

/// Enabled tasks send; paused ones keep their position (the feed keeps their backlog);
/// disabled ones keep nothing (no feed reader: writes meanwhile are never sent, as in
/// ReductStore) and hold no connection. A disabled task enabled again starts from the
/// writes after that.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Enabled,
    Paused,
    Disabled,
}

pub use crate::batch_client::{Compression, DstApi};

/// A task's settings as given (`PUT`) and stored (with the destination token).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    pub src_bucket: String,
    pub dst_url: String,
    pub dst_bucket: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_token: Option<String>,
    /// For an `https://` destination: PEM certificates to trust besides the Mozilla roots
    /// (its private CA, or its self-signed certificate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_ca: Option<String>,
    /// Entry names or globs to send (none: every entry); `!pattern` excludes the entries it
    /// matches (`["cam*", "!cam-debug"]`).
    #[serde(default)]
    pub entries: Vec<String>,
    /// A condition of the query language (docs/api.md), on the record's labels and timestamp.
    /// Its `$limit`, `$each_n` and `$each_t` count per entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub when: Option<serde_json::Value>,
    #[serde(default)]
    pub mode: Mode,
    /// Backfill records with `ts >= from` that existed before the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
    /// Prepended to entry names at the destination: `robot-1` sends `cam/front` to
    /// `robot-1/cam/front` (slashes around it are trimmed; empty: the same names).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dst_prefix: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub dst_api: DstApi,
    #[serde(default, skip_serializing_if = "is_default")]
    pub compression: Compression,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl TaskSpec {
    /// The entry's name at the destination (with `dst_prefix`).
    pub fn dst_entry(&self, entry: &str) -> String {
        let prefix = self.dst_prefix.trim_matches('/');
        if prefix.is_empty() {
            entry.to_string()
        } else {
            format!("{prefix}/{}", entry.trim_start_matches('/'))
        }
    }

    /// The entries to send: `entries` as an [`EntrySelection`](tsblob_storage::EntrySelection)
    /// (a `!pattern` excludes; a leading `/` of a pattern is ignored).
    pub fn entry_selection(&self) -> Result<tsblob_storage::EntrySelection, ReplicationError> {
        let patterns: Vec<String> = self
            .entries
            .iter()
            .map(|p| match p.strip_prefix('!') {
                Some(rest) => format!("!{}", rest.trim_start_matches('/')),
                None => p.trim_start_matches('/').to_string(),
            })
            .collect();
        Ok(tsblob_storage::EntrySelection::new(&patterns).map_err(tsblob_storage::Error::from)?)
    }
}

/// Where a backfill (`from`) stands: records up to `(ts, entry)` in the merged order are
/// delivered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Backfill {
    /// The next timestamp to look at (records at it in entries after `entry` are left).
    pub ts: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    pub done: bool,
}

/// Counters of a task, kept in the task file (written at most every few seconds, so a
/// crash may lose the last seconds of counts, never records).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Counters {
    /// Records the destination stored (201).
    pub sent_records: u64,
    /// Payload bytes of those.
    pub sent_bytes: u64,
    /// Records the destination already had with the same payload (a retried or
    /// backfilled copy): delivered, not stored again.
    pub existing_records: u64,
    /// Records the destination holds a different payload for at the same timestamp: kept
    /// there, never overwritten, not retried.
    pub conflicts: u64,
    /// Failed attempts (transport errors, error answers) and records the destination
    /// refused for good.
    pub errors: u64,
    /// Records the source lost (FIFO quota eviction, or a removal) before they were sent.
    pub evicted_before_sent: u64,
    /// Attachments written to the destination (`docs/replication.md`, attachments).
    #[serde(default)]
    pub attachments_sent: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_conflict: Option<Event>,
    /// When the destination last took records (stored or found there), µs: a `last_error`
    /// older than this is history, the task has delivered since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sent_at: Option<u64>,
}

impl Counters {
    /// Whether the last thing that happened to the task is an error (it has not delivered
    /// a record since its last error).
    pub fn failing(&self) -> bool {
        self.last_error
            .as_ref()
            .is_some_and(|e| self.last_sent_at.is_none_or(|sent| e.at > sent))
    }
}

/// Something that happened, and when (µs since the epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Event {
    pub message: String,
    pub at: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredTask {
    name: String,
    spec: TaskSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backfill: Option<Backfill>,
    #[serde(default)]
    counters: Counters,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TaskFile {
    tasks: Vec<StoredTask>,
}

/// What a sender is doing now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    #[default]
    Idle,
    Sending,
    /// Waiting before the next attempt after an error.
    Backoff,
    Paused,
    Disabled,
}

impl Phase {
    /// Before the sender runs.
    fn of(mode: Mode) -> Phase {
        match mode {
            Mode::Enabled => Phase::Idle,
            Mode::Paused => Phase::Paused,
            Mode::Disabled => Phase::Disabled,
        }
    }
}

/// A task's live state, shared with its sender.
pub struct Shared {
    pub counters: Counters,
    pub backfill: Option<Backfill>,
    pub phase: Phase,
    /// The counters changed since the task file was written.
    pub dirty: bool,
}

/// An error of a task's sender or attachment syncer: logged, counted in the task's series
/// `metrics` (the handle taken when the task started: a removed task's errors count
/// nowhere) and in its counters, and kept as its last error.
pub(crate) fn count_task_error(
    metrics: &metrics::TaskMetrics,
    task: &str,
    shared: &Mutex<Shared>,
    what: &str,
    message: String,
) {
    // One a record a destination refuses (400 for each): throttled, the counters and
    // `last_error` keep it all.
    crate::throttled!(warn, "replication_error", task = %task, "{what}: {message}");
    metrics.error();
    let mut s = shared.lock();
    s.counters.errors += 1;
    s.counters.last_error = Some(Event {
        message,
        at: now_us(),
    });
    s.dirty = true;
}

/// A change of the task file, applied in memory once the file is written.
enum Change {
    Put(Box<(StoredTask, Task)>),
    Remove(String),
}

struct Task {
    spec: TaskSpec,
    shared: Arc<Mutex<Shared>>,
    cancel: CancellationToken,
}

/// How senders behave (from `tsblob serve`'s flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// A request to a destination that makes no progress for this long fails (and is retried).
    pub timeout: Duration,
    /// The longest wait between attempts (the wait doubles from 200 ms up to it).
    pub max_backoff: Duration,
    /// How much of a destination's answers is read (`--outbound-*`).
    pub outbound: tsblob_proto::outbound::Bounds,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_secs(30),
            max_backoff: Duration::from_secs(10),
            outbound: Default::default(),
        }
    }
}

/// Every task of a server.
pub struct Replications {
    path: PathBuf,
    store: Store,
    tasks: Mutex<BTreeMap<String, Task>>,
    /// Serialises changes.
    changes: tokio::sync::Mutex<()>,
    /// Serialises the task file's writes, each from the snapshot to the rename: the HTTP
    /// handlers (under `changes`) and the senders save concurrently.
    saving: tokio::sync::Mutex<()>,
    metrics: metrics::ReplicationMetrics,
    options: Mutex<Options>,
    http: reqwest::Client,
    /// Bumped after every index commit (shared with live tails).
    commits: Arc<tokio::sync::watch::Sender<u64>>,
    /// The engine's attachment changes, for the tasks' attachment syncers.
    attachment_changes: tokio::sync::broadcast::Sender<attachments::Change>,
    explain: Explain,
}

pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Engine work on the blocking pool ([`crate::blocking::run`]), failing as a task does.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ReplicationError> + Send + 'static,
) -> Result<T, ReplicationError> {
    crate::blocking::run(f).await
}

fn invalid(message: String) -> ReplicationError {
    ReplicationError::Invalid(message)
}

/// Checks a task's settings (not the source bucket's existence: the engine does).
pub fn validate(name: &str, spec: &TaskSpec) -> Result<(), ReplicationError> {
    tsblob_storage::validate_bucket_name(name).map_err(|e| {
        invalid(format!(
            "task name: {e} (task names follow the bucket name rules)"
        ))
    })?;
    tsblob_storage::validate_bucket_name(&spec.src_bucket)?;
    tsblob_storage::validate_bucket_name(&spec.dst_bucket)?;
    // Printable ASCII, http(s), no query or fragment, and no credentials: those belong in
    // `dst_token`, which is stored 0600 and never answered (a URL's would be answered by
    // every GET of the task and logged with every error). The rules are `base_url::check`'s,
    // shared with links' `base_url`.
    crate::base_url::check(&spec.dst_url).map_err(|e| {
        let advice = match e {
            crate::base_url::BaseUrlError::Credentials => {
                "give the base URL alone and the destination's token as dst_token"
            }
            _ => "give the destination server's base URL, such as http://cloud:8686",
        };
        invalid(format!("dst_url {} {e}: {advice}", e.quoted(&spec.dst_url)))
    })?;
    // The token is sent as `Authorization: Bearer <token>`: one that cannot be a header
    // value would fail every send, so it is refused here.
    if let Some(token) = spec.dst_token.as_deref().filter(|t| !t.is_empty()) {
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                "dst_token has spaces, control or non-ASCII characters: give the destination's token as it was shown (tsb_...)".to_string(),
            ));
        }
    }
    if let Some(ca) = &spec.dst_ca {
        tsblob_proto::tls::parse_ca(ca.as_bytes()).map_err(|e| invalid(format!("dst_ca: {e}")))?;
    }
    spec.entry_selection()?;
    if spec.compression == Compression::Gzip && spec.dst_api != DstApi::Reductstore {
        return Err(invalid(
            "compression \"gzip\" is for ReductStore destinations (dst_api \"reductstore\"): a tsblob destination decodes zstd; use \"zstd\", \"auto\" or \"none\"".to_string(),
        ));
    }
    let prefix = spec.dst_prefix.trim_matches('/');
    if !prefix.is_empty() {
        tsblob_storage::validate_entry_name(&format!("{prefix}/x")).map_err(|e| {
            invalid(format!(
                "dst_prefix {:?}: {e} (it is the first part of the destination's entry names)",
                spec.dst_prefix
            ))
        })?;
    }
    if let Some(w) = &spec.when {
        crate::when::parse_text(&w.to_string())?;
    }
    Ok(())
}

/// The origin (scheme, host, port) of a destination URL, as text.
fn origin(url: &str) -> String {
    reqwest::Url::parse(url).map_or_else(|_| url.to_string(), |u| u.origin().ascii_serialization())
}

/// A stored `dst_token` and `dst_ca` were given for the destination's origin (scheme, host
/// and port) and are never sent to (or trusted for) another: an update that moves the
/// task to another origin must give them again (or `""` for none), else it is refused
/// with 422. Bug: an update with only a new `dst_url` sent the stored token, which the API
/// never shows, to that host. Refused rather than dropped: a task whose token vanished
/// would fail with 401 at its new destination, and the caller learns nothing at the PUT.
fn bind_to_origin(name: &str, old: &TaskSpec, new: &TaskSpec) -> Result<(), ReplicationError> {
    let (from, to) = (origin(&old.dst_url), origin(&new.dst_url));
    if from == to {
        return Ok(());
    }
    let mut missing = Vec::new();
    if old.dst_token.is_some() && new.dst_token.is_none() {
        missing.push("dst_token");
    }
    if old.dst_ca.is_some() && new.dst_ca.is_none() {
        missing.push("dst_ca");
    }
    if missing.is_empty() {
        return Ok(());
    }
    let what = missing.join(" and ");
    Err(invalid(format!(
        "task {name:?}: dst_url moves it from {from} to {to}, and the stored {what} was given for {from} only (it is never sent elsewhere): give {what} for the new destination in the same request (\"\" for none)"
    )))
}

impl Replications {
    /// Loads `<data>/replications` (absent: no task).
    pub fn load(
        store: Store,
        commits: Arc<tokio::sync::watch::Sender<u64>>,
        metrics: metrics::ReplicationMetrics,
        explain: Explain,
    ) -> anyhow::Result<Replications> {
        let path = store.path().join("replications");
        let file: TaskFile = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                anyhow::anyhow!(
                    "the replication task file {} does not parse ({e}): fix or remove it",
                    path.display()
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => TaskFile::default(),
            Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
        };
        let mut tasks = BTreeMap::new();
        for t in file.tasks {
            metrics.add(&t.name);
            let phase = Phase::of(t.spec.mode);
            tasks.insert(
                t.name.clone(),
                Task {
                    spec: t.spec,
                    shared: Arc::new(Mutex::new(Shared {
                        counters: t.counters,
                        backfill: t.backfill,
                        phase,
                        dirty: false,
                    })),
                    cancel: CancellationToken::new(),
                },
            );
        }
        let http = http_client(None).map_err(|e| anyhow::anyhow!(explain(e)))?;
        let (attachment_changes, _) = tokio::sync::broadcast::channel(attachments::CHANGES_QUEUE);
        let tx = attachment_changes.clone();
        let listening = store.on_attachments(Box::new(move |bucket, entry| {
            // No syncer listening is no error.
            let _ = tx.send((bucket.into(), entry.into()));
        }));
        if !listening {
            tracing::warn!("replication: the store already has an attachment listener: attachment changes are sent only at a task's start");
        }
        Ok(Replications {
            path,
            store,
            tasks: Mutex::new(tasks),
            changes: tokio::sync::Mutex::new(()),
            saving: tokio::sync::Mutex::new(()),
            metrics,
            options: Mutex::new(Options::default()),
            http,
            commits,
            attachment_changes,
            explain,
        })
    }

    /// How `e` reads in a task's status and the log ([`Explain`]).
    pub fn explain(&self, e: ReplicationError) -> String {
        (self.explain)(e)
    }

    pub fn set_options(&self, o: Options) {
        *self.options.lock() = o;
    }

    pub fn options(&self) -> Options {
        self.options.lock().clone()
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub(crate) fn commits(&self) -> tokio::sync::watch::Receiver<u64> {
        self.commits.subscribe()
    }

    fn attachment_changes(&self) -> tokio::sync::broadcast::Receiver<attachments::Change> {
        self.attachment_changes.subscribe()
    }

    /// Starts a sender for every task (at server start), after removing the feed readers
    /// of no task ([`Replications::prune_readers`]). A task whose feed reader is
    /// missing (the index was rebuilt or restored without it) is subscribed again with a
    /// backfill of everything it selects, paused or not: from now on its bucket's writes
    /// are in the feed.
    pub async fn start_all(self: &Arc<Self>) -> Result<(), ReplicationError> {
        if let Err(e) = self.prune_readers().await {
            tracing::warn!(
                "replication: cannot prune the feed readers of no task: {}",
                self.explain(e)
            );
        }
        type Start = (String, TaskSpec, Arc<Mutex<Shared>>, CancellationToken);
        let tasks: Vec<Start> = self
            .tasks
            .lock()
            .iter()
            .map(|(n, t)| {
                (
                    n.clone(),
                    t.spec.clone(),
                    t.shared.clone(),
                    t.cancel.clone(),
                )
            })
            .collect();
        let readers = {
            let store = self.store.clone();
            blocking(move || Ok(store.feed_readers()?))
                .await
                .unwrap_or_default()
        };
        let mut lost = false;
        let mut followed = false;
        for (name, mut spec, shared, cancel) in tasks {
            if spec.mode == Mode::Disabled {
                // No reader: nothing is kept for it (a left-over one was pruned above).
                sender::spawn(self.clone(), name, spec, shared, cancel);
                continue;
            }
            // A bucket rename moves the task's feed reader in the engine's own commit,
            // then the task file is written: a crash between the two leaves a task naming
            // the old bucket and a reader naming the new one. The task follows its reader.
            if let Some((_, bucket, _)) = readers.iter().find(|(r, b, _)| {
                *r == name && *b != spec.src_bucket && self.store.check_bucket(b).is_ok()
            }) {
                if self.store.check_bucket(&spec.src_bucket).is_err() {
                    tracing::warn!(task = %name, from = %spec.src_bucket, to = %bucket,
                        "replication: the source bucket was renamed; the task follows it");
                    spec.src_bucket = bucket.clone();
                    if let Some(t) = self.tasks.lock().get_mut(&name) {
                        t.spec = spec.clone();
                    }
                    followed = true;
                }
            }
            let (store, n, b) = (self.store.clone(), name.clone(), spec.src_bucket.clone());
            match blocking(move || Ok(store.feed_subscribe(&n, &b)?)).await {
                Ok((_, true)) => {
                    shared.lock().backfill = lost_reader(&name, spec.from);
                    lost = true;
                }
                Ok((_, false)) => {}
                // The source bucket is gone: the sender reports it (and retries).
                Err(e) => tracing::warn!(task = %name, "replication: {}", self.explain(e)),
            }
            sender::spawn(self.clone(), name, spec, shared, cancel);
        }
        if lost || followed {
            // The tasks run as repaired; the file is repaired again at the next start or
            // change. (Fatal before: after a crash on a full disk the server did not start,
            // and its API could not free the disk: kill -9 probe, R1.)
            if let Err(e) = self.save().await {
                tracing::warn!(
                    "replication: cannot save the tasks repaired at start ({}): they run as repaired, and the file is written again at the next change or start",
                    self.explain(e)
                );
            }
        }
        Ok(())
    }

    /// Bucket `old` was renamed to `new` (the engine moved the feed readers in the same
    /// commit): the tasks whose source it is now name `new`, keep their position, backfill
    /// and counters, and their senders start again. (Before, tasks kept the old name and
    /// failed until someone changed their `src_bucket`.)
    pub async fn bucket_renamed(self: &Arc<Self>, old: &str, new: &str) {
        let _guard = self.changes.lock().await;
        let mut restart = Vec::new();
        {
            let mut tasks = self.tasks.lock();
            for (name, t) in tasks.iter_mut() {
                if t.spec.src_bucket != old {
                    continue;
                }
                t.cancel.cancel();
                t.spec.src_bucket = new.to_string();
                t.cancel = CancellationToken::new();
                restart.push((
                    name.clone(),
                    t.spec.clone(),
                    t.shared.clone(),
                    t.cancel.clone(),
                ));
            }
        }
        if restart.is_empty() {
            return;
        }
        if let Err(e) = self.save().await {
            // The task file names the old bucket until the next save; at start the tasks
            // follow their readers (start_all).
            tracing::warn!(
                "replication: cannot save the tasks after the rename of bucket {old:?} to {new:?}: {}",
                self.explain(e)
            );
        }
        for (name, spec, shared, cancel) in restart {
            tracing::info!(task = %name, from = old, to = new, "replication task follows its renamed source bucket");
            sender::spawn(self.clone(), name, spec, shared, cancel);
        }
    }

    fn file(&self) -> TaskFile {
        let tasks = self.tasks.lock();
        TaskFile {
            tasks: tasks
                .iter()
                .map(|(name, t)| {
                    let mut s = t.shared.lock();
                    s.dirty = false;
                    StoredTask {
                        name: name.clone(),
                        spec: t.spec.clone(),
                        backfill: s.backfill.clone(),
                        counters: s.counters.clone(),
                    }
                })
                .collect(),
        }
    }

    /// Writes the task file (under `changes`, or from a sender). One save at a time, each
    /// taking its snapshot under `saving`, so the last file written holds the latest state
    /// (two saves at once also shared one temporary file: one of them failed with a 500).
    pub(crate) async fn save(&self) -> Result<(), ReplicationError> {
        self.save_with(None).await.map(|_| ())
    }

    /// Writes the task file with `change` applied and, once it is durable (written,
    /// fsynced, renamed), applies the change to the tasks in memory, under the same lock,
    /// so no other save can write the file without it meanwhile. Returns the task replaced
    /// or removed. On failure nothing in memory changed: a task exists only once its file
    /// says so (bug: a PUT whose save failed answered 500, yet the task was listed `idle`
    /// with no sender, and was gone after a restart).
    async fn save_with(&self, change: Option<Change>) -> Result<Option<Task>, ReplicationError> {
        let _saving = self.saving.lock().await;
        let mut file = self.file();
        match &change {
            Some(Change::Put(put)) => {
                let stored = &put.0;
                file.tasks.retain(|t| t.name != stored.name);
                file.tasks.push(stored.clone());
                file.tasks.sort_by(|a, b| a.name.cmp(&b.name));
            }
            Some(Change::Remove(name)) => file.tasks.retain(|t| t.name != *name),
            None => {}
        }
        let json = serde_json::to_vec_pretty(&file).map_err(|e| {
            ReplicationError::Internal(format!("cannot encode the replication tasks: {e}"))
        })?;
        let path = self.path.clone();
        blocking(move || {
            Ok(crate::private_file::write_state(
                "replication task file",
                &path,
                &json,
            )?)
        })
        .await?;
        let mut tasks = self.tasks.lock();
        Ok(match change {
            Some(Change::Put(put)) => {
                let (stored, task) = *put;
                tasks.insert(stored.name, task)
            }
            Some(Change::Remove(name)) => tasks.remove(&name),
            None => None,
        })
    }

    /// Subscribes task `name`'s feed reader to `bucket`: (position, created now).
    async fn subscribe(&self, name: &str, bucket: &str) -> Result<(u64, bool), ReplicationError> {
        let (store, n, b) = (self.store.clone(), name.to_string(), bucket.to_string());
        blocking(move || Ok(store.feed_subscribe(&n, &b)?)).await
    }

    /// Removes feed reader `name`; a failure is logged (the reader is pruned at the next
    /// start, [`Replications::prune_readers`]).
    async fn unsubscribe(&self, name: &str) {
        let (store, n) = (self.store.clone(), name.to_string());
        if let Err(e) = blocking(move || Ok(store.feed_unsubscribe(&n)?)).await {
            tracing::warn!(task = name, "replication: cannot remove the task's feed reader ({}); it is removed at the next start", self.explain(e));
        }
    }

    /// Removes the feed readers that belong to no task (at start, before the senders): a
    /// crash between a reader's subscription and the task file's write left one behind,
    /// and the bucket's feed was kept for it, never trimmed. Returns their names.
    pub async fn prune_readers(&self) -> Result<Vec<String>, ReplicationError> {
        let store = self.store.clone();
        let readers = blocking(move || Ok(store.feed_readers()?)).await?;
        let mut pruned = Vec::new();
        for (reader, bucket, _) in readers {
            let keep = self
                .tasks
                .lock()
                .get(&reader)
                .is_some_and(|t| t.spec.mode != Mode::Disabled);
            if keep {
                continue;
            }
            tracing::warn!(reader = %reader, bucket = %bucket,
                "replication: removing a change-feed reader that belongs to no task (left by an interrupted task change)");
            let (store, n) = (self.store.clone(), reader.clone());
            blocking(move || Ok(store.feed_unsubscribe(&n)?)).await?;
            pruned.push(reader);
        }
        Ok(pruned)
    }

    /// Creates or replaces task `name`; returns whether it was created. A replaced task
    /// keeps its position when its source bucket stays the same, and its destination token
    /// and CA when the new settings give none, unless the destination's origin changes
    /// (then they must be given again: [`bind_to_origin`]). The task exists once the task
    /// file holding it is durable; if that write fails, the feed reader's change is undone
    /// and a replaced task goes on as it was.
    pub async fn put(
        self: &Arc<Self>,
        name: &str,
        mut spec: TaskSpec,
    ) -> Result<bool, ReplicationError> {
        validate(name, &spec)?;
        let _guard = self.changes.lock().await;
        let old = self
            .tasks
            .lock()
            .get(name)
            .map(|t| (t.spec.clone(), t.shared.clone(), t.cancel.clone()));
        if old.is_none() && self.tasks.lock().len() >= MAX_TASKS {
            return Err(ReplicationError::TooManyTasks);
        }
        if let Some((o, _, _)) = &old {
            bind_to_origin(name, o, &spec)?;
            if spec.dst_token.is_none() {
                spec.dst_token = o.dst_token.clone();
            }
            if spec.dst_ca.is_none() {
                spec.dst_ca = o.dst_ca.clone();
            }
        }
        if spec.dst_token.as_deref() == Some("") {
            spec.dst_token = None;
        }
        if spec.dst_ca.as_deref() == Some("") {
            spec.dst_ca = None;
        }
        // The replaced task's sender stops first: it must not move the reader meanwhile.
        if let Some((_, _, cancel)) = &old {
            cancel.cancel();
        }
        // A source bucket that does not exist is a 404 here, before anything changed. A
        // disabled task has no reader (removed once its file is written).
        let disabled = spec.mode == Mode::Disabled;
        let was_disabled = old
            .as_ref()
            .is_some_and(|(o, _, _)| o.mode == Mode::Disabled);
        let subscribed = if disabled {
            let (store, b) = (self.store.clone(), spec.src_bucket.clone());
            blocking(move || Ok(store.check_bucket(&b)?))
                .await
                .map(|_| (0, false))
        } else {
            self.subscribe(name, &spec.src_bucket).await
        };
        let (_, created) = match subscribed {
            Ok(s) => s,
            Err(e) => {
                self.restart(name, old.as_ref(), false).await;
                return Err(e);
            }
        };
        let (counters, backfill) = match &old {
            Some((o, shared, _)) => {
                let s = shared.lock();
                let same = o.src_bucket == spec.src_bucket;
                let backfill = if same && created && !was_disabled {
                    // The reader was lost with the index: send everything again.
                    lost_reader(name, spec.from)
                } else if same && o.from == spec.from {
                    s.backfill.clone()
                } else {
                    spec.from.map(new_backfill)
                };
                (s.counters.clone(), backfill)
            }
            None => (Counters::default(), spec.from.map(new_backfill)),
        };
        let stored = StoredTask {
            name: name.to_string(),
            spec: spec.clone(),
            backfill: backfill.clone(),
            counters: counters.clone(),
        };
        let shared = Arc::new(Mutex::new(Shared {
            counters,
            backfill,
            phase: Phase::of(spec.mode),
            dirty: false,
        }));
        let cancel = CancellationToken::new();
        let task = Task {
            spec: spec.clone(),
            shared: shared.clone(),
            cancel: cancel.clone(),
        };
        let previous = match self
            .save_with(Some(Change::Put(Box::new((stored, task)))))
            .await
        {
            Ok(p) => p,
            Err(e) => {
                // Undo the reader's change: a new task's reader goes; a replaced task's
                // goes back to its bucket (with a backfill if it had moved: its position
                // went with the move).
                match &old {
                    None if created => self.unsubscribe(name).await,
                    Some(_) if created && was_disabled => self.unsubscribe(name).await,
                    None => {}
                    Some((o, _, _)) => {
                        let moved = o.src_bucket != spec.src_bucket && !disabled && !was_disabled;
                        self.restart(name, old.as_ref(), moved).await;
                    }
                }
                return Err(e);
            }
        };
        if disabled {
            self.unsubscribe(name).await;
        }
        self.metrics.add(name);
        tracing::info!(
            task = name,
            src = %spec.src_bucket,
            dst = %format!("{}/{}", spec.dst_url, spec.dst_bucket),
            mode = ?spec.mode,
            "replication task {}",
            if previous.is_some() { "replaced" } else { "created" }
        );
        sender::spawn(self.clone(), name.to_string(), spec, shared, cancel);
        Ok(previous.is_none())
    }

    /// A replaced task whose change failed goes on as it was: its sender (stopped for
    /// the change) starts again; `resubscribe`: its reader had moved to another bucket,
    /// so it is put back on its own, with a backfill of everything it selects.
    async fn restart(
        self: &Arc<Self>,
        name: &str,
        old: Option<&(TaskSpec, Arc<Mutex<Shared>>, CancellationToken)>,
        resubscribe: bool,
    ) {
        let Some((spec, shared, _)) = old else {
            return;
        };
        if resubscribe {
            match self.subscribe(name, &spec.src_bucket).await {
                Ok(_) => shared.lock().backfill = lost_reader(name, spec.from),
                Err(e) => tracing::warn!(task = name, "replication: {}", self.explain(e)),
            }
        }
        let cancel = CancellationToken::new();
        if let Some(t) = self.tasks.lock().get_mut(name) {
            t.cancel = cancel.clone();
        }
        if resubscribe {
            if let Err(e) = self.save().await {
                tracing::warn!(
                    task = name,
                    "replication: cannot save the backfill position: {}",
                    self.explain(e)
                );
            }
        }
        sender::spawn(
            self.clone(),
            name.to_string(),
            spec.clone(),
            shared.clone(),
            cancel,
        );
    }

    /// Removes task `name` (from the task file first: a crash after it leaves only a feed
    /// reader, pruned at the next start) and its feed reader.
    pub async fn remove(&self, name: &str) -> Result<(), ReplicationError> {
        let _guard = self.changes.lock().await;
        if !self.tasks.lock().contains_key(name) {
            return Err(not_found(name));
        }
        let Some(t) = self
            .save_with(Some(Change::Remove(name.to_string())))
            .await?
        else {
            return Err(not_found(name));
        };
        t.cancel.cancel();
        self.unsubscribe(name).await;
        self.metrics.remove(name);
        tracing::info!(task = name, "replication task removed");
        Ok(())
    }

    /// A task's settings without its destination token and CA (a `put` of them keeps
    /// the stored ones).
    pub fn spec(&self, name: &str) -> Result<TaskSpec, ReplicationError> {
        let tasks = self.tasks.lock();
        let t = tasks.get(name).ok_or_else(|| not_found(name))?;
        Ok(TaskSpec {
            dst_token: None,
            dst_ca: None,
            ..t.spec.clone()
        })
    }

    /// Whether a task of this name exists.
    pub fn exists(&self, name: &str) -> bool {
        self.tasks.lock().contains_key(name)
    }

    /// Names of the tasks.
    pub fn names(&self) -> Vec<String> {
        self.tasks.lock().keys().cloned().collect()
    }

    /// A task's settings (without its token) and status.
    pub async fn info(&self, name: &str) -> Result<TaskInfo, ReplicationError> {
        let (spec, shared) = {
            let tasks = self.tasks.lock();
            let t = tasks.get(name).ok_or_else(|| not_found(name))?;
            (t.spec.clone(), t.shared.clone())
        };
        let filter_spec = spec.clone();
        let (store, n) = (self.store.clone(), name.to_string());
        let (pending, position) = blocking(move || {
            let filter = sender::feed_filter(&filter_spec)?;
            let pending = store.feed_pending(&n, &filter)?;
            let position = store
                .feed_readers()?
                .into_iter()
                .find(|(r, _, _)| *r == n)
                .map_or(0, |(_, _, p)| p);
            Ok((pending, position))
        })
        .await?;
        let s = shared.lock();
        let now = now_us();
        Ok(TaskInfo {
            name: name.to_string(),
            settings: Settings::from_spec(&spec),
            status: Status {
                phase: s.phase,
                position,
                pending_records: pending.records,
                pending_bytes: pending.bytes,
                pending_is_lower_bound: pending.truncated,
                oldest_pending_age_s: pending
                    .oldest_written_us
                    .map(|w| now.saturating_sub(w) as f64 / 1e6),
                backfill: s.backfill.clone(),
                counters: s.counters.clone(),
            },
        })
    }
}

/// The HTTP client of senders: http and https (rustls, the Mozilla roots plus `ca`, a
/// task's `dst_ca`).
pub(crate) fn http_client(ca: Option<&str>) -> Result<reqwest::Client, ReplicationError> {
    tsblob_proto::tls::builder(ca.map(str::as_bytes))
        .map_err(|e| invalid(format!("dst_ca: {e}")))?
        .connect_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| ReplicationError::Internal(format!("cannot build the HTTP client: {e}")))
}

/// The backfill of a task whose feed reader was lost (nothing says what was delivered).
pub(crate) fn lost_reader(name: &str, from: Option<u64>) -> Option<Backfill> {
    let from = from.unwrap_or(0);
    tracing::warn!(task = name,
        "replication: the task's change-feed position is gone (the index was rebuilt or restored); re-sending everything it selects from {from}");
    Some(new_backfill(from))
}

pub(crate) fn new_backfill(from: u64) -> Backfill {
    Backfill {
        ts: from,
        entry: None,
        done: false,
    }
}

fn not_found(name: &str) -> ReplicationError {
    ReplicationError::NotFound(name.to_string())
}

/// A task's settings as answered: everything but the destination token.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Settings {
    pub src_bucket: String,
    pub dst_url: String,
    pub dst_bucket: String,
    /// A destination token is stored (its value is never answered).
    pub dst_token_set: bool,
    /// Certificates to trust for the destination are stored (`dst_ca`).
    pub dst_ca_set: bool,
    pub entries: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub when: Option<serde_json::Value>,
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
    #[serde(default)]
    pub dst_prefix: String,
    #[serde(default)]
    pub dst_api: DstApi,
    #[serde(default)]
    pub compression: Compression,
}

impl Settings {
    fn from_spec(s: &TaskSpec) -> Settings {
        Settings {
            src_bucket: s.src_bucket.clone(),
            dst_url: s.dst_url.clone(),
            dst_bucket: s.dst_bucket.clone(),
            dst_token_set: s.dst_token.is_some(),
            dst_ca_set: s.dst_ca.is_some(),
            entries: s.entries.clone(),
            when: s.when.clone(),
            mode: s.mode,
            from: s.from,
            dst_prefix: s.dst_prefix.clone(),
            dst_api: s.dst_api,
            compression: s.compression,
        }
    }
}

/// A task's progress.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Status {
    pub phase: Phase,
    /// The feed position delivered (durable).
    pub position: u64,
    /// Records written to the task's entries since its position (the condition is applied
    /// when they are sent, so this is an upper bound of what will be sent).
    pub pending_records: u64,
    /// Payload bytes of those that still exist.
    pub pending_bytes: u64,
    /// The backlog is over a million items: the pending figures count only the first.
    pub pending_is_lower_bound: bool,
    /// Seconds since the oldest pending record was written (the replication lag).
    pub oldest_pending_age_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill: Option<Backfill>,
    #[serde(flatten)]
    pub counters: Counters,
}

/// A task: its name, settings and status.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskInfo {
    pub name: String,
    pub settings: Settings,
    pub status: Status,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A task file of an earlier version (no `dst_prefix`, `dst_api`, `compression`) loads
    /// with the defaults, and a task that uses none of them is written as before (an
    /// earlier version, whose settings refuse unknown fields, still reads it).
    #[test]
    fn task_files_stay_compatible_both_ways() {
        let old = r#"{"tasks": [{"name": "t", "spec": {"src_bucket": "a", "dst_url": "http://h:1",
            "dst_bucket": "b", "entries": ["x/*"], "mode": "paused"}, "counters": {"sent_records": 1,
            "sent_bytes": 2, "existing_records": 0, "conflicts": 0, "errors": 0, "evicted_before_sent": 0}}]}"#;
        let f: TaskFile = serde_json::from_str(old).unwrap();
        let spec = &f.tasks[0].spec;
        assert_eq!(
            (spec.dst_prefix.as_str(), spec.dst_api, spec.compression),
            ("", DstApi::Tsblob, Compression::Auto)
        );
        let written = serde_json::to_value(spec).unwrap();
        for k in ["dst_prefix", "dst_api", "compression"] {
            assert!(written.get(k).is_none(), "{k} written: {written}");
        }
        let mut with = spec.clone();
        with.mode = Mode::Disabled;
        with.dst_prefix = "r".into();
        with.dst_api = DstApi::Reductstore;
        with.compression = Compression::None;
        let back: TaskSpec = serde_json::from_value(serde_json::to_value(&with).unwrap()).unwrap();
        assert_eq!(back, with);
    }

    /// Bug (hostile probe of 2026-11-29): `dst_url` took tabs, line breaks and `\`, which
    /// the URL parser drops or reads as `/`: the URL called was not the one shown, and the
    /// line breaks went raw into the log with every error.
    #[test]
    fn a_dst_url_with_a_line_break_forged_log_lines() {
        let spec = |url: &str| -> TaskSpec {
            serde_json::from_value(serde_json::json!(
                {"src_bucket": "a", "dst_url": url, "dst_bucket": "b"}
            ))
            .unwrap()
        };
        for bad in [
            "http://h:1/a b\r\nX-Inj: 1",
            "http://h:1/a\tb",
            "http://h:1\\@evil:2",
            "http://h:1/ ",
        ] {
            let e = validate("t", &spec(bad)).unwrap_err().to_string();
            assert!(e.contains("printable ASCII"), "{bad:?}: {e}");
        }
        validate("t", &spec("https://cloud.example:8686/prefix")).unwrap();
    }

    #[test]
    fn dst_prefix_and_exclusions() {
        let mut s: TaskSpec = serde_json::from_str(
            r#"{"src_bucket": "a", "dst_url": "http://h:1", "dst_bucket": "b", "entries": ["cam*", "!cam-debug"]}"#,
        )
        .unwrap();
        assert_eq!(s.dst_entry("cam/x"), "cam/x");
        s.dst_prefix = "/robot-1/".into();
        assert_eq!(s.dst_entry("cam/x"), "robot-1/cam/x");
        let sel = s.entry_selection().unwrap();
        assert!(sel.selects("cam") && sel.selects("cam-1") && !sel.selects("cam-debug"));
        assert!(!sel.selects("lidar"));
        assert!(validate("t", &s).is_ok());
        s.dst_prefix = "a//b".into();
        assert!(validate("t", &s).is_err());
    }
}
