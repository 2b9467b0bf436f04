//! Producing a query's answer: a [`Producer`] walks the engine's query iterator in
//! bounded steps (run on the blocking pool by `pump.rs`) and encodes what it finds as
//! record frames or NDJSON lines, in pieces counted in the memory budget.

use std::time::Duration;

use bytes::BufMut;
use bytes::{Bytes, BytesMut};
use serde::Serialize;
use tsblob_proto::framing::{
    put_end, put_entry_record_head, put_error, put_heartbeat, put_record_head,
};
use tsblob_storage::{Labels, Payload, QueryItem, QueryIter, Windows};

use super::page::{CHUNK, MAPPED_PIECE, OWN_PIECE};
use crate::http::budget::{Held, MemoryBudget};
use crate::http::errors::AppError;

/// Pages of index records (256 each) a step may scan without a match before it hands back,
/// and the longest it scans (a costly condition makes a page slow), so that the producer
/// notices a client that went away during a long scan and the stream sends its heartbeats,
/// and so that a step gives its place in the gate of steps (`blocking::Scans`) back soon:
/// with 250 ms, a query waiting behind 64 costly ones of another client waited up to 5 s
/// for its first step (2026-11-30, `reliability/costly_queries.py`).
pub(super) const IDLE_PAGES: u32 = 16;
pub(super) const IDLE_TIME: std::time::Duration = std::time::Duration::from_millis(50);

/// Records a step puts out between looks at its clock: a step also ends once it has run
/// [`IDLE_TIME`], matches or not. Review of 2026-11-30: the scan's bound restarts at each
/// match, so a condition matching a record every few milliseconds made one step run until
/// its page was full (thousands of records: seconds) while it held a place in the gate of
/// steps (`blocking::Scans`), and four such queries held every place. Every 16th record:
/// a clock read per record is ~1 % of a range read of 1 KiB records.
const CLOCK_EVERY: u32 = 16;

/// A step's clock: the step ends once it has run [`IDLE_TIME`], looked at every
/// [`CLOCK_EVERY`] records put out (the frame answer's and the MCAP export's steps).
pub(super) struct StepClock {
    started: std::time::Instant,
    put: u32,
}

impl StepClock {
    pub(super) fn start() -> StepClock {
        StepClock {
            started: std::time::Instant::now(),
            put: 0,
        }
    }

    /// Counts a record put out: whether the step has run its time (every
    /// [`CLOCK_EVERY`] records; `false` in between).
    pub(super) fn put_one(&mut self) -> bool {
        self.put += 1;
        self.put.is_multiple_of(CLOCK_EVERY) && self.over()
    }

    /// Whether the step has run its time.
    pub(super) fn over(&self) -> bool {
        self.started.elapsed() >= IDLE_TIME
    }
}

/// A step also ends once its pieces, mapped ones included, reach this many bytes. Mapped
/// payloads cost no memory of ours, so a step of them can be larger than `CHUNK`: fewer
/// hand-offs between the blocking pool and the response's task per byte (each costs
/// futex wake-ups and context switches: `docs/benchmarks/range-read-2026-11-23.md`).
const STEP: usize = 4 << 20;

/// A step also ends once its mapped pieces keep this many mappings alive (block windows of
/// up to `tsblob_storage::WINDOW_MAX`, or one frame up to `MAP_MAX`): a slice of 16 KiB
/// keeps its whole window mapped until it is written, so without it a step of records
/// alternating between blocks could keep a mapping per record. Records in block order
/// (any writer's) fill a step from 2–3 windows.
const WINDOWS: usize = 4;

/// What one production step yields.
pub(super) enum Step {
    More(Vec<Bytes>),
    /// A live tail caught up: the pieces, then wait for a commit before the next step (or
    /// until its settle time lets through the first record its walk left past its horizon,
    /// at this timestamp).
    Caught(Vec<Bytes>, Option<u64>),
    Last(Vec<Bytes>),
    /// The pieces before an error, then the error (sent as an error frame or line).
    Fail(Vec<Bytes>, AppError),
    Abort(std::io::Error),
}

