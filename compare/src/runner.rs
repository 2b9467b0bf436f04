//! Runs every phase on every target, one target at a time (so they never compete for the CPU
//! or the disk), then writes the report.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use indicatif::{MultiProgress, ProgressDrawTarget};

use crate::phases::{self, Ctx};
use crate::report::{self, Cell, DiskCell, Machine, Report, TargetInfo};
use crate::spawn::{disk_usage, find_binary, free_port, Spawned};
use crate::targets::minio::Minio;
use crate::targets::reductstore::Reductstore;
use crate::targets::tsblob::Tsblob;
use crate::targets::{Target, TargetKind};
use crate::workload::{Phase, SizePlan, Workload};
use crate::BenchArgs;

/// How long a spawned target may take to answer its health route.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const MINIO_USER: &str = "tsblobbench";
const MINIO_PASSWORD: &str = "tsblobbench-secret";

/// Runs the whole comparison and writes the outputs.
pub async fn run(args: &BenchArgs, workload: Workload, kinds: Vec<TargetKind>) -> Result<()> {
    // Find every binary to spawn before starting anything, so a missing one fails fast.
    let minio_bin = match (&args.minio_url, kinds.contains(&TargetKind::Minio)) {
        (None, true) => Some(find_binary("minio", args.minio_bin.as_deref())?),
        _ => None,
    };
    let reductstore_bin = match (
        &args.reductstore_url,
        kinds.contains(&TargetKind::Reductstore),
    ) {
        (None, true) => Some(find_binary("reductstore", args.reductstore_bin.as_deref())?),
        _ => None,
    };
    let started = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = match &args.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            d.clone()
        }
        None => std::env::temp_dir(),
    };
    let run_dir = tempfile::Builder::new()
        .prefix("tsblob-bench-")
        .tempdir_in(&base)
        .with_context(|| format!("cannot create a run folder in {}", base.display()))?;
    let progress = MultiProgress::new();
    if args.no_progress {
        progress.set_draw_target(ProgressDrawTarget::hidden());
    }
    let workload = Arc::new(workload);
    // Unique per run: a connected target may already hold buckets of earlier runs.
    let bucket = format!("tsblob-bench-{started_unix}");
    let mut report = Report {
        tool: format!("tsblob bench {}", env!("CARGO_PKG_VERSION")),
        started_unix,
        total_seconds: 0.0,
        load_1m_start: report::load_1m(),
        load_1m_end: None,
        machine: Machine::detect(),
        workload: (*workload).clone(),
        targets: Vec::new(),
        cells: Vec::new(),
        disk: Vec::new(),
    };
    let bins = Bins {
        minio: minio_bin,
        reductstore: reductstore_bin,
    };
    if kinds.iter().any(|k| k.is_limit()) {
        std::fs::write(
            run_dir.path().join("limit-workload.json"),
            serde_json::to_string(&*workload)?,
        )?;
    }
    let rounds = args.repeat.max(1);
    let (mut cells, mut disk) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        // A fresh bucket per round: a connected target keeps the records of earlier rounds.
        let bucket = match rounds {
            1 => bucket.clone(),
            _ => format!("{bucket}-r{round}"),
        };
        let (mut round_cells, mut round_disk) = (Vec::new(), Vec::new());
        for &kind in &kinds {
            let dir = match rounds {
                1 => run_dir.path().join(kind.name()),
                _ => run_dir.path().join(format!("{}-r{round}", kind.name())),
            };
            let (info, c, d) = run_kind(
                args,
                kind,
                &bins,
                &dir,
                run_dir.path(),
                &workload,
                &bucket,
                &progress,
            )
            .await?;
            if round == 1 {
                report.targets.push(info);
            }
            round_cells.extend(c);
            round_disk.extend(d);
            if !args.keep_data {
                // Free the disk before the next target writes (the run folder goes at the end).
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
        cells.push(round_cells);
        disk.push(round_disk);
    }
    report.cells = report::median_of_rounds(&cells);
    report.disk = report::median_disk_of_rounds(&disk);
    progress.clear().ok();
    report.total_seconds = started.elapsed().as_secs_f64();
    report.load_1m_end = report::load_1m();
    report.compute_ratios();
    println!("{}", report::table::render(&report));
    write_outputs(args, &report)?;
    if args.keep_data {
        let kept = run_dir.keep();
        eprintln!("data and logs kept in {}", kept.display());
    }
    Ok(())
}

