//! `tsblob serve`: opens the store, binds, serves until SIGINT/SIGTERM, then stops
//! accepting, lets in-flight requests finish, syncs and exits 0.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tsblob_storage::Store;

use crate::config::{LogFormat, ServeArgs, TierMode};
use crate::http::{self, auth::Auth};

/// Logs to stderr: `--log` filters, `--log-format` shapes (text is coloured only on a
/// terminal: a file or journald gets no escape codes).
fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    check_log_filter(filter)?;
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

/// The levels `--log` takes alone.
const LOG_LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// Refuses a `--log` directive that is a bare word but not a level. Bug (ops probe of
/// 2026-11-29): `--log warning` (or `verbose`, `critical`) was taken as the name of a
/// module to log at trace, so every other line was off, errors included; a 500's "see the
/// server log" pointed at an empty log.
fn check_log_filter(filter: &str) -> anyhow::Result<()> {
    for directive in filter.split(',').map(str::trim) {
        let bare = !directive.is_empty()
            && !directive.contains(['=', '[', ':'])
            && !directive.bytes().all(|b| b.is_ascii_digit());
        let word = directive.to_ascii_lowercase();
        if bare && !LOG_LEVELS.contains(&word.as_str()) {
            let hint = match word.as_str() {
                "warning" => " (did you mean warn?)",
                "verbose" => " (did you mean debug?)",
                "critical" | "fatal" => " (did you mean error?)",
                _ => "",
            };
            anyhow::bail!(
                "--log {filter:?}: {directive:?} is not a level{hint}: give one of error, warn, info, debug, trace or off, or module=level for one module (e.g. info,tsblob::access=debug)"
            );
        }
    }
    Ok(())
}

/// `--tls-cert`/`--tls-key`: what terminates TLS on the listener (rustls, aws-lc-rs;
/// TLS 1.2 and 1.3, HTTP/1.1 by ALPN).
fn tls_acceptor(cert: &Path, key: &Path) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| {
            format!(
                "cannot read the certificates of --tls-cert {}",
                cert.display()
            )
        })?;
    anyhow::ensure!(
        !certs.is_empty(),
        "--tls-cert {} holds no certificate: give a PEM file with `-----BEGIN CERTIFICATE-----` blocks, the server's first",
        cert.display()
    );
    let key = PrivateKeyDer::from_pem_file(key).with_context(|| {
        format!(
            "cannot read a private key from --tls-key {} (a PEM file with a `BEGIN PRIVATE KEY`, `BEGIN RSA PRIVATE KEY` or `BEGIN EC PRIVATE KEY` block)",
            key.display()
        )
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("setting up TLS")?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .context(
        "--tls-cert and --tls-key do not make a usable pair (is the key the certificate's?)",
    )?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Says at start (a warning if `warn`, else at info) when users other than the owner and
/// its group can read `path`: the hostile probe of 2026-11-28 found data folders of mode
/// 0755 (a store now creates its folder 0700) and world-readable TLS keys, accepted silently.
fn say_if_others_read(path: &Path, warn: bool, what: &str, why: &str) {
    if !crate::config::others_read(path) {
        return;
    }
    let msg = format!(
        "{what} {} can be read by every user of this machine: {why}; `chmod o-rwx {}`",
        path.display(),
        path.display()
    );
    if warn {
        tracing::warn!("{msg}");
    } else {
        tracing::info!("{msg}");
    }
}

/// The stop signals: SIGINT, SIGTERM and SIGHUP, listened for from the call on (before
/// the server says it is serving, so that no early signal meets its default action).
/// SIGHUP stops the server as SIGTERM does: its default ended the process at once, with no
/// graceful stop (an ssh session that dropped, a `kill -HUP` meant as "reload"; ops probe
/// of 2026-11-29).
struct StopSignals {
    #[cfg(unix)]
    kinds: Vec<(tokio::signal::unix::Signal, &'static str)>,
}

impl StopSignals {
    fn listen() -> StopSignals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let mut kinds = Vec::new();
            let mut stops = vec![
                (SignalKind::interrupt(), "SIGINT"),
                (SignalKind::terminate(), "SIGTERM"),
            ];
            // A server started ignoring SIGHUP (`nohup`) keeps ignoring it: listening would
            // undo that, and it would stop at the ssh logout `nohup` was for (review of
            // 2026-11-29).
            if !ignored(libc::SIGHUP) {
                stops.push((SignalKind::hangup(), "SIGHUP"));
            }
            for (kind, name) in stops {
                match signal(kind) {
                    Ok(s) => kinds.push((s, name)),
                    Err(e) => tracing::error!("cannot listen for {name}: {e}"),
                }
            }
            StopSignals { kinds }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }

    /// The next stop signal's name.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            if self.kinds.is_empty() {
                return std::future::pending().await;
            }
            let waits = self.kinds.iter_mut().map(|(s, name)| {
                Box::pin(async move {
                    s.recv().await;
                    *name
                })
            });
            let (name, _, rest) = futures_util::future::select_all(waits).await;
            drop(rest);
            name
        }
        #[cfg(not(unix))]
        {
            if let Err(e) = tokio::signal::ctrl_c().await {
                tracing::error!("cannot listen for Ctrl-C: {e}");
                std::future::pending::<()>().await;
            }
            "Ctrl-C"
        }
    }
}