/// The pieces of one step: heads and small records gathered in `buf` (one page), large
/// payloads and mapped ones kept as the buffers or mappings they are in. The page is handed
/// over once, frozen, and each gathered run between two pieces of their own is a slice of
/// it: a record of a large payload costs its head in the page and a slice of its buffer or
/// mapping, no copy and no allocation of its own.
#[derive(Default)]
struct Pieces {
    done: Vec<Piece>,
    buf: BytesMut,
    /// Where the part of `buf` not yet in `done` starts.
    cut: usize,
    /// Bytes of the pieces of their own.
    len: usize,
    /// Bytes of `done` that are mapped payloads (page cache: not memory of ours).
    borrowed: usize,
    /// Mappings the step's mapped pieces keep alive (counted at each change of mapping, so
    /// at least as many as there are), and the last one's
    /// `tsblob_storage::MappedPayload::mapping_id`.
    windows: usize,
    window: usize,
    /// The bytes at which the step is full: `STEP`, or `CHUNK` for a query's first step
    /// (run before the answer's status is sent: its time is the client's wait for the
    /// first byte).
    most: usize,
}

/// A piece of a step, in order.
enum Piece {
    /// A run of `Pieces::buf`.
    Gathered(std::ops::Range<usize>),
    /// A piece of its own, and the bytes of memory of ours it keeps alive (0 for a mapped
    /// payload: page cache; the capacity of the buffer it was read into, not only its length).
    Own(Bytes, u64),
}

impl Pieces {
    fn len(&self) -> usize {
        self.len + self.buf.len()
    }

    /// Bytes of ours the step holds (gathered, or in buffers read for it): all but the
    /// mapped payloads.
    fn held(&self) -> usize {
        self.len() - self.borrowed
    }

    /// Whether the step is full: `CHUNK` bytes held, `most` (`STEP`) in all, or `WINDOWS`
    /// mappings kept alive.
    fn full(&self) -> bool {
        self.held() >= CHUNK || self.len() >= self.most || self.windows >= WINDOWS
    }

    fn push(&mut self, data: Vec<u8>) {
        if data.len() < OWN_PIECE {
            self.buf.extend_from_slice(&data);
            return;
        }
        let cap = data.capacity() as u64;
        self.own(Bytes::from(data), cap);
    }

    /// A piece of its own, after what was gathered before it.
    fn own(&mut self, piece: Bytes, ours: u64) {
        self.gathered();
        self.len += piece.len();
        self.done.push(Piece::Own(piece, ours));
    }

    /// A record's payload: a mapped one of `MAPPED_PIECE` or more (a slice of its block's
    /// window), or a large slice of a tiered range, as a piece of its own, without a copy;
    /// a small one copied next to its head. (The step is written as one chunk of its
    /// pieces: `body::step_body`.)
    fn push_payload(&mut self, p: Payload) {
        match p {
            Payload::Memory(data) => self.push(data),
            Payload::Mapped(m) if m.as_ref().len() >= MAPPED_PIECE => {
                let id = m.mapping_id();
                if id != self.window {
                    self.windows += 1;
                    self.window = id;
                }
                self.borrowed += m.as_ref().len();
                self.own(Bytes::from_owner(m), 0);
            }
            Payload::Shared(s) if s.as_ref().len() >= OWN_PIECE => {
                let n = s.as_ref().len() as u64;
                self.own(Bytes::from_owner(s), n);
            }
            small => self.buf.extend_from_slice(small.as_ref()),
        }
    }

    /// Ends the run gathered in `buf` since the last piece of its own.
    fn gathered(&mut self) {
        if self.buf.len() > self.cut {
            self.done.push(Piece::Gathered(self.cut..self.buf.len()));
            self.cut = self.buf.len();
        }
    }

