//! Figures of tiering against a real MinIO (the peer binary of `scripts/install-peers.sh`),
//! through the engine (no HTTP, so the figures are the tier's own):
//!
//! 1. ingest rate with tiering on (every sealed block uploaded as it is sealed) against off,
//!    runs alternated, median and range;
//! 2. point-read latency of a tiered record, cold (range cache emptied before each read: one
//!    ranged GET) and cached (p50, p99 by hdrhistogram);
//! 3. range-read throughput of a whole tiered entry (cache emptied first: ranged GETs with
//!    read-ahead) against plain aws-sdk-s3 GETs of the same block objects from the same MinIO,
//!    one at a time as the query reads them.
//!
//! `cargo run --release -p tsblob-server --example tier_bench -- [records] [payload bytes] [runs]`
//! (defaults 2000, 65536, 3). Prints Markdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tsblob_server::tier::S3Store;
use tsblob_storage::{
    BucketSettings, ObjectStore, Query, Store, StoreOptions, SyncPolicy, TierConfig, WriteMeta,
};

const USER: &str = "tsblobbench";
const PASSWORD: &str = "tsblobbench-secret";

struct Minio(Child);
impl Drop for Minio {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_minio(dir: &std::path::Path) -> (Minio, String) {
    let bin = std::env::var_os("TSBLOB_PEERS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/tsblob/peers/bin")
        })
        .join("minio");
    let port = free_port();
    let child = Command::new(&bin)
        .arg("server")
        .arg(dir)
        .args(["--address", &format!("127.0.0.1:{port}")])
        .args(["--console-address", &format!("127.0.0.1:{}", free_port())])
        .env("MINIO_ROOT_USER", USER)
        .env("MINIO_ROOT_PASSWORD", PASSWORD)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "MinIO did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    (Minio(child), format!("http://127.0.0.1:{port}"))
}

fn payload(i: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    Xoshiro256PlusPlus::seed_from_u64(i).fill_bytes(&mut out);
    out
}

fn settings(tier: bool) -> BucketSettings {
    BucketSettings {
        max_block_size: 4 << 20,
        tier_local_max: tier.then_some(0),
        ..BucketSettings::default()
    }
}

/// Opens a store; a store just dropped may still be held by its tier thread until the end of
/// that thread's round (an upload in flight), so a `Locked` folder is retried for a while.
fn open(dir: &std::path::Path, tier: Option<TierConfig>) -> Store {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let opts = StoreOptions {
            sync: SyncPolicy::Never,
            free_space_reserve: 0,
            tier: tier.clone(),
            ..StoreOptions::default()
        };
        match Store::open(dir, opts) {
            Ok(s) => return s,
            Err(tsblob_storage::Error::Open(tsblob_storage::OpenError::Locked(_)))
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("opening {dir:?}: {e}"),
        }
    }
}

/// Writes `n` records; returns MB/s of acknowledged writes.
fn ingest(store: &Store, n: u64, len: usize) -> f64 {
    let data: Vec<Vec<u8>> = (0..16).map(|i| payload(i, len)).collect();
    let t0 = Instant::now();
    for i in 0..n {
        store
            .write(
                "b",
                "e",
                &WriteMeta::at(1_000_000 + i),
                &data[(i % 16) as usize],
            )
            .unwrap();
    }
    (n as f64 * len as f64) / t0.elapsed().as_secs_f64() / 1e6
}

