//! Measurements of one phase on one target: counts, latency and time-to-first-byte histograms.
//!
//! Each virtual user fills its own [`Stats`]; they are merged when the phase ends, so the hot
//! path takes no lock.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Histograms hold µs from 1 µs to 10 minutes with 3 significant digits.
fn histogram() -> Histogram<u64> {
    // Constant bounds that hdrhistogram documents as valid: this cannot fail at run time.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant histogram bounds are valid")
}

/// Counters and histograms of one virtual user (or, merged, of a phase).
#[derive(Debug, Clone)]
pub struct Stats {
    /// Requests' latencies in µs.
    pub latency: Histogram<u64>,
    /// Times to first byte of reads in µs.
    pub ttfb: Histogram<u64>,
    /// Records written or read.
    pub records: u64,
    /// Payload bytes written or read.
    pub bytes: u64,
    /// Requests (or records of a batch) that failed.
    pub errors: u64,
    /// Records read back whose bytes were checked against the seed.
    pub verified: u64,
    /// The first error's message, to say what went wrong.
    pub first_error: Option<String>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            latency: histogram(),
            ttfb: histogram(),
            records: 0,
            bytes: 0,
            errors: 0,
            verified: 0,
            first_error: None,
        }
    }
}

impl Stats {
    /// Records one request's latency.
    pub fn latency(&mut self, d: Duration) {
        self.latency.saturating_record(micros(d));
    }

    /// Records one read's time to first byte.
    pub fn ttfb(&mut self, d: Duration) {
        self.ttfb.saturating_record(micros(d));
    }

    /// Counts a failed request (or `n` failed records of a batch).
    pub fn error(&mut self, n: u64, message: String) {
        self.errors += n;
        if self.first_error.is_none() {
            self.first_error = Some(message);
        }
    }

    /// Adds another user's measurements.
    pub fn merge(&mut self, other: &Stats) {
        // Both use the same bounds, so add() cannot fail; a failure would only lose samples.
        let _ = self.latency.add(&other.latency);
        let _ = self.ttfb.add(&other.ttfb);
        self.records += other.records;
        self.bytes += other.bytes;
        self.errors += other.errors;
        self.verified += other.verified;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
    }

    /// Summary of the phase, given its wall-clock time.
    pub fn summary(&self, wall: Duration, read: bool) -> Summary {
        let secs = wall.as_secs_f64().max(1e-9);
        Summary {
            records: self.records,
            bytes: self.bytes,
            seconds: wall.as_secs_f64(),
            records_per_s: self.records as f64 / secs,
            mb_per_s: self.bytes as f64 / secs / 1e6,
            latency_ms: Percentiles::of(&self.latency),
            ttfb_ms: if read {
                Some(Percentiles::of(&self.ttfb))
            } else {
                None
            },
            requests: self.latency.len(),
            errors: self.errors,
            verified: self.verified,
            first_error: self.first_error.clone(),
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// p50/p95/p99 in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Percentiles {
            p50: ms(0.50),
            p95: ms(0.95),
            p99: ms(0.99),
        }
    }
}

/// What a report cell holds for a measured phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// Records written or read.
    pub records: u64,
    /// Payload bytes written or read.
    pub bytes: u64,
    /// Wall-clock time of the phase.
    pub seconds: f64,
    /// Records per second.
    pub records_per_s: f64,
    /// Payload megabytes (10^6 bytes) per second.
    pub mb_per_s: f64,
    /// Request latency.
    pub latency_ms: Percentiles,
    /// Time to first byte (reads only).
    pub ttfb_ms: Option<Percentiles>,
    /// Requests made.
    pub requests: u64,
    /// Failed requests or records.
    pub errors: u64,
    /// Records checked byte for byte against the seed.
    pub verified: u64,
    /// The first error, if any.
    pub first_error: Option<String>,
}
