//! tsblob's embeddable storage engine.
//!
//! A [`Store`] keeps records (`bucket → entry → record`: a microsecond timestamp, a payload,
//! a content type and labels) in append-only block files, with an LMDB index (heed) that
//! maps `(entry, timestamp)` to where the record lives. The index can always be rebuilt from
//! the block files alone. See `docs/architecture.md` and `docs/storage-format.md`.
//!
//! The engine has no HTTP, no JSON and no async runtime: every call blocks. A program may
//! share one `Store` (it is `Clone + Send + Sync`) between threads.
//!
//! ```no_run
//! use tsblob_storage::{Store, StoreOptions, BucketSettings, WriteMeta, Query};
//! let store = Store::open("data", StoreOptions::default())?;
//! store.create_bucket("cams", BucketSettings::default())?;
//! let ts = store.write("cams", "front", &WriteMeta::default(), b"frame bytes")?;
//! let rec = store.read("cams", "front", Some(ts))?;
//! assert_eq!(rec.data, b"frame bytes");
//! for item in store.query("cams", "front", &Query::default())? {
//!     let item = item?;
//!     println!("{} {} bytes", item.meta.ts, item.meta.size);
//! }
//! # Ok::<(), tsblob_storage::Error>(())
//! ```

mod attachments;
mod ballast;
mod block;
mod bucket;
mod codec;
mod commit;
pub mod crc;
mod db;
mod entry;
mod error;
mod feed;
mod files;
mod histogram;
mod index;
mod interner;
mod labels;
mod layout;
mod lifecycle;
mod lock;
mod names;
mod object_store;
mod pattern;
mod payload;
mod quota;
mod read;
mod record;
mod recover;
mod resident;
mod selector;
mod settings;
mod spool;
mod spool_block;
mod store;
mod tier;
mod trash;
mod when;
mod write;
mod write_round;

pub use attachments::{
    Attachment, AttachmentLimits, DEFAULT_MAX_ATTACHMENTS, DEFAULT_MAX_ATTACHMENT_SIZE,
};
pub use block::RecordReader;
pub use codec::heads::HEADS_MAX;
pub use error::{
    no_space, AttachmentError, BucketError, CorruptionError, Error, NameError, NotFound, OpenError,
    QueryError, RenameError, Result, TierError, WriteError,
};
pub use feed::{FeedFilter, FeedLimits, FeedPage, FeedPayload, FeedPending, FeedRecord};
/// The block files the store keeps open when `StoreOptions::max_open_files` is unset.
pub use files::{default_budget as default_open_files, RESERVED_DESCRIPTORS};
pub use histogram::{
    Histogram, DEFAULT_HISTOGRAM_STEPS, MAX_HISTOGRAM_RECORDS, MAX_HISTOGRAM_STEPS,
};
pub use lifecycle::{LifecycleStatus, PassReport};
pub use names::{
    validate_attachment_name, validate_bucket_name, validate_entry_name, validate_label_key,
};
pub use object_store::{Listed, ObjectError, ObjectHead, ObjectStore, PendingGet};
pub use pattern::{
    check_pattern_count, EntryPattern, EntrySelection, PatternError, MAX_PATTERNS,
    MAX_PATTERN_WILDCARDS,
};
pub use payload::{MappedPayload, Payload, SharedPayload, Windows, MAP_MAX, MAP_MIN, WINDOW_MAX};
pub use quota::free_space;
pub use record::{
    BatchRecord, BucketInfo, EntryInfo, LabelFilter, Labels, Query, Record, RecordMeta,
    RecoveryReport, WriteMeta, DEFAULT_CONTENT_TYPE, MAX_LABELS, MAX_LABELS_BYTES, MAX_LABEL_VALUE,
};
pub use recover::create_data_folder;
pub use recover::rebuild_index;
pub use settings::{
    BucketSettings, BucketSettingsUpdate, Compression, LifecycleAction, LifecycleMode,
    LifecycleRule, QuotaType, StoreOptions, SyncPolicy, TierConfig, WhenParser,
    LIFECYCLE_PASS_RECORDS, MAX_AGE_RULE, MAX_ENTRIES, MAX_LIFECYCLE_RULES,
};
pub use store::{QueryItem, QueryIter, ScanBound, Spool, Store, StoreStats, ATTACHMENT_KEY_LABEL};
pub use tier::{lower_thread_priority, RefreshReport, TierStats};
pub use when::{
    is_utc, Agg, CmpOp, Condition, Func, Operand, StrOp, Value, MAX_CONDITION_PARTS,
    MAX_QUERY_CONDITION_PARTS,
};
pub use write_round::{Group, GroupResult, TimedGroup, TimedRecord};

/// The current time in microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// A test hook for crash tests: a process started with `TSBLOB_CRASH_AT=<step>` aborts
/// (no destructor, no flush: as a kill -9 would leave it) on reaching that step, so a test
/// can stop the engine between any two steps of a write or a removal and check what a
/// restart finds. The steps are named where they are called.
pub(crate) fn crash_point(step: &str) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if AT
        .get_or_init(|| std::env::var("TSBLOB_CRASH_AT").ok())
        .as_deref()
        == Some(step)
    {
        std::process::abort();
    }
}

/// Entry points for fuzzing the on-disk parsers (`fuzz/`); not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    /// Parses `bytes` as a block file (header, then frames) the way recovery does, checking
    /// every CRC. Must never panic, whatever the bytes; returns the number of valid frames.
    pub fn parse_block(bytes: &[u8]) -> usize {
        let Ok(h) = crate::codec::block::decode_block_header(bytes) else {
            return 0;
        };
        let mut pos = h.len;
        let mut n = 0;
        while pos < bytes.len() {
            let Ok(head) = crate::codec::frame::decode_head(&bytes[pos..], h.base_ts) else {
                break;
            };
            let Some(end) = usize::try_from(head.frame_len())
                .ok()
                .and_then(|l| pos.checked_add(l))
            else {
                break;
            };
            if end > bytes.len() || crate::codec::frame::frame_crc(&bytes[pos..end]) != head.crc {
                break;
            }
            n += 1;
            pos = end;
        }
        n
    }

    /// Runs `condition` over `records` (timestamp and labels, in query order) as a query
    /// does: the timestamps it keeps, or `Err` with the label a strict condition found
    /// missing (or why it could not evaluate a record). Must never panic, whatever the condition (the `when_parser` target).
    pub fn evaluate(
        condition: &crate::Condition,
        strict: bool,
        descending: bool,
        records: &[(u64, crate::Labels)],
    ) -> Result<Vec<u64>, String> {
        let mut matcher = crate::when::Matcher::new(condition, strict, descending);
        let mut kept = Vec::new();
        for (ts, labels) in records {
            match matcher.matches(*ts, labels) {
                Ok(true) => kept.push(*ts),
                Ok(false) => {}
                Err(crate::when::Stop::Limit) => break,
                Err(crate::when::Stop::Missing(label)) => return Err(label),
                Err(crate::when::Stop::Invalid(message)) => return Err(message),
            }
        }
        Ok(kept)
    }
}
