//! Query links (issue 28): a signed, expiring URL that downloads a query's records without
//! a token — to hand one record or one query to someone who has no token.
//!
//! `POST /api/v1/links` (a token that may read the bucket) answers a URL
//! `{base}/api/v1/links/{file_name}?q=...&sig=...`: `q` is the link's [`Spec`] (bucket,
//! entries, range, condition, optionally one record, expiry, the creating token's name and
//! a fingerprint of its hash, the file name) as base64url JSON, and `sig` an HMAC-SHA256 of
//! it under the server's link secret (`<data>/.link-secret`, 32 random bytes made on first
//! use, mode 0600). Nothing is stored per link: `GET` of the URL (no token) checks, in this
//! order, the length (`--max-link-length`), the signature (403 `link_signature`, before
//! anything in `q` is believed), the file name, the expiry (410 `link_expired`) and the
//! creating token ([`creator`]: 410 `link_revoked` once it is removed, or replaced by a new
//! token of the same name), then runs the query **as that token, now**: with its current
//! permissions (403), in its stream slots (`--max-streams-per-token`, `limits.rs`) and in
//! the memory budget (`budget.rs`), through the same handlers as a query or a record read.
//!
//! What a download answers: with a record picked (`index`, the n-th record of the query, or
//! `record`, an entry and timestamp that must be one of its records) that record's payload
//! with its content type, `x-tsblob-ts`, `x-tsblob-entry` and label headers; without, the
//! query's records as the native stream (`application/x-tsblob-records`, every record with
//! its entry, timestamp, labels and content type, streamed with no size bound, decoded by
//! any reader of the framing), or one MCAP file with `format: "mcap"`.
//! Either way with `Content-Disposition: attachment` and the link's file name.
//!
//! The ReductStore API's `/links` routes (`crate::reduct::links`) make and serve the same
//! links.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tsblob_proto::ErrorCode;

use super::auth::Caller;
use super::errors::{blocking, AppError, ErrorBody};
use super::records::Target;
use super::AppState;

type HmacSha256 = Hmac<Sha256>;

/// The link secret's file in the data folder: a name no bucket may take (`.` prefix).
pub const SECRET_FILE: &str = ".link-secret";
/// What the signature covers besides `q`: a version, so that a future format cannot be
/// confused with this one.
const SIG_CONTEXT: &[u8] = b"tsblob-link-v1\n";
/// What a token's fingerprint covers besides its hash.
const TOKEN_CONTEXT: &[u8] = b"tsblob-link-token\n";
/// The expiry of a link created without one (ReductStore's clients use the same).
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);
/// The header naming a picked record's entry.
pub const ENTRY_HEADER: &str = "x-tsblob-entry";

/// The bounds of query links (flags of `tsblob serve`, flattened into its flags).
#[derive(Debug, Clone, clap::Args)]
pub struct LinkArgs {
    /// The longest expiry a query link may be given; a later `expires_at` is refused (422).
    #[arg(long, env = "TSBLOB_MAX_LINK_TTL", default_value = "30days", value_parser = parse_duration)]
    pub max_link_ttl: Duration,
    /// The longest query link (the whole URL, in bytes) the server makes or accepts; a
    /// longer one is refused (422 when made, 414 when used): shorten the condition.
    #[arg(long, env = "TSBLOB_MAX_LINK_LENGTH", default_value_t = LinkLimits::DEFAULT.max_length)]
    pub max_link_length: usize,
    /// The base of the query links this server makes, e.g. https://data.example.com (behind
    /// a proxy). Default: the scheme and `Host` of the request that creates the link.
    #[arg(long, env = "TSBLOB_PUBLIC_URL", value_parser = parse_base_url)]
    pub public_url: Option<String>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}): use e.g. 30days, 12h"))
}

fn parse_base_url(s: &str) -> Result<String, String> {
    check_base_url(s).map_err(|e| e.message)
}

/// The bounds of query links a server applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkLimits {
    pub max_ttl: Duration,
    pub max_length: usize,
    pub public_url: Option<String>,
    /// `https` when the server serves TLS itself (the default links' scheme).
    pub tls: bool,
}

impl LinkLimits {
    pub const DEFAULT: LinkLimits = LinkLimits {
        max_ttl: Duration::from_secs(30 * 24 * 3600),
        max_length: 8192,
        public_url: None,
        tls: false,
    };
}

impl Default for LinkLimits {
    fn default() -> Self {
        LinkLimits::DEFAULT
    }
}

impl LinkArgs {
    pub fn limits(&self, tls: bool) -> LinkLimits {
        LinkLimits {
            max_ttl: self.max_link_ttl,
            max_length: self.max_link_length,
            public_url: self.public_url.clone(),
            tls,
        }
    }
}

