//! What a record is to a user of the engine: metadata, payload, and what a write or query asks.

// The record limits and the label map are part of the wire protocol: one definition, in
// `tsblob-proto`.
pub use tsblob_proto::{
    Labels, DEFAULT_CONTENT_TYPE, MAX_LABELS, MAX_LABELS_BYTES, MAX_LABEL_VALUE,
};

/// Metadata of a stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMeta {
    /// Microseconds since the Unix epoch, unique within the entry.
    pub ts: u64,
    /// Length of the original payload in bytes (before compression).
    pub size: u64,
    pub content_type: String,
    pub labels: Labels,
}

impl RecordMeta {
    /// What this record counts for in a page of records held in memory (a replication or
    /// feed page): its payload, content type and labels. A record of one byte may carry
    /// 64 KiB of labels; pages bounded by payload bytes alone held 2,000 such records
    /// (`replication::sender`).
    pub fn weight(&self) -> u64 {
        self.size + self.attrs_bytes()
    }

    /// Bytes of its content type and labels (keys and values).
    pub fn attrs_bytes(&self) -> u64 {
        let labels: usize = self.labels.iter().map(|(k, v)| k.len() + v.len()).sum();
        (self.content_type.len() + labels) as u64
    }
}

/// A record with its whole payload in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub meta: RecordMeta,
    pub data: Vec<u8>,
}

/// What a write says about the record besides its payload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteMeta {
    /// `None`: the engine assigns "now", unique and monotonic within the entry.
    pub ts: Option<u64>,
    /// `None`: [`DEFAULT_CONTENT_TYPE`].
    pub content_type: Option<String>,
    pub labels: Labels,
}

impl WriteMeta {
    pub fn at(ts: u64) -> WriteMeta {
        WriteMeta {
            ts: Some(ts),
            ..WriteMeta::default()
        }
    }
}

/// One record of a batch write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchRecord {
    pub meta: WriteMeta,
    pub data: Vec<u8>,
}

/// A condition on labels; all filters of a query must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelFilter {
    /// The label exists and equals the value.
    Eq(String, String),
    /// The label is missing or differs from the value.
    Ne(String, String),
    /// The label exists, whatever its value.
    Has(String),
    /// The label does not exist.
    Missing(String),
}

impl LabelFilter {
    pub fn matches(&self, labels: &Labels) -> bool {
        match self {
            LabelFilter::Eq(k, v) => labels.get(k) == Some(v),
            LabelFilter::Ne(k, v) => labels.get(k) != Some(v),
            LabelFilter::Has(k) => labels.contains_key(k),
            LabelFilter::Missing(k) => !labels.contains_key(k),
        }
    }
}

/// A time-range query: records with `start <= ts < stop`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// Inclusive; `None` from the oldest.
    pub start: Option<u64>,
    /// Exclusive; `None` to the latest.
    pub stop: Option<u64>,
    /// At most this many records (after filtering).
    pub limit: Option<u64>,
    pub filters: Vec<LabelFilter>,
    /// Newest first.
    pub descending: bool,
    /// A condition on the timestamp and labels, evaluated from the index (no payload read).
    pub when: Option<crate::Condition>,
    /// A comparison naming a missing label is an error (`QueryError::MissingLabel`)
    /// instead of false.
    pub strict: bool,
}

/// Sizes and counts of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryInfo {
    pub name: String,
    pub record_count: u64,
    /// Bytes of block files on disk.
    pub size: u64,
    pub block_count: u64,
    pub oldest: Option<u64>,
    pub latest: Option<u64>,
}

/// Settings and sizes of a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketInfo {
    pub name: String,
    pub settings: crate::BucketSettings,
    pub record_count: u64,
    /// Bytes of blocks, local plus tiered: what the quota counts. Precision: one block.
    pub size: u64,
    pub block_count: u64,
    /// Of `size` and `block_count`: kept only in the object store (tiered).
    pub tiered_size: u64,
    pub tiered_blocks: u64,
    pub entry_count: u64,
    pub oldest: Option<u64>,
    pub latest: Option<u64>,
    /// Blocks deleted by the FIFO quota since the store was opened.
    pub evicted_blocks: u64,
    /// Blocks deleted by age-based retention (`max_age`) since the store was opened.
    pub expired_blocks: u64,
}

/// What opening or rebuilding found and repaired; each line is also logged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The index was rebuilt from the block files, and why.
    pub rebuilt: Option<String>,
    /// Records found in block files but not in the index, re-indexed.
    pub reindexed: u64,
    /// Bytes cut from block tails that did not parse (torn writes, garbage).
    pub truncated_bytes: u64,
    /// Bytes of damaged frames skipped inside blocks (the valid frames after them kept).
    pub skipped_bytes: u64,
    /// One line per repair, for logs.
    pub events: Vec<String>,
}
