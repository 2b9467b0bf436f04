//! Replication metrics, one series per task (task names are bounded: at most
//! [`super::MAX_TASKS`] tasks, and a removed task's series are dropped).
//!
//! A series exists only for a task that exists: [`ReplicationMetrics::add`] is the only
//! place that creates one (`with_label_values`), and [`ReplicationMetrics::remove`] drops
//! the task's name and its series under the same lock. Updates go through a
//! [`TaskMetrics`] handle: one taken for a task that does not exist (any more) counts
//! nothing, and one taken before its task was removed updates series no longer in the
//! registry. So a sender still running (or finishing its round) after its task was
//! removed cannot bring the task's series back.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

pub struct ReplicationMetrics {
    sent_records: IntCounterVec,
    sent_bytes: IntCounterVec,
    errors: IntCounterVec,
    conflicts: IntCounterVec,
    evicted_before_sent: IntCounterVec,
    pending_records: IntGaugeVec,
    /// Whole seconds since the oldest pending record was written (0: nothing pending).
    lag_seconds: IntGaugeVec,
    /// The series of every existing task, by name.
    tasks: Mutex<HashMap<String, Arc<Series>>>,
}

/// A task's series.
struct Series {
    sent_records: IntCounter,
    sent_bytes: IntCounter,
    errors: IntCounter,
    conflicts: IntCounter,
    evicted_before_sent: IntCounter,
    pending_records: IntGauge,
    lag_seconds: IntGauge,
}

/// A task's series as its sender updates them ([`ReplicationMetrics::task`]): inert when
/// the task did not exist, or once it is removed.
#[derive(Clone)]
pub struct TaskMetrics(Option<Arc<Series>>);

impl TaskMetrics {
    /// Records delivered (`records`) and their payload bytes.
    pub fn sent(&self, records: u64, bytes: u64) {
        if let Some(s) = &self.0 {
            s.sent_records.inc_by(records);
            s.sent_bytes.inc_by(bytes);
        }
    }

    pub fn error(&self) {
        if let Some(s) = &self.0 {
            s.errors.inc();
        }
    }

    pub fn conflict(&self) {
        if let Some(s) = &self.0 {
            s.conflicts.inc();
        }
    }

    pub fn evicted_before_sent(&self, records: u64) {
        if let Some(s) = &self.0 {
            s.evicted_before_sent.inc_by(records);
        }
    }

    /// Records waiting to be sent, and the age of the oldest of them in whole seconds.
    pub fn pending(&self, records: i64, lag_seconds: i64) {
        if let Some(s) = &self.0 {
            s.pending_records.set(records);
            s.lag_seconds.set(lag_seconds);
        }
    }
}

impl ReplicationMetrics {
    pub fn new(registry: &Registry) -> anyhow::Result<ReplicationMetrics> {
        let c = |n: &str, h: &str| IntCounterVec::new(Opts::new(n, h), &["task"]);
        let g = |n: &str, h: &str| IntGaugeVec::new(Opts::new(n, h), &["task"]);
        let m = ReplicationMetrics {
            sent_records: c(
                "tsblob_replication_sent_records_total",
                "Records delivered to the destination (stored there, or found there with the same payload)",
            )?,
            sent_bytes: c(
                "tsblob_replication_sent_bytes_total",
                "Payload bytes of the records delivered",
            )?,
            errors: c(
                "tsblob_replication_errors_total",
                "Failed attempts and records the destination refused for good",
            )?,
            conflicts: c(
                "tsblob_replication_conflicts_total",
                "Records the destination holds a different payload for (kept, not overwritten)",
            )?,
            evicted_before_sent: c(
                "tsblob_replication_evicted_before_sent_total",
                "Records the source lost (FIFO quota, removal) before they were sent",
            )?,
            pending_records: g(
                "tsblob_replication_pending_records",
                "Records waiting to be sent (updated by the sender)",
            )?,
            lag_seconds: g(
                "tsblob_replication_lag_seconds",
                "Age of the oldest record waiting to be sent (0: none)",
            )?,
            tasks: Mutex::new(HashMap::new()),
        };
        for c in m.counters() {
            registry.register(Box::new(c.clone()))?;
        }
        for g in m.gauges() {
            registry.register(Box::new(g.clone()))?;
        }
        Ok(m)
    }

