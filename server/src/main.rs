//! The `tsblob` binary: `serve`, the CLI client, and `bench` (the commands are
//! `tsblob_server::cli::app`).

use clap::Parser;
use tsblob_server::cli::app::{run, Cli};

/// mimalloc instead of glibc's malloc: payload buffers are allocated on the blocking pool
/// and freed on the runtime's workers once sent, and glibc answered that pattern with page
/// faults and zero-filling on every query step (see docs/benchmarks/range-read-2026-11-22.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
