//! Record counts and payload bytes per time step of an entry, from the index alone: what a
//! timeline draws. No payload is read and no record metadata is resolved, so a window of
//! millions of records costs one pass over their chunks (a few bytes each).

/// The most steps a histogram has; a finer `step` is widened to fit.
pub const MAX_HISTOGRAM_STEPS: u64 = 10_000;
/// The steps a histogram has when no `step` is given.
pub const DEFAULT_HISTOGRAM_STEPS: u64 = 200;
/// Records visited per LMDB read transaction (none is held for long).
pub(crate) const PAGE_RECORDS: u64 = 65_536;
/// Records visited per histogram at most: the work one call may do. A window with more is
/// answered for its first part, with [`Histogram::truncated_at`] saying where it stopped.
pub const MAX_HISTOGRAM_RECORDS: u64 = 20_000_000;

/// Counts per step over `[start, stop)`: step `i` is `[start + i*step, start + (i+1)*step)`
/// (the last one is cut at `stop`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    pub start: u64,
    pub stop: u64,
    pub step: u64,
    /// Records per step.
    pub counts: Vec<u64>,
    /// Payload bytes (uncompressed) per step.
    pub bytes: Vec<u64>,
    /// Set when the walk stopped after [`MAX_HISTOGRAM_RECORDS`] records: the steps from
    /// this timestamp on are incomplete.
    pub truncated_at: Option<u64>,
}

impl Histogram {
    /// The number of steps `[start, stop)` is cut into with `step` (at least 1).
    pub fn steps(start: u64, stop: u64, step: u64) -> u64 {
        let span = stop.saturating_sub(start);
        span.div_ceil(step.max(1))
    }

    /// The step that cuts `[start, stop)` into about [`DEFAULT_HISTOGRAM_STEPS`] steps.
    pub fn default_step(start: u64, stop: u64) -> u64 {
        stop.saturating_sub(start)
            .div_ceil(DEFAULT_HISTOGRAM_STEPS)
            .max(1)
    }
}
