//! Hostile MCAP files (docs/api.md, "MCAP export and import"). The server has no MCAP
//! import route: `tsblob cp in.mcap http://host/BUCKET` parses the file on the client and
//! sends ordinary batches (bounded like any batch). So a hostile file's reach is the
//! importing process; each test here runs the real `tsblob cp` against a real
//! `tsblob serve` and pins one bound of the reader (`server/src/mcap/read.rs`, reported by
//! `server/src/mcap/import.rs`).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::Server;

/// An MCAP of `n` small messages on `/good` (zstd chunks), and the offset of its Data End
/// record (where a hostile chunk goes: after every good one, before the summary).
fn good_file(n: u64) -> (Vec<u8>, usize) {
    let mut w = mcap::WriteOptions::new()
        .chunk_size(Some(1024))
        .create(std::io::Cursor::new(Vec::new()))
        .unwrap();
    let c = w.add_channel(0, "/good", "json", &BTreeMap::new()).unwrap();
    for i in 0..n {
        let t = 1_000_000_000 + i * 1_000_000;
        w.write_to_known_channel(
            &mcap::records::MessageHeader {
                channel_id: c,
                sequence: 0,
                log_time: t,
                publish_time: t,
            },
            format!("{{\"i\":{i}}}").as_bytes(),
        )
        .unwrap();
    }
    w.finish().unwrap();
    let bytes = w.into_inner().into_inner();
    let mut at = mcap::MAGIC.len();
    loop {
        let len = u64::from_le_bytes(bytes[at + 1..at + 9].try_into().unwrap()) as usize;
        if bytes[at] == mcap::records::op::DATA_END {
            return (bytes, at);
        }
        at += 9 + len;
    }
}

/// A chunk record: `inner` (records as written inside a chunk) compressed with zstd, its
/// header claiming `claim` bytes uncompressed (CRC 0: unchecked).
fn zstd_chunk(inner: &[u8], claim: u64) -> Vec<u8> {
    let z = zstd::bulk::compress(inner, 3).unwrap();
    let mut body = Vec::new();
    body.extend_from_slice(&0u64.to_le_bytes()); // message start time
    body.extend_from_slice(&0u64.to_le_bytes()); // message end time
    body.extend_from_slice(&claim.to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes()); // uncompressed CRC
    body.extend_from_slice(&4u32.to_le_bytes());
    body.extend_from_slice(b"zstd");
    body.extend_from_slice(&(z.len() as u64).to_le_bytes());
    body.extend_from_slice(&z);
    let mut rec = vec![mcap::records::op::CHUNK];
    rec.extend_from_slice(&(body.len() as u64).to_le_bytes());
    rec.extend_from_slice(&body);
    rec
}

/// The good file with `chunk` inserted before its Data End (whose CRC is zeroed: unchecked).
fn with_chunk(n: u64, chunk: &[u8]) -> Vec<u8> {
    let (mut bytes, at) = good_file(n);
    // Data End: opcode, length 4, the data section's CRC.
    bytes[at + 9..at + 13].copy_from_slice(&0u32.to_le_bytes());
    bytes.splice(at..at, chunk.iter().copied());
    bytes
}

/// `tsblob cp <file> <url>/b`: (exit code, None if killed by a signal; stderr; time taken).
fn cp(s: &Server, file: &[u8]) -> (Option<i32>, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.mcap");
    std::fs::write(&path, file).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsblob"));
    cmd.arg("cp")
        .arg(&path)
        .arg(s.url("/b"))
        .arg("--quiet")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("TSBLOB_") {
            cmd.env_remove(k);
        }
    }
    let t0 = Instant::now();
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t0.elapsed(),
    )
}

/// The messages of entry `good` in bucket `b`, through the server's own MCAP export
/// (HTTP/1.0: the body is every byte until the server closes).
fn exported(s: &Server) -> usize {
    exported_of(s, "good", "/good")
}

