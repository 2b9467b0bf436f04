//! The S3 client of the tier (see the module above for the outage and damage rules).

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::{ByteStream, SdkBody};
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumMode, ChecksumType, CompletedMultipartUpload, CompletedPart,
};
use base64::Engine;
use std::sync::Arc;
use tsblob_storage::{Listed, ObjectError, ObjectHead, ObjectStore, PendingGet};

/// Blocks larger than this go up in parts of this size.
const PART: u64 = 16 << 20;
/// The most a whole-object GET reserves before its first byte (its buffer grows past it).
const WHOLE_RESERVE: u64 = 64 << 20;
/// The longest object a whole-object GET reads (tsblob reads only its small objects whole:
/// heads sidecars and bucket settings); a longer answer fails as
/// [`ObjectError::Oversized`] instead of growing in memory.
pub const WHOLE_MAX: u64 = 256 << 20;
// The engine never writes a sidecar longer than this reads whole.
const _: () = assert!(tsblob_storage::HEADS_MAX as u64 <= WHOLE_MAX);
/// `--tier-list-max-keys`'s default (declared with the flag, in `config.rs`).
pub use crate::config::DEFAULT_TIER_LIST_MAX_KEYS as DEFAULT_LIST_MAX_KEYS;
/// A listing (all its pages) ends within this many times `--tier-timeout`; each page is
/// one call of its own, bounded by `--tier-timeout` as any call.
pub const LIST_TIME_FACTOR: u32 = 10;
/// S3's longest key (and an ETag is shorter): a listing's longer strings are not S3's, and
/// would let a store grow a listing of few keys without bound.
const KEY_MAX: usize = 1024;
/// The most of an error answer's body the SDK may read (an S3 error document is a few
/// hundred bytes): past it the call fails and the connection is dropped.
const ERROR_ANSWER_MAX: u64 = 64 << 10;
/// The most of a successful answer's body the SDK may read, for every call but a GET
/// (whose body is streamed and bounded by what it asked for, see `get_body`): a listing
/// page of 1000 keys of S3's longest (1 KiB) is about 1.5 MiB, every other answer far
/// smaller.
const ANSWER_MAX: u64 = 8 << 20;
/// A listing's pages at most: those `--tier-list-max-keys` objects fill in S3's pages of
/// 1000 keys, plus this many (a store answering empty pages that say more follow, a new
/// continuation token each time, was listed ~1,200 times a second until the time bound).
const LIST_EXTRA_PAGES: u64 = 10;
/// The most characters of the store's message (and of the transport error's chain, twice
/// that) kept in an error: the text goes to the log and to `/health`.
const STORE_TEXT_MAX: usize = 512;
/// The object metadata key holding the CRC32C of the whole object.
const CRC_META: &str = "tsblob-crc32c";
/// How long a connection to the store may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A call of the reads' lane that has waited this long for the store (its answer, or the
/// next bytes of its body) makes the tier `degraded` in `/health` until it ends: a healthy
/// store answers a ranged GET in milliseconds.
pub const STALLED_AFTER: Duration = Duration::from_secs(2);
/// `--tier-timeout`'s default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// Reads, listings, HEADs and deletes.
    reads: Lane,
    /// Uploads: its threads run at the uploads' lower CPU priority, so a writer on a small
    /// device is not slowed by the sending of sealed blocks.
    uploads: Lane,
    bucket: String,
    prefix: String,
    endpoint: String,
    /// `--tier-timeout`: the longest a call, its body included, may take.
    timeout: Duration,
    /// `--tier-list-max-keys`: the most objects a listing holds.
    list_max_keys: u64,
}

/// A tokio runtime and the S3 client (with a connection pool of its own) whose calls run on
/// it. hyper drives each connection on a task of the runtime that opened it, for as long as
/// the connection lives in the pool: a client shared by two runtimes would receive the
/// bytes of a GET on a connection an upload had opened on the uploads' low-priority
/// thread (the reads' lane starved by the device's own query, the range-read benchmark's
/// 0.73 of plain GETs). One client per runtime keeps each call's I/O on its own lane.
struct Lane {
    rt: tokio::runtime::Runtime,
    /// Every call but GETs: answers' bodies read at most [`ANSWER_MAX`] (errors
    /// [`ERROR_ANSWER_MAX`]).
    s3: aws_sdk_s3::Client,
    /// GETs: error answers' bodies read at most [`ERROR_ANSWER_MAX`]; a success's body is
    /// streamed to `get_body`, which bounds it. The same connection pool as `s3`.
    gets: aws_sdk_s3::Client,
    /// The calls under way, for [`S3Store::stalled`].
    calls: Arc<Calls>,
}

/// The calls of a lane under way, each with the last time it heard from the store.
#[derive(Default)]
struct Calls {
    next: std::sync::atomic::AtomicU64,
    open: parking_lot::Mutex<std::collections::HashMap<u64, std::time::Instant>>,
}

impl Calls {
    fn begin(self: &Arc<Self>) -> Call {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.open.lock().insert(id, std::time::Instant::now());
        Call {
            calls: self.clone(),
            id,
        }
    }

    /// How long the call that has waited longest for the store has waited.
    fn longest_wait(&self) -> Option<Duration> {
        self.open.lock().values().min().map(|t| t.elapsed())
    }
}

/// A call under way (it ends when dropped).
struct Call {
    calls: Arc<Calls>,
    id: u64,
}

