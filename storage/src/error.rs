//! Typed errors, one family per kind of failure, converging into [`Error`].
//!
//! Every message says what was wrong and, where it helps, how to fix it: the server shows
//! them to HTTP clients as they are.

use std::path::PathBuf;
use thiserror::Error;

use crate::settings::QuotaType;
pub use tsblob_proto::NameError;

/// The top-level error of every engine operation.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Name(#[from] NameError),
    /// An entry pattern over the wildcard cap (one that breaks the name rules is `Name`).
    #[error(transparent)]
    Pattern(crate::pattern::PatternError),
    #[error(transparent)]
    NotFound(#[from] NotFound),
    #[error(transparent)]
    Bucket(#[from] BucketError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Corrupt(#[from] CorruptionError),
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error(transparent)]
    Tier(#[from] TierError),
    #[error(transparent)]
    Rename(#[from] RenameError),
    #[error(transparent)]
    Attachment(#[from] AttachmentError),
    /// An operating-system I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The LMDB index failed.
    #[error("index error: {0}")]
    Index(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The same error again, for each writer of a failed group commit: typed as the
    /// original (an ENOSPC stays `DiskFull`, an I/O error keeps its OS code).
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Name(e) => Error::Name(e.clone()),
            Error::Pattern(e) => Error::Pattern(e.clone()),
            Error::NotFound(e) => Error::NotFound(e.clone()),
            Error::Bucket(e) => Error::Bucket(e.clone()),
            Error::Write(e) => Error::Write(e.clone()),
            Error::Corrupt(e) => Error::Corrupt(e.clone()),
            Error::Open(e) => Error::Index(e.to_string()),
            Error::Query(e) => Error::Query(e.clone()),
            Error::Tier(e) => Error::Tier(e.clone()),
            Error::Rename(e) => Error::Rename(e.clone()),
            Error::Attachment(e) => Error::Attachment(e.clone()),
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(source.kind(), source.to_string()),
                },
            },
            Error::Index(s) => Error::Index(s.clone()),
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        // A full disk (or a user's disk quota) met half-way through a write is still a full
        // disk to the caller.
        if no_space(&source) {
            return Error::Write(WriteError::DiskFull {
                path: PathBuf::from(context.into()),
                available: 0,
                reserve: 0,
                needed: 0,
            });
        }
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<crate::pattern::PatternError> for Error {
    fn from(e: crate::pattern::PatternError) -> Error {
        match e {
            crate::pattern::PatternError::Name(n) => Error::Name(n),
            other => Error::Pattern(other),
        }
    }
}

/// Whether an I/O error says the file system had no room: ENOSPC, or the user's disk quota
/// (EDQUOT). One test for the engine and the server's own files.
pub fn no_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

impl From<heed::Error> for Error {
    fn from(e: heed::Error) -> Self {
        match e {
            heed::Error::Mdb(heed::MdbError::MapFull) => Error::Write(WriteError::IndexFull),
            heed::Error::Io(io) => Error::io("index I/O", io),
            // LMDB reports a failed page write by its errno.
            heed::Error::Mdb(heed::MdbError::Other(code))
                if no_space(&std::io::Error::from_raw_os_error(code)) =>
            {
                Error::io("index write", std::io::Error::from_raw_os_error(code))
            }
            other => Error::Index(other.to_string()),
        }
    }
}

/// Something the caller named does not exist.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum NotFound {
    #[error("bucket {0:?} does not exist: create it first")]
    Bucket(String),
    #[error("entry {entry:?} does not exist in bucket {bucket:?}")]
    Entry { bucket: String, entry: String },
    #[error(
        "no change-feed reader {0:?}: subscribe it first (a replication task that was removed)"
    )]
    FeedReader(String),
    #[error("no record at timestamp {ts} in {bucket}/{entry}")]
    Record {
        bucket: String,
        entry: String,
        ts: u64,
    },
    /// The latest record of an entry that has none (no timestamp was asked for). Bug
    /// (probe of 2026-11-30): it said "no record at timestamp 0", a timestamp the client
    /// never gave.
    #[error("entry {bucket}/{entry} has no records, so it has no latest one: write one first")]
    NoRecords { bucket: String, entry: String },
    #[error(
        "bucket {bucket:?} has no lifecycle rule {name:?} (GET its lifecycle rules to list them)"
    )]
    Rule { bucket: String, name: String },
}

