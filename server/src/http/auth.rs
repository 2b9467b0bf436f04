//! Access tokens: who may call what.
//!
//! Tokens live in `<data>/tokens` as SHA-256 hashes (a JSON document written atomically);
//! a token's value is shown once, when it is created, and never stored or logged. The
//! admin token given with `--token` is kept in memory only, also as a hash. As soon as any
//! token exists, every route but `/health` needs `Authorization: Bearer <token>`.

use axum::extract::{ConnectInfo, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::errors::AppError;
use tsblob_proto::ErrorCode;

/// The name under which the `--token` admin token appears.
pub const ADMIN_NAME: &str = "admin";

/// The latest time a token may expire at: the end of year 9999 (RFC 3339 has four digits
/// for the year), µs since the Unix epoch.
pub const MAX_TIME_US: u64 = 253_402_300_799_999_999;

/// `last_access` moves in steps of at least this (µs): a token used by many requests at
/// once writes its shared counter once a second, not once a request.
const ACCESS_STEP_US: u64 = 1_000_000;

/// A stored token: its permissions, its limits and the hash of its value. The fields after
/// `created` came later: a token file without them reads as before (no expiry, any address).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredToken {
    pub name: String,
    /// SHA-256 of the token value, lower-case hex.
    pub sha256: String,
    pub full_access: bool,
    /// Bucket names or patterns ending in `*` this token may read.
    pub read: Vec<String>,
    /// ... and write.
    pub write: Vec<String>,
    /// Creation time, µs since the Unix epoch.
    pub created: u64,
    /// The token stops working at this time (µs since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// Inactivity timeout, seconds: the token stops working once it was not used for longer
    /// (since `last_access`, or its creation or rotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
    /// Client addresses or CIDR networks the token may be used from (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_allowlist: Vec<String>,
    /// The last request that presented the token (µs), to the second; kept on disk at
    /// most every `--token-access-flush`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_access: Option<u64>,
    /// When the value was last rotated (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated: Option<u64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TokenFile {
    tokens: Vec<StoredToken>,
}

/// What a new token may do, and its limits.
#[derive(Debug, Clone, Default)]
pub struct TokenSpec {
    pub full_access: bool,
    pub read: Vec<String>,
    pub write: Vec<String>,
    /// µs since the Unix epoch; must be in the future.
    pub expires_at: Option<u64>,
    /// Seconds, at least 1.
    pub ttl: Option<u64>,
    /// Addresses (`203.0.113.7`, `2001:db8::1`) or CIDR networks (`10.0.0.0/8`).
    pub ip_allowlist: Vec<String>,
}

/// A token as the server holds it: the stored form, its networks parsed, and its last
/// access as a counter requests move without a lock.
#[derive(Debug)]
pub struct LiveToken {
    stored: StoredToken,
    nets: Vec<IpNet>,
    /// µs; 0: never used.
    last_access: AtomicU64,
}

impl LiveToken {
    fn new(stored: StoredToken) -> Result<LiveToken, AppError> {
        let nets = parse_allowlist(&stored.ip_allowlist)?;
        let last = stored.last_access.unwrap_or(0);
        Ok(LiveToken {
            stored,
            nets,
            last_access: AtomicU64::new(last),
        })
    }

    pub fn name(&self) -> &str {
        &self.stored.name
    }

    /// The stored form, with the current `last_access`.
    pub fn stored(&self) -> StoredToken {
        StoredToken {
            last_access: self.last_access(),
            ..self.stored.clone()
        }
    }

    pub fn last_access(&self) -> Option<u64> {
        Some(self.last_access.load(Ordering::Relaxed)).filter(|&t| t > 0)
    }

    /// The first µs at which the token no longer works, unless it is used again before
    /// (`ttl`); `None`: never.
    pub fn valid_until(&self) -> Option<u64> {
        let by_ttl = self.stored.ttl.map(|ttl| {
            let base = self
                .last_access()
                .unwrap_or(0)
                .max(self.stored.created)
                .max(self.stored.rotated.unwrap_or(0));
            base.saturating_add(ttl.saturating_mul(1_000_000))
                .saturating_add(1)
        });
        match (self.stored.expires_at, by_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn is_expired(&self, now_us: u64) -> bool {
        self.valid_until().is_some_and(|u| now_us >= u)
    }

    /// Whether the token may be used at `now_us` (µs since the Unix epoch) from `ip`:
    /// 401 `token_expired` past its `expires_at` or its `ttl` of inactivity, 403
    /// `ip_not_allowed` from an address outside its `ip_allowlist` (or an unknown one when
    /// it has a list). The one check of every request, every stream and anything else that
    /// acts for a token later (a signed link).
    pub fn check_valid(&self, now_us: u64, ip: Option<IpAddr>) -> Result<(), AppError> {
        self.check_time(now_us)?;
        self.check_ip(ip)
    }

    fn check_time(&self, now_us: u64) -> Result<(), AppError> {
        let t = &self.stored;
        if let Some(at) = t.expires_at.filter(|&at| now_us >= at) {
            return Err(AppError::new(
                StatusCode::UNAUTHORIZED,
                ErrorCode::TokenExpired,
                format!(
                    "token {:?} expired at {} (its expires_at): ask an administrator for a new token",
                    t.name,
                    rfc3339(at)
                ),
            ));
        }
        if let (Some(ttl), Some(until)) = (t.ttl, self.valid_until()) {
            if now_us >= until {
                return Err(AppError::new(
                    StatusCode::UNAUTHORIZED,
                    ErrorCode::TokenExpired,
                    format!(
                        "token {:?} expired: it was not used for more than its ttl of {ttl} s (last used {}): ask an administrator to rotate it (POST /api/v1/tokens/{}/rotate) or for a new token",
                        t.name,
                        self.last_access().map_or("never".to_string(), rfc3339),
                        t.name
                    ),
                ));
            }
        }
        Ok(())
    }

    fn check_ip(&self, ip: Option<IpAddr>) -> Result<(), AppError> {
        if self.nets.is_empty() {
            return Ok(());
        }
        let refuse = |what: String| {
            AppError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::IpNotAllowed,
                format!(
                    "token {:?} may not be used {what}: its ip_allowlist does not include it. Use it from an allowed address, or ask an administrator for a token that allows this one (behind a reverse proxy, the server needs --trusted-proxies to see the client's address)",
                    self.stored.name
                ),
            )
        };
        match ip.map(|ip| ip.to_canonical()) {
            None => Err(refuse("from a client whose address is unknown".to_string())),
            Some(ip) if self.nets.iter().any(|n| n.contains(&ip)) => Ok(()),
            Some(ip) => Err(refuse(format!("from {ip}"))),
        }
    }

    /// Records a use at `now_us` (at most one write of the shared counter a second).
    /// Returns true when it moved.
    fn touch(&self, now_us: u64) -> bool {
        let last = self.last_access.load(Ordering::Relaxed);
        if now_us >= last.saturating_add(ACCESS_STEP_US) {
            self.last_access.fetch_max(now_us, Ordering::Relaxed);
            true
        } else {
            false
        }
    }
}

/// `ip_allowlist` entries as networks: an address is a network of one.
pub fn parse_allowlist(list: &[String]) -> Result<Vec<IpNet>, AppError> {
    list.iter()
        .map(|s| {
            let t = s.trim();
            t.parse::<IpNet>()
                .or_else(|_| t.parse::<IpAddr>().map(IpNet::from))
                .map(|n| match n {
                    // `::ffff:10.0.0.1` is the IPv4 address a dual-stack socket reports.
                    IpNet::V6(v6) => match v6.addr().to_ipv4_mapped() {
                        Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len().saturating_sub(96))
                            .map(IpNet::V4)
                            .unwrap_or(n),
                        None => n,
                    },
                    n => n,
                })
                .map_err(|_| {
                    AppError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        ErrorCode::InvalidIpAllowlist,
                        format!(
                            "ip_allowlist entry {} is not an IP address or a CIDR network: give e.g. 203.0.113.7, 10.0.0.0/8 or 2001:db8::/32",
                            tsblob_proto::quote_short(s)
                        ),
                    )
                })
        })
        .collect()
}