/// Fails as binding `at` would (a port in use, an address not of this machine), binding
/// it and letting it go at once.
fn can_listen(at: std::net::SocketAddr, what: &str) -> anyhow::Result<()> {
    std::net::TcpListener::bind(at)
        .map(drop)
        .with_context(|| format!("cannot listen on {at}{what}"))
}

/// Whether the process started with `signal` ignored (`SIG_IGN`, as `nohup` leaves SIGHUP).
#[cfg(unix)]
fn ignored(signal: libc::c_int) -> bool {
    // SAFETY: a null new action only reads the current one into `old`, a zeroed
    // `sigaction` the call fills.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// The server's stop: the first stop signal begins the graceful stop (every accept loop
/// sees it), a second one ends the process at once after a bounded sync. Bug (ops probe of
/// 2026-11-29): a second Ctrl-C was ignored and the server waited out `--shutdown-grace`.
fn spawn_signals(store: Store) -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut signals = StopSignals::listen();
    tokio::spawn(async move {
        let first = signals.next().await;
        if first == "SIGHUP" {
            tracing::info!(
                "SIGHUP: stopping (tsblob does not reload its settings: restart it to change them)"
            );
        }
        tracing::info!("shutting down ({first}): no new connections, finishing in-flight requests; send it again to stop at once");
        let _ = tx.send(true);
        // A terminal that hangs up may send SIGHUP twice: only SIGINT or SIGTERM forces.
        let second = loop {
            match signals.next().await {
                "SIGHUP" => tracing::info!(
                    "SIGHUP again: already stopping (SIGINT or SIGTERM stops at once)"
                ),
                other => break other,
            }
        };
        tracing::warn!("{second} again: stopping now, without waiting for in-flight requests (acknowledged records are kept)");
        let sync = tokio::task::spawn_blocking(move || store.sync());
        if let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_secs(5), sync).await {
            tracing::warn!("the last sync failed: {e}");
        }
        std::process::exit(1);
    });
    rx
}

/// The security defaults (docs/operations.md): a listen address beyond loopback needs a
/// token, or `--no-auth` on purpose. The addresses served without a token on purpose.
fn open_beyond_loopback(
    args: &ServeArgs,
    has_token: bool,
) -> anyhow::Result<Vec<std::net::SocketAddr>> {
    let mut open = Vec::new();
    for listen in std::iter::once(args.listen).chain(args.reductstore_listen) {
        if !listen.ip().is_loopback() && !has_token {
            anyhow::ensure!(
                args.no_auth,
                "refusing to listen on {listen} (beyond this machine) without a token: anyone who could reach it could read and delete everything. Set TSBLOB_TOKEN (or --token) to an admin token, or give --no-auth (TSBLOB_NO_AUTH=true) to serve without authentication on purpose",
            );
            open.push(listen);
        }
    }
    Ok(open)
}

