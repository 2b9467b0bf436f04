//! `tsblob bench --replicate`: replication of one system to another of its kind, each with
//! its own feature: tsblob → tsblob (`PUT /api/v1/replications/{name}`) against
//! ReductStore → ReductStore (`POST /api/v1/replications/{name}`), four spawned servers
//! per round on fresh folders of one disk.
//!
//! Two measures per round and system:
//! - **catch-up**: a task is created *paused* (both systems keep the backlog of a paused
//!   task), a backlog of `records` × `size` is written with batches, then the task is
//!   enabled; the time until the destination counts every record.
//! - **lag under a steady rate**: with the task enabled, single records are written at
//!   `rate` per second for `seconds`; the destination's latest timestamp is polled every
//!   20 ms, and each record's latency is the time from its write's acknowledgement to the
//!   poll that first saw it (an upper bound, 20 ms resolution).
//!
//! Payloads are incompressible (the workload's generator): neither side gains by compression.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use serde_json::{json, Value};

use crate::payload::Expected;
use crate::runner::{spawn_reductstore, spawn_tsblob};
use crate::spawn::{find_binary, Spawned};
use crate::targets::reductstore::Reductstore;
use crate::targets::tsblob::Tsblob;
use crate::targets::{BatchRecord, Target};
use crate::BenchArgs;

pub(crate) const BUCKET: &str = "repl";
const ENTRY: &str = "cam";
const TASK: &str = "bench";
/// Records per write request of the backlog (ReductStore answers 431 to a batch of 100:
/// its per-record headers pass its header limit).
const BATCH: usize = 50;
const POLL: Duration = Duration::from_millis(20);
const CATCH_UP_LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sys {
    Tsblob,
    Reductstore,
}

impl Sys {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Sys::Tsblob => "tsblob",
            Sys::Reductstore => "reductstore",
        }
    }
}

/// One round of one system.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Round {
    pub system: &'static str,
    pub catch_up_s: f64,
    pub catch_up_records_per_s: f64,
    /// CPU seconds of source + destination during the catch-up.
    pub catch_up_cpu_s: f64,
    pub lag_p50_ms: f64,
    pub lag_p95_ms: f64,
    pub lag_max_ms: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn range(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Runs the replication comparison and prints it.
pub async fn run(args: &BenchArgs) -> Result<()> {
    let tsblob_bin = match &args.tsblob_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("cannot find the tsblob executable")?,
    };
    let rs_bin = find_binary("reductstore", args.reductstore_bin.as_deref())?;
    let base = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base)?;
    let run_dir = tempfile::Builder::new()
        .prefix("tsblob-bench-repl-")
        .tempdir_in(&base)?;
    let machine = crate::report::Machine::detect();
    println!(
        "replication: backlog {} × {} B, then {} records/s for {} s; {} round(s); {} ({} CPUs)",
        args.replicate_records,
        args.replicate_size,
        args.replicate_rate,
        args.replicate_seconds,
        args.repeat,
        machine.cpu_model,
        machine.cpus
    );
    let mut rounds: Vec<Round> = Vec::new();
    for round in 0..args.repeat {
        for sys in [Sys::Tsblob, Sys::Reductstore] {
            let dir = run_dir.path().join(format!("{round}-{}", sys.name()));
            let r = one_round(sys, args, &dir, &tsblob_bin, &rs_bin)
                .await
                .with_context(|| format!("{} round {round}", sys.name()))?;
            println!(
                "  round {round} {:<12} catch-up {:>7.2} s ({:>7.0} rec/s, CPU {:>5.2} s)  lag p50 {:>6.1} ms  p95 {:>6.1} ms  max {:>6.1} ms",
                r.system, r.catch_up_s, r.catch_up_records_per_s, r.catch_up_cpu_s, r.lag_p50_ms, r.lag_p95_ms, r.lag_max_ms
            );
            rounds.push(r);
        }
    }
    let pick = |sys: &str, f: fn(&Round) -> f64| -> Vec<f64> {
        rounds.iter().filter(|r| r.system == sys).map(f).collect()
    };
    println!("\nmedian (range) over {} round(s):", args.repeat);
    for sys in ["tsblob", "reductstore"] {
        let c = pick(sys, |r| r.catch_up_s);
        let l = pick(sys, |r| r.lag_p50_ms);
        let l95 = pick(sys, |r| r.lag_p95_ms);
        let (clo, chi) = range(&c);
        println!(
            "  {sys:<12} catch-up {:.2} s ({clo:.2}–{chi:.2})  lag p50 {:.1} ms  p95 {:.1} ms",
            median(c.clone()),
            median(l),
            median(l95)
        );
    }
    // Ratios within each round (same machine state), then their median.
    let ratios: Vec<f64> = rounds
        .chunks(2)
        .filter_map(|p| match p {
            [t, r] => Some(r.catch_up_s / t.catch_up_s),
            _ => None,
        })
        .collect();
    let (lo, hi) = range(&ratios);
    println!(
        "  catch-up speed, tsblob vs ReductStore: {:.1}× (range {lo:.1}–{hi:.1}×; target ≥ 3×)",
        median(ratios.clone())
    );
    if let Some(p) = &args.json {
        std::fs::write(
            p,
            serde_json::to_string_pretty(&json!({
                "machine": {"cpu_model": machine.cpu_model, "cpus": machine.cpus},
                "records": args.replicate_records, "size": args.replicate_size,
                "rate": args.replicate_rate, "seconds": args.replicate_seconds,
                "rounds": rounds, "catch_up_ratio_median": median(ratios),
            }))?,
        )?;
    }
    Ok(())
}