/// µs since the Unix epoch as RFC 3339 (UTC, to the microsecond).
pub fn rfc3339(us: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(us.min(MAX_TIME_US));
    humantime::format_rfc3339_micros(t).to_string()
}

/// What the caller of a request may do.
#[derive(Debug, Clone)]
pub struct Caller {
    pub name: Option<String>,
    pub full_access: bool,
    pub read: Vec<String>,
    pub write: Vec<String>,
    /// The SHA-256 of the token the request presented (`None` when no token was needed):
    /// what a long-lived stream checks again when the tokens change ([`StreamGrant`]).
    pub token_hash: Option<String>,
}

fn pattern_matches(pattern: &str, bucket: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => bucket.starts_with(prefix),
        None => pattern == bucket,
    }
}

impl Caller {
    /// The caller when no token exists: anyone may do anything.
    pub fn open() -> Caller {
        Caller {
            name: None,
            full_access: true,
            read: Vec::new(),
            write: Vec::new(),
            token_hash: None,
        }
    }

    /// The holder of the `--token` admin token (of this SHA-256): every right.
    fn admin(hash: String) -> Caller {
        Caller {
            name: Some(ADMIN_NAME.into()),
            token_hash: Some(hash),
            ..Caller::open()
        }
    }

    fn of(t: &LiveToken, hash: String) -> Caller {
        Caller {
            name: Some(t.stored.name.clone()),
            full_access: t.stored.full_access,
            read: t.stored.read.clone(),
            write: t.stored.write.clone(),
            token_hash: Some(hash),
        }
    }

    /// Read access: `full_access`, or a `read` pattern. Writing does not imply reading, as
    /// in ReductStore. Bug (ReductStore parity probe of 2026-11-29): a `write` pattern gave
    /// read access too, so a device's write-only token (ReductStore's usual uploader token,
    /// and the same token store serves both APIs) could read, query and share by query link
    /// every record of the buckets it could write to.
    pub fn can_read(&self, bucket: &str) -> bool {
        self.full_access || self.read.iter().any(|p| pattern_matches(p, bucket))
    }

    fn can_write_only(&self, bucket: &str) -> bool {
        self.write.iter().any(|p| pattern_matches(p, bucket))
    }

    /// Write access: `full_access`, or a `write` pattern.
    pub fn can_write(&self, bucket: &str) -> bool {
        self.full_access || self.can_write_only(bucket)
    }

    pub fn require_read(&self, bucket: &str) -> Result<(), AppError> {
        if self.can_read(bucket) {
            Ok(())
        } else {
            Err(self.forbidden(&format!("read bucket {bucket:?}")))
        }
    }

    pub fn require_write(&self, bucket: &str) -> Result<(), AppError> {
        if self.can_write(bucket) {
            Ok(())
        } else {
            Err(self.forbidden(&format!("write to bucket {bucket:?}")))
        }
    }

    /// Server-wide figures (`/metrics`, `/api/v1/info`): they add up every bucket, so they
    /// need full access or a token that may read every bucket (`*` in `read`).
    pub fn require_all_buckets(&self, what: &str) -> Result<(), AppError> {
        if self.full_access || self.read.iter().any(|p| p == "*") {
            Ok(())
        } else {
            Err(self.forbidden(&format!(
                "{what} (server-wide figures need full access or read access to every bucket: \"*\")"
            )))
        }
    }

    /// Bucket and token management.
    pub fn require_admin(&self, what: &str) -> Result<(), AppError> {
        if self.full_access {
            Ok(())
        } else {
            Err(self.forbidden(what))
        }
    }

    fn forbidden(&self, what: &str) -> AppError {
        AppError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            format!(
                "token {:?} may not {what}: ask an administrator for a token with that permission",
                self.name.as_deref().unwrap_or("")
            ),
        )
    }
}

/// Generates a fresh token value: `tsb_` and 64 hex digits (256 random bits).
pub fn generate_value() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("tsb_{}", hex(&bytes))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