/// Tiering to an object store (`tier/`).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TierError {
    /// A record stored only in the object store could not be fetched.
    #[error("record {ts} of {bucket}/{entry} is kept only in the object store, which is unavailable ({reason}); retry once it is back (GET /health reports the tier's state)")]
    Unavailable {
        bucket: String,
        entry: String,
        ts: u64,
        reason: String,
    },
    /// The object store answered, but without the object the index points to.
    #[error("block {block:016x} of {bucket}/{entry} is missing from the object store (key {key:?}): it was deleted outside tsblob; restore the object or remove the records")]
    Missing {
        bucket: String,
        entry: String,
        block: u64,
        key: String,
    },
    /// The object store holds the block's object, damaged (shorter than the index says).
    #[error("block {block:016x} of {bucket}/{entry} is damaged in the object store (key {key:?}, record {ts}): {reason}")]
    Damaged {
        bucket: String,
        entry: String,
        block: u64,
        key: String,
        ts: u64,
        reason: String,
    },
    /// A write sent to a read-only replica.
    #[error("this server is a read-only replica of {0}: send writes to the server that tiers into that object store")]
    ReadOnly(String),
    /// An upload to the object store failed (retried by the tier thread).
    #[error("upload to the object store failed: {0}")]
    Upload(String),
    /// Restoring from, or refreshing a replica from, the object store failed.
    #[error("reading the object store's index failed: {0}")]
    Refresh(String),
    /// Restoring or refreshing stopped at a bound ([`crate::ObjectError::Oversized`]): a
    /// retry meets the same bound, unlike [`TierError::Refresh`].
    #[error("reading the object store's index stopped: {0}")]
    Oversized(String),
}

/// A query that cannot go on.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum QueryError {
    #[error("record {ts} has no label {label:?}, which the strict condition compares: drop `strict` to treat a comparison with a missing label as false, or add {{\"$exists\": [{label:?}]}} first")]
    MissingLabel { label: String, ts: u64 },
    #[error("the strict condition cannot be evaluated on record {ts}: {message}; drop `strict` to treat such a record as not matching")]
    Invalid { message: String, ts: u64 },
    /// The condition's parts times the entries walked (each holds a copy) pass
    /// [`crate::when::MAX_QUERY_CONDITION_PARTS`].
    #[error("the condition has {parts} parts and the query walks {entries} entries, each with its own copy: over the limit of {max} parts in all; query fewer entries (a narrower pattern) or simplify the condition")]
    TooLarge {
        parts: usize,
        entries: usize,
        max: usize,
    },
}

/// A rename that was refused; nothing was changed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RenameError {
    #[error("entry {entry:?} already exists in bucket {bucket:?}: choose another name, or remove that entry first")]
    EntryExists { bucket: String, entry: String },
    #[error("{what} has blocks kept only in the object store (tiered), whose object keys carry its name: it cannot be renamed; copy its records into a new entry instead (tsblob cp)")]
    Tiered { what: String },
    #[error("the folder {name:?} already exists in the data folder (not a bucket tsblob knows): choose another name, or move that folder away")]
    FolderExists { name: String },
}

/// An attachment change that was refused (nothing was changed), or a damaged file.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AttachmentError {
    #[error("attachment {name:?} is {size} bytes, over the limit of {max} bytes per attachment (--max-attachment-size): keep large data in records")]
    TooLarge {
        name: String,
        size: usize,
        max: usize,
    },
    #[error("entry {bucket}/{entry} would hold {count} attachments, over the limit of {max} (--max-attachments): remove some first")]
    TooMany {
        bucket: String,
        entry: String,
        count: usize,
        max: usize,
    },
    #[error("no attachment {name:?} in {bucket}/{entry}")]
    NotFound {
        bucket: String,
        entry: String,
        name: String,
    },
    #[error("the attachments file of {bucket}/{entry} is damaged ({reason}): remove them all (DELETE …/attachments, `tsblob attachment rm --all`), then write them again")]
    Damaged {
        bucket: String,
        entry: String,
        reason: String,
    },
}

/// Bucket management failures.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BucketError {
    #[error(
        "bucket {0:?} already exists: use it as it is, choose another name, or remove it first"
    )]
    Exists(String),
    #[error("invalid bucket settings: {0}")]
    InvalidSettings(String),
}

