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

pub mod metrics;
pub mod sender;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tsblob_storage::Store;

use crate::http::AppError;

/// Tasks a server keeps at most (each is a sender and a label value of the metrics).
pub const MAX_TASKS: usize = 64;

/// Enabled tasks send; paused ones keep their position (the feed keeps their backlog).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Enabled,
    Paused,
}

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
    #[serde(default)]
    pub entries: Vec<String>,
    /// A condition of the query language (docs/api.md), on the record's labels and timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub when: Option<serde_json::Value>,
    #[serde(default)]
    pub mode: Mode,
    /// Backfill records with `ts >= from` that existed before the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_conflict: Option<Event>,
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
}

impl Phase {
    /// Before the sender runs.
    fn of(mode: Mode) -> Phase {
        match mode {
            Mode::Enabled => Phase::Idle,
            Mode::Paused => Phase::Paused,
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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_secs(30),
            max_backoff: Duration::from_secs(10),
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
    pub metrics: metrics::ReplicationMetrics,
    options: Mutex<Options>,
    http: reqwest::Client,
    /// Bumped after every index commit (shared with live tails).
    commits: Arc<tokio::sync::watch::Sender<u64>>,
}

pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn invalid(message: String) -> AppError {
    AppError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_replication",
        message,
    )
}

/// Checks a task's settings (not the source bucket's existence: the engine does).
pub fn validate(name: &str, spec: &TaskSpec) -> Result<(), AppError> {
    tsblob_storage::validate_bucket_name(name).map_err(|e| {
        invalid(format!(
            "task name: {e} (task names follow the bucket name rules)"
        ))
    })?;
    tsblob_storage::validate_bucket_name(&spec.src_bucket)?;
    tsblob_storage::validate_bucket_name(&spec.dst_bucket)?;
    let url = reqwest::Url::parse(&spec.dst_url).map_err(|e| {
        invalid(format!(
            "dst_url {:?} is not a URL ({e}): give the destination server's base URL, such as http://cloud:8686",
            spec.dst_url
        ))
    })?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(invalid(format!(
            "dst_url {:?}: give an http:// or https:// URL",
            spec.dst_url
        )));
    }
    // Credentials belong in `dst_token`, which is stored 0600 and never answered: a URL's
    // are answered by every GET of the task and written to the log with every error.
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "dst_url carries credentials (user:password@): give the base URL alone and the destination's token as dst_token".to_string(),
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(
            "dst_url has a query or fragment (?... or #...): give the destination server's base URL alone, such as http://cloud:8686, and its token as dst_token".to_string(),
        ));
    }
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
    for p in &spec.entries {
        tsblob_storage::EntryPattern::parse(p).map_err(tsblob_storage::Error::from)?;
    }
    if let Some(w) = &spec.when {
        crate::http::when::parse_text(&w.to_string())?;
    }
    Ok(())
}

