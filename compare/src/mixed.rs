//! `tsblob bench --mixed`: writes that must stay fast while others read (issue 30).
//!
//! Per round and system (tsblob, and ReductStore when `--against` names it), two spawned
//! servers on fresh folders, a source and a destination:
//!
//! 1. **preload**: `--mixed-readers` entries of [`PRELOAD`] records each (the readers' data);
//! 2. **alone**: `--mixed-writers` writers, one entry each, write `--mixed-size` records
//!    at `--mixed-rate` records/s each for `--mixed-seconds`; every write's latency (from
//!    sending it to its answer) goes into a histogram;
//! 3. **mixed**: a replication task from the source to the destination is created (each
//!    system's own feature: it has the preload and the alone phase's records to copy), then
//!    the same writers run again while `--mixed-readers` clients run whole-window range
//!    queries over the preloaded entries, `--mixed-read-rate` per second each (0: in a
//!    loop), every byte checked against the seed,
//!    and one client follows the first writer's entry (tsblob: a live tail,
//!    `follow=true`; ReductStore, which has no streaming tail: a read of each record the
//!    writer acknowledged, as soon as it was).
//!
//! The report gives write latency p50/p99/max of both phases and the ratio of the p99s
//! (issue 30's target: mixed p99 ≤ 2× alone), what the readers and the tail got, how far
//! replication came, and the source's CPU time in each phase.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use serde_json::json;

use crate::payload::Expected;
use crate::replicate::{create_task, dst_count, spawn_pair, Sys, BUCKET};
use crate::spawn::{find_binary, Spawned};
use crate::targets::reductstore::Reductstore;
use crate::targets::tsblob::Tsblob;
use crate::targets::{BatchRecord, Target, TargetKind};
use crate::workload::{parse_size, SizePlan, BASE_TS, TS_STEP};
use crate::BenchArgs;

/// Records of each reader's entry.
const PRELOAD: u64 = 100;
/// Records per preload batch (ReductStore refuses batches whose headers pass its limit).
const PRELOAD_BATCH: u64 = 20;

/// One round of one system.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Round {
    pub system: &'static str,
    pub writes: u64,
    pub alone_p50_ms: f64,
    pub alone_p99_ms: f64,
    pub alone_max_ms: f64,
    pub mixed_p50_ms: f64,
    pub mixed_p99_ms: f64,
    pub mixed_max_ms: f64,
    /// Mixed p99 ÷ alone p99.
    pub p99_ratio: f64,
    /// Writes that started more than one period after their planned time (the writer was
    /// still waiting for its previous answer), alone and mixed.
    pub late_alone: u64,
    pub late_mixed: u64,
    /// Records the readers read (and checked) during the mixed phase, per second.
    pub reads_per_s: f64,
    /// Records the tail received during the mixed phase.
    pub tailed: u64,
    /// Records at the destination when the mixed phase ended, and at the source.
    pub replicated: u64,
    pub source_records: u64,
    /// CPU seconds of the source server in each phase.
    pub cpu_alone_s: f64,
    pub cpu_mixed_s: f64,
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