impl Call {
    /// The store answered something (a piece of the body): the wait starts again.
    fn progress(&self) {
        if let Some(t) = self.calls.open.lock().get_mut(&self.id) {
            *t = std::time::Instant::now();
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.calls.open.lock().remove(&self.id);
    }
}

impl Lane {
    /// Runs the future `call` makes of this lane's client, and waits for it, from any
    /// thread.
    fn run<T: Send + 'static, F: Future<Output = Result<T, ObjectError>> + Send + 'static>(
        &self,
        call: impl FnOnce(aws_sdk_s3::Client) -> F,
    ) -> Result<T, ObjectError> {
        answer(self.start(call))
    }

    /// Runs the call on this lane's runtime; its answer comes through the receiver.
    fn start<T: Send + 'static, F: Future<Output = Result<T, ObjectError>> + Send + 'static>(
        &self,
        call: impl FnOnce(aws_sdk_s3::Client) -> F,
    ) -> std::sync::mpsc::Receiver<Result<T, ObjectError>> {
        self.start_tracked(|s3, _| call(s3))
    }

    /// [`Lane::start`], the call told of its [`Call`] (to note the progress of a body).
    fn start_tracked<
        T: Send + 'static,
        F: Future<Output = Result<T, ObjectError>> + Send + 'static,
    >(
        &self,
        call: impl FnOnce(aws_sdk_s3::Client, Arc<Call>) -> F,
    ) -> std::sync::mpsc::Receiver<Result<T, ObjectError>> {
        self.spawn_tracked(self.s3.clone(), call)
    }

    /// [`Lane::start_tracked`] of a GET (its client, `gets`, leaves a success's body to
    /// the call).
    fn start_get<T: Send + 'static, F: Future<Output = Result<T, ObjectError>> + Send + 'static>(
        &self,
        call: impl FnOnce(aws_sdk_s3::Client, Arc<Call>) -> F,
    ) -> std::sync::mpsc::Receiver<Result<T, ObjectError>> {
        self.spawn_tracked(self.gets.clone(), call)
    }

    fn spawn_tracked<
        T: Send + 'static,
        F: Future<Output = Result<T, ObjectError>> + Send + 'static,
    >(
        &self,
        s3: aws_sdk_s3::Client,
        call: impl FnOnce(aws_sdk_s3::Client, Arc<Call>) -> F,
    ) -> std::sync::mpsc::Receiver<Result<T, ObjectError>> {
        let tracked = Arc::new(self.calls.begin());
        let fut = call(s3, tracked.clone());
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.rt.spawn(async move {
            let got = fut.await;
            drop(tracked);
            let _ = tx.send(got);
        });
        rx
    }
}

/// Waits for the answer of a call started on a lane.
fn answer<T>(rx: std::sync::mpsc::Receiver<Result<T, ObjectError>>) -> Result<T, ObjectError> {
    rx.recv().unwrap_or_else(|_| {
        Err(ObjectError::Unavailable(
            "the object store client is shutting down".into(),
        ))
    })
}

/// The aws-sdk-s3 settings of the tier's clients, as the SDK's documentation recommends
/// for S3-compatible stores: path-style addressing, a behavior version, and checksums only
/// when an operation requires them (the SDK's defaults since 1.69 add CRC32 checksums to
/// every PUT and GET, which costs CPU and which MinIO does not need). The caller adds
/// region, credentials, endpoint, timeouts and the connector.
pub fn s3_config() -> aws_sdk_s3::config::Builder {
    use aws_sdk_s3::config::{RequestChecksumCalculation, ResponseChecksumValidation};
    aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .force_path_style(true)
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
}

/// The body of one GET of `key`, whole or of `range` (start, length). It holds at most
/// the bytes asked for (a range's length, else [`WHOLE_MAX`]) and at most those its answer
/// declares (`Content-Length`): a store that sends more is broken or hostile, and the call
/// fails at the first byte too many, dropping the connection, rather than buffering on.
async fn get_body(
    s3: aws_sdk_s3::Client,
    bucket: String,
    key: &str,
    range: Option<(u64, u64)>,
    call: &Call,
) -> Result<Vec<u8>, ObjectError> {
    let asked = range.map_or(WHOLE_MAX, |(_, len)| len);
    let out = s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .set_range(range.map(|(start, len)| format!("bytes={start}-{}", start + len - 1)))
        .send()
        .await
        .map_err(|e| classify(&e, key))?;
    call.progress();
    let declared = out.content_length().and_then(|l| u64::try_from(l).ok());
    if let Some(len) = declared.filter(|&len| len > asked) {
        return Err(ObjectError::Oversized(format!(
            "reading {key:?}: the answer declares {len} bytes, over the {asked} asked for"
        )));
    }
    let limit = declared.unwrap_or(asked);
    // The body's pieces are appended to one buffer as they arrive (sized by the answer's
    // length, at most what a ranged GET asked for), each piece freed at once so the
    // connection reuses its memory: `collect()` would hold every piece until the end and
    // then copy them all into a new buffer.
    let reserve = range.map_or(WHOLE_RESERVE, |(_, len)| len);
    let cap = usize::try_from(declared.unwrap_or(0).min(reserve)).unwrap_or(0);
    let mut buf = Vec::with_capacity(cap);
    let mut body = out.body;
    while let Some(piece) = body
        .try_next()
        .await
        .map_err(|e| ObjectError::Unavailable(format!("reading {key:?}: {e}")))?
    {
        call.progress();
        if piece.len() as u64 > limit.saturating_sub(buf.len() as u64) {
            return Err(ObjectError::Oversized(format!(
                "reading {key:?}: the answer's body goes on past {limit} bytes ({})",
                if declared.is_some() {
                    "its Content-Length"
                } else if range.is_some() {
                    "the range asked for"
                } else {
                    "the longest object tsblob reads whole"
                }
            )));
        }
        buf.extend_from_slice(&piece);
    }
    // A range answered with fewer bytes than asked, its body ending where its
    // Content-Length says: the object is shorter than the index says (truncated), damage
    // no retry repairs, as a 416 is. Bug (hostile probe of 2026-11-30): the short bytes went
    // to the frame check, and the read answered 500 `corrupt_record`, not `tier_damaged`.
    if let Some((start, len)) = range {
        if (buf.len() as u64) < len {
            tracing::warn!(
                "reading {key:?}: the store answered {} of the {len} bytes asked for from byte {start}",
                buf.len()
            );
            return Err(ObjectError::Damaged(key.to_string()));
        }
    }
    Ok(buf)
}

impl S3Store {
    /// One GET of `key`, whole or of an HTTP `range` (`bytes=a-b`).
    fn fetch(&self, key: &str, range: Option<(u64, u64)>) -> Result<Vec<u8>, ObjectError> {
        answer(self.start_fetch(key, range))
    }

