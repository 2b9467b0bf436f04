//! The seeded workload: which records exist, where, with which bytes.
//!
//! Nothing big is held in memory: a record is named by (size, entry, index) and its timestamp,
//! labels and payload are derived from the seed whenever a writer needs them or a reader checks
//! them. The same plan is replayed against every target, so the targets store identical data
//! and a byte read back from any of them can be checked against the seed.

use std::path::Path;

use anyhow::{bail, Context, Result};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::payload::{Expected, StreamCheck};

/// First timestamp of every entry (µs since the Unix epoch, November 2023).
pub const BASE_TS: u64 = 1_700_000_000_000_000;
/// Gap between two records of one entry, in µs.
pub const TS_STEP: u64 = 1_000;
/// Content type written with every record.
pub const CONTENT_TYPE: &str = "application/octet-stream";

/// Phases of a run, in the order they run for each record size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// One record per request.
    WriteSingle,
    /// Many records per request (the target's batch API).
    WriteBatch,
    /// One query per entry over its whole time window.
    RangeWhole,
    /// Queries over random sub-windows.
    RangeSub,
    /// One query per entry over its whole window with a three-clause label condition
    /// (ReductStore's `when`); every target must return exactly the matching records.
    RangeWhen,
    /// Reads of random single records by timestamp.
    PointRead,
    /// Writing past a FIFO quota; the quota must hold.
    Fifo,
}

impl Phase {
    /// All phases in run order.
    pub const ALL: [Phase; 7] = [
        Phase::WriteSingle,
        Phase::WriteBatch,
        Phase::RangeWhole,
        Phase::RangeSub,
        Phase::RangeWhen,
        Phase::PointRead,
        Phase::Fifo,
    ];

    /// The kebab-case name used in flags, files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::WriteSingle => "write-single",
            Phase::WriteBatch => "write-batch",
            Phase::RangeWhole => "range-whole",
            Phase::RangeSub => "range-sub",
            Phase::RangeWhen => "range-when",
            Phase::PointRead => "point-read",
            Phase::Fifo => "fifo",
        }
    }

    /// Parses a phase name as printed by [`Phase::name`].
    pub fn parse(name: &str) -> Result<Phase> {
        Phase::ALL
            .into_iter()
            .find(|p| p.name() == name.trim())
            .with_context(|| {
                let names: Vec<_> = Phase::ALL.iter().map(|p| p.name()).collect();
                format!("unknown phase {name:?}: use one of {}", names.join(", "))
            })
    }

    /// True for phases that read records back (and so report time to first byte).
    pub fn is_read(self) -> bool {
        matches!(
            self,
            Phase::RangeWhole | Phase::RangeSub | Phase::RangeWhen | Phase::PointRead
        )
    }
}

/// The FIFO steady-state phase: a bucket with a FIFO quota written well past it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FifoSpec {
    /// Quota of the FIFO bucket in bytes.
    pub quota_bytes: u64,
    /// Size of each record written.
    pub record_size: u64,
    /// Bytes written, as a multiple of the quota.
    pub overwrite_factor: f64,
    /// Block size asked of targets that have one (the quota is enforced per block).
    pub block_bytes: u64,
}

impl Default for FifoSpec {
    fn default() -> Self {
        FifoSpec {
            quota_bytes: 64 << 20,
            record_size: 100 << 10,
            overwrite_factor: 3.0,
            block_bytes: 4 << 20,
        }
    }
}

