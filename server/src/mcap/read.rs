//! The bounded MCAP record reader under [`super::import`]: a file's top-level records one
//! at a time ([`FileReader`]), and a chunk's records uncompressed and handed on one at a
//! time ([`walk`]). What the records mean (topics, entries, timestamps, labels) is the
//! import's; this module only reads them, within bounds.
//!
//! A file is read front to back (memory: one chunk, inflated, and one message). Each record
//! is read by its opcode within a bound of its kind: a chunk of at most [`CHUNK_MAX`]
//! uncompressed (a chunk that fails its CRC, does not decompress or holds a record of the
//! invalid opcode 0x00 is skipped whole, its messages counted from the message indexes
//! after it; a top-level record of opcode 0x00 is skipped by its length and reported), a
//! message of at most
//! [`MAX_MESSAGE_BYTES`] (a larger one is refused, before it is read when it is outside a
//! chunk), a schema of at most [`MAX_SCHEMA_BYTES`], any other record the import uses of at
//! most [`OTHER_MAX`]. Records the import does not use (attachments, metadata, indexes, the
//! summary) are skipped by their length, never read into memory. A file cut short (or
//! whose framing breaks) stops at its last complete record, and the bytes after it are
//! reported. After the Data End record only the summary and the footer may come: a chunk or
//! message there is not read, but handed on as [`Step::AfterDataEnd`] to be reported.

use std::borrow::Cow;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use ::mcap::records::Record;
use ::mcap::sans_io::{LinearReadEvent, LinearReader, LinearReaderOptions};

use super::export::MAX_SCHEMA_BYTES;
use super::MAX_MESSAGE_BYTES;

/// The longest top-level record read whole besides chunks, messages and schemas (the
/// header, channels, message indexes): a longer one is skipped (reported) by its length.
/// Records the import does not use are skipped unread whatever their length: a 2 GiB
/// attachment (never imported) was read whole, 3.7 GB of `tsblob cp`'s memory.
const OTHER_MAX: u64 = 64 << 20;
/// Bytes a chunk record holds besides its compressed bytes, at most (its header: times,
/// sizes, CRC and compression name): a chunk record longer than [`CHUNK_MAX`] plus this is
/// skipped unread.
const CHUNK_SLACK: u64 = 1 << 20;
/// A message record's header (channel id, sequence, log and publish times).
const MESSAGE_HEADER: u64 = 2 + 4 + 8 + 8;
/// Room for a schema record's id, name and encoding beyond [`MAX_SCHEMA_BYTES`] of data.
const SCHEMA_SLACK: u64 = 128 << 10;
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
/// The opcode MCAP reserves as invalid: a record of it is damage (zeros where records
/// should be), never a record of a later version of the format.
const INVALID_OPCODE: u8 = 0x00;

/// Why a chunk holding a record of [`INVALID_OPCODE`] at `at` (in its uncompressed bytes)
/// is damaged. Bug (hostile probe of 2026-11-30): such records were taken as records of
/// an unknown kind and ignored, so a chunk of 1 GiB of zeros imported "0 records read"
/// and the copy exited 0.
fn invalid_opcode(at: u64) -> String {
    format!("a record of opcode 0x00, which MCAP reserves as invalid, at byte {at} of its uncompressed bytes")
}

/// What [`FileReader::next`] met: one top-level record of the file, or its end.
pub(super) enum Step<'a> {
    /// A record read whole within the bound of its kind, and parsed (a header, schema,
    /// channel, message or Data End record).
    Record(Record<'a>),
    /// A chunk, uncompressed and checked ([`chunk_plain`]): its records (hand them on with
    /// [`walk`]), the ones cut to their header ([`Skipped`]), and the byte it ends at.
    Chunk {
        plain: Cow<'a, [u8]>,
        big: Skipped,
        end: u64,
    },
    /// A message index: the messages it lists when the chunk before it was skipped (lost
    /// with it), else 0.
    Lost(u64),
    /// A chunk or record skipped as damaged (or a chunk over [`CHUNK_MAX`]): described.
    Damaged(String),
    /// A header, channel, message index, Data End or footer over [`OTHER_MAX`], skipped
    /// unread: described.
    TooLarge(String),
    /// A message over [`MAX_MESSAGE_BYTES`], skipped unread: its channel and data's size.
    LargeMessage { channel: u16, size: u64 },
    /// A schema record over [`MAX_SCHEMA_BYTES`] (and its slack), skipped unread: its id and
    /// the record's size.
    LargeSchema { id: u16, size: u64 },
    /// A chunk or message record after the Data End record, where only the summary (schemas,
    /// channels, indexes, statistics) and the footer may be: skipped unread. Its opcode and
    /// the byte it starts at.
    AfterDataEnd { opcode: u8, at: u64 },
    /// A top-level record of opcode 0x00, which MCAP reserves as invalid (zeros where
    /// records should be), skipped by its length: the byte it starts at.
    Invalid { at: u64 },
    /// A record the import does not use (attachment, metadata, index, statistics, summary,
    /// unknown opcode), skipped unread.
    Unused,
    /// The end of the file: its footer and end magic (`None`), or where it was cut short and
    /// what was not read.
    End(Option<String>),
}