/// The server's link secret: read from (or made in) the data folder on first use, then kept.
pub struct Secret {
    path: PathBuf,
    key: parking_lot::Mutex<Option<[u8; 32]>>,
}

impl Secret {
    pub fn new(data: &Path) -> Secret {
        Secret {
            path: data.join(SECRET_FILE),
            key: parking_lot::Mutex::new(None),
        }
    }

    /// The key; made (32 random bytes, written atomically with mode 0600) when the file
    /// does not exist yet.
    fn key(&self) -> Result<[u8; 32], AppError> {
        let mut key = self.key.lock();
        if let Some(k) = *key {
            return Ok(k);
        }
        let k = match std::fs::read_to_string(&self.path) {
            Ok(text) => parse_key(text.trim()).ok_or_else(|| {
                AppError::internal(format!(
                    "the link secret {} is not 64 hex digits: remove it (every query link made so far stops working) and a new one is made",
                    self.path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let k: [u8; 32] = rand::random();
                crate::private_file::write_state("link secret", &self.path, hex(&k).as_bytes())?;
                k
            }
            Err(e) => {
                return Err(AppError::internal(format!(
                    "cannot read the link secret {}: {e}",
                    self.path.display()
                )))
            }
        };
        *key = Some(k);
        Ok(k)
    }

    fn mac(&self, context: &[u8], data: &[u8]) -> Result<HmacSha256, AppError> {
        let key = self.key()?;
        let mut mac = HmacSha256::new_from_slice(&key)
            .map_err(|e| AppError::internal(format!("link secret: {e}")))?;
        mac.update(context);
        mac.update(data);
        Ok(mac)
    }

    fn sign(&self, q: &str) -> Result<String, AppError> {
        let tag = self.mac(SIG_CONTEXT, q.as_bytes())?.finalize().into_bytes();
        Ok(URL_SAFE_NO_PAD.encode(tag))
    }

    /// Whether `sig` is `q`'s signature (a constant-time comparison).
    fn verify(&self, q: &str, sig: &str) -> Result<bool, AppError> {
        let Ok(sig) = URL_SAFE_NO_PAD.decode(sig) else {
            return Ok(false);
        };
        Ok(self
            .mac(SIG_CONTEXT, q.as_bytes())?
            .verify_slice(&sig)
            .is_ok())
    }

    /// A token's fingerprint in a link: ties the link to that token (a new token of the same
    /// name does not revive it) without putting its hash in the URL.
    fn fingerprint(&self, token_hash: &str) -> Result<String, AppError> {
        let tag = self
            .mac(TOKEN_CONTEXT, token_hash.as_bytes())?
            .finalize()
            .into_bytes();
        Ok(URL_SAFE_NO_PAD.encode(&tag[..16]))
    }
}

fn parse_key(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(k)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One record of a query, picked by a link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Pick {
    /// The n-th record (0 first) of the query, in its order.
    Index { i: u64 },
    /// The record of this entry and timestamp, if the query selects it.
    Record { e: String, t: u64 },
}

/// What a link carries, signed: compact names, since it travels in a URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// Bucket.
    pub b: String,
    /// Entry names and globs.
    pub e: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t: Option<u64>,
    /// The condition, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l: Option<u64>,
    /// Newest first.
    #[serde(default, skip_serializing_if = "is_false")]
    pub d: bool,
    /// Strict condition.
    #[serde(default, skip_serializing_if = "is_false")]
    pub st: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r: Option<Pick>,
    /// `mcap`: the whole query as one MCAP file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<String>,
    /// Expiry, µs since the Unix epoch.
    pub x: u64,
    /// The creating token's name (`None`: made while the server needed no token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub i: Option<String>,
    /// The creating token's fingerprint ([`Secret::fingerprint`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub k: String,
    /// The file name (a path below `/api/v1/links/`).
    pub f: String,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The body of `POST /api/v1/links`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateLink {
    pub bucket: String,
    /// One entry (as on the entry routes)...
    pub entry: Option<String>,
    /// ... or entry names and globs (`*` within a segment, `**` across).
    pub entries: Option<Vec<String>>,
    /// Inclusive, µs.
    pub start: Option<u64>,
    /// Exclusive, µs.
    pub stop: Option<u64>,
    /// A condition in ReductStore's `when` language.
    #[schema(value_type = Option<Object>)]
    pub when: Option<serde_json::Value>,
    pub limit: Option<u64>,
    #[serde(default)]
    pub desc: bool,
    #[serde(default)]
    pub strict: bool,
    /// The link answers only the n-th record of the query (0 first): its payload.
    pub index: Option<u64>,
    /// The link answers only this record (an entry and a timestamp the query selects).
    pub record: Option<RecordRef>,
    /// `mcap`: the whole query as one MCAP file (instead of record frames).
    pub format: Option<String>,
    /// Expiry, µs since the Unix epoch (at most --max-link-ttl ahead).
    pub expires_at: Option<u64>,
    /// Expiry in seconds from now (default 86400).
    pub expires_in: Option<u64>,
    /// The name the download is saved under (may contain `/`); default from the entry.
    pub file_name: Option<String>,
    /// The link's base, e.g. `https://data.example.com`; default --public-url, or the
    /// scheme and `Host` of this request.
    pub base_url: Option<String>,
}

/// One record, by entry and timestamp.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordRef {
    pub entry: String,
    pub ts: u64,
}

/// The answer to `POST /api/v1/links`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LinkJson {
    pub link: String,
    /// µs since the Unix epoch.
    pub expires_at: u64,
    pub file_name: String,
}

/// Checks a base URL: `http` or `https` with a host, no query or fragment; returned without
/// a trailing `/`.
pub fn check_base_url(s: &str) -> Result<String, AppError> {
    // The rules are `base_url::check`'s, shared with replication's `dst_url`.
    crate::base_url::check(s).map_err(|e| {
        AppError::unprocessable(
            ErrorCode::InvalidLink,
            format!(
                "base_url {} {e}: give e.g. https://data.example.com",
                e.quoted(s)
            ),
        )
    })?;
    Ok(s.trim_end_matches('/').to_string())
}

/// Checks a link's file name: 1 to 255 bytes of printable characters, `/`-separated
/// segments none of them empty, `.` or `..`, no `\`.
pub fn check_file_name(name: &str) -> Result<(), AppError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && !name
            .chars()
            .any(|c| c.is_control() || c == '\\' || reorders_text(c))
        && name
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..");
    if ok {
        Ok(())
    } else {
        Err(AppError::unprocessable(
            ErrorCode::InvalidLink,
            format!(
                "file_name {}: use 1 to 255 bytes, no control or text-direction characters or '\\', '/'-separated parts none empty, '.' or '..' (e.g. front.jpg)",
                tsblob_proto::quote_short(name)
            ),
        ))
    }
}

/// Characters that change how the rest of a name is shown (bidirectional overrides and
/// isolates, zero-width marks): `a\u{202e}exe.jpg` shows as `agpj.exe`.
fn reorders_text(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// A chosen file name must end in a passive extension (`content_type::is_passive_extension`),
/// as the default names do. Bug (hostile probe of 2026-11-29): any token that could read a
/// bucket made a link saved as `evil.html`, `.exe`, `.svg` or `.lnk` from the trusted
/// server's own address, and the `sandbox` policy does not follow a file onto a disk.
fn check_chosen_extension(name: &str) -> Result<(), AppError> {
    let last = name.rsplit('/').next().unwrap_or(name);
    let ext = last.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    if crate::content_type::is_passive_extension(ext) {
        return Ok(());
    }
    Err(AppError::unprocessable(
        ErrorCode::InvalidLink,
        format!(
            "file_name {} does not end in an extension a link may be saved with (the file lands on the reader's disk, where an active type such as .html or .exe would run): end it in one of {}, or leave file_name out to have it named by the record",
            tsblob_proto::quote_short(name),
            crate::content_type::passive_extensions()
        ),
    ))
}

/// The default file name of a link: the entry's last segment (the bucket's name for several
/// entries), the record picked, and an extension (with its dot) by what is answered: `.mcap`
/// for an MCAP file, the picked record's by its content type, `.bin` for record frames.
fn default_file_name(bucket: &str, entries: &[String], pick: Option<&Pick>, ext: &str) -> String {
    let base = match entries {
        [one] if !one.contains('*') => one.rsplit('/').next().unwrap_or(one),
        _ => bucket,
    };
    match pick {
        Some(Pick::Index { i }) => format!("{base}_{i}{ext}"),
        Some(Pick::Record { t, .. }) => format!("{base}_{t}{ext}"),
        None => format!("{base}{ext}"),
    }
}

/// Makes a link: what `POST /api/v1/links` and the ReductStore API's `POST /links/{name}`
/// share. `base` is the URL the link starts with (its path prefix included, no trailing
/// `/`).
pub(crate) async fn make(
    state: &AppState,
    caller: &Caller,
    spec_in: CreateLink,
    base: String,
) -> Result<LinkJson, AppError> {
    let b = spec_in;
    tsblob_storage::validate_bucket_name(&b.bucket)?;
    caller.require_read(&b.bucket)?;
    let entries = match (b.entry, b.entries) {
        (Some(e), None) => vec![e],
        (None, Some(list)) if !list.is_empty() => list,
        _ => {
            return Err(AppError::bad_request(
                "give the entry (\"entry\": \"cams/front\") or the entries (\"entries\": [\"cams/*\"]) of the link's query, one of the two",
            ))
        }
    };
    let pick = match (b.index, b.record) {
        (None, None) => None,
        (Some(i), None) => Some(Pick::Index { i }),
        (None, Some(r)) => {
            tsblob_storage::validate_entry_name(&r.entry)?;
            Some(Pick::Record {
                e: r.entry,
                t: r.ts,
            })
        }
        (Some(_), Some(_)) => {
            return Err(AppError::bad_request(
                "give index or record, not both: a link answers one record, or the whole query",
            ))
        }
    };
    let mcap = match b.format.as_deref() {
        None => false,
        Some("mcap") if pick.is_none() => true,
        Some(other) => {
            return Err(AppError::bad_request(format!(
                "format {}: the one format besides record frames is mcap, for a whole query (not with index or record)",
                tsblob_proto::quote_short(other)
            )))
        }
    };
    let limits = &state.limits.links;
    let now = tsblob_storage::now_micros();
    let max = now.saturating_add(limits.max_ttl.as_micros() as u64);
    let expires_at = match (b.expires_at, b.expires_in) {
        (Some(_), Some(_)) => {
            return Err(AppError::bad_request(
                "give expires_at (µs since the Unix epoch) or expires_in (seconds), not both",
            ))
        }
        (Some(at), None) => at,
        (None, Some(secs)) => now.saturating_add(secs.saturating_mul(1_000_000)),
        // (Within --max-link-ttl when it is shorter.)
        (None, None) => now + DEFAULT_TTL.min(limits.max_ttl).as_micros() as u64,
    };
    if expires_at <= now {
        return Err(AppError::unprocessable(
            ErrorCode::InvalidExpiry,
            format!(
                "expires_at {expires_at} is not in the future (now is {now} µs): give a later time"
            ),
        ));
    }
    if expires_at > max {
        return Err(AppError::unprocessable(
            ErrorCode::InvalidExpiry,
            format!(
                "expires_at {expires_at} is more than {} ahead (--max-link-ttl): give an earlier time, or ask the administrator to raise the limit",
                humantime::format_duration(limits.max_ttl)
            ),
        ));
    }
    if let Some(f) = &b.file_name {
        check_file_name(f)?;
        check_chosen_extension(f)?;
    }
    let base = match b.base_url {
        Some(u) => check_base_url(&u)?,
        None => base,
    };
    let mut spec = Spec {
        b: b.bucket,
        e: entries,
        s: b.start,
        t: b.stop,
        w: b.when,
        l: b.limit,
        d: b.desc,
        st: b.strict,
        r: pick,
        m: mcap.then(|| "mcap".to_string()),
        x: expires_at,
        i: caller.name.clone(),
        k: match &caller.token_hash {
            Some(h) => state.links.fingerprint(h)?,
            None => String::new(),
        },
        f: b.file_name.clone().unwrap_or_default(),
    };
    // The query must open now (its bucket, entries and condition), not only at download.
    // A link to one record without a file name is named by the record's content type: the
    // record is looked up as its download will (a walk of the index, in a stream slot of
    // the caller's as the download's). Bug "a link to a JPEG record made through the API
    // was named .bin" (the CLI asked the link's HEAD and made it again).
    let query = query_of(&spec)?;
    let typed = match (&spec.r, &b.file_name) {
        (Some(pick), None) => Some((
            pick.clone(),
            state.streams.open(caller.name.as_deref().unwrap_or(""))?,
        )),
        _ => None,
    };
    let (store, bucket, patterns) = (state.store.clone(), spec.b.clone(), spec.e.clone());
    let content_type = blocking(move || match typed {
        Some((pick, _slot)) => match find(&store, &bucket, &patterns, &query, &pick) {
            Ok(found) => Ok(Some(found.content_type)),
            // Not there (yet): the download will say so; the name keeps `.bin`.
            Err(e) if e.code == ErrorCode::RecordNotFound => Ok(None),
            Err(e) => Err(e),
        },
        None => {
            store.query_entries(&bucket, &patterns, &query)?;
            Ok(None)
        }
    })
    .await?;
    if b.file_name.is_none() {
        let ext = match (mcap, content_type) {
            (true, _) => ".mcap".to_string(),
            (false, Some(t)) => crate::content_type::extension_of(&t),
            (false, None) => ".bin".to_string(),
        };
        spec.f = default_file_name(&spec.b, &spec.e, spec.r.as_ref(), &ext);
        check_file_name(&spec.f)?;
    }
    let q = URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&spec).map_err(|e| AppError::internal(format!("a link: {e}")))?);
    let sig = state.links.sign(&q)?;
    let link = format!(
        "{base}/api/v1/links/{}?q={q}&sig={sig}",
        encode_path(&spec.f)
    );
    if link.len() > limits.max_length {
        return Err(AppError::unprocessable(
            ErrorCode::LinkTooLong,
            format!(
                "the link would be {} bytes, over --max-link-length ({}): shorten the condition or the file name, or ask the administrator to raise the limit",
                link.len(),
                limits.max_length
            ),
        ));
    }
    Ok(LinkJson {
        link,
        expires_at,
        file_name: spec.f,
    })
}

