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
    let (code, text, took) = run_code(args, env, within);
    (code.map(|c| c == 0), text, took)
}

/// [`run`] with the exit code.
fn run_code(
    args: &[&str],
    env: &[(&str, &str)],
    within: Duration,
) -> (Option<i32>, String, Duration) {
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
            break Some(s.code().unwrap_or(-1));
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

/// The head of a 200 answer of `content_type`, the body ending when the connection closes.
fn head_200(content_type: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n")
        .into_bytes()
}

/// A whole 200 answer: `head_200` then `body`.
fn answer(content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut a = head_200(content_type);
    a.extend_from_slice(body);
    a
}

/// A record frame of `entry` (kind 4 when given) with `payload`, its labels `labels`.
fn record_frame(
    out: &mut bytes::BytesMut,
    entry: Option<&str>,
    ts: u64,
    content_type: &str,
    labels: &[(&str, &str)],
    payload: &[u8],
) {
    let mut l = tsblob_storage::Labels::new();
    for (k, v) in labels {
        l.insert((*k).to_string(), (*v).to_string());
    }
    let len = payload.len() as u64;
    match entry {
        Some(e) => tsblob_proto::framing::put_entry_record_head(out, e, ts, content_type, &l, len),
        None => tsblob_proto::framing::put_record_head(out, ts, content_type, &l, len),
    }
    out.extend_from_slice(payload);
}

/// The files under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

/// Bug "query --out writes where the server says" (hostile probe of 2026-11-28, HIGH): the
/// entry name of a kind-4 record frame was joined to the --out folder unchecked, so a server
/// naming `../../escaped` or an absolute path wrote files (of a type it chose) anywhere the
/// user could write. Now such a name fails the query, naming the entry, and nothing is
/// written outside the folder.
#[test]
fn query_out_wrote_where_the_server_said() {
    let root = tempfile::tempdir().unwrap();
    let abs = root.path().join("abs").join("escaped");
    for entry in ["../../escaped", abs.to_str().unwrap()] {
        let mut frames = bytes::BytesMut::new();
        record_frame(&mut frames, Some("ok"), 1, "text/plain", &[], b"fine");
        record_frame(
            &mut frames,
            Some(entry),
            2,
            "application/x-sh",
            &[],
            b"echo PWNED",
        );
        tsblob_proto::framing::put_end(&mut frames, 2);
        let (url, _) = hostile(answer(tsblob_proto::framing::MEDIA_TYPE, &frames), 0, 0);
        let out = root.path().join("q").join("out");
        let (status, text, took) = run(
            &[
                "query",
                "b",
                "--entries",
                "**",
                "--out",
                out.to_str().unwrap(),
                "--url",
                &url,
            ],
            &[],
            Duration::from_secs(30),
        );
        assert_eq!(status, Some(false), "{entry}: after {took:?}: {text}");
        assert!(text.contains("entry"), "{entry}: {text}");
        for f in files_under(root.path()) {
            assert!(f.starts_with(&out), "{entry}: written outside --out: {f:?}");
        }
        assert!(!abs.exists(), "{entry}: {abs:?} created");
    }
}

/// Bug "terminal escapes from the server" (hostile probe of 2026-11-28): bucket names,
/// labels, content types, entry names and the query stream's skipped and error documents
/// were printed raw, so the server (or anyone able to write a label) could send escape
/// sequences to the user's terminal (set its title, clear it, colour it). Now every control
/// character of such text is printed escaped (`\x1b`): no ESC or C1 CSI reaches the output.
#[test]
fn terminal_escapes_from_the_server_reached_the_terminal() {
    let evil = "x\u{1b}]0;PWNED\u{7}\u{1b}[2J\u{1b}[31mRED\u{9b}0m\u{7f}";
    let json = |v: serde_json::Value| format!("{v}\n").into_bytes();
    let buckets = json(serde_json::json!({"buckets": [{"name": evil, "info": {
        "size": 1, "record_count": 1, "entry_count": 1, "oldest": 1, "latest": 2}}]}));
    let meta = json(serde_json::json!({"ts": 1, "entry": evil, "size": 3,
        "content_type": evil, "labels": {evil: evil}}));
    let mut frames = bytes::BytesMut::new();
    // (The frame decoder refuses a content type that is not printable ASCII.)
    record_frame(&mut frames, None, 1, "text/plain", &[("k", evil)], b"abc");
    tsblob_proto::framing::put_skipped(
        &mut frames,
        format!("{{\"skipped\": [], \"note\": \"{evil}\"}}").as_bytes(),
    );
    tsblob_proto::framing::put_error(&mut frames, format!("{{\"error\": \"{evil}\"}}").as_bytes());
    let out = tempfile::tempdir().unwrap();
    let out = out.path().to_str().unwrap().to_string();
    let cases: Vec<(Vec<&str>, Vec<u8>)> = vec![
        (vec!["bucket", "ls"], answer("application/json", &buckets)),
        (
            vec!["query", "b", "e", "--list"],
            answer("application/x-ndjson", &meta),
        ),
        (
            vec!["tail", "b", "e"],
            answer("application/x-ndjson", &meta),
        ),
        (
            vec!["query", "b", "e", "--list", "--out", &out],
            answer(tsblob_proto::framing::MEDIA_TYPE, &frames),
        ),
    ];
    let mut raw = Vec::new();
    for (cmd, reply) in cases {
        let (url, _) = hostile(reply, 0, 0);
        let args = [&cmd[..], &["--url", &url]].concat();
        let (status, text, took) = run(&args, &[], Duration::from_secs(30));
        assert!(
            status.is_some(),
            "{cmd:?} still running after {took:?}: {text}"
        );
        assert!(
            text.contains("RED"),
            "{cmd:?}: the text is not printed at all: {text}"
        );
        if text.contains(['\u{1b}', '\u{9b}', '\u{7}']) || !text.contains("\\x1b") {
            raw.push(format!("{cmd:?}: {text:?}"));
        }
    }
    assert!(
        raw.is_empty(),
        "control characters reached the terminal:\n{}",
        raw.join("\n")
    );
}

/// Bug "cut-off download left as a normal file" (hostile probe of 2026-11-28): a record cut
/// off in the middle stayed in the --out folder as a normal-looking, shorter file, and
/// `query` exited 1 where `--help` promises 7 for "the answer cut off". Now a record is
/// written to `<name>.part`, renamed once complete and removed when cut off, and a cut-off
/// stream (in a record, or without its end frame) exits 7, as does `get -o`.
#[test]
fn cut_off_download_left_as_a_normal_file() {
    let dir = tempfile::tempdir().unwrap();
    // 3 bytes of a record announcing 100, then the connection closes.
    let mut mid = bytes::BytesMut::new();
    record_frame(&mut mid, None, 1, "text/plain", &[], b"abc");
    record_frame(&mut mid, None, 2, "text/plain", &[], &[b'x'; 100]);
    mid.truncate(mid.len() - 97);
    // A complete record, then no end frame.
    let mut noend = bytes::BytesMut::new();
    record_frame(&mut noend, None, 1, "text/plain", &[], b"abc");
    for (name, frames, kept) in [("mid", mid, vec!["1.txt"]), ("noend", noend, vec!["1.txt"])] {
        let (url, _) = hostile(answer(tsblob_proto::framing::MEDIA_TYPE, &frames), 0, 0);
        let out = dir.path().join(name);
        let (code, text, took) = run_code(
            &[
                "query",
                "b",
                "e",
                "--out",
                out.to_str().unwrap(),
                "--url",
                &url,
            ],
            &[],
            Duration::from_secs(30),
        );
        assert_eq!(code, Some(7), "{name}: after {took:?}: {text}");
        assert!(text.contains("incomplete"), "{name}: {text}");
        let mut files: Vec<String> = files_under(&out)
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files, kept, "{name}: {text}");
        assert_eq!(std::fs::read(out.join("1.txt")).unwrap(), b"abc");
    }
    // `get -o`: 10 of the 1000 bytes announced.
    let head =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 1000\r\nx-tsblob-ts: 1\r\n\r\n"
            .to_vec();
    let (url, _) = hostile(head, b'a', 10);
    let got = dir.path().join("get").join("record.txt");
    std::fs::create_dir_all(got.parent().unwrap()).unwrap();
    let (code, text, took) = run_code(
        &["get", "b", "e", "-o", got.to_str().unwrap(), "--url", &url],
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(7), "get: after {took:?}: {text}");
    assert_eq!(
        files_under(got.parent().unwrap()),
        Vec::<std::path::PathBuf>::new(),
        "{text}"
    );
}

