//! Records out as MCAP: [`Exporter`] over any `Write` (the HTTP route that streams it is
//! `http/query/mcap_export.rs`).
//!
//! Mapping (also in `docs/api.md`, "MCAP export"):
//!
//! * a channel per (entry, content type, schema): topic = the record's `mcap.topic` label if
//!   it has one (an imported record: its original topic), else the entry name; message
//!   encoding = `mcap.encoding` if set, else [`super::encoding_of`] the content type;
//!   channel metadata `tsblob.entry` and `tsblob.content_type`;
//! * a message per record: log time = `mcap.log_time_ns` if set, else the timestamp × 1000
//!   (ns); publish time = `mcap.publish_time_ns` if set, else the log time; sequence =
//!   `mcap.sequence` or 0; data = the payload, byte for byte;
//! * the record's other labels, when it has any, as a JSON object in a message of the same
//!   log time on the topic's labels channel (`<topic>#labels`, encoding `json`, schema
//!   `tsblob.Labels`, metadata `tsblob.labels_of` = the topic), written right after it;
//! * the schema a record names with `mcap.schema_id` (from the bucket's
//!   [`super::SCHEMAS_ENTRY`]) as the channel's schema.
//!
//! The writer never seeks (`NoSeek`): a chunk (1 MiB of messages before compression, or
//! one message if larger) is compressed with zstd in memory and written whole with its
//! message indexes; chunk indexes, statistics and the summary offsets follow at the end.
//! Memory: one chunk, its compressed copy, and the chunk indexes (a few dozen bytes per
//! chunk).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use ::mcap::records::MessageHeader;
use ::mcap::write::NoSeek;
use tsblob_storage::{Labels, Query, Store};

use super::{
    encoding_of, topic_to_entry, user_labels, LABELS_SCHEMA, LABELS_SCHEMA_NAME, LABELS_SUFFIX,
    L_ENCODING, L_LOG_TIME, L_PUBLISH_TIME, L_SCHEMA_ID, L_SEQUENCE, L_TOPIC, M_CONTENT_TYPE,
    M_ENTRY, M_LABELS_OF, SCHEMAS_ENTRY,
};

/// The media type of an MCAP answer.
pub const MEDIA_TYPE: &str = "application/x-mcap";

/// A schema kept in [`SCHEMAS_ENTRY`].
#[derive(Debug, Clone)]
pub struct SchemaDef {
    pub name: String,
    pub encoding: String,
    pub data: Vec<u8>,
}

impl SchemaDef {
    /// The bytes an export's writer keeps of it until the end (counted against
    /// [`MAX_SCHEMA_TOTAL_BYTES`] and in the server's memory budget).
    pub fn held_bytes(&self) -> u64 {
        (self.name.len() + self.encoding.len() + self.data.len()) as u64
    }
}

