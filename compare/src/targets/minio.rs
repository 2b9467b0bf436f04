//! MinIO through aws-sdk-s3, set up as the SDK's documentation recommends for an S3-compatible
//! store: path-style addressing, a fixed region, static credentials, a behavior version, and
//! checksums only when an operation requires them (the SDK's defaults since 1.69 add CRC32
//! checksums to every PUT and GET, which costs client CPU and which MinIO does not need).
//!
//! Keys are `<entry>/<zero-padded µs timestamp>`, so lexical order is time order and a range
//! read is the best an S3 user can do: `ListObjectsV2` from `start-after`, stopping at the end
//! key, then GETs with the concurrency's worth in flight.

use std::time::Instant;

use anyhow::{Context, Result};
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use bytes::Bytes;
use futures_util::stream::{self, StreamExt, TryStreamExt};

use super::{BatchRecord, PointRead, ReadOutcome, Target, TargetKind};
use crate::workload::{FifoSpec, SizePlan, CONTENT_TYPE};

/// Region the client signs for (MinIO accepts any unless configured otherwise).
const REGION: &str = "us-east-1";

/// A MinIO server reached through the S3 API.
pub struct Minio {
    s3: aws_sdk_s3::Client,
    concurrency: usize,
    /// `minio --version` of a spawned binary, when known.
    binary_version: Option<String>,
}

/// The aws-sdk-s3 settings of this target, the same as the server's tier (its
/// `tier::s3_config`, which the server owns; a server test checks they agree): path-style
/// addressing, a behavior version, checksums only when an operation requires them, and
/// hyper's plain-HTTP connector with a pool of `pool` idle connections per host. The
/// caller adds region, credentials and endpoint.
pub fn s3_config(pool: usize) -> aws_sdk_s3::config::Builder {
    let http = aws_smithy_http_client::Builder::new()
        .pool_max_idle_per_host(pool)
        .build_http();
    aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .force_path_style(true)
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .http_client(http)
}

/// The object key of a record.
fn key(entry: &str, ts: u64) -> String {
    format!("{entry}/{ts:020}")
}

impl Minio {
    /// A client for the server at `url` with the given credentials.
    pub fn new(
        url: &str,
        access_key: &str,
        secret_key: &str,
        concurrency: usize,
        binary_version: Option<String>,
    ) -> Minio {
        let config = s3_config(concurrency)
            .region(Region::new(REGION))
            .credentials_provider(Credentials::new(
                access_key,
                secret_key,
                None,
                None,
                "tsblob-bench",
            ))
            .endpoint_url(url)
            .build();
        Minio {
            s3: aws_sdk_s3::Client::from_conf(config),
            concurrency,
            binary_version,
        }
    }

    /// GETs one object, verifying it; answers its bytes and when (since `t0`) its first byte
    /// arrived.
    async fn get_verified(
        &self,
        bucket: &str,
        plan: &SizePlan,
        entry: u32,
        ts: u64,
        t0: Instant,
    ) -> Result<(u64, std::time::Duration)> {
        let name = plan.entry_name(entry);
        let sent = t0.elapsed();
        let read = self.read_point(bucket, &name, ts).await?;
        plan.verify(entry, ts, &read.payload, Some(&read.labels))?;
        Ok((read.payload.len() as u64, sent + read.ttfb))
    }
}

fn s3_err<E: std::error::Error + Send + Sync + 'static>(what: &str, e: E) -> anyhow::Error {
    // DisplayErrorContext prints the whole chain (service code, message, HTTP status).
    anyhow::anyhow!(
        "MinIO: {what}: {}",
        aws_sdk_s3::error::DisplayErrorContext(e)
    )
}

impl Target for Minio {
    fn kind(&self) -> TargetKind {
        TargetKind::Minio
    }

    async fn version(&self) -> Result<String> {
        Ok(self
            .binary_version
            .clone()
            .unwrap_or_else(|| "unknown (connected by --minio-url)".to_string()))
    }

    fn client_settings(&self) -> String {
        format!(
            "aws-sdk-s3 {}, force_path_style(true), region {REGION}, static credentials, \
             BehaviorVersion::latest(), request_checksum_calculation and \
             response_checksum_validation WhenRequired, default retry policy, hyper HTTP/1.1 \
             pool of {} idle connections per host; keys <entry>/<20-digit µs ts>; range reads \
             ListObjectsV2 (start-after, 1000 keys a page) then GETs",
            aws_sdk_s3::meta::PKG_VERSION,
            self.concurrency
        )
    }