    /// Starts [`S3Store::fetch`]; the answer comes through the receiver.
    fn start_fetch(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> std::sync::mpsc::Receiver<Result<Vec<u8>, ObjectError>> {
        let (bucket, key) = (self.bucket.clone(), key.to_string());
        let timeout = self.timeout;
        self.reads.start_get(move |s3, call| async move {
            // One deadline for the whole call, its body included: the SDK's timeouts end
            // with the answer's head, and a body that trickles in forever would hold the
            // call (and a reader) for ever.
            tokio::time::timeout(timeout, get_body(s3, bucket, &key, range, &call))
                .await
                .unwrap_or_else(|_| {
                    Err(ObjectError::Unavailable(format!(
                        "reading {key:?}: the answer did not end within {timeout:?} (--tier-timeout)"
                    )))
                })
        })
    }

    /// One PUT of `data` with its CRC32C, as the checksum the store verifies on receipt and
    /// as metadata. The payload is not signed (`UNSIGNED-PAYLOAD`): the checksum covers it,
    /// and SHA-256 of every block would cost the device more CPU than the upload itself.
    fn put(&self, key: &str, data: Vec<u8>, crc: u32) -> Result<(), ObjectError> {
        let (bucket, key) = (self.bucket.clone(), key.to_string());
        self.uploads.run(|s3| async move {
            s3.put_object()
                .bucket(bucket)
                .key(&key)
                .metadata(CRC_META, format!("{crc:08x}"))
                .checksum_crc32_c(crc_b64(crc))
                .body(ByteStream::from(data))
                .customize()
                .disable_payload_signing()
                .send()
                .await
                .map_err(|e| classify(&e, &key))?;
            Ok(())
        })
    }

    /// A client for `s3://bucket/prefix` (the URL) at `endpoint` (None: AWS's own), over
    /// http:// or https:// (rustls; the system's root certificates plus those of the PEM
    /// file `ca`, for a private CA or a self-signed store).
    pub fn connect(
        url: &str,
        endpoint: Option<&str>,
        region: Option<&str>,
        ca: Option<&Path>,
    ) -> anyhow::Result<S3Store> {
        S3Store::connect_with_timeout(url, endpoint, region, ca, DEFAULT_TIMEOUT)
    }

    /// [`S3Store::connect`] whose calls end within `timeout` in total (`--tier-timeout`).
    pub fn connect_with_timeout(
        url: &str,
        endpoint: Option<&str>,
        region: Option<&str>,
        ca: Option<&Path>,
        timeout: Duration,
    ) -> anyhow::Result<S3Store> {
        let (bucket, prefix) = parse_url(url)?;
        if let Some(e) = endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                bail!("--tier-endpoint {e:?} must start with http:// or https://");
            }
        }
        let http = http_client(ca)?;
        let up_rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tsblob-s3-up")
            .on_thread_start(tsblob_storage::lower_thread_priority)
            .enable_all()
            .build()
            .context("cannot start the object store's upload runtime")?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tsblob-s3")
            .enable_all()
            .build()
            .context("cannot start the object store's runtime")?;
        // The provider chain's own HTTP calls (STS, SSO, container and instance
        // credentials) use the same connector.
        let mut loader =
            aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http.clone());
        // An S3-compatible endpoint ignores the region: don't ask the instance metadata
        // service for one (a second of timeouts off AWS).
        if let Some(r) = region.or(endpoint.map(|_| "us-east-1")) {
            loader = loader.region(aws_config::Region::new(r.to_string()));
        }
        let shared = rt.block_on(loader.load());
        // Reads: an attempt and the whole operation (its retries included) end within
        // `timeout`, so a hung store costs a read that long and no more. Uploads run in
        // the background: an attempt gets `timeout`, a retry as long again.
        let timeouts = |operation: Duration| {
            aws_sdk_s3::config::timeout::TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT.min(timeout))
                .operation_attempt_timeout(timeout)
                .operation_timeout(operation)
                .build()
        };
        let mut cfg = s3_config();
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
        // Each lane its own connection pool (see `Lane`), shared by its two clients.
        let (up_s3, up_gets) = bounded_clients(
            cfg.clone()
                .timeout_config(timeouts(timeout.saturating_mul(2)))
                .http_client(http_client(ca)?),
        );
        let uploads = Lane {
            rt: up_rt,
            s3: up_s3,
            gets: up_gets,
            calls: Arc::default(),
        };
        let (s3, gets) = bounded_clients(cfg.timeout_config(timeouts(timeout)).http_client(http));
        Ok(S3Store {
            reads: Lane {
                rt,
                s3,
                gets,
                calls: Arc::default(),
            },
            uploads,
            bucket,
            prefix,
            endpoint: endpoint.unwrap_or("AWS").to_string(),
            timeout,
            list_max_keys: DEFAULT_LIST_MAX_KEYS,
        })
    }

    /// This store with listings of at most `keys` objects (`--tier-list-max-keys`).
    pub fn with_list_max_keys(mut self, keys: u64) -> S3Store {
        self.list_max_keys = keys;
        self
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Keeps the uploads' runtime (one thread) busy for `d`, returning once it is: the
    /// regression test of the shared connection pool (a read must not wait for it).
    #[doc(hidden)]
    pub fn stall_uploads(&self, d: Duration) {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.uploads.rt.spawn(async move {
            let _ = tx.send(());
            std::thread::sleep(d);
        });
        let _ = rx.recv();
    }

    /// `HEAD` of the object-store bucket, its failure classified.
    fn head_bucket(&self) -> Result<(), ObjectError> {
        let bucket = self.bucket.clone();
        self.reads.run(|s3| async move {
            s3.head_bucket()
                .bucket(&bucket)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| classify(&e, &bucket))
        })
    }

    /// A read replica's first look at the bucket: a TLS failure (a certificate signed by
    /// an unknown CA, a wrong name) stops the start; an unreachable store does not (the
    /// replica refresh retries).
    pub fn check_reachable(&self) -> anyhow::Result<()> {
        let head = self.head_bucket();
        match head {
            Err(e @ ObjectError::Tls(_)) => bail!("{e}"),
            Err(e) => {
                tracing::warn!("the object store {}: {e}", self.describe());
                Ok(())
            }
            Ok(_) => Ok(()),
        }
    }

    /// Creates the bucket if it does not exist. A store that cannot be reached is not an
    /// error here (writes go on locally and uploads retry); one that refuses is.
    pub fn ensure_bucket(&self) -> anyhow::Result<()> {
        let head = self.head_bucket();
        match head {
            Ok(_) => return Ok(()),
            Err(ObjectError::NotFound(_)) => {}
            Err(ObjectError::Unavailable(why)) => {
                tracing::warn!("the object store {} is unreachable at start ({why}): writes continue locally, uploads retry", self.describe());
                return Ok(());
            }
            Err(e @ ObjectError::Tls(_)) => bail!("{e}"),
            Err(
                ObjectError::Refused(why)
                | ObjectError::Damaged(why)
                | ObjectError::Oversized(why),
            ) => bail!(
                "the object store refused access to bucket {:?} ({why}): check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or a profile) and their permissions",
                self.bucket
            ),
        }
        let bucket = self.bucket.clone();
        let created = self.reads.run(|s3| async move {
            match s3.create_bucket().bucket(&bucket).send().await {
                Ok(_) => Ok(()),
                Err(e) if e.code() == Some("BucketAlreadyOwnedByYou") => Ok(()),
                Err(e) => Err(ObjectError::Refused(describe(&e, &bucket))),
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

    /// Uploads in parts of [`PART`] bytes, each read once: its CRC32C is computed from the
    /// bytes in memory, sent with the part (checked by the store), and folded into the whole
    /// object's CRC32C, which completes the upload as a full-object checksum. Returns it.
    fn put_multipart(&self, key: &str, path: &Path, len: u64) -> Result<u32, ObjectError> {
        let (bucket, k) = (self.bucket.clone(), key.to_string());
        let create = self.uploads.run(|s3| async move {
            s3.create_multipart_upload()
                .bucket(&bucket)
                .key(&k)
                .checksum_algorithm(ChecksumAlgorithm::Crc32C)
                .checksum_type(ChecksumType::FullObject)
                .send()
                .await
                .map_err(|e| classify(&e, &k))
        })?;
        let Some(id) = create.upload_id().map(str::to_string) else {
            return Err(ObjectError::Refused(
                "no upload id in the multipart answer".into(),
            ));
        };
        let result = self.put_parts(key, path, len, &id);
        if result.is_err() {
            let (bucket, k, id) = (self.bucket.clone(), key.to_string(), id.clone());
            let _ = self.uploads.run(|s3| async move {
                let _ = s3
                    .abort_multipart_upload()
                    .bucket(&bucket)
                    .key(&k)
                    .upload_id(&id)
                    .send()
                    .await;
                Ok(())
            });
        }
        result
    }

    fn put_parts(&self, key: &str, path: &Path, len: u64, id: &str) -> Result<u32, ObjectError> {
        let mut file = open_block(path)?;
        let mut parts = Vec::new();
        let mut whole = 0u32;
        let mut at = 0u64;
        let mut n = 1i32;
        while at < len {
            let size = PART.min(len - at);
            let bytes = read_exact(&mut file, size)?;
            let crc = tsblob_storage::crc::crc32c(&bytes);
            whole = tsblob_storage::crc::combine(whole, crc, bytes.len() as u64);
            let sum = crc_b64(crc);
            let (bucket, k, up) = (self.bucket.clone(), key.to_string(), id.to_string());
            let s = sum.clone();
            let etag = self.uploads.run(|s3| async move {
                let part = s3
                    .upload_part()
                    .bucket(&bucket)
                    .key(&k)
                    .upload_id(&up)
                    .part_number(n)
                    .checksum_crc32_c(&s)
                    .body(ByteStream::from(bytes))
                    .send()
                    .await
                    .map_err(|e| classify(&e, &k))?;
                Ok(part.e_tag().map(str::to_string))
            })?;
            parts.push(
                CompletedPart::builder()
                    .part_number(n)
                    .set_e_tag(etag)
                    .checksum_crc32_c(sum)
                    .build(),
            );
            at += size;
            n += 1;
        }
        let (bucket, k, up) = (self.bucket.clone(), key.to_string(), id.to_string());
        self.uploads.run(|s3| async move {
            s3.complete_multipart_upload()
                .bucket(&bucket)
                .key(&k)
                .upload_id(&up)
                .checksum_type(ChecksumType::FullObject)
                .checksum_crc32_c(crc_b64(whole))
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map_err(|e| classify(&e, &k))?;
            Ok(())
        })?;
        Ok(whole)
    }
}

fn open_block(path: &Path) -> Result<std::fs::File, ObjectError> {
    std::fs::File::open(path)
        .map_err(|e| ObjectError::Refused(format!("opening the block to upload: {e}")))
}

/// The next `size` bytes of `file` (the block's length is the index's: a shorter file is
/// an error, not a short object).
fn read_exact(file: &mut std::fs::File, size: u64) -> Result<Vec<u8>, ObjectError> {
    use std::io::Read;
    let mut buf = vec![0u8; size as usize];
    file.read_exact(&mut buf)
        .map_err(|e| ObjectError::Refused(format!("reading the block to upload: {e}")))?;
    Ok(buf)
}

/// Every object under `prefix`, at most `max_keys` of them in at most
/// [`max_pages`]`(max_keys)` pages (more of either is [`ObjectError::Oversized`]).
async fn list_bounded(
    s3: aws_sdk_s3::Client,
    bucket: String,
    prefix: &str,
    max_keys: u64,
) -> Result<Vec<Listed>, ObjectError> {
    let mut out = Vec::new();
    let most_pages = max_pages(max_keys);
    let mut seen = 0u64;
    let mut pages = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| classify(&e, prefix))?;
        seen += 1;
        // Checked before the next page is asked for: a store whose pages hold no keys but
        // always say more follow costs nothing against `max_keys`.
        if seen >= most_pages && page.is_truncated() == Some(true) {
            return Err(ObjectError::Oversized(format!(
                "listing {prefix:?}: more than {most_pages} pages ({} objects read; --tier-list-max-keys {max_keys} fill at most {} pages of 1000 keys, plus {LIST_EXTRA_PAGES}): the store keeps saying more pages follow",
                out.len() + page.contents().len(),
                most_pages - LIST_EXTRA_PAGES
            )));
        }
        for o in page.contents() {
            let Some(k) = o.key() else { continue };
            let etag = o.e_tag().unwrap_or_default();
            if k.len() > KEY_MAX || etag.len() > KEY_MAX {
                return Err(ObjectError::Oversized(format!(
                    "listing {prefix:?}: a key or ETag of over {KEY_MAX} bytes (S3's keys are at most that long)"
                )));
            }
            if out.len() as u64 >= max_keys {
                return Err(ObjectError::Oversized(format!(
                    "listing {prefix:?}: more than {max_keys} objects (--tier-list-max-keys; a tsblob prefix holds two per tiered block: raise it if the store really holds that many)"
                )));
            }
            out.push(Listed {
                key: k.to_string(),
                len: o.size().map_or(0, |s| s.max(0) as u64),
                etag: etag.to_string(),
            });
        }
    }
    Ok(out)
}

/// The most pages a listing of at most `max_keys` objects may take ([`LIST_EXTRA_PAGES`]
/// more than S3's pages of 1000 keys hold them in).
fn max_pages(max_keys: u64) -> u64 {
    max_keys.div_ceil(1000).saturating_add(LIST_EXTRA_PAGES)
}

/// S3's form of a CRC32C: base64 of its 4 big-endian bytes.
fn crc_b64(crc: u32) -> String {
    base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
}

/// A full-object CRC32C from S3's form (`None` for a composite `...-N` checksum).
fn crc_from_b64(s: &str) -> Option<u32> {
    let b = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
    Some(u32::from_be_bytes(b.try_into().ok()?))
}

/// An SDK error as the engine's kind: not found, refused (4xx), unavailable (no answer,
/// timeouts, 5xx), or oversized (a success whose body went past [`ANSWER_MAX`]). Its text
/// is [`describe`]'s: short, one line, never the answer's raw body or headers.
fn classify<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static>(
    e: &SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
    what: &str,
) -> ObjectError {
    match e {
        SdkError::ServiceError(s) => {
            let status = s.raw().status().as_u16();
            match (status, s.err().code()) {
                (404, _) | (_, Some("NoSuchKey" | "NoSuchBucket" | "NotFound")) => {
                    ObjectError::NotFound(what.to_string())
                }
                // A range past the object's end: the object is shorter than the index
                // says (truncated), which no retry repairs.
                (416, _) | (_, Some("InvalidRange")) => ObjectError::Damaged(what.to_string()),
                (500..=599, _) => ObjectError::Unavailable(describe(e, what)),
                _ => ObjectError::Refused(describe(e, what)),
            }
        }
        SdkError::ResponseError(r) => match r.raw().status().as_u16() {
            404 => ObjectError::NotFound(what.to_string()),
            416 => ObjectError::Damaged(what.to_string()),
            200..=299 if answer_too_long(e).is_some() => {
                ObjectError::Oversized(describe(e, what))
            }
            _ => ObjectError::Unavailable(describe(e, what)),
        },
        _ if tls_failure(e) => ObjectError::Tls(format!("{}; if the store's certificate is signed by a private authority (or is self-signed), give that certificate in PEM with --tier-ca FILE (or AWS_CA_BUNDLE)", describe(e, what))),
        _ => ObjectError::Unavailable(describe(e, what)),
    }
}

/// An SDK error as one short line, for the log and `/health` (security probe: the SDK's
/// `DisplayErrorContext` printed the store's message unbounded and the raw answer, headers
/// and body, so a 1 MB `<Message>` made `/health` 4 MB and a 20 MB one log lines of 80 MB).
/// An answer is its status, its S3 error code (`[A-Za-z0-9.]`) and message (one line of at
/// most [`STORE_TEXT_MAX`] characters); a redirect, the host it names only; an answer
/// that could not be read, its status and why; no answer, the error's chain of causes as
/// one line of at most twice [`STORE_TEXT_MAX`].
fn describe<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static>(
    e: &SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
    what: &str,
) -> String {
    use tsblob_proto::outbound::one_line;
    let text = match e {
        SdkError::ServiceError(s) => {
            let raw = s.raw();
            let status = raw.status().as_u16();
            if (300..400).contains(&status) {
                format!("HTTP {status}: {}", redirect_text(raw))
            } else {
                let mut t = format!("HTTP {status}");
                if let Some(code) = s.err().code().filter(|c| {
                    !c.is_empty()
                        && c.len() <= 64
                        && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')
                }) {
                    t.push(' ');
                    t.push_str(code);
                }
                let message = one_line(s.err().message().unwrap_or_default(), STORE_TEXT_MAX);
                if !message.is_empty() {
                    t.push_str(": ");
                    t.push_str(&message);
                }
                t
            }
        }
        SdkError::ResponseError(r) => {
            let status = r.raw().status().as_u16();
            let why = match answer_too_long(e) {
                Some(too) => too.to_string(),
                None => one_line(&causes(e), STORE_TEXT_MAX),
            };
            format!("HTTP {status}, an answer that could not be read: {why}")
        }
        _ => one_line(&causes(e), 2 * STORE_TEXT_MAX),
    };
    format!("{}: {text}", one_line(what, STORE_TEXT_MAX))
}

/// An error and its chain of sources, `: `-separated (no raw answer: an SDK error's
/// `Display` is its kind only).
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut at = e.source();
    while let Some(err) = at {
        // Stop early: the text is cut anyway.
        if out.len() > 4 * STORE_TEXT_MAX {
            break;
        }
        out.push_str(": ");
        out.push_str(&err.to_string());
        at = err.source();
    }
    out
}