/// A fully specified workload (from flags or a TOML/JSON file). Counts are before `scale`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Workload {
    /// Seed of every timestamp choice, label and payload byte.
    pub seed: u64,
    /// Record sizes in bytes.
    pub sizes: Vec<u64>,
    /// Records per size; `None` uses `bytes_per_size`, or the built-in default per size.
    pub records_per_size: Option<u64>,
    /// Payload bytes per size (records = bytes / size, at least 1).
    pub bytes_per_size: Option<u64>,
    /// Entries (streams) per size; records are spread over them round-robin.
    pub entries: u32,
    /// Virtual users: requests in flight at once; connection pools are sized to it.
    pub concurrency: usize,
    /// Records per batch request in the batched write phase.
    pub batch_size: usize,
    /// Upper bound of payload bytes per batch request.
    pub batch_max_bytes: u64,
    /// Labels per record.
    pub labels: u32,
    /// Share of each size's records written one per request; the rest are batched.
    pub single_fraction: f64,
    /// Random sub-window queries per size.
    pub sub_windows: u32,
    /// Longest sub-window as a share of an entry's window.
    pub sub_window_max: f64,
    /// Random point reads per size.
    pub point_reads: u64,
    /// Phases to run.
    pub phases: Vec<Phase>,
    /// The FIFO phase (only when `phases` lists `fifo`).
    pub fifo: FifoSpec,
    /// Multiplies every record count (and the FIFO volume).
    pub scale: f64,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            seed: 42,
            sizes: vec![1 << 10, 10 << 10, 100 << 10, 1 << 20, 10 << 20],
            records_per_size: None,
            bytes_per_size: None,
            // One writer per entry: as many entries as virtual users keeps them all busy.
            entries: 16,
            concurrency: 16,
            // ReductStore's server accepts at most 85 records (headers) per batch by default.
            batch_size: 80,
            batch_max_bytes: 8_000_000,
            labels: 2,
            single_fraction: 0.5,
            sub_windows: 20,
            sub_window_max: 0.1,
            point_reads: 1_000,
            phases: vec![
                Phase::WriteSingle,
                Phase::WriteBatch,
                Phase::RangeWhole,
                Phase::RangeSub,
                Phase::PointRead,
            ],
            fifo: FifoSpec::default(),
            scale: 1.0,
        }
    }
}

/// Records per size when the workload names neither a count nor a volume: 10,000 up to
/// 100 KiB (so the range read covers 10,000 × 100 KiB), then 300 MiB per size.
fn default_count(size: u64) -> u64 {
    if size <= 100 << 10 {
        10_000
    } else {
        ((300u64 << 20) / size).max(1)
    }
}

impl Workload {
    /// Reads a workload file: TOML unless the name ends in `.json`.
    pub fn from_file(path: &Path) -> Result<Workload> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read workload file {}", path.display()))?;
        let parsed = if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(&text).map_err(anyhow::Error::from)
        } else {
            toml::from_str(&text).map_err(anyhow::Error::from)
        };
        parsed.with_context(|| format!("workload file {} does not parse", path.display()))
    }

    /// Checks that the plan can run, with a message saying which field to fix.
    pub fn validate(&self) -> Result<()> {
        if self.sizes.is_empty() || self.sizes.contains(&0) {
            bail!("workload: `sizes` must list at least one size, none of them 0");
        }
        if self.entries == 0 || self.concurrency == 0 || self.batch_size == 0 {
            bail!("workload: `entries`, `concurrency` and `batch_size` must be at least 1");
        }
        if !(self.scale > 0.0 && self.scale.is_finite()) {
            bail!(
                "workload: `scale` must be a positive number, got {}",
                self.scale
            );
        }
        if !(0.0..=1.0).contains(&self.single_fraction) {
            bail!("workload: `single_fraction` must be within 0..=1");
        }
        if !(self.sub_window_max > 0.0 && self.sub_window_max <= 1.0) {
            bail!("workload: `sub_window_max` must be within (0, 1]");
        }
        if self.labels > 16 {
            bail!("workload: at most 16 labels per record");
        }
        if self.phases.is_empty() {
            bail!("workload: `phases` is empty: name at least one phase");
        }
        Ok(())
    }

    /// The plan for each record size, with counts scaled.
    pub fn size_plans(&self) -> Vec<SizePlan> {
        self.sizes
            .iter()
            .map(|&size| {
                let base = match (self.records_per_size, self.bytes_per_size) {
                    (Some(n), _) => n,
                    (None, Some(bytes)) => bytes / size,
                    (None, None) => default_count(size),
                };
                let count = ((base as f64 * self.scale).round() as u64).max(1);
                let single = (count as f64 * self.single_fraction).round() as u64;
                SizePlan {
                    seed: self.seed,
                    size,
                    count,
                    single,
                    entries: self.entries,
                    labels: self.labels,
                }
            })
            .collect()
    }

    /// Point reads per size, scaled.
    pub fn scaled_point_reads(&self) -> u64 {
        ((self.point_reads as f64 * self.scale).round() as u64).max(1)
    }

    /// Bytes written in the FIFO phase, scaled.
    pub fn fifo_bytes(&self) -> u64 {
        (self.fifo.quota_bytes as f64 * self.fifo.overwrite_factor * self.scale.max(1.0)) as u64
    }
}

