//! The seeded generator: a history is a store configuration and a list of segments; a
//! segment is some setup operations run in order, then 2-4 lanes (threads) run at once.
//!
//! In an ordinary segment every lane works on records it owns (its own timestamp range)
//! inside buckets and entries all lanes share, so entry- and bucket-level concurrency is
//! real while each record's fate stays predictable. A contention segment makes lanes race
//! on the same records or entry on purpose.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::time::Duration;
use tsblob_storage::{
    BucketSettings, BucketSettingsUpdate, Compression, Labels, QuotaType, SyncPolicy,
};

pub const PLAIN: &str = "plain";
pub const FIFO: &str = "fifo";
pub const HARD: &str = "hard";
pub const RACE: &str = "race";
pub const TMP: &str = "tmp";
/// Where lanes write their entries out of time order (see [`LanePlan::backfill`]).
pub const BACKFILL: &str = "backfill";
pub const SHARED: [&str; 3] = ["e0", "e1", "e2"];
pub const CTS: [&str; 3] = ["application/octet-stream", "text/plain", "image/jpeg"];
/// Timestamps of contention records start here (lanes own `[(l+1)·10⁹, (l+2)·10⁹)`).
pub const RACE_TS: u64 = 9_000_000_000;

#[derive(Debug, Clone)]
pub struct Rec {
    pub ts: u64,
    pub ver: u32,
    pub len: u32,
    pub ct: String,
    pub labels: Labels,
}