/// A redirect described by the host its `Location` names only (its path and query may
/// carry what the store should not pass on), as replication does
/// (`tsblob_proto::outbound::redirect_message`).
fn redirect_text(raw: &aws_sdk_s3::config::http::HttpResponse) -> String {
    use tsblob_proto::outbound::one_line;
    let location = raw.headers().get("location").unwrap_or_default();
    let to = match location.parse::<hyper::Uri>() {
        Ok(u) if u.host().is_some() => {
            let host = u.host().unwrap_or_default();
            let host = match u.port_u16() {
                Some(p) => format!("{host}:{p}"),
                None => host.to_string(),
            };
            format!("a redirect to host {}", one_line(&host, 255))
        }
        Ok(_) if location.starts_with('/') => "a redirect within the store".to_string(),
        _ => "a redirect without a usable Location".to_string(),
    };
    format!("{to}: redirects are not followed (give --tier-endpoint the store's own URL, the one that answers without redirecting)")
}

/// The [`AnswerTooLong`] in the error's chain of sources, if a body went past its bound.
fn answer_too_long<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a AnswerTooLong> {
    let mut at = Some(e);
    while let Some(err) = at {
        if let Some(too) = err.downcast_ref::<AnswerTooLong>() {
            return Some(too);
        }
        at = err.source();
    }
    None
}

