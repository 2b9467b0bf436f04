//! Prometheus metrics: requests, bytes, latencies (a middleware around every route) and
//! the store's disk usage, free space and quota evictions (read at scrape time).

use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use super::errors::{blocking, AppError};
use super::AppState;

/// Every metric of a server.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    /// The series of `requests` and `latency` each request adds to, found once
    /// ([`Series`]).
    series: Series,
    received: IntCounter,
    pub(crate) sent: IntCounter,
    /// Bytes of query streams (also counted in `sent`, kept apart for the query rate).
    pub query_bytes: IntCounter,
    /// Live tails (`follow=true`) streaming now.
    pub follows: IntGauge,
    /// Streams (query answers, live tails, MCAP exports) running now (`limits.rs`).
    pub streams: IntGauge,
    /// Streams refused, by the limit reached (`server`, `token`).
    pub streams_refused: IntCounterVec,
    /// Bytes held now in the requests' memory budget (`budget.rs`), and its limit: set at
    /// scrape time.
    pub memory_used: IntGauge,
    pub memory_limit: IntGauge,
    in_flight: IntGauge,
    disk_bytes: IntGauge,
    free_bytes: IntGauge,
    records: IntGauge,
    buckets: IntGauge,
    evicted_blocks: IntCounter,
    expired_blocks: IntCounter,
    /// Per bucket and tier (`local`, `tiered`): bytes and blocks.
    bucket_bytes: IntGaugeVec,
    bucket_blocks: IntGaugeVec,
    /// The tier's metrics (`TIER_METRICS`), set at scrape time when there is a tier.
    tier: Vec<Mirrored>,
    /// Held while a scrape brings the counters kept by the store up to date.
    scrape_lock: parking_lot::Mutex<()>,
    /// The tier gauges are registered on the first scrape of a server with a tier.
    tier_registered: std::sync::OnceLock<()>,
    /// `--access-log`: every request logged at info (else at debug, 5xx at error).
    access_log: std::sync::atomic::AtomicBool,
}

/// Metrics of the tier: name, help, whether it is a counter (monotonic since start, named
/// `_total`) or a gauge, and the field of `TierStats` it shows.
type TierField = fn(&tsblob_storage::TierStats) -> u64;
const TIER_METRICS: &[(&str, &str, bool, TierField)] = &[
    (
        "tsblob_tier_available",
        "1 if the object store answered its last call, else 0",
        false,
        |t| u64::from(t.available),
    ),
    (
        "tsblob_tier_upload_queue",
        "Sealed blocks waiting for upload",
        false,
        |t| t.upload_queue,
    ),
    (
        "tsblob_tier_uploaded_blocks_total",
        "Blocks uploaded and verified since start",
        true,
        |t| t.uploaded_blocks,
    ),
    (
        "tsblob_tier_uploaded_bytes_total",
        "Bytes of blocks uploaded since start",
        true,
        |t| t.uploaded_bytes,
    ),
    (
        "tsblob_tier_upload_errors_total",
        "Failed uploads since start (retried)",
        true,
        |t| t.upload_errors,
    ),
    (
        "tsblob_tier_gets_total",
        "Ranged GETs of tiered records since start",
        true,
        |t| t.gets,
    ),
    (
        "tsblob_tier_get_errors_total",
        "Failed GETs of tiered records since start",
        true,
        |t| t.get_errors,
    ),
    (
        "tsblob_tier_cache_hits_total",
        "Reads of tiered records served by the range cache",
        true,
        |t| t.cache_hits,
    ),
    (
        "tsblob_tier_cache_misses_total",
        "Reads of tiered records the range cache missed",
        true,
        |t| t.cache_misses,
    ),
    (
        "tsblob_tier_cache_bytes",
        "Bytes in the range cache",
        false,
        |t| t.cache_bytes,
    ),
    (
        "tsblob_tier_deleted_objects_total",
        "Objects deleted (FIFO, retention, removal) since start",
        true,
        |t| t.deleted_objects,
    ),
    (
        "tsblob_tier_pending_deletes",
        "Object deletions waiting for the store",
        false,
        |t| t.pending_deletes,
    ),
    (
        "tsblob_tier_pending_sidecars",
        "Heads sidecars of tiered blocks waiting to be uploaded again (removals, label updates)",
        false,
        |t| t.pending_sidecars,
    ),
    (
        "tsblob_tier_oversized_sidecars",
        "Blocks whose heads sidecar would be over 128 MiB (their records' distinct label sets): kept local, or their sidecar not uploaded again; since start",
        false,
        |t| t.oversized_sidecars,
    ),
];

