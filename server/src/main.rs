//! The `tsblob` binary: `serve`, the CLI client, and `bench` (the commands are
//! `tsblob_server::cli::app`).

use tsblob_server::cli::app::{exit, exit_code, run, Cli, Command, ParseError};

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

/// mimalloc's option `purge_delay` (`mi_option_purge_delay` in mimalloc v3's `mimalloc.h`).
/// The Rust bindings do not name it; `the_purge_delay_index_is_mimallocs` fails if an
/// upgrade of `libmimalloc-sys` moves it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays with mimalloc before it goes back to the OS in `tsblob
/// serve`, unless `MIMALLOC_PURGE_DELAY` says otherwise. mimalloc v3 keeps it 1,000 ms
/// (10 s for whole arena ranges); under 16 writers of 1 MiB records that second of freed
/// payload buffers put a 10 GB ingest's peak at 98–122 MB, and at 75–94 MB with 50 ms,
/// while reads and writes of 1–10 MiB records kept their rates
/// (docs/benchmarks/purge-2026-11-27.md). Only for `serve`: the client commands and the
/// bench keep mimalloc's default (a client reading 10 MiB records with a short delay
/// faulted each answer's buffer in again).
const PURGE_DELAY_MS: std::ffi::c_long = 50;

fn purge_sooner() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set stores one integer in mimalloc's option table, which
        // mimalloc reads again each time it schedules a purge.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
        // A purge already scheduled keeps the deadline it got (mimalloc only sets an
        // arena's deadline when it has none), and one scheduled before this point got the
        // default delay × `arena_purge_mult` (10 s): a forced collection purges it now, so
        // every later purge is scheduled with the new delay.
        // SAFETY: collects the calling thread's heap; no memory of ours is touched.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }
}

fn main() -> std::process::ExitCode {
    no_huge_pages();
    let cli = match Cli::parse_with_config(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(ParseError::Clap(e)) => e.exit(),
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(exit::USAGE);
        }
    };
    // Before the runtime's threads allocate (`purge_sooner` also clears the deadlines of
    // purges scheduled earlier under mimalloc's default).
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    // A client command whose reader of standard output is gone (`| head -1`) ends quietly
    // (`tsblob_server::cli::output`); the servers keep their panics as they are (and keep
    // ignoring SIGPIPE: sockets to departed clients).
    if !is_server(&cli.command) {
        tsblob_server::cli::output::quiet_on_closed_stdout();
    }
    if let Command::Serve(args) = &cli.command {
        purge_sooner();
        if let Some(n) = args.worker_threads {
            runtime.worker_threads(n);
        }
    }
    match runtime.enable_all().build() {
        Ok(rt) => rt.block_on(async_main(cli)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::ExitCode::from(exit::FAILURE)
        }
    }
}

/// `tsblob serve` and the bench's `limit` target: processes that serve, not client commands.
fn is_server(command: &Command) -> bool {
    match command {
        Command::Serve(_) => true,
        #[cfg(feature = "bench")]
        Command::BenchLimit(_) => true,
        _ => false,
    }
}

async fn async_main(cli: Cli) -> std::process::ExitCode {
    match run(cli.command).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // `| head -1` has read what it wanted: not a failure.
        Err(e) if tsblob_server::cli::output::stdout_closed(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The chain of causes on one line, without a backtrace, each said once (an
            // error whose message quotes its source already does not get it again).
            eprintln!("error: {}", tsblob_proto::tls::error_chain(e.as_ref()));
            std::process::ExitCode::from(exit_code(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index is a hand-written constant: the option at 15 must read mimalloc's default
    /// for `purge_delay`, 1,000 ms (its neighbours at 14 and 16 default to 1 and 0), or the
    /// value `MIMALLOC_PURGE_DELAY` gives it.
    #[test]
    fn the_purge_delay_index_is_mimallocs() {
        // SAFETY: reads one integer from mimalloc's option table.
        let value = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        let expected = std::env::var("MIMALLOC_PURGE_DELAY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000);
        assert_eq!(value, expected);
    }
}
