//! Shared helpers of the engine benchmarks (`benches/engine.rs`, `benches/figures.rs`).
#![allow(clippy::unwrap_used)]

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::path::Path;
use tsblob_storage::*;

/// Opens a store tuned for measuring: no free-space reserve, sync policy `never` so the
/// numbers are the engine's and not the disk's (the crash tests cover durability).
pub fn open(dir: &Path) -> Store {
    Store::open(
        dir,
        StoreOptions {
            sync: SyncPolicy::Never,
            free_space_reserve: 0,
            ..StoreOptions::default()
        },
    )
    .unwrap()
}

/// A deterministic, incompressible payload.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    Xoshiro256PlusPlus::seed_from_u64(seed).fill_bytes(&mut out);
    out
}

/// JSON log lines: what compresses well.
pub fn json_logs(len: usize) -> Vec<u8> {
    let mut out = String::with_capacity(len + 200);
    let mut i = 0u64;
    while out.len() < len {
        out.push_str(&format!(
            "{{\"ts\":{},\"level\":\"{}\",\"robot\":\"r{}\",\"msg\":\"joint {} temperature {} C\"}}\n",
            1_700_000_000_000_000u64 + i * 1000,
            ["info", "warn", "debug"][(i % 3) as usize],
            i % 7,
            i % 12,
            20 + i % 50
        ));
        i += 1;
    }
    out.truncate(len);
    out.into_bytes()
}

/// Writes `n` records of `size` bytes at timestamps `0..n` (step 1000 µs) in batches.
pub fn fill(store: &Store, bucket: &str, entry: &str, n: u64, size: usize) {
    let data = payload(7, size);
    let per = (4 << 20) / size.max(1) + 1;
    let mut ts = 0;
    while ts < n {
        let end = (ts + per as u64).min(n);
        let recs: Vec<BatchRecord> = (ts..end)
            .map(|t| BatchRecord {
                meta: WriteMeta::at(t * 1000),
                data: data.clone(),
            })
            .collect();
        for r in store.write_batch(bucket, entry, recs).unwrap() {
            r.unwrap();
        }
        ts = end;
    }
}

/// The bytes `fill` writes, in a bare heed database under the same keys (`ts * 1000`
/// big-endian): what a point read is compared with.
pub fn bare_heed(
    n: u64,
    size: usize,
) -> (
    tempfile::TempDir,
    heed::Env,
    heed::Database<heed::types::Bytes, heed::types::Bytes>,
) {
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: a fresh folder that nothing else opens.
    let env = unsafe {
        heed::EnvOpenOptions::new()
            .map_size(16 << 30)
            .open(dir.path())
            .unwrap()
    };
    let mut w = env.write_txn().unwrap();
    let db: heed::Database<heed::types::Bytes, heed::types::Bytes> =
        env.create_database(&mut w, None).unwrap();
    let data = payload(7, size);
    for ts in 0..n {
        db.put(&mut w, &(ts * 1000).to_be_bytes()[..], &data[..])
            .unwrap();
    }
    w.commit().unwrap();
    (dir, env, db)
}

/// Allocated bytes of every file below `dir`.
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        if m.is_dir() {
            total += disk_usage(&e.path());
        } else {
            total += m.blocks() * 512;
        }
    }
    total
}