impl Replications {
    /// Loads `<data>/replications` (absent: no task).
    pub fn load(
        store: Store,
        commits: Arc<tokio::sync::watch::Sender<u64>>,
        metrics: metrics::ReplicationMetrics,
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
        let http = http_client(None).map_err(|e| anyhow::anyhow!(e.message))?;
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
        })
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

    /// Starts a sender for every task (at server start). A task whose feed reader is
    /// missing (the index was rebuilt or restored without it) is subscribed again with a
    /// backfill of everything it selects, paused or not: from now on its bucket's writes
    /// are in the feed.
    pub async fn start_all(self: &Arc<Self>) -> Result<(), AppError> {
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
        let mut lost = false;
        for (name, spec, shared, cancel) in tasks {
            let (store, n, b) = (self.store.clone(), name.clone(), spec.src_bucket.clone());
            match crate::http::errors::blocking(move || Ok(store.feed_subscribe(&n, &b)?)).await {
                Ok((_, true)) => {
                    shared.lock().backfill = lost_reader(&name, spec.from);
                    lost = true;
                }
                Ok((_, false)) => {}
                // The source bucket is gone: the sender reports it (and retries).
                Err(e) => tracing::warn!(task = %name, "replication: {}", e.message),
            }
            sender::spawn(self.clone(), name, spec, shared, cancel);
        }
        if lost {
            self.save().await?;
        }
        Ok(())
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
    pub(crate) async fn save(&self) -> Result<(), AppError> {
        let _saving = self.saving.lock().await;
        let json = serde_json::to_vec_pretty(&self.file())
            .map_err(|e| AppError::internal(format!("cannot encode the replication tasks: {e}")))?;
        let path = self.path.clone();
        crate::http::errors::blocking(move || {
            crate::private_file::write_atomic(&path, &json).map_err(|e| {
                AppError::internal(format!(
                    "cannot write the replication task file {}: {e}",
                    path.display()
                ))
            })
        })
        .await
    }

    /// Creates or replaces task `name`; returns whether it was created. A replaced task
    /// keeps its position when its source bucket stays the same, and its destination token
    /// when the new settings give none.
    pub async fn put(self: &Arc<Self>, name: &str, mut spec: TaskSpec) -> Result<bool, AppError> {
        validate(name, &spec)?;
        let _guard = self.changes.lock().await;
        let old = self
            .tasks
            .lock()
            .get(name)
            .map(|t| (t.spec.clone(), t.shared.clone()));
        if old.is_none() && self.tasks.lock().len() >= MAX_TASKS {
            return Err(AppError::new(
                StatusCode::CONFLICT,
                "too_many_tasks",
                format!("this server already has {MAX_TASKS} replication tasks, its limit: remove one first"),
            ));
        }
        if let Some((o, _)) = &old {
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
        let (store, n, b) = (
            self.store.clone(),
            name.to_string(),
            spec.src_bucket.clone(),
        );
        let (_, created) =
            crate::http::errors::blocking(move || Ok(store.feed_subscribe(&n, &b)?)).await?;
        let (counters, backfill) = match &old {
            Some((o, shared)) => {
                let s = shared.lock();
                let same = o.src_bucket == spec.src_bucket;
                let backfill = if same && created {
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
        let shared = Arc::new(Mutex::new(Shared {
            counters,
            backfill,
            phase: Phase::of(spec.mode),
            dirty: false,
        }));
        let cancel = CancellationToken::new();
        let previous = self.tasks.lock().insert(
            name.to_string(),
            Task {
                spec: spec.clone(),
                shared: shared.clone(),
                cancel: cancel.clone(),
            },
        );
        if let Some(p) = &previous {
            p.cancel.cancel();
        }
        self.metrics.add(name);
        self.save().await?;
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

    /// Removes task `name` and its feed reader.
    pub async fn remove(&self, name: &str) -> Result<(), AppError> {
        let _guard = self.changes.lock().await;
        let Some(t) = self.tasks.lock().remove(name) else {
            return Err(not_found(name));
        };
        t.cancel.cancel();
        let (store, n) = (self.store.clone(), name.to_string());
        crate::http::errors::blocking(move || Ok(store.feed_unsubscribe(&n)?)).await?;
        self.metrics.remove(name);
        self.save().await?;
        tracing::info!(task = name, "replication task removed");
        Ok(())
    }

    /// Names of the tasks.
    pub fn names(&self) -> Vec<String> {
        self.tasks.lock().keys().cloned().collect()
    }

    /// A task's settings (without its token) and status.
    pub async fn info(&self, name: &str) -> Result<TaskInfo, AppError> {
        let (spec, shared) = {
            let tasks = self.tasks.lock();
            let t = tasks.get(name).ok_or_else(|| not_found(name))?;
            (t.spec.clone(), t.shared.clone())
        };
        let filter_spec = spec.clone();
        let (store, n) = (self.store.clone(), name.to_string());
        let (pending, position) = crate::http::errors::blocking(move || {
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
pub(crate) fn http_client(ca: Option<&str>) -> Result<reqwest::Client, AppError> {
    tsblob_proto::tls::builder(ca.map(str::as_bytes))
        .map_err(|e| invalid(format!("dst_ca: {e}")))?
        .connect_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| AppError::internal(format!("cannot build the HTTP client: {e}")))
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

fn not_found(name: &str) -> AppError {
    AppError::new(
        StatusCode::NOT_FOUND,
        "replication_not_found",
        format!("there is no replication task {name:?}: list them with GET /api/v1/replications"),
    )
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
