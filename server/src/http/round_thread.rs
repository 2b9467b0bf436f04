//! The thread of rounds that both writer threads run (`writer.rs`: single writes of small
//! bodies; `batch_writer.rs`: the chunks of batch bodies): one thread per store takes the
//! first queued job, then every job queued while it was busy up to `MAX_JOBS` jobs or
//! `MAX_BYTES` bytes, and writes them as one round (`Rounds::write_round`: one append per
//! entry and one index commit for the round). A panic inside a round is caught: the round's
//! unanswered jobs are dropped (their requests see their reply sender gone and answer 500)
//! and the thread goes on with the next round. The thread ends once every `Queue` clone is
//! dropped and the queued jobs are written.
//!
//! What a caller can make the thread hold is bounded by the round: at most `MAX_JOBS` jobs
//! and, past the first, no job is taken once the round holds `MAX_BYTES` (so a round holds
//! at most `MAX_BYTES` plus one job). The queue itself is unbounded; what bounds it is the
//! callers: each job is a request whose body is held under the memory budget
//! (`budget.rs`) until it is answered.

use std::panic::AssertUnwindSafe;

use tokio::sync::mpsc;

/// What one thread of rounds writes: its jobs, how big each is, and how a round is written.
pub(crate) trait Rounds: Send + 'static {
    /// One queued write; it carries its own way to answer its request.
    type Job: Send + 'static;
    /// The thread's name (`ps`, `perf`, `/proc/PID/task/*/comm`).
    const THREAD: &'static str;
    /// At most this many jobs are taken into one round...
    const MAX_JOBS: usize;
    /// ...and no further job once the round holds this many payload bytes.
    const MAX_BYTES: usize;

    /// The payload bytes `job` holds, counted against `MAX_BYTES`.
    fn bytes(job: &Self::Job) -> usize;

    /// Writes a round and answers each of its jobs.
    fn write_round(&self, jobs: Vec<Self::Job>);
}

/// The sending side of a thread of rounds.
pub(crate) struct Queue<J> {
    tx: mpsc::UnboundedSender<J>,
}

// Not derived: a derived `Clone` would ask `J: Clone`, and a job (it holds its reply) is not.
impl<J> Clone for Queue<J> {
    fn clone(&self) -> Self {
        Queue {
            tx: self.tx.clone(),
        }
    }
}

impl<J> Queue<J> {
    /// Queues `job` for the next round; gives it back when the thread has stopped.
    pub(crate) fn send(&self, job: J) -> Result<(), J> {
        self.tx.send(job).map_err(|mpsc::error::SendError(j)| j)
    }
}

/// Starts the thread of rounds of `rounds`.
pub(crate) fn start<R: Rounds>(rounds: R) -> std::io::Result<Queue<R::Job>> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name(R::THREAD.into())
        .spawn(move || run(rounds, rx))?;
    Ok(Queue { tx })
}