/// A file name in a URL path: every byte but unreserved ones and `/` percent-encoded.
fn encode_path(name: &str) -> String {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~')
        .remove(b'/');
    percent_encoding::utf8_percent_encode(name, SET).to_string()
}

/// The engine query of a link.
fn query_of(spec: &Spec) -> Result<tsblob_storage::Query, AppError> {
    let when = match &spec.w {
        Some(w) => Some(super::when::parse_text(&w.to_string())?),
        None => None,
    };
    Ok(tsblob_storage::Query {
        start: spec.s,
        stop: spec.t,
        limit: spec.l,
        descending: spec.d,
        strict: spec.st,
        when,
        filters: Vec::new(),
    })
}

/// The base of links made from `req`: `--public-url`, or the scheme and `Host` of the
/// request (the path prefix it came through, for the ReductStore API under
/// `--reductstore-prefix`).
pub(crate) fn base_of(state: &AppState, req: &Request, prefix: &str) -> Result<String, AppError> {
    if let Some(u) = &state.limits.links.public_url {
        return Ok(format!("{u}{prefix}"));
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            AppError::bad_request(
                "the request has no Host header to build the link from: give base_url",
            )
        })?;
    let scheme = if state.limits.links.tls {
        "https"
    } else {
        "http"
    };
    check_base_url(&format!("{scheme}://{host}{prefix}"))
}