/// The messages of topic `topic` in the MCAP export of entry `entry` of bucket `b`.
fn exported_of(s: &Server, entry: &str, topic: &str) -> usize {
    use std::io::{Read, Write};
    let addr = s
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut c = std::net::TcpStream::connect(&addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(
        format!("GET /api/v1/b/b/query?entries={entry}&format=mcap HTTP/1.0\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).unwrap();
    let head = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.0 200"),
        "{}",
        String::from_utf8_lossy(&answer[..head])
    );
    mcap::MessageStream::new(&answer[head + 4..])
        .unwrap()
        .filter(|m| m.as_ref().unwrap().channel.topic == topic)
        .count()
}

/// Bug "a chunk's inner record length sized the reader's buffer": inside a compressed
/// chunk, a record's length field (here 1 TiB, in a chunk of a few dozen bytes) was
/// taken as is by the `mcap` crate's chunk reader, which sizes a zeroed buffer by it before
/// inflating a byte: `tsblob cp` was killed by SIGABRT (an allocation of 1 TiB + 9 bytes
/// failed; a claim of a few GiB would be zero-filled, that much memory). The chunk's records now
/// cannot be longer than what its bytes inflate to: the chunk is skipped as damaged, the
/// good messages before it imported, and the copy fails with its report.
#[test]
fn a_record_length_inside_a_chunk_sized_the_import_buffer() {
    let s = Server::start(&[]);
    let mut inner = vec![mcap::records::op::MESSAGE];
    inner.extend_from_slice(&(1u64 << 40).to_le_bytes());
    inner.extend_from_slice(&[0u8; 32]);
    let file = with_chunk(20, &zstd_chunk(&inner, inner.len() as u64));
    let (code, err, took) = cp(&s, &file);
    let code = code.unwrap_or_else(|| panic!("tsblob cp was killed by a signal: {err}"));
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("damaged"), "{err}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(exported(&s), 20, "the good messages came in; {err}");
}

/// A zstd bomb: 64 MiB of zeros (a few KiB compressed) in a chunk whose header claims 1 KiB.
/// The reader inflates no further than the claim (+1 byte to see it lied): skipped as
/// damaged, named by what it claimed. And a chunk claiming more than `CHUNK_MAX` (1 GiB) is
/// refused before any of it is inflated.
#[test]
fn a_chunk_inflating_past_its_claim_or_claiming_over_a_gib_is_skipped() {
    let s = Server::start(&[]);
    let mut inner = vec![mcap::records::op::MESSAGE];
    inner.extend_from_slice(&(64u64 << 20).to_le_bytes());
    inner.resize(9 + (64 << 20), 0);
    let bomb = zstd_chunk(&inner, 1024);
    assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
    let (code, err, _) = cp(&s, &with_chunk(10, &bomb));
    assert_eq!(code.map(|c| c != 0), Some(true), "{err}");
    assert!(err.contains("not the 1024 its header claims"), "{err}");
    let huge = zstd_chunk(&inner[..64], 4 << 30);
    let (code, err, _) = cp(&s, &with_chunk(10, &huge));
    assert_eq!(code.map(|c| c != 0), Some(true), "{err}");
    assert!(err.contains("over the 1 GiB a chunk may hold"), "{err}");
    assert_eq!(exported(&s), 10, "{err}");
}

/// `tsblob cp <file> <url>/b`, as [`cp`], with its peak RSS in bytes.
fn cp_peak(s: &Server, file: &[u8]) -> (Option<i32>, String, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.mcap");
    std::fs::write(&path, file).unwrap();
    cp_path_peak(s, &path)
}

fn cp_path_peak(s: &Server, path: &std::path::Path) -> (Option<i32>, String, u64) {
    use std::io::Read;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsblob"));
    cmd.arg("cp")
        .arg(path)
        .arg(s.url("/b"))
        .arg("--quiet")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("TSBLOB_") {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let text = std::thread::spawn(move || {
        let mut t = String::new();
        stderr.read_to_string(&mut t).unwrap();
        t
    });
    // VmHWM of the process, polled until it exits (`ru_maxrss` would count the test
    // process it was forked from).
    let mut peak = 0;
    let status = loop {
        if let Some(r) = tsblob_compare::spawn::rss_of(child.id()) {
            peak = peak.max(r.peak);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    (status.code(), text.join().unwrap(), peak)
}

/// A Schema record (inside a chunk: opcode, length, body).
fn schema_record(id: u16, name: &str, data: &[u8]) -> Vec<u8> {
    let mut body = id.to_le_bytes().to_vec();
    body.extend_from_slice(&(name.len() as u32).to_le_bytes());
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(&4u32.to_le_bytes());
    body.extend_from_slice(b"json");
    body.extend_from_slice(&(data.len() as u32).to_le_bytes());
    body.extend_from_slice(data);
    let mut rec = vec![mcap::records::op::SCHEMA];
    rec.extend_from_slice(&(body.len() as u64).to_le_bytes());
    rec.extend_from_slice(&body);
    rec
}

/// A Channel record: `topic` with schema `schema`, encoding json.
fn channel_record(id: u16, schema: u16, topic: &str) -> Vec<u8> {
    let mut body = id.to_le_bytes().to_vec();
    body.extend_from_slice(&schema.to_le_bytes());
    body.extend_from_slice(&(topic.len() as u32).to_le_bytes());
    body.extend_from_slice(topic.as_bytes());
    body.extend_from_slice(&4u32.to_le_bytes());
    body.extend_from_slice(b"json");
    body.extend_from_slice(&0u32.to_le_bytes()); // metadata: an empty map
    let mut rec = vec![mcap::records::op::CHANNEL];
    rec.extend_from_slice(&(body.len() as u64).to_le_bytes());
    rec.extend_from_slice(&body);
    rec
}

/// A Message record of channel `channel` at `t` ns: its header, then `len` bytes of data
/// (zeros), of which only the header is returned when `header_only`.
fn message_record(channel: u16, t: u64, len: u64, header_only: bool) -> Vec<u8> {
    let mut rec = vec![mcap::records::op::MESSAGE];
    rec.extend_from_slice(&(22 + len).to_le_bytes());
    rec.extend_from_slice(&channel.to_le_bytes());
    rec.extend_from_slice(&0u32.to_le_bytes());
    rec.extend_from_slice(&t.to_le_bytes());
    rec.extend_from_slice(&t.to_le_bytes());
    if !header_only {
        rec.resize(rec.len() + len as usize, 0);
    }
    rec
}

const MIB: u64 = 1 << 20;

/// Bug "a chunk's records were gathered before any was handled": a zstd chunk of 64 MiB
/// of 9-byte records (unknown opcode, no body; a 6 KB file) was turned into a list of
/// owned records, ~100 bytes a slot plus its copy: `tsblob cp` peaked at 1.3 GB (~22
/// bytes per byte of chunk; 128 MiB: 3 GB; a 90 KB file claiming 1 GiB aborted it). The
/// records are now handed on one at a time, borrowed from the inflated chunk: the copy
/// stays under 4× the chunk (debug build: 1,477 MiB before, 101 MiB after).
#[test]
fn a_chunk_of_tiny_records_held_a_list_of_all_of_them() {
    let s = Server::start(&[]);
    let mut inner = Vec::with_capacity(64 << 20);
    while inner.len() + 9 <= 64 << 20 {
        inner.push(0x80);
        inner.extend_from_slice(&0u64.to_le_bytes());
    }
    let chunk = zstd_chunk(&inner, inner.len() as u64);
    drop(inner);
    let file = with_chunk(10, &chunk);
    assert!(file.len() < 64 << 10, "{} bytes", file.len());
    let (code, err, peak) = cp_peak(&s, &file);
    eprintln!("tsblob cp: rc {code:?}, peak {} MiB", peak / MIB);
    assert_eq!(code, Some(0), "{err}");
    assert!(peak < 256 * MIB, "tsblob cp peaked at {} MiB", peak / MIB);
    assert_eq!(exported(&s), 10);
}

/// Bug "schemas piled up": every Schema record of a file was kept (whole, and hashed)
/// until the file ended, used or not: 8 chunks of one 200 MiB schema each (a 52 KB file)
/// were 2.2 GB of `tsblob cp`. A schema over the 4 MiB an export reads is now refused
/// (not held: the messages of its channels are refused with that reason), and past
/// `MAX_SCHEMA_TOTAL_BYTES` (64 MiB, the export's bound) of schemas the rest of the file is
/// not read, reported. Here 100 chunks of one 4 MiB schema each (old code: rc 0, 459 MiB
/// peak, debug build): the copy fails naming the bound and stays under 256 MiB (105 MiB).
#[test]
fn schemas_piled_up_without_a_bound() {
    let s = Server::start(&[]);
    let schema = vec![b' '; 4 << 20];
    let mut chunks = Vec::new();
    for id in 1..=100u16 {
        let rec = schema_record(id, "big", &schema);
        chunks.extend_from_slice(&zstd_chunk(&rec, rec.len() as u64));
    }
    let (code, err, peak) = cp_peak(&s, &with_chunk(10, &chunks));
    eprintln!("tsblob cp: rc {code:?}, peak {} MiB", peak / MIB);
    assert_eq!(code.map(|c| c != 0), Some(true), "{err}");
    assert!(err.contains("schemas need more than the 64 MiB"), "{err}");
    assert!(peak < 256 * MIB, "tsblob cp peaked at {} MiB", peak / MIB);
    assert_eq!(exported(&s), 10, "{err}");
}

/// A request (`head`: its request line and any headers) with `body`: (status line, body).
fn http(s: &Server, head: &str, body: &[u8]) -> (String, Vec<u8>) {
    use std::io::{Read, Write};
    let addr = s
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut c = std::net::TcpStream::connect(&addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(format!("{head}\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes())
        .unwrap();
    c.write_all(body).unwrap();
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).unwrap();
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let line = String::from_utf8_lossy(&answer[..answer.iter().position(|&b| b == b'\r').unwrap()])
        .into_owned();
    (line, answer[end + 4..].to_vec())
}

/// Bug "an import took a schema no export reads back": a 5 MiB schema imported (rc 0),
/// then every export touching its entry was a 500 `internal` ("see the server log"), the
/// reason (the export reads schemas of at most 4 MiB) only in the log (this test on the
/// old code: rc 0, then `500 {"error":{"code":"internal",...}}`). The import now
/// refuses the schema with its messages, naming the bound; and a schema record over it
/// (written by another writer) makes the export a 422 naming it.
#[test]
fn a_schema_over_what_an_export_reads_was_imported_then_every_export_was_a_500() {
    let s = Server::start(&[]);
    let mut inner = schema_record(1, "pkg/Big", &vec![b' '; 5 << 20]);
    inner.extend_from_slice(&channel_record(1, 1, "/big"));
    for t in 1..=3u64 {
        inner.extend_from_slice(&message_record(1, t * 1000, 2, false));
    }
    let (code, err, _) = cp(&s, &with_chunk(10, &zstd_chunk(&inner, inner.len() as u64)));
    assert_eq!(code.map(|c| c != 0), Some(true), "{err}");
    assert!(
        err.contains("3 message(s) of topic \"/big\" refused")
            && err.contains("over the 4 MiB of a schema an MCAP export reads back"),
        "{err}"
    );
    assert_eq!(exported(&s), 10, "{err}");
    // A schema record over the bound, and a record naming it.
    let id = (1u64 << 52) | 7;
    let (st, body) = http(
        &s,
        &format!("POST /api/v1/b/b/.mcap-schemas?ts={id} HTTP/1.0"),
        &vec![b' '; 5 << 20],
    );
    assert!(
        st.contains(" 201"),
        "{st} {}",
        String::from_utf8_lossy(&body)
    );
    let (st, body) = http(
        &s,
        &format!("POST /api/v1/b/b/good?ts=5 HTTP/1.0\r\nx-tsblob-label-mcap.schema_id: {id}"),
        b"{}",
    );
    assert!(
        st.contains(" 201"),
        "{st} {}",
        String::from_utf8_lossy(&body)
    );
    let (st, body) = http(
        &s,
        "GET /api/v1/b/b/query?entries=good&format=mcap HTTP/1.0",
        b"",
    );
    let body = String::from_utf8_lossy(&body);
    assert!(st.contains(" 422"), "{st} {body}");
    assert!(
        body.contains("over the 4 MiB of a schema an MCAP export reads"),
        "{body}"
    );
}

/// Bug "an attachment never imported was read whole": the reader buffered every
/// top-level record up to 4 GiB, so a 2 GiB Attachment (a sparse 8 KB file) cost `tsblob
/// cp` 3.7 GB. Records the import does not use are now skipped by their length. Here a
/// 1 GiB attachment (old code: 2,079 MiB peak, debug build): the copy stays under 128 MiB
/// (~30 MiB) and imports every message.
#[test]
fn an_attachment_never_imported_was_read_whole() {
    use std::io::{Seek, SeekFrom, Write};
    let s = Server::start(&[]);
    let (mut bytes, at) = good_file(10);
    bytes[at + 9..at + 13].copy_from_slice(&0u32.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.mcap");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&bytes[..at]).unwrap();
    let len = 1u64 << 30;
    f.write_all(&[mcap::records::op::ATTACHMENT]).unwrap();
    f.write_all(&len.to_le_bytes()).unwrap();
    f.seek(SeekFrom::Current(len as i64)).unwrap();
    f.write_all(&bytes[at..]).unwrap();
    drop(f);
    let (code, err, peak) = cp_path_peak(&s, &path);
    eprintln!("tsblob cp: rc {code:?}, peak {} MiB", peak / MIB);
    assert_eq!(code, Some(0), "{err}");
    assert!(peak < 128 * MIB, "tsblob cp peaked at {} MiB", peak / MIB);
    assert_eq!(exported(&s), 10, "{err}");
}

/// Bug "a message of any size up to a chunk was inflated and copied": two zstd chunks of
/// one 512 MiB message each (a 33 KB file) cost `tsblob cp` 2.4 GB, and the records it
/// stored were then refused by every export (413: over the 64 MiB an MCAP export
/// carries). A message over `MAX_MESSAGE_BYTES` (64 MiB) is now refused, named, without
/// being kept: in a zstd chunk its bytes are inflated through the CRC and dropped, and one
/// outside a chunk is skipped by its length. Here two 256 MiB messages in chunks and one of
/// 1 GiB outside (sparse) (old code: rc 0, 2,613 MiB peak, debug build): refused, under
/// 128 MiB (38 MiB).
#[test]
fn a_message_over_what_an_export_carries_was_inflated_and_copied() {
    use std::io::{Seek, SeekFrom, Write};
    let s = Server::start(&[]);
    let mut chunks = channel_record(1, 0, "/huge");
    let mut inner = Vec::new();
    for t in 1..=2u64 {
        inner.clear();
        inner.extend_from_slice(&channel_record(1, 0, "/huge"));
        inner.extend_from_slice(&message_record(1, t * 1000, 256 * MIB, false));
        chunks.extend_from_slice(&zstd_chunk(&inner, inner.len() as u64));
    }
    drop(inner);
    let (mut bytes, at) = good_file(10);
    bytes[at + 9..at + 13].copy_from_slice(&0u32.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.mcap");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&bytes[..at]).unwrap();
    f.write_all(&chunks).unwrap();
    f.write_all(&message_record(1, 9000, 1 << 30, true))
        .unwrap();
    f.seek(SeekFrom::Current(1 << 30)).unwrap();
    f.write_all(&bytes[at..]).unwrap();
    drop(f);
    let (code, err, peak) = cp_path_peak(&s, &path);
    eprintln!("tsblob cp: rc {code:?}, peak {} MiB", peak / MIB);
    assert_eq!(code.map(|c| c != 0), Some(true), "{err}");
    assert!(
        err.contains("3 message(s) of topic \"/huge\" refused")
            && err.contains("over the 64 MiB a message may be"),
        "{err}"
    );
    assert!(peak < 128 * MIB, "tsblob cp peaked at {} MiB", peak / MIB);
    assert_eq!(exported(&s), 10, "{err}");
}

/// Bug "records after the Data End record were dropped silently" (hostile probe): only the
/// summary (schemas, channels, indexes, statistics) and the footer may follow Data End, and
/// the reader skipped everything else there unread and unsaid: a chunk and a message placed
/// after it were lost while `tsblob cp` exited 0 (this test on the old code: rc 0, its
/// stderr only "10 records read, 10 written, ..."). The records before Data End are still
/// imported; the chunk and message records after it are now counted, the first one's byte
/// named, and the copy fails.
#[test]
fn records_after_data_end_were_dropped_silently() {
    let s = Server::start(&[]);
    let (mut bytes, at) = good_file(10);
    // After the Data End record (opcode, length 4, CRC): where the summary starts.
    let after = at + 13;
    let mut inner = channel_record(7, 0, "/late");
    inner.extend_from_slice(&message_record(7, 5_000_000_000, 2, false));
    let mut late = zstd_chunk(&inner, inner.len() as u64);
    late.extend_from_slice(&message_record(7, 6_000_000_000, 2, false));
    bytes.splice(after..after, late);
    let (code, err, _) = cp(&s, &bytes);
    assert_eq!(code.map(|c| c != 0), Some(true), "{err}");
    assert!(
        err.contains("1 chunk(s) and 1 message(s) after the Data End record")
            && err.contains(&format!("the first at byte {after}"))
            && err.contains("were not imported: the file is malformed"),
        "{err}"
    );
    assert_eq!(
        exported(&s),
        10,
        "the records before Data End came in; {err}"
    );
}

/// Bug (hostile probe of 2026-11-30): a channel naming a schema id the file never defines
/// (the MCAP specification: a non-zero schema id must be defined before its channel) was
/// imported silently, rc 0, its messages without any schema label (this test on the old
/// code: rc 0, stderr only the counts). Its messages still come in (their data is intact),
/// the report names the topic and the schema id, and the copy fails as for other damage.
#[test]
fn a_channel_naming_an_undefined_schema_was_imported_silently() {
    let s = Server::start(&[]);
    let mut inner = channel_record(3, 77, "/cam");
    for t in 1..=5u64 {
        inner.extend_from_slice(&message_record(3, t * 1_000_000, 2, false));
    }
    let (code, err, _) = cp(&s, &with_chunk(10, &zstd_chunk(&inner, inner.len() as u64)));
    assert_eq!(code.map(|c| c != 0), Some(true), "{err}");
    assert!(
        err.contains("5 message(s) of topic \"/cam\" were imported without a schema")
            && err.contains("schema id 77, which the file does not define"),
        "{err}"
    );
    assert_eq!(exported(&s), 10, "{err}");
    assert_eq!(exported_of(&s, "cam", "/cam"), 5, "{err}");
}

/// Bug (hostile probe of 2026-11-30): a schema id and a channel id each defined twice with
/// other content (MCAP ids may not change within a file) were imported silently, rc 0,
/// the later definition winning (this test on the old code: rc 0, stderr only the
/// counts). The messages still come in as read (each with the definition before it), and
/// the report names both ids and what changed; the copy fails as for other damage.
#[test]
fn an_id_defined_again_with_other_content_was_imported_silently() {
    let s = Server::start(&[]);
    let mut inner = schema_record(5, "pkg/A", b"{}");
    inner.extend_from_slice(&channel_record(5, 5, "/a"));
    inner.extend_from_slice(&message_record(5, 1_000_000, 2, false));
    // The same again (writers repeat definitions in every chunk): not reported.
    inner.extend_from_slice(&schema_record(5, "pkg/A", b"{}"));
    inner.extend_from_slice(&channel_record(5, 5, "/a"));
    inner.extend_from_slice(&schema_record(5, "pkg/B", b"other"));
    inner.extend_from_slice(&channel_record(5, 5, "/b"));
    inner.extend_from_slice(&message_record(5, 2_000_000, 2, false));
    let (code, err, _) = cp(&s, &with_chunk(10, &zstd_chunk(&inner, inner.len() as u64)));
    assert_eq!(code.map(|c| c != 0), Some(true), "{err}");
    assert!(
        err.contains("schema id 5 is defined again with other content (\"pkg/A\"")
            && err.contains("then \"pkg/B\"")
            && err.contains("channel id 5 is defined again with other content (topic \"/a\"")
            && err.contains("then topic \"/b\"")
            && err.contains("MCAP ids may not change within a file"),
        "{err}"
    );
    assert_eq!(err.matches("is defined again").count(), 2, "{err}");
    assert_eq!(exported(&s), 10, "{err}");
    assert_eq!(exported_of(&s, "a", "/a"), 1, "{err}");
    assert_eq!(exported_of(&s, "b", "/b"), 1, "{err}");
}

/// Bug (hostile probe of 2026-11-30): a chunk of zero bytes (records of opcode 0x00, which
/// MCAP reserves as invalid) was read as records of an unknown kind and ignored: a 1 GiB
/// chunk of zeros imported "0 records read" and the copy exited 0 (this test on the old
/// code: rc 0, no note). The chunk is now damaged: skipped (at its first record, not
/// inflated further), named, and the copy fails. Top-level records of opcode 0x00 are
/// counted and reported likewise. The good messages come in.
#[test]
fn a_chunk_of_invalid_opcode_records_imported_nothing_and_exited_0() {
    let s = Server::start(&[]);
    let zeros = vec![0u8; 1 << 20];
    let (code, err, _) = cp(&s, &with_chunk(10, &zstd_chunk(&zeros, zeros.len() as u64)));
    assert_eq!(code.map(|c| c != 0), Some(true), "{err}");
    assert!(
        err.contains("is damaged (a record of opcode 0x00, which MCAP reserves as invalid"),
        "{err}"
    );
    // Ten 9-byte records of zeros between the top-level records.
    let (code, err, _) = cp(&s, &with_chunk(10, &[0u8; 90]));
    assert_eq!(code.map(|c| c != 0), Some(true), "{err}");
    assert!(
        err.contains("10 record(s) of opcode 0x00, which MCAP reserves as invalid, were skipped"),
        "{err}"
    );
    assert_eq!(exported(&s), 10, "{err}");
}