/// Brings a counter up to `v`, a count kept elsewhere since start (under
/// `Metrics::scrape_lock`).
fn raise(c: &IntCounter, v: u64) {
    let now = c.get();
    if v > now {
        c.inc_by(v - now);
    }
}

/// A metric whose value the store keeps (read at scrape time): a gauge, or a counter
/// brought up to the store's count.
enum Mirrored {
    Gauge(IntGauge),
    Counter(IntCounter),
}

impl Mirrored {
    fn new(name: &str, help: &str, counter: bool) -> prometheus::Result<Mirrored> {
        Ok(if counter {
            Mirrored::Counter(IntCounter::new(name, help)?)
        } else {
            Mirrored::Gauge(IntGauge::new(name, help)?)
        })
    }

    fn collector(&self) -> Box<dyn prometheus::core::Collector> {
        match self {
            Mirrored::Gauge(g) => Box::new(g.clone()),
            Mirrored::Counter(c) => Box::new(c.clone()),
        }
    }

    /// Shows `v` (called under `Metrics::scrape_lock`: a counter is raised by the
    /// difference, which two scrapes at once would add twice).
    fn set(&self, v: u64) {
        match self {
            Mirrored::Gauge(g) => g.set(i64::try_from(v).unwrap_or(i64::MAX)),
            Mirrored::Counter(c) => raise(c, v),
        }
    }
}