fn histogram() -> Histogram<u64> {
    // Constant bounds that hdrhistogram documents as valid: this cannot fail at run time.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant histogram bounds are valid")
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

/// Runs the mixed measure and prints it.
pub async fn run(args: &BenchArgs) -> Result<()> {
    let size = parse_size(&args.mixed_size)?;
    if args.mixed_writers == 0 || args.mixed_rate == 0 || args.mixed_seconds == 0 {
        bail!("--mixed-writers, --mixed-rate and --mixed-seconds must be at least 1");
    }
    if !(args.mixed_read_rate >= 0.0 && args.mixed_read_rate.is_finite()) {
        bail!("--mixed-read-rate must be a number of queries per second, 0 or more");
    }
    let tsblob_bin = match &args.tsblob_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("cannot find the tsblob executable")?,
    };
    let mut systems = vec![Sys::Tsblob];
    if args.targets()?.contains(&TargetKind::Reductstore) {
        systems.push(Sys::Reductstore);
    }
    let rs_bin = match systems.contains(&Sys::Reductstore) {
        true => find_binary("reductstore", args.reductstore_bin.as_deref())?,
        false => std::path::PathBuf::new(),
    };
    let base = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base)?;
    let run_dir = tempfile::Builder::new()
        .prefix("tsblob-bench-mixed-")
        .tempdir_in(&base)?;
    let machine = crate::report::Machine::detect();
    println!(
        "mixed: {} writers × {} B at {} records/s each for {} s, alone then with {} range readers \
         ({}), one tail and a replication task; {} round(s); {} ({} CPUs)",
        args.mixed_writers,
        size,
        args.mixed_rate,
        args.mixed_seconds,
        args.mixed_readers,
        match args.mixed_read_rate {
            r if r > 0.0 => format!("{r} whole-entry queries/s each"),
            _ => "unpaced".to_string(),
        },
        args.repeat,
        machine.cpu_model,
        machine.cpus
    );
    let mut rounds: Vec<Round> = Vec::new();
    for round in 0..args.repeat {
        for &sys in &systems {
            let dir = run_dir.path().join(format!("{round}-{}", sys.name()));
            let r = one_round(sys, args, size, &dir, &tsblob_bin, &rs_bin)
                .await
                .with_context(|| format!("{} round {round}", sys.name()))?;
            println!(
                "  round {round} {:<12} write latency alone p50 {:>6.2} p99 {:>7.2} max {:>7.2} ms | \
                 mixed p50 {:>6.2} p99 {:>7.2} max {:>7.2} ms | p99 ×{:.2} | late {}/{} | \
                 reads {:>6.0} rec/s, tail {}, replicated {}/{} | CPU {:.2}/{:.2} s",
                r.system,
                r.alone_p50_ms,
                r.alone_p99_ms,
                r.alone_max_ms,
                r.mixed_p50_ms,
                r.mixed_p99_ms,
                r.mixed_max_ms,
                r.p99_ratio,
                r.late_alone,
                r.late_mixed,
                r.reads_per_s,
                r.tailed,
                r.replicated,
                r.source_records,
                r.cpu_alone_s,
                r.cpu_mixed_s
            );
            rounds.push(r);
        }
    }
    println!("\nmedian (range) over {} round(s):", args.repeat);
    for &sys in &systems {
        let pick = |f: fn(&Round) -> f64| -> Vec<f64> {
            rounds
                .iter()
                .filter(|r| r.system == sys.name())
                .map(f)
                .collect()
        };
        let ratio = pick(|r| r.p99_ratio);
        let (lo, hi) = range(&ratio);
        println!(
            "  {:<12} alone p50 {:.2} p99 {:.2} ms; mixed p50 {:.2} p99 {:.2} ms; p99 mixed ÷ alone {:.2} ({lo:.2}–{hi:.2}; target ≤ 2)",
            sys.name(),
            median(pick(|r| r.alone_p50_ms)),
            median(pick(|r| r.alone_p99_ms)),
            median(pick(|r| r.mixed_p50_ms)),
            median(pick(|r| r.mixed_p99_ms)),
            median(ratio.clone()),
        );
    }
    if let Some(p) = &args.json {
        std::fs::write(
            p,
            serde_json::to_string_pretty(&json!({
                "machine": {"cpu_model": machine.cpu_model, "cpus": machine.cpus},
                "writers": args.mixed_writers, "size": size, "rate": args.mixed_rate,
                "seconds": args.mixed_seconds, "readers": args.mixed_readers,
                "read_rate": args.mixed_read_rate,
                "rounds": rounds,
            }))?,
        )?;
    }
    Ok(())
}

async fn one_round(
    sys: Sys,
    args: &BenchArgs,
    size: u64,
    dir: &Path,
    tsblob_bin: &Path,
    rs_bin: &Path,
) -> Result<Round> {
    let (src, dst) = spawn_pair(sys, dir, tsblob_bin, rs_bin).await?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()?;
    let conns = (args.mixed_writers + args.mixed_readers + 2) as usize;
    match sys {
        Sys::Tsblob => {
            let (s, d) = (Tsblob::new(&src.url, conns)?, Tsblob::new(&dst.url, 4)?);
            measure(sys, args, size, &http, &src, &dst, Arc::new(s), &d).await
        }
        Sys::Reductstore => {
            let (s, d) = (
                Reductstore::new(&src.url, None, conns)?,
                Reductstore::new(&dst.url, None, 4)?,
            );
            measure(sys, args, size, &http, &src, &dst, Arc::new(s), &d).await
        }
    }
}