/// One record of a plan: entry index, index within the entry, timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rec {
    /// Entry index within the size.
    pub entry: u32,
    /// Position of the record within its entry.
    pub seq: u64,
    /// Timestamp in µs.
    pub ts: u64,
}

/// Every record of one size: `count` records over `entries` entries, the first `single`
/// written one per request and the rest in batches.
#[derive(Debug, Clone, PartialEq)]
pub struct SizePlan {
    /// Workload seed.
    pub seed: u64,
    /// Payload size of each record.
    pub size: u64,
    /// Records of this size.
    pub count: u64,
    /// Records written one per request (global indices `0..single`).
    pub single: u64,
    /// Entries of this size.
    pub entries: u32,
    /// Labels per record.
    pub labels: u32,
}

impl SizePlan {
    /// Name of an entry of this size (the same name on every target).
    pub fn entry_name(&self, entry: u32) -> String {
        entry_name(self.size, entry)
    }

    /// Record with global index `i` (round-robin over the entries).
    pub fn record(&self, i: u64) -> Rec {
        let entries = u64::from(self.entries);
        let seq = i / entries;
        Rec {
            entry: (i % entries) as u32,
            seq,
            ts: BASE_TS + seq * TS_STEP,
        }
    }

    /// Global index of the record of `entry` at timestamp `ts`: the inverse of
    /// [`SizePlan::record`].
    pub fn index_of(&self, entry: u32, ts: u64) -> u64 {
        let seq = ts.saturating_sub(BASE_TS) / TS_STEP;
        seq.saturating_mul(u64::from(self.entries))
            .saturating_add(u64::from(entry))
    }

    /// Records stored in an entry.
    pub fn entry_len(&self, entry: u32) -> u64 {
        let entries = u64::from(self.entries);
        let e = u64::from(entry);
        if e >= self.count {
            0
        } else {
            (self.count - e).div_ceil(entries)
        }
    }

    /// Records of `entry` whose timestamps fall in `[start, stop)`.
    pub fn expected_in(&self, entry: u32, start: u64, stop: u64) -> u64 {
        let len = self.entry_len(entry);
        let first = start.saturating_sub(BASE_TS).div_ceil(TS_STEP);
        let end = stop.saturating_sub(BASE_TS).div_ceil(TS_STEP).min(len);
        end.saturating_sub(first.min(end))
    }

    /// Labels of a record: `l0`…`lN`, a mix of per-entry and per-record values.
    pub fn labels_of(&self, rec: Rec) -> Vec<(String, String)> {
        (0..self.labels)
            .map(|k| {
                let value = match k {
                    0 => format!("cam-{}", rec.entry),
                    1 => format!("{}", rec.seq % 10),
                    _ => format!("v{}", mix(rec.ts ^ u64::from(k)) % 1000),
                };
                (format!("l{k}"), value)
            })
            .collect()
    }

    /// The condition of the `range-when` phase for an entry, in ReductStore's `when`
    /// language: its camera label, and `l1` (the record's position modulo 10) in 3..6.
    pub fn when_condition(&self, entry: u32) -> serde_json::Value {
        serde_json::json!({"$and": [
            {"&l0": {"$eq": format!("cam-{entry}")}},
            {"&l1": {"$gte": 3}},
            {"&l1": {"$lt": 6}},
        ]})
    }

