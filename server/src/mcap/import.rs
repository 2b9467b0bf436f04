//! MCAP in: each message of a file (or of each file of a rosbag2 folder) as a record.
//!
//! Mapping (also in `docs/cli.md`, "MCAP and ROS 2 bags"):
//!
//! * topic → entry by [`super::topic_to_entry`]; a topic whose name cannot be an entry, or
//!   that lands on the entry of another topic (`camera` and `/camera`), is not imported:
//!   its messages are counted and reported, and the command fails at the end;
//! * log time (ns) → timestamp (µs), rounded down. Two messages of one topic in the same µs
//!   cannot both be records at that µs: the later one (in file order) moves to the next
//!   free µs, and so do the ones after it that would land on it; its exact log time stays in
//!   the label `mcap.log_time_ns` (set whenever the timestamp × 1000 is not the log time),
//!   so nothing is lost and an export gives the original time back. The moves are counted;
//! * labels: `mcap.encoding` (the channel's message encoding), `mcap.schema` and
//!   `mcap.schema_encoding` (its schema's name and encoding) and `mcap.schema_id` (the
//!   schema's record in [`super::SCHEMAS_ENTRY`], written once per schema); `mcap.topic` when
//!   the topic is not the entry name; `mcap.publish_time_ns` when it differs from the log
//!   time; `mcap.sequence` when not 0;
//! * content type: the channel's `tsblob.content_type` metadata (a file tsblob exported),
//!   else [`super::content_type_of`] the message encoding;
//! * a message on a labels channel (`tsblob.labels_of`, from a tsblob export) gives its
//!   JSON labels to the record just before it of that topic and log time.
//!
//! The file is read front to back, one top-level record at a time (memory: one chunk). A
//! chunk that fails its CRC or does not decompress is skipped whole, its messages counted
//! from the message indexes after it; a file cut short (or whose framing breaks) stops at
//! its last complete record, and the bytes after it are reported.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ::mcap::records::Record;
use ::mcap::sans_io::{LinearReadEvent, LinearReader, LinearReaderOptions};
use tsblob_storage::Labels;

use super::{
    content_type_of, schema_ts, topic_to_entry, L_ENCODING, L_LOG_TIME, L_PUBLISH_TIME, L_SCHEMA,
    L_SCHEMA_ENCODING, L_SCHEMA_ID, L_SEQUENCE, L_TOPIC, M_CONTENT_TYPE, M_LABELS_OF,
    SCHEMAS_ENTRY,
};
use crate::batch_client::OutRecord;

/// Bytes read from the file at a time.
const READ: usize = 4 << 20;
/// The longest top-level record accepted (a corrupted length beyond it ends the read as
/// damaged instead of buffering it).
const RECORD_LIMIT: usize = 4 << 30;
/// The most a chunk may hold uncompressed (its header's `uncompressed_size`, and what its
/// compressed bytes may inflate to): 1 GiB, the default `--max-record` of a copy, since a
/// chunk is held whole in memory and holds at least one whole message. A chunk claiming
/// more is skipped as damaged. Before this bound the `mcap` crate sized its buffer by the
/// lengths written inside the compressed bytes, unchecked: a 200-byte chunk whose record
/// claimed 1 TiB aborted `tsblob cp` (SIGABRT: the allocation failed).
const CHUNK_MAX: u64 = 1 << 30;
/// LZ4 inflates a byte to at most ~255 (a match length grows by 255 per extra byte): an
/// lz4 chunk claiming more than this many times its compressed size (plus [`LZ4_SLACK`] for
/// the frame's headers) cannot be intact, and is skipped before any buffer is sized by its
/// claim.
const LZ4_MAX_RATIO: u64 = 256;
/// See [`LZ4_MAX_RATIO`].
const LZ4_SLACK: u64 = 64 << 10;

/// Why a file could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// (The I/O error is in the message, not a `source`: the CLI prints an error's chain
    /// of sources after it, which would say it twice.)
    #[error("cannot read {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path} is not an MCAP file (it does not start with the MCAP magic)")]
    NotMcap { path: String },
    #[error("{path} has no .mcap files: a rosbag2 folder holds metadata.yaml and its .mcap files (convert a .db3 bag with `ros2 bag convert`)")]
    EmptyBag { path: String },
}

