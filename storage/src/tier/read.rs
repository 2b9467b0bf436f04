//! Reading tiered records: a cached range of the block, or a ranged GET (exactly the frame
//! for a point read; `read_ahead` bytes for a query, so the next frames come from the
//! cache). The frame is checked as a local one (head, length, CRC32C) before a byte is
//! returned.

use std::sync::atomic::Ordering;

use super::{ObjectError, Tier};
use crate::block::frame_from_bytes;
use crate::codec::frame::HeadFields;
use crate::entry::Entry;
use crate::index::IndexValue;
use crate::*;

impl Tier {
    /// The head fields and payload of a record of a tiered block; `Ok(None)` if the block
    /// is not tiered (the caller's own error stands).
    pub(crate) fn read_record(
        &self,
        bucket: &str,
        e: &Entry,
        ts: u64,
        v: &IndexValue,
        ahead: bool,
    ) -> Result<Option<(HeadFields, Vec<u8>)>> {
        let Some(t) = self.get(v.block_id) else {
            return Ok(None);
        };
        let frame = match self.cache.get(v.block_id, v.offset, v.frame_len) {
            Some(f) => f,
            None => {
                let want = if ahead {
                    // Read-ahead; the whole rest of the block when it is at most twice the
                    // read-ahead (a second GET for a short tail costs a round trip).
                    let rest = t.len.saturating_sub(v.offset);
                    let ahead = self.cfg.read_ahead.max(v.frame_len);
                    if rest <= ahead.saturating_mul(2) {
                        rest
                    } else {
                        ahead
                    }
                } else {
                    v.frame_len
                };
                self.gets.fetch_add(1, Ordering::Relaxed);
                let got = match self.cfg.store.get_range(&t.key, v.offset, want) {
                    Ok(b) => {
                        self.ok();
                        b
                    }
                    Err(err) => {
                        self.get_errors.fetch_add(1, Ordering::Relaxed);
                        self.failed(&err);
                        return Err(match err {
                            ObjectError::NotFound(key) => TierError::Missing {
                                bucket: bucket.into(),
                                entry: e.name().into(),
                                block: v.block_id,
                                key,
                            },
                            other => TierError::Unavailable {
                                bucket: bucket.into(),
                                entry: e.name().into(),
                                ts,
                                reason: other.to_string(),
                            },
                        }
                        .into());
                    }
                };
                let Some(frame) = usize::try_from(v.frame_len)
                    .ok()
                    .and_then(|n| got.get(..n))
                    .map(<[u8]>::to_vec)
                else {
                    return Err(corrupt(
                        &t.key,
                        v.offset,
                        "the object ends inside the record",
                    ));
                };
                self.cache.insert(v.block_id, v.offset, got);
                frame
            }
        };
        let (h, data) =
            frame_from_bytes(&frame, t.base_ts).map_err(|why| corrupt(&t.key, v.offset, &why))?;
        if h.ts != ts {
            return Err(corrupt(
                &t.key,
                v.offset,
                &format!("index says timestamp {ts}, block says {}", h.ts),
            ));
        }
        Ok(Some((h, data)))
    }
}

fn corrupt(key: &str, offset: u64, reason: &str) -> Error {
    CorruptionError::Record {
        path: std::path::PathBuf::from(format!("object {key}")),
        offset,
        reason: reason.to_string(),
    }
    .into()
}
