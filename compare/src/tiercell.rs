//! `tsblob bench --tier-engines minio,seaweedfs`: the object-store tier measured per S3
//! engine, through tsblob's HTTP API, so a user can pick a backend from numbers. Each engine
//! is started on loopback by [`crate::s3peer`] (MinIO single-drive; SeaweedFS as a master,
//! three volume servers with replication 001 and a filer with the S3 gateway), and per round:
//!
//! - **ingest, tiering off then on**: `tsblob serve` on a fresh folder, one virtual user per
//!   entry writing single records (`POST`), MB/s of acknowledged payload; with tiering on
//!   (`tier_local_max: 0`: every sealed block goes up as it is sealed), also the seconds
//!   until the uploads caught up after the last write;
//! - **cold range reads**: the server restarted (its range cache empty, the last blocks
//!   sealed and uploaded), then disjoint windows of every entry queried by one virtual user
//!   per entry, each window read once, so every byte comes from the object store: MB/s of
//!   payload over the whole pass, and the time to first byte (send → first frame of the
//!   answer) and to the last byte of each query, p50 and p95 (hdrhistogram).
//!
//! Records: `--records` per entry (default 512), of the first `--sizes` (default 64 KiB), 4
//! entries, 4 MiB blocks; `--repeat` rounds, the median round per cell. Every record read
//! back is counted and its length checked.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde_json::{json, Value};
use tsblob_proto::client::Client;
use tsblob_proto::framing::Event;

use crate::runner::BENCH_CONNECTIONS;
use crate::s3peer::{Engine, S3Peer, SEAWEED_REPLICATION, SEAWEED_VOLUMES};
use crate::spawn::{free_port, Spawned};
use crate::targets::http_client;
use crate::BenchArgs;

const USER: &str = "tsblobbench";
const PASSWORD: &str = "tsblobbench-secret";
const BUCKET: &str = "tier";
const ENTRIES: u32 = 4;
const BLOCK: u64 = 4 << 20;
/// Payload bytes of one cold range query.
const WINDOW_BYTES: u64 = 2 << 20;
const READY: Duration = Duration::from_secs(60);
const DRAIN_LIMIT: Duration = Duration::from_secs(600);

/// One round of one engine.
#[derive(Debug, Clone, Default)]
struct Round {
    ingest_off: f64,
    ingest_on: f64,
    drain_s: f64,
    read_mb_s: f64,
    ttfb_p50_ms: f64,
    ttfb_p95_ms: f64,
    query_p95_ms: f64,
    queries: usize,
    engine_cpu_s: f64,
}

