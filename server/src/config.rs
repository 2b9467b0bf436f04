//! `tsblob serve` configuration: every flag has a `TSBLOB_*` environment variable, and no
//! flag is needed at all (data in `./tsblob-data`, listening on `127.0.0.1:8686`).
//! `docs/operations.md` lists them; keep the two in step.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tsblob_storage::{BucketSettings, Compression, QuotaType, StoreOptions, SyncPolicy};

use crate::http::Limits;
use tsblob_proto::parse_size;

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}): use e.g. 30s, 2m"))
}

/// `--trusted-proxies`: an address or a CIDR network.
fn parse_net(s: &str) -> Result<ipnet::IpNet, String> {
    crate::http::auth::parse_allowlist(&[s.to_string()])
        .ok()
        .and_then(|v| v.into_iter().next())
        .ok_or_else(|| {
            format!(
                "{s:?} is not an IP address or a CIDR network: give e.g. 10.0.0.1 or 10.0.0.0/8"
            )
        })
}

/// `--listen` and `--reductstore-listen`: an IP address and port, or `localhost:PORT`
/// (127.0.0.1). No other host name is resolved: what the server binds, and whether that is
/// loopback (no token needed), must not depend on DNS. Bug (probe of 2026-11-30):
/// `--listen localhost:8686` was refused with a bare "invalid socket address syntax".
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    if let Some(port) = s
        .strip_prefix("localhost:")
        .and_then(|p| p.parse::<u16>().ok())
    {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    Err(format!(
        "{s:?} is not an IP address and port: give e.g. 127.0.0.1:8686, [::1]:8686 or 0.0.0.0:8686 (localhost:PORT is 127.0.0.1; other host names are not resolved; the port is at most 65535)"
    ))
}

/// `--max-attachment-size`: a size of at most 16 MiB (each change rewrites the entry's
/// attachments file whole).
fn parse_attachment_size(s: &str) -> Result<usize, String> {
    let n = parse_size(s)?;
    usize::try_from(n)
        .ok()
        .filter(|n| *n <= 16 << 20)
        .ok_or_else(|| format!("{s:?} is over 16MiB: attachments are small documents kept with an entry; keep large data in records"))
}

/// A path prefix: `/name` (one or more segments of letters, digits, `-`, `_`, `.`).
fn parse_prefix(s: &str) -> Result<String, String> {
    let p = s.trim_end_matches('/');
    let ok = p.starts_with('/')
        && p.len() > 1
        && p[1..].split('/').all(|seg| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        });
    if ok && p != "/api" && p != "/ui" {
        Ok(p.to_string())
    } else {
        Err(format!(
            "{s:?} is not a usable path prefix: give e.g. /reduct (not /api or /ui, which the native API uses)"
        ))
    }
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `--tier-list-max-keys`'s default: objects one listing holds at most (a tsblob prefix
/// holds two per tiered block, so 125,000 blocks: 8 TB of full 64 MiB blocks).
pub const DEFAULT_TIER_LIST_MAX_KEYS: u64 = 250_000;