    fn counters(&self) -> [&IntCounterVec; 5] {
        [
            &self.sent_records,
            &self.sent_bytes,
            &self.errors,
            &self.conflicts,
            &self.evicted_before_sent,
        ]
    }

    fn gauges(&self) -> [&IntGaugeVec; 2] {
        [&self.pending_records, &self.lag_seconds]
    }

    /// Creates a task's series (at 0), so a scrape shows every task; a task that has
    /// them (replaced) keeps them.
    pub fn add(&self, task: &str) {
        let mut tasks = self.tasks.lock();
        if tasks.contains_key(task) {
            return;
        }
        let l = &[task];
        let series = Series {
            sent_records: self.sent_records.with_label_values(l),
            sent_bytes: self.sent_bytes.with_label_values(l),
            errors: self.errors.with_label_values(l),
            conflicts: self.conflicts.with_label_values(l),
            evicted_before_sent: self.evicted_before_sent.with_label_values(l),
            pending_records: self.pending_records.with_label_values(l),
            lag_seconds: self.lag_seconds.with_label_values(l),
        };
        tasks.insert(task.to_string(), Arc::new(series));
    }

    /// Drops a removed task's series: the handles of it taken before
    /// ([`ReplicationMetrics::task`]) no longer reach the registry.
    pub fn remove(&self, task: &str) {
        let mut tasks = self.tasks.lock();
        if tasks.remove(task).is_none() {
            return;
        }
        for c in self.counters() {
            let _ = c.remove_label_values(&[task]);
        }
        for g in self.gauges() {
            let _ = g.remove_label_values(&[task]);
        }
    }

    /// The series of task `task` (inert if no such task exists).
    pub fn task(&self, task: &str) -> TaskMetrics {
        TaskMetrics(self.tasks.lock().get(task).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metric families holding a series of `task`.
    fn series_of(registry: &Registry, task: &str) -> Vec<String> {
        registry
            .gather()
            .iter()
            .filter(|f| {
                f.get_metric().iter().any(|m| {
                    m.get_label()
                        .iter()
                        .any(|l| l.name() == "task" && l.value() == task)
                })
            })
            .map(|f| f.name().to_string())
            .collect()
    }

    fn update_all(t: &TaskMetrics) {
        t.sent(2, 10);
        t.error();
        t.conflict();
        t.evicted_before_sent(1);
        t.pending(3, 4);
    }

    #[test]
    fn a_removed_tasks_series_does_not_come_back_from_a_late_increment() {
        let registry = Registry::new();
        let m = ReplicationMetrics::new(&registry).unwrap();
        m.add("a");
        // The sender's handle, taken when it started.
        let sender = m.task("a");
        update_all(&sender);
        assert_eq!(series_of(&registry, "a").len(), 7);
        m.remove("a");
        assert!(series_of(&registry, "a").is_empty());
        // The sender, still running or finishing its round, counts after the removal;
        // so does task_error (by name).
        update_all(&sender);
        update_all(&m.task("a"));
        assert_eq!(series_of(&registry, "a"), Vec::<String>::new());

        // A new task of the same name starts at 0; the old sender's late counts go nowhere.
        m.add("a");
        update_all(&sender);
        let sent = m.sent_records.with_label_values(&["a"]).get();
        assert_eq!(sent, 0);
        update_all(&m.task("a"));
        assert_eq!(m.sent_records.with_label_values(&["a"]).get(), 2);
        assert_eq!(m.pending_records.with_label_values(&["a"]).get(), 3);
        assert_eq!(m.lag_seconds.with_label_values(&["a"]).get(), 4);
        assert_eq!(series_of(&registry, "a").len(), 7);
    }

    #[test]
    fn a_replaced_task_keeps_its_series() {
        let registry = Registry::new();
        let m = ReplicationMetrics::new(&registry).unwrap();
        m.add("a");
        let old = m.task("a");
        old.sent(5, 50);
        m.add("a");
        m.task("a").sent(1, 1);
        old.sent(1, 1);
        assert_eq!(m.sent_records.with_label_values(&["a"]).get(), 7);
        assert_eq!(m.sent_bytes.with_label_values(&["a"]).get(), 52);
        // Removing a task that has no series changes nothing.
        m.remove("b");
        assert_eq!(series_of(&registry, "a").len(), 7);
    }
}