    /// Timestamps of `entry` in `[start, stop)` that [`SizePlan::when_condition`] keeps.
    pub fn when_expected(&self, entry: u32, start: u64, stop: u64) -> Vec<u64> {
        (0..self.entry_len(entry))
            .map(|seq| (seq, BASE_TS + seq * TS_STEP))
            .filter(|&(seq, ts)| ts >= start && ts < stop && (3..6).contains(&(seq % 10)))
            .map(|(_, ts)| ts)
            .collect()
    }

    fn payload_key(&self, entry: u32, ts: u64) -> u64 {
        mix(self.seed ^ mix(self.size) ^ mix(u64::from(entry) << 32 | 0x5eed) ^ mix(ts))
    }

    /// The bytes a record holds (see [`crate::payload`]).
    pub fn expected(&self, entry: u32, ts: u64) -> Expected {
        Expected::new(self.seed, self.size, self.payload_key(entry, ts), ts)
    }

    /// The payload of a record, as a writer sends it.
    pub fn payload(&self, entry: u32, ts: u64) -> Vec<u8> {
        self.expected(entry, ts).to_vec()
    }

    /// Checks a record read back: its timestamp belongs to the entry, its bytes are the
    /// seeded payload and (when the target returned them) its labels are the planned ones.
    pub fn verify(
        &self,
        entry: u32,
        ts: u64,
        payload: &[u8],
        labels: Option<&[(String, String)]>,
    ) -> Result<()> {
        let mut check = self.stream_check(entry, ts, payload.len() as u64, labels)?;
        check.feed(payload)?;
        check.finish()
    }

    /// Starts the check of a record whose payload (`len` bytes) will arrive in pieces: its
    /// timestamp, length and labels are checked now, its bytes by the [`StreamCheck`].
    pub fn stream_check(
        &self,
        entry: u32,
        ts: u64,
        len: u64,
        labels: Option<&[(String, String)]>,
    ) -> Result<StreamCheck> {
        // Formatted only for an error: this runs once per record read.
        let name = || self.entry_name(entry);
        if ts < BASE_TS || !(ts - BASE_TS).is_multiple_of(TS_STEP) {
            return Err(mismatch(format!(
                "{} returned timestamp {ts}, which was never written",
                name()
            )));
        }
        let seq = (ts - BASE_TS) / TS_STEP;
        if seq >= self.entry_len(entry) {
            return Err(mismatch(format!(
                "{} returned timestamp {ts}, which was never written",
                name()
            )));
        }
        if len != self.size {
            return Err(mismatch(format!(
                "{} @ {ts} has {len} bytes, {} were written",
                name(),
                self.size
            )));
        }
        if let Some(got) = labels {
            let mut got: Vec<_> = got.to_vec();
            got.sort();
            let mut want = self.labels_of(Rec { entry, seq, ts });
            want.sort();
            if got != want {
                return Err(mismatch(format!(
                    "{} @ {ts} has labels {got:?}, {want:?} were written",
                    name()
                )));
            }
        }
        Ok(StreamCheck::new(self.expected(entry, ts), entry, ts))
    }
}

/// A record read back that is not what was written: wrong bytes, labels or timestamp, or a
/// query that returned too few or too many records. Always fatal to the run.
#[derive(Debug)]
pub struct VerificationFailed(pub String);

impl std::fmt::Display for VerificationFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "verification failed: {}", self.0)
    }
}

impl std::error::Error for VerificationFailed {}

/// Builds a [`VerificationFailed`] error.
pub fn mismatch(message: String) -> anyhow::Error {
    VerificationFailed(message).into()
}

/// Name of entry `entry` of record size `size` (the same name on every target).
pub fn entry_name(size: u64, entry: u32) -> String {
    format!("s{size}-e{entry}")
}

/// The workload's seeded generator: xoshiro256++ from `rand_xoshiro` (the repository's one
/// seeded RNG), whose output is fixed by its definition on every platform and version.
pub type Rng = rand_xoshiro::Xoshiro256PlusPlus;

/// The generator for `seed`.
pub fn rng(seed: u64) -> Rng {
    Rng::seed_from_u64(seed)
}