/// What the writers measured in one phase.
struct Written {
    latency: Histogram<u64>,
    late: u64,
}

/// `writers` writers, each to its own entry, at `rate` records/s for `seconds`; the first
/// writer's acknowledged timestamps go to `acked` (the ReductStore tail reads them).
async fn write_phase<T: Target>(
    s: &Arc<T>,
    args: &BenchArgs,
    size: u64,
    acked: Option<tokio::sync::mpsc::UnboundedSender<u64>>,
) -> Result<Written> {
    let period = Duration::from_secs_f64(1.0 / args.mixed_rate as f64);
    let count = args.mixed_rate * args.mixed_seconds;
    let base_ts = now_us();
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for w in 0..args.mixed_writers {
        let s = Arc::clone(s);
        let payload = Bytes::from(Expected::new(7, size, u64::from(w), 0).to_vec());
        let acked = if w == 0 { acked.clone() } else { None };
        tasks.push(tokio::spawn(async move {
            let entry = writer_entry(w);
            let mut h = histogram();
            let mut late = 0;
            for k in 0..count {
                let due = start + period * k as u32;
                if tokio::time::Instant::now() > due + period {
                    late += 1;
                }
                tokio::time::sleep_until(due).await;
                let ts = base_ts + k * TS_STEP;
                let t0 = Instant::now();
                s.write_one(BUCKET, &entry, ts, &[], payload.clone())
                    .await?;
                h.saturating_record(t0.elapsed().as_micros() as u64);
                if let Some(tx) = &acked {
                    let _ = tx.send(ts);
                }
            }
            anyhow::Ok((h, late))
        }));
    }
    let mut out = Written {
        latency: histogram(),
        late: 0,
    };
    for t in tasks {
        let (h, late) = t.await.context("a writer task failed")??;
        out.latency.add(&h).context("merging write latencies")?;
        out.late += late;
    }
    Ok(out)
}

fn writer_entry(w: u32) -> String {
    format!("mixed-w{w}")
}

