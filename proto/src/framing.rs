//! The record framing of batch writes and query streams (`application/x-tsblob-records`).
//!
//! `docs/api.md` draws the frames byte by byte; this module is their only implementation in
//! Rust, shared by the server (parsing batches, writing query streams), the CLI client and
//! the bench (`compare/`). The decoder is incremental: it is fed whatever bytes arrived and
//! yields events as soon as they are complete, so neither side ever has to hold a whole
//! body, and a payload is handed out in the pieces it arrived in.

use crate::{LabelPairs, Labels, DEFAULT_CONTENT_TYPE};
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The media type of framed bodies.
pub const MEDIA_TYPE: &str = "application/x-tsblob-records";
/// The timestamp that asks the server to assign "now" in a batch.
pub const TS_NOW: u64 = u64::MAX;

pub const KIND_END: u8 = 0;
pub const KIND_RECORD: u8 = 1;
pub const KIND_ERROR: u8 = 2;
/// A live tail (`follow=true`) keeping its connection alive: the server's time, u64 LE µs.
pub const KIND_HEARTBEAT: u8 = 3;
/// A record of a multi-entry query: a record frame whose head is followed by the entry's
/// name (u16 LE length, then the name) before the content type.
pub const KIND_ENTRY_RECORD: u8 = 4;
/// The records a query skipped because their stored bytes are damaged: u32 LE length, then
/// a JSON document `{"skipped": [{"entry", "ts", "code"}...], "skipped_count": n}`. Sent
/// once, just before the end (or error) frame, and only when something was skipped.
pub const KIND_SKIPPED: u8 = 5;
/// Bytes of a heartbeat frame.
pub const HEARTBEAT_LEN: usize = 9;
/// Bytes of the fixed part of a record frame.
pub const RECORD_HEAD_LEN: usize = 25;
/// Labels and error documents larger than this are refused: they are metadata, and a
/// bogus length must not make the decoder wait for (or allocate) gigabytes.
pub const MAX_META_LEN: usize = 1 << 20;

/// The head of a record frame: everything but the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameHead {
    /// The entry, in the answer of a multi-entry query (frame kind 4); `None` otherwise.
    pub entry: Option<String>,
    pub ts: u64,
    pub content_type: String,
    pub labels: Labels,
    pub payload_len: u64,
}

/// Appends the head of a record frame; the caller appends `payload_len` bytes after it.
pub fn put_record_head(
    out: &mut BytesMut,
    ts: u64,
    content_type: &str,
    labels: &(impl LabelPairs + ?Sized),
    payload_len: u64,
) {
    put_head(out, None, ts, content_type, labels, payload_len);
}

/// Appends the head of a record frame that names its entry (kind 4, multi-entry queries).
pub fn put_entry_record_head(
    out: &mut BytesMut,
    entry: &str,
    ts: u64,
    content_type: &str,
    labels: &(impl LabelPairs + ?Sized),
    payload_len: u64,
) {
    put_head(out, Some(entry), ts, content_type, labels, payload_len);
}

fn put_head(
    out: &mut BytesMut,
    entry: Option<&str>,
    ts: u64,
    content_type: &str,
    labels: &(impl LabelPairs + ?Sized),
    payload_len: u64,
) {
    let ct: &str = if content_type == DEFAULT_CONTENT_TYPE {
        ""
    } else {
        content_type
    };
    let entry_len = entry.map_or(0, |e| 2 + e.len());
    // One walk of the labels: their count and length are patched into the fixed head
    // once written (the labels' bytes are reserved by a guess; `BytesMut` grows if short).
    out.reserve(RECORD_HEAD_LEN + entry_len + ct.len() + LABELS_GUESS);
    let start = out.len();
    out.put_u8(if entry.is_some() {
        KIND_ENTRY_RECORD
    } else {
        KIND_RECORD
    });
    out.put_u64_le(ts);
    out.put_u16_le(ct.len() as u16);
    out.put_u16_le(0); // label count, patched below
    out.put_u32_le(0); // labels' length, patched below
    out.put_u64_le(payload_len);
    if let Some(e) = entry {
        out.put_u16_le(e.len() as u16);
        out.put_slice(e.as_bytes());
    }
    out.put_slice(ct.as_bytes());
    let labels_at = out.len();
    let mut label_count: usize = 0;
    for (k, v) in labels.label_pairs() {
        out.put_u16_le(k.len() as u16);
        out.put_slice(k.as_bytes());
        out.put_u16_le(v.len() as u16);
        out.put_slice(v.as_bytes());
        label_count += 1;
    }
    let labels_len = out.len() - labels_at;
    out[start + 11..start + 13].copy_from_slice(&(label_count as u16).to_le_bytes());
    out[start + 13..start + 17].copy_from_slice(&(labels_len as u32).to_le_bytes());
}

/// Bytes reserved for a head's labels before they are walked (a few short labels).
const LABELS_GUESS: usize = 64;