/// `--render FILE`: a report written with `--json`, printed and written again in the formats
/// asked for (a table added to the renderings shows on an earlier run).
pub fn render(args: &BenchArgs, path: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let report = Report::from_json(&text)
        .with_context(|| format!("{} is not a report written by --json", path.display()))?;
    println!("{}", report::table::render(&report));
    write_outputs(args, &report)
}

fn write_outputs(args: &BenchArgs, report: &Report) -> Result<()> {
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    if let Some(p) = &args.json {
        write(p, serde_json::to_string_pretty(report)?)?;
    }
    if let Some(p) = &args.csv {
        write(p, report::csv::render(report))?;
    }
    if let Some(p) = &args.markdown {
        write(p, report::markdown::render(report))?;
    }
    if let Some(p) = &args.chart {
        report::chart::write(report, p)?;
    }
    Ok(())
}

/// Peer binaries found before anything starts.
struct Bins {
    minio: Option<PathBuf>,
    reductstore: Option<PathBuf>,
}

/// Starts (or connects to) one target and runs every phase on it.
#[allow(clippy::too_many_arguments)]
async fn run_kind(
    args: &BenchArgs,
    kind: TargetKind,
    bins: &Bins,
    dir: &Path,
    run_dir: &Path,
    workload: &Arc<Workload>,
    bucket: &str,
    progress: &MultiProgress,
) -> Result<TargetRun> {
    let c = workload.concurrency;
    match kind {
        TargetKind::Tsblob => {
            let (url, spawned) = match &args.tsblob_url {
                Some(url) => (url.clone(), None),
                None => {
                    let bin = match &args.tsblob_bin {
                        Some(b) => b.clone(),
                        None => {
                            std::env::current_exe().context("cannot find the tsblob executable")?
                        }
                    };
                    let s = spawn_tsblob(&bin, dir).await?;
                    (s.url.clone(), Some(s))
                }
            };
            let target = Arc::new(Tsblob::new(&url, c)?);
            run_target(target, &url, spawned, workload, bucket, progress).await
        }
        TargetKind::Reductstore => {
            let (url, spawned, token) = match (&args.reductstore_url, &bins.reductstore) {
                (Some(url), _) => (url.clone(), None, args.reductstore_token.clone()),
                (None, bin) => {
                    let bin = bin.as_deref().context("reductstore binary not resolved")?;
                    let s = spawn_reductstore(bin, dir).await?;
                    (s.url.clone(), Some(s), None)
                }
            };
            let target = Arc::new(Reductstore::new(&url, token, c)?);
            run_target(target, &url, spawned, workload, bucket, progress).await
        }
        TargetKind::Minio => {
            let (url, spawned, version, user, password) = match (&args.minio_url, &bins.minio) {
                (Some(url), _) => (
                    url.clone(),
                    None,
                    None,
                    args.minio_access_key.clone(),
                    args.minio_secret_key.clone(),
                ),
                (None, bin) => {
                    let bin = bin.as_deref().context("minio binary not resolved")?;
                    let version = minio_version(bin);
                    let s = spawn_minio(bin, dir).await?;
                    (
                        s.url.clone(),
                        Some(s),
                        Some(version),
                        MINIO_USER.into(),
                        MINIO_PASSWORD.into(),
                    )
                }
            };
            let target = Arc::new(Minio::new(&url, &user, &password, c, version));
            run_target(target, &url, spawned, workload, bucket, progress).await
        }
        TargetKind::Limit | TargetKind::LimitStore => {
            let bin = std::env::current_exe().context("cannot find the tsblob executable")?;
            let workload_file = run_dir.join("limit-workload.json");
            let s = spawn_limit(&bin, dir, &workload_file, kind).await?;
            let url = s.url.clone();
            let target = Arc::new(Tsblob::limit(kind, &url, c)?);
            run_target(target, &url, Some(s), workload, bucket, progress).await
        }
    }
}