/// Flags of `tsblob serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// A TOML file of settings whose keys are these flags' names without `--`
    /// (`max-body = "8GiB"`, `no-auth = true`, `allowed-hosts = ["a", "b"]`). A flag wins
    /// over its variable, which wins over the file, which wins over the default; an unknown
    /// key is an error.
    #[arg(long, env = "TSBLOB_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data folder (created if missing).
    #[arg(long, env = "TSBLOB_DATA", default_value = "./tsblob-data")]
    pub data: PathBuf,
    /// Address to listen on: an IP address and port (`localhost:PORT` is 127.0.0.1; no
    /// other host name is resolved). Beyond loopback, the server needs a token (--token, or one
    /// stored) or an explicit --no-auth to start.
    #[arg(long, env = "TSBLOB_LISTEN", default_value = "127.0.0.1:8686", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Serve https: the PEM file of the server's certificate chain (leaf first). Needs
    /// --tls-key. Default: plain http (or TLS at a reverse proxy).
    #[arg(long, env = "TSBLOB_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM file of --tls-cert's private key (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "TSBLOB_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Threads that run the HTTP connections (tokio's workers; engine work runs on its own
    /// threads besides). Default: one per CPU. On a small machine that mostly takes small
    /// single writes, one fewer than the CPUs leaves one to the writer thread
    /// (docs/benchmarks/workers-2026-11-28.md).
    #[arg(long, env = "TSBLOB_WORKER_THREADS", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub worker_threads: Option<usize>,
    /// When writes reach stable storage: always, periodic, periodic:<N>ms or never.
    #[arg(long, env = "TSBLOB_SYNC", default_value = "periodic")]
    pub sync: SyncPolicy,
    /// Admin token: when set (or once any token is created), every route but /health needs
    /// `Authorization: Bearer <token>`. Prefer the environment variable (ps shows flags).
    #[arg(long, env = "TSBLOB_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Serve without any token on a non-loopback --listen, on purpose: anyone who can reach
    /// the address may read and delete everything (on loopback, no token is the default).
    #[arg(long, env = "TSBLOB_NO_AUTH", conflicts_with = "token", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_auth: bool,
    /// Host names (`name` or `name:port`, comma-separated) answered besides localhost,
    /// 127.0.0.1 and [::1]; `*` answers any. Default: loopback names only on a loopback
    /// --listen (a page on another name resolving here, DNS rebinding, is refused); beyond
    /// loopback any name while requests need a token, and with --no-auth IP addresses and
    /// this machine's host name only.
    #[arg(long, env = "TSBLOB_ALLOWED_HOSTS", value_delimiter = ',', value_parser = crate::http::browser::parse_allowed_host)]
    pub allowed_hosts: Vec<String>,
    /// Origins of web applications that may call the API from a browser (CORS), such as
    /// https://dash.example.com; repeat or comma-separate. Default: none, browsers reach the
    /// API from the console (/ui/) only.
    #[arg(long, env = "TSBLOB_CORS_ORIGIN", value_delimiter = ',', value_parser = crate::http::browser::parse_origin)]
    pub cors_origin: Vec<String>,
    /// Reverse proxies (addresses or CIDR networks, comma-separated) whose
    /// `X-Forwarded-For` names the client for token IP allow-lists: from one of them, the
    /// client is the last address in it that is not a trusted proxy. Default: none, the
    /// client is the socket's peer and `X-Forwarded-For` is ignored.
    #[arg(long, env = "TSBLOB_TRUSTED_PROXIES", value_delimiter = ',', value_parser = parse_net)]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// How often tokens' last_access is written to the token file (at most; only when a
    /// token was used). A crash loses at most this much of it.
    #[arg(long, env = "TSBLOB_TOKEN_ACCESS_FLUSH", default_value = "10s", value_parser = parse_duration)]
    pub token_access_flush: Duration,
    /// Log filter: error, warn, info, debug, trace, or a tracing directive.
    #[arg(long, env = "TSBLOB_LOG", default_value = "info")]
    pub log: String,
    /// Log format: text (for people; coloured only when stderr is a terminal) or json (one
    /// JSON object a line, for journald, Loki, Elasticsearch...).
    #[arg(long, env = "TSBLOB_LOG_FORMAT", default_value = "text", value_enum)]
    pub log_format: LogFormat,
    /// Log every request at info level (target `tsblob::access`: method, path, status,
    /// duration). Without it a request is logged at debug, a server error (5xx) at error.
    #[arg(long, env = "TSBLOB_ACCESS_LOG", value_parser = clap::builder::BoolishValueParser::new())]
    pub access_log: bool,
    /// Largest request body (a single record or a whole batch).
    #[arg(long, env = "TSBLOB_MAX_BODY", default_value = "4GiB", value_parser = parse_size)]
    pub max_body: u64,
    /// Largest record inside a batch (batched records are held in memory until written).
    #[arg(long, env = "TSBLOB_MAX_BATCH_RECORD", default_value = "64MiB", value_parser = parse_size)]
    pub max_batch_record: u64,
    /// Most records in one batch body (each record's result is held until the answer).
    #[arg(long, env = "TSBLOB_MAX_BATCH_RECORDS", default_value_t = 100_000)]
    pub max_batch_records: u64,
    /// Label sets (content type and labels) a connection's batches sent, kept for its next
    /// batch up to this many bytes of memory (within the memory budget), so a repeated set
    /// is a look-up, not a decode; 0 keeps none.
    #[arg(long, env = "TSBLOB_BATCH_LABEL_MEMO", default_value = "64KiB", value_parser = parse_size)]
    pub batch_label_memo: u64,
    /// A request body that sends nothing for this long is dropped (slow or stuck clients).
    #[arg(long, env = "TSBLOB_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// A request body may take this long, plus 1 s per --body-min-rate bytes received
    /// (a client trickling a byte per idle period is cut off: 408).
    #[arg(long, env = "TSBLOB_BODY_DEADLINE", default_value = "60s", value_parser = parse_duration)]
    pub body_deadline: Duration,
    /// The slowest average rate (bytes per second) a body may arrive at after the first
    /// --body-deadline; 0: the whole body must arrive within --body-deadline.
    #[arg(long, env = "TSBLOB_BODY_MIN_RATE", default_value = "64KiB", value_parser = parse_size)]
    pub body_min_rate: u64,
    /// Replication: a request to a destination that has not completed in this long fails
    /// and is retried.
    #[arg(long, env = "TSBLOB_REPLICATION_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub replication_timeout: Duration,
    /// Replication: the longest wait between attempts after errors (it doubles from 200 ms).
    #[arg(long, env = "TSBLOB_REPLICATION_MAX_BACKOFF", default_value = "10s", value_parser = parse_duration)]
    pub replication_max_backoff: Duration,
    /// Writes are refused (507 disk_full) when free space would drop below this.
    #[arg(long, env = "TSBLOB_FREE_SPACE_RESERVE", default_value = "256MiB", value_parser = parse_size)]
    pub free_space_reserve: u64,
    /// Size of the LMDB index map (address space, not disk).
    #[arg(long, env = "TSBLOB_INDEX_MAP_SIZE", default_value = "64GiB", value_parser = parse_size)]
    pub index_map_size: u64,
    /// Largest attachment of an entry (one JSON document kept with the entry; over it: 413
    /// attachment_too_large).
    #[arg(long, env = "TSBLOB_MAX_ATTACHMENT_SIZE", default_value = "64KiB", value_parser = parse_attachment_size)]
    pub max_attachment_size: usize,
    /// Most attachments one entry holds (more: 422 too_many_attachments).
    #[arg(long, env = "TSBLOB_MAX_ATTACHMENTS", default_value_t = tsblob_storage::DEFAULT_MAX_ATTACHMENTS)]
    pub max_attachments: usize,
    /// Block files kept open at once across all entries (default: half of what the
    /// open-file limit, `ulimit -n`, leaves after 128 for sockets and the index).
    #[arg(long, env = "TSBLOB_MAX_OPEN_FILES")]
    pub max_open_files: Option<usize>,
    /// Most entries the store holds across its buckets; a write into a new entry past it
    /// answers 507 too_many_entries (each entry holds ~1.5 KB of server memory). Entries
    /// already on disk always open.
    #[arg(long, env = "TSBLOB_MAX_ENTRIES", default_value_t = tsblob_storage::MAX_ENTRIES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_entries: usize,
    /// Default quota type of new buckets: none, fifo or hard.
    #[arg(long, env = "TSBLOB_DEFAULT_QUOTA_TYPE", default_value = "none")]
    pub default_quota_type: QuotaType,
    /// Default quota size of new buckets (bytes on disk).
    #[arg(long, env = "TSBLOB_DEFAULT_QUOTA_SIZE", default_value = "0", value_parser = parse_size)]
    pub default_quota_size: u64,
    /// Default block size of new buckets.
    #[arg(long, env = "TSBLOB_DEFAULT_MAX_BLOCK_SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub default_max_block_size: u64,
    /// Default records per block of new buckets.
    #[arg(long, env = "TSBLOB_DEFAULT_MAX_BLOCK_RECORDS", default_value_t = 1 << 20)]
    pub default_max_block_records: u64,
    /// Default compression of new buckets: none, zstd or zstd:<1-22>.
    #[arg(long, env = "TSBLOB_DEFAULT_COMPRESSION", default_value = "none")]
    pub default_compression: Compression,
    /// Default age-based retention of new buckets (e.g. 30d; none keeps records).
    #[arg(long, env = "TSBLOB_DEFAULT_MAX_AGE", value_parser = parse_duration)]
    pub default_max_age: Option<Duration>,
    /// Index records one pass of one lifecycle rule looks at, at most (a whole block deleted
    /// counts its records); a rule with more to do goes on a second later.
    #[arg(long, env = "TSBLOB_LIFECYCLE_PASS_RECORDS", default_value_t = tsblob_storage::LIFECYCLE_PASS_RECORDS)]
    pub lifecycle_pass_records: u64,
    /// A client must send its request head (line and headers) within this time.
    #[arg(long, env = "TSBLOB_HEADER_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// An answer the client takes no bytes of for this long (its socket full, nothing
    /// acknowledged) ends its connection, freeing its stream slot; 0s: never.
    #[arg(long, env = "TSBLOB_SEND_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub send_timeout: Duration,
    /// Longest wait for in-flight requests at shutdown before syncing and exiting anyway.
    #[arg(long, env = "TSBLOB_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Tier sealed blocks to this object store: s3://BUCKET or s3://BUCKET/PREFIX (buckets
    /// tier by their tier_local_max and tier_after settings). Credentials and region come
    /// from the AWS environment variables or profile.
    #[arg(long, env = "TSBLOB_TIER_URL")]
    pub tier_url: Option<String>,
    /// Endpoint of an S3-compatible store (MinIO, Ceph...): http://host:port or
    /// https://host:port. Absent: AWS (over https).
    #[arg(long, env = "TSBLOB_TIER_ENDPOINT")]
    pub tier_endpoint: Option<String>,
    /// PEM file of certificate authorities trusted for an https:// --tier-endpoint besides
    /// the system's (a private CA, a self-signed MinIO). Default: the AWS_CA_BUNDLE
    /// variable.
    #[arg(long, env = "TSBLOB_TIER_CA")]
    pub tier_ca: Option<PathBuf>,
    /// Region of the object store (default: the AWS configuration's, else us-east-1).
    #[arg(long, env = "TSBLOB_TIER_REGION")]
    pub tier_region: Option<String>,
    /// Bytes of tiered block ranges cached locally for reads.
    #[arg(long, env = "TSBLOB_TIER_CACHE", default_value = "256MiB", value_parser = parse_size)]
    pub tier_cache: u64,
    /// Uploads to the object store in flight at once.
    #[arg(long, env = "TSBLOB_TIER_UPLOADS", default_value_t = 4)]
    pub tier_uploads: usize,
    /// A call to the object store ends within this time in total, its retries and its
    /// answer's body included (a read of a hung store answers 503 then); a listing, page
    /// after page, within ten times as long. Connections have 2 s to open.
    #[arg(long, env = "TSBLOB_TIER_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub tier_timeout: Duration,
    /// Objects a listing of the object store may hold (at start, a restore, a replica's
    /// refresh): a tsblob prefix holds two per tiered block. More fails the listing.
    #[arg(long, env = "TSBLOB_TIER_LIST_MAX_KEYS", default_value_t = DEFAULT_TIER_LIST_MAX_KEYS, value_parser = clap::value_parser!(u64).range(1..))]
    pub tier_list_max_keys: u64,
    /// Before serving, rebuild the data folder's index of tiered blocks from this object
    /// store (a lost device's history comes back); then tier into it as --tier-url.
    #[arg(long, env = "TSBLOB_RESTORE_FROM", conflicts_with = "read_replica")]
    pub restore_from: Option<String>,
    /// Serve read-only queries from this object store (the data folder holds only the
    /// index), adopting newly tiered blocks every --replica-refresh. Writes answer 405.
    #[arg(long, env = "TSBLOB_READ_REPLICA")]
    pub read_replica: Option<String>,
    /// How often a read replica looks for newly tiered blocks.
    #[arg(long, env = "TSBLOB_REPLICA_REFRESH", default_value = "5s", value_parser = parse_duration)]
    pub replica_refresh: Duration,
    /// Also serve ReductStore's HTTP API (v1, as of ReductStore 1.21) on this address, e.g.
    /// 127.0.0.1:8383 (ReductStore's port), for ReductStore clients (docs/reductstore.md).
    /// Same tokens and bounds as --listen. Default: off.
    #[arg(long, env = "TSBLOB_REDUCTSTORE_LISTEN", value_parser = parse_listen)]
    pub reductstore_listen: Option<SocketAddr>,
    /// Also serve ReductStore's HTTP API under this path of --listen, e.g. /reduct (clients
    /// use http://HOST:8686/reduct as their URL). Default: off.
    #[arg(long, env = "TSBLOB_REDUCTSTORE_PREFIX", value_parser = parse_prefix)]
    pub reductstore_prefix: Option<String>,
    /// Query sessions of the ReductStore API open at once (each holds a position in its
    /// entries until read to the end or idle for its TTL); past it, a new one closes the
    /// least recently read session of the token holding the most (429 only when all of
    /// them are being read).
    #[arg(long, env = "TSBLOB_REDUCTSTORE_MAX_QUERIES", default_value_t = 1024)]
    pub reductstore_max_queries: usize,
    /// Query sessions of the ReductStore API one token may hold open at once (without
    /// tokens, all callers share this count); past it, a new one closes the token's least
    /// recently read session (429 only when all are being read).
    #[arg(
        long,
        env = "TSBLOB_REDUCTSTORE_MAX_QUERIES_PER_TOKEN",
        default_value_t = 256
    )]
    pub reductstore_max_queries_per_token: usize,
    /// The cost bounds of requests (`http/limits.rs`).
    #[command(flatten)]
    pub cost: crate::http::limits::CostArgs,
    /// The bounds of query links (`http/links.rs`).
    #[command(flatten)]
    pub links: crate::http::links::LinkArgs,
}

