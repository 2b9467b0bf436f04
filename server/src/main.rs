//! The `tsblob` binary: `serve`, the CLI client, and `bench` (the commands are
//! `tsblob_server::cli::app`).

use tsblob_server::cli::app::{exit, exit_code, run, Cli, ParseError};

/// mimalloc instead of glibc's malloc: payload buffers are allocated on the blocking pool
/// and freed on the runtime's workers once sent, and glibc answered that pattern with page
/// faults and zero-filling on every query step (see docs/benchmarks/range-read-2026-11-22.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// No transparent huge pages for this process unless `MIMALLOC_ALLOW_THP` asks for them.
/// mimalloc advises huge pages (`MADV_HUGEPAGE`) on its arenas by default, and a 2 MiB page
/// stays resident as long as one small block in it lives: a 10 GB ingest over 16
/// connections peaked at 155 MB of RSS with 90 MB of it in huge pages, and at 96 MB
/// without them (docs/benchmarks/rss-2026-11-26.md). The process-wide switch also covers
/// arenas mimalloc reserved before `main`.
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: PR_SET_THP_DISABLE takes plain integers and changes no memory of ours.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

fn main() -> std::process::ExitCode {
    no_huge_pages();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(async_main()),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::ExitCode::from(exit::FAILURE)
        }
    }
}

async fn async_main() -> std::process::ExitCode {
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
            // The chain of causes on one line, without a backtrace, each said once (an
            // error whose message quotes its source already does not get it again).
            eprintln!("error: {}", tsblob_proto::tls::error_chain(e.as_ref()));
            std::process::ExitCode::from(exit_code(&e))
        }
    }
}
