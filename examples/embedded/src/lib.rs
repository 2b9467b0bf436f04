//! The steps of the embedded example, kept apart from `main` so that a test can run them:
//! open a [`Store`] in a folder, create a bucket with a FIFO quota, write a camera's frames
//! in batches (one second of video per batch), read the latest one back, query a time window
//! with a label filter, and report what the quota kept.
//!
//! Everything here is the engine's public API (`tsblob_storage`); nothing goes through HTTP.

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use tsblob_storage::{
    BatchRecord, BucketError, BucketSettings, Error, LabelFilter, Labels, NotFound, Query,
    QuotaType, Store, StoreOptions, WriteMeta,
};

pub const BUCKET: &str = "cams";
pub const ENTRY: &str = "front";
/// Timestamps of a fresh store start here (2023-11-14, µs since the Unix epoch), so that a
/// run is reproducible; a store that already holds frames continues after its latest one.
pub const T0: u64 = 1_700_000_000_000_000;
/// The query looks at this many seconds at the end of the recording.
pub const WINDOW_SECS: u64 = 10;

/// What to write.
#[derive(Debug, Clone)]
pub struct Plan {
    pub frames: u64,
    pub frame_size: usize,
    pub fps: u64,
    /// FIFO quota in bytes on disk.
    pub quota: u64,
}

/// What happened, for printing and for the test.
#[derive(Debug, Clone)]
pub struct Summary {
    pub written: u64,
    pub write_secs: f64,
    pub latest_ts: u64,
    pub latest_size: u64,
    pub latest_labels: Labels,
    pub window_secs: u64,
    pub window_matches: u64,
    pub window_bytes: u64,
    pub query_secs: f64,
    pub records_kept: u64,
    pub disk_bytes: u64,
    pub block_size: u64,
    pub evicted_blocks: u64,
    pub oldest_kept_frame: u64,
}

/// A JPEG-sized synthetic frame: the JPEG start and end markers around bytes that do not
/// compress (as a real JPEG's), the same for the same frame number on every run.
pub fn frame(seq: u64, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size.max(4));
    out.extend_from_slice(&[0xFF, 0xD8]);
    // Seeded random bytes (rand_xoshiro): zstd finds nothing to squeeze.
    let mut noise = vec![0; size.saturating_sub(4)];
    Xoshiro256PlusPlus::seed_from_u64(seq).fill_bytes(&mut noise);
    out.extend_from_slice(&noise);
    out.extend_from_slice(&[0xFF, 0xD9]);
    out
}

/// One second in three has motion: the label a query filters on.
fn has_motion(seq: u64, fps: u64) -> bool {
    (seq / fps.max(1)).is_multiple_of(3)
}

fn labels(seq: u64, fps: u64) -> Labels {
    let mut l = Labels::new();
    l.insert("camera".into(), "front".into());
    l.insert("frame".into(), seq.to_string());
    l.insert(
        "motion".into(),
        if has_motion(seq, fps) { "yes" } else { "no" }.into(),
    );
    l
}

/// Frames with motion among `first..=last`.
pub fn expected_matches(first: u64, last: u64, fps: u64) -> u64 {
    (first..=last).filter(|&i| has_motion(i, fps)).count() as u64
}

fn frame_label(labels: &Labels) -> anyhow::Result<u64> {
    labels
        .get("frame")
        .and_then(|v| v.parse().ok())
        .context("a stored frame lost its `frame` label")
}