/// An answer's body went past the bound of its kind ([`ANSWER_MAX`], [`ERROR_ANSWER_MAX`]).
#[derive(Debug)]
struct AnswerTooLong {
    max: u64,
}

impl std::fmt::Display for AnswerTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "its body went on past {} bytes, the most tsblob reads of such an answer: it was cut off",
            self.max
        )
    }
}

impl std::error::Error for AnswerTooLong {}

/// The SDK reads the whole body of every answer it does not stream (every call's but a
/// GET's success: PUTs, parts, listings, deletes, bucket calls, and every error answer)
/// into memory before parsing it, with no bound of its own: an endless body took a device
/// to 9 GB in 25 s (security probe, outbound finding 1). This interceptor puts a bound
/// under it: the answer's body is replaced by one that fails past `ok_max` bytes for a
/// 2xx (`None`: not bounded here, a GET's streamed success) and past
/// [`ERROR_ANSWER_MAX`] for any other status. The call fails with [`AnswerTooLong`] in its
/// error (its connection dropped), and the caller retries it as any failure.
#[derive(Debug)]
struct BoundAnswers {
    ok_max: Option<u64>,
}

impl aws_sdk_s3::config::Intercept for BoundAnswers {
    fn name(&self) -> &'static str {
        "tsblob::BoundAnswers"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut aws_sdk_s3::config::interceptors::BeforeDeserializationInterceptorContextMut<
            '_,
        >,
        _: &aws_sdk_s3::config::RuntimeComponents,
        _: &mut aws_sdk_s3::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let answer = context.response_mut();
        let max = if answer.status().is_success() {
            match self.ok_max {
                Some(max) => max,
                None => return Ok(()),
            }
        } else {
            ERROR_ANSWER_MAX
        };
        let body = std::mem::replace(answer.body_mut(), SdkBody::taken());
        *answer.body_mut() = SdkBody::from_body_1_x(Capped {
            body,
            left: max,
            max,
        });
        Ok(())
    }
}

