//! The checker: replays each segment's outcomes against the model (every operation's result
//! must be allowed by it), resolves races to the outcomes of the serial orders consistent
//! with real time, and checks a quiescent store against the model.

use std::collections::{BTreeMap, BTreeSet};
use tsblob_storage::{BucketSettings, Error, LabelFilter, Labels, QuotaType, Store};

use super::exec::{parse_filter, ErrKind, Outcome, Results};
use super::generate::{Op, Race, Rec, Segment, RACE, RACE_TS, TMP};
use super::state::{show_states, AKey, Key, Model, Obs, Span, State, Version};

/// What a segment's quota settings may be while it runs.
#[derive(Default)]
struct Ctx {
    fifo: BTreeSet<String>,
    hard: BTreeSet<String>,
    none: BTreeSet<String>,
    /// The largest HARD quota plus block size in force at some point.
    limit: BTreeMap<String, u64>,
    /// The smallest (non-zero) FIFO quota in force at some point: a write larger than its
    /// bucket's whole quota is refused (`LargerThanQuota`), FIFO or HARD.
    fifo_min: BTreeMap<String, u64>,
}

/// Bytes a write may need beyond its payloads (frame heads, labels, a block header): a
/// `Quota` refusal of a FIFO write is allowed when its payloads plus this exceed the quota.
const FRAME_ROOM: u64 = 16 << 10;

pub struct Checker {
    pub model: Model,
    pub settings: BTreeMap<String, BucketSettings>,
    /// Buckets whose existence a kill left uncertain.
    pub maybe_buckets: BTreeSet<String>,
    /// Bucket sizes at the last quiescent check, whether a non-HARD quota was in force
    /// since, and the largest quota plus one block since.
    sizes: BTreeMap<String, (u64, bool, u64)>,
    pub violations: Vec<String>,
    ctx: Ctx,
}

type Res = Option<(Outcome, Span)>;

const UNKNOWN: Span = Span {
    start: 0,
    end: u64::MAX,
};

fn key(b: &str, e: &str, ts: u64) -> Key {
    Key {
        bucket: b.into(),
        entry: e.into(),
        ts,
    }
}

fn akey(b: &str, e: &str, name: &str) -> AKey {
    AKey {
        bucket: b.into(),
        entry: e.into(),
        name: name.into(),
    }
}

fn version(r: &Rec) -> Version {
    Version {
        ver: r.ver,
        len: r.len,
        ct: r.ct.clone(),
        labels: r.labels.clone(),
    }
}

fn patched(v: &Version, set: &Labels, remove: &[String]) -> Version {
    let mut v = v.clone();
    for k in remove {
        v.labels.remove(k);
    }
    for (k, val) in set {
        v.labels.insert(k.clone(), val.clone());
    }
    v
}

fn absent(s: &State) -> bool {
    matches!(s, State::Absent | State::Evicted)
}

fn lane_of(ts: u64) -> Option<usize> {
    (ts < RACE_TS).then(|| (ts / 1_000_000_000).saturating_sub(1) as usize)
}

impl Checker {
    pub fn new(buckets: &[(String, BucketSettings)]) -> Checker {
        let model = Model {
            buckets: buckets.iter().map(|(b, _)| b.clone()).collect(),
            ..Model::default()
        };
        Checker {
            model,
            settings: buckets.iter().cloned().collect(),
            maybe_buckets: BTreeSet::new(),
            sizes: BTreeMap::new(),
            violations: Vec::new(),
            ctx: Ctx::default(),
        }
    }

    fn fail(&mut self, what: String) {
        self.violations.push(what);
    }

    fn observe(&mut self, k: &Key, obs: &Option<Obs>) {
        let fifo = self.ctx.fifo.contains(&k.bucket);
        if let Err(v) = self.model.observe(k, obs, fifo) {
            self.fail(v);
        }
    }