/// Appends a whole record frame.
pub fn put_record(
    out: &mut BytesMut,
    ts: u64,
    content_type: &str,
    labels: &(impl LabelPairs + ?Sized),
    data: &[u8],
) {
    put_record_head(out, ts, content_type, labels, data.len() as u64);
    out.put_slice(data);
}

/// Appends the end frame that closes a stream of `count` record frames.
pub fn put_end(out: &mut BytesMut, count: u64) {
    out.put_u8(KIND_END);
    out.put_u64_le(count);
}

/// Appends a heartbeat frame carrying the server's time (µs).
pub fn put_heartbeat(out: &mut BytesMut, now: u64) {
    out.put_u8(KIND_HEARTBEAT);
    out.put_u64_le(now);
}

/// Appends an error frame carrying an `{"error": {...}}` document.
pub fn put_error(out: &mut BytesMut, json: &[u8]) {
    out.put_u8(KIND_ERROR);
    out.put_u32_le(json.len() as u32);
    out.put_slice(json);
}

/// Appends a skipped-records frame (kind 5) carrying its JSON document.
pub fn put_skipped(out: &mut BytesMut, json: &[u8]) {
    out.put_u8(KIND_SKIPPED);
    out.put_u32_le(json.len() as u32);
    out.put_slice(json);
}

/// What the decoder found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A record frame begins; `payload_len` bytes of [`Event::Data`] follow.
    Record(FrameHead),
    /// A piece of the current record's payload.
    Data(Bytes),
    /// The end frame, with the record count it announces.
    End(u64),
    /// An error frame with its JSON document.
    Error(Bytes),
    /// A heartbeat of a live tail, with the server's time (µs).
    Heartbeat(u64),
    /// The records the query skipped as damaged (frame kind 5), as its JSON document
    /// `{"skipped": [{"entry", "ts", "code"}...], "skipped_count": n}`; the stream goes on
    /// (an end or error frame follows).
    Skipped(Bytes),
}

/// A framing violation; the message says where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError(pub String);

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FrameError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Payload { remaining: u64 },
    Done,
}

/// What a look at the bytes in hand gives: a complete event and the bytes it took, a
/// complete and checked record head (its bytes are the first [`HeadAt::total`]), or the
/// total number of bytes needed before the frame head can be decoded (more than in hand).
enum Step {
    Need(usize),
    Event(Event, usize),
    Record(HeadAt),
}

/// A record frame head checked in place (entry name and labels UTF-8, content type
/// printable ASCII, labels' count and length agreeing): where its parts are, nothing copied.
#[derive(Debug, Clone)]
struct HeadAt {
    ts: u64,
    payload_len: u64,
    /// The entry name's bytes (kind-4 frames).
    entry: Option<std::ops::Range<usize>>,
    ct: std::ops::Range<usize>,
    labels: std::ops::Range<usize>,
    label_count: usize,
    /// Bytes of the head.
    total: usize,
}

impl HeadAt {
    /// The head with its entry, content type and labels as owned strings. `buf` holds the
    /// head (checked by [`Decoder::head`]: the conversions below cannot fail on it).
    fn head(&self, buf: &[u8]) -> FrameHead {
        FrameHead {
            entry: self
                .entry
                .clone()
                .map(|r| String::from_utf8_lossy(&buf[r]).into_owned()),
            ts: self.ts,
            content_type: content_type_of(&buf[self.ct.clone()]),
            labels: self.labels(buf),
            payload_len: self.payload_len,
        }
    }

    /// The head's labels, decoded (checked already when the head was: no error here).
    fn labels(&self, buf: &[u8]) -> Labels {
        let mut labels = Labels::new();
        let _ = walk_labels(&buf[self.labels.clone()], self.label_count, |k, v| {
            labels.insert(k.to_string(), v.to_string());
        });
        labels
    }
}

/// The content type a frame's bytes name (empty: the default).
fn content_type_of(ct: &[u8]) -> String {
    if ct.is_empty() {
        DEFAULT_CONTENT_TYPE.to_string()
    } else {
        String::from_utf8_lossy(ct).into_owned()
    }
}

/// A record frame's head with its content type and labels still encoded as they arrived
/// ([`ChunkDecoder::next_raw`]): checked like any head, but nothing is allocated for them
/// until asked, so a receiver can recognise records that share their content type and
/// labels by their bytes ([`RawHead::meta_bytes`]) and decode them once.
#[derive(Debug, Clone)]
pub struct RawHead {
    at: HeadAt,
    /// The head's bytes (a slice of the received chunk, or of the gathered partial head).
    bytes: Bytes,
}

impl RawHead {
    pub fn ts(&self) -> u64 {
        self.at.ts
    }

    pub fn payload_len(&self) -> u64 {
        self.at.payload_len
    }

    /// True for a kind-4 frame (it names an entry).
    pub fn names_entry(&self) -> bool {
        self.at.entry.is_some()
    }

    /// The content type's bytes as sent (empty: the default).
    pub fn content_type_bytes(&self) -> &[u8] {
        &self.bytes[self.at.ct.clone()]
    }

