//! Running operations against the engine (public API only), timing them, and the watchdog:
//! lanes run on their own threads and report each acknowledged operation over a channel; an
//! operation that does not finish within the bound is a hang, reported with its lane and op.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};
use tsblob_storage::*;

use super::generate::{Op, Rec};
use super::state::{attachment_doc, attachment_version, fingerprint, payload, Obs, Span};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrKind {
    NotFound,
    Conflict,
    Quota,
    Length,
    Exists,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// The error's kind, and its message (not carried across a kill).
    Err(ErrKind, String),
    Batch(Vec<Result<(), ErrKind>>),
    Found(Obs),
    /// A query's items in order: `None` when the payload was gone by the time it was read.
    List(Vec<(u64, Option<Obs>)>),
    Count(u64),
    Info {
        size: u64,
        records: u64,
    },
    /// An entry's attachments: (name, version; `u32::MAX` for bytes no write produced).
    Attached(Vec<(String, u32)>),
}

pub fn kind(e: &Error) -> ErrKind {
    match e {
        Error::NotFound(_) => ErrKind::NotFound,
        Error::Write(WriteError::Conflict { .. }) => ErrKind::Conflict,
        Error::Write(WriteError::QuotaExceeded { .. } | WriteError::LargerThanQuota { .. }) => {
            ErrKind::Quota
        }
        Error::Write(WriteError::LengthMismatch { .. }) => ErrKind::Length,
        Error::Bucket(BucketError::Exists(_)) => ErrKind::Exists,
        Error::Rename(RenameError::EntryExists { .. }) => ErrKind::Exists,
        _ => ErrKind::Other,
    }
}

fn err(e: Error) -> Outcome {
    Outcome::Err(kind(&e), e.to_string())
}

fn meta_of(r: &Rec) -> WriteMeta {
    WriteMeta {
        ts: Some(r.ts),
        content_type: Some(r.ct.clone()),
        labels: r.labels.clone(),
    }
}

pub fn parse_filter(f: &str) -> LabelFilter {
    if let Some(k) = f.strip_prefix('!') {
        LabelFilter::Missing(k.into())
    } else if let Some((k, v)) = f.split_once('=') {
        LabelFilter::Eq(k.into(), v.into())
    } else {
        LabelFilter::Has(f.into())
    }
}

