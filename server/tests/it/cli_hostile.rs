//! The CLI against hostile servers (a real `tsblob` child process, a `TcpListener` thread
//! as the server): a server that accepts and never answers, one that streams a line without
//! end, a `tsblob cp` source announcing a record of 2^40 bytes. Each fails the command in
//! bounded time and memory, with an error saying why.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs `tsblob args` with `env` for at most `within`: (exited successfully, stdout +
/// stderr, time taken); `None` for the status if it had to be killed.
fn run(args: &[&str], env: &[(&str, &str)], within: Duration) -> (Option<bool>, String, Duration) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsblob"));
    for (k, _) in std::env::vars() {
        if k.starts_with("TSBLOB_") {
            cmd.env_remove(k);
        }
    }
    let out_dir = tempfile::tempdir().unwrap();
    let (out, err) = (out_dir.path().join("out"), out_dir.path().join("err"));
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let t0 = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s.success());
        }
        if t0.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = t0.elapsed();
    let text = format!(
        "{}{}",
        std::fs::read_to_string(&out).unwrap_or_default(),
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    (status, text, took)
}

/// Reads a request's head (up to the blank line).
fn read_head(s: &mut TcpStream) {
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&b[..n]),
        }
    }
}

/// A server answering each connection with `head` then `body_byte` repeated up to `body`
/// bytes; the bytes it managed to send (of bodies) are counted in the returned counter.
fn hostile(head: Vec<u8>, body_byte: u8, body: u64) -> (String, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let (head, counter) = (head.clone(), counter.clone());
            std::thread::spawn(move || {
                read_head(&mut s);
                if s.write_all(&head).is_err() {
                    return;
                }
                let chunk = vec![body_byte; 64 << 10];
                let mut left = body;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if s.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    counter.fetch_add(n as u64, Ordering::Relaxed);
                    left -= n as u64;
                }
                let _ = s.flush();
                std::thread::sleep(Duration::from_secs(1));
            });
        }
    });
    (url, sent)
}

/// Bug "no read timeout": the CLI's HTTP client had no connect or read timeout, so a server
/// that accepts the connection and never answers hung `tsblob bucket ls` for ever. Now an
/// answer silent for the read timeout (60 s, here `TSBLOB_READ_TIMEOUT=2`) fails it.
#[test]
fn no_read_timeout_hung_on_a_silent_server() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            read_head(&mut s);
            held.push(s); // accepted, read, never answered
        }
    });
    let (status, text, took) = run(
        &["bucket", "ls", "--url", &url],
        &[("TSBLOB_READ_TIMEOUT", "2")],
        Duration::from_secs(30),
    );
    assert_eq!(status, Some(false), "still hanging after {took:?}: {text}");
    assert!(took < Duration::from_secs(4 + 2), "{took:?}: {text}");
    assert!(text.to_lowercase().contains("timed out"), "{text}");
}

/// Bug "line buffer unbounded": `tsblob tail` and `tsblob query --list` grew their line
/// buffer until a newline came, rescanning all of it at each chunk; a server streaming
/// 10 MiB without a newline was read whole (and a tail then ended "successfully"). Now a
/// line past 2 MiB fails the command, and the rest is not read.
#[test]
fn line_buffer_unbounded_for_a_stream_without_newline() {
    let body = 10u64 << 20;
    let head =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\nconnection: close\r\n\r\n"
            .to_vec();
    for cmd in [&["tail", "b", "e"][..], &["query", "b", "e", "--list"][..]] {
        let (url, sent) = hostile(head.clone(), b'a', body);
        let args = [cmd, &["--url", &url]].concat();
        let (status, text, took) = run(&args, &[], Duration::from_secs(60));
        assert_eq!(status, Some(false), "{cmd:?} after {took:?}: {text}");
        assert!(
            text.contains("longer than 2.0 MiB") || text.contains("longer than"),
            "{cmd:?}: {text}"
        );
        let sent = sent.load(Ordering::Relaxed);
        assert!(
            sent < body,
            "{cmd:?}: the server could send all {sent} bytes"
        );
    }
}

/// Bug "cp reads any record whole": a `tsblob cp` source announcing a record of 2^40 bytes
/// was read into memory until the client ran out of it. Now a record larger than
/// `--max-record` (default 1 GiB) fails the copy at its head, naming the flag, before its
/// payload is read.
#[test]
fn cp_read_any_record_whole_from_a_hostile_source() {
    let mut frames = bytes::BytesMut::new();
    tsblob_proto::framing::put_entry_record_head(
        &mut frames,
        "e",
        1,
        "application/octet-stream",
        &tsblob_storage::Labels::new(),
        1u64 << 40,
    );
    let mut head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {}\r\nconnection: close\r\n\r\n",
        tsblob_proto::framing::MEDIA_TYPE
    )
    .into_bytes();
    head.extend_from_slice(&frames);
    let body = 256u64 << 20;
    let (url, sent) = hostile(head, 0, body);
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("export");
    let (status, text, took) = run(
        &["cp", &format!("{url}/b"), dst.to_str().unwrap(), "--quiet"],
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(status, Some(false), "after {took:?}: {text}");
    assert!(text.contains("--max-record"), "{text}");
    assert!(text.contains("1099511627776"), "{text}");
    let sent = sent.load(Ordering::Relaxed);
    assert!(sent < 64 << 20, "the copy read {sent} bytes of the record");
}
