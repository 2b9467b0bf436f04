//! The phases of a run, each a pool of virtual users driving one [`Target`].
//!
//! A phase is a list of operations (a record, a batch, a query, a point read) taken in order by
//! `concurrency` workers; each operation times only its requests (payload generation and
//! verification are outside the latency), and the phase's wall-clock time gives throughput.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::stats::{Stats, Summary};
use crate::targets::{BatchRecord, Target};
use crate::workload::{
    below, mismatch, rng, Phase, SizePlan, VerificationFailed, Workload, BASE_TS, TS_STEP,
};

/// What one operation did.
#[derive(Debug, Default)]
pub struct Op {
    /// Records written or read (and verified, for reads).
    pub records: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Time spent in requests.
    pub latency: Duration,
    /// Time to first byte (reads).
    pub ttfb: Option<Duration>,
    /// Records checked against the seed.
    pub verified: u64,
    /// Records of the operation that failed (batch writes).
    pub failed: u64,
    /// Why they failed.
    pub failed_msg: Option<String>,
}

type OpFuture = Pin<Box<dyn Future<Output = Result<Op>> + Send>>;
type OpFn = Arc<dyn Fn(usize) -> OpFuture + Send + Sync>;

/// Shared by every phase of one target.
pub struct Ctx<T: Target> {
    /// The target.
    pub target: Arc<T>,
    /// Bucket of this run.
    pub bucket: Arc<str>,
    /// The workload.
    pub workload: Arc<Workload>,
    /// Progress bars.
    pub progress: MultiProgress,
}