#[derive(Debug, Clone)]
pub enum Op {
    Write {
        b: String,
        e: String,
        rec: Rec,
    },
    Batch {
        b: String,
        e: String,
        recs: Vec<Rec>,
    },
    /// `announce`: the length given to `write_stream` (wrong on purpose sometimes);
    /// `slow`: the reader sleeps between chunks.
    Stream {
        b: String,
        e: String,
        rec: Rec,
        announce: Option<u64>,
        slow: bool,
    },
    Patch {
        b: String,
        e: String,
        ts: u64,
        set: Labels,
        remove: Vec<String>,
    },
    RemoveRecord {
        b: String,
        e: String,
        ts: u64,
    },
    RemoveRange {
        b: String,
        e: String,
        start: u64,
        stop: u64,
    },
    /// A lifecycle rule on the lane's own entry `e` (no `when`: whole blocks, then record
    /// by record), run once (`Store::run_lifecycle`) with a clock that puts its cutoff at
    /// `stop`: it removes what a range removal of `[start, stop)` does (`start` is 0).
    Lifecycle {
        b: String,
        e: String,
        start: u64,
        stop: u64,
    },
    /// A compress lifecycle rule on the lane's own entry `e`, run once with a clock that puts
    /// its cutoff at `stop`: no record changes (reads check the bytes afterwards), killed
    /// half-way each is raw or compressed.
    Compress {
        b: String,
        e: String,
        stop: u64,
    },
    RemoveEntry {
        b: String,
        e: String,
    },
    /// Renames the lane's own entry `e` to `via` and back (`Store::rename_entry` twice):
    /// its records must read back the same; killed half-way, they are under `via`.
    RenameEntry {
        b: String,
        e: String,
        via: String,
    },
    CreateBucket {
        b: String,
        settings: BucketSettings,
    },
    RemoveBucket {
        b: String,
    },
    UpdateBucket {
        b: String,
        update: BucketSettingsUpdate,
    },
    Read {
        b: String,
        e: String,
        ts: u64,
    },
    Head {
        b: String,
        e: String,
        ts: u64,
    },
    /// A label filter `key=value` (Eq), `key` (Has) or `!key` (Missing).
    Query {
        b: String,
        e: String,
        start: u64,
        stop: u64,
        limit: Option<u64>,
        desc: bool,
        filter: Option<String>,
    },
    BucketInfo {
        b: String,
    },
    ListEntries {
        b: String,
    },
    Stats,
    Sleep(Duration),
    /// `Store::write_attachments`: (name, version) pairs, written all or none.
    PutAttachments {
        b: String,
        e: String,
        docs: Vec<(String, u32)>,
    },
    /// `Store::attachments`: every attachment of the entry.
    ReadAttachments {
        b: String,
        e: String,
    },
    /// `Store::remove_attachments`: those named, or (`None`, the lane's own entry only)
    /// every one.
    RemoveAttachments {
        b: String,
        e: String,
        names: Option<Vec<String>>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Race {
    /// Two `update_labels` of one record whose neighbours share its block.
    PatchPatch,
    /// `update_labels` racing `remove_record` of the same record.
    PatchDelete,
    /// Writes into an entry racing `remove_entry` of it.
    WriteRemoveEntry,
    /// Writes into a bucket racing `remove_bucket`.
    WriteRemoveBucket,
    /// `stats()` racing `remove_entry` while a slow stream holds another entry.
    StatsRemoveStream,
    /// Two `write_attachments` of one attachment name (and one other name each) in one
    /// entry, one of them with a `remove_attachments` after it: one write wins, nothing of
    /// the other's names is lost.
    AttachAttach,
}

#[derive(Debug, Clone)]
pub struct Segment {
    pub race: Option<Race>,
    pub setup: Vec<Op>,
    pub lanes: Vec<Vec<Op>>,
}

#[derive(Debug, Clone)]
pub struct History {
    pub seed: u64,
    pub buckets: Vec<(String, BucketSettings)>,
    pub sync: SyncPolicy,
    pub segments: Vec<Segment>,
}

pub fn initial_buckets(rng: &mut StdRng) -> Vec<(String, BucketSettings)> {
    let small = |rng: &mut StdRng, q: QuotaType, quota: u64| BucketSettings {
        quota_type: q,
        quota_size: quota,
        max_block_size: rng.random_range(4096..48 << 10),
        max_block_records: rng.random_range(2..8),
        compression: if rng.random_bool(0.3) {
            Compression::Zstd { level: 1 }
        } else {
            Compression::None
        },
        // Retention deletes by the clock, which the model does not follow: tested apart
        // (storage/tests/integrity.rs, retention_*).
        max_age: None,
        // Tiering needs an object store: tested against MinIO (server/tests/tier.rs).
        ..BucketSettings::default()
    };
    let fifo_quota = rng.random_range(96 << 10..320 << 10);
    let hard_quota = rng.random_range(96 << 10..320 << 10);
    vec![
        (PLAIN.into(), small(rng, QuotaType::None, 0)),
        (FIFO.into(), small(rng, QuotaType::Fifo, fifo_quota)),
        (HARD.into(), small(rng, QuotaType::Hard, hard_quota)),
        (
            RACE.into(),
            BucketSettings {
                max_block_records: 2,
                max_block_size: 64 << 10,
                ..BucketSettings::default()
            },
        ),
    ]
}

/// What a lane believes about its own records, to aim its operations (outcomes may differ:
/// the checker decides what is allowed, the generator never looks at results).
struct LanePlan {
    lane: usize,
    next_ts: u64,
    /// (bucket, entry) → own timestamps → next version number.
    own: BTreeMap<(String, String), BTreeMap<u64, u32>>,
    /// Backfill slots not yet written (see [`LanePlan::backfill`]).
    free_slots: Vec<u64>,
}

/// Backfill slots per lane: slot `s` holds timestamps from `lane base + BACKFILL_AT +
/// s·1000`, far above the lane's ordinary records (which advance by < 20 per record).
const BACKFILL_SLOTS: u64 = 48;
const BACKFILL_AT: u64 = 500_000_000;

fn labels(rng: &mut StdRng) -> Labels {
    (0..rng.random_range(0..3))
        .map(|_| {
            (
                format!("k{}", rng.random_range(0..3)),
                format!("v{}", rng.random_range(0..4)),
            )
        })
        .collect()
}

fn payload_len(rng: &mut StdRng) -> u32 {
    match rng.random_range(0..100) {
        0..=2 => rng.random_range(80_000..120_000),
        3..=20 => rng.random_range(4096..20_000),
        _ => rng.random_range(0..4096),
    }
}

impl LanePlan {
    /// A batch of 1–130 consecutive timestamps in one of the lane's backfill slots, taken
    /// in a random order, into the lane's own entry `o<lane>`: an entry written out of time
    /// order, whose merges land below its first index chunk and split it into chunks of up
    /// to 64 records. The ordinary ops write each entry mostly in time order, in blocks of
    /// 2–7 records, and never produced that shape; bug "a re-keyed chunk's unchanged
    /// successor was skipped after its delete" (acknowledged records left the index) needed
    /// exactly it. `None` when every slot is taken. Mostly in [`BACKFILL`], a bucket of
    /// larger blocks (the index is what this exercises; blocks of 2–7 records would make
    /// each batch dozens of files).
    fn backfill(&mut self, rng: &mut StdRng) -> Option<Op> {
        let b = [BACKFILL, BACKFILL, PLAIN][rng.random_range(0..3)].to_string();
        let e = format!("o{}", self.lane);
        if self.free_slots.is_empty() {
            return None;
        }
        let slot = self
            .free_slots
            .swap_remove(rng.random_range(0..self.free_slots.len()));
        let start = (self.lane as u64 + 1) * 1_000_000_000 + BACKFILL_AT + slot * 1000;
        let own = self.own.entry((b.clone(), e.clone())).or_default();
        let recs = (start..start + rng.random_range(1..=130))
            .map(|ts| {
                own.insert(ts, 1);
                Rec {
                    ts,
                    ver: 1,
                    len: rng.random_range(0..200),
                    ct: CTS[0].into(),
                    labels: Labels::new(),
                }
            })
            .collect();
        Some(Op::Batch { b, e, recs })
    }

    /// A change to records of the lane's backfilled entry: a removal of a range from one of
    /// them, of one record, or a label update of one (which moves its frame to a new block:
    /// an index put over a record inside a chunk). `None` before any backfill.
    fn backfill_change(&mut self, rng: &mut StdRng) -> Option<Op> {
        let e = format!("o{}", self.lane);
        let keys: Vec<(String, String)> = self
            .own
            .iter()
            .filter(|((_, oe), ts)| *oe == e && !ts.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        if keys.is_empty() {
            return None;
        }
        let key = &keys[rng.random_range(0..keys.len())];
        let own = self.own.get_mut(key)?;
        let b = key.0.clone();
        let ts = *own.keys().nth(rng.random_range(0..own.len()))?;
        Some(match rng.random_range(0..3) {
            0 => {
                let stop = ts + rng.random_range(1..90);
                own.retain(|t, _| *t < ts || *t >= stop);
                Op::RemoveRange {
                    b,
                    e,
                    start: ts,
                    stop,
                }
            }
            1 => {
                own.remove(&ts);
                Op::RemoveRecord { b, e, ts }
            }
            _ => Op::Patch {
                b,
                e,
                ts,
                set: labels(rng),
                remove: vec![],
            },
        })
    }

    fn new_rec(&mut self, rng: &mut StdRng, b: &str, e: &str) -> Rec {
        self.next_ts += rng.random_range(1..20);
        let ts = self.next_ts;
        self.own
            .entry((b.into(), e.into()))
            .or_default()
            .insert(ts, 1);
        Rec {
            ts,
            // every fourth version compresses well: a compress rule has work
            ver: if rng.random_bool(0.25) { 4 } else { 1 },
            len: payload_len(rng),
            ct: CTS[rng.random_range(0..3)].into(),
            labels: labels(rng),
        }
    }

    /// An own timestamp of (b, e), or (sometimes) one that was never written.
    fn pick(&mut self, rng: &mut StdRng, b: &str, e: &str) -> u64 {
        let own = self.own.entry((b.into(), e.into())).or_default();
        if own.is_empty() || rng.random_bool(0.1) {
            return self.next_ts + 7;
        }
        let i = rng.random_range(0..own.len());
        *own.keys().nth(i).unwrap_or(&0)
    }

    fn op(&mut self, rng: &mut StdRng) -> Op {
        let b = [PLAIN, PLAIN, FIFO, HARD][rng.random_range(0..4)].to_string();
        let e = if rng.random_bool(0.15) {
            format!("p{}", self.lane)
        } else {
            SHARED[rng.random_range(0..3)].to_string()
        };
        let base = (self.lane as u64 + 1) * 1_000_000_000;
        match rng.random_range(0..100) {
            0..=24 => Op::Write {
                rec: self.new_rec(rng, &b, &e),
                b,
                e,
            },
            25..=32 => {
                let mut recs: Vec<Rec> = (0..rng.random_range(2..6))
                    .map(|_| self.new_rec(rng, &b, &e))
                    .collect();
                if rng.random_bool(0.3) {
                    // a timestamp that may exist already: that record alone is a conflict
                    let ts = self.pick(rng, &b, &e);
                    recs.push(Rec {
                        ts,
                        ver: 99,
                        len: 10,
                        ct: CTS[0].into(),
                        labels: Labels::new(),
                    });
                }
                Op::Batch { b, e, recs }
            }
            33..=39 => {
                let mut rec = self.new_rec(rng, &b, &e);
                let announce = match rng.random_range(0..4) {
                    0 => None,
                    1 => Some(rec.len as u64 + rng.random_range(1..3)),
                    2 if rec.len > 0 => Some(rec.len as u64 - 1),
                    _ => Some(rec.len as u64),
                };
                if announce.is_some_and(|a| a != rec.len as u64) {
                    // a failed stream stores nothing: the plan forgets it
                    if let Some(own) = self.own.get_mut(&(b.clone(), e.clone())) {
                        own.remove(&rec.ts);
                    }
                }
                if rng.random_bool(0.3) {
                    rec.len = rng.random_range(70_000..140_000);
                }
                Op::Stream {
                    b,
                    e,
                    rec,
                    announce,
                    slow: rng.random_bool(0.2),
                }
            }
            40..=47 => {
                let ts = self.pick(rng, &b, &e);
                let set = labels(rng);
                let remove = if rng.random_bool(0.3) {
                    vec![format!("k{}", rng.random_range(0..3))]
                } else {
                    vec![]
                };
                Op::Patch {
                    b,
                    e,
                    ts,
                    set,
                    remove,
                }
            }
            48..=53 => {
                let ts = self.pick(rng, &b, &e);
                if let Some(o) = self.own.get_mut(&(b.clone(), e.clone())) {
                    o.remove(&ts);
                }
                Op::RemoveRecord { b, e, ts }
            }
            56 => {
                let e = format!("p{}", self.lane);
                let stop = self.pick(rng, &b, &e).max(base) + rng.random_range(0..40);
                if let Some(o) = self.own.get_mut(&(b.clone(), e.clone())) {
                    o.retain(|ts, _| *ts >= stop);
                }
                Op::Lifecycle {
                    b,
                    e,
                    start: 0,
                    stop,
                }
            }
            55 => {
                let e = format!("p{}", self.lane);
                let stop = self.pick(rng, &b, &e).max(base) + rng.random_range(0..40);
                Op::Compress { b, e, stop }
            }
            54 => {
                let start = self.pick(rng, &b, &e).max(base);
                let stop = start + rng.random_range(1..60);
                if let Some(o) = self.own.get_mut(&(b.clone(), e.clone())) {
                    o.retain(|ts, _| *ts < start || *ts >= stop);
                }
                Op::RemoveRange { b, e, start, stop }
            }
            57..=58 => {
                let e = format!("p{}", self.lane);
                self.own.remove(&(b.clone(), e.clone()));
                Op::RemoveEntry { b, e }
            }
            59..=72 => Op::Read {
                ts: self.pick(rng, &b, &e),
                b,
                e,
            },
            73..=78 => Op::Head {
                ts: self.pick(rng, &b, &e),
                b,
                e,
            },
            79..=90 => {
                let (start, stop) = if rng.random_bool(0.5) {
                    (0, u64::MAX)
                } else {
                    (base, base + rng.random_range(50..400))
                };
                let filter = match rng.random_range(0..6) {
                    0 => Some(format!(
                        "k{}=v{}",
                        rng.random_range(0..3),
                        rng.random_range(0..4)
                    )),
                    1 => Some(format!("k{}", rng.random_range(0..3))),
                    2 => Some(format!("!k{}", rng.random_range(0..3))),
                    _ => None,
                };
                let limit = rng.random_bool(0.2).then(|| rng.random_range(1..10));
                Op::Query {
                    b,
                    e,
                    start,
                    stop,
                    limit,
                    desc: rng.random_bool(0.3),
                    filter,
                }
            }
            91 => Op::BucketInfo { b },
            92..=94 => self.attachment_op(rng, b, e),
            95 => Op::ListEntries { b },
            96..=97 => {
                // the lane's own entry, in a bucket where it has records if there is one
                let e = format!("p{}", self.lane);
                let b = self
                    .own
                    .iter()
                    .find(|((_, oe), ts)| *oe == e && !ts.is_empty())
                    .map_or(b, |((ob, _), _)| ob.clone());
                let via = format!("{e}-renamed");
                Op::RenameEntry { b, e, via }
            }
            _ if self.lane == 0 => {
                // settings of the quota buckets change under the other lanes' writes
                let b = [FIFO, HARD][rng.random_range(0..2)].to_string();
                let update = BucketSettingsUpdate {
                    quota_type: rng.random_bool(0.5).then(|| {
                        [QuotaType::None, QuotaType::Fifo, QuotaType::Hard][rng.random_range(0..3)]
                    }),
                    quota_size: Some(rng.random_range(64 << 10..320 << 10)),
                    max_block_size: rng
                        .random_bool(0.3)
                        .then(|| rng.random_range(4096..64 << 10)),
                    max_block_records: rng.random_bool(0.3).then(|| rng.random_range(1..8)),
                    compression: None,
                    max_age: None,
                    ..BucketSettingsUpdate::default()
                };
                Op::UpdateBucket { b, update }
            }
            _ => Op::Stats,
        }
    }
}

impl LanePlan {
    /// An attachment operation on names the lane owns (`a<lane>-<k>`).
    fn attachment_op(&mut self, rng: &mut StdRng, b: String, e: String) -> Op {
        let name = |rng: &mut StdRng, lane: usize| format!("a{lane}-{}", rng.random_range(0..3));
        match rng.random_range(0..10) {
            0..=4 => {
                let docs = (0..rng.random_range(1..3))
                    .map(|_| (name(rng, self.lane), rng.random_range(1..1000)))
                    .collect();
                Op::PutAttachments { b, e, docs }
            }
            5..=7 => Op::ReadAttachments { b, e },
            _ => {
                let own = e == format!("p{}", self.lane);
                let names = if own && rng.random_bool(0.4) {
                    None
                } else {
                    Some(
                        (0..rng.random_range(1..3))
                            .map(|_| name(rng, self.lane))
                            .collect(),
                    )
                };
                Op::RemoveAttachments { b, e, names }
            }
        }
    }
}

fn race_rec(ts: u64, ver: u32, rng: &mut StdRng) -> Rec {
    Rec {
        ts,
        ver,
        len: rng.random_range(10..3000),
        ct: CTS[1].into(),
        labels: labels(rng),
    }
}

fn race_segment(rng: &mut StdRng, idx: usize, tmp_exists: &mut bool) -> Segment {
    let race = match rng.random_range(0..46) {
        0..=11 => Race::PatchPatch,
        12..=23 => Race::PatchDelete,
        24..=31 => Race::WriteRemoveEntry,
        32..=38 => Race::WriteRemoveBucket,
        39..=44 => Race::AttachAttach,
        _ => Race::StatsRemoveStream,
    };
    let entry = format!("r{idx}");
    let (b, e) = (RACE.to_string(), entry.clone());
    let t = RACE_TS;
    let write = |rec: Rec, b: &str, e: &str| Op::Write {
        b: b.into(),
        e: e.into(),
        rec,
    };
    let mut setup: Vec<Op> = (1..=3)
        .map(|i| write(race_rec(t + i, 1, rng), &b, &e))
        .collect();
    let lanes = match race {
        Race::PatchPatch => {
            let patch = |rng: &mut StdRng, k: &str| Op::Patch {
                b: b.clone(),
                e: e.clone(),
                ts: t + 2,
                set: [(k.to_string(), format!("v{}", rng.random_range(0..4)))].into(),
                remove: vec![],
            };
            let k2 = if rng.random_bool(0.5) { "x" } else { "y" };
            vec![vec![patch(rng, "x")], vec![patch(rng, k2)]]
        }
        Race::PatchDelete => {
            let patch = Op::Patch {
                b: b.clone(),
                e: e.clone(),
                ts: t + 2,
                set: [("x".to_string(), "1".to_string())].into(),
                remove: vec![],
            };
            let del = Op::RemoveRecord {
                b: b.clone(),
                e: e.clone(),
                ts: t + 2,
            };
            if rng.random_bool(0.5) {
                vec![vec![patch], vec![del]]
            } else {
                vec![vec![del], vec![patch]]
            }
        }
        Race::WriteRemoveEntry => {
            let writes = (10..10 + rng.random_range(3..8))
                .map(|i| write(race_rec(t + i, 1, rng), &b, &e))
                .collect();
            let delay = Op::Sleep(Duration::from_micros(rng.random_range(0..3000)));
            vec![
                writes,
                vec![
                    delay,
                    Op::RemoveEntry {
                        b: b.clone(),
                        e: e.clone(),
                    },
                ],
            ]
        }
        Race::WriteRemoveBucket => {
            setup = vec![];
            if !*tmp_exists {
                let settings = BucketSettings {
                    max_block_records: rng.random_range(1..4),
                    ..BucketSettings::default()
                };
                setup.push(Op::CreateBucket {
                    b: TMP.into(),
                    settings,
                });
            }
            // whatever an earlier incarnation of the bucket held must be gone
            setup.push(Op::Query {
                b: TMP.into(),
                e: e.clone(),
                start: 0,
                stop: u64::MAX,
                limit: None,
                desc: false,
                filter: None,
            });
            setup.extend((1..=3).map(|i| write(race_rec(t + i, 1, rng), TMP, &e)));
            *tmp_exists = false;
            let writes = (10..10 + rng.random_range(3..8))
                .map(|i| write(race_rec(t + i, 1, rng), TMP, &e))
                .collect();
            let delay = Op::Sleep(Duration::from_micros(rng.random_range(0..3000)));
            vec![writes, vec![delay, Op::RemoveBucket { b: TMP.into() }]]
        }
        Race::AttachAttach => {
            let put = |docs: Vec<(&str, u32)>| Op::PutAttachments {
                b: b.clone(),
                e: e.clone(),
                docs: docs.into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
            };
            setup.push(put(vec![("s", 1), ("t", 1)]));
            let mut second = vec![put(vec![("s", 3), ("w", 1)])];
            if rng.random_bool(0.5) {
                second.push(Op::RemoveAttachments {
                    b: b.clone(),
                    e: e.clone(),
                    names: Some(vec!["t".into()]),
                });
            }
            vec![vec![put(vec![("s", 2), ("u", 1)])], second]
        }
        Race::StatsRemoveStream => {
            // the stream's entry sorts before the removed one: stats() meets it first
            let (e_stream, e_gone) = (format!("{entry}a"), format!("{entry}b"));
            setup = (1..=3)
                .map(|i| write(race_rec(t + i, 1, rng), &b, &e_gone))
                .collect();
            let rec = Rec {
                ts: t + 50,
                ver: 1,
                len: rng.random_range(100_000..160_000),
                ct: CTS[2].into(),
                labels: Labels::new(),
            };
            let stream = Op::Stream {
                b: b.clone(),
                e: e_stream,
                rec,
                announce: None,
                slow: true,
            };
            let ms = |rng: &mut StdRng, lo, hi| {
                Op::Sleep(Duration::from_millis(rng.random_range(lo..hi)))
            };
            vec![
                vec![stream],
                vec![ms(rng, 60, 140), Op::Stats, Op::Stats],
                vec![
                    ms(rng, 90, 190),
                    Op::RemoveEntry {
                        b: b.clone(),
                        e: e_gone,
                    },
                ],
            ]
        }
    };
    Segment {
        race: Some(race),
        setup,
        lanes,
    }
}

/// The bucket of [`BACKFILL`]: blocks of 16–255 records.
fn backfill_bucket(rng: &mut StdRng) -> (String, BucketSettings) {
    let settings = BucketSettings {
        max_block_records: rng.random_range(16..256),
        max_block_size: 256 << 10,
        compression: if rng.random_bool(0.3) {
            Compression::Zstd { level: 1 }
        } else {
            Compression::None
        },
        ..BucketSettings::default()
    };
    (BACKFILL.into(), settings)
}

pub fn generate(seed: u64) -> History {
    let mut rng = StdRng::seed_from_u64(seed);
    // Backfills draw from their own stream, so a seed's other operations stay the ones it
    // made before they were added (the regression seeds in `model.rs` name bugs by them).
    let mut brng = StdRng::seed_from_u64(seed ^ 0x6261_636b_6669_6c6c);
    let lanes = rng.random_range(2..=4);
    let mut buckets = initial_buckets(&mut rng);
    buckets.push(backfill_bucket(&mut brng));
    let sync = match rng.random_range(0..3) {
        0 => SyncPolicy::Always,
        1 => SyncPolicy::default(),
        _ => SyncPolicy::Never,
    };
    let mut plans: Vec<LanePlan> = (0..lanes)
        .map(|l| LanePlan {
            lane: l,
            next_ts: (l as u64 + 1) * 1_000_000_000,
            own: BTreeMap::new(),
            free_slots: (0..BACKFILL_SLOTS).collect(),
        })
        .collect();
    let mut segments = Vec::new();
    let mut tmp_exists = false;
    for idx in 0..rng.random_range(2..5) {
        if rng.random_bool(0.35) {
            segments.push(race_segment(&mut rng, idx, &mut tmp_exists));
        } else {
            let n = rng.random_range(3..8);
            // A backfill segment: before most ordinary ops, a lane writes its entry out of
            // time order (drawn from `brng`: every other op stays what the seed made it).
            let backfill = brng.random_bool(0.12);
            let lanes = plans
                .iter_mut()
                .map(|p| {
                    let mut ops = Vec::new();
                    for _ in 0..n {
                        if backfill && brng.random_bool(0.6) {
                            ops.extend(p.backfill(&mut brng));
                            if brng.random_bool(0.3) {
                                ops.extend(p.backfill_change(&mut brng));
                            }
                        }
                        ops.push(p.op(&mut rng));
                    }
                    ops
                })
                .collect();
            segments.push(Segment {
                race: None,
                setup: vec![],
                lanes,
            });
        }
    }
    History {
        seed,
        buckets,
        sync,
        segments,
    }
}