/// What an import met besides the messages it imported.
#[derive(Debug, Default)]
pub struct Report {
    pub files: u64,
    /// Messages handed on as records (after the caller's filter).
    pub messages: u64,
    /// Messages left out by the caller's filter (window, entries, condition).
    pub filtered: u64,
    /// Chunks skipped (damaged), each described.
    pub skipped_chunks: Vec<String>,
    /// Messages in those chunks, by their message indexes.
    pub lost_messages: u64,
    /// Files cut short or whose framing broke: where, and how many bytes were left.
    pub truncated: Vec<String>,
    /// Messages of channels never defined (their channel record was in a skipped chunk).
    pub unknown_channel: u64,
    /// Topics not imported: topic → (messages, why).
    pub unmapped: BTreeMap<String, (u64, String)>,
    /// Messages moved to the next free µs.
    pub shifted: u64,
    /// Labels messages without their record.
    pub orphan_labels: u64,
}

impl Report {
    /// Whether every message of the input was imported (or filtered out on purpose).
    pub fn complete(&self) -> bool {
        self.skipped_chunks.is_empty()
            && self.truncated.is_empty()
            && self.unknown_channel == 0
            && self.unmapped.is_empty()
    }

    /// One line per thing to report.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(self.skipped_chunks.iter().cloned());
        if self.lost_messages > 0 {
            out.push(format!(
                "{} message(s) were in the skipped chunk(s)",
                self.lost_messages
            ));
        }
        out.extend(self.truncated.iter().cloned());
        if self.unknown_channel > 0 {
            out.push(format!(
                "{} message(s) of channels whose definition was lost (in a skipped chunk) were skipped",
                self.unknown_channel
            ));
        }
        for (topic, (n, why)) in &self.unmapped {
            out.push(format!("{n} message(s) of topic {topic:?} skipped: {why}"));
        }
        if self.shifted > 0 {
            out.push(format!(
                "{} message(s) shared a µs with the message before them on their topic: moved to the next free µs (exact time in the label {L_LOG_TIME})",
                self.shifted
            ));
        }
        if self.orphan_labels > 0 {
            out.push(format!(
                "{} labels message(s) without their record were ignored",
                self.orphan_labels
            ));
        }
        out
    }
}

struct Channel {
    topic: String,
    encoding: String,
    schema: u16,
    metadata: BTreeMap<String, String>,
    /// The entry, or why the topic has none.
    entry: Result<String, String>,
}

struct SchemaDef {
    name: String,
    encoding: String,
    data: Arc<Vec<u8>>,
    /// Its record's timestamp ([`schema_ts`]), hashed once: hashed for every message, a
    /// 4 MiB schema cost 4 MiB of SHA-256 per message of its channels.
    ts: u64,
}

/// Reads MCAP files into records: `want` decides which records are kept (the window,
/// entries and condition of the copy), `emit` takes them (returns false to stop).
pub struct Importer<E, F>
where
    E: FnMut(OutRecord) -> bool,
    F: FnMut(&OutRecord) -> bool,
{
    emit: E,
    want: F,
    pub report: Report,
    /// entry → topic, over all files (two topics may not share an entry).
    entries: HashMap<String, String>,
    /// entry → (µs of the last message's log time, timestamp it got).
    last: HashMap<String, (u64, u64)>,
    /// Schema records already handed on.
    schemas_sent: HashSet<u64>,
    /// A record waiting for its labels message, and its topic and log time.
    pending: Option<(OutRecord, String, u64)>,
    stopped: bool,
}

