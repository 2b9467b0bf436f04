//! Criterion benchmarks of the engine: writes (single and batched, 1 KB to 1 MB), point
//! reads next to a bare heed get, range reads, a scan that matches nothing and zstd. `cargo bench -p tsblob-benches
//! --bench engine`. The headline figures with their targets come from `--bench figures`.
#![allow(clippy::unwrap_used)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::time::Duration;
use tsblob_benches::*;
use tsblob_storage::*;

fn writes(c: &mut Criterion) {
    let mut g = c.benchmark_group("write");
    g.measurement_time(Duration::from_secs(3)).sample_size(10);
    for size in [1024usize, 100 << 10, 1 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let data = payload(1, size);
        let mut ts = 0u64;
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(format!("single/{size}"), |b| {
            b.iter(|| {
                ts += 1;
                s.write("b", "single", &WriteMeta::at(ts), &data).unwrap()
            })
        });
        let batch = ((1 << 20) / size).clamp(1, 1000);
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(format!("batch{batch}/{size}"), |b| {
            b.iter_batched(
                || {
                    (0..batch)
                        .map(|_| {
                            ts += 1;
                            BatchRecord {
                                meta: WriteMeta::at(ts),
                                data: data.clone(),
                            }
                        })
                        .collect::<Vec<_>>()
                },
                |recs| s.write_batch("b", "batch", recs).unwrap(),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn reads(c: &mut Criterion) {
    let mut g = c.benchmark_group("point_read");
    g.measurement_time(Duration::from_secs(3));
    for size in [1024usize, 100 << 10] {
        let n = if size == 1024 { 100_000 } else { 5_000 };
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        fill(&s, "b", "e", n, size);
        let (_hdir, env, db) = bare_heed(n, size);
        let mut i = 0u64;
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(format!("tsblob/{size}"), |b| {
            b.iter(|| {
                i = i.wrapping_add(2654435761);
                s.read("b", "e", Some((i % n) * 1000)).unwrap()
            })
        });
        g.bench_function(format!("bare_heed/{size}"), |b| {
            b.iter(|| {
                i = i.wrapping_add(2654435761);
                let t = env.read_txn().unwrap();
                db.get(&t, &((i % n) * 1000).to_be_bytes())
                    .unwrap()
                    .unwrap()
                    .to_vec()
            })
        });
    }
    g.finish();
}

fn range(c: &mut Criterion) {
    let mut g = c.benchmark_group("range_read");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    let n = 10_000u64;
    let size = 100 << 10;
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    fill(&s, "b", "e", n, size);
    g.throughput(Throughput::Bytes(n * size as u64));
    g.bench_function("10000x100KB", |b| {
        b.iter(|| {
            let mut bytes = 0;
            for item in s.query("b", "e", &Query::default()).unwrap() {
                bytes += item.unwrap().data().unwrap().len();
            }
            bytes
        })
    });
    g.finish();
}

/// A scan that matches nothing (a label no record has: the cheapest condition, so the
/// walk's own cost per record skipped shows most): records judged per second. Pins the
/// cost of the walk's clock check (`next_bounded` hands back after 50 ms of judging, so a
/// client that left is seen: docs/benchmarks/filtered-scan-2026-11-29.md).
fn filtered(c: &mut Criterion) {
    let mut g = c.benchmark_group("filtered_scan");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    let n = 200_000u64;
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    fill(&s, "b", "e", n, 16);
    let none = Query {
        filters: vec![LabelFilter::Has("nope".into())],
        ..Query::default()
    };
    g.throughput(Throughput::Elements(n));
    g.bench_function("200000_none_match", |b| {
        b.iter(|| s.query("b", "e", &none).unwrap().count())
    });
    g.finish();
}

criterion_group!(benches, writes, reads, range, filtered);
criterion_main!(benches);