    /// The labels' bytes as sent (the framing's layout: key and value, each with its u16
    /// LE length, per label).
    pub fn label_bytes(&self) -> &[u8] {
        &self.bytes[self.at.labels.clone()]
    }

    /// The number of labels.
    pub fn label_count(&self) -> usize {
        self.at.label_count
    }

    /// The content type and labels' bytes, one after the other: two heads with equal
    /// `meta_bytes` and equal [`RawHead::content_type_bytes`] lengths have the same content
    /// type and labels.
    pub fn meta_bytes(&self) -> &[u8] {
        &self.bytes[self.at.ct.start..self.at.labels.end]
    }

    /// The content type (the default when none was sent).
    pub fn content_type(&self) -> String {
        content_type_of(self.content_type_bytes())
    }

    /// The labels, decoded (checked when the head was: this cannot fail).
    pub fn labels(&self) -> Labels {
        self.at.labels(&self.bytes)
    }

    /// The head with owned strings, as [`ChunkDecoder::next_event`] gives it.
    pub fn head(&self) -> FrameHead {
        self.at.head(&self.bytes)
    }
}

/// What [`ChunkDecoder::next_raw`] found: a record head with its metadata still encoded,
/// or any other event (never [`Event::Record`]).
#[derive(Debug, Clone)]
pub enum RawEvent {
    Record(RawHead),
    Other(Event),
}

/// An incremental decoder. Feed it by appending to a `BytesMut` and call
/// [`Decoder::next`] until it returns `Ok(None)` (more bytes needed). A client that
/// receives `Bytes` chunks uses [`ChunkDecoder`] instead, which hands payloads on
/// without copying them.
#[derive(Debug)]
pub struct Decoder {
    state: State,
    /// Record frames seen so far (for messages and the end-frame check).
    records: u64,
    /// Bytes consumed so far, for error positions.
    offset: u64,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder {
            state: State::Head,
            records: 0,
            offset: 0,
        }
    }

    /// Record frames whose head has been decoded.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// True once an end or error frame was decoded.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// True between frames (not inside a payload).
    pub fn at_frame_boundary(&self) -> bool {
        !matches!(self.state, State::Payload { .. })
    }

    fn fail<T>(&self, what: impl std::fmt::Display) -> Result<T, FrameError> {
        Err(FrameError(format!(
            "at byte {} (record frame {}): {what}",
            self.offset,
            self.records + 1
        )))
    }

    /// The next complete event in `buf`, consuming its bytes; `Ok(None)` if more are needed.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Event>, FrameError> {
        match self.state {
            State::Done => self.after_end(buf.is_empty()),
            State::Payload { .. } => Ok(self
                .take_payload(buf.len())
                .map(|n| Event::Data(buf.split_to(n).freeze()))),
            State::Head => match self.head(buf)? {
                Step::Need(_) => Ok(None),
                Step::Event(event, used) => {
                    buf.advance(used);
                    Ok(Some(event))
                }
                Step::Record(at) => {
                    let head = at.head(buf);
                    buf.advance(at.total);
                    Ok(Some(Event::Record(head)))
                }
            },
        }
    }

    fn after_end(&self, nothing_left: bool) -> Result<Option<Event>, FrameError> {
        if nothing_left {
            Ok(None)
        } else {
            self.fail("bytes after the end frame: nothing may follow it")
        }
    }

    /// In a payload with `available` bytes in hand: how many of them belong to it (`None`
    /// if there are none), the state moved past them.
    fn take_payload(&mut self, available: usize) -> Option<usize> {
        let State::Payload { remaining } = self.state else {
            return None;
        };
        if available == 0 {
            return None;
        }
        let n = (available as u64).min(remaining) as usize;
        self.offset += n as u64;
        let left = remaining - n as u64;
        self.state = if left == 0 {
            State::Head
        } else {
            State::Payload { remaining: left }
        };
        Some(n)
    }

    fn head(&mut self, buf: &[u8]) -> Result<Step, FrameError> {
        let Some(&kind) = buf.first() else {
            return Ok(Step::Need(1));
        };
        match kind {
            KIND_END => {
                if buf.len() < 9 {
                    return Ok(Step::Need(9));
                }
                let count = (&buf[1..9]).get_u64_le();
                self.offset += 9;
                self.state = State::Done;
                Ok(Step::Event(Event::End(count), 9))
            }
            KIND_ERROR | KIND_SKIPPED => {
                let what = if kind == KIND_ERROR { "error" } else { "skipped" };
                if buf.len() < 5 {
                    return Ok(Step::Need(5));
                }
                let len = u32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                if len > MAX_META_LEN {
                    return self.fail(format!("{what} frame of {len} bytes is too large"));
                }
                if buf.len() < 5 + len {
                    return Ok(Step::Need(5 + len));
                }
                let json = Bytes::copy_from_slice(&buf[5..5 + len]);
                self.offset += 5 + len as u64;
                if kind == KIND_SKIPPED {
                    return Ok(Step::Event(Event::Skipped(json), 5 + len));
                }
                self.state = State::Done;
                Ok(Step::Event(Event::Error(json), 5 + len))
            }
            KIND_HEARTBEAT => {
                if buf.len() < HEARTBEAT_LEN {
                    return Ok(Step::Need(HEARTBEAT_LEN));
                }
                let now = (&buf[1..HEARTBEAT_LEN]).get_u64_le();
                self.offset += HEARTBEAT_LEN as u64;
                Ok(Step::Event(Event::Heartbeat(now), HEARTBEAT_LEN))
            }
            KIND_RECORD | KIND_ENTRY_RECORD => self.record_head(buf, kind == KIND_ENTRY_RECORD),
            other => self.fail(format!(
                "unknown frame kind {other:#04x}: expected 0x01 (record), 0x00 (end), 0x02 (error), 0x03 (heartbeat), 0x04 (record with entry) or 0x05 (skipped records)"
            )),
        }
    }

    fn record_head(&mut self, buf: &[u8], with_entry: bool) -> Result<Step, FrameError> {
        if buf.len() < RECORD_HEAD_LEN {
            return Ok(Step::Need(RECORD_HEAD_LEN));
        }
        // The entry name of a kind-4 frame sits between the fixed head and the content type.
        let entry_len = if with_entry {
            if buf.len() < RECORD_HEAD_LEN + 2 {
                return Ok(Step::Need(RECORD_HEAD_LEN + 2));
            }
            2 + u16::from_le_bytes([buf[RECORD_HEAD_LEN], buf[RECORD_HEAD_LEN + 1]]) as usize
        } else {
            0
        };
        let mut fixed = &buf[1..RECORD_HEAD_LEN];
        let ts = fixed.get_u64_le();
        let ct_len = fixed.get_u16_le() as usize;
        let label_count = fixed.get_u16_le() as usize;
        let labels_len = fixed.get_u32_le() as usize;
        let payload_len = fixed.get_u64_le();
        if labels_len > MAX_META_LEN {
            return self.fail(format!(
                "labels length {labels_len} is over the {MAX_META_LEN}-byte limit"
            ));
        }
        let total = RECORD_HEAD_LEN + entry_len + ct_len + labels_len;
        if buf.len() < total {
            return Ok(Step::Need(total));
        }
        let whole = &buf[..total];
        let entry = if with_entry {
            let r = RECORD_HEAD_LEN + 2..RECORD_HEAD_LEN + entry_len;
            if std::str::from_utf8(&whole[r.clone()]).is_err() {
                return self.fail("entry name is not UTF-8");
            }
            Some(r)
        } else {
            None
        };
        let at = RECORD_HEAD_LEN + entry_len;
        if !whole[at..at + ct_len]
            .iter()
            .all(|b| (0x20..0x7f).contains(b))
        {
            return self.fail("content type is not printable ASCII");
        }
        if let Err(e) = walk_labels(&whole[at + ct_len..], label_count, |_, _| {}) {
            return self.fail(e);
        }
        self.offset += total as u64;
        self.records += 1;
        self.state = if payload_len == 0 {
            State::Head
        } else {
            State::Payload {
                remaining: payload_len,
            }
        };
        Ok(Step::Record(HeadAt {
            ts,
            payload_len,
            entry,
            ct: at..at + ct_len,
            labels: at + ct_len..total,
            label_count,
            total,
        }))
    }
}