/// A file's top-level records, one at a time, each within the bound of its kind.
pub(super) struct FileReader {
    file: std::fs::File,
    /// The file's name, as reported.
    name: String,
    size: u64,
    /// The offset after the last complete record.
    offset: u64,
    /// Whether the chunk before the message indexes being read was skipped.
    counting_lost: bool,
    /// Whether the Data End record was read: what follows is the summary.
    ended: bool,
    /// The last record read whole (what [`Step::Record`] and [`Step::Chunk`] borrow).
    body: Vec<u8>,
}

/// Whether `path` is a file that starts with the MCAP magic (`tsblob cp` checks its source
/// with it before it makes the destination bucket).
pub fn has_magic(path: &Path) -> std::io::Result<bool> {
    starts_with_magic(&mut std::fs::File::open(path)?)
}

/// Reads the first bytes of `file`: whether they are the MCAP magic.
fn starts_with_magic(file: &mut std::fs::File) -> std::io::Result<bool> {
    let mut magic = [0u8; 8];
    let got = read_full(file, &mut magic)?;
    Ok(got == magic.len() && magic == *::mcap::MAGIC)
}

impl FileReader {
    /// Opens `path` and reads its magic: `None` when it does not start with the MCAP magic.
    pub(super) fn open(path: &Path, name: String) -> std::io::Result<Option<FileReader>> {
        let mut file = std::fs::File::open(path)?;
        if !starts_with_magic(&mut file)? {
            return Ok(None);
        }
        let size = file.metadata()?.len();
        Ok(Some(FileReader {
            file,
            name,
            size,
            offset: ::mcap::MAGIC.len() as u64,
            counting_lost: false,
            ended: false,
            body: Vec::new(),
        }))
    }

    /// The offset after the last complete record.
    pub(super) fn offset(&self) -> u64 {
        self.offset
    }

    /// The file's size.
    pub(super) fn size(&self) -> u64 {
        self.size
    }