/// The `limit` and `limit-store` targets: this executable's hidden `bench-limit`
/// subcommand (with `--store` for `limit-store`).
async fn spawn_limit(bin: &Path, dir: &Path, workload: &Path, kind: TargetKind) -> Result<Spawned> {
    let data = dir.join("data");
    std::fs::create_dir_all(&data)?;
    let port = free_port()?;
    let mut cmd = Command::new(bin);
    cmd.arg("bench-limit")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data")
        .arg(&data)
        .arg("--workload")
        .arg(workload);
    if kind == TargetKind::LimitStore {
        cmd.arg("--store");
    }
    let log = dir.join(format!("{}.log", kind.name()));
    let mut s = Spawned::start(kind.name(), cmd, port, data, log)?;
    s.wait_ready("/health", READY_TIMEOUT).await?;
    Ok(s)
}

/// The connection caps of a tsblob the bench starts.
pub(crate) const BENCH_CONNECTIONS: [&str; 4] = [
    "--max-connections",
    "4096",
    "--max-connections-per-ip",
    "4096",
];

pub(crate) async fn spawn_tsblob(bin: &Path, dir: &Path) -> Result<Spawned> {
    let data = dir.join("data");
    std::fs::create_dir_all(&data)?;
    let port = free_port()?;
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .arg("--data")
        .arg(&data)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        // Warnings only, like the peers: per-request logging is not what is measured.
        .arg("--log")
        .arg("warn")
        // Every virtual user from 127.0.0.1: room for any `concurrency`, as the peers
        // have (the default caps: 256 connections, 128 per address; docs/operations.md).
        .args(BENCH_CONNECTIONS)
        .env_remove("TSBLOB_TOKEN");
    let mut s = Spawned::start("tsblob", cmd, port, data, dir.join("tsblob.log"))?;
    s.wait_ready("/health", READY_TIMEOUT).await?;
    Ok(s)
}

pub(crate) async fn spawn_reductstore(bin: &Path, dir: &Path) -> Result<Spawned> {
    let data = dir.join("data");
    std::fs::create_dir_all(&data)?;
    let port = free_port()?;
    let mut cmd = Command::new(bin);
    // 1.21 refuses to start without a token unless auth is disabled explicitly.
    cmd.env("RS_DATA_PATH", &data)
        .env("RS_HOST", "127.0.0.1")
        .env("RS_PORT", port.to_string())
        .env("RS_DISABLE_AUTH", "true")
        .env("RS_LOG_LEVEL", "WARN")
        .env_remove("RS_API_TOKEN")
        .env_remove("RS_INIT_API_TOKEN");
    let mut s = Spawned::start("reductstore", cmd, port, data, dir.join("reductstore.log"))?;
    s.wait_ready("/api/v1/alive", READY_TIMEOUT).await?;
    Ok(s)
}

async fn spawn_minio(bin: &Path, dir: &Path) -> Result<Spawned> {
    let data = dir.join("data");
    std::fs::create_dir_all(&data)?;
    let port = free_port()?;
    let console = free_port()?;
    let mut cmd = Command::new(bin);
    cmd.arg("server")
        .arg(&data)
        .arg("--address")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--console-address")
        .arg(format!("127.0.0.1:{console}"))
        .arg("--quiet")
        .env("MINIO_ROOT_USER", MINIO_USER)
        .env("MINIO_ROOT_PASSWORD", MINIO_PASSWORD)
        .env("MINIO_UPDATE", "off")
        .env("MINIO_BROWSER", "off");
    let mut s = Spawned::start("minio", cmd, port, data, dir.join("minio.log"))?;
    s.wait_ready("/minio/health/ready", READY_TIMEOUT).await?;
    Ok(s)
}

