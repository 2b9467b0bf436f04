//! Helpers shared by the engine's integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use tsblob_storage::*;

pub fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, opts()).unwrap()
}

pub fn opts() -> StoreOptions {
    StoreOptions {
        free_space_reserve: 0,
        map_size: 1 << 30,
        ..StoreOptions::default()
    }
}

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn meta(ts: u64) -> WriteMeta {
    WriteMeta::at(ts)
}

/// Deterministic payload for (ts, len): a reader can check any record without a copy.
pub fn payload(ts: u64, len: usize) -> Vec<u8> {
    let mut x = ts.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

pub fn all_ts(store: &Store, bucket: &str, entry: &str, q: &Query) -> Vec<u64> {
    store
        .query(bucket, entry, q)
        .unwrap()
        .map(|r| r.unwrap().meta.ts)
        .collect()
}
