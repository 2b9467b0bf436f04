//! The object store the engine tiers sealed blocks to, as a small blocking trait.
//!
//! The engine has no async runtime and no HTTP: whoever embeds it (the server, with
//! aws-sdk-s3 on a runtime of its own) implements [`ObjectStore`]. Every call blocks and
//! must end within a bounded time (the implementation sets its own timeouts): the engine
//! calls it from its tier threads and from readers of tiered records, never holding an
//! engine lock.

use std::path::Path;

/// What an object store call can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ObjectError {
    /// The object store could not be reached or answered with a server error: the caller
    /// may retry later.
    #[error("the object store is unavailable: {0}")]
    Unavailable(String),
    /// The TLS handshake with the object store failed (a certificate signed by an unknown
    /// authority, a wrong name): retrying will not help until the configuration changes.
    #[error("the TLS handshake with the object store failed: {0}")]
    Tls(String),
    /// No object under that key.
    #[error("no object {0:?} in the object store")]
    NotFound(String),
    /// The store refused the request (permissions, a bad bucket name...): retrying the
    /// same request will not help.
    #[error("the object store refused the request: {0}")]
    Refused(String),
}

/// An object's size and the CRC32C of its bytes as the store reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectHead {
    pub len: u64,
    /// The store's full-object CRC32C checksum of the object (`None`: none stored).
    pub crc32c: Option<u32>,
}

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    pub len: u64,
    /// The store's tag of the object's content (S3's ETag): it changes when the object is
    /// written again (a re-uploaded heads sidecar).
    pub etag: String,
}

/// A blocking S3-like object store: keys are `/`-separated strings.
pub trait ObjectStore: Send + Sync + 'static {
    /// Stores the first `len` bytes of the file at `path` under `key`, reading them once:
    /// their CRC32C is computed as they are read, sent as the checksum the store verifies
    /// on receipt, and returned. Large files go up in parts (multipart upload).
    fn put_file(&self, key: &str, path: &Path, len: u64) -> Result<u32, ObjectError>;
    /// Stores `data` under `key` (small objects: sidecars, settings).
    fn put_bytes(&self, key: &str, data: &[u8]) -> Result<(), ObjectError>;
    /// `len` bytes of the object from `start` (one ranged GET).
    fn get_range(&self, key: &str, start: u64, len: u64) -> Result<Vec<u8>, ObjectError>;
    /// The whole object.
    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError>;
    /// The object's size and stored checksum, `None` if there is no such object.
    fn head(&self, key: &str) -> Result<Option<ObjectHead>, ObjectError>;
    /// Deletes an object (no error if it is already gone).
    fn delete(&self, key: &str) -> Result<(), ObjectError>;
    /// Every object under `prefix`.
    fn list(&self, prefix: &str) -> Result<Vec<Listed>, ObjectError>;
    /// Where it points, for messages (`s3://bucket/prefix at http://...`).
    fn describe(&self) -> String;
}
