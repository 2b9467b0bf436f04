//! Prometheus metrics: requests, bytes, latencies (a middleware around every route) and
//! the store's disk usage, free space and quota evictions (read at scrape time).

use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::errors::{blocking, AppError};
use super::AppState;

/// Every metric of a server.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    received: IntCounter,
    sent: IntCounter,
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
    evicted_blocks: IntGauge,
    expired_blocks: IntGauge,
    /// Per bucket and tier (`local`, `tiered`): bytes and blocks.
    bucket_bytes: IntGaugeVec,
    bucket_blocks: IntGaugeVec,
    /// The tier's counters (`TIER_GAUGES`), set at scrape time when there is a tier.
    tier: Vec<IntGauge>,
    /// The tier gauges are registered on the first scrape of a server with a tier.
    tier_registered: std::sync::OnceLock<()>,
}

/// Gauges of the tier: name, help, and the counter of `TierStats` each shows.
type TierField = fn(&tsblob_storage::TierStats) -> u64;
const TIER_GAUGES: &[(&str, &str, TierField)] = &[
    (
        "tsblob_tier_available",
        "1 if the object store answered its last call, else 0",
        |t| u64::from(t.available),
    ),
    (
        "tsblob_tier_upload_queue",
        "Sealed blocks waiting for upload",
        |t| t.upload_queue,
    ),
    (
        "tsblob_tier_uploaded_blocks",
        "Blocks uploaded and verified since start",
        |t| t.uploaded_blocks,
    ),
    (
        "tsblob_tier_uploaded_bytes",
        "Bytes of blocks uploaded since start",
        |t| t.uploaded_bytes,
    ),
    (
        "tsblob_tier_upload_errors",
        "Failed uploads since start (retried)",
        |t| t.upload_errors,
    ),
    (
        "tsblob_tier_gets",
        "Ranged GETs of tiered records since start",
        |t| t.gets,
    ),
    (
        "tsblob_tier_get_errors",
        "Failed GETs of tiered records since start",
        |t| t.get_errors,
    ),
    (
        "tsblob_tier_cache_hits",
        "Reads of tiered records served by the range cache",
        |t| t.cache_hits,
    ),
    (
        "tsblob_tier_cache_misses",
        "Reads of tiered records the range cache missed",
        |t| t.cache_misses,
    ),
    ("tsblob_tier_cache_bytes", "Bytes in the range cache", |t| {
        t.cache_bytes
    }),
    (
        "tsblob_tier_deleted_objects",
        "Objects deleted (FIFO, retention, removal) since start",
        |t| t.deleted_objects,
    ),
    (
        "tsblob_tier_pending_deletes",
        "Object deletions waiting for the store",
        |t| t.pending_deletes,
    ),
    (
        "tsblob_tier_pending_sidecars",
        "Heads sidecars of tiered blocks waiting to be uploaded again (removals, label updates)",
        |t| t.pending_sidecars,
    ),
];

impl Metrics {
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
            evicted_blocks: g(
                "tsblob_quota_evicted_blocks",
                "Blocks removed by FIFO quotas since the server started",
            )?,
            expired_blocks: g(
                "tsblob_retention_expired_blocks",
                "Blocks removed by age-based retention (max_age) since the server started",
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
            tier: TIER_GAUGES
                .iter()
                .map(|(n, h, _)| IntGauge::new(*n, *h))
                .collect::<Result<_, _>>()?,
            tier_registered: std::sync::OnceLock::new(),
            registry,
        };
        m.registry.register(Box::new(m.bucket_bytes.clone()))?;
        m.registry.register(Box::new(m.bucket_blocks.clone()))?;
        m.registry.register(Box::new(m.requests.clone()))?;
        m.registry.register(Box::new(m.streams_refused.clone()))?;
        m.registry.register(Box::new(m.latency.clone()))?;
        for c in [&m.received, &m.sent, &m.query_bytes] {
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
            &m.evicted_blocks,
            &m.expired_blocks,
        ] {
            m.registry.register(Box::new(g.clone()))?;
        }
        Ok(m)
    }
}