    /// The pieces, each of memory of ours carrying its share of `room` (the step's
    /// reservation in the memory budget) until the connection has written it. The page
    /// is counted once, at its capacity, until its last slice is written; a page mostly
    /// empty while the pool has none idle is copied out (counted at its length) and kept
    /// for the next step.
    fn finish(mut self, room: &mut Held) -> Vec<Bytes> {
        self.gathered();
        let buf = std::mem::take(&mut self.buf);
        let page = if buf.is_empty() {
            super::page::give_back(buf);
            Bytes::new()
        } else if buf.capacity() > 2 * buf.len() && !super::page::spare() {
            // Mostly empty, and no page idle in the pool: copied out (counted at its
            // length), so the page is the next step's and no fresh page is faulted in.
            // With a page idle, this one is handed over whole (counted at its capacity)
            // and comes back once written: no copy (a short query's whole answer,
            // `docs/benchmarks/short-pages-2026-11-27.md`).
            let copy = Bytes::copy_from_slice(&buf);
            super::page::give_back(buf);
            let n = copy.len() as u64;
            room.attach(copy, n)
        } else {
            let cap = buf.capacity() as u64;
            room.attach(super::page::freeze(buf), cap)
        };
        self.done
            .into_iter()
            .map(|piece| match piece {
                Piece::Gathered(run) => page.slice(run),
                Piece::Own(b, ours) if ours > 0 => room.attach(b, ours),
                Piece::Own(b, _) => b,
            })
            .collect()
    }
}

/// One NDJSON line of a `meta=true` answer.
#[derive(Serialize)]
struct MetaLine<'a> {
    ts: u64,
    /// Multi-entry answers only.
    #[serde(skip_serializing_if = "Option::is_none")]
    entry: Option<&'a str>,
    size: u64,
    content_type: &'a str,
    labels: &'a Labels,
}

pub(super) struct Producer {
    iter: QueryIter,
    /// A multi-entry query (even of one entry): its records name their entry, and its
    /// pages of index records are counted in the memory budget.
    many: bool,
    /// NDJSON metadata lines instead of record frames.
    meta: bool,
    pub(super) count: u64,
    /// The mapped block window payloads are sliced from.
    windows: Windows,
    pub(super) large: Option<(tsblob_storage::RecordReader, u64)>,
    /// A live tail: its settle time in µs (records newer than now minus it wait).
    follow: Option<u64>,
    /// The next step starts a new walk (a live tail woken by a commit or a timer).
    rearm: bool,
    /// A step ran already (the first is smaller: [`Pieces::most`]).
    stepped: bool,
    /// The entries (ids, sorted) that got records since the last walk: the next walk's.
    pub(super) changed: Vec<u32>,
    /// Damaged records skipped, reported before the end (`damage.rs`).
    skipped: crate::http::damage::Skipped,
    /// The next step's room in the memory budget (taken before the step, what it did
    /// not use given back after it).
    pub(super) room: Held,
    /// The query's pages of index records (one per entry), counted after each step.
    pages: Held,
}

impl Producer {
    /// A producer over `iter`, reporting damaged records to `skipped`, its first step's
    /// room in `budget` taken already (or yet to be covered) in `room`.
    pub(super) fn new(
        iter: QueryIter,
        many: bool,
        meta: bool,
        budget: &MemoryBudget,
        skipped: crate::http::damage::Skipped,
        room: Held,
    ) -> Producer {
        Producer {
            // Heads and metadata lines are written from the attrs the index records share
            // (`QueryItem::content_type`, `labels`): not copied into every item.
            iter: iter.shared_attrs(),
            many,
            meta,
            count: 0,
            windows: Windows::default(),
            large: None,
            follow: None,
            rearm: false,
            stepped: false,
            changed: Vec::new(),
            skipped,
            room,
            pages: budget.empty(),
        }
    }

    /// A step, then the budget brought up to date: the room it did not use given back,
    /// the query's pages counted as they are now.
    pub(super) fn counted_step(&mut self) -> Step {
        // A live tail whose entry was removed or renamed (or its bucket) since it began ends
        // before its next walk, waiting for the entry's lock (this runs on the blocking
        // pool). Bug (races probe of 2026-11-29): it was checked at heartbeats only, which a
        // busy tail never sends; meanwhile the tail, following the entry's id, streamed the
        // records written under the new name, labelled with the old one, past a token that
        // may read only the old bucket.
        if self.follow.is_some() {
            if let Some(name) = self.iter.removed_entry_waiting() {
                return Step::Fail(Vec::new(), entry_gone(name));
            }
        }
        let step = self.step();
        self.room.try_resize(0);
        // A query of one entry too: its page may hold records' own label sets, up to
        // `PAGE_INLINE_BYTES` in the engine.
        self.pages.set(self.iter.held_bytes());
        step
    }

