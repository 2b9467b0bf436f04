//! Open connections are bounded (`server/src/connections.rs`): `--max-connections` in all,
//! `--max-connections-per-ip` per client address, with defaults that leave the store its
//! file descriptors.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::common::Server;

/// A connection from `from` (a loopback address: every 127.x.y.z is this machine's) to
/// the server, within 5 s.
async fn connect(from: &str, server: &Server) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let to = server.url("").trim_start_matches("http://").to_string();
    tokio::time::timeout(Duration::from_secs(5), s.connect(to.parse().unwrap()))
        .await
        .expect("connect timed out")
        .unwrap()
}

/// Sends `method path` with `body` on `c` and reads the answer's head and body (the
/// whole of a small answer): `None` if none came within 5 s.
async fn ask(c: &mut TcpStream, method: &str, path: &str, body: &[u8]) -> Option<(u16, String)> {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut req = head.into_bytes();
    req.extend_from_slice(body);
    c.write_all(&req).await.ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let n = tokio::time::timeout_at(deadline, c.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if rest.len() >= len || n == 0 {
                let status = head.split(' ').nth(1)?.parse().ok()?;
                return Some((status, rest.to_string()));
            }
        }
        if n == 0 {
            return None;
        }
    }
}

/// One request on a fresh connection from `from`.
async fn ask_new(
    from: &str,
    s: &Server,
    method: &str,
    path: &str,
    body: &[u8],
) -> Option<(u16, String)> {
    ask(&mut connect(from, s).await, method, path, body).await
}

/// Waits (at most 10 s) until the server counts exactly `open` connections, asking its
/// `/metrics` on `c`, a connection kept open (a connection closed a moment ago, such as
/// the start-up check's, may still be counted: under load it took a place of the next
/// test connection of its address, and a cap test counted one refusal too many).
async fn settle(c: &mut TcpStream, open: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, metrics) = ask(c, "GET", "/metrics", b"").await.unwrap();
        assert_eq!(status, 200, "{metrics}");
        let now = gauge(&metrics, "tsblob_connections");
        if now == open {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{now} connections open, not {open}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The value of the metric line `name` (without labels) in `metrics`.
fn gauge(metrics: &str, name: &str) -> i64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
        .parse()
        .unwrap()
}

fn code(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    v["error"]["code"].as_str().unwrap_or("").to_string()
}

/// Bug "connection flood": connections were not bounded, so one client that opened them
/// until the process ran out of descriptors stopped the server accepting anyone else
/// (`accept` failed with EMFILE, logged 20 times a second) and left the store none for
/// new block files. Under `ulimit -n 256` (the defaults: 32 connections, 16 an address)
/// 300 held connections from one address now leave the server answering others, writes
/// to new entries included, and the flood's own extra connections get 429 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_up_to_the_open_files_limit_stopped_the_server_accepting() {
    let s = Server::start_with_open_files(&[], 256);
    // One connection of another address, kept (a closed one may count for a moment).
    let mut other = connect("127.0.0.2", &s).await;
    let created = ask(&mut other, "POST", "/api/v1/b/flood", b"").await;
    assert_eq!(created.map(|a| a.0), Some(201));
    settle(&mut other, 1).await;
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..300 {
        let mut c = connect("127.0.0.1", &s).await;
        match ask(&mut c, "GET", "/health", b"").await {
            Some((200, _)) => held.push(c),
            Some((429, body)) => {
                assert_eq!(code(&body), "too_many_connections", "{body}");
                assert!(body.contains("--max-connections-per-ip 16"), "{body}");
                refused += 1;
            }
            other => panic!("a flood connection got {other:?}"),
        }
    }
    assert_eq!((held.len(), refused), (16, 284));
    // Other addresses are served, and the store still opens files for new entries.
    for i in 0..20 {
        let path = format!("/api/v1/b/flood/e{i}?ts=1");
        let got = ask(&mut other, "POST", &path, b"frame").await;
        assert_eq!(got.as_ref().map(|a| a.0), Some(201), "{got:?}");
    }
    // The server's own cap: 15 more from another address fill its 32; the next is 503.
    for _ in 0..15 {
        let mut c = connect("127.0.0.3", &s).await;
        let got = ask(&mut c, "GET", "/health", b"").await;
        assert_eq!(got.map(|a| a.0), Some(200));
        held.push(c);
    }
    let got = ask_new("127.0.0.5", &s, "GET", "/health", b"")
        .await
        .unwrap();
    assert_eq!((got.0, code(&got.1)), (503, "busy".to_string()), "{got:?}");
    assert!(got.1.contains("--max-connections 32"), "{}", got.1);
    // Gone, their places are free again.
    drop((held, other));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = ask_new("127.0.0.1", &s, "GET", "/api/v1/b/flood/e3?ts=1", b"").await;
        if got.as_ref().map(|a| a.0) == Some(200) {
            assert_eq!(got.unwrap().1, "frame");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still refused: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fds = std::fs::read_dir(format!("/proc/{}/fd", s.pid()))
        .unwrap()
        .count();
    assert!(fds < 128, "{fds} descriptors still open");
    assert!(
        s.stderr_contains(
            "connections at most 32 (16 per client address)",
            Duration::from_secs(1)
        ),
        "{}",
        s.stderr_text()
    );
}