#[allow(clippy::too_many_arguments)]
async fn measure<T: Target>(
    sys: Sys,
    args: &BenchArgs,
    size: u64,
    http: &reqwest::Client,
    src: &Spawned,
    dst: &Spawned,
    s: Arc<T>,
    d: &T,
) -> Result<Round> {
    s.create_bucket(BUCKET, None).await?;
    d.create_bucket(BUCKET, None).await?;
    // The readers' data: PRELOAD records in each of their entries, seeded and checkable.
    let readers = args.mixed_readers;
    let plan = Arc::new(SizePlan {
        seed: 42,
        size,
        count: PRELOAD * u64::from(readers),
        single: 0,
        entries: readers.max(1),
        labels: 0,
    });
    for e in 0..readers {
        let mut seq = 0;
        while seq < PRELOAD {
            let records = (seq..(seq + PRELOAD_BATCH).min(PRELOAD))
                .map(|q| {
                    let ts = BASE_TS + q * TS_STEP;
                    BatchRecord {
                        ts,
                        labels: Vec::new(),
                        payload: Bytes::from(plan.payload(e, ts)),
                    }
                })
                .collect::<Vec<_>>();
            seq += records.len() as u64;
            let (failed, why) = s.write_batch(BUCKET, &plan.entry_name(e), records).await?;
            if failed > 0 {
                bail!("{failed} preload records failed: {why:?}");
            }
        }
    }

    // Alone.
    let c0 = cpu(src);
    let alone = write_phase(&s, args, size, None).await?;
    let cpu_alone = cpu(src) - c0;

    // Mixed: replication, readers, tail, then the same writers.
    create_task(sys, http, &src.url, &dst.url, false).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let read = Arc::new(AtomicU64::new(0));
    let read_period =
        (args.mixed_read_rate > 0.0).then(|| Duration::from_secs_f64(1.0 / args.mixed_read_rate));
    let mut background = Vec::new();
    for e in 0..readers {
        let (s, plan, stop, read) = (
            Arc::clone(&s),
            Arc::clone(&plan),
            Arc::clone(&stop),
            Arc::clone(&read),
        );
        background.push(tokio::spawn(async move {
            let stop_ts = BASE_TS + plan.entry_len(e) * TS_STEP;
            // Paced: query k starts at start + k × period (later if the previous one is
            // still reading: a slow server is not asked for more). Unpaced with rate 0.
            let start = tokio::time::Instant::now();
            let mut k = 0u32;
            while !stop.load(Ordering::Relaxed) {
                if let Some(period) = read_period {
                    tokio::time::sleep_until(start + period * k).await;
                    k += 1;
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                let got = s.query(BUCKET, &plan, e, BASE_TS, stop_ts, 1).await?;
                if got.records != plan.entry_len(e) {
                    bail!(
                        "a reader got {} of {} records",
                        got.records,
                        plan.entry_len(e)
                    );
                }
                read.fetch_add(got.records, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    let tailed = Arc::new(AtomicU64::new(0));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let tail = {
        let (url, s, stop, tailed) = (
            src.url.clone(),
            Arc::clone(&s),
            Arc::clone(&stop),
            Arc::clone(&tailed),
        );
        tokio::spawn(async move {
            match sys {
                Sys::Tsblob => follow_tsblob(&url, now_us(), &stop, &tailed).await,
                Sys::Reductstore => follow_acked(&*s, rx, &tailed).await,
            }
        })
    };
    let c0 = cpu(src);
    let t0 = Instant::now();
    let mixed = write_phase(&s, args, size, Some(tx)).await?;
    let mixed_s = t0.elapsed().as_secs_f64();
    let cpu_mixed = cpu(src) - c0;
    stop.store(true, Ordering::Relaxed);
    for b in background {
        b.await.context("a reader task failed")??;
    }
    // The tail ends when the writers' sender is dropped (ReductStore) or at the next record
    // or heartbeat after `stop` (tsblob): it is not waited for longer than two seconds.
    let mut tail = tail;
    if let Ok(r) = tokio::time::timeout(Duration::from_secs(2), &mut tail).await {
        r.context("the tail task failed")??;
    } else {
        tail.abort();
    }
    let replicated = dst_count(sys, http, &dst.url).await?;
    let source_records = dst_count(sys, http, &src.url).await?;
    let (a, m) = (&alone.latency, &mixed.latency);
    Ok(Round {
        system: sys.name(),
        writes: m.len(),
        alone_p50_ms: ms(a, 0.5),
        alone_p99_ms: ms(a, 0.99),
        alone_max_ms: a.max() as f64 / 1e3,
        mixed_p50_ms: ms(m, 0.5),
        mixed_p99_ms: ms(m, 0.99),
        mixed_max_ms: m.max() as f64 / 1e3,
        p99_ratio: ms(m, 0.99) / ms(a, 0.99),
        late_alone: alone.late,
        late_mixed: mixed.late,
        reads_per_s: read.load(Ordering::Relaxed) as f64 / mixed_s,
        tailed: tailed.load(Ordering::Relaxed),
        replicated,
        source_records,
        cpu_alone_s: cpu_alone,
        cpu_mixed_s: cpu_mixed,
    })
}

/// tsblob's live tail of the first writer's entry from `start`: counts the records it
/// receives until `stop` (checked at each record or heartbeat).
async fn follow_tsblob(url: &str, start: u64, stop: &AtomicBool, tailed: &AtomicU64) -> Result<()> {
    use tsblob_proto::framing::Event;
    let client = tsblob_proto::client::Client::new(url, None)?;
    let path = format!(
        "{}/query",
        tsblob_proto::client::entry_path(BUCKET, &writer_entry(0))
    );
    let params = [
        ("follow".to_string(), "true".to_string()),
        ("start".to_string(), start.to_string()),
        ("heartbeat".to_string(), "1".to_string()),
    ];
    let mut stream = client.query(&path, &params).await?;
    while !stop.load(Ordering::Relaxed) {
        match stream.next_event().await? {
            Some(Event::Record(_)) => {
                tailed.fetch_add(1, Ordering::Relaxed);
            }
            Some(_) => {}
            None => break,
        }
    }
    Ok(())
}

/// A follower of the first writer for a system without a streaming tail: each record is
/// read as soon as its write was acknowledged.
async fn follow_acked<T: Target>(
    s: &T,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<u64>,
    tailed: &AtomicU64,
) -> Result<()> {
    let entry = writer_entry(0);
    while let Some(ts) = rx.recv().await {
        s.read_point(BUCKET, &entry, ts).await?;
        tailed.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

fn cpu(s: &Spawned) -> f64 {
    s.cpu_seconds().unwrap_or(0.0)
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