    /// The next record: read whole (within a bound), or skipped by its length. Not to be
    /// called again after [`Step::End`].
    pub(super) fn next(&mut self) -> std::io::Result<Step<'_>> {
        use ::mcap::records::op;
        // The last record's bytes go before the next one's are read.
        self.body = Vec::new();
        let name = &self.name;
        let offset = self.offset;
        let size = self.size;
        let file = &mut self.file;
        let mut head = [0u8; 9];
        let got = read_full(file, &mut head)?;
        let left = size.saturating_sub(offset);
        if got < head.len() {
            return Ok(Step::End(Some(if got == 0 {
                format!("{name}: the file ends at byte {offset} without its footer and end magic (cut short?): whatever came after it was not read")
            } else {
                format!("{name}: a record header is cut short after byte {offset}: the {left} byte(s) after it were not read")
            })));
        }
        let opcode = head[0];
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&head[1..]);
        let len = u64::from_le_bytes(len8);
        let end = offset.saturating_add(9).saturating_add(len);
        if end > size {
            return Ok(Step::End(Some(format!(
                "{name}: a record (opcode {opcode:#04x}) after byte {offset} claims {len} bytes, more than the file holds (cut short?): the {left} byte(s) after byte {offset} were not read"
            ))));
        }
        // What to do with the record: read it whole (within a bound), or skip it.
        let skip = match opcode {
            INVALID_OPCODE => Some(Step::Invalid { at: offset }),
            op::CHUNK | op::MESSAGE if self.ended => {
                Some(Step::AfterDataEnd { opcode, at: offset })
            }
            _ if self.ended && opcode != op::FOOTER => Some(Step::Unused),
            op::CHUNK => {
                self.counting_lost = false;
                if len > CHUNK_MAX + CHUNK_SLACK {
                    self.counting_lost = true;
                    Some(Step::Damaged(format!(
                        "{name}: the chunk after byte {offset} is {len} bytes, over the {} a chunk may hold: skipped",
                        tsblob_proto::format_size(CHUNK_MAX)
                    )))
                } else {
                    None
                }
            }
            op::MESSAGE if len > MAX_MESSAGE_BYTES + MESSAGE_HEADER => {
                let mut id = [0u8; 2];
                read_full(file, &mut id)?;
                file.seek(SeekFrom::Current(-2))?;
                Some(Step::LargeMessage {
                    channel: u16::from_le_bytes(id),
                    size: len - MESSAGE_HEADER,
                })
            }
            op::MESSAGE => None,
            op::SCHEMA if len > MAX_SCHEMA_BYTES + SCHEMA_SLACK => {
                let mut id = [0u8; 2];
                read_full(file, &mut id)?;
                file.seek(SeekFrom::Current(-2))?;
                Some(Step::LargeSchema {
                    id: u16::from_le_bytes(id),
                    size: len,
                })
            }
            op::SCHEMA => None,
            op::HEADER | op::CHANNEL | op::MESSAGE_INDEX | op::DATA_END | op::FOOTER => {
                if len > OTHER_MAX {
                    Some(Step::TooLarge(format!(
                        "{name}: a record (opcode {opcode:#04x}) after byte {offset} is {len} bytes, over the {} such a record may be: skipped",
                        tsblob_proto::format_size(OTHER_MAX)
                    )))
                } else {
                    None
                }
            }
            // Attachments, metadata, indexes, statistics, unknown opcodes: not imported.
            _ => Some(Step::Unused),
        };
        if let Some(step) = skip {
            file.seek(SeekFrom::Start(end))?;
            self.offset = end;
            return Ok(step);
        }
        // At most the bound of its kind, and within the file (checked above).
        let mut body = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.by_ref().take(len).read_to_end(&mut body)?;
        if (body.len() as u64) < len {
            return Ok(Step::End(Some(format!(
                "{name}: a record (opcode {opcode:#04x}) after byte {offset} is cut short: the {left} byte(s) after byte {offset} were not read"
            ))));
        }
        self.offset = end;
        self.body = body;
        let record = match ::mcap::parse_record(opcode, &self.body) {
            Ok(r) => r,
            Err(e) => {
                return Ok(Step::Damaged(format!(
                    "{name}: a record (opcode {opcode:#04x}) ending at byte {end} is damaged ({e}): skipped"
                )));
            }
        };
        Ok(match record {
            Record::MessageIndex(ix) => Step::Lost(if self.counting_lost {
                ix.records.len() as u64
            } else {
                0
            }),
            Record::DataEnd(_) => {
                self.ended = true;
                Step::Record(record)
            }
            Record::Footer(_) => {
                let mut end_magic = [0u8; 8];
                let got = read_full(&mut self.file, &mut end_magic)?;
                Step::End((got < end_magic.len() || end_magic != *::mcap::MAGIC).then(|| {
                    format!(
                        "{name}: no end magic after the footer ending at byte {end} (cut short?): the {} byte(s) after it were not read",
                        size.saturating_sub(end)
                    )
                }))
            }
            Record::Chunk { header, data } => match chunk_plain(header, data) {
                Ok((plain, big)) => Step::Chunk { plain, big, end },
                Err(e) => {
                    self.counting_lost = true;
                    Step::Damaged(format!(
                        "{name}: the chunk ending at byte {end} is damaged ({e}): skipped"
                    ))
                }
            },
            r => {
                self.counting_lost = false;
                Step::Record(r)
            }
        })
    }
}

/// The records of a chunk that [`inflate_zstd`] cut to their header (messages over
/// [`MAX_MESSAGE_BYTES`], schemas over [`MAX_SCHEMA_BYTES`]): (offset of the record in the
/// chunk's uncompressed bytes, the size of what was left out).
pub(super) type Skipped = Vec<(usize, u64)>;