/// What is wrong with a config file (`--config`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read the config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the config file {path} is not valid TOML: {source}")]
    Toml {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("the config file {path} has an unknown key `{key}`{hint}: its keys are the flags of `tsblob serve` without `--` (tsblob serve --help, docs/operations.md)")]
    UnknownKey {
        path: String,
        key: String,
        hint: String,
    },
    #[error("the config file {path}: `{key}` {problem}")]
    BadValue {
        path: String,
        key: String,
        problem: String,
    },
}

/// The most of a config file read: a few dozen keys fit in a few KiB (`--config
/// /dev/zero` grew the process to 4.6 GB in 8 s: hostile probe of 2026-11-28).
pub const CONFIG_MAX: u64 = 1 << 20;

/// The config file's text: a regular file (a named pipe made `serve` wait for ever) of at
/// most [`CONFIG_MAX`] bytes.
fn read_config(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    // Asked before opening: opening a named pipe waits for a writer.
    if !std::fs::metadata(path)?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(CONFIG_MAX + 1).read_to_string(&mut text)?;
    if text.len() as u64 > CONFIG_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} KiB", CONFIG_MAX >> 10),
        ));
    }
    Ok(text)
}

/// Whether users other than the file's owner and group may read it (a config file holding
/// `token` here; `serve` says it of the data folder and the TLS key).
pub(crate) fn others_read(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
}