    async fn create_bucket(&self, bucket: &str, _fifo: Option<&FifoSpec>) -> Result<()> {
        use aws_sdk_s3::error::ProvideErrorMetadata;
        // MinIO may answer `/minio/health/ready` before its object layer is up: on a loaded
        // machine a create then got 503 `XMinioServerNotInitialized` ("please try again",
        // `Retry-After: 60`), which the SDK's three quick attempts did not outlast
        // (compare_e2e failed so, 2026-11-28). Asked again for up to a minute.
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        loop {
            match self.s3.create_bucket().bucket(bucket).send().await {
                Ok(_) => return Ok(()),
                Err(e)
                    if e.code() == Some("XMinioServerNotInitialized")
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                }
                Err(e) => return Err(s3_err("create bucket", e)),
            }
        }
    }

    async fn write_one(
        &self,
        bucket: &str,
        entry: &str,
        ts: u64,
        labels: &[(String, String)],
        payload: Bytes,
    ) -> Result<()> {
        let mut put = self
            .s3
            .put_object()
            .bucket(bucket)
            .key(key(entry, ts))
            .content_type(CONTENT_TYPE)
            .body(payload.into());
        for (k, v) in labels {
            put = put.metadata(k, v);
        }
        put.send().await.map_err(|e| s3_err("PUT", e))?;
        Ok(())
    }

    fn batch_support(&self) -> Result<(), &'static str> {
        Err("S3 has no batch write: each object is its own PUT")
    }

    async fn write_batch(
        &self,
        bucket: &str,
        entry: &str,
        records: Vec<BatchRecord>,
    ) -> Result<(u64, Option<String>)> {
        // Not measured (batch_support says n/a): used to load the same records as the other
        // targets so the read phases compare equal data.
        let results: Vec<Result<()>> = stream::iter(records)
            .map(|r| async move {
                self.write_one(bucket, entry, r.ts, &r.labels, r.payload)
                    .await
            })
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await;
        let failed: Vec<String> = results
            .into_iter()
            .filter_map(|r| r.err().map(|e| format!("{e:#}")))
            .collect();
        Ok((failed.len() as u64, failed.into_iter().next()))
    }

    async fn query(
        &self,
        bucket: &str,
        plan: &SizePlan,
        entry: u32,
        start: u64,
        stop: u64,
        parallel: usize,
    ) -> Result<ReadOutcome> {
        let t0 = Instant::now();
        let name = plan.entry_name(entry);
        let end_key = key(&name, stop);
        let mut out = ReadOutcome::default();
        let mut token: Option<String> = None;
        loop {
            let mut list = self
                .s3
                .list_objects_v2()
                .bucket(bucket)
                .prefix(format!("{name}/"))
                .max_keys(1000);
            list = match &token {
                Some(t) => list.continuation_token(t),
                None if start > 0 => list.start_after(key(&name, start - 1)),
                None => list,
            };
            let page = list.send().await.map_err(|e| s3_err("ListObjectsV2", e))?;
            out.requests += 1;
            let mut stamps = Vec::new();
            let mut reached_end = false;
            for obj in page.contents() {
                let k = obj.key().unwrap_or_default();
                if k >= end_key.as_str() {
                    reached_end = true;
                    break;
                }
                let ts: u64 = k
                    .rsplit('/')
                    .next()
                    .and_then(|t| t.parse().ok())
                    .with_context(|| format!("MinIO listed a key {k:?} this run never wrote"))?;
                stamps.push(ts);
            }
            out.requests += stamps.len() as u64;
            let got: Vec<(u64, std::time::Duration)> = stream::iter(stamps)
                .map(|ts| self.get_verified(bucket, plan, entry, ts, t0))
                .buffered(parallel.max(1))
                .try_collect()
                .await?;
            for (bytes, _) in &got {
                out.records += 1;
                out.bytes += bytes;
            }
            if out.ttfb.is_none() {
                out.ttfb = got.iter().map(|(_, first)| *first).min();
            }
            token = page.next_continuation_token().map(str::to_string);
            if reached_end || token.is_none() || page.is_truncated() != Some(true) {
                break;
            }
        }
        Ok(out)
    }

    async fn read_point(&self, bucket: &str, entry: &str, ts: u64) -> Result<PointRead> {
        let t0 = Instant::now();
        let resp = self
            .s3
            .get_object()
            .bucket(bucket)
            .key(key(entry, ts))
            .send()
            .await
            .map_err(|e| s3_err("GET", e))?;
        let labels: Vec<(String, String)> = resp
            .metadata()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let mut body = resp.body;
        let mut payload = Vec::new();
        let mut ttfb = None;
        while let Some(chunk) = body.try_next().await.map_err(|e| s3_err("GET body", e))? {
            ttfb.get_or_insert_with(|| t0.elapsed());
            payload.extend_from_slice(&chunk);
        }
        Ok(PointRead {
            payload: payload.into(),
            labels,
            ttfb: ttfb.unwrap_or_else(|| t0.elapsed()),
        })
    }

    fn fifo_support(&self) -> Result<(), &'static str> {
        Err("MinIO has no size quota with FIFO eviction")
    }

    fn when_support(&self) -> Result<(), &'static str> {
        Err("S3 lists objects by key prefix only: no condition on metadata")
    }

    async fn query_when(
        &self,
        _bucket: &str,
        _plan: &SizePlan,
        _entry: u32,
        _start: u64,
        _stop: u64,
        _when: &serde_json::Value,
    ) -> Result<(ReadOutcome, Vec<u64>)> {
        anyhow::bail!("S3 lists objects by key prefix only: no condition on metadata")
    }

    async fn bucket_size(&self, _bucket: &str) -> Result<u64> {
        anyhow::bail!("MinIO: bucket size is not measured (no FIFO quota)")
    }
}