/// The admin token `packaging/tsblob.env` ships as a placeholder: published in the
/// repository, so never a secret.
pub const PLACEHOLDER_TOKEN: &str = "change-me-to-a-long-random-token";

/// An admin token shorter than this on a listen address beyond loopback is warned about.
pub const SHORT_TOKEN: usize = 16;

/// The admin token's checks at start: the shipped placeholder is refused; a token shorter
/// than [`SHORT_TOKEN`] characters on an address beyond loopback is warned about (the
/// warning returned). Bug (newcomer walkthrough of 2026-11-30): a server started with the
/// env file's `TSBLOB_TOKEN=change-me-to-a-long-random-token` (its `sed` step skipped), or
/// with a 1-character token, listened on 0.0.0.0 without a word.
fn check_admin_token(args: &ServeArgs) -> anyhow::Result<Option<String>> {
    let Some(token) = args.token.as_deref() else {
        return Ok(None);
    };
    anyhow::ensure!(
        token.trim() != PLACEHOLDER_TOKEN,
        "refusing to start: the admin token (TSBLOB_TOKEN or --token) is {PLACEHOLDER_TOKEN:?}, the placeholder of packaging/tsblob.env, which anyone can read in the repository: set a real token, e.g. generated with `openssl rand -hex 32`",
    );
    let len = token.chars().count();
    let beyond = std::iter::once(args.listen)
        .chain(args.reductstore_listen)
        .find(|l| !l.ip().is_loopback());
    Ok(match beyond {
        Some(listen) if len < SHORT_TOKEN => Some(format!(
            "the admin token (TSBLOB_TOKEN or --token) is only {len} character{} long and {listen} is reachable beyond this machine: a short token can be guessed; use one of at least {SHORT_TOKEN} characters, e.g. generated with `openssl rand -hex 32`",
            if len == 1 { "" } else { "s" }
        )),
        _ => None,
    })
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(&args.log, args.log_format)?;
    if let Some(warning) = check_admin_token(&args)? {
        // Once: in the log, or on stderr when the log filter hides warnings.
        if tracing::enabled!(tracing::Level::WARN) {
            tracing::warn!("{warning}");
        } else {
            eprintln!("WARNING: {warning}");
        }
    }
    // Before the store sizes its file budget from it (`crate::connections`).
    let open_files_limit = crate::connections::raise_open_files_limit();
    let mut opts = args.store_options().map_err(anyhow::Error::msg)?;
    // A new folder holds no token: a start that the security defaults refuse (below) is
    // refused before the folder is made (it left an empty data folder behind).
    if !args.data.exists() {
        open_beyond_loopback(&args, args.token.is_some())?;
    }
    // The certificates read and the ports tried before the data folder is made: a start
    // that fails on them (a busy port, a missing key) left an empty data folder behind (ops
    // probe of 2026-11-29).
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            say_if_others_read(
                key,
                true,
                "--tls-key",
                "anyone holding it can pose as this server",
            );
            Some(tls_acceptor(cert, key)?)
        }
        _ => None,
    };
    // Each port tried (and let go: it is bound for good once the store is open, so that
    // nothing connects while the store recovers; review of 2026-11-29).
    can_listen(args.listen, "")?;
    if let Some(at) = args.reductstore_listen {
        can_listen(at, " (--reductstore-listen)")?;
    }
    tsblob_storage::create_data_folder(&args.data)
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
            if let Err(e) = crate::tier::refresh_at_start(&store) {
                // Dropped here, off the async runtime: the object store's client owns
                // runtimes, which cannot be dropped from async code.
                drop(store);
                return Ok(Err(e));
            }
        }
        Ok::<_, anyhow::Error>(Ok(store))
    })
    .await
    .context("opening the store panicked")?
    .with_context(|| format!("cannot open the data folder {}", args.data.display()))??;
    if let Some(TierMode::Replica { .. }) = &mode {
        crate::tier::refresh_replica(store.clone(), args.replica_refresh);
    }
    for event in &store.recovery_report().events {
        tracing::warn!("recovery: {event}");
    }
    // An existing data folder's mode is the operator's choice (a container's volume is
    // often 0755 with no other user): said at info. A readable key is warned about.
    say_if_others_read(
        &args.data,
        false,
        "the data folder",
        "every record and the index are in it",
    );
    let auth = Auth::load(&args.data, args.token.as_deref())?
        .with_trusted_proxies(args.trusted_proxies.clone());
    let auth_said = match (auth.enabled(), args.token.is_some()) {
        (false, _) => "off (no token: every request is served)",
        (true, true) => "on (the admin token of TSBLOB_TOKEN or --token, and stored tokens)",
        (true, false) => "on (stored tokens)",
    };
    for listen in open_beyond_loopback(&args, auth.enabled())? {
        let msg = format!(
            "listening on {listen} (beyond this machine) without any token (--no-auth): anyone who can reach it may read and delete data; set TSBLOB_TOKEN",
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
    let reduct_listener = match args.reductstore_listen {
        Some(at) => Some(
            TcpListener::bind(at)
                .await
                .with_context(|| format!("cannot listen on {at} (--reductstore-listen)"))?,
        ),
        None => None,
    };
    let state = crate::assemble::state(store.clone(), auth, args.limits())?;
    let open_files = args
        .max_open_files
        .unwrap_or_else(tsblob_storage::default_open_files);
    let caps = crate::connections::caps(&args.cost, open_files_limit, open_files);
    if crate::connections::past_the_open_files_limit(caps, open_files_limit, open_files) {
        tracing::warn!(
            "--max-connections {} and --max-open-files {open_files} (+{} for the index and spools) pass the open files limit {open_files_limit}: past it new connections fail to be accepted; raise `ulimit -n` (LimitNOFILE= in a systemd unit)",
            caps.max,
            tsblob_storage::RESERVED_DESCRIPTORS
        );
    }
    let connections = Arc::new(crate::connections::Connections::new(
        caps,
        args.trusted_proxies.clone(),
        state.metrics.registry(),
    )?);
    tracing::info!(
        "open files limit {open_files_limit}; connections at most {} ({} per client address); {} worker threads",
        caps.max,
        caps.per_token,
        tokio::runtime::Handle::current().metrics().num_workers()
    );
    let auth = state.auth.clone();
    spawn_access_flush(auth.clone(), args.token_access_flush);
    state.metrics.set_access_log(args.access_log);
    state.replications.set_options(crate::replication::Options {
        timeout: args.replication_timeout,
        max_backoff: args.replication_max_backoff,
        outbound: args.cost.outbound(),
    });
    state.replications.start_all().await.map_err(|e| {
        anyhow::anyhow!(
            "starting the replication tasks: {}",
            state.replications.explain(e)
        )
    })?;
    // The ReductStore API (`crate::reduct`): its own listener, and/or a path of this one.
    let reduct = crate::reduct::Reduct::new(
        state.clone(),
        crate::reduct::query::SessionLimits {
            max: args.reductstore_max_queries,
            per_token: args.reductstore_max_queries_per_token,
        },
    );
    let tails = state.tails.clone();
    let stop = spawn_signals(store.clone());
    let mut app = http::app(state);
    if let Some(prefix) = &args.reductstore_prefix {
        app = app.nest(prefix, reduct.router(args.limits().browser));
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!(
        "tsblob {} serving {} on {}://{addr} (sync {})",
        env!("CARGO_PKG_VERSION"),
        args.data.display(),
        scheme,
        store.options().sync
    );
    // The same as a log event: a JSON log pipeline never saw the address, TLS or
    // authentication (ops probe of 2026-11-29).
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        addr = %addr,
        scheme,
        data = %args.data.display(),
        sync = %store.options().sync,
        auth = auth_said,
        config = args.config.as_ref().map(|c| c.display().to_string()),
        "serving"
    );
    if let Some(prefix) = &args.reductstore_prefix {
        println!("ReductStore API on {scheme}://{addr}{prefix}");
    }
    let reduct_loop = async {
        if let Some(l) = reduct_listener {
            let at = l.local_addr()?;
            let browser =
                http::browser::BrowserPolicy::new(at, &args.allowed_hosts, &args.cors_origin);
            println!("ReductStore API on {scheme}://{at}");
            accept_loop(
                l,
                connections.clone(),
                tls.clone(),
                reduct.router(browser),
                args.header_timeout,
                args.send_timeout,
                args.shutdown_grace,
                tails.clone(),
                stop.clone(),
            )
            .await;
        }
        Ok::<_, anyhow::Error>(())
    };
    let (_, reduct_result) = tokio::join!(
        accept_loop(
            listener,
            connections.clone(),
            tls.clone(),
            app,
            args.header_timeout,
            args.send_timeout,
            args.shutdown_grace,
            tails.clone(),
            stop.clone(),
        ),
        reduct_loop
    );
    reduct_result?;
    let a = auth.clone();
    match tokio::task::spawn_blocking(move || a.flush_access()).await {
        Ok(Err(e)) => tracing::warn!("tokens' last_access not written: {e}"),
        Err(e) => tracing::warn!("tokens' last_access not written: {e}"),
        Ok(Ok(())) => {}
    }
    let s = store.clone();
    match tokio::task::spawn_blocking(move || s.save_lifecycle_state()).await {
        Ok(Err(e)) => tracing::warn!("lifecycle resume points not written: {e}"),
        Err(e) => tracing::warn!("lifecycle resume points not written: {e}"),
        Ok(Ok(())) => {}
    }
    let s = store.clone();
    tokio::task::spawn_blocking(move || s.sync())
        .await
        .context("the final sync panicked")?
        .context("the final sync failed")?;
    tracing::info!("synced; bye");
    Ok(())
}

/// Writes the tokens' `last_access` every `every` when a token was used (`Auth::flush_access`):
/// requests never write the token file themselves.
fn spawn_access_flush(auth: std::sync::Arc<Auth>, every: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let a = auth.clone();
            match tokio::task::spawn_blocking(move || a.flush_access()).await {
                Ok(Err(e)) => tracing::warn!("tokens' last_access not written (retried): {e}"),
                Err(e) => tracing::warn!("tokens' last_access not written: {e}"),
                Ok(Ok(())) => {}
            }
        }
    });
}