/// The config file's settings as `--flag value` arguments to add to `argv`, for each key
/// of `command` (the `serve` command of the clap tree: the keys are its flags' long names,
/// no second list) that neither a flag nor an environment variable set in `matches`. So a
/// flag wins over its variable, the variable over the file, the file over the default.
pub fn config_file_args(
    path: &std::path::Path,
    command: &clap::Command,
    matches: &clap::ArgMatches,
) -> Result<Vec<std::ffi::OsString>, ConfigFileError> {
    use clap::parser::ValueSource;
    let shown = path.display().to_string();
    let text = read_config(path).map_err(|source| ConfigFileError::Read {
        path: shown.clone(),
        source,
    })?;
    let table: toml::Table = text.parse().map_err(|e| ConfigFileError::Toml {
        path: shown.clone(),
        source: Box::new(e),
    })?;
    if table.contains_key("token") && others_read(path) {
        // Before logging starts: on stderr.
        eprintln!(
            "WARNING: the config file {shown} holds `token` and can be read by every user of this machine: `chmod 600 {shown}`, or give the token in TSBLOB_TOKEN"
        );
    }
    let bad = |key: &str, problem: String| ConfigFileError::BadValue {
        path: shown.clone(),
        key: key.to_string(),
        problem,
    };
    let mut out = Vec::new();
    for (key, value) in &table {
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && key != "config" && key != "help");
        let Some(arg) = arg else {
            let kebab = key.replace('_', "-");
            let hint = if kebab != *key
                && command
                    .get_arguments()
                    .any(|a| a.get_long() == Some(kebab.as_str()))
            {
                format!(" (did you mean `{kebab}`?)")
            } else {
                String::new()
            };
            return Err(ConfigFileError::UnknownKey {
                path: shown.clone(),
                key: key.clone(),
                hint,
            });
        };
        if matches!(
            matches.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let flag = format!("--{key}");
        if !arg.get_action().takes_values() {
            match value {
                toml::Value::Boolean(true) => out.push(flag.into()),
                toml::Value::Boolean(false) => {}
                _ => return Err(bad(key, "is a switch: give true or false".into())),
            }
            continue;
        }
        let scalar = |v: &toml::Value| -> Result<String, ConfigFileError> {
            match v {
                toml::Value::String(s) => Ok(s.clone()),
                toml::Value::Integer(i) => Ok(i.to_string()),
                toml::Value::Float(f) => Ok(f.to_string()),
                toml::Value::Boolean(b) => Ok(b.to_string()),
                _ => Err(bad(key, "must be a string or a number".into())),
            }
        };
        let values = match value {
            toml::Value::Array(items) if arg.get_value_delimiter().is_some() => {
                items.iter().map(scalar).collect::<Result<Vec<_>, _>>()?
            }
            toml::Value::Array(_) => {
                return Err(bad(key, "takes one value, not a list".into()));
            }
            v => vec![scalar(v)?],
        };
        for v in values {
            // `--key=value`: a value starting with `-` is not taken for a flag.
            out.push(format!("{flag}={v}").into());
        }
    }
    Ok(out)
}

