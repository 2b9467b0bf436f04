//! The `tsblob` binary: `serve`, the CLI client, and `bench` (the commands are
//! `tsblob_server::cli::app`).

use tsblob_server::cli::app::{exit, exit_code, run, Cli, ParseError};

/// mimalloc instead of glibc's malloc: payload buffers are allocated on the blocking pool
/// and freed on the runtime's workers once sent, and glibc answered that pattern with page
/// faults and zero-filling on every query step (see docs/benchmarks/range-read-2026-11-22.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = match Cli::parse_with_config(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(ParseError::Clap(e)) => e.exit(),
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(exit::USAGE);
        }
    };
    match run(cli.command).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the chain of causes on one line, without a backtrace.
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(exit_code(&e))
        }
    }
}