/// Makes a query link.
#[utoipa::path(post, path = "/api/v1/links", tag = "links",
    request_body = CreateLink,
    responses((status = 200, body = LinkJson, description = "the link: GET it without a token until expires_at"),
              (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody, description = "no such bucket or entry"),
              (status = 422, body = ErrorBody, description = "invalid_expiry (past, or beyond --max-link-ttl), link_too_long (over --max-link-length), invalid_link (file name, base_url)")))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    req: Request,
) -> Result<Response, AppError> {
    let base = base_of(&state, &req, "")?;
    let spec: CreateLink = super::body::json(
        req.into_body(),
        1 << 20,
        &state.limits,
        super::body::not_like(
            r#"{"bucket": "b", "entry": "cams/front", "start": 0, "stop": 100, "when": {"&score": {"$gt": 10}}, "index": 0, "expires_in": 3600}"#,
        ),
    )
    .await?;
    Ok(Json(make(&state, &caller, spec, base).await?).into_response())
}

/// A link whose signature, expiry and creator were checked: what it asks, and as whom.
pub(crate) struct Opened {
    pub spec: Spec,
    pub caller: Caller,
}

/// Checks a link's URL (`file_name` is the path below `/api/v1/links/`, decoded; `query`
/// the raw query string).
pub(crate) fn open(
    state: &AppState,
    file_name: &str,
    query: Option<&str>,
) -> Result<Opened, AppError> {
    let raw = query.unwrap_or("");
    let limits = &state.limits.links;
    if raw.len() + file_name.len() > limits.max_length {
        return Err(AppError::new(
            StatusCode::URI_TOO_LONG,
            ErrorCode::LinkTooLong,
            format!(
                "this link is longer than --max-link-length ({}): no link this server makes is",
                limits.max_length
            ),
        ));
    }
    let (mut q, mut sig) = (None, None);
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        match k.as_ref() {
            "q" if q.is_none() => q = Some(v.into_owned()),
            "sig" if sig.is_none() => sig = Some(v.into_owned()),
            _ => {
                return Err(AppError::bad_request(format!(
                    "a query link has the parameters q and sig once each, not {}: use the link as it was given",
                    tsblob_proto::quote_short(&k)
                )))
            }
        }
    }
    let (Some(q), Some(sig)) = (q, sig) else {
        return Err(AppError::bad_request(
            "this is not a whole query link (it needs q and sig): use the link as it was given",
        ));
    };
    let bad_signature = || {
        AppError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::LinkSignature,
            "this link's signature does not match: it was altered, or made by another server (or before its link secret was replaced)",
        )
    };
    if !state.links.verify(&q, &sig)? {
        return Err(bad_signature());
    }
    // Signed by this server: what follows is what it wrote.
    let spec: Spec = URL_SAFE_NO_PAD
        .decode(&q)
        .ok()
        .and_then(|json| serde_json::from_slice(&json).ok())
        .ok_or_else(|| AppError::bad_request("this link's q does not decode"))?;
    if spec.f != file_name {
        return Err(bad_signature());
    }
    let now = tsblob_storage::now_micros();
    if now >= spec.x {
        return Err(AppError::new(
            StatusCode::GONE,
            ErrorCode::LinkExpired,
            format!(
                "this link expired at {} µs ({} ago): ask its author for a new one",
                spec.x,
                humantime::format_duration(Duration::from_secs((now - spec.x) / 1_000_000))
            ),
        ));
    }
    let caller = creator(state, &spec)?;
    caller.require_read(&spec.b)?;
    Ok(Opened { spec, caller })
}

