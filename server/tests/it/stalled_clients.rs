//! Clients that stall, tried the way a hostile one would (findings s12): uploads that
//! announce large bodies and stop sending. Each test names the bug it guards against and
//! runs a real server over real sockets.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{metric, Server};

/// A server with a 16 MiB memory budget (four 4 MiB bodies fill it) and a short wait for
/// room, with the bucket `b` and one record in `b/e`.
async fn small_budget(c: &reqwest::Client) -> Server {
    let s = Server::start(&["--memory-budget", "16MiB", "--memory-wait", "1s"]);
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

/// Another client's query and batch are answered 200 at once: neither waits for room in
/// the memory budget (`--memory-wait` is 1 s) nor gets 503 `busy`.
async fn others_are_served(c: &reqwest::Client, s: &Server) {
    let started = Instant::now();
    let r = c.get(s.url("/api/v1/b/b/e/query")).send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "a query of another client: {text}");
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
        took < Duration::from_millis(800),
        "another client's query and batch took {took:?}: they waited for room"
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
    // Until the server has received what was sent (the metric stops growing).
    let mut used = 0;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = metric(&c, &s, "tsblob_memory_budget_used_bytes").await;
        if now == used && now > 0 {
            break;
        }
        used = now;
    }
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
