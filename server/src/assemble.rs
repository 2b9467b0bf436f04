//! The server assembled from its parts: the store's commit listener (waking live tails and
//! replication senders), the tails, the replication tasks (loaded, not started: `serve`
//! starts them with [`crate::replication::Replications::start_all`]), the writer thread,
//! the memory budget and the stream caps, into the [`AppState`] the routes share. Wiring
//! lives here so `AppState` is only state, and `http` and `replication` stay siblings.

use std::sync::Arc;
use std::time::Instant;

use tsblob_storage::Store;

use crate::http::{auth, budget, errors, limits, metrics, tails, writer, AppState, Limits, Shared};
use crate::replication::{metrics::ReplicationMetrics, Replications};

/// Builds the server's state over `store`, with its tokens and limits. Starts the writer
/// thread; registers the commit listener.
pub fn state(store: Store, auth: auth::Auth, limits: Limits) -> anyhow::Result<AppState> {
    let commits = Arc::new(tokio::sync::watch::channel(0u64).0);
    let metrics = Arc::new(metrics::Metrics::new()?);
    let tails = Arc::new(tails::Tails::new(
        limits.tails,
        metrics.follows.clone(),
        metrics.registry(),
    )?);
    let (tx, woken) = (commits.clone(), tails.clone());
    // Runs on the committing thread, under its caller's entry lock: bumps a counter
    // (send_modify never waits on a receiver) and wakes the tails of the entries the
    // commit put records into (two short mutexes of `tails.rs`, no engine call).
    store.on_commit(Box::new(move |entries: &[u32]| {
        tx.send_modify(|v| *v = v.wrapping_add(1));
        woken.committed(entries);
    }));
    let replications = Arc::new(Replications::load(
        store.clone(),
        commits.clone(),
        ReplicationMetrics::new(metrics.registry())?,
        errors::explain_replication,
    )?);
    let writer = writer::Writer::start(store.clone())?;
    let batch_writer = crate::http::batch_writer::BatchWriter::start(store.clone())?;
    let bodies = budget::MemoryBudget::new(limits.memory_budget, limits.memory_wait);
    let streams = Arc::new(limits::Limiter::new(
        limits::Kind::STREAMS,
        limits.streams,
        metrics.streams.clone(),
        metrics.streams_refused.clone(),
    ));
    let links = crate::http::links::Secret::new(store.path());
    Ok(AppState::new(Shared {
        links,
        store,
        auth: Arc::new(auth),
        metrics,
        replications,
        limits: Arc::new(limits),
        started: Instant::now(),
        commits,
        tails,
        bodies,
        streams,
        scans: crate::blocking::Scans::for_machine(),
        writer,
        batch_writer,
    }))
}