impl Metrics {
    /// `--access-log`: log every request at info level.
    pub fn set_access_log(&self, on: bool) {
        self.access_log
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn access_log(&self) -> bool {
        self.access_log.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The registry, for metrics kept elsewhere (replication).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn new() -> anyhow::Result<Metrics> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("tsblob_http_requests_total", "HTTP requests answered"),
            &["op", "method", "status"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "tsblob_http_request_duration_seconds",
                "Time to the response head (streamed bodies continue after it)",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.5, 5.0, 10.0,
            ]),
            &["op"],
        )?;
        let c = |n: &str, h: &str| IntCounter::new(n, h);
        let g = |n: &str, h: &str| IntGauge::new(n, h);
        let m = Metrics {
            requests,
            latency,
            series: Series::new(),
            received: c(
                "tsblob_http_received_bytes_total",
                "Request body bytes received",
            )?,
            sent: c("tsblob_http_sent_bytes_total", "Response body bytes sent")?,
            query_bytes: c(
                "tsblob_query_sent_bytes_total",
                "Bytes of query streams sent",
            )?,
            follows: g(
                "tsblob_query_follows",
                "Live tails (follow=true queries) streaming now",
            )?,
            streams: g(
                "tsblob_query_streams",
                "Streams (query answers, live tails, MCAP exports) running now, against --max-streams",
            )?,
            streams_refused: IntCounterVec::new(
                Opts::new(
                    "tsblob_streams_refused_total",
                    "Streams refused, by the limit reached: server (--max-streams, 503 busy) or token (--max-streams-per-token, 429 too_many_streams)",
                ),
                &["limit"],
            )?,
            memory_used: g(
                "tsblob_memory_budget_used_bytes",
                "Bytes requests hold in memory now (bodies, batches, zstd, query pages, MCAP exports), against --memory-budget",
            )?,
            memory_limit: g(
                "tsblob_memory_budget_bytes",
                "The memory budget of requests (--memory-budget)",
            )?,
            in_flight: g("tsblob_http_requests_in_flight", "Requests being handled")?,
            disk_bytes: g("tsblob_disk_usage_bytes", "Bytes of block files on disk")?,
            free_bytes: g(
                "tsblob_disk_free_bytes",
                "Free bytes on the data folder's file system",
            )?,
            records: g("tsblob_records", "Records stored")?,
            buckets: g("tsblob_buckets", "Buckets")?,
            evicted_blocks: c(
                "tsblob_quota_evicted_blocks_total",
                "Blocks removed by FIFO quotas since the server started",
            )?,
            expired_blocks: c(
                "tsblob_retention_expired_blocks_total",
                "Whole blocks removed by lifecycle rules (max_age included) since the server started",
            )?,
            bucket_bytes: IntGaugeVec::new(
                Opts::new(
                    "tsblob_bucket_bytes",
                    "Bytes of a bucket's blocks, local or tiered (in the object store only)",
                ),
                &["bucket", "tier"],
            )?,
            bucket_blocks: IntGaugeVec::new(
                Opts::new(
                    "tsblob_bucket_blocks",
                    "Blocks of a bucket, local or tiered",
                ),
                &["bucket", "tier"],
            )?,
            tier: TIER_METRICS
                .iter()
                .map(|(n, h, counter, _)| Mirrored::new(n, h, *counter))
                .collect::<Result<_, _>>()?,
            scrape_lock: parking_lot::Mutex::new(()),
            tier_registered: std::sync::OnceLock::new(),
            access_log: std::sync::atomic::AtomicBool::new(false),
            registry,
        };
        m.registry.register(Box::new(m.bucket_bytes.clone()))?;
        m.registry.register(Box::new(m.bucket_blocks.clone()))?;
        m.registry.register(Box::new(m.requests.clone()))?;
        m.registry.register(Box::new(m.streams_refused.clone()))?;
        m.registry.register(Box::new(m.latency.clone()))?;
        for c in [
            &m.received,
            &m.sent,
            &m.query_bytes,
            &m.evicted_blocks,
            &m.expired_blocks,
        ] {
            m.registry.register(Box::new(c.clone()))?;
        }
        for g in [
            &m.follows,
            &m.streams,
            &m.memory_used,
            &m.memory_limit,
            &m.in_flight,
            &m.disk_bytes,
            &m.free_bytes,
            &m.records,
            &m.buckets,
        ] {
            m.registry.register(Box::new(g.clone()))?;
        }
        let build = IntGaugeVec::new(
            Opts::new(
                "tsblob_build_info",
                "1, labelled with the version of the running server and how it was built",
            ),
            &["version", "profile", "arch"],
        )?;
        build
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                if cfg!(debug_assertions) {
                    "debug"
                } else {
                    "release"
                },
                std::env::consts::ARCH,
            ])
            .set(1);
        m.registry.register(Box::new(build))?;
        // process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds,
        // process_max_fds, process_start_time_seconds... (read from /proc at scrape time).
        #[cfg(target_os = "linux")]
        m.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(m)
    }
}

/// The methods a metric label names: a fixed set, whatever a client sends (HTTP allows any
/// token as a method, and each new label value would be a new series kept forever).
const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other",
];

/// The index in [`METHODS`] of a request's method.
fn method_index(method: &Method) -> usize {
    match *method {
        Method::GET => 0,
        Method::HEAD => 1,
        Method::POST => 2,
        Method::PUT => 3,
        Method::PATCH => 4,
        Method::DELETE => 5,
        Method::OPTIONS => 6,
        _ => 7,
    }
}

/// The method as a metric label.
#[cfg(test)]
fn method_label(method: &Method) -> &'static str {
    METHODS[method_index(method)]
}

/// A low-cardinality name for what a request does: the route template it falls under
/// (paths carry bucket and entry names, which never become label values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Health,
    Metrics,
    Tokens,
    Replication,
    Service,
    Other,
    Bucket,
    Batch,
    Query,
    Entry,
    RecordWrite,
    RecordRead,
    RecordOther,
}

impl Op {
    const COUNT: usize = 13;

    /// The `op` label.
    fn name(self) -> &'static str {
        match self {
            Op::Health => "health",
            Op::Metrics => "metrics",
            Op::Tokens => "tokens",
            Op::Replication => "replication",
            Op::Service => "service",
            Op::Other => "other",
            Op::Bucket => "bucket",
            Op::Batch => "batch",
            Op::Query => "query",
            Op::Entry => "entry",
            Op::RecordWrite => "record_write",
            Op::RecordRead => "record_read",
            Op::RecordOther => "record_other",
        }
    }
}