pub(crate) async fn spawn_pair(
    sys: Sys,
    dir: &Path,
    tsblob_bin: &Path,
    rs_bin: &Path,
) -> Result<(Spawned, Spawned)> {
    let (a, b) = (dir.join("src"), dir.join("dst"));
    std::fs::create_dir_all(&a)?;
    std::fs::create_dir_all(&b)?;
    Ok(match sys {
        Sys::Tsblob => (
            spawn_tsblob(tsblob_bin, &a).await?,
            spawn_tsblob(tsblob_bin, &b).await?,
        ),
        Sys::Reductstore => (
            spawn_reductstore(rs_bin, &a).await?,
            spawn_reductstore(rs_bin, &b).await?,
        ),
    })
}

async fn one_round(
    sys: Sys,
    args: &BenchArgs,
    dir: &Path,
    tsblob_bin: &Path,
    rs_bin: &Path,
) -> Result<Round> {
    let (src, dst) = spawn_pair(sys, dir, tsblob_bin, rs_bin).await?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()?;
    match sys {
        Sys::Tsblob => {
            let (s, d) = (Tsblob::new(&src.url, 4)?, Tsblob::new(&dst.url, 4)?);
            measure(sys, args, &http, &src, &dst, &s, &d).await
        }
        Sys::Reductstore => {
            let (s, d) = (
                Reductstore::new(&src.url, None, 4)?,
                Reductstore::new(&dst.url, None, 4)?,
            );
            measure(sys, args, &http, &src, &dst, &s, &d).await
        }
    }
}

async fn measure<T: Target>(
    sys: Sys,
    args: &BenchArgs,
    http: &reqwest::Client,
    src: &Spawned,
    dst: &Spawned,
    s: &T,
    d: &T,
) -> Result<Round> {
    s.create_bucket(BUCKET, None).await?;
    d.create_bucket(BUCKET, None).await?;
    create_task(sys, http, &src.url, &dst.url, true).await?;
    // The backlog, written while the task is paused.
    let n = args.replicate_records;
    let size = args.replicate_size as u64;
    let base_ts = now_us();
    let mut ts = base_ts;
    let mut left = n;
    while left > 0 {
        let k = left.min(BATCH as u64);
        let records: Vec<BatchRecord> = (0..k)
            .map(|i| {
                let t = ts + i;
                BatchRecord {
                    ts: t,
                    labels: Vec::new(),
                    payload: Bytes::from(Expected::new(7, size, 0, t).to_vec()),
                }
            })
            .collect();
        let (failed, why) = s.write_batch(BUCKET, ENTRY, records).await?;
        if failed > 0 {
            bail!("{failed} backlog records failed: {why:?}");
        }
        ts += k;
        left -= k;
    }
    let cpu0 = cpu(src) + cpu(dst);
    let t0 = Instant::now();
    enable_task(sys, http, &src.url, &dst.url).await?;
    loop {
        let c = dst_count(sys, http, &dst.url).await?;
        if c >= n {
            break;
        }
        if t0.elapsed() > CATCH_UP_LIMIT {
            bail!("the destination has {c} of {n} records after {CATCH_UP_LIMIT:?}");
        }
        tokio::time::sleep(POLL).await;
    }
    let catch_up = t0.elapsed().as_secs_f64();
    let catch_cpu = cpu(src) + cpu(dst) - cpu0;

    // Steady writes: one record every 1/rate s; poll the destination's latest.
    let rate = args.replicate_rate.max(1);
    let every = Duration::from_secs_f64(1.0 / rate as f64);
    let total = rate * args.replicate_seconds;
    let mut acked: Vec<(u64, Instant)> = Vec::with_capacity(total as usize);
    let mut latencies: Vec<f64> = Vec::with_capacity(total as usize);
    let mut seen_upto = 0usize; // acked[..seen_upto] were seen at the destination
    let start = Instant::now();
    let mut next_write = start;
    let mut next_poll = start;
    let mut written = 0u64;
    let last_ts = loop {
        let now = Instant::now();
        if written < total && now >= next_write {
            let t = ts + written;
            let payload = Bytes::from(Expected::new(7, size, 0, t).to_vec());
            s.write_one(BUCKET, ENTRY, t, &[], payload).await?;
            acked.push((t, Instant::now()));
            written += 1;
            next_write += every;
            continue;
        }
        if now >= next_poll {
            let latest = dst_latest(sys, http, &dst.url).await?;
            let seen_at = Instant::now();
            while seen_upto < acked.len() && acked[seen_upto].0 <= latest {
                latencies.push(seen_at.duration_since(acked[seen_upto].1).as_secs_f64() * 1e3);
                seen_upto += 1;
            }
            next_poll = seen_at + POLL;
            if written == total && seen_upto == acked.len() {
                break latest;
            }
            if start.elapsed() > Duration::from_secs(args.replicate_seconds) + CATCH_UP_LIMIT {
                bail!(
                    "{} of {total} steady records never reached the destination",
                    acked.len() - seen_upto
                );
            }
            continue;
        }
        let wake = if written < total {
            next_write.min(next_poll)
        } else {
            next_poll
        };
        tokio::time::sleep_until(wake.into()).await;
    };
    let count = dst_count(sys, http, &dst.url).await?;
    if count != n + total || last_ts != ts + total - 1 {
        bail!(
            "the destination holds {count} records, {} expected",
            n + total
        );
    }
    latencies.sort_by(|a, b| a.total_cmp(b));
    Ok(Round {
        system: sys.name(),
        catch_up_s: catch_up,
        catch_up_records_per_s: n as f64 / catch_up,
        catch_up_cpu_s: catch_cpu,
        lag_p50_ms: percentile(&latencies, 0.5),
        lag_p95_ms: percentile(&latencies, 0.95),
        lag_max_ms: latencies.last().copied().unwrap_or(f64::NAN),
    })
}