/// Serves connections until a signal; then closes the listener, ends the live tails (they
/// never end on their own), lets the open connections finish their requests (idle
/// keep-alive connections are closed at once) for at most `grace`, and returns.
///
/// hyper is driven directly (not `axum::serve`) for the header-read timeout: a client that
/// opens a connection and trickles its request head would otherwise hold it forever. With
/// `tls`, each connection's handshake runs in its own task and must end within
/// `header_timeout` too. Every connection's writes are watched: an answer its client takes
/// no bytes of for `send_timeout` ends the connection (`send_watch.rs`). A connection
/// past `connections`' caps is answered and closed at once (`crate::connections`).
#[allow(clippy::too_many_arguments)]
async fn accept_loop(
    listener: TcpListener,
    connections: Arc<crate::connections::Connections>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: axum::Router,
    header_timeout: Duration,
    send_timeout: Duration,
    grace: Duration,
    tails: Arc<http::tails::Tails>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut signal = std::pin::pin!(async move {
        // An error means the sender is gone, which it never is before the process ends.
        let _ = stop.wait_for(|stopping| *stopping).await;
    });
    let mut failures = AcceptFailures::default();
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    failures.log(&e);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut signal => break,
        };
        let slot = match connections.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(e) => {
                connections.refuse(tcp, &e, tls.is_some());
                continue;
            }
        };
        // Small records are request/response ping-pong: never wait for Nagle.
        let _ = tcp.set_nodelay(true);
        // Under TLS too: the watch sees the socket itself.
        let tcp = crate::send_watch::SendWatch::new(tcp, send_timeout);
        let app = app.clone();
        let watcher = graceful.watcher();
        match &tls {
            None => {
                tokio::spawn(async move {
                    serve_connection(tcp, peer, app, header_timeout, watcher).await;
                    drop(slot);
                });
            }
            Some(acceptor) => {
                let handshake = acceptor.accept(tcp);
                tokio::spawn(async move {
                    let _slot = slot;
                    match tokio::time::timeout(header_timeout, handshake).await {
                        Ok(Ok(tls)) => {
                            serve_connection(tls, peer, app, header_timeout, watcher).await
                        }
                        // At warn, throttled: after a certificate change the operator has
                        // nothing else to go on when clients cannot connect (ops probe of
                        // 2026-11-29; it was at debug, without the client's address).
                        Ok(Err(e)) => {
                            crate::throttled!(
                                warn,
                                "tls_handshake",
                                "TLS handshake with {peer} failed: {e}"
                            )
                        }
                        Err(_) => crate::throttled!(
                            warn,
                            "tls_handshake",
                            "TLS handshake with {peer} not done within {header_timeout:?}"
                        ),
                    }
                });
            }
        }
    }
    drop(listener);
    tails.close();
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(grace) => {
            tracing::warn!("in-flight requests did not finish within {grace:?}; stopping anyway");
        }
    }
}