impl<E, F> Importer<E, F>
where
    E: FnMut(OutRecord) -> bool,
    F: FnMut(&OutRecord) -> bool,
{
    pub fn new(emit: E, want: F) -> Self {
        Importer {
            emit,
            want,
            report: Report::default(),
            entries: HashMap::new(),
            last: HashMap::new(),
            schemas_sent: HashSet::new(),
            pending: None,
            stopped: false,
        }
    }

    /// Reads one file. Damage is reported in [`Importer::report`], not returned.
    pub fn read_file(&mut self, path: &Path) -> Result<(), ImportError> {
        let name = path.display().to_string();
        let io = |error| ImportError::Io {
            path: name.clone(),
            error,
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let mut magic = [0u8; 8];
        let got = read_full(&mut file, &mut magic).map_err(io)?;
        if got < magic.len() || magic != *::mcap::MAGIC {
            return Err(ImportError::NotMcap { path: name.clone() });
        }
        self.report.files += 1;
        let mut reader = LinearReader::new_with_options(
            LinearReaderOptions::default()
                .with_skip_start_magic(true)
                // The end magic is expected: a file that stops on a record boundary
                // before its footer and magic is cut short, not complete.
                .with_skip_end_magic(false)
                .with_emit_chunks(true)
                .with_record_length_limit(RECORD_LIMIT),
        );
        let mut channels: HashMap<u16, Channel> = HashMap::new();
        let mut schemas: HashMap<u16, SchemaDef> = HashMap::new();
        // The offset after the last complete record, and whether the chunk before the
        // message indexes being read was skipped.
        let mut offset = magic.len() as u64;
        let mut counting_lost = false;
        let mut ended = false;
        while let Some(event) = reader.next_event() {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    let len = file.metadata().map(|m| m.len()).unwrap_or(offset);
                    self.report.truncated.push(match len.saturating_sub(offset) {
                        0 => format!(
                            "{name}: {e} after byte {offset}: the file ends there without its footer and end magic (cut short?): whatever came after it was not read"
                        ),
                        left => format!(
                            "{name}: {e} after byte {offset}: the {left} byte(s) after it were not read"
                        ),
                    });
                    break;
                }
            };
            match event {
                LinearReadEvent::ReadRequest(need) => {
                    let buf = reader.insert(need.clamp(1, READ));
                    let n = file.read(buf).map_err(io)?;
                    reader.notify_read(n);
                }
                LinearReadEvent::Record { data, opcode } => {
                    offset += 9 + data.len() as u64;
                    if ended {
                        continue;
                    }
                    let record = match ::mcap::parse_record(opcode, data) {
                        Ok(r) => r,
                        Err(e) => {
                            self.report.skipped_chunks.push(format!(
                                "{name}: a record (opcode {opcode:#04x}) ending at byte {offset} is damaged ({e}): skipped"
                            ));
                            continue;
                        }
                    };
                    match record {
                        Record::MessageIndex(ix) => {
                            if counting_lost {
                                self.report.lost_messages += ix.records.len() as u64;
                            }
                            continue;
                        }
                        Record::DataEnd(_) => {
                            ended = true;
                            continue;
                        }
                        Record::Chunk { header, data } => {
                            counting_lost = false;
                            match chunk_records(header, &data) {
                                Ok(records) => {
                                    for r in records {
                                        self.record(r, &mut channels, &mut schemas);
                                    }
                                }
                                Err(e) => {
                                    counting_lost = true;
                                    self.report.skipped_chunks.push(format!(
                                        "{name}: the chunk ending at byte {offset} is damaged ({e}): skipped"
                                    ));
                                }
                            }
                        }
                        r => {
                            counting_lost = false;
                            self.record(r, &mut channels, &mut schemas);
                        }
                    }
                    if self.stopped {
                        return Ok(());
                    }
                }
            }
        }
        self.flush_pending();
        Ok(())
    }

    fn record(
        &mut self,
        r: Record<'_>,
        channels: &mut HashMap<u16, Channel>,
        schemas: &mut HashMap<u16, SchemaDef>,
    ) {
        match r {
            Record::Schema { header, data } => {
                let ts = schema_ts(&header.name, &header.encoding, &data);
                schemas.insert(
                    header.id,
                    SchemaDef {
                        name: header.name,
                        encoding: header.encoding,
                        data: Arc::new(data.into_owned()),
                        ts,
                    },
                );
            }
            Record::Channel(c) => {
                let entry = topic_to_entry(&c.topic).map_err(|e| e.why);
                channels.insert(
                    c.id,
                    Channel {
                        topic: c.topic,
                        encoding: c.message_encoding,
                        schema: c.schema_id,
                        metadata: c.metadata,
                        entry,
                    },
                );
            }
            Record::Message { header, data } => {
                let Some(ch) = channels.get(&header.channel_id) else {
                    self.report.unknown_channel += 1;
                    return;
                };
                if let Some(of) = ch.metadata.get(M_LABELS_OF) {
                    self.labels(of, header.log_time, &data);
                    return;
                }
                self.flush_pending();
                self.message(ch, schemas.get(&ch.schema), &header, data.into_owned());
            }
            _ => {}
        }
    }

    /// A labels message: its labels go to the pending record of its topic and time.
    fn labels(&mut self, topic: &str, log_time: u64, data: &[u8]) {
        let parsed: Option<Labels> = serde_json::from_slice(data).ok();
        match (self.pending.as_mut(), parsed) {
            (Some((r, t, lt)), Some(labels)) if t.as_str() == topic && *lt == log_time => {
                r.labels.extend(labels);
            }
            _ => self.report.orphan_labels += 1,
        }
    }

    fn message(
        &mut self,
        ch: &Channel,
        schema: Option<&SchemaDef>,
        h: &::mcap::records::MessageHeader,
        data: Vec<u8>,
    ) {
        let entry = match &ch.entry {
            Ok(e) => e.clone(),
            Err(why) => {
                let n = self
                    .report
                    .unmapped
                    .entry(ch.topic.clone())
                    .or_insert((0, why.clone()));
                n.0 += 1;
                return;
            }
        };
        match self.entries.get(&entry) {
            Some(t) if *t != ch.topic => {
                let why = format!("its entry {entry:?} is already the entry of topic {t:?}");
                let n = self
                    .report
                    .unmapped
                    .entry(ch.topic.clone())
                    .or_insert((0, why));
                n.0 += 1;
                return;
            }
            Some(_) => {}
            None => {
                self.entries.insert(entry.clone(), ch.topic.clone());
            }
        }
        let orig = h.log_time / 1000;
        let ts = match self.last.get(&entry) {
            Some(&(lo, lt)) if orig >= lo && orig <= lt => lt.saturating_add(1),
            _ => orig,
        };
        let mut labels = Labels::new();
        labels.insert(L_ENCODING.into(), ch.encoding.clone());
        if ch.topic != entry {
            labels.insert(L_TOPIC.into(), ch.topic.clone());
        }
        if ts.saturating_mul(1000) != h.log_time {
            labels.insert(L_LOG_TIME.into(), h.log_time.to_string());
        }
        if h.publish_time != h.log_time {
            labels.insert(L_PUBLISH_TIME.into(), h.publish_time.to_string());
        }
        if h.sequence != 0 {
            labels.insert(L_SEQUENCE.into(), h.sequence.to_string());
        }
        let mut schema_record = None;
        if let Some(s) = schema {
            let sts = s.ts;
            labels.insert(L_SCHEMA.into(), s.name.clone());
            labels.insert(L_SCHEMA_ENCODING.into(), s.encoding.clone());
            labels.insert(L_SCHEMA_ID.into(), sts.to_string());
            if !self.schemas_sent.contains(&sts) {
                schema_record = Some(OutRecord {
                    entry: SCHEMAS_ENTRY.to_string(),
                    ts: sts,
                    content_type: "application/octet-stream".into(),
                    labels: Labels::from([
                        (L_SCHEMA.to_string(), s.name.clone()),
                        (L_SCHEMA_ENCODING.to_string(), s.encoding.clone()),
                    ]),
                    data: s.data.as_ref().clone(),
                });
            }
        }
        // Label values are limited (4 KiB): a longer schema name or topic is cut, which
        // leaves the record importable (the schema itself is kept whole in its record).
        for v in labels.values_mut() {
            if v.len() > tsblob_storage::MAX_LABEL_VALUE {
                let mut end = tsblob_storage::MAX_LABEL_VALUE;
                while !v.is_char_boundary(end) {
                    end -= 1;
                }
                v.truncate(end);
            }
        }
        let content_type = ch
            .metadata
            .get(M_CONTENT_TYPE)
            .filter(|c| {
                !c.is_empty() && c.len() <= 255 && c.bytes().all(|b| (0x20..0x7f).contains(&b))
            })
            .cloned()
            .unwrap_or_else(|| content_type_of(&ch.encoding));
        let r = OutRecord {
            entry: entry.clone(),
            ts,
            content_type,
            labels,
            data,
        };
        if !(self.want)(&r) {
            self.report.filtered += 1;
            return;
        }
        if ts != orig {
            self.report.shifted += 1;
        }
        self.last.insert(entry, (orig, ts));
        if let Some(s) = schema_record {
            self.schemas_sent.insert(s.ts);
            if !(self.emit)(s) {
                self.stopped = true;
                return;
            }
        }
        self.pending = Some((r, ch.topic.clone(), h.log_time));
    }

    fn flush_pending(&mut self) {
        if let Some((r, _, _)) = self.pending.take() {
            self.report.messages += 1;
            if !(self.emit)(r) {
                self.stopped = true;
            }
        }
    }

    /// Whether the receiver stopped taking records.
    pub fn stopped(&self) -> bool {
        self.stopped
    }
}