/// The flags set both caps; a connection refused past them is answered before its
/// request was read (the answer comes even to a client that sends nothing) and closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_caps_follow_their_flags() {
    let s = Server::start(&["--max-connections", "6", "--max-connections-per-ip", "2"]);
    // Until the start-up check's connection (from 127.0.0.1 too) is counted out.
    let mut m = connect("127.0.0.2", &s).await;
    settle(&mut m, 1).await;
    let a1 = connect("127.0.0.1", &s).await;
    let a2 = connect("127.0.0.1", &s).await;
    let mut a3 = connect("127.0.0.1", &s).await;
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), a3.read_to_string(&mut answer))
        .await
        .expect("no answer to a connection past the cap")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 429 "), "{answer}");
    assert!(answer.contains("retry-after: 1") && answer.contains("connection: close"));
    let metrics = ask(&mut m, "GET", "/metrics", b"").await.unwrap().1;
    assert!(
        metrics.contains("tsblob_connections_refused_total{limit=\"ip\"} 1"),
        "{metrics}"
    );
    // m, a1 and a2: a refused connection never held a place.
    assert_eq!(gauge(&metrics, "tsblob_connections"), 3, "{metrics}");
    drop((a1, a2));
}

/// Bug "head flood": with connections unbounded, 1,000 connections (from as many
/// addresses) each sending 380 KB of a request head, hyper's largest, took the server's
/// RSS 23 → 423 MB (release build), held for the header timeout and repeatable at once.
/// With the default caps the server lets in at most its `--max-connections` of 800 such
/// connections (the rest answered 503 as they open), so its RSS grows by at most that
/// many heads, and a fresh connection is answered 503 `busy` meanwhile.
#[test]
fn a_flood_of_large_request_heads_is_bounded_by_the_connection_cap() {
    use std::io::Write;
    const FLOOD: usize = 800;
    const HEAD: usize = 380_000;
    let s = Server::start(&[]);
    // (The line may follow the server's first answer: read it once it is there. The test
    // failed under load with only the start's first line in the log.)
    assert!(
        s.stderr_contains("connections at most ", std::time::Duration::from_secs(10)),
        "no cap in the log: {}",
        s.stderr_text()
    );
    let cap: u64 = s
        .stderr_text()
        .split("connections at most ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no cap in the log: {}", s.stderr_text()));
    let to = s.url("").trim_start_matches("http://").to_string();
    let (rss0, _) = s.rss();
    let pad = format!("X-Pad: {}\r\n", "a".repeat(8_000));
    let mut held = Vec::new();
    for i in 0..FLOOD {
        let from = format!("127.0.{}.{}", 1 + i / 200, 1 + i % 200);
        let sock = crate::reliability_util::connect_from(&from, &to);
        // A refused connection stops taking bytes: never wait on it.
        sock.set_write_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let mut t = sock;
        let mut sent = 0;
        if t.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
            .is_ok()
        {
            while sent < HEAD && t.write_all(pad.as_bytes()).is_ok() {
                sent += pad.len();
            }
        }
        held.push(t);
    }
    std::thread::sleep(Duration::from_secs(1));
    let (rss1, _) = s.rss();
    let grown = rss1.saturating_sub(rss0);
    // ≈ 440 KB a connection measured (hyper's 408 KiB buffer, rounded up by the allocator).
    let bound = cap * 480_000 + (48 << 20);
    println!(
        "{FLOOD} connections with {HEAD} B heads, cap {cap}: RSS {} -> {} MB (bound {} MB)",
        rss0 >> 20,
        rss1 >> 20,
        bound >> 20
    );
    assert!(grown < bound, "RSS grew {} MB", grown >> 20);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let got = rt.block_on(ask_new("127.0.5.1", &s, "GET", "/health", b""));
    assert_eq!(
        got.as_ref().map(|a| (a.0, code(&a.1))),
        Some((503, "busy".into())),
        "{got:?}"
    );
    drop(held);
    rt.block_on(async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while ask_new("127.0.5.1", &s, "GET", "/health", b"")
            .await
            .map(|a| a.0)
            != Some(200)
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not serving after the flood"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}