/// Why an export stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("writing the MCAP: {0}")]
    Mcap(#[from] ::mcap::McapError),
    #[error("labels of {entry} {ts} could not be written as JSON: {source}")]
    Labels {
        entry: String,
        ts: u64,
        source: serde_json::Error,
    },
    #[error("looking up schema {id} of {entry}: {message}")]
    Schema {
        entry: String,
        id: u64,
        message: String,
    },
    /// A schema record over [`MAX_SCHEMA_BYTES`] (written by another writer than the
    /// import, which refuses one): the request cannot be answered as it is, nothing failed.
    #[error("the schema of entry {entry:?} (record {id} of {schemas}) is {size} bytes, over the {max} of a schema an MCAP export reads: export the other entries, or read the records with a plain query", schemas = super::SCHEMAS_ENTRY, max = tsblob_proto::format_size(MAX_SCHEMA_BYTES))]
    SchemaTooLarge { entry: String, id: u64, size: u64 },
    /// More channels or schemas than an export keeps ([`MAX_CHANNELS`], [`MAX_SCHEMAS`]).
    #[error("the export needs more than {max} {what} (distinct topics, encodings and content types of its entries, or schemas): export fewer entries or a shorter range at once")]
    TooMany { what: &'static str, max: usize },
    /// The schemas' bytes past [`MAX_SCHEMA_TOTAL_BYTES`].
    #[error("the export's schemas need more than {max} bytes in all: export fewer entries or a shorter range at once")]
    SchemaBytes { max: u64 },
}

/// The most channels (its own and the labels' channels) one export keeps: each is held
/// twice until the end (here and in the writer's summary), with a topic and an encoding
/// of up to 4 KiB each from labels; 65,534 of them were ~1.1 GiB an export.
pub const MAX_CHANNELS: usize = 4096;
/// The most schemas one export keeps (each held whole by the writer until the end).
pub const MAX_SCHEMAS: usize = 1024;
/// The largest schema an export reads from `.mcap-schemas`.
pub const MAX_SCHEMA_BYTES: u64 = 4 << 20;
/// The most bytes of schemas one export holds in all (the writer keeps each whole for the
/// summary until the end): 1,024 schemas of 4 MiB were 4 GiB of one export's memory, and a
/// token may run 64 exports.
pub const MAX_SCHEMA_TOTAL_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ChannelKey {
    entry: String,
    topic: String,
    encoding: String,
    content_type: String,
    schema: u64,
}

/// Writes records as MCAP messages into `W`.
pub struct Exporter<W: Write> {
    w: ::mcap::Writer<NoSeek<W>>,
    channels: HashMap<ChannelKey, u16>,
    /// topic → its labels channel.
    labels_channels: HashMap<String, u16>,
    labels_schema: Option<u16>,
    /// schema record ts → MCAP schema id (0: not found, exported without a schema).
    schemas: HashMap<u64, u16>,
    /// Bytes of the schemas added (name, encoding and data), at most
    /// [`MAX_SCHEMA_TOTAL_BYTES`].
    schema_bytes: u64,
    /// Messages written (records; labels messages not counted).
    pub messages: u64,
}

impl<W: Write> Exporter<W> {
    pub fn new(w: W) -> Result<Self, ExportError> {
        let opts = ::mcap::WriteOptions::new()
            .compression(Some(::mcap::Compression::Zstd))
            .disable_seeking(true)
            // One thread per export: a server runs several at once.
            .compression_threads(0)
            .library(concat!("tsblob ", env!("CARGO_PKG_VERSION")));
        Ok(Exporter {
            w: opts.create(NoSeek::new(w))?,
            channels: HashMap::new(),
            labels_channels: HashMap::new(),
            labels_schema: None,
            schemas: HashMap::new(),
            schema_bytes: 0,
            messages: 0,
        })
    }

    /// Writes one record; `schema` looks up a schema record by its timestamp. Records of
    /// [`SCHEMAS_ENTRY`] are not messages: skipped (`Ok(false)`).
    pub fn add(
        &mut self,
        entry: &str,
        ts: u64,
        content_type: &str,
        labels: &Labels,
        data: &[u8],
        schema: &mut dyn FnMut(u64) -> Result<Option<SchemaDef>, SchemaLookup>,
    ) -> Result<bool, ExportError> {
        if entry == SCHEMAS_ENTRY {
            return Ok(false);
        }
        let num = |k: &str| labels.get(k).and_then(|v| v.parse::<u64>().ok());
        let schema_ts = num(L_SCHEMA_ID).unwrap_or(0);
        // The record's original topic only when it names this entry (an import gives the
        // label so): any writer may set `mcap.topic`, and a topic naming another entry put
        // the record into that entry when the export was imported again.
        let topic = match labels.get(L_TOPIC) {
            Some(t) if topic_to_entry(t).is_ok_and(|e| e == entry) => t.as_str(),
            _ => entry,
        };
        let key = ChannelKey {
            entry: entry.to_string(),
            topic: topic.to_string(),
            encoding: labels
                .get(L_ENCODING)
                .map_or_else(|| encoding_of(content_type).to_string(), Clone::clone),
            content_type: content_type.to_string(),
            schema: schema_ts,
        };
        let channel = match self.channels.get(&key) {
            Some(id) => *id,
            None => {
                self.room_for_a_channel()?;
                let schema_id = self.schema_id(entry, schema_ts, schema)?;
                let meta = BTreeMap::from([
                    (M_ENTRY.to_string(), entry.to_string()),
                    (M_CONTENT_TYPE.to_string(), content_type.to_string()),
                ]);
                let id = self
                    .w
                    .add_channel(schema_id, &key.topic, &key.encoding, &meta)?;
                self.channels.insert(key, id);
                id
            }
        };
        let log_time = num(L_LOG_TIME).unwrap_or_else(|| ts.saturating_mul(1000));
        let header = MessageHeader {
            channel_id: channel,
            sequence: num(L_SEQUENCE).map_or(0, |s| s as u32),
            log_time,
            publish_time: num(L_PUBLISH_TIME).unwrap_or(log_time),
        };
        self.w.write_to_known_channel(&header, data)?;
        self.messages += 1;
        let own = user_labels(labels);
        if !own.is_empty() {
            let json = serde_json::to_vec(&own).map_err(|source| ExportError::Labels {
                entry: entry.to_string(),
                ts,
                source,
            })?;
            let channel = self.labels_channel(topic)?;
            self.w.write_to_known_channel(
                &MessageHeader {
                    channel_id: channel,
                    sequence: 0,
                    log_time,
                    publish_time: log_time,
                },
                &json,
            )?;
        }
        Ok(true)
    }

    fn schema_id(
        &mut self,
        entry: &str,
        ts: u64,
        schema: &mut dyn FnMut(u64) -> Result<Option<SchemaDef>, SchemaLookup>,
    ) -> Result<u16, ExportError> {
        if ts == 0 {
            return Ok(0);
        }
        if let Some(id) = self.schemas.get(&ts) {
            return Ok(*id);
        }
        if self.schemas.len() >= MAX_SCHEMAS {
            return Err(ExportError::TooMany {
                what: "schemas",
                max: MAX_SCHEMAS,
            });
        }
        let id = match schema(ts).map_err(|e| match e {
            SchemaLookup::TooLarge { size } => ExportError::SchemaTooLarge {
                entry: entry.to_string(),
                id: ts,
                size,
            },
            SchemaLookup::Failed(message) => ExportError::Schema {
                entry: entry.to_string(),
                id: ts,
                message,
            },
        })? {
            Some(s) => {
                let bytes = s.held_bytes();
                if self.schema_bytes.saturating_add(bytes) > MAX_SCHEMA_TOTAL_BYTES {
                    return Err(ExportError::SchemaBytes {
                        max: MAX_SCHEMA_TOTAL_BYTES,
                    });
                }
                self.schema_bytes += bytes;
                self.w.add_schema(&s.name, &s.encoding, &s.data)?
            }
            None => 0,
        };
        self.schemas.insert(ts, id);
        Ok(id)
    }

    /// Fails when one more channel would pass [`MAX_CHANNELS`].
    fn room_for_a_channel(&self) -> Result<(), ExportError> {
        if self.channels.len() + self.labels_channels.len() >= MAX_CHANNELS {
            return Err(ExportError::TooMany {
                what: "channels",
                max: MAX_CHANNELS,
            });
        }
        Ok(())
    }

    fn labels_channel(&mut self, topic: &str) -> Result<u16, ExportError> {
        if let Some(id) = self.labels_channels.get(topic) {
            return Ok(*id);
        }
        self.room_for_a_channel()?;
        let schema = match self.labels_schema {
            Some(s) => s,
            None => {
                let s = self.w.add_schema(
                    LABELS_SCHEMA_NAME,
                    "jsonschema",
                    LABELS_SCHEMA.as_bytes(),
                )?;
                self.labels_schema = Some(s);
                s
            }
        };
        let meta = BTreeMap::from([(M_LABELS_OF.to_string(), topic.to_string())]);
        let id = self
            .w
            .add_channel(schema, &format!("{topic}{LABELS_SUFFIX}"), "json", &meta)?;
        self.labels_channels.insert(topic.to_string(), id);
        Ok(id)
    }

    /// Ends the file (last chunk, summary, footer) and hands back the output.
    pub fn finish(mut self) -> Result<W, ExportError> {
        self.w.finish()?;
        Ok(self.w.into_inner().into_inner())
    }
}

/// Why a schema was not found.
#[derive(Debug)]
pub enum SchemaLookup {
    /// Its record is over [`MAX_SCHEMA_BYTES`]: it was 500 `internal` ("see the server
    /// log"), for every export touching its entry.
    TooLarge {
        size: u64,
    },
    Failed(String),
}

impl From<String> for SchemaLookup {
    fn from(m: String) -> Self {
        SchemaLookup::Failed(m)
    }
}

/// The schema record at `ts` of a bucket's [`SCHEMAS_ENTRY`], if there is one.
pub fn load_schema(
    store: &Store,
    bucket: &str,
    ts: u64,
) -> Result<Option<SchemaDef>, SchemaLookup> {
    let q = Query {
        start: Some(ts),
        stop: Some(ts.saturating_add(1)),
        ..Query::default()
    };
    let mut it = match store.query(bucket, SCHEMAS_ENTRY, &q) {
        Ok(it) => it,
        Err(tsblob_storage::Error::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.to_string().into()),
    };
    while let Some(item) = it.next_bounded() {
        let Some(item) = item.map_err(|e| SchemaLookup::Failed(e.to_string()))? else {
            continue;
        };
        if item.meta.size > MAX_SCHEMA_BYTES {
            return Err(SchemaLookup::TooLarge {
                size: item.meta.size,
            });
        }
        let data = match item.data() {
            Ok(d) => d,
            Err(tsblob_storage::Error::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.to_string().into()),
        };
        let l = &item.meta.labels;
        return Ok(Some(SchemaDef {
            name: l.get(super::L_SCHEMA).cloned().unwrap_or_default(),
            encoding: l.get(super::L_SCHEMA_ENCODING).cloned().unwrap_or_default(),
            data,
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_export_reads_back_with_every_message_and_its_labels() {
        let mut x = Exporter::new(Vec::new()).unwrap();
        let mut none = |_: u64| -> Result<Option<SchemaDef>, SchemaLookup> { Ok(None) };
        let labels = Labels::from([("k".to_string(), "v".to_string())]);
        for ts in 1..=3u64 {
            x.add("a/b", ts, "application/json", &labels, b"{}", &mut none)
                .unwrap();
        }
        x.add("c", 2, "image/jpeg", &Labels::new(), b"\xff\xd8", &mut none)
            .unwrap();
        let bytes = x.finish().unwrap();
        let summary = ::mcap::Summary::read(&bytes).unwrap().unwrap();
        assert!(!summary.chunk_indexes.is_empty());
        let msgs: Vec<_> = ::mcap::MessageStream::new(&bytes)
            .unwrap()
            .map(|m| m.unwrap())
            .map(|m| (m.channel.topic.clone(), m.log_time, m.data.into_owned()))
            .collect();
        assert_eq!(msgs.len(), 7);
        assert_eq!(msgs[0], ("a/b".to_string(), 1000, b"{}".to_vec()));
        assert_eq!(
            msgs[1],
            ("a/b#labels".to_string(), 1000, br#"{"k":"v"}"#.to_vec())
        );
        assert!(msgs.contains(&("c".to_string(), 2000, b"\xff\xd8".to_vec())));
    }

    /// Bug "mcap.* labels steer an export" (MCAP probe of 2026-11-28): a record's
    /// `mcap.topic` label, which any writer may set, became its topic whatever it named, so
    /// an export imported again put entry `a`'s record into entry `b`. A topic naming
    /// another entry is not used: the entry's own name is.
    #[test]
    fn a_topic_label_naming_another_entry_steered_the_export() {
        let mut x = Exporter::new(Vec::new()).unwrap();
        let mut none = |_: u64| -> Result<Option<SchemaDef>, SchemaLookup> { Ok(None) };
        let topic = |t: &str| Labels::from([(L_TOPIC.to_string(), t.to_string())]);
        x.add("a", 1, "image/jpeg", &topic("/b"), b"x", &mut none)
            .unwrap();
        x.add(
            "cams/front",
            2,
            "image/jpeg",
            &topic("/cams/front"),
            b"y",
            &mut none,
        )
        .unwrap();
        let bytes = x.finish().unwrap();
        let topics: Vec<String> = ::mcap::MessageStream::new(&bytes)
            .unwrap()
            .map(|m| m.unwrap().channel.topic.clone())
            .collect();
        assert_eq!(topics, ["a", "/cams/front"]);
    }

    /// Bug "channel flood": an export kept every distinct channel (up to 65,534, each
    /// with a topic and an encoding of up to 4 KiB from labels) twice until its end, ~1.1
    /// GiB; it now stops at `MAX_CHANNELS`.
    #[test]
    fn an_export_stops_at_max_channels() {
        let mut x = Exporter::new(Vec::new()).unwrap();
        let mut none = |_: u64| -> Result<Option<SchemaDef>, SchemaLookup> { Ok(None) };
        for ts in 0..MAX_CHANNELS as u64 {
            x.add(
                &format!("e{ts}"),
                ts,
                "image/jpeg",
                &Labels::new(),
                b"x",
                &mut none,
            )
            .unwrap();
        }
        let e = x
            .add("one-more", 1, "image/jpeg", &Labels::new(), b"x", &mut none)
            .unwrap_err();
        assert!(
            matches!(
                e,
                ExportError::TooMany {
                    what: "channels",
                    max: MAX_CHANNELS
                }
            ),
            "{e}"
        );
    }
}
