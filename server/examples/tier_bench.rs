//! Figures of tiering against a real MinIO (the peer binary of `scripts/install-peers.sh`),
//! through the engine (no HTTP, so the figures are the tier's own):
//!
//! 1. ingest rate with tiering on (every sealed block uploaded as it is sealed) against off,
//!    one warm-up pair discarded, the order within a pair alternated, median and range; with
//!    the writer thread's own CPU time and run-queue wait, and the CPU seconds of this
//!    process and of MinIO (which shares the machine's cores);
//! 2. point-read latency of a tiered record, cold (range cache emptied before each read: one
//!    ranged GET) and cached (p50, p99 by hdrhistogram);
//! 3. range-read throughput of a whole tiered entry (cache emptied first: ranged GETs with
//!    read-ahead) against plain aws-sdk-s3 GETs of the same block objects from the same MinIO,
//!    one at a time as the query reads them; which side goes first alternates per run.
//!
//! `cargo run --release -p tsblob-server --example tier_bench -- [records] [payload bytes] [runs]
//! [shared|apart]` (defaults 2000, 65536, 3, shared). Prints Markdown.
//!
//! `shared`: MinIO and this process share every core, as they did in the first runs: on a
//! machine of two cores MinIO's own work for the uploads (about 1.2 CPU s per 256 MB here)
//! takes CPU from the writer, which then waits in the run queue. `apart`: this process is
//! pinned to the first half of the cores and MinIO to the other half (`sched_setaffinity`),
//! a stand-in for the object store on another machine, which is where tiering sends blocks:
//! the ratio then measures what tiering costs the writer on its own device.
//!
//! The allocator is the `tsblob` binary's (mimalloc, `server/src/main.rs`), for both sides:
//! with glibc's malloc the cold query's 4 MiB range buffers were fresh pages every time
//! (27,000 page faults per query against 800 for the plain GETs, whose one buffer is reused),
//! a cost the server does not have.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// CPU seconds (user + system) a process has used so far: `/proc/<pid>/stat` fields 14 and
/// 15, in clock ticks of 1/100 s (Linux's USER_HZ).
fn cpu_secs(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces: count fields after its closing ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // rest starts at field 3 (state): utime is field 14, stime field 15.
    (f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)) as f64 / 100.0
}
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

/// Restricts thread `pid` (0: the calling one) and the threads it creates later to the CPUs
/// `cpus`.
fn set_affinity(pid: libc::pid_t, cpus: std::ops::Range<usize>) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and sched_setaffinity only
    // touch it (and the syscall is async-signal-safe, so it may run in `pre_exec`).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn start_minio(dir: &std::path::Path, cpus: Option<std::ops::Range<usize>>) -> (Minio, String) {
    let bin = std::env::var_os("TSBLOB_PEERS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/tsblob/peers/bin")
        })
        .join("minio");
    let port = free_port();
    let mut cmd = Command::new(&bin);
    if let Some(cpus) = cpus {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure only makes an async-signal-safe syscall.
        unsafe {
            cmd.pre_exec(move || set_affinity(0, cpus.clone()));
        }
    }
    let child = cmd
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

/// CPU seconds this process (every thread) has used so far.
fn process_cpu() -> f64 {
    // SAFETY: clock_gettime writes only into the timespec it is given.
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// This thread's time on a CPU and waiting for one (run queue), in seconds:
/// `/proc/thread-self/schedstat`.
fn thread_sched() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>().unwrap_or(0));
    let (cpu, wait) = (f.next().unwrap_or(0), f.next().unwrap_or(0));
    (cpu as f64 / 1e9, wait as f64 / 1e9)
}

/// Writes `n` records; returns MB/s of acknowledged writes.
fn ingest(store: &Store, n: u64, len: usize) -> f64 {
    ingest_sched(store, n, len).0
}