/// The caller a link runs as: its creating token, as it is now. The one validity check of
/// a link's token (410 `link_revoked`): it must still exist and be the same token (the
/// fingerprint of its hash), and pass the checks every request's token passes
/// ([`super::auth::Auth::caller_named`]).
fn creator(state: &AppState, spec: &Spec) -> Result<Caller, AppError> {
    let revoked = |why: &str| {
        AppError::new(
            StatusCode::GONE,
            ErrorCode::LinkRevoked,
            format!("{why}: this link no longer works; ask its author for a new one"),
        )
    };
    if !state.auth.enabled() {
        return Ok(Caller::open());
    }
    let Some(name) = &spec.i else {
        return Err(revoked(
            "this link was made while the server needed no token, and it needs one now",
        ));
    };
    // An expired token is the link's end too: 410 for whoever holds the link, not the
    // token holder's 401 "ask an administrator for a new token" (hostile probe of
    // 2026-11-29).
    let caller = state
        .auth
        .caller_named(name, tsblob_storage::now_micros())
        .map_err(|e| match e.code {
            ErrorCode::TokenExpired => revoked(&format!(
                "the token {name:?} that made this link has expired"
            )),
            _ => e,
        })?
        .ok_or_else(|| {
            revoked(&format!(
                "the token {name:?} that made this link was removed"
            ))
        })?;
    let same = match &caller.token_hash {
        Some(h) => state.links.fingerprint(h)? == spec.k,
        None => false,
    };
    if !same {
        return Err(revoked(&format!(
            "the token {name:?} that made this link was removed (a token of that name now is another one)"
        )));
    }
    Ok(caller)
}