    /// A live tail's end when an entry it follows was removed (or renamed) since it began:
    /// 404 `entry_not_found`, saying to follow again (an entry made again under the name is
    /// a new one, which this tail would never see).
    pub(super) fn removed_entry(&self) -> Option<AppError> {
        self.iter.removed_entry().map(entry_gone)
    }

    /// Drops the producer's own mapping of the block window it reads from (the next record
    /// maps its window again): while its client is not reading, a stream keeps mapped only
    /// what its unwritten pieces hold.
    pub(super) fn let_go_of_windows(&mut self) {
        self.windows = Windows::default();
    }

    /// Makes this a live tail: at the end of the records it reports `Step::Caught` and walks
    /// on from its cursor at the next step.
    pub(super) fn follow(&mut self, settle: Duration) {
        let settle = settle.as_micros() as u64;
        self.follow = Some(settle);
        let horizon = self.horizon();
        self.iter.resume(horizon);
    }

    /// The upper bound of a live tail's walk: timestamps below `now - settle` (all of them
    /// without a settle time).
    fn horizon(&self) -> u64 {
        match self.follow {
            Some(0) | None => u64::MAX,
            Some(settle) => tsblob_storage::now_micros().saturating_sub(settle),
        }
    }

    /// A heartbeat frame, or an `{"heartbeat": µs}` line.
    pub(super) fn heartbeat_piece(&self) -> Bytes {
        let now = tsblob_storage::now_micros();
        let mut b = BytesMut::new();
        if self.meta {
            b.extend_from_slice(format!("{{\"heartbeat\":{now}}}\n").as_bytes());
        } else {
            put_heartbeat(&mut b, now);
        }
        b.freeze()
    }

    /// An error as the stream ends it: an error frame, or an `{"error": ...}` line.
    pub(super) fn error_piece(&self, e: &AppError) -> Bytes {
        let mut b = BytesMut::new();
        if self.meta {
            b.extend_from_slice(&e.json_bytes());
            b.extend_from_slice(b"\n");
        } else {
            put_error(&mut b, &e.json_bytes());
        }
        b.freeze()
    }

    fn step(&mut self) -> Step {
        // Sized for a step's page (and the record that ends it) at once: grown by doubling
        // from empty, it costs a copy per doubling and up to twice its length. A page the
        // connection has written is reused (`page.rs`).
        let first = !std::mem::replace(&mut self.stepped, true);
        let mut out = Pieces {
            buf: super::page::take(),
            most: if first { CHUNK } else { STEP },
            ..Pieces::default()
        };
        let mut bound = tsblob_storage::ScanBound::pages_or_time(IDLE_PAGES, IDLE_TIME);
        let mut clock = StepClock::start();
        if std::mem::take(&mut self.rearm) {
            let horizon = self.horizon();
            let changed = std::mem::take(&mut self.changed);
            self.iter.resume_changed(horizon, &changed);
        }
        loop {
            if out.full() {
                return Step::More(out.finish(&mut self.room));
            }
            if self.large.is_some() {
                if let Err(e) = self.large_chunk(&mut out) {
                    return Step::Abort(e);
                }
                if clock.over() {
                    return Step::More(out.finish(&mut self.room));
                }
                continue;
            }
            let item = match self.iter.next_within(&mut bound) {
                None => {
                    // (What the walk left past its horizon, before `resume_changed` may
                    // arm a walk of it.)
                    let ahead = self.iter.ahead();
                    self.skipped.put(&mut out.buf, self.meta);
                    if self.follow.is_some() && self.iter.resume_changed(self.horizon(), &[]) {
                        self.rearm = true;
                        return Step::Caught(out.finish(&mut self.room), ahead);
                    }
                    if !self.meta {
                        put_end(&mut out.buf, self.count);
                    }
                    return Step::Last(out.finish(&mut self.room));
                }
                Some(Err(e)) => return self.fail(out, AppError::from(e)),
                Some(Ok(None)) => return Step::More(out.finish(&mut self.room)),
                Some(Ok(Some(item))) => item,
            };
            if let Err(e) = self.put_item(&mut out, &item) {
                return self.fail(out, e);
            }
            if clock.put_one() {
                return Step::More(out.finish(&mut self.room));
            }
        }
    }