fn op_of(method: &Method, path: &str) -> Op {
    let Some(rest) = path.strip_prefix("/api/v1/b") else {
        return match path {
            "/health" => Op::Health,
            "/metrics" => Op::Metrics,
            p if p.starts_with("/api/v1/tokens") || p == "/api/v1/me" => Op::Tokens,
            p if p.starts_with("/api/v1/replications") => Op::Replication,
            p if p.starts_with("/api/v1/") => Op::Service,
            _ => Op::Other,
        };
    };
    let segments = rest
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .count();
    match segments {
        0 | 1 => Op::Bucket,
        _ if rest.ends_with("/batch") => Op::Batch,
        _ if rest.ends_with("/query") => Op::Query,
        _ if rest.ends_with("/info") || rest.ends_with("/histogram") => Op::Entry,
        _ => match *method {
            Method::POST | Method::PUT => Op::RecordWrite,
            Method::GET | Method::HEAD => Op::RecordRead,
            _ => Op::RecordOther,
        },
    }
}

/// The statuses whose request counters are kept at hand (any other is looked up by its
/// labels each time).
const STATUSES: [u16; 20] = [
    200, 201, 204, 206, 304, 400, 401, 403, 404, 405, 408, 409, 413, 415, 416, 422, 429, 500, 503,
    507,
];

/// The series of `tsblob_http_requests_total` and `tsblob_http_request_duration_seconds`
/// that requests add to, each found in its vector on first use and kept: a
/// `with_label_values` hashes the label values, takes the vector's lock and clones the
/// series' `Arc` (two per request before; `docs/benchmarks/write-cpu-3-2026-11-26.md`).
/// A series still appears in the scrape only once a request used it.
struct Series {
    latency: [OnceLock<Histogram>; Op::COUNT],
    /// By op, method and [`STATUSES`] index.
    requests: Box<[OnceLock<IntCounter>]>,
}

impl Series {
    fn new() -> Series {
        Series {
            latency: std::array::from_fn(|_| OnceLock::new()),
            requests: (0..Op::COUNT * METHODS.len() * STATUSES.len())
                .map(|_| OnceLock::new())
                .collect(),
        }
    }
}

/// What [`Metrics::start`] noted of a request, for [`Metrics::finish`].
pub(crate) struct Started {
    at: Instant,
    method: Method,
    op: Op,
    /// The access log line's path, clipped to [`ACCESS_PATH_MAX`] bytes, its length and the
    /// socket's peer address (an allocation: only when access or debug logging is on).
    line: Option<AccessLine>,
}

/// What an access log line says of its request beyond the method and op.
struct AccessLine {
    path: String,
    /// The path's whole length in bytes (the line holds at most [`ACCESS_PATH_MAX`] of it).
    path_len: usize,
    peer: Option<std::net::SocketAddr>,
}

/// The longest path an access log line holds, in bytes. Bug "access log flood" (ops probe
/// of 2026-11-29): with `--access-log` every request logged its whole path (up to 64 KiB)
/// unthrottled, so a client without a token wrote 197 MB of log in 3 s.
pub(crate) const ACCESS_PATH_MAX: usize = 256;

impl AccessLine {
    fn of(req: &Request) -> AccessLine {
        let whole = req.uri().path();
        let mut end = whole.len().min(ACCESS_PATH_MAX);
        while !whole.is_char_boundary(end) {
            end -= 1;
        }
        AccessLine {
            path: whole[..end].to_string(),
            path_len: whole.len(),
            peer: req
                .extensions()
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0),
        }
    }
}

impl Metrics {
    /// Counts and times every request and the bytes of its bodies (part of the one
    /// middleware, `http::gate`): `start` before the request is handled, `finish` with its
    /// response.
    pub(crate) fn start(&self, req: Request) -> (Request, Started) {
        let method = req.method().clone();
        let started = Started {
            at: Instant::now(),
            op: op_of(&method, req.uri().path()),
            line: (self.access_log()
                || tracing::enabled!(target: "tsblob::access", tracing::Level::DEBUG))
            .then(|| AccessLine::of(&req)),
            method,
        };
        let req = req.map(|b| Body::new(Counted::new(b, self.received.clone())));
        self.in_flight.inc();
        (req, started)
    }