/// A reader that hands out small chunks, sleeping between them when `slow`.
struct Chunks {
    data: Vec<u8>,
    pos: usize,
    slow: bool,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.slow {
            std::thread::sleep(Duration::from_millis(4));
        }
        let n = buf.len().min(4096).min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fn wrote(ts: std::result::Result<u64, Error>, want: u64) -> Outcome {
    match ts {
        Ok(got) if got == want => Outcome::Done,
        Ok(got) => Outcome::Err(
            ErrKind::Other,
            format!("asked for ts {want}, the engine used {got}"),
        ),
        Err(e) => err(e),
    }
}

pub fn exec(s: &Store, op: &Op) -> Outcome {
    match op {
        Op::Write { b, e, rec } => wrote(
            s.write(b, e, &meta_of(rec), &payload(e, rec.ts, rec.ver, rec.len)),
            rec.ts,
        ),
        Op::Batch { b, e, recs } => {
            let batch: Vec<BatchRecord> = recs
                .iter()
                .map(|r| BatchRecord {
                    meta: meta_of(r),
                    data: payload(e, r.ts, r.ver, r.len),
                })
                .collect();
            match s.write_batch(b, e, batch) {
                Ok(res) => Outcome::Batch(
                    res.iter()
                        .zip(recs)
                        .map(|(r, rec)| match r {
                            Ok(ts) if *ts == rec.ts => Ok(()),
                            Ok(_) => Err(ErrKind::Other),
                            Err(e) => Err(kind(e)),
                        })
                        .collect(),
                ),
                Err(e) => err(e),
            }
        }
        Op::Stream {
            b,
            e,
            rec,
            announce,
            slow,
        } => {
            let mut r = Chunks {
                data: payload(e, rec.ts, rec.ver, rec.len),
                pos: 0,
                slow: *slow,
            };
            wrote(
                s.write_stream(b, e, &meta_of(rec), &mut r, *announce),
                rec.ts,
            )
        }
        Op::Patch {
            b,
            e,
            ts,
            set,
            remove,
        } => match s.update_labels(b, e, *ts, set, remove) {
            Ok(_) => Outcome::Done,
            Err(e) => err(e),
        },
        Op::RemoveRecord { b, e, ts } => s
            .remove_record(b, e, *ts)
            .map_or_else(err, |_| Outcome::Done),
        Op::RemoveRange { b, e, start, stop } => s
            .remove_range(b, e, *start, *stop)
            .map_or_else(err, Outcome::Count),
        Op::Lifecycle { b, e, stop, .. } => {
            // Disabled: the background would run it with the clock.
            let rule = LifecycleRule {
                entries: vec![e.clone()],
                mode: LifecycleMode::Disabled,
                ..LifecycleRule::new(&format!("lc-{}", e.replace('/', "-")), 1_000_000)
            };
            // Removed first: a rule set again unchanged keeps where it resumes, and each op
            // runs a fresh one (its cutoff may be behind the last one's).
            let _ = s.remove_lifecycle_rule(b, &rule.name);
            match s.set_lifecycle_rule(b, rule.clone()) {
                Ok(_) => s
                    .run_lifecycle(b, &rule.name, stop + rule.older_than, u64::MAX)
                    .map_or_else(err, |p| Outcome::Count(p.removed)),
                Err(e) => err(e),
            }
        }
        Op::Compress { b, e, stop } => {
            let rule = LifecycleRule {
                entries: vec![e.clone()],
                mode: LifecycleMode::Disabled,
                action: LifecycleAction::Compress,
                ..LifecycleRule::new(&format!("cz-{}", e.replace('/', "-")), 1_000_000)
            };
            let _ = s.remove_lifecycle_rule(b, &rule.name);
            match s.set_lifecycle_rule(b, rule.clone()) {
                Ok(_) => s
                    .run_lifecycle(b, &rule.name, stop + rule.older_than, u64::MAX)
                    .map_or_else(err, |p| Outcome::Count(p.compressed)),
                Err(e) => err(e),
            }
        }
        Op::RemoveEntry { b, e } => s.remove_entry(b, e).map_or_else(err, |_| Outcome::Done),
        Op::RenameEntry { b, e, via } => match s.rename_entry(b, e, via) {
            Ok(_) => s
                .rename_entry(b, via, e)
                .map_or_else(err, |_| Outcome::Done),
            Err(e) => err(e),
        },
        Op::CreateBucket { b, settings } => s
            .create_bucket(b, settings.clone())
            .map_or_else(err, |_| Outcome::Done),
        Op::RemoveBucket { b } => s.remove_bucket(b).map_or_else(err, |_| Outcome::Done),
        Op::UpdateBucket { b, update } => s
            .update_bucket(b, update)
            .map_or_else(err, |_| Outcome::Done),
        Op::Read { b, e, ts } => match s.read(b, e, Some(*ts)) {
            Ok(r) => Outcome::Found(Obs {
                fp: Some(fingerprint(&r.data)),
                len: r.data.len() as u64,
                ct: r.meta.content_type,
                labels: r.meta.labels,
            }),
            Err(e) => err(e),
        },
        Op::Head { b, e, ts } => match s.head(b, e, Some(*ts)) {
            Ok(m) => Outcome::Found(Obs {
                fp: None,
                len: m.size,
                ct: m.content_type,
                labels: m.labels,
            }),
            Err(e) => err(e),
        },
        Op::Query {
            b,
            e,
            start,
            stop,
            limit,
            desc,
            filter,
        } => {
            let q = Query {
                start: Some(*start),
                stop: Some(*stop),
                limit: *limit,
                filters: filter.iter().map(|f| parse_filter(f)).collect(),
                descending: *desc,
                ..Query::default()
            };
            let iter = match s.query(b, e, &q) {
                Ok(i) => i,
                Err(e) => return err(e),
            };
            let mut items = Vec::new();
            for item in iter {
                let item = match item {
                    Ok(i) => i,
                    Err(e) => return err(e),
                };
                let obs = match item.data() {
                    Ok(d) => Some(Obs {
                        fp: Some(fingerprint(&d)),
                        len: d.len() as u64,
                        ct: item.meta.content_type.clone(),
                        labels: item.meta.labels.clone(),
                    }),
                    Err(Error::NotFound(_)) => None,
                    Err(e) => return err(e),
                };
                items.push((item.meta.ts, obs));
            }
            Outcome::List(items)
        }
        Op::BucketInfo { b } => match s.bucket(b) {
            Ok(i) => Outcome::Info {
                size: i.size,
                records: i.record_count,
            },
            Err(e) => err(e),
        },
        Op::ListEntries { b } => s.list_entries(b).map_or_else(err, |_| Outcome::Done),
        Op::Stats => {
            s.stats();
            Outcome::Done
        }
        Op::Sleep(d) => {
            std::thread::sleep(*d);
            Outcome::Done
        }
        Op::PutAttachments { b, e, docs } => {
            let docs = docs
                .iter()
                .map(|(n, v)| (n.clone(), attachment_doc(e, n, *v)))
                .collect();
            s.write_attachments(b, e, docs)
                .map_or_else(err, |_| Outcome::Done)
        }
        Op::ReadAttachments { b, e } => match s.attachments(b, e) {
            Ok(list) => Outcome::Attached(
                list.into_iter()
                    .map(|a| {
                        let v = attachment_version(e, &a.name, &a.data);
                        (a.name, v)
                    })
                    .collect(),
            ),
            Err(e) => err(e),
        },
        Op::RemoveAttachments { b, e, names } => s
            .remove_attachments(b, e, names.as_deref())
            .map_or_else(err, |r| Outcome::Count(r.len() as u64)),
    }
}

/// An operation that did not finish within the bound.
#[derive(Debug)]
pub struct Hang {
    pub lane: usize,
    pub idx: usize,
    pub op: String,
    pub waited: Duration,
}

pub type Results = Vec<Vec<Option<(Outcome, Span)>>>;

/// Runs lanes at once (released together by a barrier) and returns every outcome. `on_ack`
/// sees each acknowledged operation as soon as its lane reports it. A lane stuck in one
/// operation longer than `bound` makes this return the hang; its threads are left behind.
pub fn run_lanes(
    s: &Store,
    lanes: &[Vec<Op>],
    seq: &Arc<AtomicU64>,
    bound: Duration,
    on_ack: &mut dyn FnMut(usize, usize, &Outcome, Span),
) -> Result<Results, Hang> {
    let (tx, rx) = mpsc::channel::<(usize, usize, Outcome, Span)>();
    // Per lane: the operation in progress and when it started.
    type Current = Arc<Mutex<Vec<Option<(usize, Instant)>>>>;
    let current: Current = Arc::new(Mutex::new(vec![None; lanes.len()]));
    let barrier = Arc::new(Barrier::new(lanes.len()));
    for (l, ops) in lanes.iter().enumerate() {
        let (s, ops, tx, seq, current, barrier) = (
            s.clone(),
            ops.clone(),
            tx.clone(),
            seq.clone(),
            current.clone(),
            barrier.clone(),
        );
        std::thread::spawn(move || {
            barrier.wait();
            for (i, op) in ops.iter().enumerate() {
                if let Ok(mut c) = current.lock() {
                    c[l] = Some((i, Instant::now()));
                }
                let start = seq.fetch_add(1, Ordering::SeqCst);
                let out = exec(&s, op);
                let end = seq.fetch_add(1, Ordering::SeqCst);
                if let Ok(mut c) = current.lock() {
                    c[l] = None;
                }
                if tx.send((l, i, out, Span { start, end })).is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    let mut results: Results = lanes.iter().map(|ops| vec![None; ops.len()]).collect();
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok((l, i, out, span)) => {
                on_ack(l, i, &out, span);
                results[l][i] = Some((out, span));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(results),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let stuck = current.lock().ok().and_then(|c| {
            c.iter().enumerate().find_map(|(l, cur)| {
                cur.filter(|(_, t)| t.elapsed() > bound)
                    .map(|(i, t)| (l, i, t.elapsed()))
            })
        });
        if let Some((lane, idx, waited)) = stuck {
            return Err(Hang {
                lane,
                idx,
                op: format!("{:?}", lanes[lane][idx]),
                waited,
            });
        }
    }
}
