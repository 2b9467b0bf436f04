//! Helpers shared by the `reliability_*` integration tests (issue #7): self-checking
//! payloads, framed batch bodies, a query reader that insists on a complete stream, and a
//! raw-socket HTTP exchange for requests no well-behaved client would send.
//!
//! A payload carries its own length and is derived from its timestamp, so a record read
//! back — acknowledged or not — can be checked byte for byte, and a payload cut short is
//! told apart from a whole one.
#![allow(clippy::unwrap_used, dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use tsblob_proto::framing::{put_end, put_record, Decoder, Event};
use tsblob_storage::Labels;

/// The shortest payload [`payload`] makes (its length, then its key).
pub const MIN_PAYLOAD: usize = 16;

/// The payload with key `key` (the timestamp, where the writer knows it) and `len` bytes:
/// the length (u64 LE), the key (u64 LE), then random bytes seeded by the key.
pub fn payload(key: u64, len: usize) -> Vec<u8> {
    let len = len.max(MIN_PAYLOAD);
    let mut out = vec![0; len];
    out[..8].copy_from_slice(&(len as u64).to_le_bytes());
    out[8..16].copy_from_slice(&key.to_le_bytes());
    Xoshiro256PlusPlus::seed_from_u64(key).fill_bytes(&mut out[16..]);
    out
}

/// The key of `data` if it is a whole [`payload`], or why it is not.
pub fn payload_key(data: &[u8]) -> Result<u64, String> {
    if data.len() < MIN_PAYLOAD {
        return Err(format!(
            "{} bytes, shorter than any payload written",
            data.len()
        ));
    }
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&data[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let (len, key) = (word(0), word(8));
    if len != data.len() as u64 {
        return Err(format!(
            "{} bytes but the payload says it is {len}: partial or foreign bytes",
            data.len()
        ));
    }
    if payload(key, data.len()) != data {
        return Err(format!(
            "{} bytes that differ from what was written",
            data.len()
        ));
    }
    Ok(key)
}

/// Why `data` is not the payload [`payload`] made for key `ts`, or `None` if it is.
pub fn payload_problem(ts: u64, data: &[u8]) -> Option<String> {
    match payload_key(data) {
        Ok(k) if k == ts => None,
        Ok(k) => Some(format!("ts {ts}: holds the payload written for {k}")),
        Err(e) => Some(format!("ts {ts}: {e}")),
    }
}

/// A framed batch body of `(ts, len)` records with [`payload`]s.
pub fn batch_body(records: &[(u64, usize)]) -> Bytes {
    let mut out = BytesMut::new();
    for &(ts, len) in records {
        put_record(&mut out, ts, "", &Labels::new(), &payload(ts, len));
    }
    put_end(&mut out, records.len() as u64);
    out.freeze()
}

/// One record of a query answer.
pub struct Got {
    pub ts: u64,
    pub data: Vec<u8>,
}

/// Decodes a whole query answer. An error frame, a missing end frame, a wrong count or a
/// payload cut short is an `Err` that says which.
pub fn decode_query(body: &[u8]) -> Result<Vec<Got>, String> {
    let mut d = Decoder::new();
    let mut buf = BytesMut::from(body);
    let mut out: Vec<Got> = Vec::new();
    let mut want_len = 0u64;
    loop {
        match d.next(&mut buf).map_err(|e| e.to_string())? {
            Some(Event::Record(h)) => {
                if let Some(last) = out.last() {
                    if (last.data.len() as u64) != want_len {
                        return Err(format!("record {} payload cut short", last.ts));
                    }
                }
                want_len = h.payload_len;
                out.push(Got {
                    ts: h.ts,
                    data: Vec::with_capacity(h.payload_len as usize),
                });
            }
            Some(Event::Data(b)) => match out.last_mut() {
                Some(g) => g.data.extend_from_slice(&b),
                None => return Err("payload bytes before any record frame".into()),
            },
            Some(Event::End(n)) => {
                if n != out.len() as u64 {
                    return Err(format!(
                        "end frame counts {n} records, stream had {}",
                        out.len()
                    ));
                }
                if !buf.is_empty() {
                    return Err("bytes after the end frame".into());
                }
                return Ok(out);
            }
            Some(Event::Error(json)) => {
                return Err(format!("error frame: {}", String::from_utf8_lossy(&json)))
            }
            Some(Event::Heartbeat(_) | Event::Skipped(_)) => {}
            None => {
                return Err(format!(
                    "stream ended without an end frame after {} records",
                    out.len()
                ))
            }
        }
    }
}

/// Sends `request` bytes as they are on a fresh connection and returns the status code and
/// the raw answer (`0` and what arrived when no status line came back in `timeout`).
pub fn raw_http(addr: &str, request: &[u8], timeout: Duration) -> (u16, String) {
    exchange(TcpStream::connect(addr).unwrap(), request, timeout)
}

/// [`raw_http`] from the loopback address `from` (every 127.x.y.z is this machine's): a
/// client apart from those of 127.0.0.1 (connections are capped per client address).
pub fn raw_http_from(from: &str, addr: &str, request: &[u8], timeout: Duration) -> (u16, String) {
    exchange(connect_from(from, addr), request, timeout)
}

/// A blocking connection to `addr` from the loopback address `from`.
pub fn connect_from(from: &str, addr: &str) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let c = s.connect(addr.parse().unwrap()).await.unwrap();
        let c = c.into_std().unwrap();
        c.set_nonblocking(false).unwrap();
        c
    })
}