    /// The end of what [`Metrics::start`] began: the response's counters and its body's.
    pub(crate) fn finish(&self, started: Started, resp: Response) -> Response {
        self.in_flight.dec();
        let Started {
            at,
            method,
            op,
            line,
        } = started;
        let took = at.elapsed();
        access_log(
            &method,
            op.name(),
            line.as_ref(),
            resp.status(),
            took,
            self.access_log(),
        );
        self.series.latency[op as usize]
            .get_or_init(|| self.latency.with_label_values(&[op.name()]))
            .observe(took.as_secs_f64());
        self.count(op, &method, resp.status());
        resp.map(|b| Body::new(Counted::new(b, self.sent.clone())))
    }

    /// Adds one to the requests answered with `status`.
    fn count(&self, op: Op, method: &Method, status: axum::http::StatusCode) {
        let m = method_index(method);
        let labels = || [op.name(), METHODS[m], status.as_str()];
        let kept = STATUSES
            .iter()
            .position(|&s| s == status.as_u16())
            .and_then(|s| {
                let at = (op as usize * METHODS.len() + m) * STATUSES.len() + s;
                self.series.requests.get(at)
            });
        match kept {
            Some(c) => c
                .get_or_init(|| self.requests.with_label_values(&labels()))
                .inc(),
            None => self.requests.with_label_values(&labels()).inc(),
        }
    }
}

/// The line of a request in the log (target `tsblob::access`): at info with
/// `--access-log`; otherwise at debug, so that a client's mistakes (4xx) do not fill the
/// log of a server that is fine. A server error (5xx) is logged at error either way (the
/// path is there when access logging or debug is on; `op` always). A request refused before
/// it was served (401, 403: anyone can send those, with no token) is throttled like the
/// other lines a client can cause (`log_throttle`); the path is clipped to
/// [`ACCESS_PATH_MAX`] bytes (`path_len` says how long it was).
fn access_log(
    method: &Method,
    op: &'static str,
    line: Option<&AccessLine>,
    status: axum::http::StatusCode,
    took: std::time::Duration,
    all: bool,
) {
    let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    let status_code = status.as_u16();
    let path = line.map(|l| l.path.as_str());
    let path_len = line.map(|l| l.path_len);
    let peer = line.and_then(|l| l.peer).map(tracing::field::display);
    let refused = matches!(status_code, 401 | 403);
    if status.is_server_error() {
        // Throttled: every 503 `busy` and 507 is one (`log_throttle`).
        crate::throttled!(error, "request_failed", target: "tsblob::access", %method, op, path, path_len, peer, status = status_code, micros, "request failed");
    } else if all && refused {
        crate::throttled!(info, "request_refused", target: "tsblob::access", %method, op, path, path_len, peer, status = status_code, micros, "request");
    } else if all {
        tracing::info!(target: "tsblob::access", %method, op, path, path_len, peer, status = status_code, micros, "request");
    } else {
        tracing::debug!(target: "tsblob::access", %method, op, path, path_len, peer, status = status_code, micros, "request");
    }
}

/// A body that counts its data bytes and, unlike `BodyExt::map_frame`, keeps its size hint
/// (without it every response would lose its `Content-Length`).
struct Counted {
    inner: Body,
    counter: IntCounter,
}

impl Counted {
    fn new(inner: Body, counter: IntCounter) -> Counted {
        Counted { inner, counter }
    }
}

impl http_body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &polled {
            if let Some(d) = f.data_ref() {
                self.counter.inc_by(d.len() as u64);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String)))]
