//! Access tokens: who may call what.
//!
//! Tokens live in `<data>/tokens` as SHA-256 hashes (a JSON document written atomically);
//! a token's value is shown once, when it is created, and never stored or logged. The
//! admin token given with `--token` is kept in memory only, also as a hash. As soon as any
//! token exists, every route but `/health` needs `Authorization: Bearer <token>`.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use tsblob_proto::ErrorCode;

use super::errors::AppError;

/// The name under which the `--token` admin token appears.
pub const ADMIN_NAME: &str = "admin";

/// A stored token: its permissions and the hash of its value.
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
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TokenFile {
    tokens: Vec<StoredToken>,
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

    pub fn can_read(&self, bucket: &str) -> bool {
        self.full_access
            || self.read.iter().any(|p| pattern_matches(p, bucket))
            || self.can_write_only(bucket)
    }

    fn can_write_only(&self, bucket: &str) -> bool {
        self.write.iter().any(|p| pattern_matches(p, bucket))
    }

    pub fn require_read(&self, bucket: &str) -> Result<(), AppError> {
        if self.can_read(bucket) {
            Ok(())
        } else {
            Err(self.forbidden(&format!("read bucket {bucket:?}")))
        }
    }

    pub fn require_write(&self, bucket: &str) -> Result<(), AppError> {
        if self.full_access || self.can_write_only(bucket) {
            Ok(())
        } else {
            Err(self.forbidden(&format!("write to bucket {bucket:?}")))
        }
    }

    /// Server-wide figures (`/metrics`, `/api/v1/info`): they add up every bucket, so they
    /// need full access or a token that may read every bucket (`*` in `read` or `write`).
    pub fn require_all_buckets(&self, what: &str) -> Result<(), AppError> {
        if self.full_access || self.read.iter().chain(&self.write).any(|p| p == "*") {
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

/// The token registry of a server.
pub struct Auth {
    path: PathBuf,
    admin_hash: Option<String>,
    tokens: RwLock<BTreeMap<String, StoredToken>>,
    /// hash → name, for the lookup on every request.
    by_hash: RwLock<HashMap<String, String>>,
    /// Bumped on every change of the tokens (created, removed): long-lived streams check
    /// their token again when it moved ([`StreamGrant`]), and idle ones wait on it.
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
        let auth = Auth {
            path,
            admin_hash: admin_token.filter(|t| !t.is_empty()).map(hash_value),
            tokens: RwLock::new(BTreeMap::new()),
            by_hash: RwLock::new(HashMap::new()),
            changes: tokio::sync::watch::channel(0).0,
        };
        for t in file.tokens {
            auth.by_hash
                .write()
                .insert(t.sha256.clone(), t.name.clone());
            auth.tokens.write().insert(t.name.clone(), t);
        }
        Ok(auth)
    }

    /// True when requests need a token.
    pub fn enabled(&self) -> bool {
        self.admin_hash.is_some() || !self.tokens.read().is_empty()
    }

    /// The caller holding `value`, if it is a known token.
    pub fn authenticate(&self, value: &str) -> Option<Caller> {
        self.by_hash_value(hash_value(value))
    }

    /// The caller holding the token of this SHA-256, if it is a known token.
    fn by_hash_value(&self, hash: String) -> Option<Caller> {
        if self.admin_hash.as_deref() == Some(hash.as_str()) {
            return Some(Caller {
                name: Some(ADMIN_NAME.into()),
                token_hash: Some(hash),
                ..Caller::open()
            });
        }
        let name = self.by_hash.read().get(&hash)?.clone();
        let tokens = self.tokens.read();
        let t = tokens.get(&name)?;
        Some(Caller {
            name: Some(t.name.clone()),
            full_access: t.full_access,
            read: t.read.clone(),
            write: t.write.clone(),
            token_hash: Some(hash),
        })
    }

    /// What a stream opened by `caller` to read `bucket` needs to check, for its whole life,
    /// that it still may ([`StreamGrant::check`]).
    pub fn grant(self: &std::sync::Arc<Self>, caller: &Caller, bucket: &str) -> StreamGrant {
        StreamGrant {
            auth: self.clone(),
            token_hash: caller.token_hash.clone(),
            bucket: bucket.to_string(),
            changes: self.changes.subscribe(),
            due: false,
        }
    }

    /// Says that the tokens changed (after the change is visible).
    fn changed(&self) {
        self.changes.send_modify(|g| *g = g.wrapping_add(1));
    }

    pub fn list(&self) -> Vec<StoredToken> {
        self.tokens.read().values().cloned().collect()
    }

    /// Creates a token and returns its value (the only time it is seen).
    pub fn create(
        &self,
        name: &str,
        full_access: bool,
        read: Vec<String>,
        write: Vec<String>,
    ) -> Result<String, AppError> {
        validate_token_name(name)?;
        for p in read.iter().chain(write.iter()) {
            validate_pattern(p)?;
        }
        let mut tokens = self.tokens.write();
        if name == ADMIN_NAME || tokens.contains_key(name) {
            return Err(AppError::new(
                StatusCode::CONFLICT,
                ErrorCode::TokenExists,
                format!(
                    "a token named {name:?} already exists: pick another name or remove it first"
                ),
            ));
        }
        let value = generate_value();
        let t = StoredToken {
            name: name.to_string(),
            sha256: hash_value(&value),
            full_access,
            read,
            write,
            created: tsblob_storage::now_micros(),
        };
        let mut next = tokens.clone();
        next.insert(name.to_string(), t.clone());
        self.save(&next)?;
        *tokens = next;
        self.by_hash.write().insert(t.sha256, t.name);
        drop(tokens);
        // Creating the first token switches authentication on: streams opened without one
        // end.
        self.changed();
        Ok(value)
    }

    /// Removes a stored token. Removing the last one while no `--token` admin token is set
    /// would switch authentication off: that needs `disable_auth`, or it is a 409.
    pub fn remove(&self, name: &str, disable_auth: bool) -> Result<(), AppError> {
        let mut tokens = self.tokens.write();
        let Some(t) = tokens.get(name).cloned() else {
            return Err(AppError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::TokenNotFound,
                format!("there is no stored token named {name:?} (the --token admin token cannot be removed over HTTP)"),
            ));
        };
        if tokens.len() == 1 && self.admin_hash.is_none() && !disable_auth {
            return Err(AppError::new(
                StatusCode::CONFLICT,
                ErrorCode::LastToken,
                format!(
                    "{name:?} is the last token and the server has no --token admin token: removing it would switch authentication off and open every route to anyone. Create another token first, or confirm with DELETE /api/v1/tokens/{name}?disable_auth=true"
                ),
            ));
        }
        let mut next = tokens.clone();
        next.remove(name);
        self.save(&next)?;
        *tokens = next;
        self.by_hash.write().remove(&t.sha256);
        drop(tokens);
        self.changed();
        Ok(())
    }

    /// Writes the token file atomically (hashes are not secrets, but there is no reason
    /// for others to read them: mode 0600).
    fn save(&self, tokens: &BTreeMap<String, StoredToken>) -> Result<(), AppError> {
        let file = TokenFile {
            tokens: tokens.values().cloned().collect(),
        };
        serde_json::to_vec_pretty(&file)
            .map_err(std::io::Error::other)
            .and_then(|json| crate::private_file::write_atomic(&self.path, &json))
            .map_err(|e| {
                AppError::internal(format!(
                    "cannot write the token file {}: {e}",
                    self.path.display()
                ))
            })
    }
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
        match self.authenticate(value.trim()) {
            Some(caller) => {
                req.extensions_mut().insert(caller);
                None
            }
            None => Some(unauthorized(
                "the token is not valid: check its value, or ask for a new one",
            )),
        }
    }
}

