//! The engine's [`ObjectStore`] over S3 (MinIO, AWS S3, Ceph, SeaweedFS...) with
//! aws-sdk-s3, on a tokio runtime of its own: the engine's tier threads and readers call it
//! blocking, from any thread (including tokio's blocking pool, where `block_on` of another
//! runtime would panic), so each call is spawned on this runtime and waited for on a
//! channel.
//!
//! Client settings are the comparison mode's (`tsblob_compare::targets::minio::s3_config`):
//! path-style addressing, checksums only where asked for. Credentials and region come from
//! aws-sdk's default provider chain (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, profiles,
//! container and instance roles); `--tier-region` overrides the region. Every call has
//! timeouts, so a store that stops answering fails a read with 503 rather than hanging it.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::{ByteStream, Length};
use aws_sdk_s3::types::{ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart};
use base64::Engine;
use tsblob_storage::{ObjectError, ObjectHead, ObjectStore, Store, StoreOptions, TierConfig};

use crate::config::{ServeArgs, TierMode};
use std::sync::Arc;

/// Blocks larger than this go up in parts of this size.
const PART: u64 = 16 << 20;
/// The object metadata key holding the CRC32C of the whole object.
const CRC_META: &str = "tsblob-crc32c";

/// The engine's tier settings for a `tsblob serve` (connects, and unless it is a replica,
/// makes sure the bucket exists).
pub fn open(args: &ServeArgs, mode: &TierMode) -> anyhow::Result<TierConfig> {
    let (url, upload) = match mode {
        TierMode::Tier { url, .. } => (url, true),
        TierMode::Replica { url } => (url, false),
    };
    let s3 = S3Store::connect(
        url,
        args.tier_endpoint.as_deref(),
        args.tier_region.as_deref(),
    )?;
    if upload {
        s3.ensure_bucket()?;
    }
    let prefix = s3.prefix().to_string();
    let mut cfg = TierConfig::new(Arc::new(s3), &prefix);
    cfg.cache_bytes = args.tier_cache;
    cfg.uploads = args.tier_uploads.max(1);
    cfg.upload = upload;
    Ok(cfg)
}

/// `--restore-from`: adopts the object store's blocks into the data folder's index (the
/// store opened without uploads, so nothing is swept or uploaded meanwhile), then closes it.
pub fn restore(data: &Path, opts: &StoreOptions) -> anyhow::Result<()> {
    let mut o = opts.clone();
    if let Some(t) = o.tier.as_mut() {
        t.upload = false;
    }
    let store = Store::open(data, o)?;
    let r = store
        .tier_refresh()
        .context("cannot restore from the object store")?;
    tracing::info!(
        "restored {} blocks ({} records) from the object store{}",
        r.adopted_blocks,
        r.adopted_records,
        if r.skipped.is_empty() {
            String::new()
        } else {
            format!("; skipped damaged sidecars {:?}", r.skipped)
        }
    );
    Ok(())
}

/// One refresh of a read replica (failures are logged: the next one retries).
pub fn refresh_once(store: &Store) {
    match store.tier_refresh() {
        Ok(r) if r.adopted_blocks + r.dropped_blocks > 0 => tracing::info!(
            "replica refresh: adopted {} blocks ({} records), dropped {}",
            r.adopted_blocks,
            r.adopted_records,
            r.dropped_blocks
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("replica refresh failed (retried): {e}"),
    }
}

/// A read replica's refresh loop, every `every`, on the blocking pool.
pub fn refresh_replica(store: Store, every: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let s = store.clone();
            if tokio::task::spawn_blocking(move || refresh_once(&s))
                .await
                .is_err()
            {
                tracing::error!("a replica refresh panicked");
            }
        }
    });
}

