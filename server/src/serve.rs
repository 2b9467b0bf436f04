//! `tsblob serve`: opens the store, binds, serves until SIGINT/SIGTERM, then stops
//! accepting, lets in-flight requests finish, syncs and exits 0.

use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tsblob_storage::Store;

use crate::config::{LogFormat, ServeArgs, TierMode};
use crate::http::{self, auth::Auth, AppState};

/// Logs to stderr: `--log` filters, `--log-format` shapes (text is coloured only on a
/// terminal: a file or journald gets no escape codes).
fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .with_context(|| format!("--log {filter:?} is not a valid log filter"))?;
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second initialisation (tests) is harmless: keep the first.
    let _ = match format {
        LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down: no new connections, finishing in-flight requests");
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(&args.log, args.log_format)?;
    let mut opts = args.store_options().map_err(anyhow::Error::msg)?;
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("cannot create the data folder {}", args.data.display()))?;
    let mode = args.tier_mode().map_err(anyhow::Error::msg)?;
    if let Some(mode) = &mode {
        let a = args.clone();
        let m = mode.clone();
        opts.tier = Some(
            tokio::task::spawn_blocking(move || crate::tier::open(&a, &m))
                .await
                .context("connecting to the object store panicked")??,
        );
    }
    let data = args.data.clone();
    let restore = matches!(mode, Some(TierMode::Tier { restore: true, .. }));
    let store = tokio::task::spawn_blocking(move || {
        if restore {
            crate::tier::restore(&data, &opts)?;
        }
        let store = Store::open(&data, opts)?;
        if store.read_replica_of().is_some() {
            crate::tier::refresh_once(&store);
        }
        Ok::<_, anyhow::Error>(store)
    })
    .await
    .context("opening the store panicked")?
    .with_context(|| format!("cannot open the data folder {}", args.data.display()))?;
    if let Some(TierMode::Replica { .. }) = &mode {
        crate::tier::refresh_replica(store.clone(), args.replica_refresh);
    }
    for event in &store.recovery_report().events {
        tracing::warn!("recovery: {event}");
    }
    let auth = Auth::load(&args.data, args.token.as_deref())?;
    if !args.listen.ip().is_loopback() && !auth.enabled() {
        // Security defaults (docs/operations.md): beyond loopback, no token only on purpose.
        anyhow::ensure!(
            args.no_auth,
            "refusing to listen on {} (beyond this machine) without a token: anyone who could reach it could read and delete everything. Set TSBLOB_TOKEN (or --token) to an admin token, or give --no-auth (TSBLOB_NO_AUTH=true) to serve without authentication on purpose",
            args.listen
        );
        let msg = format!(
            "listening on {} (beyond this machine) without any token (--no-auth): anyone who can reach it may read and delete data; set TSBLOB_TOKEN",
            args.listen
        );
        // Once: in the log, or on stderr when the log filter hides warnings.
        if tracing::enabled!(tracing::Level::WARN) {
            tracing::warn!("{msg}");
        } else {
            eprintln!("WARNING: {msg}");
        }
    }
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let state = AppState::new(store.clone(), auth, args.limits())?;
    state.metrics.set_access_log(args.access_log);
    state.replications.set_options(crate::replication::Options {
        timeout: args.replication_timeout,
        max_backoff: args.replication_max_backoff,
    });
    state
        .replications
        .start_all()
        .await
        .map_err(|e| anyhow::anyhow!("starting the replication tasks: {}", e.message))?;
    let app = http::app(state);
    println!(
        "tsblob {} serving {} on http://{addr} (sync {})",
        env!("CARGO_PKG_VERSION"),
        args.data.display(),
        store.options().sync
    );

    accept_loop(listener, app, args.header_timeout, args.shutdown_grace).await;
    let s = store.clone();
    tokio::task::spawn_blocking(move || s.sync())
        .await
        .context("the final sync panicked")?
        .context("the final sync failed")?;
    tracing::info!("synced; bye");
    Ok(())
}

/// Serves connections until a signal; then closes the listener, lets the open connections
/// finish their requests (idle keep-alive connections are closed at once) for at most
/// `grace`, and returns.
///
/// hyper is driven directly (not `axum::serve`) for the header-read timeout: a client that
/// opens a connection and trickles its request head would otherwise hold it forever.
async fn accept_loop(
    listener: TcpListener,
    app: axum::Router,
    header_timeout: Duration,
    grace: Duration,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut signal = std::pin::pin!(shutdown_signal());
    loop {
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut signal => break,
        };
        // Small records are request/response ping-pong: never wait for Nagle.
        let _ = tcp.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(hyper_util::rt::TokioIo::new(tcp), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(grace) => {
            tracing::warn!("in-flight requests did not finish within {grace:?}; stopping anyway");
        }
    }
}
