//! The `tsblob` binary: `serve`, the CLI client, and `bench`.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "tsblob", version, about = "A store for timestamped blobs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compare tsblob with MinIO and ReductStore on one seeded workload.
    Bench(tsblob_compare::BenchArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Bench(args) => tsblob_compare::run(args).await,
    }
}
