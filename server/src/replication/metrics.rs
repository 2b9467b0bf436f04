//! Replication metrics, one series per task (task names are bounded: at most
//! [`super::MAX_TASKS`] tasks, and a removed task's series are dropped).

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

pub struct ReplicationMetrics {
    pub sent_records: IntCounterVec,
    pub sent_bytes: IntCounterVec,
    pub errors: IntCounterVec,
    pub conflicts: IntCounterVec,
    pub evicted_before_sent: IntCounterVec,
    pub pending_records: IntGaugeVec,
    /// Whole seconds since the oldest pending record was written (0: nothing pending).
    pub lag_seconds: IntGaugeVec,
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
        };
        for c in [
            &m.sent_records,
            &m.sent_bytes,
            &m.errors,
            &m.conflicts,
            &m.evicted_before_sent,
        ] {
            registry.register(Box::new(c.clone()))?;
        }
        for g in [&m.pending_records, &m.lag_seconds] {
            registry.register(Box::new(g.clone()))?;
        }
        Ok(m)
    }

    /// Creates a task's series (at 0), so a scrape shows every task.
    pub fn add(&self, task: &str) {
        for c in [
            &self.sent_records,
            &self.sent_bytes,
            &self.errors,
            &self.conflicts,
            &self.evicted_before_sent,
        ] {
            c.with_label_values(&[task]);
        }
        for g in [&self.pending_records, &self.lag_seconds] {
            g.with_label_values(&[task]);
        }
    }

    /// Drops a removed task's series.
    pub fn remove(&self, task: &str) {
        for c in [
            &self.sent_records,
            &self.sent_bytes,
            &self.errors,
            &self.conflicts,
            &self.evicted_before_sent,
        ] {
            let _ = c.remove_label_values(&[task]);
        }
        for g in [&self.pending_records, &self.lag_seconds] {
            let _ = g.remove_label_values(&[task]);
        }
    }
}
