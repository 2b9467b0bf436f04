//! MCAP in: each message of a file (or of each file of a rosbag2 folder) as a record. This
//! module holds the mapping of messages to records and what an import reports;
//! [`super::read`] reads the files.
//!
//! Mapping (also in `docs/cli.md`, "MCAP and ROS 2 bags"):
//!
//! * topic → entry by [`super::topic_to_entry`]; a topic whose name cannot be an entry, or
//!   that lands on the entry of another topic (`camera` and `/camera`), is not imported:
//!   its messages are counted and reported, and the command fails at the end;
//! * log time (ns) → timestamp (µs), rounded down. Two messages of one topic in the same µs
//!   cannot both be records at that µs: the later one (in file order) moves to the next
//!   free µs, and so do the ones after it that would land on it (and a message back in
//!   time goes to the first µs none of the last [`TAKEN_WINDOW`] of its topic took); its
//!   exact log time stays in the label `mcap.log_time_ns` (set whenever the timestamp ×
//!   1000 is not the log time), so nothing is lost and an export gives the original time
//!   back. The moves are counted;
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
//! The file is read by [`super::read`], front to back, one top-level record at a time
//! within the bounds of their kinds (memory: one chunk, inflated, and one message); what it
//! meets is reported here. A chunk that fails its CRC or does not decompress is skipped
//! whole, its messages counted from the message indexes after it; a file cut short (or
//! whose framing breaks) stops at its last complete record, and the bytes after it are
//! reported; chunk and message records after the Data End record (where only the summary
//! may be) are not imported, counted and reported with the byte of the first. A chunk
//! holding a record of opcode 0x00 (which MCAP reserves as invalid) is skipped as damaged,
//! and top-level ones are counted and reported. What breaks the specification's rules on
//! ids is imported as read and reported: a channel naming a schema id the file does not
//! define (its messages come in without a schema), a schema or channel id defined again
//! with other content (the later definition holds for the messages after it). A message
//! over [`MAX_MESSAGE_BYTES`] is refused; a schema over [`MAX_SCHEMA_BYTES`] is refused with
//! the messages of its channels, and past [`MAX_SCHEMA_TOTAL_BYTES`] of schemas held the
//! rest of a file is not read. Those are what an export reads back.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::Path;

use ::mcap::records::Record;
use tsblob_storage::Labels;

use super::export::{MAX_SCHEMA_BYTES, MAX_SCHEMA_TOTAL_BYTES};
use super::read::{walk, FileReader, Step};
use super::{
    content_type_of, schema_ts, topic_to_entry, L_ENCODING, L_LOG_TIME, L_PUBLISH_TIME, L_SCHEMA,
    L_SCHEMA_ENCODING, L_SCHEMA_ID, L_SEQUENCE, L_TOPIC, MAX_MESSAGE_BYTES, M_CONTENT_TYPE,
    M_LABELS_OF, SCHEMAS_ENTRY,
};
use crate::batch_client::OutRecord;

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
    #[error("cannot import the rosbag2 folder: {path}: {why}")]
    BadBag { path: String, why: String },
    #[error("inflating {file} stopped: the temporary folder {dir} has less than {} free (a file-compressed bag's files are inflated there to be read): point TMPDIR at a folder with room, or decompress the bag first (ros2 bag convert)", tsblob_proto::format_size(*.reserve))]
    TempFull {
        file: String,
        dir: String,
        reserve: u64,
    },
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
    /// Files with chunk or message records after their Data End record (not imported):
    /// how many, and where the first is.
    pub after_data_end: Vec<String>,
    /// Messages of channels never defined (their channel record was in a skipped chunk).
    pub unknown_channel: u64,
    /// Messages imported without their schema: their channel names a schema id the file
    /// did not define before them. Topic → (messages, the schema id).
    pub missing_schema: BTreeMap<String, (u64, u16)>,
    /// Schema or channel ids defined again with other content (MCAP ids may not change
    /// within a file), each described.
    pub redefined: Vec<String>,
    /// Records skipped for their size (not a message or a schema), each described.
    pub skipped_records: Vec<String>,
    /// Messages refused for a bound (too large, or their schema is): topic → (messages, why).
    pub refused: BTreeMap<String, (u64, String)>,
    /// Topics not imported: topic → (messages, why).
    pub unmapped: BTreeMap<String, (u64, String)>,
    /// Files a rosbag2 folder's metadata lists that are not there.
    pub missing_files: Vec<String>,
    /// Messages moved to the next free µs.
    pub shifted: u64,
    /// Labels messages without their record.
    pub orphan_labels: u64,
}

