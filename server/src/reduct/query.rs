//! Query sessions, as ReductStore runs them: `q` opens one and answers its id; each read by
//! id answers the next records as one batch (per-record headers, payloads back to back), the
//! last one with `x-reduct-last: true`, then 204; a session unread for its TTL is dropped.
//! A continuous session never ends: a read with nothing new answers 204 and the client
//! polls again. `REMOVE` queries remove what they match and answer the count.
//!
//! Two encodings of a batch: protocol v1 (`GET /b/{bucket}/{entry}/batch?q=ID`, headers
//! `x-reduct-time-<ts>`) and v2 (`GET /io/{bucket}/read` with `x-reduct-query-id`, headers
//! `x-reduct-<entry index>-<ts delta>`, several entries).
//!
//! Bounds: `--reductstore-max-queries` sessions at once (429 past it); a batch holds at most
//! [`BATCH_RECORDS`] records, [`BATCH_BYTES`] bytes of payloads and labels (one larger
//! record goes alone) and 512,000 bytes of labels, taken from the server's memory budget (`--memory-budget`; 503 `busy` when it is
//! spent) until the answer is sent; a session's position is the engine's `QueryIter`, which
//! holds one page of index records per entry. A read walks at most [`SCAN_PAGES`] pages
//! without a match or [`SCAN_TIME`], then answers (an empty, non-last batch when it found
//! nothing).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tsblob_proto::ErrorCode;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use tsblob_storage::{QueryItem, QueryIter, RecordMeta, Windows};

use super::wire::{encode_entry, label_delta_v2, BatchHeaderV1, LAST_HEADER, TIME_PREFIX};
use super::Ctx;
use crate::http::auth::Caller;
use crate::http::errors::blocking;
use crate::http::records::Target;
use crate::http::AppError;

/// Most records in one read's batch.
pub const BATCH_RECORDS: usize = 64;
/// Most bytes of payloads, content types and labels in one read's batch (a record larger
/// than this goes alone).
pub const BATCH_BYTES: u64 = 8 << 20;
/// ... and at most this many bytes of content types and labels (the records' headers), as
/// ReductStore's `RS_IO_BATCH_MAX_METADATA_SIZE` default: one record's labels may be 64 KiB,
/// and 64 such records made 4 MB of headers, outside the memory budget (payloads only
/// were counted).
const BATCH_METADATA: u64 = 512_000;
/// Index pages (of 256 records) one read walks without a match before it answers what it
/// has, and the longest it walks: a condition matching nothing over a large bucket held a
/// blocking thread per read for the whole scan. With nothing found the answer is an empty
/// batch, not the last (`x-reduct-last: false`), as ReductStore answers when its batch
/// timeout passes; its clients read on.
const SCAN_PAGES: u32 = 64;
const SCAN_TIME: Duration = Duration::from_millis(500);

/// A session's TTL when the query gives none (seconds), and the longest one honoured.
const DEFAULT_TTL: u64 = 60;
const MAX_TTL: u64 = 24 * 3600;

/// Bounds of the query sessions.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Sessions open at once (`--reductstore-max-queries`).
    pub max: usize,
    /// Of them, one token's (`--reductstore-max-queries-per-token`).
    pub per_token: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max: 1024,
            per_token: 256,
        }
    }
}

/// Where a session is: the engine's iterator, a record taken from it but not yet sent, an
/// error to answer on the next read, the next batch when it was made ahead.
struct Cursor {
    iter: Source,
    pending: Option<QueryItem>,
    failed: Option<AppError>,
    done: bool,
    /// The batch after the one answered last, made while the client read that one
    /// ([`prefetch`]): the answer of the next read.
    ahead: Option<Result<Batch, AppError>>,
    /// Mapped windows of the blocks read, one per entry (the latest [`ENTRY_WINDOWS`]
    /// entries): payloads are sliced from them, not copied (as the native query does).
    windows: EntryWindows,
}

impl Cursor {
    fn new(iter: Source) -> Cursor {
        Cursor {
            iter,
            pending: None,
            failed: None,
            done: false,
            ahead: None,
            windows: EntryWindows::default(),
        }
    }

    /// Between reads: the engine's pages of index records and the mapped block windows are
    /// given back, the place kept (an idle session held a page of 256 records per entry,
    /// ~350 MB for 2,000 entries, until its TTL: hostile probe of 2026-11-28).
    fn rest(&mut self) {
        if let Source::Engine(iter) = &mut self.iter {
            iter.rest();
        }
        self.windows = EntryWindows::default();
    }
}

/// The entries whose block windows a session keeps mapped at once (each up to
/// `tsblob_storage::WINDOW_MAX` of address space); a query of more entries maps again.
const ENTRY_WINDOWS: usize = 8;

/// A session's block windows, per entry ([`tsblob_storage::QueryIter::windowed`]): records
/// of entries taking turns (merged by time) would otherwise map a new window at each turn.
#[derive(Default)]
struct EntryWindows(Vec<(String, Windows)>);

impl EntryWindows {
    fn of(&mut self, entry: &str) -> &mut Windows {
        let i = match self.0.iter().position(|(e, _)| e == entry) {
            Some(i) => i,
            None => {
                if self.0.len() >= ENTRY_WINDOWS {
                    self.0.remove(0);
                }
                self.0.push((entry.to_string(), Windows::default()));
                self.0.len() - 1
            }
        };
        &mut self.0[i].1
    }
}

/// What a session reads: the engine's records, or the attachments a query of `<entry>/$meta`
/// entries selected, as records (`attachments.rs`).
enum Source {
    Engine(QueryIter),
    Attachments(std::collections::VecDeque<Out>),
}

struct Session {
    bucket: String,
    /// The one entry the session reads, when it reads one: only it is read through the v1
    /// route (`/b/{bucket}/{entry}/batch?q=`), whose answers do not name their entry.
    entry: Option<String>,
    /// The token hash of the caller that opened it: only it may read it.
    token: Option<String>,
    only_metadata: bool,
    continuous: bool,
    ttl: Duration,
    expires: Instant,
    /// Opened or last read: past a cap, the least recently used session gives way.
    used: Instant,
    /// Locked while a read, or the making of the next batch ahead, has it.
    cursor: Arc<tokio::sync::Mutex<Cursor>>,
    /// A read of the session is under way (set by reads only, [`take_cursor`]): a second
    /// read at the same time is refused; a read waits for the batch being made ahead.
    reading: Arc<AtomicBool>,
}