/// `s3://BUCKET/PREFIX` split.
pub fn parse_url(url: &str) -> anyhow::Result<(String, String)> {
    let Some(rest) = url.strip_prefix("s3://") else {
        bail!("tier URL {url:?} must look like s3://BUCKET or s3://BUCKET/PREFIX");
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.len() < 3
        || bucket.len() > 63
        || !bucket
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    {
        bail!("tier URL {url:?}: {bucket:?} is not an S3 bucket name (3 to 63 lower-case letters, digits, '-' and '.')");
    }
    Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
}

pub struct S3Store {
    rt: tokio::runtime::Runtime,
    s3: aws_sdk_s3::Client,
    bucket: String,
    prefix: String,
    endpoint: String,
}

impl S3Store {
    /// One GET of `key`, whole or of an HTTP `range` (`bytes=a-b`).
    fn fetch(&self, key: &str, range: Option<String>) -> Result<Vec<u8>, ObjectError> {
        let (s3, bucket, key) = (self.s3.clone(), self.bucket.clone(), key.to_string());
        self.run(async move {
            let out = s3
                .get_object()
                .bucket(bucket)
                .key(&key)
                .set_range(range)
                .send()
                .await
                .map_err(|e| classify(&e, &key))?;
            let body = out
                .body
                .collect()
                .await
                .map_err(|e| ObjectError::Unavailable(format!("reading {key:?}: {e}")))?;
            Ok(body.into_bytes().to_vec())
        })
    }

    /// A client for `s3://bucket/prefix` (the URL) at `endpoint` (None: AWS's own).
    pub fn connect(
        url: &str,
        endpoint: Option<&str>,
        region: Option<&str>,
    ) -> anyhow::Result<S3Store> {
        let (bucket, prefix) = parse_url(url)?;
        if endpoint.is_some_and(|e| !e.starts_with("http://")) {
            bail!("--tier-endpoint {:?}: only plain http:// endpoints are supported by this build (put a TLS-terminating proxy on loopback in front of an https store)", endpoint.unwrap_or_default());
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tsblob-s3")
            .enable_all()
            .build()
            .context("cannot start the object store's runtime")?;
        // The provider chain's own HTTP calls (container and instance credentials) use the
        // same plain-HTTP connector (those endpoints are http:// link-local addresses).
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(aws_smithy_http_client::Builder::new().build_http());
        // An S3-compatible endpoint ignores the region: don't ask the instance metadata
        // service for one (a second of timeouts off AWS).
        if let Some(r) = region.or(endpoint.map(|_| "us-east-1")) {
            loader = loader.region(aws_config::Region::new(r.to_string()));
        }
        let shared = rt.block_on(loader.load());
        let timeouts = aws_sdk_s3::config::timeout::TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(2))
            .operation_attempt_timeout(Duration::from_secs(30))
            .operation_timeout(Duration::from_secs(60))
            .build();
        let mut cfg = tsblob_compare::targets::minio::s3_config(16).timeout_config(timeouts);
        cfg = cfg.region(
            shared
                .region()
                .cloned()
                .unwrap_or_else(|| aws_config::Region::new("us-east-1")),
        );
        if let Some(c) = shared.credentials_provider() {
            cfg = cfg.credentials_provider(c);
        }
        if let Some(e) = endpoint {
            cfg = cfg.endpoint_url(e);
        }
        Ok(S3Store {
            rt,
            s3: aws_sdk_s3::Client::from_conf(cfg.build()),
            bucket,
            prefix,
            endpoint: endpoint.unwrap_or("AWS").to_string(),
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Runs `fut` on the store's runtime and waits for it, from any thread.
    fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, ObjectError>> + Send + 'static,
    ) -> Result<T, ObjectError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().unwrap_or_else(|_| {
            Err(ObjectError::Unavailable(
                "the object store client is shutting down".into(),
            ))
        })
    }

    /// Creates the bucket if it does not exist. A store that cannot be reached is not an
    /// error here (writes go on locally and uploads retry); one that refuses is.
    pub fn ensure_bucket(&self) -> anyhow::Result<()> {
        let (s3, bucket) = (self.s3.clone(), self.bucket.clone());
        let head = self.run(async move {
            s3.head_bucket()
                .bucket(&bucket)
                .send()
                .await
                .map_err(|e| classify(&e, &bucket))
        });
        match head {
            Ok(_) => return Ok(()),
            Err(ObjectError::NotFound(_)) => {}
            Err(ObjectError::Unavailable(why)) => {
                tracing::warn!("the object store {} is unreachable at start ({why}): writes continue locally, uploads retry", self.describe());
                return Ok(());
            }
            Err(ObjectError::Refused(why)) => bail!(
                "the object store refused access to bucket {:?} ({why}): check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or a profile) and their permissions",
                self.bucket
            ),
        }
        let (s3, bucket) = (self.s3.clone(), self.bucket.clone());
        let created = self.run(async move {
            match s3.create_bucket().bucket(&bucket).send().await {
                Ok(_) => Ok(()),
                Err(e) if e.code() == Some("BucketAlreadyOwnedByYou") => Ok(()),
                Err(e) => Err(ObjectError::Refused(
                    aws_sdk_s3::error::DisplayErrorContext(e).to_string(),
                )),
            }
        });
        match created {
            Ok(()) => {
                tracing::info!("bucket {:?} of the object store is ready", self.bucket);
                Ok(())
            }
            Err(e) => bail!(
                "bucket {:?} does not exist in the object store and could not be created ({e}): create it, or give credentials allowed to (s3:CreateBucket)",
                self.bucket
            ),
        }
    }

    async fn put_multipart(
        s3: aws_sdk_s3::Client,
        bucket: String,
        key: String,
        path: std::path::PathBuf,
        len: u64,
        crc: u32,
    ) -> Result<(), ObjectError> {
        let create = s3
            .create_multipart_upload()
            .bucket(&bucket)
            .key(&key)
            .metadata(CRC_META, format!("{crc:08x}"))
            .checksum_algorithm(ChecksumAlgorithm::Crc32C)
            .send()
            .await
            .map_err(|e| classify(&e, &key))?;
        let Some(id) = create.upload_id().map(str::to_string) else {
            return Err(ObjectError::Refused(
                "no upload id in the multipart answer".into(),
            ));
        };
        let mut parts = Vec::new();
        let mut at = 0u64;
        let mut n = 1i32;
        let result: Result<(), ObjectError> = async {
            while at < len {
                let size = PART.min(len - at);
                let bytes = read_part(&path, at, size).await?;
                let sum = crc_b64(crc32c::crc32c(&bytes));
                let part = s3
                    .upload_part()
                    .bucket(&bucket)
                    .key(&key)
                    .upload_id(&id)
                    .part_number(n)
                    .checksum_crc32_c(&sum)
                    .body(ByteStream::from(bytes))
                    .send()
                    .await
                    .map_err(|e| classify(&e, &key))?;
                parts.push(
                    CompletedPart::builder()
                        .part_number(n)
                        .set_e_tag(part.e_tag().map(str::to_string))
                        .checksum_crc32_c(sum)
                        .build(),
                );
                at += size;
                n += 1;
            }
            s3.complete_multipart_upload()
                .bucket(&bucket)
                .key(&key)
                .upload_id(&id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map_err(|e| classify(&e, &key))?;
            Ok(())
        }
        .await;
        if result.is_err() {
            let _ = s3
                .abort_multipart_upload()
                .bucket(&bucket)
                .key(&key)
                .upload_id(&id)
                .send()
                .await;
        }
        result
    }
}

async fn read_part(path: &Path, at: u64, size: u64) -> Result<Vec<u8>, ObjectError> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut f = tokio::fs::File::open(path)
        .await
        .map_err(|e| ObjectError::Refused(format!("opening the block to upload: {e}")))?;
    f.seek(std::io::SeekFrom::Start(at))
        .await
        .map_err(|e| ObjectError::Refused(format!("reading the block to upload: {e}")))?;
    let mut buf = vec![0u8; size as usize];
    f.read_exact(&mut buf)
        .await
        .map_err(|e| ObjectError::Refused(format!("reading the block to upload: {e}")))?;
    Ok(buf)
}

/// S3's form of a CRC32C: base64 of its 4 big-endian bytes.
fn crc_b64(crc: u32) -> String {
    base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
}

/// An SDK error as the engine's kind: not found, refused (4xx), or unavailable (no
/// answer, timeouts, 5xx).
fn classify<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static>(
    e: &SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
    what: &str,
) -> ObjectError {
    let text = aws_sdk_s3::error::DisplayErrorContext(e).to_string();
    match e {
        SdkError::ServiceError(s) => {
            let status = s.raw().status().as_u16();
            match (status, s.err().code()) {
                (404, _) | (_, Some("NoSuchKey" | "NoSuchBucket" | "NotFound")) => {
                    ObjectError::NotFound(what.to_string())
                }
                (500..=599, _) => ObjectError::Unavailable(text),
                _ => ObjectError::Refused(text),
            }
        }
        SdkError::ResponseError(r) if r.raw().status().as_u16() == 404 => {
            ObjectError::NotFound(what.to_string())
        }
        _ => ObjectError::Unavailable(text),
    }
}

impl ObjectStore for S3Store {
    fn put_file(&self, key: &str, path: &Path, len: u64, crc32c: u32) -> Result<(), ObjectError> {
        let (s3, bucket, key, path) = (
            self.s3.clone(),
            self.bucket.clone(),
            key.to_string(),
            path.to_path_buf(),
        );
        if len > PART {
            return self.run(S3Store::put_multipart(s3, bucket, key, path, len, crc32c));
        }
        self.run(async move {
            let body = ByteStream::read_from()
                .path(&path)
                .length(Length::Exact(len))
                .build()
                .await
                .map_err(|e| ObjectError::Refused(format!("reading the block to upload: {e}")))?;
            s3.put_object()
                .bucket(bucket)
                .key(&key)
                .metadata(CRC_META, format!("{crc32c:08x}"))
                .checksum_crc32_c(crc_b64(crc32c))
                .body(body)
                .send()
                .await
                .map_err(|e| classify(&e, &key))?;
            Ok(())
        })
    }

    fn put_bytes(&self, key: &str, data: &[u8]) -> Result<(), ObjectError> {
        let (s3, bucket, key, data) = (
            self.s3.clone(),
            self.bucket.clone(),
            key.to_string(),
            data.to_vec(),
        );
        self.run(async move {
            let crc = crc32c::crc32c(&data);
            s3.put_object()
                .bucket(bucket)
                .key(&key)
                .metadata(CRC_META, format!("{crc:08x}"))
                .checksum_crc32_c(crc_b64(crc))
                .body(ByteStream::from(data))
                .send()
                .await
                .map_err(|e| classify(&e, &key))?;
            Ok(())
        })
    }

    fn get_range(&self, key: &str, start: u64, len: u64) -> Result<Vec<u8>, ObjectError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        self.fetch(key, Some(format!("bytes={start}-{}", start + len - 1)))
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
        self.fetch(key, None)
    }

    fn head(&self, key: &str) -> Result<Option<ObjectHead>, ObjectError> {
        let (s3, bucket, key) = (self.s3.clone(), self.bucket.clone(), key.to_string());
        self.run(async move {
            match s3.head_object().bucket(bucket).key(&key).send().await {
                Ok(h) => Ok(Some(ObjectHead {
                    len: h.content_length().map_or(0, |l| l.max(0) as u64),
                    crc32c: h
                        .metadata()
                        .and_then(|m| m.get(CRC_META))
                        .and_then(|v| u32::from_str_radix(v, 16).ok()),
                })),
                Err(e) => match classify(&e, &key) {
                    ObjectError::NotFound(_) => Ok(None),
                    other => Err(other),
                },
            }
        })
    }

    fn delete(&self, key: &str) -> Result<(), ObjectError> {
        let (s3, bucket, key) = (self.s3.clone(), self.bucket.clone(), key.to_string());
        self.run(async move {
            match s3.delete_object().bucket(bucket).key(&key).send().await {
                Ok(_) => Ok(()),
                Err(e) => match classify(&e, &key) {
                    ObjectError::NotFound(_) => Ok(()),
                    other => Err(other),
                },
            }
        })
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ObjectError> {
        let (s3, bucket, prefix) = (self.s3.clone(), self.bucket.clone(), prefix.to_string());
        self.run(async move {
            let mut out = Vec::new();
            let mut pages = s3
                .list_objects_v2()
                .bucket(bucket)
                .prefix(&prefix)
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| classify(&e, &prefix))?;
                for o in page.contents() {
                    if let Some(k) = o.key() {
                        out.push((k.to_string(), o.size().map_or(0, |s| s.max(0) as u64)));
                    }
                }
            }
            Ok(out)
        })
    }

    fn describe(&self) -> String {
        let at = if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        };
        format!("{at} at {}", self.endpoint)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn urls_parse() {
        assert_eq!(
            parse_url("s3://tsblob-tier/edge/one/").unwrap(),
            ("tsblob-tier".to_string(), "edge/one".to_string())
        );
        assert_eq!(
            parse_url("s3://bkt").unwrap(),
            ("bkt".to_string(), String::new())
        );
        assert!(parse_url("http://bkt").is_err());
        assert!(parse_url("s3://Bad_Bucket/x").is_err());
    }

    #[test]
    fn crc_is_base64_of_big_endian_bytes() {
        // CRC32C of "123456789" is e3069283.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc_b64(0xe306_9283), "4waSgw==");
    }
}