/// A body that fails once more than `max` bytes of it have come.
struct Capped {
    body: SdkBody,
    left: u64,
    max: u64,
}

impl http_body::Body for Capped {
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let frame = match std::pin::Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            let n = data.len() as u64;
            if n > self.left {
                self.left = 0;
                return Poll::Ready(Some(Err(Box::new(AnswerTooLong { max: self.max }))));
            }
            self.left -= n;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The two clients of a lane from its settings: one for every call but GETs, one for GETs
/// (see `Lane`), each with [`BoundAnswers`]; they share the settings' connector, so one
/// connection pool.
fn bounded_clients(cfg: aws_sdk_s3::config::Builder) -> (aws_sdk_s3::Client, aws_sdk_s3::Client) {
    let calls = cfg.clone().interceptor(BoundAnswers {
        ok_max: Some(ANSWER_MAX),
    });
    let gets = cfg.interceptor(BoundAnswers { ok_max: None });
    (
        aws_sdk_s3::Client::from_conf(calls.build()),
        aws_sdk_s3::Client::from_conf(gets.build()),
    )
}

/// Whether rustls refused the handshake (somewhere in the error's chain of sources).
fn tls_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(e);
    while let Some(err) = at {
        if err.is::<rustls::Error>() {
            return true;
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            if tls_failure(inner) {
                return true;
            }
        }
        at = err.source();
    }
    false
}