pub fn hash_value(value: &str) -> String {
    hex(&Sha256::digest(value.as_bytes()))
}

/// The stored tokens by name and by hash (one version; a change swaps in the next).
#[derive(Default, Clone)]
struct Registry {
    by_name: BTreeMap<String, Arc<LiveToken>>,
    /// hash → token, for the lookup on every request.
    by_hash: HashMap<String, Arc<LiveToken>>,
}

impl Registry {
    fn insert(&mut self, t: Arc<LiveToken>) {
        self.by_hash.insert(t.stored.sha256.clone(), t.clone());
        self.by_name.insert(t.stored.name.clone(), t);
    }

    fn remove(&mut self, name: &str) -> Option<Arc<LiveToken>> {
        let t = self.by_name.remove(name)?;
        self.by_hash.remove(&t.stored.sha256);
        Some(t)
    }
}

/// The token registry of a server.
pub struct Auth {
    path: PathBuf,
    admin_hash: Option<String>,
    tokens: RwLock<Registry>,
    /// Held while the token file is written (changes and `last_access` flushes), so that
    /// requests never wait for an fsync behind the registry's lock.
    saving: Mutex<()>,
    /// A `last_access` moved since the token file was last written.
    accessed: AtomicBool,
    /// Peers whose `X-Forwarded-For` names the client (`--trusted-proxies`); empty: the
    /// client is always the socket's peer.
    trusted_proxies: Vec<IpNet>,
    /// Bumped on every change of the tokens (created, removed, rotated): long-lived streams
    /// check their token again when it moved ([`StreamGrant`]), and idle ones wait on it.
    changes: tokio::sync::watch::Sender<u64>,
}

impl Auth {
    /// Loads `<data>/tokens` (if present) and remembers the admin token's hash.
    pub fn load(data_dir: &Path, admin_token: Option<&str>) -> anyhow::Result<Auth> {
        let path = data_dir.join("tokens");
        let file: TokenFile = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                anyhow::anyhow!(
                    "the token file {} does not parse ({e}): fix or remove it",
                    path.display()
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => TokenFile::default(),
            Err(e) => anyhow::bail!("cannot read the token file {}: {e}", path.display()),
        };
        let mut registry = Registry::default();
        for t in file.tokens {
            let name = t.name.clone();
            let live = LiveToken::new(t).map_err(|e| {
                anyhow::anyhow!(
                    "the token file {} holds token {name:?} with {}: fix or remove it",
                    path.display(),
                    e.message
                )
            })?;
            registry.insert(Arc::new(live));
        }
        Ok(Auth {
            path,
            admin_hash: admin_token.filter(|t| !t.is_empty()).map(hash_value),
            tokens: RwLock::new(registry),
            saving: Mutex::new(()),
            accessed: AtomicBool::new(false),
            trusted_proxies: Vec::new(),
            changes: tokio::sync::watch::channel(0).0,
        })
    }

    /// Trusts `X-Forwarded-For` from these peers (`--trusted-proxies`).
    pub fn with_trusted_proxies(mut self, proxies: Vec<IpNet>) -> Auth {
        self.trusted_proxies = proxies;
        self
    }

    /// True when requests need a token.
    pub fn enabled(&self) -> bool {
        self.admin_hash.is_some() || !self.tokens.read().by_name.is_empty()
    }

    /// The caller holding `value`, if it is a known token usable now from an unknown
    /// address.
    pub fn authenticate(&self, value: &str) -> Option<Caller> {
        self.admit_value(value, tsblob_storage::now_micros(), || None)
            .ok()
    }

    /// The caller holding `value` at `now_us`, from the address `ip` gives (asked only for
    /// a token with an `ip_allowlist`); a use of the token (`last_access`). Otherwise the
    /// refusal: 401 unknown or expired, 403 from an address it may not be used from.
    pub fn admit_value(
        &self,
        value: &str,
        now_us: u64,
        ip: impl FnOnce() -> Option<IpAddr>,
    ) -> Result<Caller, AppError> {
        let hash = hash_value(value);
        if self.admin_hash.as_deref() == Some(hash.as_str()) {
            return Ok(Caller::admin(hash));
        }
        let Some(t) = self.token_by_hash(&hash) else {
            return Err(unauthorized_error(
                "the token is not valid: check its value, or ask for a new one",
            ));
        };
        t.check_time(now_us)?;
        if !t.nets.is_empty() {
            t.check_ip(ip())?;
        }
        if t.touch(now_us) {
            self.accessed.store(true, Ordering::Relaxed);
        }
        Ok(Caller::of(&t, hash))
    }

    /// The stored token of this SHA-256 (of its value).
    pub fn token_by_hash(&self, hash: &str) -> Option<Arc<LiveToken>> {
        self.tokens.read().by_hash.get(hash).cloned()
    }

    /// The stored token of this name.
    pub fn token_by_name(&self, name: &str) -> Option<Arc<LiveToken>> {
        self.tokens.read().by_name.get(name).cloned()
    }

    /// The caller holding the token named `name` (the `--token` admin token is `admin`), as
    /// a request with that token would be admitted at `now_us`: what a query link runs as
    /// (`links.rs`). `None` when there is no such token; the refusal when it has expired (a
    /// token's `ip_allowlist` bounds who may make a link, not who downloads it).
    pub(crate) fn caller_named(&self, name: &str, now_us: u64) -> Result<Option<Caller>, AppError> {
        if name == ADMIN_NAME {
            return Ok(self.admin_hash.clone().map(Caller::admin));
        }
        let Some(t) = self.token_by_name(name) else {
            return Ok(None);
        };
        t.check_time(now_us)?;
        let hash = t.stored.sha256.clone();
        Ok(Some(Caller::of(&t, hash)))
    }

