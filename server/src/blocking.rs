//! Engine work on tokio's blocking pool, for the HTTP handlers and the replication senders
//! alike (the engine blocks: it never runs on a runtime worker). A panic inside becomes
//! an error of the caller's type ([`TaskFailed`] converted) instead of taking the
//! connection, the sender or the server down.

/// The blocking task did not finish: it panicked (or the runtime is shutting down).
#[derive(Debug, thiserror::Error)]
pub enum TaskFailed {
    #[error("the storage task failed: {0}; the request was not completed")]
    Join(#[from] tokio::task::JoinError),
}

/// Runs `f` on the blocking pool and returns its result.
pub async fn run<T, E, F>(f: F) -> Result<T, E>
where
    F: FnOnce() -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: From<TaskFailed> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(TaskFailed::Join(e).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_in_an_engine_call_is_an_error_not_a_lost_connection() {
        let r: Result<(), TaskFailed> = run(|| panic!("engine bug")).await;
        assert!(matches!(r, Err(TaskFailed::Join(_))), "{r:?}");
        assert_eq!(run(|| Ok::<_, TaskFailed>(7)).await.unwrap(), 7);
    }
}
