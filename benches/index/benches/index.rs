//! The engine's index workload (see the crate's `src/lib.rs`) on LMDB, RocksDB and redb:
//!
//! - `insert_1M/<store>`: open a fresh store, insert 1,000,000 keys in transactions of
//!   10,000, sync;
//! - `point/<store>`: one lookup of the greatest key `<= (entry, ts)`, own read transaction;
//! - `scan_1000/<store>`: 1,000 consecutive keys of one entry;
//! - `cold_open/<store>`: open the loaded store with its files out of the page cache, and
//!   one point lookup.
//!
//! The bytes each loaded store takes on disk are printed as `disk <store> <bytes>`.
//! `scripts/bench-index.sh` runs it and collects the medians.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use tsblob_bench_index::{disk_bytes, evict, load, Index, Lmdb, Probes, Redb, Rocks, KEYS};

fn insert<I: Index>(c: &mut Criterion) {
    let mut g = c.benchmark_group("insert_1M");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(10));
    g.bench_function(I::NAME, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir_in(work_dir()).expect("a temporary folder");
                let t0 = Instant::now();
                let ix = load::<I>(dir.path());
                total += t0.elapsed();
                ix.close();
            }
            total
        })
    });
    g.finish();
}

fn reads<I: Index>(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(work_dir()).expect("a temporary folder");
    let ix = load::<I>(dir.path());
    println!(
        "disk {} {} bytes for {KEYS} keys",
        I::NAME,
        disk_bytes(dir.path())
    );
    let mut probes = Probes::new(11);
    let mut g = c.benchmark_group("point");
    g.measurement_time(Duration::from_secs(3));
    g.bench_function(I::NAME, |b| {
        b.iter(|| {
            let (e, ts) = probes.point();
            black_box(ix.point(e, ts).expect("every probe is inside an entry"))
        })
    });
    g.finish();
    let mut g = c.benchmark_group("scan_1000");
    g.measurement_time(Duration::from_secs(3));
    g.bench_function(I::NAME, |b| {
        b.iter(|| {
            let (e, ts) = probes.scan_start();
            black_box(ix.scan(e, ts))
        })
    });
    g.finish();

    let mut g = c.benchmark_group("cold_open");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(2));
    let mut open = Some(ix);
    g.bench_function(I::NAME, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                if let Some(ix) = open.take() {
                    ix.close();
                }
                evict(dir.path());
                let (e, ts) = probes.point();
                let t0 = Instant::now();
                let ix = I::open(dir.path());
                black_box(ix.point(e, ts).expect("every probe is inside an entry"));
                total += t0.elapsed();
                open = Some(ix);
            }
            total
        })
    });
    g.finish();
    if let Some(ix) = open {
        ix.close();
    }
}

/// Where the stores are made: `TSBLOB_BENCH_DIR`, else the system's temporary folder
/// (mind that a tmpfs there measures memory, not a disk).
fn work_dir() -> std::path::PathBuf {
    std::env::var_os("TSBLOB_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into)
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    insert::<Lmdb>(&mut c);
    insert::<Rocks>(&mut c);
    insert::<Redb>(&mut c);
    reads::<Lmdb>(&mut c);
    reads::<Rocks>(&mut c);
    reads::<Redb>(&mut c);
    c.final_summary();
}