    /// What a stream opened by `caller` to read `bucket` needs to check, for its whole life,
    /// that it still may ([`StreamGrant::check`]).
    pub fn grant(self: &Arc<Self>, caller: &Caller, bucket: &str) -> StreamGrant {
        let until = caller
            .token_hash
            .as_deref()
            .and_then(|h| self.token_by_hash(h))
            .and_then(|t| t.valid_until());
        StreamGrant {
            auth: self.clone(),
            token_hash: caller.token_hash.clone(),
            name: caller.name.clone(),
            bucket: bucket.to_string(),
            changes: self.changes.subscribe(),
            // Checked at its first call: the caller was admitted before this grant was made
            // (after the stream's first step), and a change in between is already marked
            // seen by a fresh receiver. Bug (races probe of 2026-11-29): a tail opened while
            // its token was removed or rotated was never cut off.
            due: true,
            until,
        }
    }

    /// Says that the tokens changed (after the change is visible).
    fn changed(&self) {
        self.changes.send_modify(|g| *g = g.wrapping_add(1));
    }

    pub fn list(&self) -> Vec<StoredToken> {
        self.tokens
            .read()
            .by_name
            .values()
            .map(|t| t.stored())
            .collect()
    }

    /// Creates a token and returns its value (the only time it is seen).
    pub fn create(&self, name: &str, spec: TokenSpec) -> Result<String, AppError> {
        self.create_prefixed(name, spec, "")
    }

    /// True when the server has a `--token` admin token.
    pub fn has_admin(&self) -> bool {
        self.admin_hash.is_some()
    }

    /// [`Auth::create`] with a value that starts with `prefix` (ReductStore's API gives
    /// `<name>-` first): the random part after it is the same 256 bits.
    pub fn create_prefixed(
        &self,
        name: &str,
        spec: TokenSpec,
        prefix: &str,
    ) -> Result<String, AppError> {
        validate_token_name(name)?;
        for p in spec.read.iter().chain(spec.write.iter()) {
            validate_pattern(p)?;
        }
        let now = tsblob_storage::now_micros();
        if let Some(at) = spec.expires_at {
            if at <= now {
                return Err(AppError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ErrorCode::InvalidExpiry,
                    format!(
                        "expires_at {} is not in the future (now is {}): give a later time",
                        rfc3339(at),
                        rfc3339(now)
                    ),
                ));
            }
            if at > MAX_TIME_US {
                return Err(AppError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ErrorCode::InvalidExpiry,
                    format!("expires_at {at} µs is past the year 9999: give an earlier time, or none for a token that does not expire"),
                ));
            }
        }
        if spec.ttl == Some(0) {
            return Err(AppError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidTtl,
                "ttl must be at least 1 (seconds of inactivity after which the token stops working); leave it out for no inactivity limit",
            ));
        }
        let ip_allowlist: Vec<String> = spec
            .ip_allowlist
            .iter()
            .map(|s| s.trim().to_string())
            .collect();
        let value = format!("{prefix}{}", generate_value());
        let live = LiveToken::new(StoredToken {
            name: name.to_string(),
            sha256: hash_value(&value),
            full_access: spec.full_access,
            read: spec.read,
            write: spec.write,
            created: now,
            expires_at: spec.expires_at,
            ttl: spec.ttl,
            ip_allowlist,
            last_access: None,
            rotated: None,
        })?;
        self.change(|reg| {
            // Bug "admin is reserved, but the error says it already exists" (new-user
            // walkthrough B.10): a server without --token listed no `admin` to remove.
            if name == ADMIN_NAME {
                return Err(AppError::new(
                    StatusCode::CONFLICT,
                    ErrorCode::TokenExists,
                    format!(
                        "the token name {ADMIN_NAME:?} is reserved for the server's --token admin token (whether or not the server was started with one): pick another name"
                    ),
                ));
            }
            if reg.by_name.contains_key(name) {
                return Err(AppError::new(
                    StatusCode::CONFLICT,
                    ErrorCode::TokenExists,
                    format!(
                        "a token named {name:?} already exists: pick another name or remove it first"
                    ),
                ));
            }
            reg.insert(Arc::new(live));
            Ok(())
        })?;
        Ok(value)
    }

    /// Gives a stored token a new value (returned, the only time it is seen): the old one
    /// stops working at once, streams opened with it end. Permissions and limits stay; the
    /// inactivity clock (`ttl`) restarts. A token past its `expires_at` cannot be rotated
    /// (422, as in ReductStore): it stays expired.
    pub fn rotate(&self, name: &str) -> Result<(String, u64), AppError> {
        self.rotate_prefixed(name, "")
    }

    /// [`Auth::rotate`] with a new value that starts with `prefix` (as
    /// [`Auth::create_prefixed`]).
    pub fn rotate_prefixed(&self, name: &str, prefix: &str) -> Result<(String, u64), AppError> {
        let now = tsblob_storage::now_micros();
        let value = format!("{prefix}{}", generate_value());
        self.change(|reg| {
            let Some(old) = reg.by_name.get(name).cloned() else {
                return Err(not_found(name));
            };
            if old.stored.expires_at.is_some_and(|at| now >= at) {
                return Err(AppError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ErrorCode::ExpiredNotRotatable,
                    format!(
                        "token {name:?} expired at {} (its expires_at) and cannot be rotated: create a new token",
                        rfc3339(old.stored.expires_at.unwrap_or(0))
                    ),
                ));
            }
            let live = LiveToken::new(StoredToken {
                sha256: hash_value(&value),
                rotated: Some(now),
                last_access: Some(now),
                ..old.stored()
            })?;
            reg.remove(name);
            reg.insert(Arc::new(live));
            Ok(())
        })?;
        Ok((value, now))
    }

    /// Removes a stored token. Removing the last one while no `--token` admin token is set
    /// would switch authentication off: that needs `disable_auth`, or it is a 409.
    pub fn remove(&self, name: &str, disable_auth: bool) -> Result<(), AppError> {
        let has_admin = self.admin_hash.is_some();
        self.change(|reg| {
            if !reg.by_name.contains_key(name) {
                return Err(not_found(name));
            }
            if reg.by_name.len() == 1 && !has_admin && !disable_auth {
                return Err(AppError::new(
                    StatusCode::CONFLICT,
                    ErrorCode::LastToken,
                    format!(
                        "{name:?} is the last token and the server has no --token admin token: removing it would switch authentication off and open every route to anyone. Create another token first, or confirm with DELETE /api/v1/tokens/{name}?disable_auth=true"
                    ),
                ));
            }
            reg.remove(name);
            Ok(())
        })
    }

    /// Applies `f` to a copy of the registry, writes the result and makes it the registry;
    /// one change at a time, requests reading the old registry meanwhile. Every change
    /// (creation of the first token switches authentication on) wakes the streams.
    fn change(
        &self,
        f: impl FnOnce(&mut Registry) -> Result<(), AppError>,
    ) -> Result<(), AppError> {
        let _saving = self.saving.lock();
        let mut next = self.tokens.read().clone();
        f(&mut next)?;
        self.accessed.store(false, Ordering::Relaxed);
        self.save(&next)?;
        *self.tokens.write() = next;
        self.changed();
        Ok(())
    }

    /// Writes the `last_access` of the tokens used since the last write, if any: at most
    /// one write of the token file per call (`--token-access-flush` apart). A crash loses
    /// at most that interval of `last_access`.
    pub fn flush_access(&self) -> Result<(), AppError> {
        if !self.accessed.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        let _saving = self.saving.lock();
        let now = self.tokens.read().clone();
        self.save(&now)
            .inspect_err(|_| self.accessed.store(true, Ordering::Relaxed))
    }

    /// Writes the token file atomically (hashes are not secrets, but there is no reason
    /// for others to read them: mode 0600).
    fn save(&self, tokens: &Registry) -> Result<(), AppError> {
        let file = TokenFile {
            tokens: tokens.by_name.values().map(|t| t.stored()).collect(),
        };
        let json = serde_json::to_vec_pretty(&file)
            .map_err(|e| AppError::internal(format!("cannot encode the tokens: {e}")))?;
        Ok(crate::private_file::write_state(
            "token file",
            &self.path,
            &json,
        )?)
    }

    /// The client's address: the socket's peer, or, when the peer is one of
    /// `--trusted-proxies`, the last address of `X-Forwarded-For` that is not one of them
    /// (the first hop a trusted proxy saw). `None` without a socket (in-process calls).
    pub fn client_ip(&self, req: &Request) -> Option<IpAddr> {
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()?
            .0
            .ip()
            .to_canonical();
        if self.trusted_proxies.is_empty() || !self.trusted(peer) {
            return Some(peer);
        }
        let mut client = peer;
        // Right to left over every X-Forwarded-For header: each trusted proxy appended
        // the address it saw; the first untrusted one is the client.
        let hops: Vec<&str> = req
            .headers()
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .collect();
        for hop in hops.iter().rev() {
            let Ok(ip) = hop.trim().parse::<IpAddr>() else {
                break; // garbage: stop at the last address a trusted proxy gave
            };
            client = ip.to_canonical();
            if !self.trusted(client) {
                break;
            }
        }
        Some(client)
    }

    fn trusted(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|n| n.contains(&ip))
    }
}

