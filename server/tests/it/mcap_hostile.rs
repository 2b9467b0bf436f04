//! Hostile MCAP files (docs/api.md, "MCAP export and import"). The server has no MCAP
//! import route: `tsblob cp in.mcap http://host/BUCKET` parses the file on the client and
//! sends ordinary batches (bounded like any batch). So a hostile file's reach is the
//! importing process; each test here runs the real `tsblob cp` against a real
//! `tsblob serve` and pins one bound of the reader (`server/src/mcap/import.rs`).
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
    use std::io::{Read, Write};
    let addr = s
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut c = std::net::TcpStream::connect(&addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(b"GET /api/v1/b/b/query?entries=good&format=mcap HTTP/1.0\r\n\r\n")
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
        .filter(|m| m.as_ref().unwrap().channel.topic == "/good")
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