pub async fn scrape(
    State(state): State<AppState>,
    Extension(caller): Extension<super::auth::Caller>,
) -> Result<Response, AppError> {
    caller.require_all_buckets("read the metrics")?;
    let store = state.store.clone();
    let (stats, buckets, tier) =
        blocking(move || Ok((store.stats(), store.list_buckets()?, store.tier_stats()))).await?;
    let m = &state.metrics;
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    m.bucket_bytes.reset();
    m.bucket_blocks.reset();
    for b in &buckets {
        let local = b.size.saturating_sub(b.tiered_size);
        let local_blocks = b.block_count.saturating_sub(b.tiered_blocks);
        for (tier, bytes, blocks) in [
            ("local", local, local_blocks),
            ("tiered", b.tiered_size, b.tiered_blocks),
        ] {
            m.bucket_bytes
                .with_label_values(&[&b.name, tier])
                .set(clamp(bytes));
            m.bucket_blocks
                .with_label_values(&[&b.name, tier])
                .set(clamp(blocks));
        }
    }
    if tier.is_some() && m.tier_registered.set(()).is_ok() {
        for g in &m.tier {
            m.registry.register(g.collector()).map_err(|e| {
                AppError::internal(format!("registering the tier metrics failed: {e}"))
            })?;
        }
    }
    let counters = m.scrape_lock.lock();
    if let Some(t) = &tier {
        for (g, (_, _, _, f)) in m.tier.iter().zip(TIER_METRICS) {
            g.set(f(t));
        }
    }
    m.memory_used.set(clamp(state.bodies.used()));
    m.memory_limit.set(clamp(state.bodies.limit()));
    m.disk_bytes.set(clamp(stats.disk_bytes));
    m.free_bytes.set(clamp(stats.free_bytes));
    m.records.set(clamp(stats.record_count));
    m.buckets.set(clamp(stats.bucket_count));
    for (c, v) in [
        (&m.evicted_blocks, stats.evicted_blocks),
        (&m.expired_blocks, stats.expired_blocks),
    ] {
        raise(c, v);
    }
    drop(counters);
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&m.registry.gather(), &mut out)
        .map_err(|e| AppError::internal(format!("encoding metrics failed: {e}")))?;
    let mut resp = out.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_have_low_cardinality() {
        let op = |m: &Method, p: &str| op_of(m, p).name();
        assert_eq!(op(&Method::GET, "/api/v1/b"), "bucket");
        assert_eq!(op(&Method::POST, "/api/v1/b/cams"), "bucket");
        assert_eq!(op(&Method::POST, "/api/v1/b/cams/a/b"), "record_write");
        assert_eq!(op(&Method::GET, "/api/v1/b/cams/a/query"), "query");
        assert_eq!(op(&Method::POST, "/api/v1/b/cams/a/batch"), "batch");
        assert_eq!(op(&Method::GET, "/api/v1/tokens/x"), "tokens");
        assert_eq!(op(&Method::GET, "/health"), "health");
        assert_eq!(op(&Method::GET, "/whatever/../x"), "other");
        let odd = Method::from_bytes(b"BREW").unwrap();
        assert_eq!(method_label(&odd), "other");
        assert_eq!(method_label(&Method::PATCH), "PATCH");
    }

    /// The kept series are the vectors' own: a request counted through the cache and one
    /// counted by its labels (a status outside `STATUSES`) land in the scrape as before.
    #[test]
    fn kept_series_count_into_the_scraped_ones() {
        use axum::http::StatusCode;
        let m = Metrics::new().unwrap();
        for _ in 0..3 {
            m.count(Op::RecordWrite, &Method::POST, StatusCode::CREATED);
        }
        m.count(Op::RecordWrite, &Method::POST, StatusCode::IM_A_TEAPOT);
        m.count(
            Op::Other,
            &Method::from_bytes(b"BREW").unwrap(),
            StatusCode::NOT_FOUND,
        );
        let started = Started {
            at: Instant::now(),
            method: Method::GET,
            op: Op::Health,
            line: None,
        };
        let _ = m.finish(started, Response::new(Body::empty()));
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&m.registry.gather(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        for line in [
            r#"tsblob_http_requests_total{method="POST",op="record_write",status="201"} 3"#,
            r#"tsblob_http_requests_total{method="POST",op="record_write",status="418"} 1"#,
            r#"tsblob_http_requests_total{method="other",op="other",status="404"} 1"#,
            r#"tsblob_http_requests_total{method="GET",op="health",status="200"} 1"#,
            r#"tsblob_http_request_duration_seconds_count{op="health"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains(r#"op="record_read""#), "{text}");
    }
}