fn run<R: Rounds>(rounds: R, mut rx: mpsc::UnboundedReceiver<R::Job>) {
    while let Some(first) = rx.blocking_recv() {
        let mut bytes = R::bytes(&first);
        let mut round = vec![first];
        while round.len() < R::MAX_JOBS && bytes < R::MAX_BYTES {
            match rx.try_recv() {
                Ok(j) => {
                    bytes += R::bytes(&j);
                    round.push(j);
                }
                Err(_) => break,
            }
        }
        if std::panic::catch_unwind(AssertUnwindSafe(|| rounds.write_round(round))).is_err() {
            tracing::error!(
                thread = R::THREAD,
                "a writer thread panicked on a round of writes; they were refused"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc as std_mpsc;
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    /// A job of the test thread: its size, and what its round does.
    #[derive(Default)]
    struct TestJob {
        bytes: usize,
        /// Told when the job's round begins.
        started: Option<std_mpsc::Sender<()>>,
        /// The round waits for this before it reports (keeps the thread busy meanwhile).
        gate: Option<std_mpsc::Receiver<()>>,
        panics: bool,
    }

    /// Reports each round's job sizes; the sender's drop tells that the thread ended.
    struct Report(Mutex<std_mpsc::Sender<Vec<usize>>>);

    impl Rounds for Report {
        type Job = TestJob;
        const THREAD: &'static str = "tsblob-test-rounds";
        const MAX_JOBS: usize = 4;
        const MAX_BYTES: usize = 100;

        fn bytes(job: &TestJob) -> usize {
            job.bytes
        }

        fn write_round(&self, jobs: Vec<TestJob>) {
            for j in &jobs {
                if let Some(s) = &j.started {
                    let _ = s.send(());
                }
            }
            for j in &jobs {
                if let Some(gate) = &j.gate {
                    let _ = gate.recv_timeout(WAIT);
                }
            }
            assert!(!jobs.iter().any(|j| j.panics), "a round that panics");
            let sizes = jobs.iter().map(|j| j.bytes).collect();
            if let Ok(tx) = self.0.lock() {
                let _ = tx.send(sizes);
            }
        }
    }

    fn job(bytes: usize) -> TestJob {
        TestJob {
            bytes,
            ..TestJob::default()
        }
    }

    /// A test thread, and the receiver of its rounds' reports.
    fn thread() -> (Queue<TestJob>, std_mpsc::Receiver<Vec<usize>>) {
        let (report, rounds) = std_mpsc::channel();
        let queue = start(Report(Mutex::new(report))).expect("the thread starts");
        (queue, rounds)
    }

    /// Sends `first` and returns once the thread is inside its round, so that what is sent
    /// next queues for the next round.
    fn send_and_wait_for_its_round(queue: &Queue<TestJob>, mut first: TestJob) {
        let (started, began) = std_mpsc::channel();
        first.started = Some(started);
        assert!(queue.send(first).is_ok());
        assert!(began.recv_timeout(WAIT).is_ok(), "the round began");
    }

    /// A 1-byte job whose round lasts until the returned sender is sent to (or dropped).
    fn gated() -> (TestJob, std_mpsc::Sender<()>) {
        let (open, gate) = std_mpsc::channel();
        let j = TestJob {
            bytes: 1,
            gate: Some(gate),
            ..TestJob::default()
        };
        (j, open)
    }

    #[test]
    fn a_round_takes_at_most_max_jobs_and_no_job_past_max_bytes() {
        let (queue, rounds) = thread();
        let (first, open) = gated();
        send_and_wait_for_its_round(&queue, first);
        for _ in 0..8 {
            assert!(queue.send(job(10)).is_ok());
        }
        for _ in 0..3 {
            assert!(queue.send(job(60)).is_ok());
        }
        drop(open);
        drop(queue);
        let got: Vec<Vec<usize>> = rounds.iter().collect();
        assert_eq!(
            got,
            vec![
                vec![1],
                // MAX_JOBS...
                vec![10, 10, 10, 10],
                vec![10, 10, 10, 10],
                // ...and MAX_BYTES: at 60 bytes a round takes one more job (a round may
                // pass MAX_BYTES by one job), at 120 none.
                vec![60, 60],
                vec![60],
            ]
        );
    }

    #[test]
    fn a_round_that_panics_is_dropped_and_the_thread_goes_on() {
        let (queue, rounds) = thread();
        let bad = TestJob {
            bytes: 7,
            panics: true,
            ..TestJob::default()
        };
        send_and_wait_for_its_round(&queue, bad);
        assert!(queue.send(job(8)).is_ok());
        // The panicking round reported nothing; the next one is written.
        assert_eq!(rounds.recv_timeout(WAIT).ok(), Some(vec![8]));
    }

    #[test]
    fn the_thread_writes_what_was_queued_and_ends_with_its_last_queue() {
        let (queue, rounds) = thread();
        let (first, open) = gated();
        send_and_wait_for_its_round(&queue, first);
        let other = queue.clone();
        assert!(queue.send(job(2)).is_ok());
        drop(queue);
        assert!(other.send(job(3)).is_ok());
        drop(other);
        drop(open);
        // `Report`'s sender is dropped with the thread's end: then `iter` ends.
        let got: Vec<Vec<usize>> = rounds.iter().collect();
        assert_eq!(got, vec![vec![1], vec![2, 3]]);
    }
}