impl Report {
    /// Whether every message of the input was imported (or filtered out on purpose).
    pub fn complete(&self) -> bool {
        self.skipped_chunks.is_empty()
            && self.missing_files.is_empty()
            && self.truncated.is_empty()
            && self.after_data_end.is_empty()
            && self.unknown_channel == 0
            && self.missing_schema.is_empty()
            && self.redefined.is_empty()
            && self.unmapped.is_empty()
            && self.skipped_records.is_empty()
            && self.refused.is_empty()
    }

    /// One line per thing to report.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(self.missing_files.iter().map(|f| {
            format!("{f} is listed in the bag's metadata.yaml but is not in its folder: its messages were not imported")
        }));
        out.extend(self.skipped_chunks.iter().cloned());
        if self.lost_messages > 0 {
            out.push(format!(
                "{} message(s) were in the skipped chunk(s)",
                self.lost_messages
            ));
        }
        out.extend(self.truncated.iter().cloned());
        out.extend(self.after_data_end.iter().cloned());
        if self.unknown_channel > 0 {
            out.push(format!(
                "{} message(s) of channels whose definition was lost (in a skipped chunk) were skipped",
                self.unknown_channel
            ));
        }
        for (topic, (n, id)) in &self.missing_schema {
            out.push(format!(
                "{n} message(s) of topic {topic:?} were imported without a schema: their channel names schema id {id}, which the file does not define before them (the file is malformed)"
            ));
        }
        out.extend(self.redefined.iter().cloned());
        out.extend(self.skipped_records.iter().cloned());
        for (topic, (n, why)) in &self.unmapped {
            out.push(format!("{n} message(s) of topic {topic:?} skipped: {why}"));
        }
        for (topic, (n, why)) in &self.refused {
            out.push(format!("{n} message(s) of topic {topic:?} refused: {why}"));
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

/// How many of the last timestamps of an entry an import remembers: a message whose log
/// time goes back (MCAP does not require log-time order) is placed on a µs none of them
/// took.
const TAKEN_WINDOW: usize = 64;

/// The timestamps the last messages of an entry got.
#[derive(Default)]
struct Taken {
    /// (µs of the last message's log time, the timestamp it got).
    last: (u64, u64),
    /// The largest timestamp given.
    max: u64,
    /// The last [`TAKEN_WINDOW`] timestamps given.
    recent: std::collections::VecDeque<u64>,
}

impl Taken {
    /// The timestamp of a message at `orig` µs: `orig`, or after the run of messages that
    /// moved (same µs), then the first µs from there none of the last [`TAKEN_WINDOW`]
    /// took. Bug "a message back in time was dropped": only the last message was looked
    /// at, so messages at 1000, 2000 then 1500 ns of one topic gave 1, 2 and 1 µs, and the
    /// third was refused as a conflict with the first.
    fn place(&self, orig: u64) -> u64 {
        let (lo, lt) = self.last;
        let mut ts = if orig >= lo && orig <= lt {
            lt.saturating_add(1)
        } else {
            orig
        };
        if ts > self.max {
            return ts;
        }
        while ts < u64::MAX && self.recent.contains(&ts) {
            ts += 1;
        }
        ts
    }

    fn take(&mut self, orig: u64, ts: u64) {
        self.last = (orig, ts);
        self.max = self.max.max(ts);
        self.recent.push_back(ts);
        if self.recent.len() > TAKEN_WINDOW {
            self.recent.pop_front();
        }
    }
}

struct SchemaDef {
    name: String,
    encoding: String,
    data: Vec<u8>,
    /// Its record's timestamp ([`schema_ts`]), hashed once, when a message first uses it:
    /// hashed for every message, a 4 MiB schema cost 4 MiB of SHA-256 per message of its
    /// channels; hashed as it was read, every unused schema of a file cost its SHA-256.
    ts: OnceCell<u64>,
}

impl SchemaDef {
    fn ts(&self) -> u64 {
        *self
            .ts
            .get_or_init(|| schema_ts(&self.name, &self.encoding, &self.data))
    }

    /// What it holds, counted as an export counts it.
    fn held_bytes(&self) -> u64 {
        (self.name.len() + self.encoding.len() + self.data.len()) as u64
    }
}

/// What one file defines as it is read.
#[derive(Default)]
struct FileState {
    channels: HashMap<u16, Channel>,
    /// A schema, or why it is refused (its messages are refused with that reason).
    schemas: HashMap<u16, Result<SchemaDef, String>>,
    /// Bytes of the schemas held ([`SchemaDef::held_bytes`]), at most
    /// [`MAX_SCHEMA_TOTAL_BYTES`]: 8 schemas of 200 MiB (a 52 KB file) were 2.2 GB of
    /// `tsblob cp`'s memory, held to the end of the file.
    schema_bytes: u64,
    /// Why the rest of the file is not read (its schemas passed their bound).
    stop: Option<String>,
    /// Ids defined again with other content: ("schema" or "channel", id) → (how many
    /// times, the first change described).
    redefined: BTreeMap<(&'static str, u16), (u64, String)>,
}

impl FileState {
    /// Notes that `kind` id `id` was defined again with other content (`change`: what was
    /// and what is now).
    fn redefined(&mut self, kind: &'static str, id: u16, change: impl FnOnce() -> String) {
        self.redefined
            .entry((kind, id))
            .or_insert_with(|| (0, change()))
            .0 += 1;
    }
}

impl Channel {
    /// What a report says of it.
    fn describe(&self) -> String {
        format!(
            "topic {:?}, encoding {:?}, schema id {}",
            self.topic, self.encoding, self.schema
        )
    }

    fn same(&self, other: &Channel) -> bool {
        self.topic == other.topic
            && self.encoding == other.encoding
            && self.schema == other.schema
            && self.metadata == other.metadata
    }
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
    /// entry → the timestamps its last messages got.
    last: HashMap<String, Taken>,
    /// Schema records already handed on.
    schemas_sent: HashSet<u64>,
    /// A record waiting for its labels message, and its topic and log time.
    pending: Option<(OutRecord, String, u64)>,
    stopped: bool,
    /// Whether each message's data is a zstd frame (a rosbag2 bag compressed by message).
    zstd_messages: bool,
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
            zstd_messages: false,
        }
    }

    /// Inflates each message's data (a zstd frame) before it becomes a record: a rosbag2
    /// bag whose metadata says `compression_mode: message`.
    pub fn inflating_messages(mut self) -> Self {
        self.zstd_messages = true;
        self
    }

    /// Reads one file. Damage is reported in [`Importer::report`], not returned.
    pub fn read_file(&mut self, path: &Path) -> Result<(), ImportError> {
        self.read_file_as(path, &path.display().to_string())
    }

    /// Reads the file at `path`, reported as `name` (a bag's file inflated into a
    /// temporary one is reported by its own name).
    pub fn read_file_as(&mut self, path: &Path, name: &str) -> Result<(), ImportError> {
        use ::mcap::records::op;
        let name = name.to_string();
        let io = |error| ImportError::Io {
            path: name.clone(),
            error,
        };
        let Some(mut reader) = FileReader::open(path, name.clone()).map_err(io)? else {
            return Err(ImportError::NotMcap { path: name.clone() });
        };
        self.report.files += 1;
        let mut st = FileState::default();
        // Chunk and message records after the Data End record: how many of each, and the
        // byte the first starts at.
        let mut late = (0u64, 0u64, None);
        // Top-level records of the invalid opcode 0x00: how many, and the byte of the first.
        let mut invalid = (0u64, None);
        loop {
            match reader.next().map_err(io)? {
                Step::End(cut) => {
                    self.report.truncated.extend(cut);
                    break;
                }
                Step::Record(r) => {
                    self.record(r, &mut st);
                }
                Step::Chunk { plain, big, end } => {
                    walk(
                        &plain,
                        &mut |at, r| match (big.binary_search_by_key(&at, |b| b.0), r) {
                            (Ok(i), Record::Message { header, .. }) => {
                                self.refuse_large(&st, header.channel_id, big[i].1);
                                !self.stopped
                            }
                            (Ok(i), Record::Schema { header, .. }) => {
                                self.put_schema(&mut st, header.id, Err(big[i].1));
                                !self.stopped
                            }
                            (_, r) => self.record(r, &mut st),
                        },
                    )
                    .map_err(|e| {
                        // Walked once already: cannot fail.
                        self.report.skipped_chunks.push(format!(
                            "{name}: the chunk ending at byte {end} is damaged ({e}): skipped"
                        ))
                    })
                    .ok();
                }
                Step::Lost(n) => self.report.lost_messages += n,
                Step::Damaged(why) => self.report.skipped_chunks.push(why),
                Step::TooLarge(why) => self.report.skipped_records.push(why),
                Step::LargeMessage { channel, size } => self.refuse_large(&st, channel, size),
                Step::LargeSchema { id, size } => self.put_schema(&mut st, id, Err(size)),
                Step::AfterDataEnd { opcode, at } => {
                    if opcode == op::CHUNK {
                        late.0 += 1;
                    } else {
                        late.1 += 1;
                    }
                    late.2.get_or_insert(at);
                }
                Step::Invalid { at } => {
                    invalid.0 += 1;
                    invalid.1.get_or_insert(at);
                }
                Step::Unused => {}
            }
            if let Some(why) = st.stop.take() {
                self.report.truncated.push(format!(
                    "{name}: {why}, after byte {}: the {} byte(s) after it were not read",
                    reader.offset(),
                    reader.size().saturating_sub(reader.offset())
                ));
                break;
            }
            if self.stopped {
                return Ok(());
            }
        }
        if let (n, Some(first)) = invalid {
            self.report.skipped_records.push(format!(
                "{name}: {n} record(s) of opcode 0x00, which MCAP reserves as invalid, were skipped (the first at byte {first}): the file is damaged (zeros where records should be?)"
            ));
        }
        for ((kind, id), (n, change)) in std::mem::take(&mut st.redefined) {
            self.report.redefined.push(format!(
                "{name}: {kind} id {id} is defined again with other content ({change}{}): MCAP ids may not change within a file (the file is malformed); the messages after each definition were imported with it",
                if n > 1 { format!("; {n} times in all") } else { String::new() }
            ));
        }
        if let (chunks, messages, Some(first)) = late {
            self.report.after_data_end.push(format!(
                "{name}: {chunks} chunk(s) and {messages} message(s) after the Data End record (the first at byte {first}) were not imported: the file is malformed (after Data End only the summary may come: schemas, channels, indexes, statistics, and the footer)"
            ));
        }
        self.flush_pending();
        Ok(())
    }

    /// A message too large to import, refused (reported under its topic) unread.
    fn refuse_large(&mut self, st: &FileState, channel: u16, size: u64) {
        let Some(ch) = st.channels.get(&channel) else {
            self.report.unknown_channel += 1;
            return;
        };
        let why = format!(
            "a message of {size} bytes is over the {} a message may be (the most an MCAP export carries back)",
            tsblob_proto::format_size(MAX_MESSAGE_BYTES)
        );
        self.report
            .refused
            .entry(ch.topic.clone())
            .or_insert((0, why))
            .0 += 1;
    }

    /// Defines schema `id` (or refuses it: `Err(its size)`), within the file's bound on
    /// schema bytes; past it, the file stops ([`FileState::stop`]).
    fn put_schema(&mut self, st: &mut FileState, id: u16, def: Result<SchemaDef, u64>) {
        let old = match st.schemas.get(&id) {
            Some(Ok(s)) => {
                if let Ok(new) = &def {
                    if new.name == s.name && new.encoding == s.encoding && new.data == s.data {
                        return; // the same again (a writer repeats it in every chunk)
                    }
                }
                let was = describe_schema(s);
                let now = match &def {
                    Ok(new) => describe_schema(new),
                    Err(size) => format!("a record of {size} bytes"),
                };
                let held = s.held_bytes();
                st.redefined("schema", id, || format!("{was}, then {now}"));
                held
            }
            Some(Err(_)) => {
                // A schema refused for its size: only another refused one may be the same.
                if let Ok(new) = &def {
                    let now = describe_schema(new);
                    st.redefined("schema", id, || {
                        format!("one over the bound of a schema, then {now}")
                    });
                }
                0
            }
            None => 0,
        };
        let held = st.schema_bytes - old;
        let entry = match def {
            Ok(s) => {
                let bytes = s.held_bytes();
                if held.saturating_add(bytes) > MAX_SCHEMA_TOTAL_BYTES {
                    st.stop = Some(format!(
                        "its schemas need more than the {} in all an import holds (and an export carries back)",
                        tsblob_proto::format_size(MAX_SCHEMA_TOTAL_BYTES)
                    ));
                    return;
                }
                st.schema_bytes = held + bytes;
                Ok(s)
            }
            Err(size) => {
                st.schema_bytes = held;
                Err(format!(
                    "its schema (id {id}) is {size} bytes, over the {} of a schema an MCAP export reads back",
                    tsblob_proto::format_size(MAX_SCHEMA_BYTES)
                ))
            }
        };
        st.schemas.insert(id, entry);
    }

    /// Handles one record; false once the file is to stop (its schemas passed their
    /// bound, or the receiver stopped).
    fn record(&mut self, r: Record<'_>, st: &mut FileState) -> bool {
        if self.stopped || st.stop.is_some() {
            return false;
        }
        match r {
            Record::Schema { header, data } => {
                let def = if data.len() as u64 > MAX_SCHEMA_BYTES {
                    Err(data.len() as u64)
                } else {
                    Ok(SchemaDef {
                        name: header.name,
                        encoding: header.encoding,
                        data: data.into_owned(),
                        ts: OnceCell::new(),
                    })
                };
                self.put_schema(st, header.id, def);
            }
            Record::Channel(c) => {
                let entry = topic_to_entry(&c.topic).map_err(|e| e.why);
                let new = Channel {
                    topic: c.topic,
                    encoding: c.message_encoding,
                    schema: c.schema_id,
                    metadata: c.metadata,
                    entry,
                };
                match st.channels.get(&c.id) {
                    Some(old) if old.same(&new) => return true, // repeated (every chunk)
                    Some(old) => {
                        let change = format!("{}, then {}", old.describe(), new.describe());
                        st.redefined("channel", c.id, || change);
                    }
                    None => {}
                }
                st.channels.insert(c.id, new);
            }
            Record::Message { header, data } => {
                if data.len() as u64 > MAX_MESSAGE_BYTES {
                    self.refuse_large(st, header.channel_id, data.len() as u64);
                    return true;
                }
                let Some(ch) = st.channels.get(&header.channel_id) else {
                    self.report.unknown_channel += 1;
                    return true;
                };
                if let Some(of) = ch.metadata.get(M_LABELS_OF) {
                    self.labels(of, header.log_time, &data);
                    return true;
                }
                let data = if self.zstd_messages {
                    match inflate_message(&data, MAX_MESSAGE_BYTES) {
                        Ok(plain) => Cow::Owned(plain),
                        Err(why) => {
                            self.report
                                .refused
                                .entry(ch.topic.clone())
                                .or_insert((0, why))
                                .0 += 1;
                            return true;
                        }
                    }
                } else {
                    data
                };
                let schema = match st.schemas.get(&ch.schema) {
                    Some(Err(why)) => {
                        self.report
                            .refused
                            .entry(ch.topic.clone())
                            .or_insert((0, why.clone()))
                            .0 += 1;
                        return true;
                    }
                    Some(Ok(s)) => Some(s),
                    None => None,
                };
                self.flush_pending();
                self.message(ch, schema, &header, data.into_owned());
            }
            _ => {}
        }
        !self.stopped && st.stop.is_none()
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
        let ts = self.last.get(&entry).map_or(orig, |t| t.place(orig));
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
            let sts = s.ts();
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
                    data: s.data.clone(),
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
        if schema.is_none() && ch.schema != 0 {
            // Schema id 0 is "no schema"; any other must be defined before the channel.
            self.report
                .missing_schema
                .entry(ch.topic.clone())
                .or_insert((0, ch.schema))
                .0 += 1;
        }
        if ts != orig {
            self.report.shifted += 1;
        }
        self.last.entry(entry).or_default().take(orig, ts);
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

/// What a report says of a schema.
fn describe_schema(s: &SchemaDef) -> String {
    format!("{:?} ({:?}, {} bytes)", s.name, s.encoding, s.data.len())
}

/// Inflates one message of a `message`-compressed bag, within `max` bytes: `Err` says why
/// it could not be.
fn inflate_message(data: &[u8], max: u64) -> Result<Vec<u8>, String> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(data)
        .map_err(|e| format!("its data does not inflate as zstd ({e})"))?;
    let mut out = Vec::new();
    (&mut decoder)
        .take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("its data does not inflate as zstd ({e})"))?;
    if out.len() as u64 > max {
        return Err(format!(
            "its data inflates to more than the {} a message may be",
            tsblob_proto::format_size(max)
        ));
    }
    Ok(out)
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

    /// An MCAP file of one topic `/t` with a message at each log time (ns), payload its
    /// index.
    fn one_topic(times: &[u64]) -> Vec<u8> {
        let mut w = ::mcap::WriteOptions::new()
            .create(std::io::Cursor::new(Vec::new()))
            .unwrap();
        let c = w.add_channel(0, "/t", "json", &BTreeMap::new()).unwrap();
        for (i, t) in times.iter().enumerate() {
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
        w.into_inner().into_inner()
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
        let (recs, report) = import(&one_topic(&[5_000u64, 5_100, 5_900, 6_000, 9_000]));
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

    /// Bug "a message back in time was dropped" ([`Taken::place`]): messages at 1000, 2000
    /// then 1500 ns on one topic (valid MCAP: log times need not be in order) got 1, 2 and
    /// 1 µs, and the third was refused as a conflict (the probe: 3,002 of 3,003 stored).
    /// It now goes to the first µs none of the topic's last messages took, its time kept.
    #[test]
    fn a_message_back_in_time_landed_on_a_taken_microsecond() {
        let times = [1_000u64, 2_000, 1_500, 1_000, 3_000, 2_500];
        let (recs, report) = import(&one_topic(&times));
        let ts: Vec<u64> = recs.iter().map(|r| r.ts).collect();
        assert_eq!(ts, [1, 2, 3, 4, 5, 6], "every message on a µs of its own");
        assert_eq!(report.shifted, 4);
        let back: Vec<u64> = recs
            .iter()
            .map(|r| {
                r.labels
                    .get(L_LOG_TIME)
                    .map_or(r.ts * 1000, |v| v.parse().unwrap())
            })
            .collect();
        assert_eq!(back, times);
    }

    /// lz4 chunks go through the `mcap` crate's reader, held to their claimed size
    /// (`limited_chunk_plain`), uncompressed ones are read in place: intact ones import whole.
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

    /// Bug "records after the Data End record were dropped silently": a chunk and a message
    /// placed after Data End (where only the summary and the footer may be) were skipped
    /// unsaid. They are still not imported, but counted and reported with the byte of the
    /// first; the summary's own records (channels, schemas, indexes, statistics) are not.
    #[test]
    fn records_after_data_end_are_reported() {
        use ::mcap::records::op;
        let mut bytes = sample(60);
        let (mut at, mut chunk) = (::mcap::MAGIC.len(), None);
        while bytes[at] != op::DATA_END {
            let len = u64::from_le_bytes(bytes[at + 1..at + 9].try_into().unwrap()) as usize;
            if bytes[at] == op::CHUNK && chunk.is_none() {
                chunk = Some(bytes[at..at + 9 + len].to_vec());
            }
            at += 9 + len;
        }
        let after = at + 13;
        let mut late = chunk.unwrap();
        // A message: its 22-byte header (channel 0, times 0) and one byte of data.
        late.push(op::MESSAGE);
        late.extend_from_slice(&23u64.to_le_bytes());
        late.extend_from_slice(&[0u8; 23]);
        bytes.splice(after..after, late);
        let (recs, report) = import(&bytes);
        assert!(!report.complete());
        assert_eq!(report.after_data_end.len(), 1, "{:?}", report.lines());
        let line = &report.after_data_end[0];
        assert!(
            line.contains(&format!(
                "1 chunk(s) and 1 message(s) after the Data End record (the first at byte {after}) were not imported"
            )),
            "{line}"
        );
        assert_eq!(recs.iter().filter(|r| r.entry != SCHEMAS_ENTRY).count(), 60);
        assert_eq!(report.lines(), std::slice::from_ref(line));
    }

    #[test]
    fn a_message_inflates_within_its_bound() {
        let frame = zstd::encode_all(&vec![7u8; 100_000][..], 3).unwrap();
        assert_eq!(
            inflate_message(&frame, 100_000).unwrap(),
            vec![7u8; 100_000]
        );
        let err = inflate_message(&frame, 99_999).unwrap_err();
        assert!(err.contains("inflates to more than"), "{err}");
        assert!(inflate_message(b"not zstd", 10).is_err());
    }
}