    /// Replays one segment. `results` are `None` for operations whose outcome is unknown
    /// (a kill): such an operation may or may not have taken effect.
    pub fn segment(&mut self, seg: &Segment, setup: &[Res], lanes: &Results) {
        self.begin(seg);
        for (op, r) in seg.setup.iter().zip(setup) {
            self.op(op, r.as_ref(), None);
        }
        let complete = lanes.iter().all(|l| l.iter().all(Option::is_some));
        match seg.race {
            Some(race) if complete => self.race(seg, race, lanes),
            Some(Race::AttachAttach) => {
                // Cut by a kill: any write may have landed, in any order; a removal too.
                for op in seg.lanes.iter().flatten() {
                    match op {
                        Op::PutAttachments { b, e, docs } => {
                            for (n, v) in docs {
                                self.model.awiden(&akey(b, e, n), Some(*v));
                            }
                        }
                        Op::RemoveAttachments {
                            b,
                            e,
                            names: Some(names),
                        } => names
                            .iter()
                            .for_each(|n| self.model.awiden(&akey(b, e, n), None)),
                        _ => {}
                    }
                }
            }
            Some(_) => {
                // A race cut by a kill: an unacknowledged operation may have taken effect
                // before or after any acknowledged one, so its possible effects are added
                // both before and after the acknowledged ones are checked (soak seeds
                // 825062480: a PATCH's NotFound after an unacknowledged DELETE, and
                // 825068730: unacknowledged writes after an acknowledged remove_entry).
                let unacked = |pass: &mut Self| {
                    for (ops, res) in seg.lanes.iter().zip(lanes) {
                        for (op, r) in ops.iter().zip(res) {
                            if r.is_none() {
                                pass.op(op, None, None);
                            }
                        }
                    }
                };
                unacked(self);
                for (ops, res) in seg.lanes.iter().zip(lanes) {
                    for (op, r) in ops.iter().zip(res) {
                        if r.is_some() {
                            self.op(op, r.as_ref(), None);
                        }
                    }
                }
                unacked(self);
                // Acknowledged operations were applied in lane order, but a write whose span
                // overlaps an acknowledged removal's may have landed after it (soak seed
                // 825068730): it may be present too.
                let removals: Vec<Span> = seg
                    .lanes
                    .iter()
                    .zip(lanes)
                    .flat_map(|(ops, res)| ops.iter().zip(res))
                    .filter_map(|(op, r)| match (op, r) {
                        (
                            Op::RemoveEntry { .. } | Op::RemoveBucket { .. },
                            Some((Outcome::Done, span)),
                        ) => Some(*span),
                        _ => None,
                    })
                    .collect();
                for (ops, res) in seg.lanes.iter().zip(lanes) {
                    for (op, r) in ops.iter().zip(res) {
                        if let (Op::Write { b, e, rec }, Some((Outcome::Done, span))) = (op, r) {
                            if removals.iter().any(|rm| span.end >= rm.start) {
                                let k = key(b, e, rec.ts);
                                self.model
                                    .widen(&k, vec![State::Present(version(rec), *span)]);
                            }
                        }
                    }
                }
            }
            _ => {
                for (l, (ops, res)) in seg.lanes.iter().zip(lanes).enumerate() {
                    let lane = if seg.race.is_some() { None } else { Some(l) };
                    for (op, r) in ops.iter().zip(res) {
                        self.op(op, r.as_ref(), lane);
                    }
                }
            }
        }
        for op in seg.setup.iter().chain(seg.lanes.iter().flatten()) {
            if let Op::UpdateBucket { b, update } = op {
                if let Some(s) = self.settings.get_mut(b) {
                    *s = s.apply(update);
                }
            }
        }
    }

    /// Quota types a segment may see, records it may evict, versions it may write.
    fn begin(&mut self, seg: &Segment) {
        let mut ctx = Ctx::default();
        let mut settings = self.settings.clone();
        let note = |ctx: &mut Ctx, b: &str, s: &BucketSettings| {
            let set = match s.quota_type {
                QuotaType::Fifo => &mut ctx.fifo,
                QuotaType::Hard => &mut ctx.hard,
                QuotaType::None => &mut ctx.none,
            };
            set.insert(b.to_string());
            if s.quota_type == QuotaType::Fifo && s.quota_size > 0 {
                let m = ctx.fifo_min.entry(b.to_string()).or_insert(u64::MAX);
                *m = (*m).min(s.quota_size);
            }
            // One block of precision, plus a frame's head and a block's header.
            let limit = s.quota_size + s.max_block_size + 4096;
            let l = ctx.limit.entry(b.to_string()).or_default();
            *l = (*l).max(limit);
        };
        for (b, s) in &settings {
            note(&mut ctx, b, s);
        }
        for op in seg.setup.iter().chain(seg.lanes.iter().flatten()) {
            match op {
                Op::UpdateBucket { b, update } => {
                    if let Some(s) = settings.get_mut(b) {
                        *s = s.apply(update);
                        note(&mut ctx, b, s);
                    }
                }
                Op::Write { b, e, rec } | Op::Stream { b, e, rec, .. } => {
                    self.model
                        .register(&key(b, e, rec.ts), rec.ver, rec.len, &rec.ct)
                }
                Op::Batch { b, e, recs } => {
                    for r in recs {
                        self.model.register(&key(b, e, r.ts), r.ver, r.len, &r.ct);
                    }
                }
                Op::CreateBucket { b, settings: s } => {
                    settings.insert(b.clone(), s.clone());
                    note(&mut ctx, b, s);
                }
                _ => {}
            }
        }
        for b in &ctx.fifo {
            self.model.mark_evictable(b);
        }
        for (b, (_, soft, limit)) in self.sizes.iter_mut() {
            *soft |= !ctx.hard.contains(b) || ctx.fifo.contains(b) || ctx.none.contains(b);
            *limit = (*limit).max(ctx.limit.get(b).copied().unwrap_or(0));
        }
        self.ctx = ctx;
    }

    /// Whether a write of `bytes` payload bytes into FIFO bucket `b` may be larger than its
    /// whole quota (refused as `Quota`, nothing evicted).
    fn larger_than_fifo(&self, b: &str, bytes: u64) -> bool {
        self.ctx
            .fifo_min
            .get(b)
            .is_some_and(|q| bytes + FRAME_ROOM > *q)
    }