/// The log of failed `accept`s: the first at once, then at most one line every 10 s with
/// how many failed since (out of descriptors, each retry 50 ms apart would be 20 lines a
/// second).
#[derive(Default)]
struct AcceptFailures {
    last: Option<std::time::Instant>,
    since: u64,
}

impl AcceptFailures {
    fn log(&mut self, e: &std::io::Error) {
        self.since += 1;
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        tracing::warn!(
            "accept failed: {e} ({} time(s) since the last such line)",
            self.since
        );
        self.last = Some(std::time::Instant::now());
        self.since = 0;
    }
}

/// Serves one connection (plain or TLS) until it closes or a graceful shutdown ends it.
/// Each request carries the socket's peer address (`ConnectInfo`): a token's IP allow-list
/// is checked against it (`Auth::client_ip`).
async fn serve_connection<I>(
    io: I,
    peer: std::net::SocketAddr,
    app: axum::Router,
    header_timeout: Duration,
    watcher: hyper_util::server::graceful::Watcher,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use tower::ServiceExt;
    // The label sets of the connection's batches, kept from one to the next (`batch.rs`).
    let labels = http::batch::LabelMemo::default();
    // `body::answer`: a query's steps reach hyper as one frame each (many slices).
    let app = app
        .map_request(move |req: axum::http::Request<hyper::body::Incoming>| {
            // A body its handler lets go of unread is read on a little (`linger.rs`).
            let mut req = req.map(crate::linger::Lingering::new);
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            req.extensions_mut().insert(labels.clone());
            req
        })
        .map_response(http::body::answer);
    let service = hyper_util::service::TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        // hyper's own answers to heads it cannot parse get their JSON body (`head_errors.rs`).
        .serve_connection(
            hyper_util::rt::TokioIo::new(crate::head_errors::HeadErrors::new(io)),
            service,
        );
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!("connection ended: {e}");
    }
}