/// Bug "query has no record size limit" (hostile probe of 2026-11-28): `query --out` wrote
/// whatever a frame announced (2^63 bytes: 3.9 GB in 15 s until the disk was full), where
/// `cp` refuses a record over `--max-record`. Now `query` has the same `--max-record`
/// (default 1 GiB) and refuses such a frame at its head, before writing anything.
#[test]
fn query_had_no_record_size_limit() {
    let mut frames = bytes::BytesMut::new();
    tsblob_proto::framing::put_record_head(
        &mut frames,
        1,
        "application/octet-stream",
        &tsblob_storage::Labels::new(),
        1u64 << 40,
    );
    let (url, sent) = hostile(
        answer(tsblob_proto::framing::MEDIA_TYPE, &frames),
        0,
        256 << 20,
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let (status, text, took) = run(
        &[
            "query",
            "b",
            "e",
            "--out",
            out.to_str().unwrap(),
            "--url",
            &url,
        ],
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(status, Some(false), "after {took:?}: {text}");
    assert!(took < Duration::from_secs(10), "{took:?}: {text}");
    assert!(text.contains("--max-record"), "{text}");
    assert!(text.contains("1099511627776"), "{text}");
    assert!(files_under(&out).is_empty(), "{text}");
    let sent = sent.load(Ordering::Relaxed);
    assert!(sent < 64 << 20, "the query read {sent} bytes of the record");
}