    /// A write's outcome for one record of a write of `bytes` payload bytes.
    fn wrote(
        &mut self,
        op: &str,
        k: &Key,
        v: Version,
        bytes: u64,
        r: Option<(Result<(), ErrKind>, Span)>,
    ) {
        let prior = self.model.get(k);
        let evictable = self.model.keys.get(k).is_some_and(|m| m.evictable);
        match r {
            None => {
                self.model.widen(k, vec![State::Present(v, UNKNOWN)]);
                if self.ctx.fifo.contains(&k.bucket) {
                    self.model.set_evictable(k);
                }
            }
            Some((Ok(()), span)) => {
                if !evictable && !prior.iter().any(absent) {
                    self.fail(format!(
                        "{op} {k}: acknowledged over an existing record {}",
                        show_states(&prior)
                    ));
                }
                self.model.set(k, vec![State::Present(v, span)]);
                self.model.evicted_span.remove(k);
                if self.ctx.fifo.contains(&k.bucket) {
                    self.model.set_evictable(k);
                }
            }
            Some((Err(ErrKind::Conflict), _)) => {
                let present: Vec<State> = prior.into_iter().filter(|s| !absent(s)).collect();
                if present.is_empty() {
                    self.fail(format!(
                        "{op} {k}: Conflict, but the model has no record there"
                    ));
                } else {
                    self.model.set(k, present);
                }
            }
            Some((Err(ErrKind::Quota), _))
                if self.ctx.hard.contains(&k.bucket) || self.larger_than_fifo(&k.bucket, bytes) => {
            }
            // A write into an entry or bucket being removed (races only).
            Some((Err(ErrKind::NotFound), _)) if k.bucket == TMP || k.bucket == RACE => {}
            Some((Err(e), _)) => self.fail(format!("{op} {k}: unexpected error {e:?}")),
        }
    }

    fn res_err(out: &Outcome) -> Result<(), ErrKind> {
        match out {
            Outcome::Done => Ok(()),
            Outcome::Err(k, _) => Err(*k),
            _ => Err(ErrKind::Other),
        }
    }