/// The connector: rustls (aws-lc-rs) with the system's roots plus the certificates of the PEM
/// file `ca`, checked here (the SDK would panic on a bad one at the first connection).
fn http_client(ca: Option<&Path>) -> anyhow::Result<aws_sdk_s3::config::SharedHttpClient> {
    use aws_smithy_http_client::tls;
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut trust = tls::TrustStore::default();
    if let Some(path) = ca {
        let pem = std::fs::read(path).with_context(|| {
            format!(
                "cannot read the CA file {} (--tier-ca or AWS_CA_BUNDLE)",
                path.display()
            )
        })?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                anyhow::anyhow!(
                    "the CA file {} is not PEM certificates: {e}",
                    path.display()
                )
            })?;
        let mut roots = rustls::RootCertStore::empty();
        for c in certs {
            roots.add(c).map_err(|e| {
                anyhow::anyhow!(
                    "the CA file {} holds a certificate rustls cannot use: {e}",
                    path.display()
                )
            })?;
        }
        if roots.is_empty() {
            bail!(
                "the CA file {} holds no certificate (expected PEM: -----BEGIN CERTIFICATE-----)",
                path.display()
            );
        }
        trust = trust.with_pem_certificate(pem);
    }
    Ok(aws_smithy_http_client::Builder::new()
        .pool_max_idle_per_host(16)
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .tls_context(tls::TlsContext::builder().with_trust_store(trust).build()?)
        .build_https())
}

impl ObjectStore for S3Store {
    fn put_file(&self, key: &str, path: &Path, len: u64) -> Result<u32, ObjectError> {
        if len > PART {
            return self.put_multipart(key, path, len);
        }
        // One read: the CRC32C is computed from the bytes in memory and sent with them.
        let data = read_exact(&mut open_block(path)?, len)?;
        let crc = tsblob_storage::crc::crc32c(&data);
        self.put(key, data, crc)?;
        Ok(crc)
    }

    fn put_bytes(&self, key: &str, data: &[u8]) -> Result<(), ObjectError> {
        self.put(key, data.to_vec(), tsblob_storage::crc::crc32c(data))
    }