/// The [`Decoder`] for a client reading a response as `Bytes` chunks: [`ChunkDecoder::push`]
/// each chunk, then call [`ChunkDecoder::next_event`] until it returns `Ok(None)`. Payload pieces
/// are slices of the pushed chunks (no copy, so gigabytes can be checked as they stream);
/// only a frame head cut between two chunks is gathered in a small buffer.
#[derive(Debug, Default)]
pub struct ChunkDecoder {
    dec: Decoder,
    /// The start of a frame head whose end has not arrived yet.
    partial: BytesMut,
    /// What is left of the pushed chunk.
    input: Bytes,
}

/// A step of the [`ChunkDecoder`]: an event, or a checked record head and its bytes.
enum Found {
    Event(Event),
    Record(HeadAt, Bytes),
}

impl ChunkDecoder {
    pub fn new() -> ChunkDecoder {
        ChunkDecoder::default()
    }

    /// Adds received bytes. Push when [`ChunkDecoder::next_event`] has returned `Ok(None)` (the
    /// previous chunk is used up); otherwise the unread rest is joined with `chunk` (a copy).
    pub fn push(&mut self, chunk: Bytes) {
        if self.input.is_empty() {
            self.input = chunk;
        } else {
            let mut joined = BytesMut::with_capacity(self.input.len() + chunk.len());
            joined.extend_from_slice(&self.input);
            joined.extend_from_slice(&chunk);
            self.input = joined.freeze();
        }
    }