/// Downloads a query link (no token: the link is the permission).
#[utoipa::path(get, path = "/api/v1/links/{file_name}", tag = "links", security(()),
    params(("file_name" = String, Path, description = "the name the download is saved under (may contain '/')"),
           ("q" = String, Query, description = "the link's query, as made"),
           ("sig" = String, Query, description = "its signature")),
    responses((status = 200, description = "one record's payload (with index or record; x-tsblob-ts, x-tsblob-entry and label headers), or the query's record frames (application/x-tsblob-records) or MCAP file; Content-Disposition: attachment with the file name",
               content_type = "application/octet-stream", body = Vec<u8>),
              (status = 400, body = ErrorBody, description = "not a whole link"),
              (status = 403, body = ErrorBody, description = "link_signature: altered or foreign; forbidden: the creating token may no longer read the bucket"),
              (status = 404, body = ErrorBody, description = "the bucket, entry or picked record is gone"),
              (status = 410, body = ErrorBody, description = "link_expired, or link_revoked (its token was removed)"),
              (status = 414, body = ErrorBody, description = "link_too_long"),
              (status = 429, body = ErrorBody, description = "too_many_streams: the creating token's streams are all in use"),
              (status = 503, body = ErrorBody, description = "busy (stream slots or memory budget)")))]
pub async fn download(
    State(state): State<AppState>,
    UrlPath(file_name): UrlPath<String>,
    req: Request,
) -> Result<Response, AppError> {
    let opened = open(&state, &file_name, req.uri().query())?;
    let head = req.method() == axum::http::Method::HEAD;
    serve(&state, opened, head, Native).await
}

/// How a picked record's answer is written: the native headers, or the ReductStore API's.
pub(crate) trait RecordAnswer {
    fn read(
        &self,
        t: Target,
        req: Request,
        head: bool,
    ) -> impl std::future::Future<Output = Result<Response, AppError>> + Send;
}

/// The native record answer (`records::read`), with `x-tsblob-entry`.
pub(crate) struct Native;