/// Writes `n` records; returns MB/s of acknowledged writes, and MB per second of the
/// writer thread's own CPU time, and the seconds it waited for a CPU.
fn ingest_sched(store: &Store, n: u64, len: usize) -> (f64, f64, f64) {
    let data: Vec<Vec<u8>> = (0..16).map(|i| payload(i, len)).collect();
    let (c0, w0) = thread_sched();
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
    let wall = t0.elapsed().as_secs_f64();
    let (c1, w1) = thread_sched();
    let mb = n as f64 * len as f64 / 1e6;
    (mb / wall, mb / (c1 - c0).max(1e-9), w1 - w0)
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
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let apart = match args.get(4).map(String::as_str) {
        None | Some("shared") => false,
        Some("apart") if cores >= 2 => true,
        Some("apart") => panic!("`apart` needs at least two cores"),
        Some(other) => panic!("placement {other:?}: use shared or apart"),
    };
    let minio_cpus = apart.then(|| {
        // Before any other thread exists: every thread of this process inherits it.
        set_affinity(0, 0..cores / 2).expect("pinning this process");
        cores / 2..cores
    });
    let tmp = tempfile::tempdir().unwrap();
    let (_minio, endpoint) = start_minio(&tmp.path().join("minio"), minio_cpus);
    std::env::set_var("AWS_ACCESS_KEY_ID", USER);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", PASSWORD);
    let s3 =
        Arc::new(S3Store::connect("s3://tsblob-bench/edge", Some(&endpoint), None, None).unwrap());
    s3.ensure_bucket().unwrap();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let placement = if apart {
        format!(
            "this process pinned to CPUs 0–{}, MinIO to CPUs {}–{} (`apart`)",
            cores / 2 - 1,
            cores / 2,
            cores - 1
        )
    } else {
        "MinIO and this process sharing every core (`shared`)".to_string()
    };
    println!("# Tiering figures\n\nCPU: {cpu}; {cores} cores; {placement}. {n} records of {len} bytes, 4 MiB blocks, SyncPolicy::Never, MinIO single drive on the same machine (tmpfs or disk of /tmp), mimalloc (the server's allocator).\n");

    // 1. Ingest. One warm-up pair (not reported: first writes into a fresh /tmp folder
    // and MinIO's first objects are slower), then `runs` pairs, the order within a pair
    // alternated. CPU seconds of this process (the engine and its uploads) and of MinIO
    // are taken around each ingest, and around ingest + drain for the tiered one.
    struct Run {
        off: f64,
        on: f64,
        drain: f64,
        cpu_on: f64,
        minio_on: f64,
        minio_all: f64,
        cpu_rate_off: f64,
        cpu_rate_on: f64,
        wait_off: f64,
        wait_on: f64,
    }
    let me = std::process::id().to_string();
    let minio_pid = _minio.0.id().to_string();
    let mut results = Vec::new();
    for run in 0..=runs {
        let order = if run % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut r = Run {
            off: 0.0,
            on: 0.0,
            drain: 0.0,
            cpu_on: 0.0,
            minio_on: 0.0,
            minio_all: 0.0,
            cpu_rate_off: 0.0,
            cpu_rate_on: 0.0,
            wait_off: 0.0,
            wait_on: 0.0,
        };
        for tier in order {
            let dir = tmp.path().join(format!("ingest-{run}-{tier}"));
            let cfg = tier.then(|| {
                let mut c = TierConfig::new(s3.clone(), &format!("edge/ingest-{run}"));
                c.every = Duration::from_millis(50);
                c
            });
            let store = open(&dir, cfg);
            store.create_bucket("b", settings(tier)).unwrap();
            let (c0, m0) = (cpu_secs(&me), cpu_secs(&minio_pid));
            let (rate, cpu_rate, wait) = ingest_sched(&store, n, len);
            let (c1, m1) = (cpu_secs(&me), cpu_secs(&minio_pid));
            if tier {
                r.on = rate;
                r.cpu_rate_on = cpu_rate;
                r.wait_on = wait;
                r.drain = wait_drained(&store).as_secs_f64();
                r.cpu_on = c1 - c0;
                r.minio_on = m1 - m0;
                r.minio_all = cpu_secs(&minio_pid) - m0;
            } else {
                r.off = rate;
                r.cpu_rate_off = cpu_rate;
                r.wait_off = wait;
            }
            drop(store);
            let _ = std::fs::remove_dir_all(&dir);
        }
        if run > 0 {
            results.push(r);
        }
    }
    let ratios: Vec<f64> = results.iter().map(|r| r.on / r.off).collect();
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, 0f64), |(l, h), r| (l.min(*r), h.max(*r)));
    println!("## Ingest (engine writes, MB/s)\n\nWall: MB/s of acknowledged writes. Writer CPU: MB per second of the writing thread's own CPU time (what the writer costs, whatever else runs), and the seconds it waited in the run queue for a CPU. CPU seconds of this whole process (writer and uploads) and of MinIO during the tiered ingest, and MinIO's until the uploads drained.\n\n| run | wall off | wall on | on/off | writer-CPU MB/s off | on | on/off | run-queue wait off / on (s) | drained after | CPU s tsblob (on) | CPU s MinIO during ingest | CPU s MinIO to drain |\n|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, r) in results.iter().enumerate() {
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} / {:.2} | {:.2} s | {:.2} | {:.2} | {:.2} |",
            i + 1,
            r.off,
            r.on,
            ratios[i],
            r.cpu_rate_off,
            r.cpu_rate_on,
            r.cpu_rate_on / r.cpu_rate_off,
            r.wait_off,
            r.wait_on,
            r.drain,
            r.cpu_on,
            r.minio_on,
            r.minio_all
        );
    }
    let mut r = ratios.clone();
    println!(
        "\nWall on/off: median **{:.2}** (range {lo:.2}–{hi:.2}); target ≥ 0.90",
        median(&mut r)
    );
    let mut c: Vec<f64> = results
        .iter()
        .map(|r| r.cpu_rate_on / r.cpu_rate_off)
        .collect();
    let (clo, chi) = c
        .iter()
        .fold((f64::MAX, 0f64), |(l, h), r| (l.min(*r), h.max(*r)));
    println!(
        "Writer-CPU on/off: median **{:.2}** (range {clo:.2}–{chi:.2})\n",
        median(&mut c)
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
    let keys: Vec<String> = s3
        .list("edge/read/b/e/")
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .filter(|k| k.ends_with(".blk"))
        .collect();
    let (mut tier_rates, mut plain_rates) = (Vec::new(), Vec::new());
    let (mut tier_cpu, mut plain_cpu) = (Vec::new(), Vec::new());
    let mut gets = Vec::new();
    // Which side reads first alternates: the first one also warms MinIO's page cache.
    for run in 0..runs {
        let plain_get = || {
            let (t0, c0, m0) = (Instant::now(), process_cpu(), cpu_secs(&minio_pid));
            let mut plain = 0u64;
            for k in &keys {
                plain += s3.get(k).unwrap().len() as u64;
            }
            (
                plain as f64 / t0.elapsed().as_secs_f64() / 1e6,
                (process_cpu() - c0, cpu_secs(&minio_pid) - m0),
            )
        };
        let first = (run % 2 == 1).then(plain_get);
        store.tier_clear_cache();
        let before = store.tier_stats().unwrap();
        let (t0, c0, m0) = (Instant::now(), process_cpu(), cpu_secs(&minio_pid));
        let mut bytes = 0u64;
        // As the server's query handler reads: the payload without a copy where it can be.
        for item in store.query("b", "e", &Query::default()).unwrap() {
            let item = item.unwrap();
            bytes += match item.payload().unwrap() {
                Some(p) => p.len() as u64,
                None => std::io::copy(&mut item.reader().unwrap(), &mut std::io::sink()).unwrap(),
            };
        }
        tier_rates.push(bytes as f64 / t0.elapsed().as_secs_f64() / 1e6);
        tier_cpu.push((process_cpu() - c0, cpu_secs(&minio_pid) - m0));
        let after = store.tier_stats().unwrap();
        gets.push(after.gets - before.gets);
        let (rate, cpu) = first.unwrap_or_else(plain_get);
        plain_rates.push(rate);
        plain_cpu.push(cpu);
    }
    let ratios: Vec<f64> = tier_rates
        .iter()
        .zip(&plain_rates)
        .map(|(a, b)| a / b)
        .collect();
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, 0f64), |(l, h), r| (l.min(*r), h.max(*r)));
    println!("\n## Range read of a whole tiered entry (MB/s of payload; plain: MB/s of block objects)\n\nCPU s: this process's CPU time (every thread) and MinIO's during the pass.\n\n| run | tsblob query (cold cache) | plain aws-sdk-s3 GETs | ratio | CPU s query / plain | MinIO CPU s query / plain |\n|---|---|---|---|---|---|");
    for i in 0..runs {
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.3} / {:.3} | {:.2} / {:.2} |",
            i + 1,
            tier_rates[i],
            plain_rates[i],
            ratios[i],
            tier_cpu[i].0,
            plain_cpu[i].0,
            tier_cpu[i].1,
            plain_cpu[i].1
        );
    }
    let mut r = ratios;
    println!(
        "\nmedian ratio **{:.2}** (range {lo:.2}–{hi:.2}); target ≥ 0.80; {} block objects; ranged GETs per query (prefetches included): {gets:?}",
        median(&mut r),
        keys.len()
    );
}