impl<T: Target> Ctx<T> {
    fn bar(&self, label: String, len: u64) -> ProgressBar {
        let bar = self.progress.add(ProgressBar::new(len));
        let style = ProgressStyle::with_template(
            "{prefix:>40} [{bar:30}] {pos}/{len} {per_sec:>12} {elapsed:>4}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(label);
        bar
    }

    fn label(&self, phase: Phase, size: u64) -> String {
        format!(
            "{} {} {}",
            self.target.kind().name(),
            phase.name(),
            crate::workload::format_size(size)
        )
    }
}

/// Runs `n` operations with `concurrency` workers. A verification failure stops the phase and
/// is returned; any other failure is counted in the errors.
async fn pool(
    n: usize,
    concurrency: usize,
    bar: ProgressBar,
    read: bool,
    op: OpFn,
) -> Result<Summary> {
    pool_with(n, concurrency, None, bar, read, op).await
}

/// [`pool`], optionally with an `owner` per item (its entry): then worker `k` of `c` takes, in
/// order, only the items whose owner is `k` modulo `c`, so each entry has exactly one writer
/// and is written in time order, as a recorder writes a stream. (ReductStore 1.21.5 was seen
/// to acknowledge concurrent out-of-order writes into one entry and then leave some out of
/// queries: the tool reports that as a verification failure, and writes in order.)
async fn pool_with(
    n: usize,
    concurrency: usize,
    owner: Option<Arc<Vec<usize>>>,
    bar: ProgressBar,
    read: bool,
    op: OpFn,
) -> Result<Summary> {
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let start = Instant::now();
    let mut workers = Vec::new();
    let workers_n = concurrency.clamp(1, n.max(1));
    for k in 0..workers_n {
        let next = Arc::clone(&next);
        let stop = Arc::clone(&stop);
        let op = Arc::clone(&op);
        let bar = bar.clone();
        let owner = owner.clone();
        workers.push(tokio::spawn(async move {
            let mut stats = Stats::default();
            let mut mine = 0usize;
            loop {
                let i = match &owner {
                    Some(owners) => {
                        while mine < n && owners[mine] % workers_n != k {
                            mine += 1;
                        }
                        mine += 1;
                        mine - 1
                    }
                    None => next.fetch_add(1, Ordering::Relaxed),
                };
                if i >= n || stop.load(Ordering::Relaxed) {
                    break;
                }
                match op(i).await {
                    Ok(done) => {
                        stats.latency(done.latency);
                        if let Some(t) = done.ttfb {
                            stats.ttfb(t);
                        }
                        stats.records += done.records;
                        stats.bytes += done.bytes;
                        stats.verified += done.verified;
                        if done.failed > 0 {
                            stats.error(done.failed, done.failed_msg.unwrap_or_default());
                        }
                    }
                    Err(e) if e.downcast_ref::<VerificationFailed>().is_some() => {
                        // Stop the other workers too: the run is void.
                        stop.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                    Err(e) => stats.error(1, format!("{e:#}")),
                }
                bar.inc(1);
            }
            Ok(stats)
        }));
    }
    let mut total = Stats::default();
    let mut fatal = None;
    for w in workers {
        match w.await {
            Ok(Ok(stats)) => total.merge(&stats),
            Ok(Err(e)) => fatal = Some(e),
            Err(join) => fatal = Some(anyhow::anyhow!("a benchmark worker panicked: {join}")),
        }
    }
    let wall = start.elapsed();
    bar.finish();
    match fatal {
        Some(e) => Err(e),
        None => Ok(total.summary(wall, read)),
    }
}

/// Phase 1: one record per request.
pub async fn write_single<T: Target>(ctx: &Ctx<T>, plan: &Arc<SizePlan>) -> Result<Summary> {
    let (target, bucket, plan2) = (
        Arc::clone(&ctx.target),
        Arc::clone(&ctx.bucket),
        Arc::clone(plan),
    );
    let op: OpFn = Arc::new(move |i| {
        let (target, bucket, plan) = (Arc::clone(&target), Arc::clone(&bucket), Arc::clone(&plan2));
        Box::pin(async move {
            let rec = plan.record(i as u64);
            let labels = plan.labels_of(rec);
            let payload = Bytes::from(plan.payload(rec.entry, rec.ts));
            let t = Instant::now();
            target
                .write_one(
                    &bucket,
                    &plan.entry_name(rec.entry),
                    rec.ts,
                    &labels,
                    payload,
                )
                .await?;
            Ok(Op {
                records: 1,
                bytes: plan.size,
                latency: t.elapsed(),
                ..Op::default()
            })
        })
    });
    let n = plan.single as usize;
    let bar = ctx.bar(ctx.label(Phase::WriteSingle, plan.size), n as u64);
    let owners: Vec<usize> = (0..n as u64)
        .map(|i| plan.record(i).entry as usize)
        .collect();
    let writers = ctx.workload.concurrency.min(plan.entries as usize);
    pool_with(n, writers, Some(Arc::new(owners)), bar, false, op).await
}

/// The batches of phase 2: runs of consecutive records of one entry, at most `batch_size`
/// records and `batch_max_bytes` bytes (but at least one record) each, in round-robin order
/// over the entries (entry 0's first batch, entry 1's first, …, entry 0's second, …), so that
/// concurrent writers spread over the entries as independent writers would.
pub fn batches(plan: &SizePlan, batch_size: usize, max_bytes: u64) -> Vec<Vec<u64>> {
    let mut per_entry: Vec<Vec<u64>> = vec![Vec::new(); plan.entries as usize];
    for i in plan.single..plan.count {
        per_entry[plan.record(i).entry as usize].push(i);
    }
    let per_batch = (max_bytes / plan.size.max(1)).clamp(1, batch_size as u64) as usize;
    let chunked: Vec<Vec<Vec<u64>>> = per_entry
        .into_iter()
        .map(|ids| ids.chunks(per_batch).map(<[u64]>::to_vec).collect())
        .collect();
    let rounds = chunked.iter().map(Vec::len).max().unwrap_or(0);
    (0..rounds)
        .flat_map(|r| chunked.iter().filter_map(move |c| c.get(r).cloned()))
        .collect()
}

/// Phase 2: batched writes. For a target without batches the same records are loaded with
/// single writes (so reads compare equal data); the caller marks that cell n/a but still sees
/// its errors.
pub async fn write_batch<T: Target>(ctx: &Ctx<T>, plan: &Arc<SizePlan>) -> Result<Summary> {
    write_batch_with(ctx, plan).await
}

/// [`write_batch`]: `min(concurrency, entries)` writers, each writing its own entries'
/// batches in time order.
async fn write_batch_with<T: Target>(ctx: &Ctx<T>, plan: &Arc<SizePlan>) -> Result<Summary> {
    let w = &ctx.workload;
    let list = Arc::new(batches(plan, w.batch_size, w.batch_max_bytes));
    let supported = ctx.target.batch_support().is_ok();
    let (target, bucket, plan2, list2) = (
        Arc::clone(&ctx.target),
        Arc::clone(&ctx.bucket),
        Arc::clone(plan),
        Arc::clone(&list),
    );
    let op: OpFn = Arc::new(move |b| {
        let (target, bucket, plan, list) = (
            Arc::clone(&target),
            Arc::clone(&bucket),
            Arc::clone(&plan2),
            Arc::clone(&list2),
        );
        Box::pin(async move {
            let ids = &list[b];
            let first = plan.record(ids[0]);
            let records: Vec<BatchRecord> = ids
                .iter()
                .map(|&i| {
                    let rec = plan.record(i);
                    BatchRecord {
                        ts: rec.ts,
                        labels: plan.labels_of(rec),
                        payload: Bytes::from(plan.payload(rec.entry, rec.ts)),
                    }
                })
                .collect();
            let n = records.len() as u64;
            let t = Instant::now();
            let (failed, failed_msg) = target
                .write_batch(&bucket, &plan.entry_name(first.entry), records)
                .await?;
            Ok(Op {
                records: n - failed.min(n),
                bytes: (n - failed.min(n)) * plan.size,
                latency: t.elapsed(),
                failed,
                failed_msg,
                ..Op::default()
            })
        })
    });
    let mut label = ctx.label(Phase::WriteBatch, plan.size);
    // Loading through write_batch fans out to `concurrency` PUTs itself: one batch at a time.
    let concurrency = match supported {
        false => 1,
        true => w.concurrency.min(plan.entries as usize),
    };
    if !supported {
        label.push_str(" (load)");
    }
    let bar = ctx.bar(label, list.len() as u64);
    let owners: Vec<usize> = list
        .iter()
        .map(|b| plan.record(b[0]).entry as usize)
        .collect();
    let summary = pool_with(
        list.len(),
        concurrency,
        Some(Arc::new(owners)),
        bar,
        false,
        op,
    )
    .await?;
    Ok(summary)
}

/// A query window: entry, start, stop (exclusive).
type Window = (u32, u64, u64);

/// Phase 3a: one query per entry over its whole window.
pub fn whole_windows(plan: &SizePlan) -> Vec<Window> {
    (0..plan.entries)
        .filter(|&e| plan.entry_len(e) > 0)
        .map(|e| (e, BASE_TS, BASE_TS + plan.entry_len(e) * TS_STEP))
        .collect()
}

/// Phase 3b: random sub-windows, the same on every target (seeded).
pub fn sub_windows(plan: &SizePlan, count: u32, max_share: f64) -> Vec<Window> {
    let mut rng = rng(plan.seed ^ plan.size.rotate_left(17) ^ 0x5ab_5eed);
    (0..count)
        .filter_map(|_| {
            let e = below(&mut rng, u64::from(plan.entries)) as u32;
            let len = plan.entry_len(e);
            if len == 0 {
                return None;
            }
            let longest = ((len as f64 * max_share) as u64).clamp(1, len);
            let w = 1 + below(&mut rng, longest);
            let j0 = below(&mut rng, len - w + 1);
            Some((e, BASE_TS + j0 * TS_STEP, BASE_TS + (j0 + w) * TS_STEP))
        })
        .collect()
}

/// Phase 3: range reads over `windows`. Queries run `min(entries, concurrency)` at a time and
/// each may have `concurrency / that` requests in flight, so every target gets the same total
/// parallelism.
pub async fn range<T: Target>(
    ctx: &Ctx<T>,
    plan: &Arc<SizePlan>,
    phase: Phase,
    windows: Vec<Window>,
) -> Result<Summary> {
    let w = &ctx.workload;
    let queries_at_once = w.concurrency.min(plan.entries as usize).max(1);
    let per_query = (w.concurrency / queries_at_once).max(1);
    let windows = Arc::new(windows);
    let (target, bucket, plan2, windows2) = (
        Arc::clone(&ctx.target),
        Arc::clone(&ctx.bucket),
        Arc::clone(plan),
        Arc::clone(&windows),
    );
    let op: OpFn = Arc::new(move |q| {
        let (target, bucket, plan, windows) = (
            Arc::clone(&target),
            Arc::clone(&bucket),
            Arc::clone(&plan2),
            Arc::clone(&windows2),
        );
        Box::pin(async move {
            let (entry, start, stop) = windows[q];
            let t = Instant::now();
            let got = target
                .query(&bucket, &plan, entry, start, stop, per_query)
                .await?;
            let latency = t.elapsed();
            let expected = plan.expected_in(entry, start, stop);
            if got.records != expected {
                return Err(mismatch(format!(
                    "{} returned {} records of {} in [{start}, {stop}), {expected} were written",
                    target.kind().name(),
                    got.records,
                    plan.entry_name(entry)
                )));
            }
            Ok(Op {
                records: got.records,
                bytes: got.bytes,
                latency,
                ttfb: got.ttfb,
                verified: got.records,
                ..Op::default()
            })
        })
    });
    let bar = ctx.bar(ctx.label(phase, plan.size), windows.len() as u64);
    pool(windows.len(), queries_at_once, bar, true, op).await
}

/// Phase 3c: one query per window with the plan's label condition (`when`); the target must
/// return exactly the matching records, in order (their bytes verified as in phase 3).
pub async fn range_when<T: Target>(
    ctx: &Ctx<T>,
    plan: &Arc<SizePlan>,
    windows: Vec<Window>,
) -> Result<Summary> {
    let w = &ctx.workload;
    let queries_at_once = w.concurrency.min(plan.entries as usize).max(1);
    let windows = Arc::new(windows);
    let (target, bucket, plan2, windows2) = (
        Arc::clone(&ctx.target),
        Arc::clone(&ctx.bucket),
        Arc::clone(plan),
        Arc::clone(&windows),
    );
    let op: OpFn = Arc::new(move |q| {
        let (target, bucket, plan, windows) = (
            Arc::clone(&target),
            Arc::clone(&bucket),
            Arc::clone(&plan2),
            Arc::clone(&windows2),
        );
        Box::pin(async move {
            let (entry, start, stop) = windows[q];
            let when = plan.when_condition(entry);
            let t = Instant::now();
            let (got, seen) = target
                .query_when(&bucket, &plan, entry, start, stop, &when)
                .await?;
            let latency = t.elapsed();
            let expected = plan.when_expected(entry, start, stop);
            if seen != expected {
                return Err(mismatch(format!(
                    "{} returned {} records of {} for when={when} in [{start}, {stop}), {} match \
                     (first returned {:?}, first expected {:?})",
                    target.kind().name(),
                    seen.len(),
                    plan.entry_name(entry),
                    expected.len(),
                    seen.first(),
                    expected.first()
                )));
            }
            Ok(Op {
                records: got.records,
                bytes: got.bytes,
                latency,
                ttfb: got.ttfb,
                verified: got.records,
                ..Op::default()
            })
        })
    });
    let bar = ctx.bar(ctx.label(Phase::RangeWhen, plan.size), windows.len() as u64);
    pool(windows.len(), queries_at_once, bar, true, op).await
}

/// Phase 4: random point reads.
pub async fn point_reads<T: Target>(ctx: &Ctx<T>, plan: &Arc<SizePlan>) -> Result<Summary> {
    let n = ctx.workload.scaled_point_reads();
    let mut rng = rng(plan.seed ^ plan.size.rotate_left(29) ^ 0x9017);
    let picks: Arc<Vec<u64>> = Arc::new((0..n).map(|_| below(&mut rng, plan.count)).collect());
    let (target, bucket, plan2, picks2) = (
        Arc::clone(&ctx.target),
        Arc::clone(&ctx.bucket),
        Arc::clone(plan),
        Arc::clone(&picks),
    );
    let op: OpFn = Arc::new(move |k| {
        let (target, bucket, plan, picks) = (
            Arc::clone(&target),
            Arc::clone(&bucket),
            Arc::clone(&plan2),
            Arc::clone(&picks2),
        );
        Box::pin(async move {
            let rec = plan.record(picks[k]);
            let t = Instant::now();
            let got = target
                .read_point(&bucket, &plan.entry_name(rec.entry), rec.ts)
                .await?;
            let latency = t.elapsed();
            plan.verify(rec.entry, rec.ts, &got.payload, Some(&got.labels))?;
            Ok(Op {
                records: 1,
                bytes: got.payload.len() as u64,
                latency,
                ttfb: Some(got.ttfb),
                verified: 1,
                ..Op::default()
            })
        })
    });
    let bar = ctx.bar(ctx.label(Phase::PointRead, plan.size), n);
    pool(n as usize, ctx.workload.concurrency, bar, true, op).await
}

/// Phase 5: batched writes into a FIFO bucket well past its quota, one writer per entry (a
/// recorder keeps one stream per sensor). Answers the measurements,
/// the bucket's final size and whether it stayed within quota plus one block.
pub async fn fifo<T: Target>(ctx: &Ctx<T>, fifo_bucket: &str) -> Result<(Summary, u64, bool)> {
    let w = &ctx.workload;
    let spec = &w.fifo;
    let count = (w.fifo_bytes() / spec.record_size.max(1)).max(1);
    let plan = Arc::new(SizePlan {
        seed: w.seed ^ 0xf1f0,
        size: spec.record_size,
        count,
        single: 0,
        entries: w.entries,
        labels: w.labels,
    });
    let sub = Ctx {
        target: Arc::clone(&ctx.target),
        bucket: Arc::from(fifo_bucket),
        workload: Arc::clone(&ctx.workload),
        progress: ctx.progress.clone(),
    };
    let summary = write_batch_with(&sub, &plan).await?;
    let size = ctx.target.bucket_size(fifo_bucket).await?;
    let held = size <= spec.quota_bytes + spec.block_bytes;
    Ok((summary, size, held))
}