/// A write that was refused. Nothing of a refused record is stored.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WriteError {
    #[error("a record with timestamp {ts} already exists in {bucket}/{entry}: records are never overwritten; use another timestamp or remove the old record first")]
    Conflict {
        bucket: String,
        entry: String,
        ts: u64,
    },
    #[error("invalid timestamp {ts}: {reason}")]
    InvalidTimestamp { ts: u64, reason: &'static str },
    /// A record stamped before its bucket's `max_age` reaches back: retention would delete
    /// it at once, so it is refused rather than acknowledged and then deleted.
    #[error("timestamp {ts} is older than bucket {bucket:?} keeps records: its max_age is {max_age} µs, so the oldest timestamp it accepts now is {oldest}; write the record with a newer timestamp, or raise or clear the bucket's max_age")]
    TooOld {
        bucket: String,
        ts: u64,
        max_age: u64,
        oldest: u64,
    },
    #[error("bucket {bucket:?} has a HARD quota of {quota} bytes, uses {used} and the record needs {needed}: remove data, raise the quota or use a FIFO quota")]
    QuotaExceeded {
        bucket: String,
        quota: u64,
        used: u64,
        needed: u64,
    },
    /// A write larger than its bucket's whole quota: no eviction (FIFO) or removal (HARD)
    /// could ever make room for it, so it is refused before anything is evicted. (A FIFO
    /// bucket used to evict every block for such a write and then store it over the quota,
    /// or fail it anyway: acknowledged records lost for nothing.)
    #[error("the write needs {needed} bytes, more than bucket {bucket:?}'s whole {quota_type} quota of {quota} bytes: it was refused and nothing was evicted; raise the bucket's quota_size above the largest record (or batch) it must hold, or send smaller records or batches")]
    LargerThanQuota {
        bucket: String,
        quota_type: QuotaType,
        quota: u64,
        needed: u64,
    },
    /// `path` is for the log; the message (which reaches HTTP clients) does not name it.
    /// `needed` is what the refused write would have added to the disk (0 when the file
    /// system itself answered "no space").
    #[error("the disk holding the data folder is full: {}; free space or remove data (a FIFO quota gives up old blocks instead, when that can make room)", disk_full_figures(*.available, *.reserve, *.needed))]
    DiskFull {
        path: PathBuf,
        available: u64,
        reserve: u64,
        needed: u64,
    },
    /// The LMDB index's map (`StoreOptions::map_size`) has no room left for the change; the
    /// change is not made. Removing records frees index pages for later writes.
    #[error("the index is full: its LMDB map (--index-map-size) has no room left for this change, which was not made; restart the server with a larger --index-map-size (it is address space, not disk), or remove records; reads keep working")]
    IndexFull,
    /// A new entry past `StoreOptions::max_entries`: nothing is created.
    #[error("the store already holds {held} entries, its most (--max-entries {limit}): each entry holds memory in the server; write into an existing entry, remove entries you no longer need, or restart with a larger --max-entries")]
    TooManyEntries { held: usize, limit: usize },
    #[error("invalid label: {0}")]
    InvalidLabel(String),
    #[error("invalid content type {}: use a printable ASCII media type of at most 255 bytes", tsblob_proto::quote_short(.0))]
    InvalidContentType(String),
    #[error("the payload announced {expected} bytes but {got} arrived")]
    LengthMismatch { expected: u64, got: u64 },
}

/// The figures of a `DiskFull` message: what the free-space guard compared, or, for an
/// ENOSPC met while writing (all zero), that the file system itself refused.
fn disk_full_figures(available: u64, reserve: u64, needed: u64) -> String {
    if available == 0 && reserve == 0 && needed == 0 {
        return "the file system reported no space left".into();
    }
    format!("the write needs {needed} bytes, {available} are free and {reserve} kept in reserve")
}

/// Stored bytes that do not read back as they were written.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CorruptionError {
    #[error("corrupt record in block {path:?} at offset {offset}: {reason}")]
    Record {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

/// The store could not be opened.
#[derive(Debug, Error)]
pub enum OpenError {
    #[error("data folder {0:?} is not usable: {1}")]
    Folder(PathBuf, String),
    #[error("data folder {0:?} is already opened by another process (lock file held)")]
    Locked(PathBuf),
    #[error("the LMDB index at {path:?} could not be opened with a map of {map_size} bytes: {reason} (if the map size is the cause, try a smaller --index-map-size; a damaged index file is set aside and rebuilt)")]
    Index {
        path: PathBuf,
        map_size: usize,
        reason: String,
    },
    #[error("the LMDB index at {path:?} has format {found:?}, newer than the {known:?} this tsblob reads: run the newer tsblob that wrote it, or move the index folder away to have this one rebuild it from the block files")]
    IndexTooNew {
        path: PathBuf,
        found: String,
        known: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bug: an ENOSPC inside a group commit reached the followers as a `String` and the
    /// server answered 500. Followers now get the leader's error, typed.
    #[test]
    fn a_full_disk_stays_typed_through_a_group_commit_and_lmdb() {
        let e = Error::io("fsync", std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(matches!(e, Error::Write(WriteError::DiskFull { .. })));
        assert!(matches!(
            e.duplicate(),
            Error::Write(WriteError::DiskFull { .. })
        ));
        let quota = Error::io("write", std::io::Error::from_raw_os_error(libc::EDQUOT));
        assert!(matches!(quota, Error::Write(WriteError::DiskFull { .. })));
        let lmdb = Error::from(heed::Error::Mdb(heed::MdbError::Other(libc::ENOSPC)));
        assert!(matches!(lmdb, Error::Write(WriteError::DiskFull { .. })));
        let map = Error::from(heed::Error::Mdb(heed::MdbError::MapFull));
        assert!(matches!(
            map.duplicate(),
            Error::Write(WriteError::IndexFull)
        ));
        let other = Error::io("read", std::io::Error::from_raw_os_error(libc::EIO));
        match other.duplicate() {
            Error::Io { source, .. } => assert_eq!(source.raw_os_error(), Some(libc::EIO)),
            e => panic!("{e:?}"),
        }
    }
}
