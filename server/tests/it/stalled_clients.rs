//! Clients that stall, tried the way a hostile one would (findings s12): uploads that
//! announce large bodies and stop sending, and readers that stop reading their answers.
//! Each test names the bug it guards against and runs a real server over real sockets.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{metric, Server};

/// A server with a 16 MiB memory budget (four 4 MiB bodies fill it) and a 10 s wait for
/// room (far longer than an answer given at once takes, even on a loaded machine), with
/// the bucket `b` and one record in `b/e`.
async fn small_budget(c: &reqwest::Client) -> Server {
    let s = Server::start(&["--memory-budget", "16MiB", "--memory-wait", "10s"]);
    let r = c.post(s.url("/api/v1/b/b")).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let r = c
        .post(s.url("/api/v1/b/b/e?ts=1"))
        .body("one")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    s
}

/// Opens a single write to `b/stall` at `ts` announcing `announced` bytes, sends `sent` of
/// them and stops: the connection is returned, kept open (the upload stalls).
fn stalled_upload(s: &Server, ts: u64, announced: u64, sent: usize) -> TcpStream {
    let addr = s.url("").trim_start_matches("http://").to_string();
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!(
        "POST /api/v1/b/b/stall?ts={ts} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {announced}\r\n\r\n"
    )
    .into_bytes();
    request.extend(std::iter::repeat_n(7u8, sent));
    tcp.write_all(&request).unwrap();
    tcp
}

/// The memory budget's use once the server has received what stalled clients sent (the
/// metric stops growing).
async fn settled_budget(c: &reqwest::Client, s: &Server) -> i64 {
    let mut used = 0;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = metric(c, s, "tsblob_memory_budget_used_bytes").await;
        if now == used && now > 0 {
            break;
        }
        used = now;
    }
    used
}

/// Another client's query is answered 200 at once: it neither waits for room in the memory
/// budget (`--memory-wait` is 10 s; at once is under 5 s) nor gets 503 `busy`.
async fn query_at_once(c: &reqwest::Client, s: &Server) {
    let started = Instant::now();
    let r = c.get(s.url("/api/v1/b/b/e/query")).send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "a query of another client: {text}");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "another client's query took {took:?}: it waited for room"
    );
}

/// Another client's query and batch are answered 200 at once: neither waits for room in
/// the memory budget (`--memory-wait` is 10 s; at once is under 5 s) nor gets 503 `busy`.
async fn others_are_served(c: &reqwest::Client, s: &Server) {
    query_at_once(c, s).await;
    let started = Instant::now();
    let mut batch = bytes::BytesMut::new();
    tsblob_proto::framing::put_record(&mut batch, 2, "", &tsblob_storage::Labels::new(), b"two");
    tsblob_proto::framing::put_end(&mut batch, 1);
    let r = c
        .post(s.url("/api/v1/b/b/e/batch"))
        .header("content-type", "application/x-tsblob-records")
        .body(batch.freeze())
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "a batch of another client: {text}");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "another client's batch took {took:?}: it waited for room"
    );
}

/// Bug "announced bodies spent the budget" (findings s12, F1): a single write reserved its
/// whole `Content-Length` in `--memory-budget` before any byte arrived, so 32 connections
/// announcing 4 MiB, sending 1 byte and stalling held the whole default budget for as long
/// as they stayed (up to the body deadline), and every query and batch of other clients
/// waited `--memory-wait`, then got 503 `busy`. Now a body holds room only for the bytes
/// that arrived.
#[tokio::test]
async fn stalled_uploads_announcing_large_bodies_do_not_starve_other_requests() {
    let c = reqwest::Client::new();
    let s = small_budget(&c).await;
    // Twice what it takes to spend the budget on announced bytes.
    let stalled: Vec<TcpStream> = (0..8)
        .map(|i| stalled_upload(&s, 100 + i, 4 << 20, 1))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    others_are_served(&c, &s).await;
    let used = metric(&c, &s, "tsblob_memory_budget_used_bytes").await;
    assert!(
        used < 1 << 20,
        "{used} bytes of the budget held by 8 uploads that sent 1 byte each"
    );
    drop(stalled);
}

