//! Bad input against a real `tsblob serve` (issue #7): hostile names, broken timestamps,
//! truncated batches, lying `Content-Length`, 10,000 labels, huge headers and slow
//! clients. Every case must get a 4xx with the error JSON (never a 5xx, never a hang),
//! store nothing it should not, and leave the server serving.
#![allow(clippy::unwrap_used)]

use crate::common;
use crate::reliability_util;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Server;
use reliability_util::*;
use serde_json::Value;

const T: Duration = Duration::from_secs(20);

/// Sends a raw request; asserts a 4xx carrying the error JSON and returns (status, code).
fn expect_4xx(addr: &str, req: &[u8]) -> (u16, String) {
    let (status, answer) = raw_http(addr, req, T);
    assert!(
        (400..500).contains(&status),
        "{:?} answered {status}: {answer}",
        String::from_utf8_lossy(&req[..req.len().min(200)])
    );
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let code = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_default();
    (status, code)
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").into_bytes()
}

fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

fn assert_serving(s: &Server) {
    let (status, answer) = raw_http(&addr_of(&s.url("")), &get("/health"), T);
    assert_eq!(status, 200, "the server stopped serving: {answer}");
}

/// Every file name under `dir`, to prove a hostile name created nothing.
fn tree(dir: &std::path::Path) -> Vec<String> {
    let mut all: Vec<String> = walk(dir);
    all.sort();
    all
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        out.push(p.to_string_lossy().into_owned());
        if p.is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}

#[test]
fn hostile_names_are_refused_and_create_nothing() {
    let s = Server::start(&[]);
    let a = addr_of(&s.url(""));
    assert_eq!(raw_http(&a, &post("/api/v1/b/b", b""), T).0, 201);
    let before = tree(s.dir());
    let long = "a".repeat(10_000);
    let bad_buckets = [
        "..",
        "%2E%2E",
        ".",
        "%2F",
        "a%2Fb",
        "a%00b",
        "%00",
        "a%0Ab",
        "a%20b",
        "%C3%A9",
        &long,
        &"b".repeat(65),
    ];
    for name in bad_buckets {
        for req in [
            post(&format!("/api/v1/b/{name}"), b""),
            get(&format!("/api/v1/b/{name}")),
            post(&format!("/api/v1/b/{name}/e?ts=1"), b"x"),
        ] {
            let (status, code) = expect_4xx(&a, &req);
            assert!(
                matches!(
                    code.as_str(),
                    "invalid_name" | "not_found" | "bad_request" | "bucket_not_found"
                ),
                "bucket {:?}: {status} {code}",
                &name[..name.len().min(20)]
            );
        }
    }
    let bad_entries = [
        "..",
        "%2E%2E",
        "a/../../etc",
        "a/%2E%2E/b",
        "a//b",
        "%2Fabs",
        "a%00b",
        "x/batch",
        "x/query",
        &long,
        &"e".repeat(256),
    ];
    for name in bad_entries {
        let (status, code) = expect_4xx(&a, &post(&format!("/api/v1/b/b/{name}?ts=1"), b"x"));
        assert!(
            matches!(
                code.as_str(),
                "invalid_name" | "not_found" | "bad_request" | "method_not_allowed"
            ),
            "entry {:?}: {status} {code}",
            &name[..name.len().min(20)]
        );
    }
    // Label keys.
    for key in ["K%00", "a b", &"k".repeat(200)] {
        let req = format!(
            "POST /api/v1/b/b/e?ts=5 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nx-tsblob-label-{key}: v\r\nContent-Length: 1\r\n\r\nx"
        );
        let (status, answer) = raw_http(&a, req.as_bytes(), T);
        assert!(
            (400..500).contains(&status),
            "label key {key:?}: {status} {answer}"
        );
    }
    assert_eq!(tree(s.dir()), before, "a refused name left files behind");
    assert_serving(&s);
}