impl RecordAnswer for Native {
    async fn read(&self, t: Target, req: Request, head: bool) -> Result<Response, AppError> {
        let entry = t.entry.clone();
        let mut resp = super::records::read(t, req, head).await?;
        if let Ok(v) = HeaderValue::from_str(&entry) {
            resp.headers_mut().insert(ENTRY_HEADER, v);
        }
        Ok(resp)
    }
}

/// Answers an opened link: the picked record through `answer`, or the whole query through
/// the query handlers.
pub(crate) async fn serve(
    state: &AppState,
    opened: Opened,
    head: bool,
    answer: impl RecordAnswer,
) -> Result<Response, AppError> {
    let Opened { spec, caller } = opened;
    let disposition = content_disposition(&spec.f);
    let mut resp = match &spec.r {
        Some(pick) => {
            // A record download is a stream like a query's: it takes a slot of the
            // creating token's (and of the server's), and room in the memory budget for
            // what it holds, until its body is sent.
            let slot = state.streams.open(caller.name.as_deref().unwrap_or(""))?;
            let query = query_of(&spec)?;
            let (store, bucket, patterns, pick) = (
                state.store.clone(),
                spec.b.clone(),
                spec.e.clone(),
                pick.clone(),
            );
            let Found {
                entry, ts, size, ..
            } = blocking(move || find(&store, &bucket, &patterns, &query, &pick)).await?;
            let mut room = state.bodies.empty();
            room.cover(
                size.min(super::budget::MemoryBudget::LARGEST),
                "a link download",
            )
            .await?;
            let req = Request::builder()
                .method(if head { "HEAD" } else { "GET" })
                .uri(format!("/?ts={ts}"))
                .body(Body::empty())
                .map_err(|e| AppError::internal(format!("a link's request: {e}")))?;
            let t = Target {
                state: state.clone(),
                caller,
                bucket: spec.b.clone(),
                entry,
            };
            let resp = answer.read(t, req, head).await?;
            let (parts, body) = resp.into_parts();
            Response::from_parts(
                parts,
                Body::new(Guarded {
                    body,
                    _held: (slot, room),
                }),
            )
        }
        None => {
            let req = Request::builder()
                .uri(format!("/?{}", query_string(&spec)))
                .body(Body::empty())
                .map_err(|e| AppError::internal(format!("a link's request: {e}")))?;
            let t = Target {
                state: state.clone(),
                caller,
                bucket: spec.b.clone(),
                entry: String::new(),
            };
            super::query::stream_bucket(t, req).await?
        }
    };
    if let Some(v) = disposition {
        resp.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(resp)
}

/// The query string of a link's whole query on the bucket-level query route.
fn query_string(spec: &Spec) -> String {
    let mut qs = form_urlencoded::Serializer::new(String::new());
    qs.append_pair("entries", &spec.e.join(","));
    if let Some(s) = spec.s {
        qs.append_pair("start", &s.to_string());
    }
    if let Some(t) = spec.t {
        qs.append_pair("stop", &t.to_string());
    }
    if let Some(w) = &spec.w {
        qs.append_pair("when", &w.to_string());
    }
    if let Some(l) = spec.l {
        qs.append_pair("limit", &l.to_string());
    }
    if spec.d {
        qs.append_pair("desc", "true");
    }
    if spec.st {
        qs.append_pair("strict", "true");
    }
    if let Some(m) = &spec.m {
        qs.append_pair("format", m);
    }
    qs.finish()
}

/// The record a link picks.
struct Found {
    entry: String,
    ts: u64,
    size: u64,
    content_type: String,
}

/// The record a link picks: a walk of the query's index (no payload read) up to it.
fn find(
    store: &tsblob_storage::Store,
    bucket: &str,
    patterns: &[String],
    query: &tsblob_storage::Query,
    pick: &Pick,
) -> Result<Found, AppError> {
    let iter = store.query_entries(bucket, patterns, query)?;
    for (n, item) in iter.enumerate() {
        let item = item?;
        let hit = match pick {
            Pick::Index { i } => n as u64 == *i,
            Pick::Record { e, t } => {
                if (!query.descending && item.meta.ts > *t)
                    || (query.descending && item.meta.ts < *t)
                {
                    break;
                }
                item.meta.ts == *t && item.entry() == e
            }
        };
        if hit {
            return Ok(Found {
                entry: item.entry().to_string(),
                ts: item.meta.ts,
                size: item.meta.size,
                content_type: item.meta.content_type,
            });
        }
    }
    Err(AppError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::RecordNotFound,
        match pick {
            Pick::Index { i } => format!(
                "the link's query has no record {i} (0 first) now: records were removed since it was made"
            ),
            Pick::Record { e, t } => format!(
                "the link's query does not select a record of {e:?} at {t} (now): it was removed, or the query never selected it"
            ),
        },
    ))
}