fn wait_drained(store: &Store) -> Duration {
    let t0 = Instant::now();
    loop {
        let s = store.tier_stats().unwrap();
        if s.upload_queue == 0 {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "uploads never drained"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).map_or(2000, |a| a.parse().unwrap());
    let len: usize = args.get(2).map_or(65536, |a| a.parse().unwrap());
    let runs: usize = args.get(3).map_or(3, |a| a.parse().unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let (_minio, endpoint) = start_minio(&tmp.path().join("minio"));
    std::env::set_var("AWS_ACCESS_KEY_ID", USER);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", PASSWORD);
    let s3 = Arc::new(S3Store::connect("s3://tsblob-bench/edge", Some(&endpoint), None).unwrap());
    s3.ensure_bucket().unwrap();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    println!("# Tiering figures\n\nCPU: {cpu}; {} cores. {n} records of {len} bytes, 4 MiB blocks, SyncPolicy::Never, MinIO single drive on the same machine (tmpfs or disk of /tmp).\n", std::thread::available_parallelism().map_or(0, |n| n.get()));

    // 1. Ingest, runs alternated off / on.
    let (mut off, mut on, mut drain) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        for tier in [false, true] {
            let dir = tmp.path().join(format!("ingest-{run}-{tier}"));
            let cfg = tier.then(|| {
                let mut c = TierConfig::new(s3.clone(), &format!("edge/ingest-{run}"));
                c.every = Duration::from_millis(50);
                c
            });
            let store = open(&dir, cfg);
            store.create_bucket("b", settings(tier)).unwrap();
            let rate = ingest(&store, n, len);
            if tier {
                on.push(rate);
                drain.push(wait_drained(&store).as_secs_f64());
            } else {
                off.push(rate);
            }
            drop(store);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let ratios: Vec<f64> = on.iter().zip(&off).map(|(a, b)| a / b).collect();
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, 0f64), |(l, h), r| (l.min(*r), h.max(*r)));
    println!("## Ingest (engine writes, MB/s)\n\n| run | tiering off | tiering on | on/off | uploads drained after |\n|---|---|---|---|---|");
    for i in 0..runs {
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.2} s |",
            i + 1,
            off[i],
            on[i],
            ratios[i],
            drain[i]
        );
    }
    let mut r = ratios.clone();
    println!(
        "\nmedian on/off **{:.2}** (range {lo:.2}–{hi:.2}); target ≥ 0.90\n",
        median(&mut r)
    );

    // A tiered entry to read.
    let dir = tmp.path().join("read");
    let mut cfg = TierConfig::new(s3.clone(), "edge/read");
    cfg.every = Duration::from_millis(50);
    cfg.cache_bytes = 64 << 20;
    let store = open(&dir, Some(cfg.clone()));
    store.create_bucket("b", settings(true)).unwrap();
    ingest(&store, n, len);
    drop(store);
    // Reopened: the last block is sealed and goes up too.
    let store = open(&dir, Some(cfg));
    wait_drained(&store);
    let info = store.bucket("b").unwrap();
    assert_eq!(info.tiered_blocks, info.block_count, "everything tiered");

    // 2. Point reads.
    let mut cold = Histogram::<u64>::new(3).unwrap();
    let mut warm = Histogram::<u64>::new(3).unwrap();
    for k in 0..200u64 {
        let ts = 1_000_000 + (k * 7919) % n;
        store.tier_clear_cache();
        let t0 = Instant::now();
        let rec = store.read("b", "e", Some(ts)).unwrap();
        cold.record(t0.elapsed().as_micros() as u64).unwrap();
        assert_eq!(rec.data.len(), len);
        let t0 = Instant::now();
        let _ = store.read("b", "e", Some(ts)).unwrap();
        warm.record(t0.elapsed().as_micros() as u64).unwrap();
    }
    println!("## Point read of a tiered record (µs, 200 reads)\n\n| | p50 | p99 | max |\n|---|---|---|---|");
    for (name, h) in [("cold (one ranged GET)", &cold), ("cached", &warm)] {
        println!(
            "| {name} | {} | {} | {} |",
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max()
        );
    }

    // 3. Range read: the whole entry through the tier vs plain GETs of the block objects.
    let keys: Vec<(String, u64)> = s3
        .list("edge/read/b/e/")
        .unwrap()
        .into_iter()
        .filter(|(k, _)| k.ends_with(".blk"))
        .collect();
    let (mut tier_rates, mut plain_rates) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        store.tier_clear_cache();
        let t0 = Instant::now();
        let mut bytes = 0u64;
        for item in store.query("b", "e", &Query::default()).unwrap() {
            bytes += item.unwrap().data().unwrap().len() as u64;
        }
        tier_rates.push(bytes as f64 / t0.elapsed().as_secs_f64() / 1e6);
        let t0 = Instant::now();
        let mut plain = 0u64;
        for (k, _) in &keys {
            plain += s3.get(k).unwrap().len() as u64;
        }
        plain_rates.push(plain as f64 / t0.elapsed().as_secs_f64() / 1e6);
    }
    let ratios: Vec<f64> = tier_rates
        .iter()
        .zip(&plain_rates)
        .map(|(a, b)| a / b)
        .collect();
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, 0f64), |(l, h), r| (l.min(*r), h.max(*r)));
    println!("\n## Range read of a whole tiered entry (MB/s of payload; plain: MB/s of block objects)\n\n| run | tsblob query (cold cache) | plain aws-sdk-s3 GETs | ratio |\n|---|---|---|---|");
    for i in 0..runs {
        println!(
            "| {} | {:.0} | {:.0} | {:.2} |",
            i + 1,
            tier_rates[i],
            plain_rates[i],
            ratios[i]
        );
    }
    let mut r = ratios;
    println!(
        "\nmedian ratio **{:.2}** (range {lo:.2}–{hi:.2}); target ≥ 0.80; {} block objects",
        median(&mut r),
        keys.len()
    );
}
