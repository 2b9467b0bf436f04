//! `tsblob bench`: replays one seeded workload against tsblob, MinIO and ReductStore.
//!
//! Code map: [`workload`] is the seeded plan (what exists, with which bytes); [`targets`] holds
//! one client per system behind the `Target` trait; [`spawn`] starts peers on fresh folders and
//! stops them whatever happens; [`phases`] drives a target with virtual users; [`runner`] runs
//! every phase on every target; [`report`] renders the results.

pub mod limit;
pub mod loadgen;
pub mod mixed;
pub mod payload;
pub mod phases;
pub mod replicate;
pub mod report;
pub mod runner;
pub mod s3peer;
pub mod spawn;
pub mod stats;
pub mod targets;
pub mod tiercell;
pub mod workload;

use std::future::Future;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::targets::TargetKind;
use crate::workload::{parse_size, Phase, Workload};

/// Flags of `tsblob bench`. Workload flags override the `--workload` file, which overrides the
/// defaults.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Peers to compare against tsblob, comma separated: minio, reductstore, limit (a
    /// server on tsblob's stack that discards writes and answers reads from memory, each
    /// record from its own copy of the bytes: the physical limit; tsblob's cells are reported as a percentage of it),
    /// limit-store (the same server appending each write's body to a file per entry: what
    /// storing at all costs).
    #[arg(long, value_delimiter = ',')]
    pub against: Vec<String>,
    /// Runs every target's phases this many times (a fresh server and bucket each round,
    /// targets alternating) and reports the median round of each cell and the range of
    /// records/s; with --replicate, the rounds of the replication measure (each system once
    /// per round, on fresh folders).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub repeat: u32,

    /// Workload file (TOML, or JSON when it ends in .json); see docs/benchmarking.md.
    #[arg(long, value_name = "FILE")]
    pub workload: Option<PathBuf>,
    /// Multiplies every record count (0.01 for a smoke run, 10 for a long one).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Seed of timestamps, labels and payloads.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Record sizes, comma separated (1KiB, 10KiB, 100KiB, 1MiB, 10MiB by default; KB, MB
    /// are powers of 1000).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<String>,
    /// Records per size (default: 10,000 up to 100 KiB, 300 MiB worth above).
    #[arg(long)]
    pub records: Option<u64>,
    /// Payload bytes per size instead of a record count (e.g. 200MiB).
    #[arg(long)]
    pub bytes_per_size: Option<String>,
    /// Entries per size.
    #[arg(long)]
    pub entries: Option<u32>,
    /// Virtual users (requests in flight); connection pools are sized to it.
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Records per batch request.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Labels per record.
    #[arg(long)]
    pub labels: Option<u32>,
    /// Point reads per size (before --scale).
    #[arg(long)]
    pub point_reads: Option<u64>,
    /// Sub-window queries per size.
    #[arg(long)]
    pub sub_windows: Option<u32>,
    /// Phases, comma separated: write-single, write-batch, range-whole, range-sub,
    /// range-when, point-read, fifo. The write phases always run (they load the data the
    /// others read).
    #[arg(long, value_delimiter = ',')]
    pub phases: Vec<String>,
    /// Adds the FIFO steady-state phase.
    #[arg(long)]
    pub fifo: bool,

    /// Use a running tsblob instead of spawning one.
    #[arg(long, env = "TSBLOB_BENCH_TSBLOB_URL")]
    pub tsblob_url: Option<String>,
    /// tsblob binary to spawn (default: this executable).
    #[arg(long)]
    pub tsblob_bin: Option<PathBuf>,
    /// Use a running MinIO instead of spawning one.
    #[arg(long)]
    pub minio_url: Option<String>,
    /// MinIO access key (for --minio-url).
    #[arg(long, env = "MINIO_ROOT_USER", default_value = "tsblobbench")]
    pub minio_access_key: String,
    /// MinIO secret key (for --minio-url).
    #[arg(
        long,
        env = "MINIO_ROOT_PASSWORD",
        default_value = "tsblobbench-secret",
        hide_env_values = true
    )]
    pub minio_secret_key: String,
    /// MinIO binary to spawn (default: PATH, then ~/.cache/tsblob/peers/bin).
    #[arg(long)]
    pub minio_bin: Option<PathBuf>,
    /// Use a running ReductStore instead of spawning one.
    #[arg(long)]
    pub reductstore_url: Option<String>,
    /// ReductStore API token (for --reductstore-url with auth on).
    #[arg(long, env = "RS_API_TOKEN", hide_env_values = true)]
    pub reductstore_token: Option<String>,
    /// ReductStore binary to spawn (default: PATH, then ~/.cache/tsblob/peers/bin).
    #[arg(long)]
    pub reductstore_bin: Option<PathBuf>,

    /// Folder under which spawned targets get their data folders (one disk for all).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Keep the spawned targets' data folders and logs.
    #[arg(long)]
    pub keep_data: bool,

    /// Write the report as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the report as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write the report as Markdown.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Write the throughput chart as SVG.
    #[arg(long, value_name = "FILE")]
    pub chart: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    pub no_progress: bool,
    /// Render a report written earlier with --json (to --markdown, --csv, --chart and the
    /// terminal) instead of running anything.
    #[arg(long, value_name = "FILE")]
    pub render: Option<PathBuf>,

    /// Measure replication instead of the workload's phases: tsblob → tsblob against
    /// ReductStore → ReductStore, catch-up of a backlog and lag under a steady rate (four
    /// spawned servers per round; --json writes the rounds).
    #[arg(long)]
    pub replicate: bool,
    /// --replicate: records in the backlog.
    #[arg(long, default_value_t = 10_000)]
    pub replicate_records: u64,
    /// --replicate: payload bytes per record.
    #[arg(long, default_value_t = 10_240)]
    pub replicate_size: usize,
    /// --replicate: records per second written during the lag measure.
    #[arg(long, default_value_t = 200)]
    pub replicate_rate: u64,
    /// --replicate: seconds of steady writes.
    #[arg(long, default_value_t = 10)]
    pub replicate_seconds: u64,

    /// Measure writes under a mixed load instead (issue 30): --mixed-writers writers of
    /// --mixed-size records at --mixed-rate records/s each, first alone, then while
    /// --mixed-readers clients run range queries, one client follows the first writer and a
    /// replication task copies the bucket to a second server; write latency p50/p99 of
    /// both phases. tsblob, and ReductStore (its own replication) when --against names it.
    #[arg(long)]
    pub mixed: bool,
    /// --mixed: writers, one entry each.
    #[arg(long, default_value_t = 8)]
    pub mixed_writers: u32,
    /// --mixed: payload size of each write.
    #[arg(long, default_value = "100KiB")]
    pub mixed_size: String,
    /// --mixed: records per second of each writer.
    #[arg(long, default_value_t = 10)]
    pub mixed_rate: u64,
    /// --mixed: seconds of each phase.
    #[arg(long, default_value_t = 10)]
    pub mixed_seconds: u64,
    /// --mixed: range-query clients (one preloaded entry each) during the mixed phase.
    #[arg(long, default_value_t = 4)]
    pub mixed_readers: u32,
    /// --mixed: whole-entry range queries per second of each reader (each one reads the
    /// reader's 100 preloaded records); 0 reads in a loop as fast as the server answers.
    /// The default, 1 query/s of 100 × 100 KiB each, is 4 dashboards or analysis jobs
    /// reading 40 MB/s in all, five times what the writers write.
    #[arg(long, default_value_t = 1.0)]
    pub mixed_read_rate: f64,

    /// Measure the object-store tier instead, once per S3 engine named (comma separated:
    /// minio, seaweedfs), each started on loopback: ingest with tiering off and on, and cold
    /// range reads from the tier (MB/s, time to first byte p50/p95). Uses --records (per
    /// entry, default 512), the first of --sizes (default 64KiB) and --repeat.
    #[arg(long, value_delimiter = ',', value_name = "ENGINES")]
    pub tier_engines: Vec<String>,
}