/// The same bug with the bytes sent: uploads that send all but the last byte of 4 MiB and
/// stall hold real memory, but single bodies hold at most half the budget together (past
/// it they spool), so other clients' queries and batches still find room, and another
/// client's write of 3 MiB still succeeds.
#[tokio::test]
async fn stalled_uploads_that_sent_their_bytes_hold_at_most_half_the_budget() {
    let c = reqwest::Client::new();
    let s = small_budget(&c).await;
    let stalled: Vec<TcpStream> = (0..8)
        .map(|i| stalled_upload(&s, 100 + i, 4 << 20, (4 << 20) - 1))
        .collect();
    let used = settled_budget(&c, &s).await;
    others_are_served(&c, &s).await;
    assert!(
        used <= 8 << 20,
        "{used} bytes of a 16 MiB budget held by stalled single uploads"
    );
    let payload = vec![9u8; 3 << 20];
    let r = c
        .post(s.url("/api/v1/b/b/e?ts=3"))
        .body(payload.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let got = c.get(s.url("/api/v1/b/b/e?ts=3")).send().await.unwrap();
    assert_eq!(got.bytes().await.unwrap().as_ref(), &payload[..]);
    drop(stalled);
    // Nothing is held once the uploads are gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&c, &s, "tsblob_memory_budget_used_bytes").await != 0 {
        assert!(Instant::now() < deadline, "budget still in use");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Bugs "announced ReductStore batches spent the budget" and "stalled batches starve the
/// readers" (hostile round of 2026-11-27): a ReductStore batch reserved the total its
/// `x-reduct-time-*` headers announce before any byte arrived, and batches had no share
/// of the budget of their own, so connections announcing 4 MiB batches and stalling held
/// the whole `--memory-budget`: another client's query waited `--memory-wait` and got
/// 503 `busy` for as long as they stalled. A batch holds room for what arrived now, and
/// uploads hold at most three quarters of the budget: the query is answered at once.
#[tokio::test]
async fn stalled_reductstore_batches_leave_room_for_other_clients_queries() {
    let c = reqwest::Client::new();
    let s = Server::start(&[
        "--memory-budget",
        "16MiB",
        "--memory-wait",
        "10s",
        "--reductstore-prefix",
        "/reduct",
    ]);
    assert_eq!(
        c.post(s.url("/api/v1/b/b")).send().await.unwrap().status(),
        201
    );
    let r = c.post(s.url("/api/v1/b/b/e?ts=1")).body("one").send().await;
    assert_eq!(r.unwrap().status(), 201);
    let addr = s.url("").trim_start_matches("http://").to_string();
    let stall = |ts: u64, sent: usize| {
        let mut tcp = TcpStream::connect(&addr).unwrap();
        tcp.set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let size = 4u64 << 20;
        let head = format!(
            "POST /reduct/api/v1/b/b/stall/batch HTTP/1.1\r\nHost: localhost\r\nx-reduct-time-{ts}: {size},application/octet-stream\r\nContent-Length: {size}\r\n\r\n"
        );
        tcp.write_all(head.as_bytes()).unwrap();
        let _ = tcp.write_all(&vec![7u8; sent]);
        tcp
    };
    // Announced, one byte sent: nothing of the announced bytes is held.
    let announced: Vec<TcpStream> = (0..8).map(|i| stall(100 + i, 1)).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let used = metric(&c, &s, "tsblob_memory_budget_used_bytes").await;
    assert!(
        used < 1 << 20,
        "{used} bytes held by 8 batches that sent 1 byte each"
    );
    query_at_once(&c, &s).await;
    drop(announced);
    // All but the last KiB sent: the batches hold at most three quarters of the budget.
    let sent: Vec<TcpStream> = (0..8).map(|i| stall(200 + i, (4 << 20) - 1024)).collect();
    let used = settled_budget(&c, &s).await;
    assert!(
        used > 8 << 20 && used <= 12 << 20,
        "{used} bytes of a 16 MiB budget held by stalled batches (want over half, at most 3/4)"
    );
    query_at_once(&c, &s).await;
    drop(sent);
}

/// A server whose answers end after `send_timeout` without progress (set through its
/// variable, `TSBLOB_SEND_TIMEOUT`), with `--max-streams-per-token 2`, and an entry `big/e`
/// of 40 records of 1 MiB: an answer far larger than the sockets' buffers.
async fn big_entry(c: &reqwest::Client, send_timeout: &str) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_in_env(
        dir.path(),
        &["--max-streams-per-token", "2"],
        &[("TSBLOB_SEND_TIMEOUT", send_timeout)],
    );
    let r = c.post(s.url("/api/v1/b/big")).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let records: Vec<(u64, usize)> = (1..=40).map(|ts| (ts, 1 << 20)).collect();
    let r = c
        .post(s.url("/api/v1/b/big/e/batch"))
        .header("content-type", "application/x-tsblob-records")
        .body(crate::reliability_util::batch_body(&records))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    (s, dir)
}

/// A query of the whole of `big/e` on a new connection that never reads its answer.
fn unread_query(s: &Server) -> TcpStream {
    let addr = s.url("").trim_start_matches("http://").to_string();
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.write_all(b"GET /api/v1/b/big/e/query HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    tcp
}

/// The status of a one-record query of `big/e` by another client.
async fn other_query(c: &reqwest::Client, s: &Server) -> u16 {
    let r = c
        .get(s.url("/api/v1/b/big/e/query?limit=1"))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let _ = r.bytes().await;
    status
}

/// Bug "stalled readers hold streams forever" (findings s12, F2): a client that stopped
/// reading a query answer kept its stream slot for as long as it stayed connected (no
/// send timeout), so 64 of them made every other tokenless client's query 429
/// `too_many_streams` indefinitely, and each pinned ~18 MB of mapped block pages. Now an
/// answer the client takes no bytes of for `--send-timeout` ends its connection, and its
/// slot is free again.
#[tokio::test]
async fn a_reader_that_stops_reading_loses_its_stream_after_the_send_timeout() {
    let c = reqwest::Client::new();
    let (s, _dir) = big_entry(&c, "2s").await;
    let stalled = [unread_query(&s), unread_query(&s)];
    let opened = Instant::now();
    let deadline = opened + Duration::from_secs(5);
    while metric(&c, &s, "tsblob_query_streams").await < 2 {
        assert!(Instant::now() < deadline, "the two queries never streamed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Both slots of the (shared, tokenless) per-token cap are taken meanwhile.
    assert_eq!(other_query(&c, &s).await, 429, "the cap binds");
    // Once the timeout has passed, the slots are free again.
    let deadline = opened + Duration::from_secs(15);
    loop {
        let status = other_query(&c, &s).await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 429);
        assert!(
            Instant::now() < deadline,
            "still refused {:?} after two readers stopped reading (--send-timeout 2s)",
            opened.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let freed = opened.elapsed();
    assert!(freed >= Duration::from_secs(2), "freed after {freed:?}");
    // One slot free is enough for the query above; the other reader's slot goes at its
    // own timeout: both are gone within 10 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = metric(&c, &s, "tsblob_query_streams").await;
        if n == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{n} streams left {:?} after two readers stopped reading (--send-timeout 2s)",
            opened.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(stalled);
}

/// The send timeout cuts only a client that takes nothing: one reading slowly but steadily
/// (64 KiB every 100 ms, for three timeouts' time) keeps its answer and gets all of it,
/// though the kernel wakes the server's writes only once half a full send buffer is free
/// (which takes it longer than the timeout).
#[tokio::test]
async fn a_slow_reader_that_keeps_reading_is_not_cut_by_the_send_timeout() {
    use futures_util::StreamExt;
    let c = reqwest::Client::new();
    let (s, _dir) = big_entry(&c, "1s").await;
    let r = c.get(s.url("/api/v1/b/big/e/query")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut body = r.bytes_stream();
    let mut got = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        match body.next().await {
            Some(chunk) => got.extend_from_slice(&chunk.unwrap()[..]),
            None => break,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(got.len() < 30 << 20, "read too fast to test: {}", got.len());
    while let Some(chunk) = body.next().await {
        got.extend_from_slice(&chunk.expect("the answer was cut")[..]);
    }
    let records = crate::reliability_util::decode_query(&got).unwrap();
    assert_eq!(records.len(), 40);
    for r in &records {
        assert_eq!(
            crate::reliability_util::payload_problem(r.ts, &r.data),
            None
        );
    }
}