/// Runs the example on the store in `dir` (created if missing).
pub fn run(dir: &Path, plan: &Plan) -> anyhow::Result<Summary> {
    if plan.frames == 0 || plan.fps == 0 {
        bail!("--frames and --fps must be at least 1");
    }
    let store = Store::open(dir, StoreOptions::default())
        .with_context(|| format!("opening the store in {}", dir.display()))?;

    // Eight blocks per quota: the FIFO quota deletes whole blocks, so its precision is one
    // block (an eighth of the quota here).
    let block_size = (plan.quota / 8).max(4096);
    let settings = BucketSettings {
        quota_type: QuotaType::Fifo,
        quota_size: plan.quota,
        max_block_size: block_size,
        ..BucketSettings::default()
    };
    match store.create_bucket(BUCKET, settings) {
        Ok(_) | Err(Error::Bucket(BucketError::Exists(_))) => {}
        Err(e) => return Err(e).context("creating the bucket"),
    }

    // A second run on the same folder continues after the latest frame: records are never
    // overwritten, so reusing timestamps would be refused as conflicts.
    let base = match store.entry(BUCKET, ENTRY) {
        Ok(e) => e.latest.map_or(T0, |l| l + 1),
        Err(Error::NotFound(NotFound::Entry { .. })) => T0,
        Err(e) => return Err(e).context("looking at the entry"),
    };
    let ts_of = |seq: u64| base + seq * 1_000_000 / plan.fps;

    let started = Instant::now();
    let mut seq = 0;
    while seq < plan.frames {
        let end = (seq + plan.fps).min(plan.frames);
        let batch: Vec<BatchRecord> = (seq..end)
            .map(|i| BatchRecord {
                meta: WriteMeta {
                    ts: Some(ts_of(i)),
                    content_type: Some("image/jpeg".into()),
                    labels: labels(i, plan.fps),
                },
                data: frame(i, plan.frame_size),
            })
            .collect();
        for (i, r) in (seq..end).zip(store.write_batch(BUCKET, ENTRY, batch)?) {
            r.with_context(|| format!("writing frame {i}"))?;
        }
        seq = end;
    }
    let write_secs = started.elapsed().as_secs_f64();

    let last = plan.frames - 1;
    let latest = store.read(BUCKET, ENTRY, None)?;
    if latest.meta.ts != ts_of(last) || latest.data != frame(last, plan.frame_size) {
        bail!("the latest record is not the last frame written");
    }

    // What the FIFO quota kept: whole blocks of the oldest frames are gone.
    let info = store.bucket(BUCKET)?;
    let oldest = info.oldest.context("the bucket is empty after writing")?;
    let oldest_kept_frame = frame_label(&store.head(BUCKET, ENTRY, Some(oldest))?.labels)?;
    // On a second run the oldest record may be from the run before: then this run's frames
    // are all there.
    let first_kept = if oldest < base { 0 } else { oldest_kept_frame };

    // The last WINDOW_SECS seconds, frames with motion only.
    let first_in_window = last.saturating_sub(WINDOW_SECS * plan.fps - 1);
    let query = Query {
        start: Some(ts_of(first_in_window)),
        stop: Some(ts_of(last) + 1),
        filters: vec![LabelFilter::Eq("motion".into(), "yes".into())],
        ..Query::default()
    };
    let started = Instant::now();
    let (mut matches, mut bytes) = (0, 0);
    for item in store.query(BUCKET, ENTRY, &query)? {
        let item = item?;
        let seq = frame_label(&item.meta.labels)?;
        if item.data()? != frame(seq, plan.frame_size) {
            bail!("frame {seq} read back different bytes");
        }
        matches += 1;
        bytes += item.meta.size;
    }
    let query_secs = started.elapsed().as_secs_f64();
    let expected = expected_matches(first_in_window.max(first_kept), last, plan.fps);
    if matches != expected {
        bail!("the query found {matches} frames with motion, {expected} were written and kept");
    }

    Ok(Summary {
        written: plan.frames,
        write_secs,
        latest_ts: latest.meta.ts,
        latest_size: latest.meta.size,
        latest_labels: latest.meta.labels,
        window_secs: WINDOW_SECS,
        window_matches: matches,
        window_bytes: bytes,
        query_secs,
        records_kept: info.record_count,
        disk_bytes: info.size,
        block_size,
        evicted_blocks: info.evicted_blocks,
        oldest_kept_frame,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Writes three times the quota: the FIFO quota must have evicted the oldest blocks,
    /// kept the bucket within quota plus one block, and kept the newest frames readable.
    #[test]
    fn fifo_bucket_keeps_the_newest_frames() {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan {
            frames: 600,
            frame_size: 20_000,
            fps: 30,
            quota: 4 << 20,
        };
        let s = run(dir.path(), &plan).unwrap();
        assert_eq!(s.written, 600);
        assert!(s.evicted_blocks > 0, "{s:?}");
        assert!(s.disk_bytes <= plan.quota + s.block_size, "{s:?}");
        assert!(s.records_kept < plan.frames, "{s:?}");
        assert!(s.oldest_kept_frame > 0, "{s:?}");
        // 10 s at 30 fps (frames 300..600), one second in three with motion, less what the
        // quota evicted: about 200 frames of 20 kB fit in 4 MiB.
        let first = 300.max(s.oldest_kept_frame);
        assert!(
            first > 300,
            "the window should reach into evicted frames: {s:?}"
        );
        assert_eq!(s.window_matches, expected_matches(first, 599, 30), "{s:?}");
        assert!(s.window_matches > 0, "{s:?}");
        assert_eq!(s.window_bytes, s.window_matches * 20_000);
        assert_eq!(
            s.latest_labels.get("frame").map(String::as_str),
            Some("599")
        );

        // A second run on the same folder continues after the latest frame.
        let again = run(dir.path(), &plan).unwrap();
        assert!(again.latest_ts > s.latest_ts);
    }

    #[test]
    fn frames_are_jpeg_sized_and_stable() {
        let f = frame(7, 1000);
        assert_eq!(f.len(), 1000);
        assert_eq!(&f[..2], &[0xFF, 0xD8]);
        assert_eq!(&f[998..], &[0xFF, 0xD9]);
        assert_eq!(f, frame(7, 1000));
        assert_ne!(f, frame(8, 1000));
    }
}