/// `attachment; filename="..."; filename*=UTF-8''...` of a link's file name (its last
/// segment): an ASCII fallback with anything unsafe replaced by `_`, and the exact name
/// percent-encoded (RFC 6266).
pub fn content_disposition(file_name: &str) -> Option<HeaderValue> {
    let last = file_name.rsplit('/').next().unwrap_or(file_name);
    let ascii: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' && c != ';' && c != '%' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // RFC 5987 `attr-char`: letters, digits and `!#$&+-.^_`|~` stay as they are.
    const ATTR: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'!')
        .remove(b'#')
        .remove(b'$')
        .remove(b'&')
        .remove(b'+')
        .remove(b'-')
        .remove(b'.')
        .remove(b'^')
        .remove(b'_')
        .remove(b'`')
        .remove(b'|')
        .remove(b'~');
    let exact = percent_encoding::utf8_percent_encode(last, ATTR);
    HeaderValue::from_str(&format!(
        "attachment; filename=\"{ascii}\"; filename*=UTF-8''{exact}"
    ))
    .ok()
}

/// A body holding what its stream took (a stream slot, room in the memory budget) until it
/// is sent or dropped.
struct Guarded<G> {
    body: Body,
    _held: G,
}

impl<G: Unpin + Send + 'static> http_body::Body for Guarded<G> {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_secret_is_made_once_private_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let s = Secret::new(dir.path());
        let sig = s.sign("abc").unwrap();
        assert!(s.verify("abc", &sig).unwrap());
        assert!(!s.verify("abd", &sig).unwrap());
        assert!(!s.verify("abc", "not base64 !").unwrap());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(SECRET_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let again = Secret::new(dir.path());
        assert!(
            again.verify("abc", &sig).unwrap(),
            "the same key after a restart"
        );
        assert!(tsblob_storage::validate_bucket_name(SECRET_FILE).is_err());
    }

    /// Bug (hostile probe of 2026-11-29): a chosen file name set the extension of the
    /// reader's file (`evil.html`, `.exe`, `.svg`, `.lnk`, `evil.html.`), and a
    /// right-to-left override showed `a\u{202e}exe.jpg` as `agpj.exe`.
    #[test]
    fn a_link_file_name_chose_an_active_extension() {
        for bad in [
            "evil.html",
            "evil.HTML",
            "evil.exe",
            "a.svg",
            "x.lnk",
            "evil.html.",
            "dir/evil.html",
            "noext",
            "front.jpg ",
            "shots.jpg/evil",
        ] {
            let e = check_chosen_extension(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidLink, "{bad}");
            assert!(e.message.contains("bin, bmp"), "{}", e.message);
        }
        for good in [
            "front.jpg",
            "a/b.PNG",
            "x.bin",
            "run.mcap",
            "cloud.pcd",
            "log.txt",
        ] {
            check_chosen_extension(good).unwrap();
        }
        for bad in ["a\u{202e}exe.jpg", "a\u{2066}b.jpg", "a\u{200f}.jpg"] {
            assert!(check_file_name(bad).is_err(), "{bad:?}");
        }
    }

    /// Bug (hostile probe of 2026-11-29): `base_url` took credentials
    /// (`http://a:b@evil.example`), and tabs or line breaks the parser drops but the link
    /// kept.
    #[test]
    fn a_base_url_with_credentials_or_a_line_break_was_taken() {
        for bad in [
            "http://a:b@evil.example",
            "http://u@h",
            "http://h/\r\nx",
            "http://h\t/",
            "http://h\\@e",
        ] {
            let e = check_base_url(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidLink, "{bad:?}");
        }
        assert_eq!(
            check_base_url("https://data.example.com/").unwrap(),
            "https://data.example.com"
        );
    }

    #[test]
    fn file_names_and_dispositions() {
        assert!(check_file_name("a/b.bin").is_ok());
        for bad in ["", "a//b", "../x", "a\\b", "a\nb", "./x"] {
            assert!(check_file_name(bad).is_err(), "{bad:?}");
        }
        let v = content_disposition("cams/fr\"ont é.jpg").unwrap();
        assert_eq!(
            v.to_str().unwrap(),
            "attachment; filename=\"fr_ont _.jpg\"; filename*=UTF-8''fr%22ont%20%C3%A9.jpg"
        );
        assert_eq!(
            default_file_name("b", &["cams/front".into()], None, ".bin"),
            "front.bin"
        );
        assert_eq!(
            default_file_name("b", &["cams/*".into()], Some(&Pick::Index { i: 3 }), ".bin"),
            "b_3.bin"
        );
    }
}