/// The method as a metric label: one of a fixed set, whatever a client sends (HTTP allows
/// any token as a method, and each new label value would be a new series kept forever).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// A low-cardinality name for what a request does: the route template it falls under
/// (paths carry bucket and entry names, which never become label values).
fn op_of(method: &Method, path: &str) -> &'static str {
    let Some(rest) = path.strip_prefix("/api/v1/b") else {
        return match path {
            "/health" => "health",
            "/metrics" => "metrics",
            p if p.starts_with("/api/v1/tokens") || p == "/api/v1/me" => "tokens",
            p if p.starts_with("/api/v1/replications") => "replication",
            p if p.starts_with("/api/v1/") => "service",
            _ => "other",
        };
    };
    let segments = rest
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .count();
    match segments {
        0 | 1 => "bucket",
        _ if rest.ends_with("/batch") => "batch",
        _ if rest.ends_with("/query") => "query",
        _ if rest.ends_with("/info") || rest.ends_with("/histogram") => "entry",
        _ => match *method {
            Method::POST | Method::PUT => "record_write",
            Method::GET | Method::HEAD => "record_read",
            _ => "record_other",
        },
    }
}

/// What [`Metrics::start`] noted of a request, for [`Metrics::finish`].
pub(crate) struct Started {
    at: Instant,
    method: Method,
    op: &'static str,
    /// The access log line's path (an allocation: only when debug logging is on).
    path: Option<String>,
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
            path: tracing::enabled!(tracing::Level::DEBUG).then(|| req.uri().path().to_string()),
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
            path,
        } = started;
        if let Some(path) = path {
            tracing::debug!(
                %method,
                path,
                status = resp.status().as_u16(),
                micros = at.elapsed().as_micros() as u64,
                "request"
            );
        }
        self.latency
            .with_label_values(&[op])
            .observe(at.elapsed().as_secs_f64());
        self.requests
            .with_label_values(&[op, method_label(&method), resp.status().as_str()])
            .inc();
        resp.map(|b| Body::new(Counted::new(b, self.sent.clone())))
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
    if let Some(t) = &tier {
        if m.tier_registered.set(()).is_ok() {
            for g in &m.tier {
                m.registry.register(Box::new(g.clone())).map_err(|e| {
                    AppError::internal(format!("registering the tier metrics failed: {e}"))
                })?;
            }
        }
        for (g, (_, _, f)) in m.tier.iter().zip(TIER_GAUGES) {
            g.set(clamp(f(t)));
        }
    }
    m.memory_used.set(clamp(state.bodies.used()));
    m.memory_limit.set(clamp(state.bodies.limit()));
    m.disk_bytes.set(clamp(stats.disk_bytes));
    m.free_bytes.set(clamp(stats.free_bytes));
    m.records.set(clamp(stats.record_count));
    m.buckets.set(clamp(stats.bucket_count));
    m.evicted_blocks.set(clamp(stats.evicted_blocks));
    m.expired_blocks.set(clamp(stats.expired_blocks));
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
        assert_eq!(op_of(&Method::GET, "/api/v1/b"), "bucket");
        assert_eq!(op_of(&Method::POST, "/api/v1/b/cams"), "bucket");
        assert_eq!(op_of(&Method::POST, "/api/v1/b/cams/a/b"), "record_write");
        assert_eq!(op_of(&Method::GET, "/api/v1/b/cams/a/query"), "query");
        assert_eq!(op_of(&Method::POST, "/api/v1/b/cams/a/batch"), "batch");
        assert_eq!(op_of(&Method::GET, "/api/v1/tokens/x"), "tokens");
        assert_eq!(op_of(&Method::GET, "/health"), "health");
        assert_eq!(op_of(&Method::GET, "/whatever/../x"), "other");
        let odd = Method::from_bytes(b"BREW").unwrap();
        assert_eq!(method_label(&odd), "other");
        assert_eq!(method_label(&Method::PATCH), "PATCH");
    }
}