    /// The next complete event; `Ok(None)` when the pushed bytes are used up.
    pub fn next_event(&mut self) -> Result<Option<Event>, FrameError> {
        Ok(self.step()?.map(|f| match f {
            Found::Event(e) => e,
            Found::Record(at, bytes) => Event::Record(at.head(&bytes)),
        }))
    }

    /// As [`ChunkDecoder::next_event`], with a record's head handed out with its content
    /// type and labels still encoded ([`RawHead`]: no string or map allocated for them).
    pub fn next_raw(&mut self) -> Result<Option<RawEvent>, FrameError> {
        Ok(self.step()?.map(|f| match f {
            Found::Event(e) => RawEvent::Other(e),
            Found::Record(at, bytes) => RawEvent::Record(RawHead { at, bytes }),
        }))
    }

    fn step(&mut self) -> Result<Option<Found>, FrameError> {
        loop {
            if !self.partial.is_empty() {
                // A head begun in an earlier chunk: take just the bytes it still needs.
                match self.dec.head(&self.partial)? {
                    Step::Event(event, used) => {
                        self.partial.advance(used);
                        return Ok(Some(Found::Event(event)));
                    }
                    Step::Record(at) => {
                        let bytes = self.partial.split_to(at.total).freeze();
                        return Ok(Some(Found::Record(at, bytes)));
                    }
                    Step::Need(total) => {
                        if self.input.is_empty() {
                            return Ok(None);
                        }
                        let take = (total - self.partial.len()).min(self.input.len());
                        self.partial.extend_from_slice(&self.input.split_to(take));
                        continue;
                    }
                }
            }
            return match self.dec.state {
                State::Done => Ok(self.dec.after_end(self.input.is_empty())?.map(Found::Event)),
                State::Payload { .. } => Ok(self
                    .dec
                    .take_payload(self.input.len())
                    .map(|n| Found::Event(Event::Data(self.input.split_to(n))))),
                State::Head => {
                    if self.input.is_empty() {
                        return Ok(None);
                    }
                    match self.dec.head(&self.input)? {
                        Step::Event(event, used) => {
                            self.input.advance(used);
                            Ok(Some(Found::Event(event)))
                        }
                        Step::Record(at) => {
                            let bytes = self.input.split_to(at.total);
                            Ok(Some(Found::Record(at, bytes)))
                        }
                        Step::Need(_) => {
                            self.partial.extend_from_slice(&self.input);
                            self.input.clear();
                            Ok(None)
                        }
                    }
                }
            };
        }
    }

    /// Record frames whose head has been decoded.
    pub fn records(&self) -> u64 {
        self.dec.records()
    }

    /// True once an end or error frame was decoded.
    pub fn is_done(&self) -> bool {
        self.dec.is_done()
    }

    /// True between frames (not inside a payload).
    pub fn at_frame_boundary(&self) -> bool {
        self.dec.at_frame_boundary()
    }

    /// Bytes pushed but not yet decoded (a partial head, or the unread rest of a chunk).
    pub fn buffered(&self) -> usize {
        self.partial.len() + self.input.len()
    }
}