fn median_by(rounds: &[Round], f: impl Fn(&Round) -> f64) -> f64 {
    let mut v: Vec<f64> = rounds.iter().map(f).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs the cell of every engine named in `--tier-engines` and prints a Markdown table.
pub async fn run(args: &BenchArgs) -> Result<()> {
    let engines: Vec<Engine> = args
        .tier_engines
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| Engine::parse(s.trim()))
        .collect::<Result<_>>()?;
    let tsblob_bin = match &args.tsblob_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("cannot find the tsblob executable")?,
    };
    let size = match args.sizes.first() {
        Some(s) => crate::workload::parse_size(s)? as usize,
        None => 64 << 10,
    };
    let records = args.records.unwrap_or(512);
    if size == 0 || records == 0 {
        bail!("--tier-engines needs records of at least one byte (--sizes, --records)");
    }
    let base = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base)?;
    let run_dir = tempfile::Builder::new()
        .prefix("tsblob-bench-tier-")
        .tempdir_in(&base)?;
    let machine = crate::report::Machine::detect();
    println!(
        "tier cell: {ENTRIES} entries × {records} records of {size} B, 4 MiB blocks, {} round(s); {} ({} CPUs); the engines on the same machine",
        args.repeat, machine.cpu_model, machine.cpus
    );
    let pool: Vec<bytes::Bytes> = (0..16u64)
        .map(|i| {
            let mut b = vec![0u8; size];
            Xoshiro256PlusPlus::seed_from_u64(i).fill_bytes(&mut b);
            bytes::Bytes::from(b)
        })
        .collect();
    // Rounds alternate the engines (a machine whose load drifts weighs on each alike).
    let mut table: Vec<(Engine, Vec<Round>)> = engines.iter().map(|&e| (e, Vec::new())).collect();
    for round in 0..args.repeat {
        for (engine, rounds) in &mut table {
            let engine = *engine;
            let dir = run_dir.path().join(format!("{}-{round}", engine.name()));
            std::fs::create_dir_all(&dir)?;
            let r = one_round(engine, &dir, &tsblob_bin, records, &pool)
                .await
                .with_context(|| format!("{} round {round}", engine.name()))?;
            println!(
                "  round {round} {:<10} ingest off {:>6.1} MB/s on {:>6.1} MB/s (drained after {:.1} s)  cold range read {:>6.1} MB/s  TTFB p50 {:>6.1} ms p95 {:>6.1} ms",
                engine.name(), r.ingest_off, r.ingest_on, r.drain_s, r.read_mb_s, r.ttfb_p50_ms, r.ttfb_p95_ms
            );
            rounds.push(r);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    println!("\n| engine | layout | ingest off MB/s | ingest on MB/s | on/off | uploads drained after | cold range read MB/s | TTFB p50 | TTFB p95 | query p95 | engine CPU s (whole round) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (engine, rounds) in &table {
        let layout = match engine {
            Engine::Minio => "1 process, 1 drive".to_string(),
            Engine::Seaweedfs => format!(
                "master + {SEAWEED_VOLUMES} volume servers (replication {SEAWEED_REPLICATION}) + filer/S3"
            ),
        };
        let m = |f: fn(&Round) -> f64| median_by(rounds, f);
        println!(
            "| {} | {layout} | {:.1} | {:.1} | {:.2} | {:.1} s | {:.1} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} |",
            engine.name(),
            m(|r| r.ingest_off),
            m(|r| r.ingest_on),
            m(|r| r.ingest_on / r.ingest_off),
            m(|r| r.drain_s),
            m(|r| r.read_mb_s),
            m(|r| r.ttfb_p50_ms),
            m(|r| r.ttfb_p95_ms),
            m(|r| r.query_p95_ms),
            m(|r| r.engine_cpu_s),
        );
    }
    if let Some((_, r)) = table.first() {
        if let Some(r) = r.first() {
            println!(
                "\nMedian of {} round(s) per cell; {} cold range queries of {} KiB per round.",
                args.repeat,
                r.queries,
                WINDOW_BYTES >> 10
            );
        }
    }
    Ok(())
}

/// `tsblob serve` on `data`, tiering into `peer` under `prefix` when given.
async fn serve(
    bin: &Path,
    data: &Path,
    log: &Path,
    tier: Option<(&S3Peer, &str)>,
) -> Result<Spawned> {
    std::fs::create_dir_all(data)?;
    let port = free_port()?;
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .arg("--data")
        .arg(data)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--log")
        .arg("warn")
        // Every virtual user from 127.0.0.1: room for any `concurrency`, as the peers
        // have (the default caps: 256 connections, 128 per address; docs/operations.md).
        .args(BENCH_CONNECTIONS)
        .env_remove("TSBLOB_TOKEN");
    if let Some((peer, prefix)) = tier {
        cmd.args(["--tier-url", &format!("s3://tsblob-bench/{prefix}")])
            .args(["--tier-endpoint", peer.endpoint()])
            .env("AWS_ACCESS_KEY_ID", USER)
            .env("AWS_SECRET_ACCESS_KEY", PASSWORD);
    }
    let mut s = Spawned::start("tsblob", cmd, port, data.to_path_buf(), log.to_path_buf())?;
    s.wait_ready("/health", READY).await?;
    Ok(s)
}

fn ts_of(i: u64) -> u64 {
    1_700_000_000_000_000 + i * 1000
}

/// One virtual user per entry writes its records; MB/s of acknowledged payload.
async fn ingest(client: &Client, records: u64, pool: &[bytes::Bytes]) -> Result<f64> {
    let t0 = Instant::now();
    let mut users = Vec::new();
    for e in 0..ENTRIES {
        let (client, pool) = (client.clone(), pool.to_vec());
        users.push(tokio::spawn(async move {
            let entry = format!("e{e}");
            let none: Vec<(String, String)> = Vec::new();
            for i in 0..records {
                let body = pool[((i + e as u64) % pool.len() as u64) as usize].clone();
                client
                    .write(
                        BUCKET,
                        &entry,
                        Some(ts_of(i)),
                        "application/octet-stream",
                        &none,
                        body,
                    )
                    .await
                    .with_context(|| format!("writing {entry} record {i}"))?;
            }
            anyhow::Ok(())
        }));
    }
    for u in users {
        u.await.context("a writer task failed")??;
    }
    let bytes = ENTRIES as f64 * records as f64 * pool[0].len() as f64;
    Ok(bytes / t0.elapsed().as_secs_f64() / 1e6)
}

/// Waits until at most `left` blocks of the bucket are not tiered; answers the wait.
async fn drained(client: &Client, left: u64) -> Result<Duration> {
    let t0 = Instant::now();
    loop {
        let b = client.bucket(BUCKET).await?;
        let info = &b["info"];
        let (blocks, tiered) = (
            info["block_count"].as_u64().unwrap_or(0),
            info["tiered_blocks"].as_u64().unwrap_or(0),
        );
        if tiered + left >= blocks {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > DRAIN_LIMIT {
            bail!("uploads did not drain within {DRAIN_LIMIT:?}: {info}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn settings(tier: bool) -> Value {
    if tier {
        json!({"max_block_size": BLOCK, "tier_local_max": 0})
    } else {
        json!({"max_block_size": BLOCK})
    }
}

async fn one_round(
    engine: Engine,
    dir: &Path,
    bin: &Path,
    records: u64,
    pool: &[bytes::Bytes],
) -> Result<Round> {
    let size = pool[0].len() as u64;
    let peer_dir = dir.to_path_buf();
    let peer = tokio::task::spawn_blocking(move || {
        S3Peer::start_in(engine, USER, PASSWORD, None, Some(&peer_dir))
    })
    .await
    .context("starting the engine")??;
    let cpu0: f64 = peer.pids().iter().map(|p| pid_cpu(*p)).sum();
    let http = http_client(ENTRIES as usize)?;
    let mut r = Round::default();

    // Ingest with tiering off.
    let s = serve(bin, &dir.join("off"), &dir.join("off.log"), None).await?;
    let client = Client::with_http(http.clone(), &s.url, None);
    client.create_bucket(BUCKET, &settings(false)).await?;
    r.ingest_off = ingest(&client, records, pool).await?;
    drop(s);
    let _ = std::fs::remove_dir_all(dir.join("off"));

    // Ingest with tiering on, then the uploads' catch-up (each entry's active block stays).
    let prefix = format!("{}-on", engine.name());
    let data = dir.join("on");
    let s = serve(bin, &data, &dir.join("on.log"), Some((&peer, &prefix))).await?;
    let client = Client::with_http(http.clone(), &s.url, None);
    client.create_bucket(BUCKET, &settings(true)).await?;
    r.ingest_on = ingest(&client, records, pool).await?;
    r.drain_s = drained(&client, ENTRIES as u64).await?.as_secs_f64();
    drop(s);

    // Restarted: the active blocks are sealed and go up; the range cache is empty.
    let s = serve(bin, &data, &dir.join("read.log"), Some((&peer, &prefix))).await?;
    let client = Client::with_http(http.clone(), &s.url, None);
    drained(&client, 0).await?;
    let per_window = (WINDOW_BYTES / size).max(1);
    // A gap of a block between windows: no two queries share a block, so none is cached.
    let gap = BLOCK.div_ceil(size) + 1;
    let t0 = Instant::now();
    let mut users = Vec::new();
    for e in 0..ENTRIES {
        let client = client.clone();
        users.push(tokio::spawn(async move {
            let entry = format!("e{e}");
            let path = format!("{}/query", tsblob_proto::client::entry_path(BUCKET, &entry));
            let mut out = Vec::new();
            let mut start = 0;
            while start + per_window <= records {
                let params = vec![
                    ("start".to_string(), ts_of(start).to_string()),
                    ("stop".to_string(), ts_of(start + per_window).to_string()),
                ];
                let q0 = Instant::now();
                let mut stream = client.query(&path, &params).await?;
                let (mut ttfb, mut bytes, mut n) = (None, 0u64, 0u64);
                while let Some(ev) = stream.next_event().await? {
                    ttfb.get_or_insert_with(|| q0.elapsed());
                    match ev {
                        Event::Record(h) => {
                            if h.payload_len != size {
                                bail!("{entry}: a record of {} bytes, not {size}", h.payload_len);
                            }
                            bytes += h.payload_len;
                            n += 1;
                        }
                        Event::End(end) if end != n => {
                            bail!("{entry}: the query ended after {end} records, {n} received")
                        }
                        Event::Error(j) => {
                            bail!("{entry}: query failed: {}", String::from_utf8_lossy(&j))
                        }
                        _ => {}
                    }
                }
                if n != per_window {
                    bail!("{entry}: {n} records of a window of {per_window}");
                }
                out.push((ttfb.unwrap_or_default(), q0.elapsed(), bytes));
                start += per_window + gap;
            }
            anyhow::Ok(out)
        }));
    }
    let mut queries = Vec::new();
    for u in users {
        queries.extend(u.await.context("a reader task failed")??);
    }
    let wall = t0.elapsed().as_secs_f64();
    if queries.is_empty() {
        bail!("too few records per entry ({records}) for one cold range query");
    }
    let mut ttfb = Histogram::<u64>::new(3)?;
    let mut whole = Histogram::<u64>::new(3)?;
    let mut bytes = 0;
    for (t, w, b) in &queries {
        ttfb.record(t.as_micros() as u64)?;
        whole.record(w.as_micros() as u64)?;
        bytes += b;
    }
    r.read_mb_s = bytes as f64 / wall / 1e6;
    r.ttfb_p50_ms = ttfb.value_at_quantile(0.5) as f64 / 1e3;
    r.ttfb_p95_ms = ttfb.value_at_quantile(0.95) as f64 / 1e3;
    r.query_p95_ms = whole.value_at_quantile(0.95) as f64 / 1e3;
    r.queries = queries.len();
    r.engine_cpu_s = peer.pids().iter().map(|p| pid_cpu(*p)).sum::<f64>() - cpu0;
    drop(s);
    tokio::task::spawn_blocking(move || drop(peer))
        .await
        .context("stopping the engine")?;
    Ok(r)
}

/// CPU seconds (user + system) process `pid` has used so far (0 when unknown).
fn pid_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if tick <= 0 {
        return 0.0;
    }
    f.iter().sum::<u64>() as f64 / tick as f64
}
