//! Engine work on tokio's blocking pool, for the HTTP handlers and the replication senders
//! alike (the engine blocks: it never runs on a runtime worker); query steps through a gate
//! of a few at once ([`Scans`]). A panic inside becomes
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

/// The query steps that may run on the blocking pool at once: twice the cores, at least 4.
///
/// A query's step (a page of records, a condition judged on each) runs on the blocking
/// pool, and the pool runs as many as there are streams (64 per token by default). Hostile
/// probe of 2026-11-30: 64 queries of one read-only token, each with a costly condition,
/// kept 64 threads busy on 2 cores, and the runtime's workers got a 66th of the CPU each:
/// `/health` took 6.7-8.2 s, and every other client's requests as long. With steps gated
/// here, a worker shares a core with at most a few steps; a step of a query answer, tail or
/// MCAP export ends after about 50 ms (`http::query::produce::StepClock`), a ReductStore
/// read after its 0.5 s of scanning, so the gate turns over quickly, and it is fair
/// (first come, first served): a waiting query waits for the steps before it, not for a
/// flood to end. Writes never pass it (their thread is the writer's).
#[derive(Clone)]
pub struct Scans {
    permits: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Scans {
    /// At most `n` steps at once (1 at least).
    pub fn new(n: usize) -> Scans {
        Scans {
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(n.max(1))),
        }
    }

    /// Twice this machine's cores, at least 4: a step waiting on the disk (or a tiered
    /// block's fetch) lets another use the core.
    pub fn for_machine() -> Scans {
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        Scans::new((2 * cores).max(4))
    }

    /// Runs the step `f` on the blocking pool once a place is free, as [`run`] does; the
    /// place is held until `f` returns, even if the caller stops waiting.
    pub async fn run<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce() -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<TaskFailed> + Send + 'static,
    {
        // Never closed: `acquire_owned` fails only on a closed semaphore.
        let permit = self.permits.clone().acquire_owned().await.ok();
        run(move || {
            let _permit = permit;
            f()
        })
        .await
    }

    /// Steps that could start now.
    pub fn free(&self) -> usize {
        self.permits.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bug "one read-only token pins the CPU" (hostile probe of 2026-11-30): the pool ran
    /// every stream's step at once. Here 16 steps that each hold their thread are started
    /// through a gate of 4: never more than 4 run together, and all 16 run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_steps_run_at_once_than_the_gate_lets_through() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let scans = Scans::new(4);
        let (now, most, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let steps: Vec<_> = (0..16)
            .map(|_| {
                let (scans, now, most, done) =
                    (scans.clone(), now.clone(), most.clone(), done.clone());
                tokio::spawn(async move {
                    let r: Result<(), TaskFailed> = scans
                        .run(move || {
                            let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(running, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            now.fetch_sub(1, Ordering::SeqCst);
                            done.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        })
                        .await;
                    r.unwrap();
                })
            })
            .collect();
        for s in steps {
            s.await.unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 16);
        let most = most.load(Ordering::SeqCst);
        assert!(
            (1..=4).contains(&most),
            "{most} steps ran at once through a gate of 4"
        );
        assert_eq!(scans.free(), 4, "a place was not given back");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_in_an_engine_call_is_an_error_not_a_lost_connection() {
        let r: Result<(), TaskFailed> = run(|| panic!("engine bug")).await;
        assert!(matches!(r, Err(TaskFailed::Join(_))), "{r:?}");
        assert_eq!(run(|| Ok::<_, TaskFailed>(7)).await.unwrap(), 7);
    }
}