    fn get_range(&self, key: &str, start: u64, len: u64) -> Result<Vec<u8>, ObjectError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        self.fetch(key, Some((start, len)))
    }

    fn start_get_range(&self, key: &str, start: u64, len: u64) -> Option<PendingGet> {
        (len > 0).then(|| PendingGet::new(self.start_fetch(key, Some((start, len)))))
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
        self.fetch(key, None)
    }

    fn head(&self, key: &str) -> Result<Option<ObjectHead>, ObjectError> {
        let (bucket, key) = (self.bucket.clone(), key.to_string());
        self.reads.run(|s3| async move {
            let head = s3
                .head_object()
                .bucket(bucket)
                .key(&key)
                .checksum_mode(ChecksumMode::Enabled)
                .send()
                .await;
            match head {
                // The store's own full-object CRC32C (what it verified on receipt), else
                // the metadata of objects written before checksums were read back.
                Ok(h) => Ok(Some(ObjectHead {
                    len: h.content_length().map_or(0, |l| l.max(0) as u64),
                    crc32c: h.checksum_crc32_c().and_then(crc_from_b64).or_else(|| {
                        h.metadata()
                            .and_then(|m| m.get(CRC_META))
                            .and_then(|v| u32::from_str_radix(v, 16).ok())
                    }),
                })),
                Err(e) => match classify(&e, &key) {
                    ObjectError::NotFound(_) => Ok(None),
                    other => Err(other),
                },
            }
        })
    }

    fn delete(&self, key: &str) -> Result<(), ObjectError> {
        let (bucket, key) = (self.bucket.clone(), key.to_string());
        self.reads.run(|s3| async move {
            match s3.delete_object().bucket(bucket).key(&key).send().await {
                Ok(_) => Ok(()),
                Err(e) => match classify(&e, &key) {
                    ObjectError::NotFound(_) => Ok(()),
                    other => Err(other),
                },
            }
        })
    }

    fn list(&self, prefix: &str) -> Result<Vec<Listed>, ObjectError> {
        let (bucket, prefix) = (self.bucket.clone(), prefix.to_string());
        let (max_keys, within) = (
            self.list_max_keys,
            self.timeout.saturating_mul(LIST_TIME_FACTOR),
        );
        self.reads.run(move |s3| async move {
            // Each page is a call of its own (bounded by `--tier-timeout`); a store that
            // always says more pages follow is stopped by the bounds of the whole walk:
            // its objects, its pages and its time.
            let walk = list_bounded(s3, bucket, &prefix, max_keys);
            tokio::time::timeout(within, walk).await.unwrap_or_else(|_| {
                Err(ObjectError::Unavailable(format!(
                    "listing {prefix:?} did not end within {within:?} ({LIST_TIME_FACTOR} times --tier-timeout)"
                )))
            })
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

    fn stalled(&self) -> Option<String> {
        let waited = self.reads.calls.longest_wait()?;
        (waited >= STALLED_AFTER).then(|| {
            format!(
                "a call has waited {:.1} s for the object store at {} (calls fail after {:?})",
                waited.as_secs_f64(),
                self.endpoint,
                self.timeout
            )
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// What a client of `cfg` sends for a GET: the URL without its signature, and the
    /// header names (a checksum mode would be one).
    fn presigned_get(cfg: aws_sdk_s3::config::Builder) -> (String, Vec<String>) {
        use aws_sdk_s3::config::{Credentials, Region};
        let conf = cfg
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("id", "secret", None, None, "test"))
            .endpoint_url("http://127.0.0.1:9")
            .build();
        let client = aws_sdk_s3::Client::from_conf(conf);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let expires =
            aws_sdk_s3::presigning::PresigningConfig::expires_in(Duration::from_secs(60)).unwrap();
        let req = rt
            .block_on(client.get_object().bucket("b").key("k").presigned(expires))
            .unwrap();
        let url = req.uri().split('?').next().unwrap().to_string();
        let mut headers: Vec<String> = req.headers().map(|(k, _)| k.to_string()).collect();
        headers.sort();
        (url, headers)
    }

    /// The benchmark's MinIO target talks S3 as the tier does: the server owns its
    /// settings (it took them from the benchmark crate before) and the two must agree.
    #[test]
    fn the_bench_minio_target_uses_the_tiers_s3_settings() {
        let ours = s3_config().build();
        let bench = tsblob_compare::targets::minio::s3_config(1).build();
        assert_eq!(
            ours.request_checksum_calculation(),
            bench.request_checksum_calculation()
        );
        assert_eq!(
            ours.response_checksum_validation(),
            bench.response_checksum_validation()
        );
        let (url, headers) = presigned_get(s3_config());
        assert_eq!(url, "http://127.0.0.1:9/b/k", "path-style addressing");
        assert_eq!(
            (url, headers),
            presigned_get(tsblob_compare::targets::minio::s3_config(1))
        );
    }

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
    fn a_listing_takes_the_pages_its_keys_fill_plus_ten() {
        assert_eq!(max_pages(DEFAULT_LIST_MAX_KEYS), 260);
        assert_eq!(max_pages(3000), 13);
        assert_eq!(max_pages(3001), 14);
        assert_eq!(max_pages(0), 10);
        assert_eq!(max_pages(u64::MAX), u64::MAX / 1000 + 11);
    }

    /// The bound under the SDK: a body of `max` bytes is read whole, one byte more fails
    /// with [`AnswerTooLong`] (which `classify` finds in the error's sources).
    #[test]
    fn a_capped_body_fails_past_its_bound() {
        use http_body_util::BodyExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let read = |len: usize, max: u64| {
            let body = Capped {
                body: SdkBody::from(vec![7u8; len]),
                left: max,
                max,
            };
            rt.block_on(body.collect()).map(|b| b.to_bytes().len())
        };
        assert_eq!(read(100, 100).unwrap(), 100);
        let err = read(101, 100).unwrap_err();
        let too = answer_too_long(err.as_ref()).unwrap();
        assert_eq!(too.max, 100);
        assert!(err.to_string().contains("past 100 bytes"), "{err}");
    }

    #[test]
    fn crc_is_base64_of_big_endian_bytes() {
        // CRC32C of "123456789" is e3069283.
        assert_eq!(tsblob_storage::crc::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc_b64(0xe306_9283), "4waSgw==");
    }
}