/// The records of a chunk, uncompressed within [`CHUNK_MAX`] and checked: a chunk whose
/// header claims more, whose bytes inflate to more or less than it claims, that fails its
/// CRC or whose records do not fit in it is an error (the chunk is skipped as damaged).
/// Its records are then handed on one at a time by [`walk`], borrowed from these bytes:
/// gathered into a list of owned records first, a zstd chunk of 64 MiB of empty records
/// (a 5.7 KB file) cost `tsblob cp` 1.3 GB, ~22 bytes per byte of chunk, and a 90 KB file
/// aborted it.
///
/// zstd is inflated here ([`inflate_zstd`]), into a buffer sized by the claim (untouched
/// memory costs nothing) that holds only the bytes actually produced, less the data of
/// messages over [`MAX_MESSAGE_BYTES`] (listed in the second value: refused); lz4 goes through the `mcap`
/// crate's reader with its record length limit at the claimed size (held first to what its
/// compressed bytes can inflate to, [`LZ4_MAX_RATIO`]), its records copied out as they come.
fn chunk_plain<'a>(
    header: ::mcap::records::ChunkHeader,
    data: Cow<'a, [u8]>,
) -> Result<(Cow<'a, [u8]>, Skipped), String> {
    let claim = header.uncompressed_size;
    if claim > CHUNK_MAX {
        return Err(format!(
            "it claims {claim} bytes uncompressed, over the {} a chunk may hold",
            tsblob_proto::format_size(CHUNK_MAX)
        ));
    }
    let crc = header.uncompressed_crc;
    let compressed = data.len() as u64;
    let mut big = Big::default();
    let plain: Cow<'a, [u8]> = match header.compression.as_str() {
        "" => {
            if compressed != claim {
                return Err(format!(
                    "it holds {compressed} bytes, not the {claim} its header claims"
                ));
            }
            data
        }
        "zstd" => {
            let (out, b) = inflate_zstd(&data, claim)?;
            big = b;
            Cow::Owned(out)
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
            Cow::Owned(limited_chunk_plain(header, &data)?)
        }
    };
    if crc != 0 {
        let sum = match &big {
            Big { crc: Some(sum), .. } => *sum,
            _ => {
                let mut h = flate2::Crc::new();
                h.update(&plain);
                h.sum()
            }
        };
        if sum != crc {
            return Err(format!(
                "its CRC is {sum:#010x}, not the {crc:#010x} its header holds"
            ));
        }
    }
    // Every record parses (a chunk is skipped whole, or imported whole).
    walk(&plain, &mut |_, _| true)?;
    Ok((plain, big.skipped))
}

/// What [`inflate_zstd`] left out, and the CRC of every byte it inflated.
#[derive(Default)]
struct Big {
    /// (offset in the kept bytes of a message record cut to its header, its data's size;
    /// or of a schema record cut to its id, its record's size).
    skipped: Vec<(usize, u64)>,
    crc: Option<u32>,
}

/// A zstd chunk inflated record by record, at most `claim` bytes (one more to see a lie):
/// a message record over [`MAX_MESSAGE_BYTES`] keeps only its header (its length field set
/// to it, the record listed in [`Big::skipped`]), a schema record over [`MAX_SCHEMA_BYTES`]
/// only its id (an empty schema, listed), the rest inflated through the CRC and dropped. Two 512 MiB messages of a 33 KB file were inflated, then copied, ~2.4 GB.
fn inflate_zstd(data: &[u8], claim: u64) -> Result<(Vec<u8>, Big), String> {
    use ::mcap::records::op;
    let zstd = |e: std::io::Error| format!("zstd: {e}");
    let dec = ::zstd::stream::read::Decoder::with_buffer(data).map_err(zstd)?;
    let mut r = flate2::CrcReader::new(dec.take(claim.saturating_add(1)));
    // Sized by the claim (at most CHUNK_MAX): pages never written cost nothing.
    let mut out = Vec::with_capacity(usize::try_from(claim).unwrap_or(0).saturating_add(1));
    let mut big = Big::default();
    let mut total = 0u64;
    loop {
        let at = out.len();
        let mut head = [0u8; 9];
        let got = read_full(&mut r, &mut head).map_err(zstd)?;
        out.extend_from_slice(&head[..got]);
        total += got as u64;
        if got < head.len() {
            break; // the end, or a record cut short (the walk reports it)
        }
        if head[0] == INVALID_OPCODE {
            // Damaged: stop here rather than inflate the rest (up to the 1 GiB claim).
            return Err(invalid_opcode(at as u64));
        }
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&head[1..]);
        let len = u64::from_le_bytes(len8);
        let keep = if head[0] == op::MESSAGE && len > MAX_MESSAGE_BYTES + MESSAGE_HEADER {
            MESSAGE_HEADER
        } else if head[0] == op::SCHEMA && len > MAX_SCHEMA_BYTES + SCHEMA_SLACK {
            2 // its id
        } else {
            len
        };
        let n = (&mut r).take(keep).read_to_end(&mut out).map_err(zstd)? as u64;
        total += n;
        if n < keep {
            break;
        }
        if keep < len {
            let n = std::io::copy(&mut (&mut r).take(len - keep), &mut std::io::sink())
                .map_err(zstd)?;
            total += n;
            if n < len - keep {
                break;
            }
            if head[0] == op::SCHEMA {
                // A schema of that id, without name, encoding or data.
                out.extend_from_slice(&[0u8; 12]);
                out[at + 1..at + 9].copy_from_slice(&14u64.to_le_bytes());
                big.skipped.push((at, len));
            } else {
                out[at + 1..at + 9].copy_from_slice(&keep.to_le_bytes());
                big.skipped.push((at, len - keep));
            }
        }
    }
    if total != claim {
        return Err(format!(
            "its zstd bytes inflate to {}{} bytes, not the {claim} its header claims",
            if total > claim { "over " } else { "" },
            total.min(claim),
        ));
    }
    big.crc = Some(r.crc().sum());
    Ok((out, big))
}

