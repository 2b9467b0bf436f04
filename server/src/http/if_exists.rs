//! What a write does with a record whose timestamp is taken (`?if_exists=`): the single
//! write (`records.rs`) and the batch (`batch.rs`) answer it alike, 409
//! `timestamp_exists`, or with `compare` 200 for the same payload and 409 `conflict` for
//! another.

use axum::http::StatusCode;
use tsblob_proto::ErrorCode;

use super::errors::AppError;

/// What a write does with a record whose timestamp is taken (`?if_exists=`, on the
/// batch and the single-record write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfExists {
    /// 409 `timestamp_exists` (the default, as for a single write).
    Fail,
    /// Compare the payloads' CRC32C: the same is 200 (already stored: a retried copy),
    /// a different one 409 `conflict`. Replication and `tsblob cp` use it.
    Compare,
}

impl IfExists {
    /// The value of an `if_exists` parameter.
    pub(crate) fn parse(value: &str) -> Result<IfExists, AppError> {
        match value {
            "fail" => Ok(IfExists::Fail),
            "compare" => Ok(IfExists::Compare),
            other => Err(AppError::bad_request(format!(
                "if_exists={other:?} is not a choice: use \"fail\" (the default) or \"compare\""
            ))),
        }
    }
}

/// Whether the stored record at `ts` has the payload whose CRC32C is `crc` (a retry). The
/// stored payload is streamed, never held whole. Blocking.
pub(crate) fn same_payload(
    store: &tsblob_storage::Store,
    bucket: &str,
    entry: &str,
    ts: u64,
    crc: u32,
) -> bool {
    let Ok(mut r) = store.open_record(bucket, entry, Some(ts)) else {
        return false;
    };
    let mut stored = 0u32;
    loop {
        match r.read_chunk(1 << 20) {
            Ok(c) if c.is_empty() => return stored == crc,
            Ok(c) => stored = tsblob_storage::crc::crc32c_append(stored, &c),
            Err(_) => return false,
        }
    }
}

/// The 409 of a record whose timestamp holds another payload (`if_exists=compare`).
pub(crate) fn conflict(bucket: &str, entry: &str, at: u64) -> AppError {
    AppError::new(
        StatusCode::CONFLICT,
        ErrorCode::Conflict,
        format!("a different record (another payload) is stored at timestamp {at} in {bucket}/{entry}: it is kept, never overwritten; remove it first to replace it"),
    )
}

/// A write's answer: 201, or with `if_exists=compare` and the timestamp taken, 200 when
/// the stored payload has the body's CRC32C (`crc()`, only called then) and 409
/// `conflict` when not. Blocking.
pub(crate) fn settle_write(
    store: &tsblob_storage::Store,
    bucket: &str,
    entry: &str,
    written: tsblob_storage::Result<u64>,
    if_exists: IfExists,
    crc: impl FnOnce() -> u32,
) -> Result<(u64, StatusCode), AppError> {
    match written {
        Ok(ts) => Ok((ts, StatusCode::CREATED)),
        Err(tsblob_storage::Error::Write(tsblob_storage::WriteError::Conflict { ts, .. }))
            if if_exists == IfExists::Compare =>
        {
            if same_payload(store, bucket, entry, ts, crc()) {
                Ok((ts, StatusCode::OK))
            } else {
                Err(conflict(bucket, entry, ts))
            }
        }
        Err(e) => Err(e.into()),
    }
}