/// A session read to its end: a read after its last batch answers 204, as ReductStore's
/// (it was 404 "not open": a client reading until 204 failed), until its TTL.
struct Ended {
    bucket: String,
    token: Option<String>,
    expires: Instant,
}

/// The most ended sessions remembered (the oldest ids are forgotten first past it): ~400
/// bytes each at most, a read after the last batch comes right after it.
const MAX_ENDED: usize = 4096;

/// The open query sessions.
pub struct Sessions {
    limits: SessionLimits,
    next: AtomicU64,
    map: Mutex<HashMap<u64, Session>>,
    /// Sessions read to their end, by id (never locked with `map`).
    ended: Mutex<std::collections::BTreeMap<u64, Ended>>,
}

impl Sessions {
    pub fn new(limits: SessionLimits) -> Sessions {
        Sessions {
            limits,
            next: AtomicU64::new(1),
            map: Mutex::new(HashMap::new()),
            ended: Mutex::new(std::collections::BTreeMap::new()),
        }
    }

    /// Closes session `id`, read to its end: remembered as ended until its TTL.
    fn end(&self, id: u64) {
        let Some(s) = self.lock().remove(&id) else {
            return;
        };
        let now = Instant::now();
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        if ended.len() >= MAX_ENDED {
            ended.retain(|_, e| e.expires > now);
        }
        while ended.len() >= MAX_ENDED {
            ended.pop_first();
        }
        ended.insert(
            id,
            Ended {
                bucket: s.bucket,
                token: s.token,
                expires: now + s.ttl,
            },
        );
    }

