//! Engine work on tokio's blocking pool, for the HTTP handlers and the replication senders
//! alike (the engine blocks: it never runs on a runtime worker). A panic inside becomes
//! an error of the caller's type ([`TaskFailed`] converted) instead of taking the
//! connection, the sender or the server down.

/// The blocking task did not finish: it panicked (or the runtime is shutting down).
#[derive(Debug, thiserror::Error)]
pub enum TaskFailed {
    #[error("the storage task failed: {0}; the request was not completed")]
    Join(#[from] tokio::task::JoinError),
    #[error("the storage task panicked; the request was not completed")]
    Panicked,
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

/// As [`run`], on this thread: the runtime hands this worker's other tasks to another
/// thread first (`tokio::task::block_in_place`), so the request's task neither waits for a
/// blocking-pool thread to wake nor to be woken back (a large single write, whose answer
/// waits for the engine: docs/benchmarks/reduct-py-1mb-2026-11-26.md). On a current-thread
/// runtime (tests), as [`run`].
pub async fn run_here<T, E, F>(f: F) -> Result<T, E>
where
    F: FnOnce() -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: From<TaskFailed> + Send + 'static,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() != RuntimeFlavor::MultiThread {
        return run(f).await;
    }
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tokio::task::block_in_place(f)
    }));
    ran.unwrap_or_else(|_| Err(TaskFailed::Panicked.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_in_an_engine_call_run_in_place_is_an_error_not_a_lost_connection() {
        let r: Result<(), TaskFailed> = run_here(|| panic!("engine bug")).await;
        assert!(matches!(r, Err(TaskFailed::Panicked)), "{r:?}");
        assert_eq!(run_here(|| Ok::<_, TaskFailed>(7)).await.unwrap(), 7);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn run_here_on_a_current_thread_runtime_uses_the_pool() {
        assert_eq!(run_here(|| Ok::<_, TaskFailed>(7)).await.unwrap(), 7);
    }
}