impl BenchArgs {
    /// The workload: defaults, then the file, then the flags.
    pub fn workload(&self) -> Result<Workload> {
        let mut w = match &self.workload {
            Some(path) => Workload::from_file(path)?,
            None => Workload::default(),
        };
        if let Some(v) = self.scale {
            w.scale = v;
        }
        if let Some(v) = self.seed {
            w.seed = v;
        }
        if !self.sizes.is_empty() {
            w.sizes = self
                .sizes
                .iter()
                .map(|s| parse_size(s))
                .collect::<Result<_>>()?;
        }
        if let Some(v) = self.records {
            w.records_per_size = Some(v);
        }
        if let Some(v) = &self.bytes_per_size {
            w.bytes_per_size = Some(parse_size(v)?);
            w.records_per_size = None;
        }
        if let Some(v) = self.entries {
            w.entries = v;
        }
        if let Some(v) = self.concurrency {
            w.concurrency = v;
        }
        if let Some(v) = self.batch_size {
            w.batch_size = v;
        }
        if let Some(v) = self.labels {
            w.labels = v;
        }
        if let Some(v) = self.point_reads {
            w.point_reads = v;
        }
        if let Some(v) = self.sub_windows {
            w.sub_windows = v;
        }
        if !self.phases.is_empty() {
            w.phases = self
                .phases
                .iter()
                .map(|p| Phase::parse(p))
                .collect::<Result<_>>()?;
        }
        if self.fifo && !w.phases.contains(&Phase::Fifo) {
            w.phases.push(Phase::Fifo);
        }
        // The write phases load the data every other phase reads.
        for p in [Phase::WriteBatch, Phase::WriteSingle] {
            if !w.phases.contains(&p) {
                w.phases.insert(0, p);
            }
        }
        w.phases.sort();
        w.phases.dedup();
        w.validate()?;
        Ok(w)
    }

