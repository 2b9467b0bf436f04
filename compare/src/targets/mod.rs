//! The systems compared: one [`Target`] trait, one implementation per system.
//!
//! A target is given the seeded plan to check what it reads, so every implementation verifies
//! every record it returns (bytes, timestamp and, where the API returns them, labels) before
//! counting it.

pub mod minio;
pub mod reductstore;
pub mod tsblob;

use std::future::Future;
use std::time::Duration;

use anyhow::{bail, Result};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::workload::{FifoSpec, SizePlan};

/// Which system a target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// This project.
    Tsblob,
    /// MinIO through the S3 API.
    Minio,
    /// ReductStore through its HTTP API v1.
    Reductstore,
    /// The physical limit: a server on tsblob's stack that discards writes and answers reads
    /// from memory (each record from its own copy of the bytes), without an index
    /// (`crate::limit`).
    Limit,
    /// The physical limit of storing: `limit`, except that each write's body is appended to
    /// a file per entry (`crate::limit`, `--store`).
    #[serde(rename = "limit-store")]
    LimitStore,
}

impl TargetKind {
    /// Lower-case name used in flags and reports.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Tsblob => "tsblob",
            TargetKind::Minio => "minio",
            TargetKind::Reductstore => "reductstore",
            TargetKind::Limit => "limit",
            TargetKind::LimitStore => "limit-store",
        }
    }

    /// One of the two limit servers (`crate::limit`).
    pub fn is_limit(self) -> bool {
        matches!(self, TargetKind::Limit | TargetKind::LimitStore)
    }

    /// Parses a `--against` item.
    pub fn parse_peer(name: &str) -> Result<TargetKind> {
        match name.trim().to_ascii_lowercase().as_str() {
            "minio" => Ok(TargetKind::Minio),
            "reductstore" | "reduct" => Ok(TargetKind::Reductstore),
            "limit" => Ok(TargetKind::Limit),
            "limit-store" => Ok(TargetKind::LimitStore),
            other => bail!(
                "unknown peer {other:?} in --against: use minio, reductstore, limit, \
                 limit-store (a comma separated list of them)"
            ),
        }
    }
}

/// One record of a batch write.
#[derive(Debug, Clone)]
pub struct BatchRecord {
    /// Timestamp in µs.
    pub ts: u64,
    /// Labels.
    pub labels: Vec<(String, String)>,
    /// Payload.
    pub payload: Bytes,
}

/// What a range query returned, all of it verified.
#[derive(Debug, Clone, Default)]
pub struct ReadOutcome {
    /// Records returned and verified.
    pub records: u64,
    /// Payload bytes returned.
    pub bytes: u64,
    /// Requests made to answer the query (1 for a streaming query).
    pub requests: u64,
    /// From the start of the query to its first payload byte.
    pub ttfb: Option<Duration>,
}

/// A record read by timestamp.
#[derive(Debug, Clone)]
pub struct PointRead {
    /// Payload.
    pub payload: Bytes,
    /// Labels, as the target returned them.
    pub labels: Vec<(String, String)>,
    /// From sending the request to the first payload byte.
    pub ttfb: Duration,
}

/// The operations the phases need. Methods that a system cannot do say why in their `*_support`
/// answer, and the report marks the cell n/a with that reason.
pub trait Target: Send + Sync + 'static {
    /// Which system this is.
    fn kind(&self) -> TargetKind;

    /// The server's version, as it reports it.
    fn version(&self) -> impl Future<Output = Result<String>> + Send;

    /// How the client is set up (printed with the results).
    fn client_settings(&self) -> String;

    /// Creates a bucket; with `fifo`, one with a FIFO quota.
    fn create_bucket(
        &self,
        bucket: &str,
        fifo: Option<&FifoSpec>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Writes one record in one request.
    fn write_one(
        &self,
        bucket: &str,
        entry: &str,
        ts: u64,
        labels: &[(String, String)],
        payload: Bytes,
    ) -> impl Future<Output = Result<()>> + Send;

    /// `Err(reason)` when the system has no batch write.
    fn batch_support(&self) -> Result<(), &'static str> {
        Ok(())
    }

    /// Writes records in one request; answers how many of them failed, and the first
    /// failure's message.
    fn write_batch(
        &self,
        bucket: &str,
        entry: &str,
        records: Vec<BatchRecord>,
    ) -> impl Future<Output = Result<(u64, Option<String>)>> + Send;

    /// Reads every record of `entry` in `[start, stop)`, verifying each against `plan`.
    /// `parallel` bounds the requests the query may have in flight.
    fn query(
        &self,
        bucket: &str,
        plan: &SizePlan,
        entry: u32,
        start: u64,
        stop: u64,
        parallel: usize,
    ) -> impl Future<Output = Result<ReadOutcome>> + Send;

    /// `Err(reason)` when the system cannot filter a query on labels.
    fn when_support(&self) -> Result<(), &'static str> {
        Ok(())
    }

    /// Like [`Target::query`], with a condition in ReductStore's `when` language; answers the
    /// outcome and the timestamps returned, in order (every record verified).
    fn query_when(
        &self,
        bucket: &str,
        plan: &SizePlan,
        entry: u32,
        start: u64,
        stop: u64,
        when: &serde_json::Value,
    ) -> impl Future<Output = Result<(ReadOutcome, Vec<u64>)>> + Send;

    /// Reads one record by timestamp.
    fn read_point(
        &self,
        bucket: &str,
        entry: &str,
        ts: u64,
    ) -> impl Future<Output = Result<PointRead>> + Send;

    /// `Err(reason)` when the system has no size quota.
    fn fifo_support(&self) -> Result<(), &'static str> {
        Ok(())
    }

    /// Payload bytes the bucket holds, as the system reports them.
    fn bucket_size(&self, bucket: &str) -> impl Future<Output = Result<u64>> + Send;
}

/// A reqwest client for loopback HTTP/1.1 with a pool sized to the concurrency.
pub fn http_client(concurrency: usize) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(concurrency)
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(300))
        .build()
        .map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {e}"))
}

/// Turns a non-2xx answer into an error carrying the status and the body the server sent.
/// Reads a point-read answer whole: the payload, the labels of its headers (named
/// `<label_prefix><key>`), and the time to its first byte counted from `t0`.
pub async fn point_read_from(
    resp: reqwest::Response,
    t0: std::time::Instant,
    what: &str,
    label_prefix: &str,
) -> Result<PointRead> {
    let mut resp = ok_or_error(resp, what).await?;
    let labels = labels_from_headers(resp.headers(), label_prefix);
    let mut payload = Vec::new();
    let mut ttfb = None;
    while let Some(chunk) = resp.chunk().await? {
        ttfb.get_or_insert_with(|| t0.elapsed());
        payload.extend_from_slice(&chunk);
    }
    Ok(PointRead {
        payload: payload.into(),
        labels,
        ttfb: ttfb.unwrap_or_else(|| t0.elapsed()),
    })
}

pub async fn ok_or_error(resp: reqwest::Response, what: &str) -> Result<reqwest::Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let body = resp.text().await.unwrap_or_default();
    let body: String = body.chars().take(500).collect();
    bail!("{what}: {status}: {body}")
}

/// Labels found in headers named `<prefix><key>`.
pub fn labels_from_headers(
    headers: &reqwest::header::HeaderMap,
    prefix: &str,
) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            let key = name.as_str().strip_prefix(prefix)?;
            Some((key.to_string(), value.to_str().ok()?.to_string()))
        })
        .collect()
}