    /// Replays one operation; `lane`: the lane whose own records these are (`None`: every
    /// record the op touches or lists is the replaying thread's, as in setup).
    fn op(&mut self, op: &Op, r: Option<&(Outcome, Span)>, lane: Option<usize>) {
        let what = format!("{op:?}");
        let short: String = what.chars().take(160).collect();
        if let Some((Outcome::Err(ErrKind::Other, msg), _)) = r {
            if !matches!(op, Op::Write { .. } | Op::Batch { .. } | Op::Stream { .. }) {
                self.fail(format!("{short}: unexpected error: {msg}"));
                return;
            }
        }
        match op {
            Op::Write { b, e, rec } => {
                let res = r.map(|(o, s)| (Self::res_err(o), *s));
                if let Some((Outcome::Err(ErrKind::Other, m), _)) = r {
                    self.fail(format!("{short}: {m}"));
                }
                self.wrote(
                    "write",
                    &key(b, e, rec.ts),
                    version(rec),
                    rec.len as u64,
                    res,
                )
            }
            Op::Stream {
                b,
                e,
                rec,
                announce,
                ..
            } => {
                let k = key(b, e, rec.ts);
                if announce.is_some_and(|a| a != rec.len as u64) {
                    match r {
                        Some((Outcome::Err(ErrKind::Length, _), _)) | None => {}
                        Some((Outcome::Err(ErrKind::Quota, _), _))
                            if self.ctx.hard.contains(b)
                                || self.larger_than_fifo(b, rec.len as u64) => {}
                        Some((o, _)) => self.fail(format!("stream {k} of {} B announced as {announce:?}: {o:?}, not LengthMismatch", rec.len)),
                    }
                    return;
                }
                let res = r.map(|(o, s)| (Self::res_err(o), *s));
                self.wrote("write_stream", &k, version(rec), rec.len as u64, res)
            }
            Op::Batch { b, e, recs } => {
                let bytes: u64 = recs.iter().map(|r| r.len as u64).sum();
                for (i, rec) in recs.iter().enumerate() {
                    let res = match r {
                        None => None,
                        Some((Outcome::Batch(v), s)) => match v.get(i) {
                            Some(x) => Some((*x, *s)),
                            None => {
                                self.fail(format!(
                                    "batch of {} records answered {} results",
                                    recs.len(),
                                    v.len()
                                ));
                                return;
                            }
                        },
                        Some((o, s)) => Some((Self::res_err(o), *s)),
                    };
                    self.wrote("write_batch", &key(b, e, rec.ts), version(rec), bytes, res);
                }
            }
            Op::Patch {
                b,
                e,
                ts,
                set,
                remove,
            } => {
                let k = key(b, e, *ts);
                let prior = self.model.get(&k);
                // The update copies the record's frame: its payload counts for the quota.
                let largest = prior
                    .iter()
                    .filter_map(|s| match s {
                        State::Present(v, _) => Some(v.len as u64),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(0);
                let after = |span: Span| -> Vec<State> {
                    prior
                        .iter()
                        .filter_map(|s| match s {
                            State::Present(v, _) => {
                                Some(State::Present(patched(v, set, remove), span))
                            }
                            _ => None,
                        })
                        .collect()
                };
                match r {
                    None => self.model.widen(&k, after(UNKNOWN)),
                    Some((Outcome::Done, span)) => {
                        let new = after(*span);
                        if new.is_empty() {
                            self.fail(format!(
                                "update_labels {k}: succeeded on a record the model says is {}",
                                show_states(&prior)
                            ));
                        }
                        self.model.set(&k, new);
                        if self.ctx.fifo.contains(b) {
                            self.model.set_evictable(&k);
                        }
                    }
                    Some((Outcome::Err(ErrKind::NotFound, _), _)) => self.observe(&k, &None),
                    Some((Outcome::Err(ErrKind::Quota, _), _))
                        if self.ctx.hard.contains(b) || self.larger_than_fifo(b, largest) => {}
                    Some((o, _)) => self.fail(format!("update_labels {k}: {o:?}")),
                }
            }
            Op::RemoveRecord { b, e, ts } => {
                let k = key(b, e, *ts);
                match r {
                    None => self.model.widen(&k, vec![State::Absent]),
                    Some((Outcome::Done, _)) => {
                        if self.model.get(&k).iter().all(absent) {
                            self.fail(format!(
                                "remove_record {k}: succeeded, but the model has no record there"
                            ));
                        }
                        self.model.set(&k, vec![State::Absent]);
                    }
                    Some((Outcome::Err(ErrKind::NotFound, _), _)) => self.observe(&k, &None),
                    Some((o, _)) => self.fail(format!("remove_record {k}: {o:?}")),
                }
            }
            Op::RemoveRange { b, e, start, stop } | Op::Lifecycle { b, e, start, stop } => {
                let keys: Vec<Key> = self
                    .model
                    .keys_of_entry(b, e)
                    .into_iter()
                    .filter(|k| (*start..*stop).contains(&k.ts))
                    .collect();
                match r {
                    None => keys
                        .iter()
                        .for_each(|k| self.model.widen(k, vec![State::Absent])),
                    Some((Outcome::Count(n), _)) => {
                        let states: Vec<(Vec<State>, bool)> = keys
                            .iter()
                            .map(|k| {
                                (
                                    self.model.get(k),
                                    self.model.keys.get(k).is_some_and(|m| m.evictable),
                                )
                            })
                            .collect();
                        let most =
                            states.iter().filter(|(s, _)| !s.iter().all(absent)).count() as u64;
                        let least = states
                            .iter()
                            .filter(|(s, ev)| !ev && !s.iter().any(absent))
                            .count() as u64;
                        if *n < least || *n > most {
                            self.fail(format!("remove_range {b}/{e} [{start},{stop}): removed {n}, the model expects {least}..={most}"));
                        }
                        keys.iter()
                            .for_each(|k| self.model.set(k, vec![State::Absent]));
                    }
                    Some((Outcome::Err(ErrKind::NotFound, _), _)) => {
                        keys.iter().for_each(|k| self.observe(k, &None))
                    }
                    Some((o, _)) => self.fail(format!("remove_range {b}/{e}: {o:?}")),
                }
            }
            Op::RemoveEntry { b, e } => {
                let keys = self.model.keys_of_entry(b, e);
                self.attachments_gone(self.model.akeys_of_entry(b, e), r);
                match r {
                    None => keys
                        .iter()
                        .for_each(|k| self.model.widen(k, vec![State::Absent])),
                    Some((Outcome::Done, _)) => keys
                        .iter()
                        .for_each(|k| self.model.set(k, vec![State::Absent])),
                    Some((Outcome::Err(ErrKind::NotFound, _), _)) => {
                        keys.iter().for_each(|k| self.observe(k, &None))
                    }
                    Some((o, _)) => self.fail(format!("remove_entry {b}/{e}: {o:?}")),
                }
            }
            // Compression changes no record: later reads check each one's bytes, content
            // type and labels (killed half-way too: raw or compressed, each once).
            Op::Compress { b, e, .. } => match r {
                None
                | Some((
                    Outcome::Count(_) | Outcome::Err(ErrKind::NotFound | ErrKind::Quota, _),
                    _,
                )) => {}
                Some((o, _)) => self.fail(format!("compress {b}/{e}: {o:?}")),
            },
            Op::RenameEntry { b, e, .. } => {
                let keys = self.model.keys_of_entry(b, e);
                match r {
                    // There and back: the attachments moved with the entry, twice.
                    Some((Outcome::Done | Outcome::Err(ErrKind::Exists, _), _)) => {}
                    _ => self.attachments_gone(self.model.akeys_of_entry(b, e), r),
                }
                match r {
                    // Killed (or racing) half-way: the records may be under the other name.
                    None => keys
                        .iter()
                        .for_each(|k| self.model.widen(k, vec![State::Absent])),
                    // There and back: every record as it was (reads check them later).
                    Some((Outcome::Done, _)) => {}
                    Some((Outcome::Err(ErrKind::NotFound, _), _)) => {
                        keys.iter().for_each(|k| self.observe(k, &None))
                    }
                    // The other name is taken: only by records a killed rename left there.
                    Some((Outcome::Err(ErrKind::Exists, _), _)) => {}
                    Some((o, _)) => self.fail(format!("rename_entry {b}/{e}: {o:?}")),
                }
            }
            Op::CreateBucket { b, .. } => match r {
                None => drop(self.maybe_buckets.insert(b.clone())),
                Some((Outcome::Done, _)) if !self.model.buckets.contains(b) => {
                    self.model.buckets.insert(b.clone());
                    self.maybe_buckets.remove(b);
                }
                Some((Outcome::Err(ErrKind::Exists, _), _))
                    if self.model.buckets.contains(b) || self.maybe_buckets.remove(b) =>
                {
                    self.model.buckets.insert(b.clone());
                }
                Some((o, _)) => self.fail(format!(
                    "create_bucket {b}: {o:?} (model: exists = {})",
                    self.model.buckets.contains(b)
                )),
            },
            Op::RemoveBucket { b } => {
                let keys: Vec<Key> = self
                    .model
                    .keys
                    .keys()
                    .filter(|k| &k.bucket == b)
                    .cloned()
                    .collect();
                let akeys: Vec<AKey> = self
                    .model
                    .attach
                    .keys()
                    .filter(|k| &k.bucket == b)
                    .cloned()
                    .collect();
                self.attachments_gone(akeys, r);
                match r {
                    None => {
                        keys.iter()
                            .for_each(|k| self.model.widen(k, vec![State::Absent]));
                        self.maybe_buckets.insert(b.clone());
                        self.model.buckets.remove(b);
                    }
                    Some((Outcome::Done, _)) => {
                        keys.iter()
                            .for_each(|k| self.model.set(k, vec![State::Absent]));
                        self.model.buckets.remove(b);
                        self.maybe_buckets.remove(b);
                    }
                    Some((o, _)) => self.fail(format!("remove_bucket {b}: {o:?}")),
                }
            }
            Op::Read { b, e, ts } | Op::Head { b, e, ts } => {
                let k = key(b, e, *ts);
                match r {
                    None => {}
                    Some((Outcome::Found(o), _)) => self.observe(&k, &Some(o.clone())),
                    Some((Outcome::Err(ErrKind::NotFound, _), _)) => self.observe(&k, &None),
                    Some((o, _)) => self.fail(format!("read {k}: {o:?}")),
                }
            }
            Op::Query {
                b,
                e,
                start,
                stop,
                limit,
                desc,
                filter,
            } => {
                let filter = filter.as_deref().map(parse_filter);
                match r {
                    None => {}
                    Some((Outcome::List(items), _)) => {
                        self.query(b, e, (*start, *stop), *limit, *desc, filter, items, lane)
                    }
                    Some((Outcome::Err(ErrKind::NotFound, _), _)) => {
                        let mine: Vec<Key> = self
                            .model
                            .keys_of_entry(b, e)
                            .into_iter()
                            .filter(|k| lane.is_none() || lane_of(k.ts) == lane)
                            .collect();
                        mine.iter().for_each(|k| self.observe(k, &None));
                    }
                    Some((o, _)) => self.fail(format!("query {b}/{e}: {o:?}")),
                }
            }
            Op::BucketInfo { b } | Op::ListEntries { b } => match r {
                Some((Outcome::Err(ErrKind::NotFound, _), _)) if self.model.buckets.contains(b) => {
                    self.fail(format!("bucket {b} exists but was not found"))
                }
                _ => {}
            },
            Op::UpdateBucket { b, .. } => {
                if let Some((o, _)) = r.filter(|(o, _)| *o != Outcome::Done) {
                    self.fail(format!("update_bucket {b}: {o:?}"));
                }
            }
            Op::Stats | Op::Sleep(_) => {}
            Op::PutAttachments { b, e, docs } => {
                // The last version of a name in one write is the one stored.
                let last: BTreeMap<&str, u32> =
                    docs.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                match r {
                    None => last
                        .iter()
                        .for_each(|(n, v)| self.model.awiden(&akey(b, e, n), Some(*v))),
                    Some((Outcome::Done, _)) => last
                        .iter()
                        .for_each(|(n, v)| self.model.aset(&akey(b, e, n), vec![Some(*v)])),
                    Some((Outcome::Err(ErrKind::NotFound, _), _)) if b == TMP || b == RACE => {}
                    Some((o, _)) => self.fail(format!("write_attachments {b}/{e}: {o:?}")),
                }
            }
            Op::ReadAttachments { b, e } => {
                let own = |n: &str| lane.is_none_or(|l| n.starts_with(&format!("a{l}-")));
                match r {
                    None => {}
                    Some((Outcome::Attached(list), _)) => {
                        let seen: BTreeMap<&str, u32> =
                            list.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                        for (n, v) in &seen {
                            if *v == u32::MAX {
                                self.fail(format!("{}: bytes no write produced", akey(b, e, n)));
                            }
                        }
                        let mut keys: BTreeSet<AKey> = self
                            .model
                            .akeys_of_entry(b, e)
                            .into_iter()
                            .filter(|k| own(&k.name))
                            .collect();
                        keys.extend(seen.keys().filter(|n| own(n)).map(|n| akey(b, e, n)));
                        for k in keys {
                            let got = seen.get(k.name.as_str()).copied();
                            if let Err(v) = self.model.aobserve(&k, got) {
                                self.fail(v);
                            }
                        }
                    }
                    Some((Outcome::Err(ErrKind::NotFound, _), _)) => {
                        for k in self.model.akeys_of_entry(b, e) {
                            if own(&k.name) {
                                if let Err(v) = self.model.aobserve(&k, None) {
                                    self.fail(v);
                                }
                            }
                        }
                    }
                    Some((o, _)) => self.fail(format!("read attachments {b}/{e}: {o:?}")),
                }
            }
            Op::RemoveAttachments { b, e, names } => {
                let keys: BTreeSet<AKey> = match names {
                    Some(names) => names.iter().map(|n| akey(b, e, n)).collect(),
                    None => self.model.akeys_of_entry(b, e).into_iter().collect(),
                };
                match r {
                    None => keys.iter().for_each(|k| self.model.awiden(k, None)),
                    Some((Outcome::Count(n), _)) => {
                        let states: Vec<Vec<Option<u32>>> =
                            keys.iter().map(|k| self.model.aget(k)).collect();
                        let most = states
                            .iter()
                            .filter(|s| s.iter().any(Option::is_some))
                            .count() as u64;
                        let least = states
                            .iter()
                            .filter(|s| s.iter().all(Option::is_some))
                            .count() as u64;
                        if *n < least || *n > most {
                            self.fail(format!("remove_attachments {b}/{e} {names:?}: removed {n}, the model expects {least}..={most}"));
                        }
                        keys.iter().for_each(|k| self.model.aset(k, vec![None]));
                    }
                    Some((Outcome::Err(ErrKind::NotFound, _), _)) => {
                        for k in &keys {
                            if let Err(v) = self.model.aobserve(k, None) {
                                self.fail(v);
                            }
                        }
                    }
                    Some((o, _)) => self.fail(format!("remove_attachments {b}/{e}: {o:?}")),
                }
            }
        }
    }

    /// The attachments `keys` went with their entry or bucket (a removal, or a rename that
    /// may have been cut half-way): absent if the removal was acknowledged, possibly absent
    /// if its outcome is unknown, checked absent if the entry was not found.
    fn attachments_gone(&mut self, keys: Vec<AKey>, r: Option<&(Outcome, Span)>) {
        match r {
            None => keys.iter().for_each(|k| self.model.awiden(k, None)),
            Some((Outcome::Done, _)) => keys.iter().for_each(|k| self.model.aset(k, vec![None])),
            Some((Outcome::Err(ErrKind::NotFound, _), _)) => {
                for k in &keys {
                    if let Err(v) = self.model.aobserve(k, None) {
                        self.fail(v);
                    }
                }
            }
            Some(_) => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn query(
        &mut self,
        b: &str,
        e: &str,
        (start, stop): (u64, u64),
        limit: Option<u64>,
        desc: bool,
        filter: Option<LabelFilter>,
        items: &[(u64, Option<Obs>)],
        lane: Option<usize>,
    ) {
        let ts: Vec<u64> = items.iter().map(|(t, _)| *t).collect();
        let ordered = ts
            .windows(2)
            .all(|w| if desc { w[0] > w[1] } else { w[0] < w[1] });
        if !ordered {
            self.fail(format!(
                "query {b}/{e}: timestamps out of order or repeated: {ts:?}"
            ));
        }
        if limit.is_some_and(|l| items.len() as u64 > l) {
            self.fail(format!(
                "query {b}/{e}: {} items past limit {limit:?}",
                items.len()
            ));
        }
        let mine = |t: u64| lane.is_none() || lane_of(t) == lane;
        for (t, obs) in items {
            let k = key(b, e, *t);
            if !(start..stop).contains(t) {
                self.fail(format!("query {b}/{e} [{start},{stop}): returned {t}"));
            }
            if let (Some(f), Some(o)) = (&filter, obs) {
                if !f.matches(&o.labels) {
                    self.fail(format!(
                        "query {b}/{e} with {f:?}: returned {t} with labels {:?}",
                        o.labels
                    ));
                }
            }
            if mine(*t) {
                if obs.is_some() || self.ctx.fifo.contains(b) {
                    self.observe(&k, obs);
                }
            } else if let Some(o) = obs {
                if let Err(v) = self.model.plausible(&k, o) {
                    self.fail(v);
                }
            }
        }
        if limit.is_some() {
            return;
        }
        // Own records the query should have listed.
        let listed: BTreeSet<u64> = ts.into_iter().collect();
        for k in self.model.keys_of_entry(b, e) {
            if !mine(k.ts) || listed.contains(&k.ts) || !(start..stop).contains(&k.ts) {
                continue;
            }
            let km = self.model.keys.get(&k).cloned();
            let allowed: Vec<State> = self
                .model
                .get(&k)
                .into_iter()
                .filter(|s| match s {
                    State::Present(v, _) => filter.as_ref().is_some_and(|f| !f.matches(&v.labels)),
                    _ => true,
                })
                .collect();
            if allowed.is_empty() {
                if km.is_some_and(|m| m.evictable) && self.ctx.fifo.contains(b) {
                    self.observe(&k, &None);
                } else {
                    self.fail(format!(
                        "query {b}/{e} [{start},{stop}) {filter:?}: missed {k}, which is {}",
                        show_states(&self.model.get(&k))
                    ));
                }
            } else {
                self.model.set(&k, allowed);
            }
        }
    }

    /// The outcomes a race may have: those of some serial order consistent with real time.
    fn race(&mut self, seg: &Segment, race: Race, lanes: &Results) {
        let res = |l: usize, i: usize| {
            lanes[l][i]
                .clone()
                .unwrap_or((Outcome::Err(ErrKind::Other, "missing".into()), UNKNOWN))
        };
        match race {
            Race::PatchPatch => {
                let (Op::Patch { b, e, ts, .. }, Op::Patch { .. }) =
                    (&seg.lanes[0][0], &seg.lanes[1][0])
                else {
                    return;
                };
                let k = key(b, e, *ts);
                let (p1, p2) = (res(0, 0), res(1, 0));
                for p in [&p1, &p2] {
                    if p.0 != Outcome::Done {
                        self.fail(format!("concurrent update_labels {k}: {:?}", p.0));
                    }
                }
                let prior = self.model.get(&k);
                let apply = |op: &Op, v: &Version| match op {
                    Op::Patch { set, remove, .. } => patched(v, set, remove),
                    _ => v.clone(),
                };
                let (o1, o2) = (&seg.lanes[0][0], &seg.lanes[1][0]);
                let mut allowed = Vec::new();
                for s in &prior {
                    if let State::Present(v, _) = s {
                        let end = p1.1.end.max(p2.1.end);
                        let span = Span {
                            start: p1.1.start.min(p2.1.start),
                            end,
                        };
                        if p2.1.end > p1.1.start {
                            allowed.push(State::Present(apply(o2, &apply(o1, v)), span));
                            // 1 then 2
                        }
                        if p1.1.end > p2.1.start {
                            allowed.push(State::Present(apply(o1, &apply(o2, v)), span));
                        }
                    }
                }
                self.model.set(&k, allowed);
            }
            Race::PatchDelete => {
                let (pl, dl) = if matches!(seg.lanes[0][0], Op::Patch { .. }) {
                    (0, 1)
                } else {
                    (1, 0)
                };
                let Op::RemoveRecord { b, e, ts } = &seg.lanes[dl][0] else {
                    return;
                };
                let k = key(b, e, *ts);
                let (p, d) = (res(pl, 0), res(dl, 0));
                if d.0 != Outcome::Done {
                    self.fail(format!(
                        "remove_record {k} racing update_labels: {:?} (the record existed)",
                        d.0
                    ));
                }
                match &p.0 {
                    Outcome::Done if d.1.end < p.1.start => {
                        self.fail(format!("update_labels {k} succeeded although remove_record was acknowledged before it started"))
                    }
                    Outcome::Err(ErrKind::NotFound, _) if p.1.end < d.1.start => {
                        self.fail(format!("update_labels {k} said NotFound before remove_record started"))
                    }
                    Outcome::Done | Outcome::Err(ErrKind::NotFound, _) => {}
                    o => self.fail(format!("update_labels {k} racing remove_record: {o:?}")),
                }
                // Either order ends with the record removed: a PATCH after the DELETE fails.
                self.model.set(&k, vec![State::Absent]);
            }
            Race::WriteRemoveEntry | Race::WriteRemoveBucket => {
                let whole_bucket = race == Race::WriteRemoveBucket;
                let rm = res(1, 1);
                let (b, e) = match &seg.lanes[0][0] {
                    Op::Write { b, e, .. } => (b.clone(), e.clone()),
                    _ => return,
                };
                if rm.0 != Outcome::Done {
                    self.fail(format!("removing {b}/{e} racing writes: {:?}", rm.0));
                }
                let before: Vec<Key> = if whole_bucket {
                    self.model
                        .keys
                        .keys()
                        .filter(|k| k.bucket == b)
                        .cloned()
                        .collect()
                } else {
                    self.model.keys_of_entry(&b, &e)
                };
                before
                    .iter()
                    .for_each(|k| self.model.set(k, vec![State::Absent]));
                for (i, op) in seg.lanes[0].iter().enumerate() {
                    let Op::Write { rec, .. } = op else { continue };
                    let k = key(&b, &e, rec.ts);
                    let (out, span) = res(0, i);
                    let after_rm = rm.1.end < span.start;
                    let before_rm = span.end < rm.1.start;
                    let present = State::Present(version(rec), span);
                    let allowed = match (&out, whole_bucket) {
                        (Outcome::Done, true) if after_rm => {
                            self.fail(format!(
                                "write {k} acknowledged after remove_bucket {b} was"
                            ));
                            vec![State::Absent]
                        }
                        (Outcome::Done, true) => vec![State::Absent],
                        (Outcome::Done, false) if before_rm => vec![State::Absent],
                        (Outcome::Done, false) if after_rm => vec![present],
                        (Outcome::Done, false) => vec![State::Absent, present],
                        (Outcome::Err(ErrKind::NotFound, _), _)
                            if !before_rm && (whole_bucket || !after_rm) =>
                        {
                            vec![State::Absent]
                        }
                        (o, _) => {
                            self.fail(format!("write {k} racing removal of {b}/{e}: {o:?}"));
                            vec![State::Absent]
                        }
                    };
                    self.model.set(&k, allowed);
                }
                if whole_bucket {
                    self.model.buckets.remove(&b);
                }
            }
            Race::AttachAttach => {
                let Op::PutAttachments { b, e, .. } = &seg.lanes[0][0] else {
                    return;
                };
                let (p0, p1) = (res(0, 0), res(1, 0));
                for p in [&p0, &p1] {
                    if p.0 != Outcome::Done {
                        self.fail(format!("concurrent write_attachments {b}/{e}: {:?}", p.0));
                    }
                }
                // Lane 1's write last (it ended after lane 0's began) leaves its version.
                let mut s = Vec::new();
                if p1.1.end > p0.1.start {
                    s.push(Some(3));
                }
                if p0.1.end > p1.1.start {
                    s.push(Some(2));
                }
                self.model.aset(&akey(b, e, "s"), s);
                self.model.aset(&akey(b, e, "u"), vec![Some(1)]);
                self.model.aset(&akey(b, e, "w"), vec![Some(1)]);
                if seg.lanes[1].len() > 1 {
                    match res(1, 1).0 {
                        Outcome::Count(1) => self.model.aset(&akey(b, e, "t"), vec![None]),
                        o => self.fail(format!(
                            "remove_attachments {b}/{e} [t]: {o:?} (t was there)"
                        )),
                    }
                }
            }
            Race::StatsRemoveStream => {
                for (l, ops) in seg.lanes.iter().enumerate() {
                    for (i, op) in ops.iter().enumerate() {
                        let r = res(l, i);
                        self.op(op, Some(&r), None);
                    }
                }
            }
        }
    }

    /// Checks a store nobody is writing to against the model, then collapses the model.
    pub fn quiescent(&mut self, s: &Store) {
        let keys: Vec<Key> = self.model.keys.keys().cloned().collect();
        let mut failed = BTreeSet::new();
        // What point reads found present, per entry: what a query must list.
        let mut readable: BTreeMap<(String, String), BTreeSet<u64>> = BTreeMap::new();
        for k in &keys {
            let obs = match s.read(&k.bucket, &k.entry, Some(k.ts)) {
                Ok(r) => Some(Obs {
                    fp: Some(super::state::fingerprint(&r.data)),
                    len: r.data.len() as u64,
                    ct: r.meta.content_type,
                    labels: r.meta.labels,
                }),
                Err(Error::NotFound(_)) => None,
                Err(e) => {
                    self.fail(format!("quiescent read of {k}: {e}"));
                    continue;
                }
            };
            if obs.is_some() {
                readable
                    .entry((k.bucket.clone(), k.entry.clone()))
                    .or_default()
                    .insert(k.ts);
            }
            if let Err(v) = self.model.observe(k, &obs, false) {
                self.fail(format!("after the segment: {v}"));
                failed.insert((k.bucket.clone(), k.entry.clone()));
            }
        }
        // An entry with a wrong record is not compared further (one report per fault).
        for (b, e) in self.model.entries().difference(&failed) {
            let found = readable.remove(&(b.clone(), e.clone())).unwrap_or_default();
            self.entry_matches(s, b, e, &found);
        }
        self.attachments_match(s);
        self.buckets_match(s);
    }

    /// Every entry's attachments read back as the model says, none it does not know.
    fn attachments_match(&mut self, s: &Store) {
        let entries: BTreeSet<(String, String)> = self
            .model
            .attach
            .keys()
            .map(|k| (k.bucket.clone(), k.entry.clone()))
            .collect();
        for (b, e) in entries {
            let seen: BTreeMap<String, Vec<u8>> = match s.attachments(&b, &e) {
                Ok(list) => list.into_iter().map(|a| (a.name, a.data)).collect(),
                Err(Error::NotFound(_)) => BTreeMap::new(),
                Err(err) => {
                    self.fail(format!("quiescent attachments of {b}/{e}: {err}"));
                    continue;
                }
            };
            let mut keys: BTreeSet<AKey> = self.model.akeys_of_entry(&b, &e).into_iter().collect();
            keys.extend(seen.keys().map(|n| akey(&b, &e, n)));
            for k in keys {
                let got = seen
                    .get(&k.name)
                    .map(|d| super::state::attachment_version(&e, &k.name, d));
                if let Err(v) = self.model.aobserve(&k, got) {
                    self.fail(format!("after the segment: {v}"));
                }
            }
        }
    }

    /// A query of the entry lists exactly the records point reads found (`readable`), and
    /// the entry's count agrees; FIFO evicted only the oldest.
    fn entry_matches(&mut self, s: &Store, b: &str, e: &str, readable: &BTreeSet<u64>) {
        let keys = self.model.keys_of_entry(b, e);
        let present: BTreeMap<u64, Span> = keys
            .iter()
            .filter_map(|k| match self.model.get(k).as_slice() {
                [State::Present(_, span)] => Some((k.ts, *span)),
                _ => None,
            })
            .collect();
        let listed: Vec<u64> = match s.query(b, e, &Default::default()) {
            Ok(iter) => {
                let mut out = Vec::new();
                for item in iter {
                    match item {
                        Ok(i) => out.push(i.meta.ts),
                        Err(err) => self.fail(format!("query {b}/{e}: {err}")),
                    }
                }
                out
            }
            Err(Error::NotFound(_)) => Vec::new(),
            Err(err) => return self.fail(format!("query {b}/{e}: {err}")),
        };
        let want: Vec<u64> = readable.iter().copied().collect();
        if listed != want {
            let extra: Vec<&u64> = listed.iter().filter(|t| !readable.contains(t)).collect();
            let missing: Vec<&u64> = want.iter().filter(|t| !listed.contains(t)).collect();
            self.fail(format!(
                "query {b}/{e} disagrees with point reads: extra {extra:?}, missing {missing:?}"
            ));
        }
        if let Ok(info) = s.entry(b, e) {
            if info.record_count != want.len() as u64 {
                self.fail(format!(
                    "entry {b}/{e}: record_count {} but {} records are readable",
                    info.record_count,
                    want.len()
                ));
            }
        }
        // FIFO deletes whole oldest blocks: no record written before an evicted one survives it.
        let newest_evicted = keys
            .iter()
            .filter(|k| self.model.get(k) == [State::Evicted])
            .filter_map(|k| self.model.evicted_span.get(k).map(|s| (s.start, k.ts)))
            .max();
        let oldest_present = present.iter().map(|(ts, s)| (s.end, *ts)).min();
        if let (Some((m_start, m)), Some((p_end, p))) = (newest_evicted, oldest_present) {
            if p_end < m_start {
                self.fail(format!(
                    "FIFO order in {b}/{e}: {m} was evicted but {p}, written before it, is still there"
                ));
            }
        }
    }

    fn buckets_match(&mut self, s: &Store) {
        let names: Vec<String> = self
            .settings
            .keys()
            .cloned()
            .chain([TMP.to_string()])
            .collect();
        for b in names {
            // A creation or removal cut short by a kill may or may not have happened: what
            // the store shows decides, from now on.
            if self.maybe_buckets.remove(&b) {
                match s.bucket(&b) {
                    Ok(_) => drop(self.model.buckets.insert(b.clone())),
                    Err(_) => drop(self.model.buckets.remove(&b)),
                }
            }
            let exists = self.model.buckets.contains(&b);
            match s.bucket(&b) {
                Ok(info) => {
                    if !exists {
                        self.fail(format!(
                            "bucket {b} exists after its removal was acknowledged"
                        ));
                        continue;
                    }
                    let (prev, soft, limit) = self.sizes.get(&b).copied().unwrap_or((0, true, 0));
                    if !soft && info.size > prev.max(limit) {
                        self.fail(format!(
                            "HARD quota of {b}: {} bytes used, more than quota + one block ({limit}) and than before the segment ({prev})",
                            info.size
                        ));
                    }
                    self.sizes.insert(b, (info.size, false, 0));
                }
                Err(Error::NotFound(_)) if !exists => {}
                Err(e) => self.fail(format!("bucket {b}: {e}")),
            }
        }
    }
}
