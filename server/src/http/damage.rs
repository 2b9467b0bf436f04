//! Damaged records in a query: a record whose stored bytes fail their check (a CRC
//! mismatch, a frame that does not parse, a tiered block the object store no longer has or holds damaged: `tier_damaged`)
//! is skipped and counted, and the stream goes on; the count and the first
//! [`MAX_LISTED`] of them (entry, timestamp, error code) are sent just before the end
//! frame (a kind-5 frame, or a `{"skipped": [...], "skipped_count": n}` line with
//! `meta=true`). An outage (the object store unreachable: `tier_unavailable`, an I/O error)
//! still ends the stream with an error: retrying later may read the record.
//!
//! Meta-only answers (`meta=true`) read no payload, so they never meet a damaged one; the
//! line exists for the same stream shape whatever the answer.

use bytes::BytesMut;
use serde::Serialize;
use tsblob_proto::ErrorCode;
use tsblob_storage::{Error, TierError};

use super::errors::classify;
use tsblob_proto::framing::put_skipped;

/// Skipped records named one by one in the report by default (`--max-skipped-listed`);
/// past these only the count grows (the report is metadata, sent whole in one frame).
pub const MAX_LISTED: usize = 1000;

/// The error code of a record read that failed because the record is damaged (permanent:
/// skip it), or `None` for any other failure (an outage, or a bug: end the stream).
pub fn damage_code(e: &Error) -> Option<ErrorCode> {
    match e {
        Error::Corrupt(_) | Error::Tier(TierError::Missing { .. } | TierError::Damaged { .. }) => {
            Some(classify(e).1)
        }
        _ => None,
    }
}

/// One skipped record, as the report lists it.
#[derive(Debug, Serialize)]
struct Named {
    /// Multi-entry answers only.
    #[serde(skip_serializing_if = "Option::is_none")]
    entry: Option<String>,
    ts: u64,
    code: &'static str,
}

/// The records a query skipped so far.
#[derive(Debug)]
pub struct Skipped {
    listed: Vec<Named>,
    count: u64,
    /// The most named one by one.
    max_listed: usize,
}

impl Default for Skipped {
    fn default() -> Self {
        Skipped::new(MAX_LISTED)
    }
}

#[derive(Serialize)]
struct Report<'a> {
    skipped: &'a [Named],
    skipped_count: u64,
}

impl Skipped {
    /// An empty report naming at most `max_listed` records.
    pub fn new(max_listed: usize) -> Skipped {
        Skipped {
            listed: Vec::new(),
            count: 0,
            max_listed,
        }
    }

    /// Counts a skipped record (`entry` in multi-entry answers); logs it.
    pub fn add(&mut self, entry: Option<&str>, ts: u64, code: ErrorCode, e: &Error) {
        crate::throttled!(
            warn,
            "damaged_record",
            "query skipped a damaged record ({code}) at ts {ts}{}: {e}",
            entry
                .map(|n| format!(" of entry {n:?}"))
                .unwrap_or_default()
        );
        self.count += 1;
        if self.listed.len() < self.max_listed {
            self.listed.push(Named {
                entry: entry.map(String::from),
                ts,
                code: code.as_str(),
            });
        }
    }

    /// Appends the report (a kind-5 frame, or an NDJSON line with `meta`), if anything was
    /// skipped; the report is emptied so it is sent once.
    pub fn put(&mut self, out: &mut BytesMut, meta: bool) {
        if self.count == 0 {
            return;
        }
        let listed = std::mem::take(&mut self.listed);
        let report = Report {
            skipped: &listed,
            skipped_count: std::mem::take(&mut self.count),
        };
        // (Serializing plain fields cannot fail.)
        let json = serde_json::to_vec(&report).unwrap_or_default();
        if meta {
            out.extend_from_slice(&json);
            out.extend_from_slice(b"\n");
        } else {
            put_skipped(out, &json);
        }
    }
}
