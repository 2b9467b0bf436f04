//! "No record lost, no server hung": each test pins one bug seen on a real `tsblob serve`
//! (release build, default settings) and is named after it. Raw sockets where a client
//! must misbehave (stall, promise a body it never sends, send chunked).
#![allow(clippy::unwrap_used)]

use crate::common;
use crate::reliability_util;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::Server;
use reliability_util::*;
use serde_json::{json, Value};

/// How long a request that must not hang may take.
const PROMPT: Duration = Duration::from_secs(5);

/// One request on a fresh connection; (status, JSON body or Null).
fn call(a: &str, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    let (status, answer) = raw_http(a, &r, Duration::from_secs(30));
    let json = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

/// Like [`call`], but it must answer within [`PROMPT`].
fn prompt(a: &str, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let started = Instant::now();
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    let (status, answer) = raw_http(a, &r, PROMPT);
    let took = started.elapsed();
    assert!(
        status != 0 && took < PROMPT,
        "{method} {path} did not answer within {PROMPT:?} (took {took:?}): the server hangs"
    );
    let json = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

fn create(a: &str, bucket: &str, settings: Value) {
    let (status, v) = call(
        a,
        "POST",
        &format!("/api/v1/b/{bucket}"),
        settings.to_string().as_bytes(),
    );
    assert_eq!(status, 201, "{v}");
}

fn put(a: &str, path: &str, body: &[u8]) {
    let (status, v) = call(a, "POST", path, body);
    assert_eq!(status, 201, "POST {path}: {v}");
}

fn info(a: &str, bucket: &str) -> Value {
    let (status, v) = call(a, "GET", &format!("/api/v1/b/{bucket}"), b"");
    assert_eq!(status, 200, "{v}");
    v["info"].clone()
}

fn status_of(a: &str, method: &str, path: &str) -> u16 {
    call(a, method, path, b"").0
}

/// Opens a POST that announces `len` bytes and sends only `first` of them.
fn stalled_upload(a: &str, path: &str, len: u64, first: usize) -> TcpStream {
    let mut t = TcpStream::connect(a).unwrap();
    t.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    t.write_all(
        format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {len}\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    t.write_all(&vec![b's'; first]).unwrap();
    t
}

/// Bug "hang": a slow upload (> 256 KiB, arriving slowly) to entry `slow` of bucket `b`
/// while `GET /metrics` and `DELETE /api/v1/b/b/zzz` are sent: neither returned, and then
/// every write to the bucket timed out. The streamed write path held the entry mutex and a
/// blocking thread while it waited for the network (and the engine took locks out of
/// order). Now the body is received first and the engine is called once it is complete.
#[test]
fn hang_slow_upload_blocks_neither_metrics_nor_delete_nor_writes() {
    let s = Server::start(&[]);
    let a = addr_of(&s.url(""));
    create(&a, "b", json!({}));
    put(&a, "/api/v1/b/b/zzz?ts=1", b"z");
    put(&a, "/api/v1/b/b/slow?ts=1", b"s");
    const LEN: u64 = 1 << 20;
    let mut slow = stalled_upload(&a, "/api/v1/b/b/slow?ts=100", LEN, 300 << 10);
    std::thread::sleep(Duration::from_millis(300));

    assert_eq!(prompt(&a, "GET", "/metrics", b"").0, 200);
    assert_eq!(prompt(&a, "DELETE", "/api/v1/b/b/zzz", b"").0, 200);
    assert_eq!(prompt(&a, "POST", "/api/v1/b/b/slow?ts=2", b"x").0, 201);
    assert_eq!(prompt(&a, "POST", "/api/v1/b/b/other", b"x").0, 201);
    assert_eq!(prompt(&a, "GET", "/api/v1/b/b/slow?ts=1", b"").0, 200);

    // The slow upload, once complete, is stored whole.
    slow.write_all(&vec![b's'; (LEN as usize) - (300 << 10)])
        .unwrap();
    let (status, answer) = read_answer(&mut slow, Duration::from_secs(30));
    assert_eq!(status, 201, "{answer}");
    let (status, got) = raw_http(
        &a,
        b"GET /api/v1/b/b/slow?ts=100 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        Duration::from_secs(30),
    );
    assert_eq!(status, 200);
    assert!(
        got.contains(&format!("content-length: {LEN}")),
        "{got:.300}"
    );
    assert_eq!(prompt(&a, "POST", "/api/v1/b/b/zzz", b"again").0, 201);
}

/// Bug "many slow uploads": each slow upload held one of the 512 threads of the blocking
/// pool while it waited for the network, so ~512 of them stopped every read and write.
#[test]
fn many_slow_uploads_do_not_starve_a_point_read_or_a_small_write() {
    const SLOW: usize = 600;
    // All 600 from one address let in (`connections.rs` tests the caps).
    let s = Server::start(&[
        "--max-connections",
        "1000",
        "--max-connections-per-ip",
        "1000",
    ]);
    let a = addr_of(&s.url(""));
    create(&a, "b", json!({}));
    put(&a, "/api/v1/b/b/point?ts=1", b"point");
    let conns: Vec<TcpStream> = (0..SLOW)
        .map(|i| {
            stalled_upload(
                &a,
                &format!("/api/v1/b/b/slow{}?ts={}", i % 8, i + 1),
                1 << 20,
                1024,
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(prompt(&a, "GET", "/api/v1/b/b/point?ts=1", b"").0, 200);
    assert_eq!(
        prompt(&a, "POST", "/api/v1/b/b/point?ts=2", b"small").0,
        201
    );
    assert_eq!(
        prompt(&a, "POST", "/api/v1/b/b/slow0?ts=9999", b"small").0,
        201
    );
    assert_eq!(prompt(&a, "GET", "/metrics", b"").0, 200);
    drop(conns);
    // The abandoned uploads stored nothing.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(info(&a, "b")["record_count"], 3);
}

/// Bug "FIFO wiped by a promise": on a full FIFO bucket, a POST announcing
/// `Content-Length: 1073741824` that sent nothing and disconnected emptied the bucket: the
/// quota was reserved (and blocks evicted for it) before any byte arrived.
#[test]
fn fifo_bucket_is_not_wiped_by_a_promised_body() {
    let s = Server::start(&[]);
    let a = addr_of(&s.url(""));
    create(
        &a,
        "f",
        json!({"quota_type": "fifo", "quota_size": 1 << 20, "max_block_size": 64 << 10}),
    );
    for ts in 1..=120u64 {
        put(
            &a,
            &format!("/api/v1/b/f/x?ts={ts}"),
            &payload(ts, 16 << 10),
        );
    }
    let before = info(&a, "f");
    assert!(before["evicted_blocks"].as_u64().unwrap() > 0, "{before}");

    // Nothing sent, then gone.
    let t = stalled_upload(&a, "/api/v1/b/f/x?ts=1000", 1 << 30, 0);
    std::thread::sleep(Duration::from_millis(300));
    t.shutdown(Shutdown::Both).unwrap();
    drop(t);
    // Half a MiB sent, then gone.
    let t = stalled_upload(&a, "/api/v1/b/f/x?ts=1001", 1 << 30, 512 << 10);
    std::thread::sleep(Duration::from_millis(300));
    drop(t);
    std::thread::sleep(Duration::from_millis(500));

    let after = info(&a, "f");
    assert_eq!(after["record_count"], before["record_count"], "{after}");
    assert_eq!(after["evicted_blocks"], before["evicted_blocks"], "{after}");
    assert_eq!(status_of(&a, "GET", "/api/v1/b/f/x?ts=120"), 200);
    assert_eq!(status_of(&a, "GET", "/api/v1/b/f/x?ts=1000"), 404);
}

/// Bug "HARD quota bypassed": a chunked upload (`Transfer-Encoding: chunked`) of 50 MB
/// into a bucket with a 1 MB HARD quota answered 201. A chunked body counts against the
/// quota like any other.
#[test]
fn hard_quota_refuses_a_chunked_upload() {
    const QUOTA: u64 = 1_000_000;
    let s = Server::start(&[]);
    let a = addr_of(&s.url(""));
    create(
        &a,
        "h",
        json!({"quota_type": "hard", "quota_size": QUOTA, "max_block_size": 64 << 10}),
    );
    let mut t = TcpStream::connect(&a).unwrap();
    t.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    t.write_all(
        b"POST /api/v1/b/h/big HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .unwrap();
    let piece = vec![b'q'; 64 << 10];
    let mut sent = 0u64;
    while sent < 50_000_000 {
        let mut c = format!("{:x}\r\n", piece.len()).into_bytes();
        c.extend_from_slice(&piece);
        c.extend_from_slice(b"\r\n");
        if t.write_all(&c).is_err() {
            break; // answered early and closed: fine
        }
        sent += piece.len() as u64;
    }
    let _ = t.write_all(b"0\r\n\r\n");
    let (status, answer) = read_answer(&mut t, Duration::from_secs(30));
    assert!(
        status == 507 || status == 413,
        "a 50 MB chunked upload into a 1 MB HARD quota answered {status}: {answer:.400}"
    );
    let i = info(&a, "h");
    assert_eq!(i["record_count"], 0, "{i}");
    assert!(i["size"].as_u64().unwrap() <= QUOTA, "{i}");
    assert_eq!(status_of(&a, "GET", "/api/v1/b/h/big"), 404);
}

/// Bug "reserved names": a bucket named `index` accepted writes whose records were 404
/// after a restart, and deleting it removed the live index folder; a bucket named `tokens`
/// broke token storage and the next start. Such names are refused with a clear 4xx.
#[test]
fn reserved_bucket_names_are_refused_and_the_server_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start_in(dir.path(), &[]);
    let a = addr_of(&s.url(""));
    create(&a, "ok", json!({}));
    put(&a, "/api/v1/b/ok/e?ts=1", b"kept");
    for name in ["index", "tokens", ".x", "tsblob.lock", "index.old"] {
        let (status, v) = call(&a, "POST", &format!("/api/v1/b/{name}"), b"");
        assert!(
            status == 400 || status == 422,
            "creating bucket {name:?} answered {status}: {v}"
        );
        assert!(v["error"]["code"].is_string(), "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(name),
            "the message should name {name:?}: {v}"
        );
        let (status, v) = call(&a, "POST", &format!("/api/v1/b/{name}/e?ts=1"), b"x");
        assert!((400..500).contains(&status), "{name}: {status} {v}");
        let (status, v) = call(&a, "DELETE", &format!("/api/v1/b/{name}"), b"");
        assert!((400..500).contains(&status), "{name}: {status} {v}");
    }
    assert!(
        dir.path().join("index").is_dir(),
        "the index folder is gone"
    );
    assert!(
        !dir.path().join("tokens").exists(),
        "a tokens folder or file appeared"
    );
    s.signal_term();
    assert!(s.wait(Duration::from_secs(30)).is_some_and(|e| e.success()));
    drop(s);
    let s = Server::start_in(dir.path(), &[]);
    let a = addr_of(&s.url(""));
    assert_eq!(status_of(&a, "GET", "/api/v1/b/ok/e?ts=1"), 200);
    let (status, v) = call(&a, "GET", "/api/v1/b", b"");
    assert_eq!(status, 200);
    let names: Vec<&str> = v["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(names, ["ok"], "{v}");
}

/// Writes records 1, 2, 3 (payloads `r1`, `r2`, `r3`) to `entry` of bucket `p`.
fn three_records(a: &str, entry: &str) {
    for ts in 1..=3 {
        put(
            a,
            &format!("/api/v1/b/p/{entry}?ts={ts}"),
            format!("r{ts}").as_bytes(),
        );
    }
}

fn payload_of(a: &str, entry: &str, ts: u64) -> Option<String> {
    let (status, answer) = raw_http(
        a,
        format!("GET /api/v1/b/p/{entry}?ts={ts} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .as_bytes(),
        Duration::from_secs(30),
    );
    (status == 200).then(|| answer.split_once("\r\n\r\n").unwrap().1.to_string())
}

/// Bug "lost neighbour": two concurrent PATCHes of the labels of one record deleted a
/// neighbour record (blocks of 2 records, so the new copies cross block boundaries).
#[test]
fn lost_neighbour_two_concurrent_label_patches_keep_every_record() {
    let s = Server::start(&[]);
    let a = addr_of(&s.url(""));
    create(&a, "p", json!({"max_block_records": 2}));
    for i in 0..60 {
        let entry = format!("e{i}");
        three_records(&a, &entry);
        let path = format!("/api/v1/b/p/{entry}?ts=2");
        let (s1, s2) = std::thread::scope(|sc| {
            let one = sc.spawn(|| call(&a, "PATCH", &path, br#"{"labels": {"a": "x"}}"#));
            let two = sc.spawn(|| call(&a, "PATCH", &path, br#"{"labels": {"b": "y"}}"#));
            (one.join().unwrap(), two.join().unwrap())
        });
        assert_eq!((s1.0, s2.0), (200, 200), "try {i}: {} {}", s1.1, s2.1);
        for ts in 1..=3 {
            assert_eq!(
                payload_of(&a, &entry, ts).as_deref(),
                Some(format!("r{ts}").as_str()),
                "try {i}: record {ts} lost after two concurrent PATCHes"
            );
        }
    }
}

/// Bug "lost neighbour", its sibling: a PATCH racing a DELETE of the same record must
/// never bring the deleted record back (not even after a restart), nor touch neighbours.
#[test]
fn lost_neighbour_patch_racing_delete_never_revives_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start_in(dir.path(), &[]);
    let a = addr_of(&s.url(""));
    create(&a, "p", json!({"max_block_records": 2}));
    let check = |a: &str, i: usize| {
        let entry = format!("d{i}");
        assert_eq!(
            payload_of(a, &entry, 2),
            None,
            "try {i}: deleted record is back"
        );
        for ts in [1, 3] {
            assert_eq!(
                payload_of(a, &entry, ts).as_deref(),
                Some(format!("r{ts}").as_str()),
                "try {i}: neighbour {ts} lost"
            );
        }
    };
    for i in 0..60 {
        let entry = format!("d{i}");
        three_records(&a, &entry);
        let path = format!("/api/v1/b/p/{entry}?ts=2");
        let (patched, deleted) = std::thread::scope(|sc| {
            let p = sc.spawn(|| call(&a, "PATCH", &path, br#"{"labels": {"a": "x"}}"#));
            let d = sc.spawn(|| call(&a, "DELETE", &path, b""));
            (p.join().unwrap(), d.join().unwrap())
        });
        assert_eq!(deleted.0, 200, "try {i}: {}", deleted.1);
        assert!(
            patched.0 == 200 || patched.0 == 404,
            "try {i}: {}",
            patched.1
        );
        check(&a, i);
    }
    s.signal_term();
    assert!(s.wait(Duration::from_secs(30)).is_some_and(|e| e.success()));
    drop(s);
    let s = Server::start_in(dir.path(), &[]);
    let a = addr_of(&s.url(""));
    for i in 0..60 {
        check(&a, i);
    }
}

/// Bug "batch memory": a batch counted only payload bytes towards its in-memory chunks,
/// so records with ~1 MiB of labels each and no payload piled up 4096 to a chunk (GBs).
/// Labels this large are over the engine's per-record bounds: nothing is stored.
#[test]
fn a_batch_with_huge_labels_is_refused_and_stores_nothing() {
    let s = Server::start(&[]);
    let a = addr_of(&s.url(""));
    create(&a, "b", json!({}));
    let (_, rss0) = s.rss();
    let value = "v".repeat(4000);
    let labels: tsblob_storage::Labels =
        (0..250).map(|j| (format!("k{j}"), value.clone())).collect();
    let mut body = bytes::BytesMut::new();
    for ts in 1..=32u64 {
        tsblob_proto::framing::put_record(&mut body, ts, "", &labels, b"p");
    }
    tsblob_proto::framing::put_end(&mut body, 32);
    let (status, v) = call(&a, "POST", "/api/v1/b/b/e/batch", &body);
    let refused = status == 413
        || status == 422
        || (status == 200
            && v["written"] == 0
            && v["results"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["status"] == 422 || r["status"] == 413));
    assert!(refused, "{status}: {:.600}", v.to_string());
    assert_eq!(info(&a, "b")["record_count"], 0);
    let (_, peak) = s.rss();
    println!("server peak RSS {} -> {} MB", rss0 >> 20, peak >> 20);
    assert!(
        peak < rss0 + (200 << 20),
        "a 32 MB batch took {} MB",
        (peak - rss0) >> 20
    );
}

/// Bug "label bounds": a PATCH could give one record any number of labels; more than the
/// engine's `MAX_LABELS` is refused (422 `invalid_label`) and the record is unchanged.
#[test]
fn a_patch_with_too_many_labels_is_refused() {
    let s = Server::start(&[]);
    let a = addr_of(&s.url(""));
    create(&a, "b", json!({}));
    put(&a, "/api/v1/b/b/e?ts=1", b"x");
    let labels: serde_json::Map<String, Value> = (0..=tsblob_storage::MAX_LABELS)
        .map(|j| (format!("k{j}"), json!("v")))
        .collect();
    let body = json!({ "labels": labels }).to_string();
    let (status, v) = call(&a, "PATCH", "/api/v1/b/b/e?ts=1", body.as_bytes());
    assert!(status == 422 || status == 413, "{status}: {v}");
    let (status, head) = raw_http(
        &a,
        b"HEAD /api/v1/b/b/e?ts=1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        Duration::from_secs(10),
    );
    assert_eq!(status, 200);
    assert!(!head.contains("x-tsblob-label-"), "{head}");
}

/// Bug "trickle": the idle timeout alone let a client send one byte per idle period and
/// hold a request forever; the body deadline cuts it (408) and nothing is stored.
#[test]
fn a_trickled_body_is_cut_by_the_body_deadline() {
    let s = Server::start(&["--body-deadline", "1s", "--body-min-rate", "1KiB"]);
    let a = addr_of(&s.url(""));
    create(&a, "b", json!({}));
    let mut t = stalled_upload(&a, "/api/v1/b/b/e?ts=1", 1 << 20, 10);
    let started = Instant::now();
    let mut cut = false;
    while started.elapsed() < Duration::from_secs(10) {
        if t.write_all(b"x").is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        t.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        let mut buf = [0u8; 1024];
        if let Ok(n) = t.read(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
            cut = true;
            break;
        }
    }
    assert!(cut, "a 5 B/s body was never cut");
    assert!(started.elapsed() < Duration::from_secs(6));
    assert_eq!(status_of(&a, "GET", "/api/v1/b/b/e?ts=1"), 404);
}

/// Bug "the next call fails after a stall" (ReductStore parity probe of 2026-11-29): a body
/// that stalled was answered 408 on a kept-alive connection, which stayed open; the
/// client's next, unrelated request was then read as the rest of the body and answered
/// 400 `malformed_head`. The 408 now says `connection: close` and the connection ends.
#[test]
fn a_stalled_body_closes_its_connection_so_the_next_request_is_not_read_as_its_body() {
    let s = Server::start(&["--idle-timeout", "1s"]);
    let a = addr_of(&s.url(""));
    create(&a, "b", json!({}));
    let mut t = TcpStream::connect(&a).unwrap();
    t.write_all(
        b"POST /api/v1/b/b/e?ts=1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\nabc",
    )
    .unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = t.read(&mut buf).unwrap();
    let first = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(first.starts_with("http/1.1 408"), "{first}");
    assert!(first.contains("connection: close"), "{first}");
    // The next request on the same connection: never answered as a broken head.
    let _ = t.write_all(b"GET /api/v1/info HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let (_, rest) = read_answer(&mut t, Duration::from_secs(5));
    assert!(
        !rest.contains("HTTP/1.1"),
        "the connection carried another request: {rest}"
    );
    assert_eq!(status_of(&a, "GET", "/api/v1/b/b/e?ts=1"), 404);
}

/// Bug "label bounds", single writes: labels over the engine's `MAX_LABELS_BYTES` are
/// refused from the headers, before the (large) body is uploaded, and nothing is stored.
#[test]
fn a_write_with_too_many_label_bytes_is_refused_before_its_body() {
    let s = Server::start(&[]);
    let a = addr_of(&s.url(""));
    create(&a, "b", json!({}));
    let value = "v".repeat(4000);
    let mut head = String::from("POST /api/v1/b/b/e?ts=1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 1073741824\r\n");
    for j in 0..=(tsblob_storage::MAX_LABELS_BYTES / 4000) {
        head.push_str(&format!("x-tsblob-label-k{j}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut t = TcpStream::connect(&a).unwrap();
    t.write_all(head.as_bytes()).unwrap();
    // Not a byte of the promised GiB is sent: the answer comes from the headers alone.
    let (status, answer) = read_answer(&mut t, PROMPT);
    assert_eq!(status, 422, "{answer:.300}");
    assert!(answer.contains("invalid_label"), "{answer:.300}");
    assert_eq!(info(&a, "b")["record_count"], 0);
}