/// The records of a chunk, decompressed within [`CHUNK_MAX`]: a chunk whose header
/// claims more, whose bytes inflate to more or less than it claims, or whose records do not
/// fit in it is an error (the chunk is skipped as damaged).
///
/// zstd is inflated here, into a buffer that grows with the bytes actually produced (a
/// claim not backed by data costs nothing), and its records read from that; other
/// compressions go through the `mcap` crate's reader with its record length limit at the
/// claimed size (so a record cannot claim more than its chunk; an lz4 claim is first held
/// to what its compressed bytes can inflate to, [`LZ4_MAX_RATIO`]).
fn chunk_records(
    header: ::mcap::records::ChunkHeader,
    data: &[u8],
) -> Result<Vec<Record<'static>>, String> {
    let claim = header.uncompressed_size;
    if claim > CHUNK_MAX {
        return Err(format!(
            "it claims {claim} bytes uncompressed, over the {} a chunk may hold",
            tsblob_proto::format_size(CHUNK_MAX)
        ));
    }
    let compressed = data.len() as u64;
    match header.compression.as_str() {
        "zstd" => {
            let mut out = Vec::new();
            ::zstd::stream::read::Decoder::with_buffer(data)
                .and_then(|d| d.take(claim.saturating_add(1)).read_to_end(&mut out))
                .map_err(|e| format!("zstd: {e}"))?;
            if out.len() as u64 != claim {
                return Err(format!(
                    "its zstd bytes inflate to {}{} bytes, not the {claim} its header claims",
                    if out.len() as u64 > claim {
                        "over "
                    } else {
                        ""
                    },
                    out.len().min(usize::try_from(claim).unwrap_or(usize::MAX)),
                ));
            }
            let plain = ::mcap::records::ChunkHeader {
                compression: String::new(),
                compressed_size: claim,
                ..header
            };
            ::mcap::read::ChunkReader::new(plain, &out)
                .and_then(|r| r.map(|r| r.map(Record::into_owned)).collect())
                .map_err(|e| e.to_string())
        }
        other => {
            if other == "lz4"
                && claim
                    > compressed
                        .saturating_mul(LZ4_MAX_RATIO)
                        .saturating_add(LZ4_SLACK)
            {
                return Err(format!(
                    "it claims {claim} bytes uncompressed from {compressed} bytes of lz4, more than lz4 can inflate to"
                ));
            }
            limited_chunk_records(header, data)
        }
    }
}

