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
    /// No object under that key.
    #[error("no object {0:?} in the object store")]
    NotFound(String),
    /// The store refused the request (permissions, a bad bucket name...): retrying the
    /// same request will not help.
    #[error("the object store refused the request: {0}")]
    Refused(String),
}

/// An object's size and the CRC32C of its bytes that tsblob stored with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectHead {
    pub len: u64,
    /// The `tsblob-crc32c` metadata of the object (`None`: not written by tsblob).
    pub crc32c: Option<u32>,
}

/// A blocking S3-like object store: keys are `/`-separated strings.
pub trait ObjectStore: Send + Sync + 'static {
    /// Stores `len` bytes of the file at `path` under `key`, with `crc32c` (of those bytes)
    /// as metadata and as the checksum the store verifies on receipt. Large files go up in
    /// parts (multipart upload).
    fn put_file(&self, key: &str, path: &Path, len: u64, crc32c: u32) -> Result<(), ObjectError>;
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
    /// Every key under `prefix` with its size.
    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ObjectError>;
    /// Where it points, for messages (`s3://bucket/prefix at http://...`).
    fn describe(&self) -> String;
}