    /// The next chunk of the large record being streamed ([`Producer::large`]) into `out`;
    /// its CRC checked after its last byte. An error cuts the stream.
    fn large_chunk(&mut self, out: &mut Pieces) -> Result<(), std::io::Error> {
        let Some((reader, left)) = self.large.as_mut() else {
            return Ok(());
        };
        let want = (CHUNK as u64).min(*left).max(1) as usize;
        let data = reader.read_chunk(want).inspect_err(|e| {
            crate::throttled!(warn, "query_stream_cut", "query stream cut: {e}");
        })?;
        if data.is_empty() {
            return Err(std::io::Error::other(
                "a record ended before its announced length",
            ));
        }
        *left = left.saturating_sub(data.len() as u64);
        out.push(data);
        if *left == 0 {
            if !matches!(reader.read_chunk(1).map(|d| d.is_empty()), Ok(true)) {
                crate::throttled!(
                    warn,
                    "query_stream_cut",
                    "query stream cut: a record failed its CRC check"
                );
                return Err(std::io::Error::other(
                    "a record failed its CRC check at its end",
                ));
            }
            self.large = None;
            self.count += 1;
        }
        Ok(())
    }

    /// A record found by the walk into `out`: its metadata line, or its frame with its
    /// payload (a large one is streamed by the next steps). A record removed since it was
    /// listed is left out, a damaged one skipped and counted; any other error ends the
    /// stream.
    fn put_item(&mut self, out: &mut Pieces, item: &QueryItem) -> Result<(), AppError> {
        let m = &item.meta;
        if self.meta {
            let line = MetaLine {
                ts: m.ts,
                entry: self.many.then(|| item.entry()),
                size: m.size,
                content_type: item.content_type(),
                labels: item.labels(),
            };
            let mut w = (&mut out.buf).writer();
            serde_json::to_writer(&mut w, &line)
                .map_err(|e| AppError::internal(format!("encoding metadata: {e}")))?;
            out.buf.extend_from_slice(b"\n");
            self.count += 1;
            return Ok(());
        }
        let err = match item.payload_in(&mut self.windows) {
            Ok(Some(data)) => {
                self.put_head(&mut out.buf, item, data.len() as u64);
                out.push_payload(data);
                self.count += 1;
                return Ok(());
            }
            Ok(None) => match item.reader() {
                Ok(r) => {
                    self.put_head(&mut out.buf, item, m.size);
                    self.large = Some((r, m.size));
                    return Ok(());
                }
                Err(e) => e,
            },
            Err(e) => e,
        };
        match err {
            tsblob_storage::Error::NotFound(_) => Ok(()),
            e => self.skip_damaged(item, e).map_or(Ok(()), Err),
        }
    }

    /// A record frame's head: kind 4 (naming the entry) in a multi-entry answer.
    fn put_head(&self, out: &mut BytesMut, item: &QueryItem, len: u64) {
        let (ts, ct, labels) = (item.meta.ts, item.content_type(), item.labels());
        if self.many {
            put_entry_record_head(out, item.entry(), ts, ct, labels, len);
        } else {
            put_record_head(out, ts, ct, labels, len);
        }
    }

    /// Skips and counts a record whose payload is damaged; any other error is returned,
    /// to end the stream.
    fn skip_damaged(&mut self, item: &QueryItem, e: tsblob_storage::Error) -> Option<AppError> {
        let Some(code) = crate::http::damage::damage_code(&e) else {
            return Some(AppError::from(e));
        };
        let entry = self.many.then(|| item.entry());
        self.skipped.add(entry, item.meta.ts, code, &e);
        None
    }