fn exchange(mut tcp: TcpStream, request: &[u8], timeout: Duration) -> (u16, String) {
    tcp.set_read_timeout(Some(timeout)).unwrap();
    tcp.set_write_timeout(Some(timeout)).unwrap();
    // A server that answers early and closes may make the rest of the write fail: fine.
    let _ = tcp.write_all(request);
    read_answer(&mut tcp, timeout)
}

/// Reads a connection's answer until it closes or stays silent for `timeout`: the status
/// (`0` without a status line) and the raw text.
pub fn read_answer(tcp: &mut TcpStream, timeout: Duration) -> (u16, String) {
    tcp.set_read_timeout(Some(timeout)).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// The server address (`127.0.0.1:port`) of a base URL `http://127.0.0.1:port/...`.
pub fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Files under `dir` (recursively) whose name ends in `suffix`, sorted.
pub fn files_ending(dir: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// `kill -KILL pid`: the power cut of a process.
pub fn sigkill(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

/// Resident set size of a process in bytes (`VmRSS` from /proc), 0 if unknown.
pub fn rss_bytes(pid: u32) -> u64 {
    tsblob_compare::spawn::rss_of(pid).map_or(0, |r| r.now)
}

/// Why a checked query did not give a verified answer.
#[derive(Debug)]
pub enum QueryError {
    /// The connection failed or was cut before the end frame: nothing was presented as
    /// complete (expected while the server is being killed).
    Transport(String),
    /// An answer other than 200 before the stream started.
    Status(u16, String),
    /// The stream ended with an error frame (the server reporting a failure it met
    /// mid-stream): not wrong bytes, but not a whole answer either.
    ErrorFrame(String),
    /// The stream itself was wrong: a payload that is not what was written, a record cut
    /// short but followed by another frame, a bad end count. Never allowed.
    Invalid(String),
}

/// Runs a query and checks every record of the stream as it arrives (each payload against
/// [`payload`], its key equal to its timestamp), holding at most one record in memory.
/// Returns `(ts, len)` of every record.
pub async fn checked_query(
    c: &reqwest::Client,
    url: &str,
) -> Result<Vec<(u64, usize)>, QueryError> {
    Ok(checked_query_keys(c, url, true)
        .await?
        .into_iter()
        .map(|(ts, _, len)| (ts, len))
        .collect())
}

/// [`checked_query`] for payloads whose key is not their timestamp (server-assigned
/// timestamps) when `key_is_ts` is false. Returns `(ts, key, len)` of every record.
pub async fn checked_query_keys(
    c: &reqwest::Client,
    url: &str,
    key_is_ts: bool,
) -> Result<Vec<(u64, u64, usize)>, QueryError> {
    use futures_util::StreamExt;
    let resp = c
        .get(url)
        .send()
        .await
        .map_err(|e| QueryError::Transport(e.to_string()))?;
    let status = resp.status().as_u16();
    if status != 200 {
        let body = resp.text().await.unwrap_or_default();
        return Err(QueryError::Status(status, body));
    }
    let mut stream = resp.bytes_stream();
    let mut d = Decoder::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    // The record being received: (ts, announced length, bytes so far).
    let mut cur: Option<(u64, u64, Vec<u8>)> = None;
    let invalid = |m: String| QueryError::Invalid(format!("{url}: {m}"));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| QueryError::Transport(e.to_string()))?;
        buf.extend_from_slice(&chunk);
        while let Some(ev) = d.next(&mut buf).map_err(|e| invalid(e.to_string()))? {
            match ev {
                Event::Record(h) => {
                    if let Some((ts, want, got)) = &cur {
                        return Err(invalid(format!(
                            "record {ts} ended after {} of {want} bytes and a new frame began",
                            got.len()
                        )));
                    }
                    if h.payload_len == 0 {
                        return Err(invalid(format!("record {} has an empty payload", h.ts)));
                    }
                    cur = Some((
                        h.ts,
                        h.payload_len,
                        Vec::with_capacity(h.payload_len as usize),
                    ));
                }
                Event::Data(b) => {
                    let Some((ts, want, got)) = cur.as_mut() else {
                        return Err(invalid("payload bytes outside a record".into()));
                    };
                    got.extend_from_slice(&b);
                    if got.len() as u64 == *want {
                        let key = payload_key(got).map_err(|p| invalid(format!("ts {ts}: {p}")))?;
                        if key_is_ts && key != *ts {
                            return Err(invalid(format!("ts {ts} holds the payload of {key}")));
                        }
                        out.push((*ts, key, got.len()));
                        cur = None;
                    }
                }
                Event::End(n) => {
                    if cur.is_some() || n != out.len() as u64 {
                        return Err(invalid(format!(
                            "end frame counts {n}, stream had {} whole records",
                            out.len()
                        )));
                    }
                    return Ok(out);
                }
                Event::Heartbeat(_) | Event::Skipped(_) => {}
                Event::Error(json) => {
                    return Err(QueryError::ErrorFrame(
                        String::from_utf8_lossy(&json).into_owned(),
                    ))
                }
            }
        }
    }
    Err(QueryError::Transport(format!(
        "stream closed before its end frame after {} records",
        out.len()
    )))
}