    /// Whether session `id` of this bucket and caller was read to its end (within its TTL).
    fn was_ended(&self, id: u64, bucket: &str, token: &Option<String>) -> bool {
        let ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        ended
            .get(&id)
            .is_some_and(|e| e.bucket == bucket && &e.token == token && e.expires > Instant::now())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Session>> {
        // A panic while holding the map leaves plain data: keep serving.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops the sessions past their TTL (not one a read has now).
    fn sweep(map: &mut HashMap<u64, Session>, now: Instant) {
        map.retain(|_, s| s.cursor.try_lock().is_err() || s.expires > now);
    }

    /// Makes room for one more session of `token` at the caps: past its per-token cap, its
    /// own least recently used session is closed; past the server's, the least recently
    /// used of the token holding the most. Sessions being read stay. `Err`: the cap that
    /// could not be made room in, and how many it holds. (Refusing instead let a few tokens
    /// opening sessions with a 24 h TTL, or one client of a tokenless server, lock every
    /// other client out of queries for a day: hostile probe of 2026-11-28.)
    fn make_room(
        map: &mut HashMap<u64, Session>,
        limits: SessionLimits,
        token: &Option<String>,
    ) -> Result<(), (&'static str, usize)> {
        let mine = map.values().filter(|s| &s.token == token).count();
        let holder = if mine >= limits.per_token {
            Some(token.clone())
        } else if map.len() >= limits.max {
            let mut counts: HashMap<&Option<String>, usize> = HashMap::new();
            for s in map.values() {
                *counts.entry(&s.token).or_default() += 1;
            }
            counts
                .into_iter()
                .max_by_key(|(_, n)| *n)
                .map(|(t, _)| t.clone())
        } else {
            return Ok(());
        };
        let lru = map
            .iter()
            .filter(|(_, s)| Some(&s.token) == holder.as_ref() && s.cursor.try_lock().is_ok())
            .min_by_key(|(_, s)| s.used)
            .map(|(id, _)| *id);
        match lru {
            Some(id) => {
                map.remove(&id);
                Ok(())
            }
            None if mine >= limits.per_token => Err(("--reductstore-max-queries-per-token", mine)),
            None => Err(("--reductstore-max-queries", map.len())),
        }
    }

    /// Open sessions (for tests and metrics).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// ReductStore's query document (`QueryEntry`); `null` fields are absent.
#[derive(Debug, Default, Deserialize)]
pub struct QueryJson {
    pub query_type: Option<String>,
    pub entries: Option<Vec<String>>,
    pub start: Option<u64>,
    pub stop: Option<u64>,
    pub ttl: Option<u64>,
    pub only_metadata: Option<bool>,
    pub continuous: Option<bool>,
    pub when: Option<crate::http::when::Json>,
    pub strict: Option<bool>,
    pub ext: Option<serde_json::Value>,
    pub limit: Option<u64>,
    pub each_n: Option<serde_json::Value>,
    pub each_s: Option<serde_json::Value>,
    pub include: Option<serde_json::Value>,
    pub exclude: Option<serde_json::Value>,
}

fn unsupported(what: &str) -> AppError {
    AppError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::Unsupported,
        format!("{what} is not supported by tsblob's ReductStore API (see docs/reductstore.md)"),
    )
}

impl QueryJson {
    /// Nothing but the query type: ReductStore refuses such a `REMOVE` query (422).
    fn is_bare(&self) -> bool {
        let QueryJson {
            query_type: _,
            entries,
            start,
            stop,
            ttl,
            only_metadata,
            continuous,
            when,
            strict,
            ext,
            limit,
            each_n,
            each_s,
            include,
            exclude,
        } = self;
        entries.is_none()
            && start.is_none()
            && stop.is_none()
            && ttl.is_none()
            && only_metadata.is_none()
            && continuous.is_none()
            && when.is_none()
            && strict.is_none()
            && ext.is_none()
            && limit.is_none()
            && each_n.is_none()
            && each_s.is_none()
            && include.is_none()
            && exclude.is_none()
    }

    pub(crate) fn engine_query(&self) -> Result<tsblob_storage::Query, AppError> {
        if let Some(ext) = self.ext.as_ref().filter(|v| !v.is_null()) {
            // ReductStore names the first extension it has not loaded (reduct-py's tests
            // match "Unknown extension"); tsblob loads none.
            return Err(match ext.as_object().and_then(|o| o.keys().next()) {
                Some(name) => AppError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ErrorCode::Unsupported,
                    format!("Unknown extension '{name}': tsblob's ReductStore API runs no extensions (see docs/reductstore.md)"),
                ),
                None => unsupported("`ext` (extensions)"),
            });
        }
        for (name, v) in [
            ("each_n", &self.each_n),
            ("each_s", &self.each_s),
            ("include", &self.include),
            ("exclude", &self.exclude),
        ] {
            if v.as_ref().is_some_and(|v| !v.is_null()) {
                return Err(unsupported(&format!(
                    "the deprecated `{name}` (use `when`: $each_n, $each_t, label conditions)"
                )));
            }
        }
        if let (Some(a), Some(b)) = (self.start, self.stop) {
            if a > b {
                return Err(AppError::invalid_timestamp(format!(
                    "start={a} is after stop={b}"
                )));
            }
        }
        Ok(tsblob_storage::Query {
            start: self.start,
            stop: self.stop,
            limit: self.limit,
            when: self
                .when
                .as_ref()
                .map(crate::http::when::parse)
                .transpose()?,
            strict: self.strict.unwrap_or(false),
            ..Default::default()
        })
    }
}

/// The query of a v1 `GET .../q?start=&stop=&ttl=&continuous=&limit=&when=`.
fn query_from_params(query: Option<&str>) -> Result<QueryJson, AppError> {
    use crate::http::params::{parse_bool, parse_ts, parse_u64, unknown};
    let mut q = QueryJson::default();
    for (k, v) in crate::http::params::pairs(query) {
        match k.as_str() {
            "start" => q.start = Some(parse_ts(&k, &v)?),
            "stop" => q.stop = Some(parse_ts(&k, &v)?),
            "ttl" => q.ttl = Some(parse_u64(&k, &v)?),
            "limit" => q.limit = Some(parse_u64(&k, &v)?),
            "continuous" => q.continuous = Some(parse_bool(&k, &v)?),
            "strict" => q.strict = Some(parse_bool(&k, &v)?),
            "when" => {
                q.when = Some(
                    serde_json::from_str(&v)
                        .map_err(|e| AppError::bad_request(format!("when: not valid JSON: {e}")))?,
                )
            }
            "q" => {}
            // Each named as given (an `each_s` was refused as "the deprecated `each_n`").
            _ if k.starts_with("include-") => q.include = Some(serde_json::Value::Bool(true)),
            _ if k.starts_with("exclude-") => q.exclude = Some(serde_json::Value::Bool(true)),
            "each_n" => q.each_n = Some(serde_json::Value::Bool(true)),
            "each_s" => q.each_s = Some(serde_json::Value::Bool(true)),
            _ => {
                return Err(unknown(
                    &k,
                    "start, stop, ttl, limit, continuous, strict and when",
                ))
            }
        }
    }
    Ok(q)
}

async fn query_body(t: &Target, req: Request) -> Result<QueryJson, AppError> {
    crate::http::body::json(req.into_body(), 1 << 20, &t.state.limits, |e| {
        AppError::bad_request(format!(
            "the query must be ReductStore's JSON query document ({e}): e.g. {{\"query_type\": \"QUERY\", \"start\": 0}}"
        ))
    })
    .await
}

/// `GET|POST /api/v1/b/{bucket}/{entry}/q`: opens a session on one entry (v1).
pub async fn open_v1(ctx: &Ctx, t: Target, req: Request) -> Result<Response, AppError> {
    let mut q = if req.method() == axum::http::Method::GET {
        query_from_params(req.uri().query())?
    } else {
        query_body(&t, req).await?
    };
    if super::attachments::meta_parent(&t.entry).is_none() {
        // ReductStore's v1 route looks the entry up first: a missing one is 404 (the v2
        // route's list picks nothing for it instead). The caller's permission is checked
        // before: a token without it learns nothing of which entries exist.
        if q.query_type.as_deref() == Some("REMOVE") {
            t.caller.require_write(&t.bucket)?;
        } else {
            t.caller.require_read(&t.bucket)?;
        }
        let (store, b, e) = (t.state.store.clone(), t.bucket.clone(), t.entry.clone());
        blocking(move || Ok(store.check_entry(&b, &e)?)).await?;
    }
    q.entries = Some(vec![t.entry.clone()]);
    open(ctx, &t.caller, &t.bucket, q).await
}

/// `DELETE /api/v1/b/{bucket}/{entry}/q?start=&stop=&when=`: removes what the query
/// matches and answers `{"removed_records": N}`.
pub async fn remove_v1(t: Target, req: Request) -> Result<Response, AppError> {
    if req.uri().query().is_none_or(str::is_empty) {
        return Err(nothing_to_remove());
    }
    let mut q = query_from_params(req.uri().query())?;
    q.entries = Some(vec![t.entry.clone()]);
    q.query_type = Some("REMOVE".into());
    remove_query(&t.state, &t.caller, &t.bucket, &q).await
}

/// `POST /api/v1/io/{bucket}/q`: opens a session on the entries of the body (v2), or runs
/// a `REMOVE` query.
pub async fn open_io(ctx: &Ctx, t: Target, req: Request) -> Result<Response, AppError> {
    let q = query_body(&t, req).await?;
    open(ctx, &t.caller, &t.bucket, q).await
}

async fn remove_query(
    state: &crate::http::AppState,
    caller: &Caller,
    bucket: &str,
    q: &QueryJson,
) -> Result<Response, AppError> {
    caller.require_write(bucket)?;
    if q.continuous == Some(true) {
        return Err(AppError::bad_request("a REMOVE query cannot be continuous"));
    }
    if q.is_bare() {
        return Err(nothing_to_remove());
    }
    let query = q.engine_query()?;
    let selection = selection(q.entries.as_deref().unwrap_or_default())?;
    // A walk of the index until it ends: a stream's place while it runs (as the native
    // `DELETE …/query`).
    let slot = state.streams.open(caller.name.as_deref().unwrap_or(""))?;
    let (store, bucket) = (state.store.clone(), bucket.to_string());
    let removed = blocking(move || {
        let _slot = slot;
        let Some(selection) = selection else {
            store.check_bucket(&bucket)?;
            return Ok(0);
        };
        let mut n = 0;
        for entry in store.select_entries(&bucket, &selection)? {
            match store.remove_where(&bucket, &entry, &query) {
                Ok(k) => n += k,
                // Removed since it was listed: it has nothing left to remove.
                Err(tsblob_storage::Error::NotFound(tsblob_storage::NotFound::Entry {
                    ..
                })) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(n)
    })
    .await?;
    Ok(Json(serde_json::json!({ "removed_records": removed })).into_response())
}

/// ReductStore's list of entries (v2 queries and `REMOVE` queries) as a selection: no name
/// (or `[]`) picks every entry; a plain name picks that entry if it exists; `*`/`**` globs
/// as tsblob's ([`tsblob_storage::EntryPattern`]), and a glob without `/` ending in `*`
/// (`cam-*`, `*`) as ReductStore's prefix match; `!pattern` excludes. A name tsblob's
/// rules cannot hold names no entry: it picks nothing (`None` when every name of the list
/// is one, so that the list does not turn into "every entry").
fn selection(patterns: &[String]) -> Result<Option<tsblob_storage::EntrySelection>, AppError> {
    tsblob_storage::check_pattern_count(patterns.len())
        .map_err(|e| AppError::from(tsblob_storage::Error::Pattern(e)))?;
    let mut kept = Vec::with_capacity(patterns.len());
    let mut dropped_include = false;
    for p in patterns {
        let (bang, text) = match p.strip_prefix('!') {
            Some(t) => ("!", t),
            None => ("", p.as_str()),
        };
        let text = text.trim_start_matches('/');
        let text = match text.strip_suffix('*') {
            Some(prefix) if !text.contains('/') && !prefix.contains('*') => format!("{prefix}**"),
            _ => text.to_string(),
        };
        match tsblob_storage::EntryPattern::parse(&text) {
            Ok(_) => kept.push(format!("{bang}{text}")),
            Err(tsblob_storage::PatternError::Name(_)) => dropped_include |= bang.is_empty(),
            Err(e) => return Err(tsblob_storage::Error::from(e).into()),
        }
    }
    if dropped_include && !kept.iter().any(|p| !p.starts_with('!')) {
        return Ok(None);
    }
    Ok(Some(
        tsblob_storage::EntrySelection::new(&kept).map_err(tsblob_storage::Error::from)?,
    ))
}

/// ReductStore's answer to a `REMOVE` query that names nothing to remove by.
fn nothing_to_remove() -> AppError {
    AppError::unprocessable(
        ErrorCode::BadRequest,
        "Define at least one query parameter to delete records (start, stop, when or entries): a REMOVE query without one would remove everything",
    )
}

/// The 404 of a read of an entry whose name tsblob's name rules cannot hold.
pub(crate) fn entry_not_held(bucket: &str, name: &str) -> AppError {
    AppError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::EntryNotFound,
        format!("entry {name:?} does not exist in bucket {bucket:?} (tsblob's entry names cannot hold it)"),
    )
}

async fn open(
    ctx: &Ctx,
    caller: &Caller,
    bucket: &str,
    mut q: QueryJson,
) -> Result<Response, AppError> {
    match q.query_type.as_deref().unwrap_or("QUERY") {
        "QUERY" => {}
        "REMOVE" => return remove_query(&ctx.state, caller, bucket, &q).await,
        other => {
            return Err(AppError::bad_request(format!(
                "query_type {other:?} is not QUERY or REMOVE"
            )))
        }
    }
    caller.require_read(bucket)?;
    let query = q.engine_query()?;
    let patterns = q.entries.take().unwrap_or_default();
    // A session of one entry is read only through that entry's path (`Session::entry`).
    let one_entry = match patterns.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    };
    tsblob_storage::check_pattern_count(patterns.len())
        .map_err(|e| AppError::from(tsblob_storage::Error::Pattern(e)))?;
    let ttl = Duration::from_secs(q.ttl.unwrap_or(DEFAULT_TTL).clamp(1, MAX_TTL));
    let (store, b) = (ctx.state.store.clone(), bucket.to_string());
    let iter = if patterns
        .iter()
        .any(|p| super::attachments::meta_parent(p).is_some())
    {
        // `<entry>/$meta`: the entry's attachments (reduct-py's read_attachments), checked
        // before the name rules, which cannot hold `$meta`.
        Source::Attachments(
            blocking(move || attachment_records(&store, &b, &patterns, &query)).await?,
        )
    } else {
        let selection = selection(&patterns)?;
        Source::Engine(
            blocking(move || {
                let iter = match selection {
                    Some(sel) => store.query_selected(&b, &sel, &query)?,
                    None => store.query_entries(&b, &[], &query)?,
                };
                Ok(iter.windowed())
            })
            .await?,
        )
    };
    let now = Instant::now();
    let sessions = &ctx.sessions;
    let id = sessions.next.fetch_add(1, Ordering::Relaxed);
    let mut map = sessions.lock();
    Sessions::sweep(&mut map, now);
    if let Err((cap, n)) = Sessions::make_room(&mut map, sessions.limits, &caller.token_hash) {
        return Err(AppError::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::TooManyStreams,
            format!(
                "{n} query sessions are open and being read, the server's limit ({cap}): read queries to their end, or raise the limit"
            ),
        ));
    }
    map.insert(
        id,
        Session {
            bucket: bucket.to_string(),
            entry: one_entry,
            token: caller.token_hash.clone(),
            only_metadata: q.only_metadata.unwrap_or(false),
            continuous: q.continuous.unwrap_or(false),
            ttl,
            expires: now + ttl,
            used: now,
            cursor: Arc::new(tokio::sync::Mutex::new(Cursor::new(iter))),
            reading: Arc::new(AtomicBool::new(false)),
        },
    );
    Ok(Json(serde_json::json!({ "id": id })).into_response())
}

