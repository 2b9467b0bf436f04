//! The `tsblob` binary: `serve`, the CLI client, and `bench`.

use clap::{Parser, Subcommand};
use tsblob_server::{cli, config, loadgen, serve};

/// mimalloc instead of glibc's malloc: payload buffers are allocated on the blocking pool
/// and freed on the runtime's workers once sent, and glibc answered that pattern with page
/// faults and zero-filling on every query step (see docs/benchmarks/range-read-2026-11-22.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "tsblob", version, about = "A store for timestamped blobs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
// Parsed once per process: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Run the server (data in ./tsblob-data, listening on 127.0.0.1:8686 by default).
    Serve(config::ServeArgs),
    /// Create, list, inspect and remove buckets on a server.
    Bucket(cli::BucketArgs),
    /// Write a file as one record.
    Put(cli::PutArgs),
    /// Read one record (the latest by default) to a file or stdout.
    Get(cli::GetArgs),
    /// Read the records of a time range into a folder or to stdout.
    Query(cli::QueryArgs),
    /// Records and bytes of an entry per time step (from the index, no payload read).
    Histogram(cli::HistogramArgs),
    /// Follow an entry: one line per record, then each new one as it is written.
    Tail(cli::TailArgs),
    /// Remove a record, a time range or a whole entry.
    Rm(cli::RmArgs),
    /// Compare tsblob with MinIO and ReductStore on one seeded workload.
    Bench(tsblob_compare::BenchArgs),
    /// Drive a server with HTTP load and print throughput and latency (for docs/benchmarks).
    #[command(hide = true)]
    Loadgen(loadgen::LoadArgs),
    /// The `limit` target of `tsblob bench` (started by it): discards writes, answers reads
    /// from a mapped file.
    #[command(hide = true, name = "bench-limit")]
    BenchLimit(tsblob_compare::limit::LimitArgs),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Cli::parse().command).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the chain of causes on one line, without a backtrace.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::run(args).await,
        Command::Bucket(args) => cli::bucket(args).await,
        Command::Put(args) => cli::put(args).await,
        Command::Get(args) => cli::get(args).await,
        Command::Query(args) => cli::query(args).await,
        Command::Histogram(args) => cli::histogram(args).await,
        Command::Rm(args) => cli::rm(args).await,
        Command::Tail(args) => cli::tail(args).await,
        Command::Bench(args) => tsblob_compare::run(args).await,
        Command::Loadgen(args) => loadgen::run(args).await,
        Command::BenchLimit(args) => tsblob_compare::limit::serve(args).await,
    }
}