/// `minio --version`, plus the module version `scripts/install-peers.sh` recorded: a binary
/// built by `go install` reports itself as DEVELOPMENT.GOGET.
fn minio_version(bin: &Path) -> String {
    let reported = Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string());
    let stamp = bin
        .parent()
        .and_then(Path::parent)
        .map(|peers| peers.join("minio.version"))
        .and_then(|p| std::fs::read_to_string(p).ok());
    match stamp {
        Some(module) => format!(
            "{reported}; module github.com/minio/minio@{}",
            module.trim()
        ),
        None => reported,
    }
}

type TargetRun = (TargetInfo, Vec<Cell>, Vec<DiskCell>);

/// Every phase, every size, on one target; `spawned` is dropped (stopped) on return.
async fn run_target<T: Target>(
    target: Arc<T>,
    url: &str,
    spawned: Option<Spawned>,
    workload: &Arc<Workload>,
    bucket: &str,
    progress: &MultiProgress,
) -> Result<TargetRun> {
    let kind = target.kind();
    let info = TargetInfo {
        kind,
        version: target
            .version()
            .await
            .with_context(|| format!("{} did not say its version", kind.name()))?,
        url: url.to_string(),
        spawned: spawned.is_some(),
        client: target.client_settings(),
    };
    target.create_bucket(bucket, None).await?;
    let ctx = Ctx {
        target: Arc::clone(&target),
        bucket: Arc::from(bucket),
        workload: Arc::clone(workload),
        progress: progress.clone(),
    };
    let has = |p: Phase| workload.phases.contains(&p);
    let cpu = || spawned.as_ref().and_then(Spawned::cpu_seconds);
    // The server CPU used since `before` (a reading of `cpu`).
    let used_since = |before: Option<f64>| before.zip(cpu()).map(|(a, b)| (b - a).max(0.0));
    // ... attached to a phase's cell.
    let with_cpu = |mut cell: Cell, before: Option<f64>| {
        cell.server_cpu_s = used_since(before);
        cell.load_1m = report::load_1m();
        cell
    };
    let mut cells = Vec::new();
    let mut disk = Vec::new();
    for plan in workload.size_plans() {
        let plan = Arc::new(plan);
        let size = plan.size;
        let before = match &spawned {
            Some(s) => Some(disk_usage(&s.data_dir)?),
            None => None,
        };
        let c0 = cpu();
        cells.push(match plan.single {
            0 => Cell::na(
                Phase::WriteSingle,
                size,
                kind,
                "single_fraction gives this phase no records",
            ),
            _ => with_cpu(
                Cell::measured(
                    Phase::WriteSingle,
                    size,
                    kind,
                    phases::write_single(&ctx, &plan).await?,
                ),
                c0,
            ),
        });
        let c0 = cpu();
        let batch = phases::write_batch(&ctx, &plan).await?;
        let batch_cpu = used_since(c0);
        let batch_load = report::load_1m();
        // Writes that failed leave records the reads would miss: say so instead of reading.
        let write_errors: u64 = cells
            .last()
            .and_then(|c: &Cell| c.result.as_ref())
            .map_or(0, |r| r.errors)
            + batch.errors;
        let first_write_error = cells
            .last()
            .and_then(|c: &Cell| c.result.as_ref()?.first_error.clone())
            .or_else(|| batch.first_error.clone());
        cells.push(match target.batch_support() {
            Err(reason) => Cell::na(Phase::WriteBatch, size, kind, reason),
            Ok(()) if plan.single == plan.count => Cell::na(
                Phase::WriteBatch,
                size,
                kind,
                "single_fraction gives this phase no records",
            ),
            Ok(()) => {
                let mut cell = Cell::measured(Phase::WriteBatch, size, kind, batch);
                cell.server_cpu_s = batch_cpu;
                cell.load_1m = batch_load;
                cell
            }
        });
        disk.push(disk_cell(&spawned, before, &plan, kind)?);
        if write_errors > 0 {
            let reason = format!(
                "not run: {write_errors} writes of this size failed, so the target does not \
                 hold the planned records (first error: {})",
                first_write_error.unwrap_or_default()
            );
            for p in [
                Phase::RangeWhole,
                Phase::RangeSub,
                Phase::RangeWhen,
                Phase::PointRead,
            ] {
                if has(p) {
                    cells.push(Cell::na(p, size, kind, &reason));
                }
            }
            continue;
        }
        if has(Phase::RangeWhole) {
            let c0 = cpu();
            let s =
                phases::range(&ctx, &plan, Phase::RangeWhole, phases::whole_windows(&plan)).await?;
            cells.push(with_cpu(
                Cell::measured(Phase::RangeWhole, size, kind, s),
                c0,
            ));
        }
        if has(Phase::RangeSub) {
            let windows = phases::sub_windows(&plan, workload.sub_windows, workload.sub_window_max);
            let c0 = cpu();
            let s = phases::range(&ctx, &plan, Phase::RangeSub, windows).await?;
            cells.push(with_cpu(Cell::measured(Phase::RangeSub, size, kind, s), c0));
        }
        if has(Phase::RangeWhen) {
            cells.push(match target.when_support() {
                Err(reason) => Cell::na(Phase::RangeWhen, size, kind, reason),
                Ok(()) if plan.labels < 2 => Cell::na(
                    Phase::RangeWhen,
                    size,
                    kind,
                    "the condition compares labels l0 and l1: the workload needs labels >= 2",
                ),
                Ok(()) => {
                    let c0 = cpu();
                    let s = phases::range_when(&ctx, &plan, phases::whole_windows(&plan)).await?;
                    let mut cell = with_cpu(Cell::measured(Phase::RangeWhen, size, kind, s), c0);
                    cell.note = Some(
                        "when = {\"$and\": [{\"&l0\": {\"$eq\": \"cam-<entry>\"}}, {\"&l1\": {\"$gte\": 3}}, {\"&l1\": {\"$lt\": 6}}]}: 30% of the records, each checked"
                            .into(),
                    );
                    cell
                }
            });
        }
        if has(Phase::PointRead) {
            let c0 = cpu();
            let s = phases::point_reads(&ctx, &plan).await?;
            cells.push(with_cpu(
                Cell::measured(Phase::PointRead, size, kind, s),
                c0,
            ));
        }
    }
    if has(Phase::Fifo) {
        let size = workload.fifo.record_size;
        cells.push(match target.fifo_support() {
            Err(reason) => Cell::na(Phase::Fifo, size, kind, reason),
            Ok(()) => {
                let fifo_bucket = format!("{bucket}-fifo");
                target.create_bucket(&fifo_bucket, Some(&workload.fifo)).await?;
                let c0 = cpu();
                let (s, final_size, held) = phases::fifo(&ctx, &fifo_bucket).await?;
                let mut cell = with_cpu(Cell::measured(Phase::Fifo, size, kind, s), c0);
                let limit = workload.fifo.quota_bytes + workload.fifo.block_bytes;
                cell.note = Some(format!(
                    "quota {}: bucket holds {:.1} MB after {:.1} MB written (limit quota + one block = {:.1} MB)",
                    if held { "held" } else { "NOT held" },
                    final_size as f64 / 1e6,
                    workload.fifo_bytes() as f64 / 1e6,
                    limit as f64 / 1e6
                ));
                cell
            }
        });
    }
    drop(spawned);
    Ok((info, cells, disk))
}

fn disk_cell(
    spawned: &Option<Spawned>,
    before: Option<u64>,
    plan: &SizePlan,
    kind: TargetKind,
) -> Result<DiskCell> {
    let payload = plan.count * plan.size;
    let mut cell = DiskCell {
        size: plan.size,
        target: kind,
        payload_bytes: payload,
        disk_bytes: None,
        per_payload_byte: None,
        reason: None,
    };
    match (spawned, before) {
        (Some(s), Some(before)) => {
            let grown = disk_usage(&s.data_dir)?.saturating_sub(before);
            cell.disk_bytes = Some(grown);
            cell.per_payload_byte = Some(grown as f64 / payload.max(1) as f64);
        }
        _ => cell.reason = Some("connected by URL: its data folder is not ours to measure".into()),
    }
    Ok(cell)
}