/// How `tsblob serve` uses an object store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierMode {
    /// Tier into it (`--tier-url`; after `--restore-from`, restore first).
    Tier { url: String, restore: bool },
    /// A read-only replica of it.
    Replica { url: String },
}

impl ServeArgs {
    /// What the tier flags ask for (`--tier-url` and `--restore-from` must agree).
    pub fn tier_mode(&self) -> Result<Option<TierMode>, String> {
        match (&self.tier_url, &self.restore_from, &self.read_replica) {
            (_, _, Some(url)) => Ok(Some(TierMode::Replica { url: url.clone() })),
            (Some(t), Some(r), None) if t.trim_end_matches('/') != r.trim_end_matches('/') => Err(format!(
                "--restore-from {r} and --tier-url {t} differ: a restored folder tiers into the store it came from (give one of them)"
            )),
            (t, Some(r), None) => Ok(Some(TierMode::Tier {
                url: t.clone().unwrap_or_else(|| r.clone()),
                restore: true,
            })),
            (Some(t), None, None) => Ok(Some(TierMode::Tier {
                url: t.clone(),
                restore: false,
            })),
            (None, None, None) => Ok(None),
        }
    }

    /// Settings of buckets created without explicit ones.
    pub fn default_bucket(&self) -> Result<BucketSettings, String> {
        let s = BucketSettings {
            quota_type: self.default_quota_type,
            quota_size: self.default_quota_size,
            max_block_size: self.default_max_block_size,
            max_block_records: self.default_max_block_records,
            compression: self.default_compression,
            max_age: self
                .default_max_age
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            ..BucketSettings::default()
        };
        s.validate()
            .map_err(|e| format!("the --default-* bucket settings are invalid: {e}"))?;
        // A bucket's own settings may ask for a zero-byte quota (ReductStore accepts it), but
        // a server-wide default of 0 is a forgotten --default-quota-size: every bucket would
        // keep only its newest block (FIFO) or refuse every write (HARD).
        if s.check_quota_sized().is_err() {
            return Err(format!(
                "--default-quota-type {} needs --default-quota-size (bytes on disk, e.g. 10GiB)",
                self.default_quota_type
            ));
        }
        Ok(s)
    }