fn not_found(name: &str) -> AppError {
    AppError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::TokenNotFound,
        format!("there is no stored token named {name:?} (the --token admin token cannot be changed over HTTP)"),
    )
}

fn validate_token_name(name: &str) -> Result<(), AppError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(AppError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::InvalidName,
            format!(
                "token name {name:?} is not valid: use 1 to 64 letters, digits, '-', '_' or '.'"
            ),
        ))
    }
}

fn validate_pattern(p: &str) -> Result<(), AppError> {
    let ok = match p.strip_suffix('*') {
        // A prefix pattern: the prefix needs only the characters of a bucket name.
        Some(prefix) => {
            prefix.len() <= 64
                && prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        }
        None => tsblob_storage::validate_bucket_name(p).is_ok(),
    };
    if ok {
        Ok(())
    } else {
        Err(AppError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::InvalidName,
            format!(
                "bucket pattern {} is not valid: use a bucket name, optionally ending in '*'",
                tsblob_proto::quote_short(p)
            ),
        ))
    }
}

impl Auth {
    /// The token check of every request under the API (part of the one middleware,
    /// `http::gate`): puts the [`Caller`] into the request's extensions, or returns the
    /// 401 answer.
    pub(crate) fn admit(&self, req: &mut Request) -> Option<Response> {
        if req.uri().path() == "/health" || !self.enabled() {
            req.extensions_mut().insert(Caller::open());
            return None;
        }
        let header = req
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let Some(header) = header else {
            return Some(unauthorized(
                "this server needs a token: send `Authorization: Bearer <token>`",
            ));
        };
        let Some(value) = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
        else {
            return Some(unauthorized(
                "the Authorization header must be `Bearer <token>`",
            ));
        };
        match self.admit_value(value.trim(), tsblob_storage::now_micros(), || {
            self.client_ip(req)
        }) {
            Ok(caller) => {
                req.extensions_mut().insert(caller);
                None
            }
            Err(e) if e.status == StatusCode::UNAUTHORIZED => {
                let mut r = e.into_response();
                r.headers_mut().insert(
                    axum::http::header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static("Bearer"),
                );
                Some(r)
            }
            Err(e) => Some(e.into_response()),
        }
    }
}

/// A long-lived stream's permission to read its bucket, checked again whenever the tokens
/// change (defect 5 of issue 27: a tail kept streaming after its token was deleted) and
/// when its token's time runs out (`expires_at`, `ttl`: issue 28).
/// Checking costs one atomic load while nothing changed (and a clock read for a token
/// that expires).
pub struct StreamGrant {
    auth: Arc<Auth>,
    /// The token the stream was opened with (`None`: none was needed then).
    token_hash: Option<String>,
    name: Option<String>,
    bucket: String,
    changes: tokio::sync::watch::Receiver<u64>,
    /// [`StreamGrant::changed`] returned (it marks the change seen): check at the next call.
    due: bool,
    /// When the token stops working unless it is used again: check then (µs).
    until: Option<u64>,
}