/// A chunk's records through the `mcap` crate's reader, no record longer than the chunk's
/// claimed size (at most [`CHUNK_MAX`]): the chunk is handed to a reader of its own as a
/// one-record file.
fn limited_chunk_records(
    header: ::mcap::records::ChunkHeader,
    data: &[u8],
) -> Result<Vec<Record<'static>>, String> {
    use ::mcap::records::op;
    let limit = usize::try_from(header.uncompressed_size.min(CHUNK_MAX)).unwrap_or(usize::MAX);
    // The chunk record as written: opcode, length, header fields, compressed bytes.
    let name = header.compression.as_bytes();
    let body_len = 8 + 8 + 8 + 4 + 4 + name.len() + 8 + data.len();
    let mut file = Vec::with_capacity(9 + body_len);
    file.push(op::CHUNK);
    file.extend_from_slice(&(body_len as u64).to_le_bytes());
    file.extend_from_slice(&header.message_start_time.to_le_bytes());
    file.extend_from_slice(&header.message_end_time.to_le_bytes());
    file.extend_from_slice(&header.uncompressed_size.to_le_bytes());
    file.extend_from_slice(&header.uncompressed_crc.to_le_bytes());
    file.extend_from_slice(&(name.len() as u32).to_le_bytes());
    file.extend_from_slice(name);
    file.extend_from_slice(&(data.len() as u64).to_le_bytes());
    file.extend_from_slice(data);
    let mut reader = LinearReader::new_with_options(
        LinearReaderOptions::default()
            .with_skip_start_magic(true)
            .with_skip_end_magic(true)
            .with_validate_chunk_crcs(true)
            .with_record_length_limit(limit),
    );
    let mut rest: &[u8] = &file;
    let mut out = Vec::new();
    while let Some(event) = reader.next_event() {
        match event.map_err(|e| e.to_string())? {
            LinearReadEvent::ReadRequest(need) => {
                let n = need.min(rest.len());
                reader.insert(n).copy_from_slice(&rest[..n]);
                reader.notify_read(n);
                rest = &rest[n..];
            }
            LinearReadEvent::Record { data, opcode } => {
                out.push(
                    ::mcap::parse_record(opcode, data)
                        .map_err(|e| e.to_string())?
                        .into_owned(),
                );
            }
        }
    }
    Ok(out)
}