    /// Ends the stream with an error, after the report of what was skipped before it.
    fn fail(&mut self, mut out: Pieces, e: AppError) -> Step {
        crate::throttled!(
            warn,
            "query_stream_cut",
            "query stream ended by an error: {e}"
        );
        self.skipped.put(&mut out.buf, self.meta);
        Step::Fail(out.finish(&mut self.room), e)
    }
}

/// The error ending a live tail whose entry `name` was removed or renamed.
fn entry_gone(name: &str) -> AppError {
    AppError::new(
        axum::http::StatusCode::NOT_FOUND,
        tsblob_proto::ErrorCode::EntryNotFound,
        format!(
            "entry {name:?} was removed (or renamed) while followed: follow again to see an entry made under its name"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::query::parse_query;
    use tsblob_storage::{BatchRecord, BucketSettings, Store, StoreOptions, WriteMeta};

    #[test]
    fn a_scan_without_matches_hands_back_every_few_pages() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let n = 20_000u64;
        let batch: Vec<BatchRecord> = (0..n)
            .map(|ts| BatchRecord {
                meta: WriteMeta {
                    labels: [("n".to_string(), ts.to_string())].into(),
                    ..WriteMeta::at(ts)
                },
                data: vec![1; 10],
            })
            .collect();
        s.write_batch("b", "e", batch).unwrap();
        let r = parse_query(Some(&format!(
            "when={}",
            form_urlencoded::byte_serialize(br#"{"&n": {"$gt": 1000000}}"#).collect::<String>()
        )))
        .unwrap();
        let budget = MemoryBudget::default();
        let mut p = producer(s.query("b", "e", &r.query).unwrap(), &budget);
        let mut steps = 0;
        loop {
            steps += 1;
            match p.step() {
                Step::More(pieces) => assert!(pieces.is_empty()),
                Step::Last(_) => break,
                _ => panic!("unexpected step"),
            }
        }
        assert_eq!(budget.used(), 0, "nothing held once the pieces are dropped");
        // 20,000 records = 79 pages of 256: a hand-back every IDLE_PAGES pages
        assert_eq!(
            steps,
            (n as usize).div_ceil(256).div_ceil(IDLE_PAGES as usize)
        );
    }

    /// A store with `n` records of `size` bytes in entry `e`, `per_block` records a block.
    fn store_of(n: u64, size: usize, per_block: u64) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let settings = BucketSettings {
            max_block_records: per_block,
            ..BucketSettings::default()
        };
        s.create_bucket("b", settings).unwrap();
        let batch: Vec<BatchRecord> = (0..n)
            .map(|ts| BatchRecord {
                meta: WriteMeta::at(ts),
                data: vec![ts as u8; size],
            })
            .collect();
        s.write_batch("b", "e", batch).unwrap();
        (dir, s)
    }

    /// A frame answer's producer over `iter` (one entry), its room not yet covered.
    fn producer(iter: QueryIter, budget: &MemoryBudget) -> Producer {
        Producer::new(
            iter,
            false,
            false,
            budget,
            Default::default(),
            budget.empty(),
        )
    }

    /// Every step of a whole-entry query, until the last.
    fn steps_of(s: &Store, budget: &MemoryBudget) -> Vec<Vec<Bytes>> {
        let r = parse_query(None).unwrap();
        let mut p = producer(s.query("b", "e", &r.query).unwrap(), budget);
        let mut steps = Vec::new();
        loop {
            match p.step() {
                Step::More(pieces) => steps.push(pieces),
                Step::Last(pieces) => {
                    steps.push(pieces);
                    return steps;
                }
                _ => panic!("unexpected step"),
            }
        }
    }

    #[test]
    fn a_large_mapped_payload_is_sent_from_its_mapping_and_heads_from_one_page() {
        let (n, size) = (150u64, 20 << 10);
        let (_dir, s) = store_of(n, size, 1 << 20);
        let budget = MemoryBudget::default();
        let steps = steps_of(&s, &budget);
        let pieces: Vec<&Bytes> = steps.iter().flatten().collect();
        // each record a head (a slice of the step's page) and its payload (a slice of its
        // block's window), then the end frame
        let payloads: Vec<&&Bytes> = pieces.iter().filter(|b| b.len() == size).collect();
        assert_eq!(payloads.len() as u64, n, "one piece per payload");
        for (ts, p) in payloads.iter().enumerate() {
            assert!(p.iter().all(|&b| b == ts as u8), "record {ts} in order");
        }
        // 150 records of 20 KiB are two steps (mapped bytes are not counted in CHUNK): the
        // first stops at CHUNK in all (the client waits for it before any byte), the
        // second runs to the end
        assert_eq!(steps.len(), 2);
        let first: usize = steps[0].iter().map(Bytes::len).sum();
        assert!(
            (CHUNK..CHUNK + size + 4096).contains(&first),
            "first step {first}"
        );
        assert_eq!(pieces.len() as u64, 2 * n + 1);
        // the heads (and the end frame) of a step are runs of one page, one after the
        // other, not each copied into a buffer of its own
        for step in &steps {
            let heads: Vec<&Bytes> = step.iter().filter(|b| b.len() != size).collect();
            for w in heads.windows(2) {
                assert_eq!(
                    w[0].as_ptr() as usize + w[0].len(),
                    w[1].as_ptr() as usize,
                    "heads in one page"
                );
            }
        }
        drop(steps);
        assert_eq!(budget.used(), 0, "nothing held once the pieces are dropped");
    }

    /// A short answer's page is handed over whole only while the pool has a page idle:
    /// answers a client never reads (each holds its page until written) pin at most the
    /// pool's idle pages whole, and every answer after them is a copy of its length. So
    /// 200 unread answers of ~31 KiB hold ~200 × 31 KiB plus a few pages of the budget,
    /// never 200 pages (55 MiB).
    #[test]
    fn unread_short_answers_pin_at_most_the_pools_idle_pages_whole() {
        let (_dir, s) = store_of(31, 1000, 1 << 20);
        let budget = MemoryBudget::default();
        let held: Vec<Vec<Vec<Bytes>>> = (0..200).map(|_| steps_of(&s, &budget)).collect();
        let answer: usize = held[0].iter().flatten().map(Bytes::len).sum();
        assert!(answer > 31_000 && answer < 40_000, "{answer}");
        // (Other tests of this binary take and give back pages of the same pool meanwhile:
        // the bound leaves room for them.)
        let bound = 200 * answer as u64 + 40 * super::super::page::CAPACITY as u64;
        assert!(
            budget.used() <= bound,
            "{} bytes held for 200 answers of {answer} bytes",
            budget.used()
        );
        drop(held);
        assert_eq!(budget.used(), 0, "nothing held once the pieces are dropped");
    }

    #[test]
    fn a_mapped_payload_of_4_kib_is_sent_from_its_mapping_and_a_shorter_one_copied() {
        for (size, own) in [(MAPPED_PIECE, true), (MAPPED_PIECE - 1, false)] {
            let n = 100u64;
            let (_dir, s) = store_of(n, size, 1 << 20);
            let budget = MemoryBudget::default();
            let steps = steps_of(&s, &budget);
            let pieces: Vec<&Bytes> = steps.iter().flatten().collect();
            let alone = pieces.iter().filter(|b| b.len() == size).count() as u64;
            assert_eq!(alone, if own { n } else { 0 }, "payloads of {size} bytes");
            let bytes: usize = pieces.iter().map(|b| b.len()).sum();
            assert!(bytes > n as usize * size, "every payload sent");
        }
    }

    #[test]
    fn a_step_keeps_at_most_windows_mappings_alive_when_records_alternate_blocks() {
        // 2 records a block: each block is a window of its own, so every second record
        // maps another one
        let (n, size) = (40u64, 20 << 10);
        let (_dir, s) = store_of(n, size, 2);
        let budget = MemoryBudget::default();
        let steps = steps_of(&s, &budget);
        let mut records = 0;
        for step in &steps {
            let mapped = step.iter().filter(|b| b.len() == size).count();
            assert!(
                mapped <= 2 * WINDOWS,
                "{mapped} payloads from more than {WINDOWS} windows"
            );
            records += mapped;
        }
        assert_eq!(records as u64, n, "every payload sent from its mapping");
        assert!(steps.len() as u64 >= n / (2 * WINDOWS as u64));
    }
}