fn cpu(s: &Spawned) -> f64 {
    s.cpu_seconds().unwrap_or(0.0)
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

async fn check(resp: reqwest::Response, what: &str) -> Result<Value> {
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    if !status.is_success() {
        bail!("{what}: {status} {text}");
    }
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub(crate) async fn create_task(
    sys: Sys,
    http: &reqwest::Client,
    src: &str,
    dst: &str,
    paused: bool,
) -> Result<()> {
    let mode = if paused { "paused" } else { "enabled" };
    match sys {
        Sys::Tsblob => {
            let body =
                json!({"src_bucket": BUCKET, "dst_url": dst, "dst_bucket": BUCKET, "mode": mode});
            let r = http
                .put(format!("{src}/api/v1/replications/{TASK}"))
                .json(&body)
                .send()
                .await?;
            check(r, "tsblob: create the replication task").await?;
        }
        Sys::Reductstore => {
            let body = json!({"src_bucket": BUCKET, "dst_bucket": BUCKET, "dst_host": dst,
                              "dst_token": "", "entries": [], "mode": mode});
            let r = http
                .post(format!("{src}/api/v1/replications/{TASK}"))
                .json(&body)
                .send()
                .await?;
            check(r, "ReductStore: create the replication").await?;
        }
    }
    Ok(())
}

async fn enable_task(sys: Sys, http: &reqwest::Client, src: &str, dst: &str) -> Result<()> {
    match sys {
        Sys::Tsblob => create_task(sys, http, src, dst, false).await,
        Sys::Reductstore => {
            let r = http
                .patch(format!("{src}/api/v1/replications/{TASK}/mode"))
                .json(&json!({"mode": "enabled"}))
                .send()
                .await?;
            check(r, "ReductStore: enable the replication").await?;
            Ok(())
        }
    }
}

/// Records of the bucket at the destination.
pub(crate) async fn dst_count(sys: Sys, http: &reqwest::Client, dst: &str) -> Result<u64> {
    let v = check(
        http.get(format!("{dst}/api/v1/b/{BUCKET}")).send().await?,
        "bucket info",
    )
    .await?;
    Ok(match sys {
        Sys::Tsblob => v["info"]["record_count"].as_u64().unwrap_or(0),
        Sys::Reductstore => v["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e["record_count"].as_u64().unwrap_or(0))
            .sum(),
    })
}

/// The destination's latest timestamp of the entry (0: none).
async fn dst_latest(sys: Sys, http: &reqwest::Client, dst: &str) -> Result<u64> {
    let v = check(
        http.get(format!("{dst}/api/v1/b/{BUCKET}")).send().await?,
        "bucket info",
    )
    .await?;
    let entry = v["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == ENTRY)
        .cloned()
        .unwrap_or(Value::Null);
    Ok(match sys {
        Sys::Tsblob => entry["latest"].as_u64().unwrap_or(0),
        Sys::Reductstore => entry["latest_record"].as_u64().unwrap_or(0),
    })
}