/// The MCAP files of a place: the file itself, or a rosbag2 folder's `.mcap` files in
/// their numbered order (`bag_0.mcap`, `bag_1.mcap`, ..., `bag_10.mcap`).
pub fn files_of(path: &Path) -> Result<Vec<PathBuf>, ImportError> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let io = |error| ImportError::Io {
        path: path.display().to_string(),
        error,
    };
    let mut files = Vec::new();
    for item in std::fs::read_dir(path).map_err(io)? {
        let p = item.map_err(io)?.path();
        if p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("mcap"))
            && p.is_file()
        {
            files.push(p);
        }
    }
    if files.is_empty() {
        return Err(ImportError::EmptyBag {
            path: path.display().to_string(),
        });
    }
    files.sort_by_key(|p| natural_key(&p.file_name().unwrap_or_default().to_string_lossy()));
    Ok(files)
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// A sort key that orders `bag_2` before `bag_10`.
fn natural_key(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut num: Option<u64> = None;
    for c in s.chars() {
        match (c.to_digit(10), num) {
            (Some(d), Some(n)) => num = Some(n.saturating_mul(10).saturating_add(d.into())),
            (Some(d), None) => num = Some(d.into()),
            (None, Some(n)) => {
                out.push((std::mem::take(&mut text), n));
                num = None;
                text.push(c);
            }
            (None, None) => text.push(c),
        }
    }
    out.push((text, num.unwrap_or(0)));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::mcap::export::Exporter;

    /// Writes `n` messages on two topics into an MCAP with small chunks.
    fn sample(n: u64) -> Vec<u8> {
        let mut w = ::mcap::WriteOptions::new()
            .chunk_size(Some(4096))
            .create(std::io::Cursor::new(Vec::new()))
            .unwrap();
        let s = w
            .add_schema("pkg/msg/T", "ros2msg", b"uint8[] data")
            .unwrap();
        let a = w
            .add_channel(s, "/cams/front", "cdr", &BTreeMap::new())
            .unwrap();
        let b = w.add_channel(0, "/imu", "json", &BTreeMap::new()).unwrap();
        for i in 0..n {
            let ch = if i % 2 == 0 { a } else { b };
            w.write_to_known_channel(
                &::mcap::records::MessageHeader {
                    channel_id: ch,
                    sequence: 0,
                    log_time: 1_000_000 + i * 1000,
                    publish_time: 1_000_000 + i * 1000,
                },
                &noise(i),
            )
            .unwrap();
        }
        w.finish().unwrap();
        w.into_inner().into_inner()
    }

    /// 500 bytes that do not compress much.
    fn noise(i: u64) -> Vec<u8> {
        let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..500)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn import(bytes: &[u8]) -> (Vec<OutRecord>, Report) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.mcap");
        std::fs::write(&path, bytes).unwrap();
        let mut out = Vec::new();
        let report = {
            let mut imp = Importer::new(
                |r| {
                    out.push(r);
                    true
                },
                |_| true,
            );
            imp.read_file(&path).unwrap();
            std::mem::take(&mut imp.report)
        };
        (out, report)
    }

    #[test]
    fn an_intact_file_imports_every_message_with_its_mapping() {
        let (recs, report) = import(&sample(200));
        assert!(report.complete(), "{:?}", report.lines());
        let msgs: Vec<_> = recs.iter().filter(|r| r.entry != SCHEMAS_ENTRY).collect();
        assert_eq!(msgs.len(), 200);
        assert_eq!(recs.iter().filter(|r| r.entry == SCHEMAS_ENTRY).count(), 1);
        let first = msgs[0];
        assert_eq!((first.entry.as_str(), first.ts), ("cams/front", 1000));
        assert_eq!(first.content_type, "application/x-cdr");
        assert_eq!(first.labels[L_TOPIC], "/cams/front");
        assert_eq!(first.labels[L_SCHEMA], "pkg/msg/T");
        assert_eq!(first.labels[L_SCHEMA_ENCODING], "ros2msg");
        assert_eq!(first.labels[L_ENCODING], "cdr");
        assert!(!first.labels.contains_key(L_LOG_TIME));
        assert_eq!(msgs[1].entry, "imu");
        assert_eq!(msgs[1].content_type, "application/json");
    }

    /// A file cut in the middle (a recorder that lost power) imported nothing before this
    /// reader: the whole file was refused for its missing footer. Every complete chunk
    /// before the cut is imported; the cut is reported with the bytes left.
    #[test]
    fn a_truncated_file_imports_every_intact_chunk_and_reports_the_rest() {
        let full = sample(400);
        let (all, _) = import(&full);
        let cut = &full[..full.len() / 2];
        let (recs, report) = import(cut);
        assert!(!report.complete());
        assert_eq!(report.truncated.len(), 1, "{:?}", report.lines());
        assert!(
            report.truncated[0].contains("not read"),
            "{}",
            report.truncated[0]
        );
        let n = recs.iter().filter(|r| r.entry != SCHEMAS_ENTRY).count();
        assert!(n > 50 && n < 400, "{n} messages from half a file");
        // What came in is exactly the first messages of the intact file.
        for (a, b) in recs.iter().zip(all.iter()) {
            assert_eq!((&a.entry, a.ts, &a.data), (&b.entry, b.ts, &b.data));
        }
    }

    /// Bug: a file cut exactly between two top-level records (the CI run of 2026-11-26 cut
    /// a Python-written file at half its size and landed on one) was read as complete: the
    /// reader did not expect the end magic, so a clean end of bytes looked like the end of
    /// the file and `tsblob cp` exited 0. Every cut on a record boundary, and one before
    /// the end magic, must be reported.
    #[test]
    fn a_file_cut_on_a_record_boundary_is_reported_as_cut_short() {
        let full = sample(60);
        let mut cuts = Vec::new();
        let mut at = ::mcap::MAGIC.len();
        while at + 9 <= full.len() - ::mcap::MAGIC.len() {
            cuts.push(at);
            let len = u64::from_le_bytes(full[at + 1..at + 9].try_into().unwrap());
            at += 9 + len as usize;
        }
        assert_eq!(at, full.len() - ::mcap::MAGIC.len(), "walked every record");
        cuts.push(at);
        assert!(cuts.len() > 20, "{} boundaries", cuts.len());
        for cut in cuts {
            let (_, report) = import(&full[..cut]);
            assert!(!report.complete(), "cut at {cut} of {}", full.len());
            assert_eq!(report.truncated.len(), 1, "{:?}", report.lines());
            assert!(
                report.truncated[0].contains("not read"),
                "{}",
                report.truncated[0]
            );
        }
        let (recs, report) = import(&full);
        assert!(report.complete(), "{:?}", report.lines());
        assert_eq!(recs.iter().filter(|r| r.entry != SCHEMAS_ENTRY).count(), 60);
    }

    #[test]
    fn a_damaged_chunk_is_skipped_and_the_chunks_after_it_imported() {
        let mut bytes = sample(400);
        // Corrupt the last compressed bytes of a chunk in the middle of the file.
        let summary = ::mcap::Summary::read(&bytes).unwrap().unwrap();
        let ci = &summary.chunk_indexes[summary.chunk_indexes.len() / 2];
        let end = (ci.chunk_start_offset + ci.chunk_length) as usize;
        for b in &mut bytes[end - 16..end] {
            *b ^= 0x5a;
        }
        let (recs, report) = import(&bytes);
        assert!(!report.complete());
        assert_eq!(report.skipped_chunks.len(), 1, "{:?}", report.lines());
        assert!(report.truncated.is_empty(), "{:?}", report.lines());
        assert!(report.lost_messages > 0, "{:?}", report.lines());
        let n = recs.iter().filter(|r| r.entry != SCHEMAS_ENTRY).count() as u64;
        assert_eq!(n + report.lost_messages, 400, "{:?}", report.lines());
        // The last message (in the last chunk) came in.
        assert!(recs.iter().any(|r| r.ts == 1000 + 399));
    }

    #[test]
    fn messages_in_one_microsecond_move_to_the_next_free_one_and_keep_their_time() {
        let mut w = ::mcap::WriteOptions::new()
            .create(std::io::Cursor::new(Vec::new()))
            .unwrap();
        let c = w.add_channel(0, "/t", "json", &BTreeMap::new()).unwrap();
        for (i, t) in [5_000u64, 5_100, 5_900, 6_000, 9_000].iter().enumerate() {
            w.write_to_known_channel(
                &::mcap::records::MessageHeader {
                    channel_id: c,
                    sequence: 0,
                    log_time: *t,
                    publish_time: *t,
                },
                format!("{i}").as_bytes(),
            )
            .unwrap();
        }
        w.finish().unwrap();
        let (recs, report) = import(&w.into_inner().into_inner());
        let got: Vec<_> = recs
            .iter()
            .map(|r| (r.ts, r.labels.get(L_LOG_TIME).cloned()))
            .collect();
        assert_eq!(
            got,
            [
                (5, None),
                (6, Some("5100".into())),
                (7, Some("5900".into())),
                (8, Some("6000".into())),
                (9, None)
            ]
        );
        assert_eq!(report.shifted, 3);
        // Exported again, the messages get their log times back.
        let mut x = Exporter::new(Vec::new()).unwrap();
        for r in &recs {
            x.add(
                &r.entry,
                r.ts,
                &r.content_type,
                &r.labels,
                &r.data,
                &mut |_| Ok(None),
            )
            .unwrap();
        }
        let bytes = x.finish().unwrap();
        let times: Vec<u64> = ::mcap::MessageStream::new(&bytes)
            .unwrap()
            .map(|m| m.unwrap().log_time)
            .collect();
        assert_eq!(times, [5_000, 5_100, 5_900, 6_000, 9_000]);
    }

    /// lz4 and uncompressed chunks go through the `mcap` crate's reader, held to their
    /// claimed size (`limited_chunk_records`): intact ones import whole.
    #[test]
    fn lz4_and_uncompressed_chunks_import_whole() {
        for c in [Some(::mcap::Compression::Lz4), None] {
            let mut w = ::mcap::WriteOptions::new()
                .compression(c)
                .chunk_size(Some(4096))
                .create(std::io::Cursor::new(Vec::new()))
                .unwrap();
            let ch = w.add_channel(0, "/t", "json", &BTreeMap::new()).unwrap();
            for i in 0..300u64 {
                w.write_to_known_channel(
                    &::mcap::records::MessageHeader {
                        channel_id: ch,
                        sequence: 0,
                        log_time: (i + 1) * 1000,
                        publish_time: (i + 1) * 1000,
                    },
                    &noise(i),
                )
                .unwrap();
            }
            w.finish().unwrap();
            let (recs, report) = import(&w.into_inner().into_inner());
            assert!(report.complete(), "{c:?}: {:?}", report.lines());
            assert_eq!(recs.len(), 300, "{c:?}");
            assert_eq!(recs[299].data, noise(299));
        }
    }

    /// An lz4 chunk claiming more than its bytes can inflate to is skipped unread.
    #[test]
    fn an_lz4_chunk_claiming_past_its_ratio_is_refused() {
        let header = ::mcap::records::ChunkHeader {
            message_start_time: 0,
            message_end_time: 0,
            uncompressed_size: 100 << 20,
            uncompressed_crc: 0,
            compression: "lz4".into(),
            compressed_size: 100,
        };
        let e = chunk_records(header, &[0u8; 100]).unwrap_err();
        assert!(e.contains("more than lz4 can inflate to"), "{e}");
    }

    #[test]
    fn bag_files_are_read_in_their_numbered_order() {
        let mut names = vec!["b_10.mcap", "b_2.mcap", "b_0.mcap", "b_1.mcap"];
        names.sort_by_key(|n| natural_key(n));
        assert_eq!(names, ["b_0.mcap", "b_1.mcap", "b_2.mcap", "b_10.mcap"]);
    }
}