impl StreamGrant {
    /// `Ok` while the stream's token exists, has not expired and may read its bucket (or no
    /// token is needed); otherwise the error that ends the stream: 401 `token_revoked` for
    /// a token removed or rotated (or authentication switched on after a stream opened
    /// without one), 401 `token_expired` past its `expires_at` or `ttl`, 403 `forbidden`
    /// for one that may no longer read the bucket.
    pub fn check(&mut self) -> Result<(), AppError> {
        let expiring = self
            .until
            .is_some_and(|u| tsblob_storage::now_micros() >= u);
        if !std::mem::take(&mut self.due)
            && !expiring
            && !self.changes.has_changed().unwrap_or(false)
        {
            return Ok(());
        }
        self.changes.borrow_and_update();
        if !self.auth.enabled() {
            return Ok(());
        }
        let revoked = |why: &str| {
            AppError::new(
                StatusCode::UNAUTHORIZED,
                ErrorCode::TokenRevoked,
                format!("{why}: this stream ends; open it again with a valid token"),
            )
        };
        let Some(hash) = self.token_hash.clone() else {
            return Err(revoked(
                "the server now needs a token (one was created after this stream opened)",
            ));
        };
        if self.auth.admin_hash.as_deref() == Some(hash.as_str()) {
            self.until = None;
            return Ok(());
        }
        let Some(t) = self.auth.token_by_hash(&hash) else {
            let name = self.name.as_deref().unwrap_or("");
            return Err(revoked(&if self.auth.token_by_name(name).is_some() {
                format!("token {name:?} was rotated (its old value no longer works)")
            } else {
                "the token of this stream was removed".to_string()
            }));
        };
        t.check_time(tsblob_storage::now_micros()).map_err(|e| {
            AppError::new(e.status, e.code, format!("{}; this stream ends", e.message))
        })?;
        self.until = t.valid_until();
        let caller = Caller::of(&t, hash);
        caller.require_read(&self.bucket).map_err(|_| {
            AppError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::Forbidden,
                format!(
                    "token {:?} may no longer read bucket {:?}: this stream ends; ask an administrator for a token with that permission",
                    caller.name.as_deref().unwrap_or(""),
                    self.bucket
                ),
            )
        })
    }

    /// Returns when the tokens change or the token's time runs out (never, once the server
    /// drops its registry, for a token without an end): an idle stream waits on it to
    /// [`StreamGrant::check`] at once rather than at its next record.
    pub async fn changed(&mut self) {
        let wait = self.until.map(|u| {
            std::time::Duration::from_micros(u.saturating_sub(tsblob_storage::now_micros()))
                + std::time::Duration::from_millis(1)
        });
        let changes = self.changes.changed();
        match wait {
            Some(wait) => {
                tokio::select! {
                    r = changes => if r.is_err() {
                        tokio::time::sleep(wait).await;
                    },
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            None => {
                if changes.await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
        self.due = true;
    }
}

fn unauthorized_error(message: &str) -> AppError {
    AppError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
}

fn unauthorized(message: &str) -> Response {
    let mut r =
        AppError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message).into_response();
    r.headers_mut().insert(
        axum::http::header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Bearer"),
    );
    r
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn spec(full_access: bool, read: &[&str], write: &[&str]) -> TokenSpec {
        TokenSpec {
            full_access,
            read: read.iter().map(|s| s.to_string()).collect(),
            write: write.iter().map(|s| s.to_string()).collect(),
            ..TokenSpec::default()
        }
    }

    #[test]
    fn tokens_are_stored_hashed_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        assert!(!auth.enabled());
        let value = auth
            .create("cam-reader", spec(false, &["cam-*"], &[]))
            .unwrap();
        assert!(value.starts_with("tsb_"));
        let text = std::fs::read_to_string(dir.path().join("tokens")).unwrap();
        assert!(
            !text.contains(&value),
            "the token value must never be stored"
        );
        assert!(text.contains(&hash_value(&value)));

        let again = Auth::load(dir.path(), Some("root")).unwrap();
        let c = again.authenticate(&value).unwrap();
        assert!(c.can_read("cam-front") && !c.can_read("imu"));
        assert!(c.require_write("cam-front").is_err());
        assert!(again.authenticate("root").unwrap().full_access);
        assert!(again.authenticate("nope").is_none());
        assert_eq!(
            again
                .create("cam-reader", spec(true, &[], &[]))
                .unwrap_err()
                .code
                .as_str(),
            "token_exists"
        );
        again.remove("cam-reader", false).unwrap();
        assert!(again.authenticate(&value).is_none());
        assert_eq!(
            again.remove("cam-reader", false).unwrap_err().code.as_str(),
            "token_not_found"
        );
    }

    /// Bug (ReductStore parity probe of 2026-11-29): a `write` pattern gave read access
    /// too, so a device's write-only token could read, query and share every record it
    /// could write; and `write: ["*"]` passed the server-wide figures' check.
    #[test]
    fn a_write_only_token_could_read_what_it_could_write() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        let value = auth
            .create("uploader", spec(false, &[], &["cam-*"]))
            .unwrap();
        let c = auth.authenticate(&value).unwrap();
        assert!(c.require_write("cam-front").is_ok());
        assert!(!c.can_read("cam-front"));
        assert_eq!(
            c.require_read("cam-front").unwrap_err().status.as_u16(),
            403
        );
        let all = auth.create("all-writer", spec(false, &[], &["*"])).unwrap();
        let c = auth.authenticate(&all).unwrap();
        assert!(c.require_all_buckets("metrics").is_err());
        let both = auth
            .create("both", spec(false, &["cam-*"], &["cam-*"]))
            .unwrap();
        let c = auth.authenticate(&both).unwrap();
        assert!(c.can_read("cam-front") && c.require_write("cam-front").is_ok());
    }

    /// Bug "admin is reserved, but the error says it already exists" (new-user walkthrough
    /// B.10): `token create admin` on a server without --token answered "a token named
    /// \"admin\" already exists: pick another name or remove it first", with nothing to
    /// list or remove.
    #[test]
    fn admin_token_name_said_already_exists() {
        let dir = tempfile::tempdir().unwrap();
        for admin in [None, Some("root")] {
            let auth = Auth::load(dir.path(), admin).unwrap();
            let e = auth.create(ADMIN_NAME, spec(true, &[], &[])).unwrap_err();
            assert_eq!((e.status.as_u16(), e.code.as_str()), (409, "token_exists"));
            assert!(
                e.message
                    .contains("reserved for the server's --token admin token")
                    && !e.message.contains("already exists"),
                "{}",
                e.message
            );
        }
        let auth = Auth::load(dir.path(), None).unwrap();
        auth.create("cam", spec(true, &[], &[])).unwrap();
        let e = auth.create("cam", spec(true, &[], &[])).unwrap_err();
        assert!(e.message.contains("already exists"), "{}", e.message);
    }

    #[test]
    fn the_last_token_is_removed_only_on_purpose() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        auth.create("a", spec(true, &[], &[])).unwrap();
        auth.create("b", spec(false, &["*"], &[])).unwrap();
        auth.remove("a", false).unwrap();
        let e = auth.remove("b", false).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (409, "last_token"));
        assert!(
            auth.enabled(),
            "a refused removal must keep authentication on"
        );
        auth.remove("b", true).unwrap();
        assert!(!auth.enabled());
        // With an admin token, removing every stored token keeps authentication on.
        let with_admin = Auth::load(dir.path(), Some("root")).unwrap();
        with_admin.create("c", spec(false, &[], &[])).unwrap();
        with_admin.remove("c", false).unwrap();
        assert!(with_admin.enabled());
    }

    #[test]
    fn names_and_patterns_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        assert!(auth.create("../x", spec(false, &[], &[])).is_err());
        assert!(auth.create("ok", spec(false, &["a/b"], &[])).is_err());
        assert!(auth.create("ok", spec(false, &["*", "cams"], &[])).is_ok());
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn a_token_file_without_the_new_fields_reads_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let value = "tsb_old";
        std::fs::write(
            dir.path().join("tokens"),
            format!(
                r#"{{"tokens": [{{"name": "old", "sha256": "{}", "full_access": false, "read": ["b"], "write": [], "created": 5}}]}}"#,
                hash_value(value)
            ),
        )
        .unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        let c = auth.admit_value(value, u64::MAX - 1, || None).unwrap();
        assert!(c.can_read("b"));
        let t = auth.token_by_name("old").unwrap();
        assert_eq!(t.valid_until(), None);
        assert!(!t.is_expired(MAX_TIME_US));
    }

    #[test]
    fn expires_at_is_checked_at_its_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        let now = tsblob_storage::now_micros();
        // In the past, or now: refused at creation.
        for at in [1, now] {
            let e = auth
                .create(
                    "t",
                    TokenSpec {
                        expires_at: Some(at),
                        ..spec(true, &[], &[])
                    },
                )
                .unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.code.as_str()),
                (422, "invalid_expiry")
            );
        }
        let e = auth
            .create(
                "t",
                TokenSpec {
                    expires_at: Some(MAX_TIME_US + 1),
                    ..spec(true, &[], &[])
                },
            )
            .unwrap_err();
        assert_eq!(e.code.as_str(), "invalid_expiry");
        let at = now + 3_600_000_000;
        let v = auth
            .create(
                "t",
                TokenSpec {
                    expires_at: Some(at),
                    ..spec(true, &[], &[])
                },
            )
            .unwrap();
        assert!(auth.admit_value(&v, at - 1, || None).is_ok());
        let e = auth.admit_value(&v, at, || None).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (401, "token_expired"));
        assert!(e.message.contains("expires_at"), "{}", e.message);
        // Kept across a restart.
        let again = Auth::load(dir.path(), None).unwrap();
        assert_eq!(
            again
                .admit_value(&v, at, || None)
                .unwrap_err()
                .code
                .as_str(),
            "token_expired"
        );
        assert_eq!(again.list()[0].expires_at, Some(at));
    }

    #[test]
    fn ttl_counts_from_the_last_use() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        let e = auth
            .create(
                "t",
                TokenSpec {
                    ttl: Some(0),
                    ..spec(true, &[], &[])
                },
            )
            .unwrap_err();
        assert_eq!(e.code.as_str(), "invalid_ttl");
        let v = auth
            .create(
                "t",
                TokenSpec {
                    ttl: Some(10),
                    ..spec(true, &[], &[])
                },
            )
            .unwrap();
        let created = auth.list()[0].created;
        // 10 s after creation it still works; each use pushes the end on.
        assert!(auth.admit_value(&v, created + 10_000_000, || None).is_ok());
        assert!(auth.admit_value(&v, created + 20_000_000, || None).is_ok());
        assert_eq!(auth.list()[0].last_access, Some(created + 20_000_000));
        let e = auth
            .admit_value(&v, created + 30_000_001, || None)
            .unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (401, "token_expired"));
        assert!(e.message.contains("ttl of 10 s"), "{}", e.message);
        // A refused use does not count as one.
        assert_eq!(auth.list()[0].last_access, Some(created + 20_000_000));
    }

    #[test]
    fn last_access_is_written_once_per_flush() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        let v = auth.create("t", spec(true, &[], &[])).unwrap();
        let file = dir.path().join("tokens");
        let before = std::fs::read(&file).unwrap();
        let now = tsblob_storage::now_micros();
        for i in 0..1000 {
            auth.admit_value(&v, now + i, || None).unwrap();
        }
        assert_eq!(
            std::fs::read(&file).unwrap(),
            before,
            "a request wrote the token file"
        );
        auth.flush_access().unwrap();
        let again = Auth::load(dir.path(), None).unwrap();
        assert_eq!(again.list()[0].last_access, Some(now));
        // Nothing new: no write.
        std::fs::remove_file(&file).unwrap();
        auth.flush_access().unwrap();
        assert!(!file.exists());
    }

    #[test]
    fn ip_allowlist_takes_addresses_and_networks() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        let e = auth
            .create(
                "t",
                TokenSpec {
                    ip_allowlist: vec!["10.0.0.0/33".into()],
                    ..spec(true, &[], &[])
                },
            )
            .unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.code.as_str()),
            (422, "invalid_ip_allowlist")
        );
        let v = auth
            .create(
                "t",
                TokenSpec {
                    ip_allowlist: vec![
                        "203.0.113.7".into(),
                        " 10.0.0.0/8".into(),
                        "2001:db8::/32".into(),
                    ],
                    ..spec(false, &["b"], &[])
                },
            )
            .unwrap();
        let now = tsblob_storage::now_micros();
        for ok in [
            "203.0.113.7",
            "10.200.1.1",
            "::ffff:10.1.2.3",
            "2001:db8::5",
        ] {
            assert!(auth.admit_value(&v, now, || ip(ok)).is_ok(), "{ok}");
        }
        for no in ["203.0.113.8", "11.0.0.1", "2001:db9::1"] {
            let e = auth.admit_value(&v, now, || ip(no)).unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.code.as_str()),
                (403, "ip_not_allowed"),
                "{no}"
            );
            assert!(e.message.contains(no), "{}", e.message);
        }
        let e = auth.admit_value(&v, now, || None).unwrap_err();
        assert_eq!(e.code.as_str(), "ip_not_allowed");
        assert_eq!(
            Auth::load(dir.path(), None).unwrap().list()[0].ip_allowlist,
            ["203.0.113.7", "10.0.0.0/8", "2001:db8::/32"]
        );
    }

    #[test]
    fn rotation_replaces_the_value_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), Some("root")).unwrap();
        let old = auth
            .create(
                "t",
                TokenSpec {
                    ttl: Some(60),
                    ..spec(false, &["b"], &[])
                },
            )
            .unwrap();
        let (new, at) = auth.rotate("t").unwrap();
        assert_ne!(old, new);
        assert!(auth.authenticate(&old).is_none());
        assert!(auth.authenticate(&new).unwrap().can_read("b"));
        let t = Auth::load(dir.path(), None).unwrap().list().remove(0);
        assert_eq!(
            (t.rotated, t.ttl, t.read),
            (Some(at), Some(60), vec!["b".to_string()])
        );
        assert_eq!(
            auth.rotate("nope").unwrap_err().code.as_str(),
            "token_not_found"
        );
        assert_eq!(
            auth.rotate(ADMIN_NAME).unwrap_err().code.as_str(),
            "token_not_found"
        );
        // Past its expires_at: stays expired.
        let now = tsblob_storage::now_micros();
        auth.create(
            "soon",
            TokenSpec {
                expires_at: Some(now + 50_000),
                ..spec(true, &[], &[])
            },
        )
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(60));
        let e = auth.rotate("soon").unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.code.as_str()),
            (422, "expired_not_rotatable")
        );
    }

    #[test]
    fn forwarded_for_is_trusted_only_from_trusted_proxies() {
        let dir = tempfile::tempdir().unwrap();
        let req = |peer: &str, xff: &[&str]| {
            let mut b = Request::builder().uri("/api/v1/me");
            for h in xff {
                b = b.header("x-forwarded-for", *h);
            }
            let mut r = b.body(axum::body::Body::empty()).unwrap();
            r.extensions_mut()
                .insert(ConnectInfo(SocketAddr::new(peer.parse().unwrap(), 9)));
            r
        };
        let plain = Auth::load(dir.path(), None).unwrap();
        assert_eq!(
            plain.client_ip(&req("198.51.100.1", &["203.0.113.7"])),
            ip("198.51.100.1")
        );
        assert_eq!(
            plain.client_ip(&Request::new(axum::body::Body::empty())),
            None
        );
        let proxied = Auth::load(dir.path(), None)
            .unwrap()
            .with_trusted_proxies(vec!["10.0.0.0/8".parse().unwrap()]);
        // From the proxy: the address it appended; a spoofed one before it is ignored.
        assert_eq!(
            proxied.client_ip(&req("10.0.0.2", &["1.1.1.1, 203.0.113.7"])),
            ip("203.0.113.7")
        );
        assert_eq!(
            proxied.client_ip(&req("10.0.0.2", &["1.1.1.1", "203.0.113.7, 10.0.0.3"])),
            ip("203.0.113.7")
        );
        assert_eq!(
            proxied.client_ip(&req("::ffff:10.0.0.2", &["garbage, 10.0.0.9"])),
            ip("10.0.0.9")
        );
        assert_eq!(proxied.client_ip(&req("10.0.0.2", &[])), ip("10.0.0.2"));
        // From anyone else: the peer, whatever it claims.
        assert_eq!(
            proxied.client_ip(&req("198.51.100.1", &["203.0.113.7"])),
            ip("198.51.100.1")
        );
    }

    /// What the token check adds to a request (run by hand, in release:
    /// `cargo test --release -p tsblob-server --lib admit_cost -- --ignored --nocapture`):
    /// the SHA-256 of the value was the whole cost before limits; the limits add a clock
    /// read, the registry lookup and the `last_access` counter.
    #[test]
    #[ignore]
    fn admit_cost() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        let plain = auth.create("plain", spec(false, &["b"], &[])).unwrap();
        let limited = auth
            .create(
                "limited",
                TokenSpec {
                    expires_at: Some(MAX_TIME_US),
                    ttl: Some(3600),
                    ip_allowlist: vec!["10.0.0.0/8".into(), "127.0.0.1".into()],
                    ..spec(false, &["b"], &[])
                },
            )
            .unwrap();
        let n = 1_000_000u32;
        let time = |f: &dyn Fn()| {
            let t = std::time::Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(n)
        };
        let hash = time(&|| {
            std::hint::black_box(hash_value(std::hint::black_box(&plain)));
        });
        let admit_plain = time(&|| {
            let now = tsblob_storage::now_micros();
            std::hint::black_box(auth.admit_value(&plain, now, || None).unwrap());
        });
        let admit_limited = time(&|| {
            let now = tsblob_storage::now_micros();
            std::hint::black_box(auth.admit_value(&limited, now, || ip("127.0.0.1")).unwrap());
        });
        println!(
            "per request: sha256 {hash:.0} ns; admit (no limits) {admit_plain:.0} ns; admit (expires_at, ttl, 2-entry allow-list) {admit_limited:.0} ns"
        );
    }
}