/// A record of a batch: its entry, its metadata, its payload (none: metadata only).
type Out = (String, RecordMeta, Option<Bytes>);

/// The attachments a query of `<entry>/$meta` entries selects, as the records ReductStore
/// answers (by time; `$meta` entries are queried alone, as ReductStore's wildcards skip them).
fn attachment_records(
    store: &tsblob_storage::Store,
    bucket: &str,
    patterns: &[String],
    query: &tsblob_storage::Query,
) -> Result<std::collections::VecDeque<Out>, AppError> {
    let mut out = Vec::new();
    // Each entry once: a name repeated 100,000 times in a 1 MiB body made as many copies of
    // its attachments.
    let mut patterns: Vec<&String> = patterns.iter().collect();
    patterns.sort();
    patterns.dedup();
    for p in patterns {
        let parent = super::attachments::meta_parent(p).ok_or_else(|| {
            AppError::unprocessable(
                ErrorCode::InvalidPattern,
                format!(
                    "{p:?} is queried with attachment entries (<entry>/$meta): query those alone"
                ),
            )
        })?;
        let selected = match store.select_attachments(bucket, parent, query) {
            Ok(list) => list,
            // As ReductStore: an entry without attachments has no `$meta` records, whether
            // or not the entry exists (reduct-py's read_attachments answers `{}`).
            Err(tsblob_storage::Error::NotFound(tsblob_storage::NotFound::Entry { .. })) => {
                Vec::new()
            }
            Err(e) => return Err(e.into()),
        };
        for a in selected {
            let (entry, meta, data) = super::attachments::as_record(parent, a);
            out.push((entry, meta, Some(Bytes::from(data))));
        }
    }
    out.sort_by(|a, b| (a.1.ts, &a.0).cmp(&(b.1.ts, &b.0)));
    if query.descending {
        out.reverse();
    }
    if let Some(limit) = query.limit {
        out.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok(out.into())
}

/// One batch of a session.
struct Batch {
    records: Vec<Out>,
    last: bool,
    held: crate::http::budget::Held,
}

fn query_not_found(id: u64, bucket: &str) -> AppError {
    AppError::not_found(format!(
        "query {id} is not open in bucket {bucket:?}: it was read to its end, outlived its ttl, was closed to make room for newer ones (the least recently read go first past --reductstore-max-queries-per-token), or never existed; open a new one"
    ))
}

/// Takes the next batch of session `id`; `None`: nothing (yet), answer 204. A batch made
/// ahead is the answer when there is one; then the batch after it is made ahead.
async fn next_batch(
    ctx: &Ctx,
    caller: &Caller,
    (bucket, entry): (&str, Option<&str>),
    id: u64,
    head: bool,
) -> Result<Option<Batch>, AppError> {
    caller.require_read(bucket)?;
    let open = {
        let mut map = ctx.sessions.lock();
        let now = Instant::now();
        Sessions::sweep(&mut map, now);
        match map.get_mut(&id) {
            // A v1 read (`entry`) of its own entry only: a session on `e` read through
            // `/b/{bucket}/other/batch` gave `e`'s records as `other`'s.
            Some(s)
                if s.bucket == bucket
                    && s.token == caller.token_hash
                    && entry.is_none_or(|e| s.entry.as_deref() == Some(e)) =>
            {
                s.expires = now + s.ttl;
                s.used = now;
                Some((
                    s.cursor.clone(),
                    s.reading.clone(),
                    s.only_metadata || head,
                    s.only_metadata,
                    s.continuous,
                ))
            }
            _ => None,
        }
    };
    let Some((cursor, reading, meta_only, session_meta_only, continuous)) = open else {
        if ctx.sessions.was_ended(id, bucket, &caller.token_hash) {
            return Ok(None);
        }
        return Err(query_not_found(id, bucket));
    };
    let Some((guard, _reading)) = take_cursor(&cursor, &reading).await else {
        return Err(AppError::new(
            StatusCode::CONFLICT,
            ErrorCode::Conflict,
            format!(
                "query {id} is being read by another request: read a session one request at a time"
            ),
        ));
    };
    let held = ctx.state.bodies.empty();
    let budget = ctx.state.bodies.clone();
    // Through the gate of query steps running at once (`blocking::Scans`), as the native
    // API's.
    let (mut guard, result) = match ctx
        .state
        .scans
        .run(move || {
            let mut guard = guard;
            let r = match guard.ahead.take() {
                Some(made) => made.map(Some),
                None => fill(&mut guard, held, meta_only, continuous, &budget, false),
            };
            Ok::<_, crate::blocking::TaskFailed>((guard, r))
        })
        .await
    {
        Ok(v) => v,
        Err(e) => {
            ctx.sessions.lock().remove(&id);
            return Err(AppError::internal(format!("the query task failed: {e}")));
        }
    };
    let finished = guard.done && guard.pending.is_none() && guard.failed.is_none();
    if finished {
        ctx.sessions.end(id);
    } else if !continuous && matches!(&result, Ok(Some(b)) if !b.last) {
        let budget = ctx.state.bodies.clone();
        let scans = ctx.state.scans.clone();
        tokio::spawn(async move {
            let _ = scans
                .run(move || {
                    prefetch(&mut guard, session_meta_only, &budget);
                    guard.rest();
                    Ok::<_, crate::blocking::TaskFailed>(())
                })
                .await;
        });
    } else {
        guard.rest();
    }
    result
}

/// The session's cursor for one read, and the mark that the read is under way (cleared
/// when it is dropped, however the read ends): `None` when another read has the session
/// (a client reads a session one request at a time); else the cursor, once the batch being
/// made ahead, if any, is done (it is this read's).
///
/// Bug "409 after the read-ahead" (twice in reduct-py's suite, 2026-11-29): a flag the
/// read-ahead set and cleared told reads whether to wait. A read that tried the lock first
/// and the flag after raced its clearing; and a read-ahead preempted between its unlock and
/// its clear cleared the flag of the *next* read-ahead, which held the lock: the next read
/// found the lock held and no flag, and answered 409 to a client reading one request at a
/// time. Only reads mark the session now; a read-ahead never touches the mark.
async fn take_cursor<T>(
    cursor: &Arc<tokio::sync::Mutex<T>>,
    reading: &Arc<AtomicBool>,
) -> Option<(tokio::sync::OwnedMutexGuard<T>, ReadMark)> {
    if reading.swap(true, Ordering::AcqRel) {
        return None;
    }
    let mark = ReadMark(Arc::clone(reading));
    Some((Arc::clone(cursor).lock_owned().await, mark))
}

/// A read under way ([`take_cursor`]); dropped, it is over.
struct ReadMark(Arc<AtomicBool>);

impl Drop for ReadMark {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Makes the next batch of a session ahead, while its client reads the one just answered
/// (the server's reading and checking of payloads then overlaps the client's work instead of
/// adding to it). Only while the memory budget is at most half used, so that batches made
/// ahead for clients that stop reading (held until their session's TTL) cannot take the
/// room other requests need; a shortfall leaves the read to make the batch itself.
fn prefetch(c: &mut Cursor, meta_only: bool, budget: &crate::http::budget::MemoryBudget) {
    if c.ahead.is_some() || budget.used().saturating_add(BATCH_BYTES) > budget.limit() / 2 {
        return;
    }
    match fill(c, budget.empty(), meta_only, false, budget, true) {
        Ok(Some(batch)) => c.ahead = Some(Ok(batch)),
        Ok(None) => {}
        Err(e) => c.ahead = Some(Err(e)),
    }
}

/// Fills a batch from the cursor (blocking).
fn fill(
    c: &mut Cursor,
    mut held: crate::http::budget::Held,
    meta_only: bool,
    continuous: bool,
    budget: &crate::http::budget::MemoryBudget,
    ahead: bool,
) -> Result<Option<Batch>, AppError> {
    if let Some(e) = c.failed.take() {
        c.done = true;
        return Err(e);
    }
    let iter = match &mut c.iter {
        Source::Engine(iter) => iter,
        Source::Attachments(list) => {
            return fill_listed(list, &mut c.done, held, meta_only, continuous, budget)
        }
    };
    let mut records = Vec::new();
    let (mut bytes, mut meta_bytes) = (0u64, 0u64);
    let mut resumed = false;
    let mut scan = tsblob_storage::ScanBound::pages_or_time(SCAN_PAGES, SCAN_TIME);
    while records.len() < BATCH_RECORDS {
        let item = match c.pending.take() {
            Some(item) => item,
            None => match iter.next_within(&mut scan) {
                Some(Ok(Some(item))) => item,
                Some(Ok(None)) => break,
                Some(Err(e)) if records.is_empty() => {
                    c.done = true;
                    return Err(e.into());
                }
                Some(Err(e)) => {
                    c.failed = Some(e.into());
                    break;
                }
                None if continuous && !resumed => {
                    resumed = true;
                    iter.resume(tsblob_storage::now_micros());
                    continue;
                }
                None => {
                    c.done = !continuous;
                    break;
                }
            },
        };
        // A record counts its content type and labels, and its payload unless only heads
        // are read.
        let attrs = item.meta.attrs_bytes();
        let size = if meta_only { attrs } else { item.meta.weight() };
        if !records.is_empty()
            && (bytes + size > BATCH_BYTES || meta_bytes + attrs > BATCH_METADATA)
        {
            c.pending = Some(item);
            break;
        }
        // A batch made ahead stops while the budget is over half used (many made at once
        // all passed `prefetch`'s check, then filled the whole budget, held until their
        // sessions were read or expired).
        let over_half = ahead && budget.used().saturating_add(size) > budget.limit() / 2;
        if over_half || !held.try_resize(bytes + size) {
            c.pending = Some(item);
            if records.is_empty() && !ahead {
                return Err(budget.busy("a ReductStore query read"));
            }
            break;
        }
        let data = if meta_only {
            None
        } else {
            // Mapped from the block (sent from the mapping, no copy), or read whole when the
            // engine streams it instead (a compressed record).
            let payload = match item.payload_in(c.windows.of(item.entry())) {
                Ok(Some(p)) => Ok(Bytes::from_owner(p)),
                Ok(None) => item.data().map(Bytes::from),
                Err(e) => Err(e),
            };
            match payload {
                Ok(d) => Some(d),
                // Removed (or evicted) since the query listed it: skipped.
                Err(tsblob_storage::Error::NotFound(_)) => continue,
                Err(e) if records.is_empty() => return Err(e.into()),
                Err(e) => {
                    c.failed = Some(e.into());
                    break;
                }
            }
        };
        bytes += size;
        meta_bytes += attrs;
        records.push((item.entry().to_string(), item.meta.clone(), data));
    }
    if !continuous && !c.done && c.pending.is_none() && c.failed.is_none() {
        // Whether this batch is the last: look one record ahead (within the same bound,
        // so not at all once it is reached; past it the batch is not the last and the
        // next read walks on).
        match iter.next_within(&mut scan) {
            None => c.done = true,
            Some(Ok(Some(item))) => c.pending = Some(item),
            Some(Ok(None)) => {}
            Some(Err(e)) => c.failed = Some(e.into()),
        }
    }
    if records.is_empty() {
        // Walked its bound and found nothing: an empty batch that is not the last (a
        // continuous session answers 204 and its client polls anyway); a batch made ahead
        // keeps nothing.
        if scan.out() && !continuous && !ahead && !c.done {
            return Ok(Some(Batch {
                records,
                last: false,
                held,
            }));
        }
        return Ok(None);
    }
    let last = !continuous && c.done && c.pending.is_none() && c.failed.is_none();
    Ok(Some(Batch {
        records,
        last,
        held,
    }))
}

/// Fills a batch from records listed when the session opened (attachments).
fn fill_listed(
    list: &mut std::collections::VecDeque<Out>,
    done: &mut bool,
    mut held: crate::http::budget::Held,
    meta_only: bool,
    continuous: bool,
    budget: &crate::http::budget::MemoryBudget,
) -> Result<Option<Batch>, AppError> {
    let mut records = Vec::new();
    let (mut bytes, mut meta_bytes) = (0u64, 0u64);
    while records.len() < BATCH_RECORDS {
        let Some(front) = list.front() else { break };
        let attrs = front.1.attrs_bytes();
        let size = if meta_only { attrs } else { front.1.weight() };
        if !records.is_empty()
            && (bytes + size > BATCH_BYTES || meta_bytes + attrs > BATCH_METADATA)
        {
            break;
        }
        if !held.try_resize(bytes + size) {
            if records.is_empty() {
                return Err(budget.busy("a ReductStore query read"));
            }
            break;
        }
        let Some((entry, meta, data)) = list.pop_front() else {
            break;
        };
        bytes += size;
        meta_bytes += attrs;
        records.push((entry, meta, if meta_only { None } else { data }));
    }
    *done = list.is_empty() && !continuous;
    if records.is_empty() {
        return Ok(None);
    }
    Ok(Some(Batch {
        records,
        last: *done,
        held,
    }))
}

/// The body of a batch: the payloads back to back; the memory they hold is given back to
/// the budget once it is sent.
fn batch_body(batch: Batch) -> Body {
    let held = batch.held;
    let chunks: Vec<Result<Bytes, std::io::Error>> = batch
        .records
        .into_iter()
        .filter_map(|(_, _, d)| d.map(Ok))
        .collect();
    let stream = tokio_stream::StreamExt::map(tokio_stream::iter(chunks), move |c| {
        let _ = &held;
        c
    });
    Body::from_stream(stream)
}

fn total(batch: &Batch) -> u64 {
    batch.records.iter().map(|(_, m, _)| m.size).sum()
}

/// `GET|HEAD /api/v1/b/{bucket}/{entry}/batch?q=ID` (v1).
pub async fn read_v1(ctx: &Ctx, t: Target, req: Request, head: bool) -> Result<Response, AppError> {
    let mut id = None;
    for (k, v) in crate::http::params::pairs(req.uri().query()) {
        match k.as_str() {
            "q" => id = Some(crate::http::params::parse_u64(&k, &v)?),
            _ => return Err(crate::http::params::unknown(&k, "q")),
        }
    }
    let id = id.ok_or_else(|| {
        AppError::bad_request("a batch read needs ?q=<id> of a query opened with .../q")
    })?;
    let Some(batch) = next_batch(ctx, &t.caller, (&t.bucket, Some(&t.entry)), id, head).await?
    else {
        return Ok(no_content());
    };
    let mut headers = HeaderMap::new();
    for (_, meta, _) in &batch.records {
        let (name, value) = record_header(
            format!("{TIME_PREFIX}{}", meta.ts),
            BatchHeaderV1::format(meta),
        )?;
        headers.append(name, value);
    }
    finish(batch, headers, head)
}

/// A record's header in a batch answer. Never left out: the body carries the record's
/// payload whatever the headers say, so a missing header paired every later payload with
/// the record before it (hostile probe of 2026-11-29).
fn record_header(name: String, value: String) -> Result<(HeaderName, HeaderValue), AppError> {
    match (HeaderName::try_from(name), HeaderValue::try_from(value)) {
        (Ok(n), Ok(v)) => Ok((n, v)),
        _ => Err(AppError::internal(
            "a record's batch header could not be written".to_string(),
        )),
    }
}

/// No batch (yet, or any more): 204 with ReductStore's `x-reduct-error: No content`.
fn no_content() -> Response {
    (
        StatusCode::NO_CONTENT,
        [("x-reduct-error", HeaderValue::from_static("No content"))],
    )
        .into_response()
}

fn finish(batch: Batch, mut headers: HeaderMap, head: bool) -> Result<Response, AppError> {
    headers.insert(
        LAST_HEADER,
        HeaderValue::from_static(if batch.last { "true" } else { "false" }),
    );
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    let len = if head || batch.records.iter().any(|r| r.2.is_none()) {
        0
    } else {
        total(&batch)
    };
    let mut resp = Response::new(batch_body(batch));
    headers.insert(axum::http::header::CONTENT_LENGTH, HeaderValue::from(len));
    resp.headers_mut().extend(headers);
    Ok(resp)
}

/// `GET|HEAD /api/v1/io/{bucket}/read` with `x-reduct-query-id` (v2).
pub async fn read_io(ctx: &Ctx, t: Target, req: Request, head: bool) -> Result<Response, AppError> {
    let id = req
        .headers()
        .get("x-reduct-query-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .ok_or_else(|| {
            AppError::bad_request(
                "a read needs the x-reduct-query-id header: the id a POST .../q answered",
            )
        })?;
    let Some(mut batch) = next_batch(ctx, &t.caller, (&t.bucket, None), id, head).await? else {
        return Ok(no_content());
    };
    // Entries numbered by first appearance; records in (timestamp, entry index) order, the
    // order clients read the headers in.
    let mut entries: Vec<String> = Vec::new();
    let mut index = Vec::with_capacity(batch.records.len());
    for (entry, _, _) in &batch.records {
        let i = match entries.iter().position(|e| e == entry) {
            Some(i) => i,
            None => {
                entries.push(entry.clone());
                entries.len() - 1
            }
        };
        index.push(i);
    }
    let mut order: Vec<usize> = (0..batch.records.len()).collect();
    order.sort_by_key(|&k| (batch.records[k].1.ts, index[k]));
    let mut taken: Vec<Option<Out>> = batch.records.drain(..).map(Some).collect();
    let index: Vec<usize> = order.iter().map(|&k| index[k]).collect();
    batch.records = order.iter().filter_map(|&k| taken[k].take()).collect();
    let start = batch.records.first().map(|r| r.1.ts).unwrap_or(0);
    let mut headers = HeaderMap::new();
    let names: Vec<String> = entries.iter().map(|e| encode_entry(e)).collect();
    if let Ok(v) = HeaderValue::try_from(names.join(",")) {
        headers.insert("x-reduct-entries", v);
    }
    headers.insert("x-reduct-start-ts", HeaderValue::from(start));
    let mut previous: Vec<Option<&RecordMeta>> = vec![None; entries.len()];
    for ((_, meta, _), &i) in batch.records.iter().zip(&index) {
        let value = label_delta_v2(meta, previous[i]);
        previous[i] = Some(meta);
        let (name, value) = record_header(format!("x-reduct-{i}-{}", meta.ts - start), value)?;
        headers.append(name, value);
    }
    finish(batch, headers, head)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn session(token: &str, used: Instant) -> Session {
        Session {
            entry: None,
            bucket: "b".into(),
            token: Some(token.into()),
            only_metadata: false,
            continuous: false,
            ttl: Duration::from_secs(86_400),
            expires: used + Duration::from_secs(86_400),
            used,
            cursor: Arc::new(tokio::sync::Mutex::new(Cursor::new(Source::Attachments(
                Default::default(),
            )))),
            reading: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Past the server's cap a new session takes the place of the least recently used one
    /// of the token holding the most (hostile probe of 2026-11-28: four tokens filled it
    /// for everyone for a day); past a token's cap, its own; one being read stays.
    #[test]
    fn a_new_session_takes_the_place_of_the_heaviest_holders_oldest() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let limits = SessionLimits {
            max: 4,
            per_token: 3,
        };
        let mut map = HashMap::new();
        map.insert(1, session("a", at(5)));
        map.insert(2, session("a", at(1)));
        map.insert(3, session("a", at(9)));
        map.insert(4, session("b", at(0)));
        // "c" has none: the server's cap; "a" holds the most, its oldest (2) goes.
        Sessions::make_room(&mut map, limits, &Some("c".into())).unwrap();
        let mut left: Vec<u64> = map.keys().copied().collect();
        left.sort();
        assert_eq!(left, [1, 3, 4]);
        map.insert(5, session("a", at(10)));
        // "a" at its own cap (3): its oldest not being read goes (1 is being read).
        let cursor = map[&1].cursor.clone();
        let _reading = cursor.try_lock().unwrap();
        Sessions::make_room(&mut map, limits, &Some("a".into())).unwrap();
        let mut left: Vec<u64> = map.keys().copied().collect();
        left.sort();
        assert_eq!(left, [1, 4, 5]);
        // Every session of the heaviest holder being read: refused, naming the cap.
        let tight = SessionLimits {
            max: 3,
            per_token: 3,
        };
        let c5 = map[&5].cursor.clone();
        let _reading5 = c5.try_lock().unwrap();
        let e = Sessions::make_room(&mut map, tight, &Some("b".into())).unwrap_err();
        assert_eq!(e, ("--reductstore-max-queries", 3));
    }

    /// Bug "409 after the read-ahead" (twice in reduct-py's suite): a flag set and cleared by
    /// the read-ahead told reads whether to wait, and a read-ahead preempted between its
    /// unlock and its clear cleared the flag of the next one: the next read found the
    /// cursor held and no flag, and was refused as concurrent. Here each step of a client
    /// reading one request at a time, with read-aheads that end late: every read gets the
    /// cursor; only a read at the same time as another is refused.
    #[test]
    fn a_read_after_the_read_ahead_was_refused_as_concurrent() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let cursor = Arc::new(tokio::sync::Mutex::new(0u32));
            let reading = Arc::new(AtomicBool::new(false));
            // Read-ahead 1 holds the cursor.
            let ahead1 = Arc::clone(&cursor).try_lock_owned().unwrap();
            // Read A waits for it, then reads and starts read-ahead 2 with the cursor.
            let a = tokio::spawn({
                let (c, r) = (Arc::clone(&cursor), Arc::clone(&reading));
                async move {
                    let (mut g, _mark) = take_cursor(&c, &r).await.unwrap();
                    *g += 1;
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        *g += 1;
                    });
                }
            });
            tokio::task::yield_now().await;
            // Another read while A is under way: refused.
            assert!(take_cursor(&cursor, &reading).await.is_none());
            drop(ahead1);
            a.await.unwrap();
            // Read C, after A answered, while read-ahead 2 holds the cursor: it waits for
            // it (and read-ahead 1 ending late changes nothing: it holds no flag).
            let (g, _mark) = take_cursor(&cursor, &reading).await.unwrap();
            assert_eq!(*g, 2, "read C got the cursor after read-ahead 2");
        });
    }

    /// A session read to its end answers 204 to its own caller only, and at most
    /// MAX_ENDED of them are remembered (the oldest ids forgotten first).
    #[test]
    fn ended_sessions_are_remembered_for_their_caller_within_a_bound() {
        let sessions = Sessions::new(SessionLimits {
            max: 8,
            per_token: 8,
        });
        let now = Instant::now();
        for id in 0..(MAX_ENDED as u64 + 10) {
            sessions.lock().insert(id, session("a", now));
            sessions.end(id);
        }
        assert!(sessions.is_empty());
        assert_eq!(sessions.ended.lock().unwrap().len(), MAX_ENDED);
        let a = Some("a".to_string());
        assert!(!sessions.was_ended(0, "b", &a));
        assert!(sessions.was_ended(MAX_ENDED as u64 + 9, "b", &a));
        assert!(!sessions.was_ended(MAX_ENDED as u64 + 9, "b", &Some("z".into())));
        assert!(!sessions.was_ended(MAX_ENDED as u64 + 9, "other", &a));
    }

    /// Bug (docs walkthrough): `?each_s=2` was refused as "the deprecated `each_n`", and
    /// `?exclude-k=1` as "the deprecated `include`".
    #[test]
    fn a_deprecated_parameter_was_refused_under_another_name() {
        for (param, named) in [
            ("each_s=2", "`each_s`"),
            ("each_n=2", "`each_n`"),
            ("include-k=1", "`include`"),
            ("exclude-k=1", "`exclude`"),
        ] {
            let e = query_from_params(Some(param))
                .unwrap()
                .engine_query()
                .unwrap_err();
            assert!(e.message.contains(named), "{param}: {}", e.message);
        }
    }

    #[test]
    fn a_read_of_an_entry_tsblob_cannot_hold_answers_not_found_not_invalid() {
        let e = entry_not_held("b", "cam/$meta");
        assert_eq!(e.status, StatusCode::NOT_FOUND);
        assert_eq!(
            super::super::wire::reduct_message(e.code.as_str(), &e.message).as_deref(),
            Some("Entry 'cam/$meta' not found in bucket 'b'")
        );
    }

    /// Bugs "a missing entry in a list fails the whole query", "`entries: []` refused" and
    /// "`*` misses nested entries": a list picks entries as ReductStore's does.
    #[test]
    fn entry_lists_pick_entries_as_reductstore_picks_them() {
        let names = ["a", "a2", "cam-1/x", "cam/front", "cam/raw"];
        let picked = |patterns: &[&str]| -> Vec<&str> {
            let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
            match selection(&patterns).unwrap() {
                Some(sel) => names.iter().copied().filter(|n| sel.selects(n)).collect(),
                None => Vec::new(),
            }
        };
        assert_eq!(picked(&[]), names, "no list: every entry");
        assert_eq!(picked(&["*"]), names, "a prefix match crosses `/`");
        assert_eq!(
            picked(&["a", "not-yet"]),
            ["a"],
            "a missing name picks nothing"
        );
        assert_eq!(picked(&["cam-*"]), ["cam-1/x"]);
        assert_eq!(picked(&["cam/*", "!cam/raw"]), ["cam/front"]);
        assert_eq!(picked(&["/a"]), ["a"]);
        assert_eq!(
            picked(&["!a*"]),
            ["cam-1/x", "cam/front", "cam/raw"],
            "exclusions alone: every other entry"
        );
        assert!(picked(&["no such name!"]).is_empty(), "not every entry");
        assert_eq!(picked(&["no such name!", "a2"]), ["a2"]);
    }

    #[test]
    fn a_query_extension_is_refused_as_unknown_naming_it() {
        let q: QueryJson = serde_json::from_str(r#"{"ext": {"test": {}}}"#).unwrap();
        let e = q.engine_query().unwrap_err();
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(e.message.starts_with("Unknown extension 'test'"), "{e}");
    }
}