/// Walks `count` labels of the framing's layout in `b` (which they must fill exactly),
/// handing each key and value to `each`; says what is wrong otherwise.
fn walk_labels<'b>(
    mut b: &'b [u8],
    count: usize,
    mut each: impl FnMut(&'b str, &'b str),
) -> Result<(), String> {
    let text = |b: &mut &'b [u8], what: &str| -> Result<&'b str, String> {
        if b.len() < 2 {
            return Err(format!("labels end inside a {what} length"));
        }
        let n = b.get_u16_le() as usize;
        if b.len() < n {
            return Err(format!("labels end inside a {what}"));
        }
        let (s, rest) = b.split_at(n);
        *b = rest;
        std::str::from_utf8(s).map_err(|_| format!("a label {what} is not UTF-8"))
    };
    for _ in 0..count {
        let k = text(&mut b, "key")?;
        let v = text(&mut b, "value")?;
        each(k, v);
    }
    if !b.is_empty() {
        return Err(format!(
            "labels length does not match: {} bytes left after {count} labels",
            b.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Decodes everything, feeding one byte at a time to exercise every partial state.
    fn decode_bytewise(bytes: &[u8]) -> Result<Vec<Event>, FrameError> {
        let mut d = Decoder::new();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for b in bytes {
            buf.put_u8(*b);
            while let Some(e) = d.next(&mut buf)? {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// The three-pass head encoder this module had before the one-pass one (count and
    /// length walked first, then the labels' bytes): the reference for its output.
    fn put_head_three_passes(
        out: &mut BytesMut,
        entry: Option<&str>,
        ts: u64,
        content_type: &str,
        labels: &(impl LabelPairs + ?Sized),
        payload_len: u64,
    ) {
        let ct: &str = if content_type == DEFAULT_CONTENT_TYPE {
            ""
        } else {
            content_type
        };
        let labels_len: usize = labels
            .label_pairs()
            .map(|(k, v)| 4 + k.len() + v.len())
            .sum();
        let label_count = labels.label_pairs().count();
        out.put_u8(if entry.is_some() {
            KIND_ENTRY_RECORD
        } else {
            KIND_RECORD
        });
        out.put_u64_le(ts);
        out.put_u16_le(ct.len() as u16);
        out.put_u16_le(label_count as u16);
        out.put_u32_le(labels_len as u32);
        out.put_u64_le(payload_len);
        if let Some(e) = entry {
            out.put_u16_le(e.len() as u16);
            out.put_slice(e.as_bytes());
        }
        out.put_slice(ct.as_bytes());
        for (k, v) in labels.label_pairs() {
            out.put_u16_le(k.len() as u16);
            out.put_slice(k.as_bytes());
            out.put_u16_le(v.len() as u16);
            out.put_slice(v.as_bytes());
        }
    }

    #[test]
    fn one_pass_head_writes_the_bytes_of_the_three_pass_encoder() {
        let long = "v".repeat(300); // longer than the labels' first reservation
        let many: Vec<(String, String)> = (0..40)
            .map(|i| (format!("k{i}"), format!("value-{i}")))
            .collect();
        let sets: Vec<Vec<(String, String)>> = vec![
            vec![],
            vec![("cam".into(), "front".into())],
            vec![("ü".into(), "é".into()), ("日本".into(), "東京".into())],
            vec![("a".into(), String::new()), ("long".into(), long)],
            many,
        ];
        for set in &sets {
            for entry in [None, Some("sensor-1"), Some("ñ")] {
                for ct in [DEFAULT_CONTENT_TYPE, "image/jpeg", ""] {
                    // After other bytes, as in a stream's buffer: the patch is relative.
                    let mut new = BytesMut::from(&b"prefix"[..]);
                    put_head(&mut new, entry, 42, ct, set, 1234);
                    let mut old = BytesMut::from(&b"prefix"[..]);
                    put_head_three_passes(&mut old, entry, 42, ct, set, 1234);
                    assert_eq!(new, old, "labels {set:?}, entry {entry:?}, type {ct:?}");
                    // And the map form the server passes.
                    let map: Labels = set.iter().cloned().collect();
                    let mut new = BytesMut::new();
                    put_head(&mut new, entry, 7, ct, &map, 0);
                    let mut old = BytesMut::new();
                    put_head_three_passes(&mut old, entry, 7, ct, &map, 0);
                    assert_eq!(new, old, "labels {map:?}, entry {entry:?}, type {ct:?}");
                }
            }
        }
    }

    #[test]
    fn round_trip_records_end_and_error() {
        let mut b = BytesMut::new();
        put_record(
            &mut b,
            7,
            "image/jpeg",
            &labels(&[("cam", "front"), ("ü", "é")]),
            b"abc",
        );
        put_record(&mut b, TS_NOW, DEFAULT_CONTENT_TYPE, &Labels::new(), b"");
        put_end(&mut b, 2);
        let events = decode_bytewise(&b).unwrap();
        let mut payload = Vec::new();
        let mut heads = Vec::new();
        let mut end = None;
        for e in events {
            match e {
                Event::Record(h) => heads.push(h),
                Event::Data(d) => payload.extend_from_slice(&d),
                Event::End(n) => end = Some(n),
                Event::Error(_) | Event::Heartbeat(_) | Event::Skipped(_) => {
                    panic!("no such frame was written")
                }
            }
        }
        assert_eq!(heads.len(), 2);
        assert_eq!(heads[0].ts, 7);
        assert_eq!(heads[0].content_type, "image/jpeg");
        assert_eq!(heads[0].labels.get("ü").map(String::as_str), Some("é"));
        assert_eq!(heads[1].ts, TS_NOW);
        assert_eq!(heads[1].content_type, DEFAULT_CONTENT_TYPE);
        assert_eq!(payload, b"abc");
        assert_eq!(end, Some(2));

        let mut e = BytesMut::new();
        put_error(&mut e, br#"{"error":{"code":"x","message":"y"}}"#);
        let ev = decode_bytewise(&e).unwrap();
        assert!(matches!(&ev[0], Event::Error(j) if j.starts_with(b"{\"error\"")));
    }

    #[test]
    fn header_layout_matches_the_documented_offsets() {
        let mut b = BytesMut::new();
        put_record(&mut b, 0x0102, "a/b", &labels(&[("k", "vv")]), b"xyz");
        assert_eq!(b[0], 1);
        assert_eq!(&b[1..9], &0x0102u64.to_le_bytes());
        assert_eq!(&b[9..11], &3u16.to_le_bytes());
        assert_eq!(&b[11..13], &1u16.to_le_bytes());
        assert_eq!(&b[13..17], &(2 + 1 + 2 + 2u32).to_le_bytes());
        assert_eq!(&b[17..25], &3u64.to_le_bytes());
        assert_eq!(&b[25..28], b"a/b");
        assert_eq!(&b[28..35], &[1, 0, b'k', 2, 0, b'v', b'v']);
        assert_eq!(&b[35..], b"xyz");
    }

    #[test]
    fn heartbeats_and_records_with_their_entry() {
        let mut b = BytesMut::new();
        put_heartbeat(&mut b, 42);
        put_entry_record_head(&mut b, "cams/front", 9, "a/b", &labels(&[("k", "v")]), 2);
        b.put_slice(b"hi");
        put_record(&mut b, 10, "", &Labels::new(), b"");
        put_heartbeat(&mut b, 43);
        put_end(&mut b, 2);
        assert_eq!(&b[..HEARTBEAT_LEN], &[3, 42, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b[HEARTBEAT_LEN], KIND_ENTRY_RECORD);
        assert_eq!(
            &b[HEARTBEAT_LEN + 25..HEARTBEAT_LEN + 27],
            &10u16.to_le_bytes()
        );
        let ev = decode_bytewise(&b).unwrap();
        assert_eq!(ev[0], Event::Heartbeat(42));
        let Event::Record(h) = &ev[1] else { panic!() };
        assert_eq!(
            (h.entry.as_deref(), h.ts, h.content_type.as_str()),
            (Some("cams/front"), 9, "a/b")
        );
        assert_eq!(h.labels, labels(&[("k", "v")]));
        // (fed a byte at a time, the payload comes a byte at a time)
        assert_eq!(ev[2], Event::Data(Bytes::from_static(b"h")));
        assert_eq!(ev[3], Event::Data(Bytes::from_static(b"i")));
        let Event::Record(h) = &ev[4] else { panic!() };
        assert_eq!((h.entry.as_deref(), h.ts), (None, 10));
        assert_eq!(ev[5], Event::Heartbeat(43));
        assert_eq!(ev[6], Event::End(2));
    }

    /// Bug: one damaged record ended the whole query stream. The server now skips it and
    /// reports it in a kind-5 frame before the end frame: the decoders take that frame
    /// and go on to the end frame, whatever the cut.
    #[test]
    fn a_damaged_record_is_reported_in_a_skipped_frame_before_the_end() {
        let doc = br#"{"skipped":[{"ts":5,"code":"corrupt_record"}],"skipped_count":1}"#;
        let mut b = BytesMut::new();
        put_record(&mut b, 4, "", &Labels::new(), b"ok");
        put_skipped(&mut b, doc);
        put_end(&mut b, 1);
        assert_eq!(b[RECORD_HEAD_LEN + 2], KIND_SKIPPED);
        let want = vec![
            Event::Record(FrameHead {
                entry: None,
                ts: 4,
                content_type: DEFAULT_CONTENT_TYPE.to_string(),
                labels: Labels::new(),
                payload_len: 2,
            }),
            Event::Data(Bytes::from_static(b"ok")),
            Event::Skipped(Bytes::from_static(doc)),
            Event::End(1),
        ];
        assert_eq!(joined(decode_bytewise(&b).unwrap()), want);
        for piece in [1, 3, 27, 30, b.len()] {
            assert_eq!(
                joined(decode_chunks(&b, piece).unwrap()),
                want,
                "piece {piece}"
            );
        }
        // (a skipped frame does not end the stream: the end frame still must come)
        let mut d = Decoder::new();
        let mut only = BytesMut::new();
        put_skipped(&mut only, doc);
        assert!(matches!(d.next(&mut only), Ok(Some(Event::Skipped(_)))));
        assert!(!d.is_done());
    }

    /// Decodes `bytes` with the `ChunkDecoder`, pushed in pieces of `piece` bytes.
    fn decode_chunks(bytes: &[u8], piece: usize) -> Result<Vec<Event>, FrameError> {
        let mut d = ChunkDecoder::new();
        let mut out = Vec::new();
        for chunk in bytes.chunks(piece) {
            d.push(Bytes::copy_from_slice(chunk));
            while let Some(e) = d.next_event()? {
                out.push(e);
            }
        }
        assert_eq!(d.buffered(), 0);
        Ok(out)
    }

    /// Joins consecutive payload pieces, so that two cuts of one body compare equal.
    fn joined(events: Vec<Event>) -> Vec<Event> {
        let mut out: Vec<Event> = Vec::new();
        for e in events {
            match (out.last_mut(), e) {
                (Some(Event::Data(prev)), Event::Data(d)) => {
                    let mut b = BytesMut::from(&prev[..]);
                    b.extend_from_slice(&d);
                    *prev = b.freeze();
                }
                (_, e) => out.push(e),
            }
        }
        out
    }

    #[test]
    fn chunk_decoder_agrees_with_the_decoder_whatever_the_cut() {
        let mut b = BytesMut::new();
        put_heartbeat(&mut b, 1);
        put_record(
            &mut b,
            7,
            "image/jpeg",
            &labels(&[("cam", "front")]),
            &[5; 300],
        );
        put_entry_record_head(&mut b, "a/b", 8, "", &Labels::new(), 3);
        b.put_slice(b"xyz");
        put_record(&mut b, 9, "", &Labels::new(), b"");
        put_end(&mut b, 3);
        let want = joined(decode_bytewise(&b).unwrap());
        for piece in [1, 2, 3, 7, 24, 25, 26, 64, 500, b.len()] {
            assert_eq!(
                joined(decode_chunks(&b, piece).unwrap()),
                want,
                "piece {piece}"
            );
        }
        let mut bad = b.clone();
        bad[HEARTBEAT_LEN] = 9;
        for piece in [1, 5, bad.len()] {
            assert!(decode_chunks(&bad, piece).is_err());
        }
        let mut after_end = BytesMut::new();
        put_end(&mut after_end, 0);
        after_end.put_u8(0);
        assert!(decode_chunks(&after_end, 4).is_err());
    }

    /// `next_raw` hands out the heads `next_event` does, with their content type and
    /// labels still encoded: the same events whatever the cut, the same checks (a bad
    /// label fails at the same byte), and records sharing content type and labels have
    /// equal `meta_bytes`.
    #[test]
    fn raw_heads_agree_with_decoded_heads_whatever_the_cut() {
        let mut b = BytesMut::new();
        let shared = labels(&[("cam", "front"), ("ü", "é")]);
        put_record(&mut b, 1, "image/jpeg", &shared, &[1; 40]);
        put_record(&mut b, 2, "image/jpeg", &shared, &[2; 40]);
        put_record(&mut b, 3, "", &labels(&[("cam", "back")]), b"");
        put_entry_record_head(&mut b, "a/b", 4, "", &Labels::new(), 2);
        b.put_slice(b"xy");
        put_end(&mut b, 4);
        let want = joined(decode_chunks(&b, b.len()).unwrap());
        for piece in [1, 2, 7, 25, 26, 30, 64, b.len()] {
            let mut d = ChunkDecoder::new();
            let mut got = Vec::new();
            let mut metas = Vec::new();
            for chunk in b.chunks(piece) {
                d.push(Bytes::copy_from_slice(chunk));
                while let Some(e) = d.next_raw().unwrap() {
                    match e {
                        RawEvent::Record(h) => {
                            metas.push((h.meta_bytes().to_vec(), h.names_entry()));
                            assert_eq!(h.content_type(), h.head().content_type);
                            assert_eq!(h.labels(), h.head().labels);
                            got.push(Event::Record(h.head()));
                        }
                        RawEvent::Other(e) => got.push(e),
                    }
                }
            }
            assert_eq!(joined(got), want, "piece {piece}");
            assert_eq!(metas[0], metas[1], "piece {piece}");
            assert_ne!(metas[0], metas[2], "piece {piece}");
            assert!(metas[3].1 && !metas[0].1);
        }
        // A label value that is not UTF-8: both refuse it, with the same message.
        let mut bad = BytesMut::new();
        put_record(&mut bad, 1, "", &labels(&[("k", "v")]), b"");
        let last = bad.len() - 1;
        bad[last] = 0xff;
        let mut d = ChunkDecoder::new();
        d.push(bad.clone().freeze());
        let raw = d.next_raw().unwrap_err();
        let decoded = decode_chunks(&bad, bad.len()).unwrap_err();
        assert_eq!(raw, decoded);
        assert!(raw.0.contains("not UTF-8"), "{raw}");
    }

    #[test]
    fn chunk_decoder_hands_payloads_on_without_copying() {
        let mut b = BytesMut::new();
        put_record(&mut b, 1, "", &Labels::new(), &[7; 1000]);
        put_end(&mut b, 1);
        let body = b.freeze();
        let mut d = ChunkDecoder::new();
        d.push(body.clone());
        let mut pieces = 0;
        while let Some(e) = d.next_event().unwrap() {
            if let Event::Data(p) = e {
                pieces += 1;
                assert_eq!(p.len(), 1000);
                // The piece points into the pushed chunk's memory.
                let at = p.as_ptr() as usize - body.as_ptr() as usize;
                assert_eq!(at, RECORD_HEAD_LEN);
            }
        }
        assert_eq!(pieces, 1);
        assert!(d.is_done());
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        assert!(decode_bytewise(&[9]).is_err());
        // labels length disagreeing with the label count
        let mut b = BytesMut::new();
        put_record(&mut b, 1, "", &labels(&[("k", "v")]), b"");
        b[11] = 2; // claims two labels
        assert!(decode_bytewise(&b).is_err());
        // absurd labels length
        let mut b = BytesMut::new();
        put_record(&mut b, 1, "", &Labels::new(), b"");
        b[13..17].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_bytewise(&b).is_err());
        // bytes after the end frame
        let mut b = BytesMut::new();
        put_end(&mut b, 0);
        b.put_u8(1);
        assert!(decode_bytewise(&b).is_err());
        // control character in the content type
        let mut b = BytesMut::new();
        put_record(&mut b, 1, "a\nb", &Labels::new(), b"");
        assert!(decode_bytewise(&b).is_err());
    }
}