/// A 64-bit key derived from `z` (independent keys from small integers): the first output
/// of the generator seeded with it.
pub fn mix(z: u64) -> u64 {
    rng(z).next_u64()
}

/// A number in `0..n` (n > 0).
pub fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.next_u64() % n.max(1)
}

/// Parses a size (`1KiB` = 1024 bytes, `1KB` = 1000): the one `parse_size` of the binary.
pub fn parse_size(text: &str) -> Result<u64> {
    tsblob_proto::parse_size(text).map_err(anyhow::Error::msg)
}

pub use tsblob_proto::format_size;

#[cfg(test)]
mod tests {
    use super::*;

    /// `limit` finds a record's copy by its global index, computed from (entry, ts).
    #[test]
    fn index_of_inverts_record() {
        let p = SizePlan {
            seed: 1,
            size: 1024,
            count: 100,
            single: 0,
            entries: 7,
            labels: 0,
        };
        for i in 0..100 {
            let r = p.record(i);
            assert_eq!(p.index_of(r.entry, r.ts), i);
        }
    }

    #[test]
    #[ignore = "timing only: cargo test --release -p tsblob-compare -- --ignored --nocapture"]
    fn payload_generation_speed() -> Result<()> {
        let p = SizePlan {
            seed: 1,
            size: 100 << 10,
            count: 1000,
            single: 0,
            entries: 1,
            labels: 0,
        };
        let t = std::time::Instant::now();
        for i in 0..1000 {
            let rec = p.record(i);
            let bytes = p.payload(0, rec.ts);
            p.verify(0, rec.ts, &bytes, None)?;
        }
        let gb = 1000.0 * (100 << 10) as f64 / 1e9;
        println!("build + verify: {:.2} GB/s", gb / t.elapsed().as_secs_f64());
        Ok(())
    }

    fn plan(count: u64) -> SizePlan {
        SizePlan {
            seed: 7,
            size: 1000,
            count,
            single: 3,
            entries: 4,
            labels: 3,
        }
    }

    #[test]
    fn payload_verifies_and_a_flipped_byte_does_not() -> Result<()> {
        let p = plan(10);
        let rec = p.record(5);
        let mut bytes = p.payload(rec.entry, rec.ts);
        let labels = p.labels_of(rec);
        p.verify(rec.entry, rec.ts, &bytes, Some(&labels))?;
        bytes[999] ^= 1;
        assert!(p.verify(rec.entry, rec.ts, &bytes, None).is_err());
        Ok(())
    }

    #[test]
    fn unknown_timestamps_fail_verification() {
        let p = plan(10);
        // Entry 3 holds records 3 and 7 only: seq 0 and 1.
        let bytes = p.payload(3, BASE_TS + 2 * TS_STEP);
        assert!(p.verify(3, BASE_TS + 2 * TS_STEP, &bytes, None).is_err());
        assert!(p.verify(3, BASE_TS + 1, &bytes, None).is_err());
    }

    #[test]
    fn expected_counts_match_the_round_robin() {
        let p = plan(10);
        assert_eq!(
            (0..4).map(|e| p.entry_len(e)).collect::<Vec<_>>(),
            vec![3, 3, 2, 2]
        );
        assert_eq!(p.expected_in(0, 0, u64::MAX), 3);
        assert_eq!(p.expected_in(0, BASE_TS + 1, BASE_TS + 2 * TS_STEP), 1);
        assert_eq!(p.expected_in(2, BASE_TS, BASE_TS + 2 * TS_STEP + 1), 2);
    }

    #[test]
    fn sizes_mean_what_they_say() -> Result<()> {
        // Regression (issue 16): `1KB` was 1024 bytes here and 1000 in `tsblob serve`.
        assert_eq!(parse_size("1KB")?, 1000);
        assert_eq!(parse_size("1KiB")?, 1024);
        assert_eq!(parse_size("10 MiB")?, 10 << 20);
        assert_eq!(format_size(100 << 10), "100 KiB");
        assert!(parse_size("3 parsecs").is_err());
        Ok(())
    }
}