    /// tsblob, then the peers in the order given, each once.
    pub fn targets(&self) -> Result<Vec<TargetKind>> {
        let mut out = vec![TargetKind::Tsblob];
        for name in &self.against {
            if name.trim().is_empty() {
                continue;
            }
            let kind = TargetKind::parse_peer(name)?;
            if !out.contains(&kind) {
                out.push(kind);
            }
        }
        Ok(out)
    }
}

/// Runs the comparison and prints the report. Ctrl-C (or SIGTERM) stops the spawned targets
/// and removes their data before returning an error.
pub async fn run(args: BenchArgs) -> Result<()> {
    if let Some(path) = &args.render {
        return runner::render(&args, path);
    }
    // Listening starts before anything is spawned: a signal that comes while the first
    // target starts is seen, not lost (a listener made later misses it, and the run went
    // on to its end).
    let interrupt = Interrupt::listen()?;
    if !args.tier_engines.is_empty() {
        let what = "spawned servers and engines were stopped and their data removed";
        return interrupt.or(tiercell::run(&args), what).await;
    }
    let what = "spawned targets were stopped and their data removed";
    if args.mixed {
        return interrupt.or(mixed::run(&args), what).await;
    }
    if args.replicate {
        return interrupt.or(replicate::run(&args), what).await;
    }
    let workload = args.workload()?;
    let targets = args.targets()?;
    interrupt
        .or(runner::run(&args, workload, targets), what)
        .await
}

/// Ctrl-C and SIGTERM, listened for from the moment this is made.
struct Interrupt {
    int: Signal,
    term: Signal,
}

impl Interrupt {
    fn listen() -> Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).context("cannot listen for Ctrl-C")?,
            term: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
        })
    }

    /// `run`'s result, or an error saying `what` if a signal comes first. A signal wins
    /// over a run that ends in the same poll. Dropping `run` stops what it spawned.
    async fn or(mut self, run: impl Future<Output = Result<()>>, what: &str) -> Result<()> {
        tokio::select! {
            biased;
            _ = self.int.recv() => bail!("interrupted: {what}"),
            _ = self.term.recv() => bail!("interrupted: {what}"),
            result = run => result,
        }
    }
}
