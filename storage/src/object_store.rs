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
    /// The object is there but not as it was written (shorter than the range asked for:
    /// HTTP 416): damage, which no retry repairs.
    #[error("the object {0:?} in the object store is damaged (shorter than its index says)")]
    Damaged(String),
    /// The store's answer went past what tsblob accepts: a body longer than the range asked
    /// for (or than its own `Content-Length`), a listing with more objects than the bound.
    /// Read no further: a broken or hostile store could otherwise fill the memory.
    #[error("the object store's answer is over tsblob's bound: {0}")]
    Oversized(String),
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
    /// Starts the ranged GET of [`ObjectStore::get_range`] and returns at once; the answer
    /// is waited for with [`PendingGet::wait`]. `None` (the default): the caller runs
    /// `get_range` on a thread of its own. A store with its own I/O threads answers straight
    /// to the waiting thread: one hand-off fewer per GET, which a query's read-ahead pays
    /// for every block (on a loaded core each hand-off waits for a time slice).
    fn start_get_range(&self, _key: &str, _start: u64, _len: u64) -> Option<PendingGet> {
        None
    }
    /// The whole object.
    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError>;
    /// The object's size and stored checksum, `None` if there is no such object.
    fn head(&self, key: &str) -> Result<Option<ObjectHead>, ObjectError>;
    /// Deletes an object (no error if it is already gone).
    fn delete(&self, key: &str) -> Result<(), ObjectError>;
    /// Every object under `prefix`, or [`ObjectError::Oversized`] when there are more than
    /// the store's bound allows (the listing is held in memory whole).
    fn list(&self, prefix: &str) -> Result<Vec<Listed>, ObjectError>;
    /// Where it points, for messages (`s3://bucket/prefix at http://...`).
    fn describe(&self) -> String;
    /// Why the store looks slow or hung right now (a call has waited for its answer past
    /// what a healthy store takes), or `None`: `/health` says `degraded` meanwhile.
    fn stalled(&self) -> Option<String> {
        None
    }
}

/// A GET under way ([`ObjectStore::start_get_range`]).
pub struct PendingGet {
    rx: std::sync::mpsc::Receiver<Result<Vec<u8>, ObjectError>>,
    got: Option<Result<Vec<u8>, ObjectError>>,
}

impl PendingGet {
    /// The GET whose answer will come through `rx` (one message).
    pub fn new(rx: std::sync::mpsc::Receiver<Result<Vec<u8>, ObjectError>>) -> PendingGet {
        PendingGet { rx, got: None }
    }

    /// `store.get_range(key, start, len)` on a thread of its own.
    pub(crate) fn on_thread(
        store: std::sync::Arc<dyn ObjectStore>,
        key: String,
        start: u64,
        len: u64,
    ) -> std::io::Result<PendingGet> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("tsblob-prefetch".into())
            .spawn(move || {
                let _ = tx.send(store.get_range(&key, start, len));
            })?;
        Ok(PendingGet::new(rx))
    }

    /// Whether the answer is in (without waiting).
    pub fn is_finished(&mut self) -> bool {
        if self.got.is_none() {
            self.got = match self.rx.try_recv() {
                Ok(r) => Some(r),
                Err(std::sync::mpsc::TryRecvError::Empty) => None,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => Some(Err(gone())),
            };
        }
        self.got.is_some()
    }

    /// The answer, once it is in.
    pub fn wait(self) -> Result<Vec<u8>, ObjectError> {
        match self.got {
            Some(r) => r,
            None => self.rx.recv().unwrap_or_else(|_| Err(gone())),
        }
    }
}

fn gone() -> ObjectError {
    ObjectError::Unavailable("a GET ended without an answer".into())
}
