//! Record counts and payload bytes per time step of an entry, from the index alone: what a
//! timeline draws. No payload is read and no record metadata is resolved, so a window of
//! millions of records costs one pass over their chunks (a few bytes each).

use crate::*;

/// The most steps a histogram has; a finer `step` is widened to fit.
pub const MAX_HISTOGRAM_STEPS: u64 = 10_000;
/// The steps a histogram has when no `step` is given.
pub const DEFAULT_HISTOGRAM_STEPS: u64 = 200;
/// Records visited per LMDB read transaction (none is held for long).
const PAGE_RECORDS: u64 = 65_536;
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

impl Store {
    /// Counts and payload bytes of an entry's records per `step` over `[start, stop)`.
    /// `start` defaults to the oldest record, `stop` to just after the latest, `step` to
    /// about [`DEFAULT_HISTOGRAM_STEPS`] steps; a `step` giving more than
    /// [`MAX_HISTOGRAM_STEPS`] steps is widened to fit. `start >= stop` gives no steps.
    pub fn histogram(
        &self,
        bucket: &str,
        entry: &str,
        start: Option<u64>,
        stop: Option<u64>,
        step: Option<u64>,
    ) -> Result<Histogram> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let index = &self.inner.index;
        let (start, stop) = {
            let txn = index.read_txn()?;
            let start = match start {
                Some(s) => s,
                None => index.first(&txn, e.id())?.map_or(0, |(ts, _)| ts),
            };
            let stop = match stop {
                Some(s) => s,
                None => index
                    .last(&txn, e.id())?
                    .map_or(start, |(ts, _)| ts.saturating_add(1)),
            };
            (start, stop.max(start))
        };
        let mut step = step
            .unwrap_or_else(|| Histogram::default_step(start, stop))
            .max(1);
        if Histogram::steps(start, stop, step) > MAX_HISTOGRAM_STEPS {
            step = stop.saturating_sub(start).div_ceil(MAX_HISTOGRAM_STEPS);
        }
        let n = Histogram::steps(start, stop, step) as usize;
        let mut bins = vec![(0u64, 0u64); n];
        let mut lo = start;
        let mut visited = 0u64;
        let mut truncated_at = None;
        while lo < stop {
            let budget = PAGE_RECORDS.min(MAX_HISTOGRAM_RECORDS - visited);
            let txn = index.read_txn()?;
            match index.histogram(&txn, e.id(), lo..stop, start, step, &mut bins, budget)? {
                None => break,
                Some(next) => {
                    visited += budget;
                    if visited >= MAX_HISTOGRAM_RECORDS {
                        truncated_at = Some(next);
                        break;
                    }
                    lo = next;
                }
            }
        }
        let (counts, bytes) = bins.into_iter().unzip();
        Ok(Histogram {
            start,
            stop,
            step,
            counts,
            bytes,
            truncated_at,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions {
            free_space_reserve: 0,
            map_size: 1 << 30,
            ..StoreOptions::default()
        };
        let s = Store::open(dir.path(), opts).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        (dir, s)
    }

    #[test]
    fn steps_count_records_and_bytes() {
        let (_d, s) = store();
        // 1,000 records 10 µs apart from 1,000, payload size ts % 7.
        let batch: Vec<_> = (0..1000u64)
            .map(|i| {
                let ts = 1000 + i * 10;
                (WriteMeta::at(ts), vec![0u8; (ts % 7) as usize])
            })
            .collect();
        for (m, d) in &batch {
            s.write("b", "e", m, d).unwrap();
        }
        let h = s
            .histogram("b", "e", Some(1000), Some(11_000), Some(1000))
            .unwrap();
        assert_eq!((h.start, h.stop, h.step), (1000, 11_000, 1000));
        assert_eq!(h.counts, vec![100; 10]);
        let expect: Vec<u64> = (0..10u64)
            .map(|b| {
                (0..100u64)
                    .map(|i| (1000 + b * 1000 + i * 10) % 7)
                    .sum::<u64>()
            })
            .collect();
        assert_eq!(h.bytes, expect);
        assert_eq!(h.truncated_at, None);

        // Defaults: the whole entry in about 200 steps; every record counted once.
        let h = s.histogram("b", "e", None, None, None).unwrap();
        assert_eq!((h.start, h.stop), (1000, 10_991));
        assert_eq!(h.step, 50);
        assert_eq!(h.counts.len(), 200);
        assert_eq!(h.counts.iter().sum::<u64>(), 1000);

        // A window starting inside a chunk, cut at a stop inside another.
        let h = s
            .histogram("b", "e", Some(1005), Some(2005), Some(100))
            .unwrap();
        assert_eq!(h.counts.iter().sum::<u64>(), 100);
        assert_eq!(h.counts[0], 10);

        // Too fine a step is widened to MAX_HISTOGRAM_STEPS steps.
        let h = s
            .histogram("b", "e", Some(0), Some(1 << 40), Some(1))
            .unwrap();
        assert_eq!(h.counts.len() as u64, MAX_HISTOGRAM_STEPS);
        assert_eq!(h.counts.iter().sum::<u64>(), 1000);

        // An empty window, and an empty entry.
        let h = s.histogram("b", "e", Some(5), Some(5), None).unwrap();
        assert!(h.counts.is_empty());
        s.write("b", "empty", &WriteMeta::at(1), b"x").unwrap();
        s.remove_record("b", "empty", 1).unwrap();
        let h = s.histogram("b", "empty", None, None, None).unwrap();
        assert!(h.counts.is_empty());
        assert!(s.histogram("b", "nope", None, None, None).is_err());
    }

    #[test]
    fn pages_of_many_records_add_up() {
        let (_d, s) = store();
        let n = PAGE_RECORDS * 2 + 17;
        let recs: Vec<BatchRecord> = (0..n)
            .map(|i| BatchRecord {
                meta: WriteMeta::at(i + 1),
                data: vec![1, 2],
            })
            .collect();
        for r in s.write_batch("b", "e", recs).unwrap() {
            r.unwrap();
        }
        let h = s.histogram("b", "e", None, None, Some(n)).unwrap();
        assert_eq!(h.counts, vec![n]);
        assert_eq!(h.bytes, vec![2 * n]);
    }
}