    pub fn store_options(&self) -> Result<StoreOptions, String> {
        Ok(StoreOptions {
            sync: self.sync,
            map_size: usize::try_from(self.index_map_size)
                .map_err(|_| "--index-map-size is too large for this machine".to_string())?,
            free_space_reserve: self.free_space_reserve,
            default_bucket: self.default_bucket()?,
            max_open_files: self.max_open_files,
            tier: None,
            // Lifecycle rules keep their `when` as JSON text; the engine reads no JSON.
            when_parser: Some(when_parser()),
            lifecycle_pass_records: self.lifecycle_pass_records.max(1),
            attachments: tsblob_storage::AttachmentLimits {
                max_size: self.max_attachment_size,
                max_count: self.max_attachments,
            },
            max_entries: self.max_entries,
        })
    }

    pub fn limits(&self) -> Limits {
        let mut limits = Limits {
            max_body: self.max_body,
            max_batch_record: self.max_batch_record,
            max_batch_records: self.max_batch_records,
            batch_label_memo: self.batch_label_memo,
            idle_timeout: self.idle_timeout,
            body_deadline: crate::http::body::BodyDeadline {
                base: self.body_deadline,
                min_rate: self.body_min_rate,
            },
            browser: crate::http::browser::BrowserPolicy::new(
                self.listen,
                &self.allowed_hosts,
                &self.cors_origin,
            ),
            ..Limits::default()
        };
        self.cost.apply(&mut limits);
        limits.links = self.links.limits(self.tls_cert.is_some());
        limits
    }
}