/// Hands the records of uncompressed chunk bytes to `f`, one at a time, until `f` returns
/// false; an error for a record that does not fit or does not parse.
pub(super) fn walk<'a>(
    all: &'a [u8],
    f: &mut dyn FnMut(usize, Record<'a>) -> bool,
) -> Result<(), String> {
    let mut buf = all;
    while !buf.is_empty() {
        let at = all.len() - buf.len();
        let Some((head, rest)) = buf.split_first_chunk::<9>() else {
            return Err(format!("{} byte(s) at its end are not a record", buf.len()));
        };
        let opcode = head[0];
        if opcode == INVALID_OPCODE {
            return Err(invalid_opcode(at as u64));
        }
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&head[1..]);
        let len = u64::from_le_bytes(len8);
        let Some(body) = usize::try_from(len).ok().and_then(|n| rest.get(..n)) else {
            return Err(format!(
                "a record (opcode {opcode:#04x}) claims {len} bytes, more than the chunk holds after it ({})",
                rest.len()
            ));
        };
        buf = &rest[body.len()..];
        let r = ::mcap::parse_record(opcode, body).map_err(|e| e.to_string())?;
        if !f(at, r) {
            break;
        }
    }
    Ok(())
}

/// A chunk's uncompressed bytes through the `mcap` crate's reader, no record longer than
/// the chunk's claimed size (at most [`CHUNK_MAX`]): the chunk is handed to a reader of its
/// own as a one-record file, and its records (the reader checked the chunk's CRC before
/// giving any) written out again as they come.
fn limited_chunk_plain(
    header: ::mcap::records::ChunkHeader,
    data: &[u8],
) -> Result<Vec<u8>, String> {
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
    let mut out = Vec::with_capacity(limit);
    while let Some(event) = reader.next_event() {
        match event.map_err(|e| e.to_string())? {
            LinearReadEvent::ReadRequest(need) => {
                let n = need.min(rest.len());
                reader.insert(n).copy_from_slice(&rest[..n]);
                reader.notify_read(n);
                rest = &rest[n..];
            }
            LinearReadEvent::Record { data, opcode } => {
                if opcode == INVALID_OPCODE {
                    return Err(invalid_opcode(out.len() as u64));
                }
                if (out.len() + 9 + data.len()) as u64 > header.uncompressed_size {
                    return Err(format!(
                        "its records are more than the {} bytes its header claims",
                        header.uncompressed_size
                    ));
                }
                out.push(opcode);
                out.extend_from_slice(&(data.len() as u64).to_le_bytes());
                out.extend_from_slice(data);
            }
        }
    }
    Ok(out)
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(f: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
        let e = chunk_plain(header, Cow::Borrowed(&[0u8; 100])).unwrap_err();
        assert!(e.contains("more than lz4 can inflate to"), "{e}");
    }
}