/// A long-lived stream's permission to read its bucket, checked again whenever the tokens
/// change (defect 5 of issue 27: a tail kept streaming after its token was deleted).
/// Checking costs one atomic load while nothing changed.
pub struct StreamGrant {
    auth: std::sync::Arc<Auth>,
    /// The token the stream was opened with (`None`: none was needed then).
    token_hash: Option<String>,
    bucket: String,
    changes: tokio::sync::watch::Receiver<u64>,
    /// [`StreamGrant::changed`] returned (it marks the change seen): check at the next call.
    due: bool,
}

impl StreamGrant {
    /// `Ok` while the stream's token exists and may read its bucket (or no token is needed);
    /// otherwise the error that ends the stream: 401 `token_revoked` for a token removed
    /// (or authentication switched on after a stream opened without one), 403 `forbidden`
    /// for one that may no longer read the bucket.
    pub fn check(&mut self) -> Result<(), AppError> {
        if !std::mem::take(&mut self.due) && !self.changes.has_changed().unwrap_or(false) {
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
        match self.auth.by_hash_value(hash) {
            None => Err(revoked("the token of this stream was removed")),
            Some(caller) => caller.require_read(&self.bucket).map_err(|_| {
                AppError::new(
                    StatusCode::FORBIDDEN,
                    ErrorCode::Forbidden,
                    format!(
                        "token {:?} may no longer read bucket {:?}: this stream ends; ask an administrator for a token with that permission",
                        caller.name.as_deref().unwrap_or(""),
                        self.bucket
                    ),
                )
            }),
        }
    }

    /// Returns when the tokens change (never, once the server drops its registry): an idle
    /// stream waits on it to [`StreamGrant::check`] at once rather than at its next record.
    pub async fn changed(&mut self) {
        if self.changes.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        self.due = true;
    }
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

    #[test]
    fn tokens_are_stored_hashed_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        assert!(!auth.enabled());
        let value = auth
            .create("cam-reader", false, vec!["cam-*".into()], vec![])
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
                .create("cam-reader", true, vec![], vec![])
                .unwrap_err()
                .code,
            ErrorCode::TokenExists
        );
        again.remove("cam-reader", false).unwrap();
        assert!(again.authenticate(&value).is_none());
        assert_eq!(
            again.remove("cam-reader", false).unwrap_err().code,
            ErrorCode::TokenNotFound
        );
    }

    #[test]
    fn the_last_token_is_removed_only_on_purpose() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        auth.create("a", true, vec![], vec![]).unwrap();
        auth.create("b", false, vec!["*".into()], vec![]).unwrap();
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
        with_admin.create("c", false, vec![], vec![]).unwrap();
        with_admin.remove("c", false).unwrap();
        assert!(with_admin.enabled());
    }

    #[test]
    fn names_and_patterns_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load(dir.path(), None).unwrap();
        assert!(auth.create("../x", false, vec![], vec![]).is_err());
        assert!(auth
            .create("ok", false, vec!["a/b".into()], vec![])
            .is_err());
        assert!(auth
            .create("ok", false, vec!["*".into(), "cams".into()], vec![])
            .is_ok());
    }
}