#[test]
fn broken_timestamps_are_422_everywhere() {
    let s = Server::start(&[]);
    let a = addr_of(&s.url(""));
    assert_eq!(raw_http(&a, &post("/api/v1/b/b", b""), T).0, 201);
    assert_eq!(
        raw_http(&a, &post("/api/v1/b/b/e?ts=7", b"seven"), T).0,
        201
    );
    let bad = [
        "-1",
        "1.5",
        "abc",
        "0x10",
        "1e6",
        "",
        "%00",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999999",
        "%201",
        "+1",
        "1%00",
    ];
    for ts in bad {
        for req in [
            post(&format!("/api/v1/b/b/e?ts={ts}"), b"x"),
            get(&format!("/api/v1/b/b/e?ts={ts}")),
            get(&format!("/api/v1/b/b/e/query?start={ts}")),
            get(&format!("/api/v1/b/b/e/query?stop={ts}")),
            format!(
                "DELETE /api/v1/b/b/e?ts={ts} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            )
            .into_bytes(),
        ] {
            let (status, code) = expect_4xx(&a, &req);
            assert!(
                code == "invalid_timestamp" || code == "bad_request",
                "ts {ts:?}: {status} {code} for {}",
                String::from_utf8_lossy(&req[..40])
            );
        }
    }
    // start > stop is refused, the stored record is untouched.
    assert_eq!(
        expect_4xx(&a, &get("/api/v1/b/b/e/query?start=10&stop=5")).0,
        422
    );
    let (status, answer) = raw_http(&a, &get("/api/v1/b/b/e?ts=7"), T);
    assert_eq!(status, 200);
    assert!(answer.ends_with("seven"));
}

#[test]
fn truncated_and_inconsistent_batches_keep_exactly_what_they_say() {
    let s = Server::start(&[]);
    let a = addr_of(&s.url(""));
    assert_eq!(raw_http(&a, &post("/api/v1/b/b", b""), T).0, 201);
    let whole = batch_body(&[(1, 100), (2, 200), (3, 300)]);
    // Cut at every interesting place: inside a head, inside a payload, before the end frame,
    // inside the end frame.
    for cut in [1, 10, 30, 60, whole.len() - 9, whole.len() - 3] {
        let (status, answer) = raw_http(&a, &post("/api/v1/b/b/cut/batch", &whole[..cut]), T);
        assert_eq!(status, 400, "cut at {cut}: {answer}");
        assert!(answer.contains("malformed_batch"), "{answer}");
    }
    // A wrong count in the end frame, garbage after it, an unknown frame kind.
    let mut wrong_count = whole[..whole.len() - 9].to_vec();
    wrong_count.extend_from_slice(&[0, 7, 0, 0, 0, 0, 0, 0, 0]);
    let mut trailing = whole.to_vec();
    trailing.extend_from_slice(b"junk");
    let mut kind = whole.to_vec();
    kind[0] = 9;
    for body in [wrong_count, trailing, kind] {
        let (status, answer) = raw_http(&a, &post("/api/v1/b/b/cut/batch", &body), T);
        assert_eq!(status, 400, "{answer}");
    }
    // A record frame announcing 2^63 payload bytes, and labels over the limit.
    let mut huge = vec![1u8];
    huge.extend_from_slice(&1u64.to_le_bytes());
    huge.extend_from_slice(&[0, 0, 0, 0]);
    huge.extend_from_slice(&0u32.to_le_bytes());
    huge.extend_from_slice(&(1u64 << 63).to_le_bytes());
    huge.extend_from_slice(b"abc");
    let (status, answer) = raw_http(&a, &post("/api/v1/b/b/cut/batch", &huge), T);
    assert!(status == 400 || status == 413, "{answer}");
    let mut labels = vec![1u8];
    labels.extend_from_slice(&1u64.to_le_bytes());
    labels.extend_from_slice(&[0, 0, 1, 0]);
    labels.extend_from_slice(&u32::MAX.to_le_bytes());
    labels.extend_from_slice(&1u64.to_le_bytes());
    let (status, answer) = raw_http(&a, &post("/api/v1/b/b/cut/batch", &labels), T);
    assert_eq!(status, 400, "{answer}");
    // Nothing of the refused batches was stored (all in one chunk, refused whole).
    let (status, _) = raw_http(&a, &get("/api/v1/b/b/cut/info"), T);
    if status == 200 {
        let (_, answer) = raw_http(&a, &get("/api/v1/b/b/cut/info"), T);
        assert!(answer.contains("\"record_count\":0"), "{answer}");
    }
    assert_serving(&s);
}

#[test]
fn lying_content_length_is_caught_both_ways() {
    let s = Server::start(&["--idle-timeout", "2s"]);
    let a = addr_of(&s.url(""));
    assert_eq!(raw_http(&a, &post("/api/v1/b/b", b""), T).0, 201);
    // Longer than the body, then the client half-closes: 400, nothing stored.
    let mut tcp = TcpStream::connect(&a).unwrap();
    tcp.set_read_timeout(Some(T)).unwrap();
    tcp.write_all(
        b"POST /api/v1/b/b/e?ts=1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\nonly ten b",
    )
    .unwrap();
    tcp.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut tcp, &mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // Longer than the body, client keeps the connection open: 408 after the idle timeout.
    let started = Instant::now();
    let req =
        b"POST /api/v1/b/b/e?ts=2 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\nonly ten b";
    let (status, answer) = raw_http(&a, req, T);
    assert_eq!(status, 408, "{answer}");
    assert!(started.elapsed() < Duration::from_secs(10));
    for ts in [1, 2] {
        assert_eq!(
            expect_4xx(&a, &get(&format!("/api/v1/b/b/e?ts={ts}"))).0,
            404
        );
    }
    // Shorter than the body: the record is the announced bytes; the rest is a bad request.
    let req = b"POST /api/v1/b/b/e?ts=3 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nfive!EXTRA-BYTES-THAT-ARE-NOT-HTTP\r\n\r\n";
    let (status, answer) = raw_http(&a, req, T);
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = raw_http(&a, &get("/api/v1/b/b/e?ts=3"), T);
    assert_eq!(status, 200);
    assert!(answer.ends_with("\r\n\r\nfive!"), "{answer}");
    assert_serving(&s);
}

/// A single write over `--max-body` was answered 413 and the connection closed with no
/// `Connection: close`, so a keep-alive client put it back in its pool and its next request
/// failed on it (the async SDK did, issue 30's SDK work). The 413 now says the connection
/// closes, and the server closes it.
#[test]
fn early_413_left_clients_to_guess_the_connection_was_closed() {
    let s = Server::start(&["--max-body", "64KiB"]);
    let a = addr_of(&s.url(""));
    assert_eq!(raw_http(&a, &post("/api/v1/b/b", b""), T).0, 201);
    // Announced over the limit, the first 16 KiB sent: the answer comes before the rest.
    let mut tcp = TcpStream::connect(&a).unwrap();
    tcp.write_all(
        b"POST /api/v1/b/b/e?ts=1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 200000\r\n\r\n",
    )
    .unwrap();
    let _ = tcp.write_all(&[7u8; 16 << 10]);
    let started = Instant::now();
    let (status, answer) = read_answer(&mut tcp, T);
    assert_eq!(status, 413, "{answer}");
    let head = answer
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(answer.contains("payload_too_large"), "{answer}");
    // `read_answer` returned at the close, not after T of silence.
    assert!(started.elapsed() < Duration::from_secs(10));
    // A fresh connection is served, and the refused record was not stored.
    assert_eq!(expect_4xx(&a, &get("/api/v1/b/b/e?ts=1")).0, 404);
    assert_serving(&s);
}

#[test]
fn ten_thousand_labels_and_huge_headers_are_refused_cleanly() {
    let s = Server::start(&[]);
    let a = addr_of(&s.url(""));
    assert_eq!(raw_http(&a, &post("/api/v1/b/b", b""), T).0, 201);
    // 10,000 label headers on a single write.
    let mut req = String::from(
        "POST /api/v1/b/b/e?ts=1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n",
    );
    for i in 0..10_000 {
        req.push_str(&format!("x-tsblob-label-k{i}: v{i}\r\n"));
    }
    req.push_str("Content-Length: 1\r\n\r\nx");
    let (status, answer) = raw_http(&a, req.as_bytes(), T);
    assert!(
        status == 201 || (400..500).contains(&status) || (status == 0 && answer.is_empty()),
        "10,000 label headers: {status} {answer}"
    );
    // 10,000 labels in a batch frame: stored whole or refused whole, never half.
    let mut labels = tsblob_storage::Labels::new();
    for i in 0..10_000 {
        labels.insert(format!("k{i}"), format!("v{i}"));
    }
    let mut body = bytes::BytesMut::new();
    tsblob_proto::framing::put_record(&mut body, 2, "", &labels, &payload(2, 100));
    tsblob_proto::framing::put_end(&mut body, 1);
    let (status, answer) = raw_http(&a, &post("/api/v1/b/b/e/batch", &body), T);
    assert!(status == 200 || (400..500).contains(&status), "{answer}");
    let (st, read) = raw_http(&a, &get("/api/v1/b/b/e?ts=2"), T);
    if answer.contains("\"status\":201") {
        assert_eq!(st, 200);
        assert!(read.contains("x-tsblob-label-k9999: v9999"), "labels lost");
    } else {
        assert_eq!(st, 404, "a refused record was stored");
    }
    // One 1 MiB header, and 64 KiB of request line.
    let big = format!(
        "GET /health HTTP/1.1\r\nHost: localhost\r\nx-big: {}\r\nConnection: close\r\n\r\n",
        "v".repeat(1 << 20)
    );
    let (status, answer) = raw_http(&a, big.as_bytes(), T);
    assert!(
        status == 431 || status == 400 || status == 0,
        "{status} {}",
        &answer[..answer.len().min(200)]
    );
    let line = format!(
        "GET /api/v1/b/{} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        "a".repeat(64 << 10)
    );
    let (status, _) = raw_http(&a, line.as_bytes(), T);
    assert!(status == 0 || (400..500).contains(&status), "{status}");
    assert_serving(&s);
}

/// Bug "hyper's 400/414/431 had empty bodies": a request head hyper could not parse was
/// answered by hyper itself, `content-length: 0`, no word of what was wrong; each is now the
/// JSON error every other answer is (`head_errors.rs`), and the server goes on serving.
#[test]
fn hypers_own_400_414_431_had_empty_bodies() {
    let s = Server::start(&["--no-auth"]);
    let a = addr_of(&s.url(""));
    let mut many = String::from("GET /health HTTP/1.1\r\nHost: localhost\r\n");
    for i in 0..200 {
        many.push_str(&format!("x-h{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let cases: [(&str, Vec<u8>, u16, &str); 4] = [
        ("200 header lines", many.into_bytes(), 431, "head_too_large"),
        (
            "a 70 KB path",
            get(&format!("/api/v1/b/{}", "a".repeat(70_000))),
            414,
            "uri_too_long",
        ),
        (
            "two Content-Lengths",
            b"POST /api/v1/b/b/e?ts=1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy".to_vec(),
            400,
            "malformed_head",
        ),
        ("not HTTP", b"GARBAGE\r\n\r\n".to_vec(), 400, "malformed_head"),
    ];
    for (what, req, want_status, want_code) in cases {
        let (status, answer) = raw_http(&a, &req, T);
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        assert_eq!(status, want_status, "{what}: {head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{what}: {head}"
        );
        let v: Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{what}: the body is not the JSON error ({e}): {body:?}"));
        assert_eq!(v["error"]["code"], want_code, "{what}: {body}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.len() > 20, "{what}: {body}");
    }
    assert_serving(&s);
}

/// Reads one answer (head and a `content-length` body) from a kept-alive connection.
fn one_answer(tcp: &mut TcpStream) -> std::io::Result<(u16, String)> {
    use std::io::Read;
    tcp.set_read_timeout(Some(T))?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_string)
                })
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= len {
                let status = head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
                return Ok((status, body.to_string()));
            }
        }
        match tcp.read(&mut buf)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Bug "an early answer is lost to a reset" (races probe of 2026-11-28): a chunked write
/// to a missing bucket was answered 404 before its body was read, and the connection was
/// closed with the body unread: a client sending its whole body before reading the answer
/// (Python's `http.client`) got a broken pipe or a reset in place of the 404. A small body
/// let go unread is now read on (`linger.rs`): the body's sends go through, the 404 is
/// read, and the connection even serves the next request.
#[test]
fn an_early_answer_to_a_chunked_write_was_lost_to_a_reset() {
    let s = Server::start(&["--no-auth"]);
    let a = addr_of(&s.url(""));
    let mut tcp = TcpStream::connect(&a).unwrap();
    tcp.write_all(
        b"POST /api/v1/b/nobucket/e?ts=1 HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .unwrap();
    // The answer is made before any of the body is sent; the body follows, as a client
    // that writes it whole before reading does.
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..32 {
        let sent = tcp.write_all(format!("400\r\n{}\r\n", "x".repeat(1024)).as_bytes());
        assert!(sent.is_ok(), "the body's send failed: {sent:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    tcp.write_all(b"0\r\n\r\n").unwrap();
    let (status, body) = one_answer(&mut tcp).expect("the answer was lost");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("bucket_not_found"), "{body}");
    tcp.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let next = one_answer(&mut tcp);
    assert!(
        matches!(next, Ok((200, _))),
        "the connection did not serve the next request: {next:?}"
    );
    assert_serving(&s);
}

/// Threads and open file descriptors of a process, from /proc.
fn threads_and_fds(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    (threads, fds)
}

#[test]
fn slow_clients_are_cut_off_without_exhausting_the_server() {
    const SLOW: usize = 200;
    let s = Server::start(&[
        "--header-timeout",
        "4s",
        "--idle-timeout",
        "2s",
        // All 200 from one address, each let in (`connections.rs` tests the caps).
        "--max-connections",
        "1000",
        "--max-connections-per-ip",
        "1000",
    ]);
    let a = addr_of(&s.url(""));
    assert_eq!(raw_http(&a, &post("/api/v1/b/b", b""), T).0, 201);
    let (threads0, fds0) = threads_and_fds(s.pid());
    let rss0 = rss_bytes(s.pid());
    // Half trickle their request head, half announce a body and send it byte by byte.
    let mut conns: Vec<TcpStream> = (0..SLOW)
        .map(|i| {
            let mut t = TcpStream::connect(&a).unwrap();
            t.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
            t.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            if i % 2 == 0 {
                t.write_all(b"GET /health HTTP/1.1\r\nHo").unwrap();
            } else {
                t.write_all(
                    format!("POST /api/v1/b/b/slow?ts={i} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\nab")
                        .as_bytes(),
                )
                .unwrap();
            }
            t
        })
        .collect();
    // While they dawdle, a normal client is served promptly: well before the 4 s header
    // timeout would free an exhausted server. (1 s was the bound with a 2 s header timeout;
    // 1.03 s was seen in CI once this test shared its binary, and the 2 cores, with the other
    // server tests. Both have grown since, the bound staying a second short of the timeout.)
    let started = Instant::now();
    assert_serving(&s);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "health took {:?}",
        started.elapsed()
    );
    let (threads1, fds1) = threads_and_fds(s.pid());
    // Keep trickling a byte every 500 ms (slower than nothing, faster than the idle timeout
    // for a body), for 8 s: the head timeout must still cut the head-tricklers.
    let mut closed = [false; SLOW];
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        for (i, t) in conns.iter_mut().enumerate() {
            if !closed[i] && t.write_all(b"x").is_err() {
                closed[i] = true;
            }
            let mut buf = [0u8; 512];
            if let Ok(0) = std::io::Read::read(t, &mut buf) {
                closed[i] = true;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let heads_cut = closed.iter().step_by(2).filter(|c| **c).count();
    assert_eq!(
        heads_cut,
        SLOW / 2,
        "request heads trickled past --header-timeout"
    );
    drop(conns);
    // The server notices the closes at its own pace: wait (10 s at most) for the fds to go.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (threads2, fds2) = loop {
        let (threads2, fds2) = threads_and_fds(s.pid());
        if fds2 <= fds0 + 10 || Instant::now() >= deadline {
            break (threads2, fds2);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let rss2 = rss_bytes(s.pid());
    println!(
        "{SLOW} slow clients: threads {threads0} -> {threads1} -> {threads2}, fds {fds0} -> {fds1} -> {fds2}, \
         RSS {} -> {} MB",
        rss0 >> 20,
        rss2 >> 20
    );
    assert!(
        threads1 <= threads0 + 8,
        "a thread per slow client? {threads0} -> {threads1}"
    );
    assert!(
        fds2 <= fds0 + 10,
        "connections not released: {fds0} -> {fds2} fds"
    );
    assert!(rss2 < rss0 + (64 << 20), "RSS grew from {rss0} to {rss2}");
    assert_serving(&s);
}

/// Bug (probe of 2026-11-30): a write with `Transfer-Encoding: gzip, chunked` (or
/// `deflate`, or a coding no one knows) was answered 201, and the record held the bytes
/// still gzipped: hyper takes off `chunked` and let the rest of the list by. Any coding but
/// `chunked` is refused with 501 and the JSON error now, on the native API and the
/// ReductStore API alike, and nothing is stored; `chunked` alone is written as before.
#[test]
fn a_transfer_coding_but_chunked_was_stored_still_encoded() {
    let s = Server::start(&["--no-auth", "--reductstore-prefix", "/reduct"]);
    let a = addr_of(&s.url(""));
    let (status, answer) = raw_http(&a, &post("/api/v1/b/g", b""), T);
    assert_eq!(status, 201, "{answer}");
    let chunked = |path: &str, te: &str| -> Vec<u8> {
        format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nTransfer-Encoding: {te}\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        )
        .into_bytes()
    };
    for te in [
        "gzip, chunked",
        "deflate, chunked",
        "x-custom, chunked",
        "GZIP,chunked",
    ] {
        let (status, answer) = raw_http(&a, &chunked("/api/v1/b/g/e?ts=7", te), T);
        assert_eq!(status, 501, "{te}: {answer}");
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{te}: {e}: {body}"));
        assert_eq!(v["error"]["code"], "unsupported_encoding", "{te}: {body}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("Transfer-Encoding") && message.contains("chunked"),
            "{te}: {message}"
        );
        let (status, answer) = raw_http(&a, &chunked("/api/v1/b/g/e/batch", te), T);
        assert_eq!(status, 501, "{te} batch: {answer}");
        let (status, answer) = raw_http(&a, &chunked("/reduct/api/v1/b/g/e?ts=8", te), T);
        assert_eq!(status, 501, "{te} ReductStore API: {answer}");
        assert!(answer.contains("Transfer-Encoding"), "{te}: {answer}");
    }
    let (status, answer) = raw_http(&a, &get("/api/v1/b/g"), T);
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"entry_count\":0,"), "{answer}");
    let (status, answer) = raw_http(&a, &chunked("/api/v1/b/g/e?ts=9", "chunked"), T);
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = raw_http(&a, &get("/api/v1/b/g/e?ts=9"), T);
    assert_eq!(status, 200, "{answer}");
    assert!(answer.ends_with("\r\n\r\nhello"), "{answer}");
    assert_serving(&s);
}

/// Bug (probe of 2026-11-30): docs/api.md gave 431 `head_too_large` for "a Content-Length
/// too large to parse", but only 2^64−2 and 2^64−1 get 431 (numbers past what hyper frames);
/// from 2^64 on it is 400 `malformed_head` (not a 64-bit number). The doc and both answers'
/// messages now name the case each covers.
#[test]
fn a_content_length_of_2_64_got_400_where_the_doc_said_431() {
    let s = Server::start(&["--no-auth"]);
    let a = addr_of(&s.url(""));
    let cases = [
        ("18446744073709551615", 431, "head_too_large", "2^64-1"),
        ("18446744073709551614", 431, "head_too_large", "2^64-2"),
        (
            "18446744073709551616",
            400,
            "malformed_head",
            "2^64 or more",
        ),
        (
            "99999999999999999999999",
            400,
            "malformed_head",
            "2^64 or more",
        ),
    ];
    for (cl, want_status, want_code, names) in cases {
        let req = format!(
            "POST /api/v1/b/b/e?ts=1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: {cl}\r\n\r\nxy"
        );
        let (status, answer) = raw_http(&a, req.as_bytes(), T);
        assert_eq!(status, want_status, "{cl}: {answer}");
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{cl}: {e}: {body}"));
        assert_eq!(v["error"]["code"], want_code, "{cl}: {body}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{cl}: {message}");
    }
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.md")).unwrap();
    assert!(
        !doc.contains("a `Content-Length` too large to parse")
            && doc.contains("2^64 or more")
            && doc.contains("2^64−1"),
        "docs/api.md does not tell the two answers apart"
    );
    assert_serving(&s);
}