/// The engine's compiler of lifecycle rules' `when` (`StoreOptions::when_parser`): rules
/// keep it as JSON text, which the engine does not read.
pub fn when_parser() -> tsblob_storage::WhenParser {
    tsblob_storage::WhenParser(std::sync::Arc::new(|text| {
        crate::when::parse_text(text).map_err(|e| e.to_string())
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn no_flag_is_needed() {
        let t = T::try_parse_from(["t"]).unwrap();
        assert_eq!(t.serve.listen.to_string(), "127.0.0.1:8686");
        assert_eq!(t.serve.data, PathBuf::from("./tsblob-data"));
        assert_eq!(t.serve.sync, SyncPolicy::default());
        let o = t.serve.store_options().unwrap();
        assert_eq!(o.default_bucket, BucketSettings::default());
        assert_eq!(t.serve.send_timeout, Duration::from_secs(60));
        let t = T::try_parse_from(["t", "--send-timeout", "500ms"]).unwrap();
        assert_eq!(t.serve.send_timeout, Duration::from_millis(500));
        let t = T::try_parse_from(["t", "--sync", "always", "--default-compression", "zstd:5"])
            .unwrap();
        assert_eq!(t.serve.sync, SyncPolicy::Always);
        assert_eq!(t.serve.default_compression, Compression::Zstd { level: 5 });
        assert!(T::try_parse_from(["t", "--default-quota-type", "fifo"])
            .unwrap()
            .serve
            .store_options()
            .is_err());
    }

    /// Bug (probe of 2026-11-30): `--listen localhost:8686` was refused with a bare
    /// "invalid socket address syntax", as was a port over 65535: `localhost:PORT` is
    /// 127.0.0.1 now, and any other value is refused with what to give instead.
    #[test]
    fn listen_localhost_was_refused_with_a_bare_syntax_error() {
        let t = T::try_parse_from(["t", "--listen", "localhost:19414"]).unwrap();
        assert_eq!(t.serve.listen.to_string(), "127.0.0.1:19414");
        let t = T::try_parse_from(["t", "--listen", "[::1]:1"]).unwrap();
        assert_eq!(t.serve.listen.to_string(), "[::1]:1");
        for bad in ["example.com:8686", "127.0.0.1:99999", "localhost"] {
            let err = match T::try_parse_from(["t", "--listen", bad]) {
                Ok(_) => panic!("{bad} was taken"),
                Err(e) => e.to_string(),
            };
            assert!(err.contains("give e.g. 127.0.0.1:8686"), "{bad}: {err}");
        }
        let err = match T::try_parse_from(["t", "--reductstore-listen", "host:8383"]) {
            Ok(_) => panic!("host:8383 was taken"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("is not an IP address and port"), "{err}");
    }
}
