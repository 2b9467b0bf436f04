//! Live tails tried the way a hostile (or just careless) client would (issue 27): many idle
//! tails against a bystander's writes, tails past their caps, tails whose token is
//! revoked, and tails exactly as `docs/api.md` documents them (settle time, multi-entry
//! resume, `max_age`).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{bearer, token_value, Server};
use futures_util::StreamExt;

async fn write(c: &reqwest::Client, s: &Server, bucket: &str, entry: &str, ts: u64) {
    let r = c
        .post(s.url(&format!("/api/v1/b/{bucket}/{entry}?ts={ts}")))
        .body(format!("p{ts}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
}

/// CPU time (user + system, seconds) the process has used, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next().unwrap().parse().unwrap();
    let stime: u64 = fields.next().unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (utime + stime) as f64 / tick as f64
}

/// `n` writes to `bucket/entry` one after the other: (p50, p99) latency and server CPU
/// seconds per write.
async fn bystander_writes(
    c: &reqwest::Client,
    s: &Server,
    bucket: &str,
    first_ts: u64,
    n: u64,
) -> (Duration, Duration, f64) {
    let cpu = cpu_seconds(s.pid());
    let mut lat = Vec::new();
    for ts in first_ts..first_ts + n {
        let t = Instant::now();
        write(c, s, bucket, "e", ts).await;
        lat.push(t.elapsed());
    }
    let cpu = (cpu_seconds(s.pid()) - cpu) / n as f64;
    lat.sort();
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
    (pct(0.5), pct(0.99), cpu)
}

/// Defect 4 of issue 27: 400 idle `follow=true` tails of a read-only token on bucket `pub`
/// (200 entries) took writes to another bucket from p50 0.2 ms to 39 ms and 300 writes cost
/// 19 s of server CPU: every commit woke every tail, and each walked all its entries. A
/// commit now wakes only the tails of the entries it wrote to; a bystander's write to
/// another bucket costs what it cost without tails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tails_on_one_bucket_slowed_every_write_to_another() {
    const TAILS: usize = 200;
    const ENTRIES: u64 = 100;
    // Enough writes for steady figures (the CPU clock ticks every 10 ms).
    const WRITES: u64 = 200;
    // 200 tails from one token: over the default --max-streams-per-token and
    // --max-tails-per-token (64 each; a tail counts in both), and from one address (over
    // the default --max-connections-per-ip, 128).
    let s = Server::start(&[
        "--token",
        "root",
        "--max-streams-per-token",
        "1000",
        "--max-streams",
        "1000",
        "--max-tails-per-token",
        "1000",
        "--max-connections",
        "1000",
        "--max-connections-per-ip",
        "1000",
    ]);
    let admin = bearer("root");
    for b in ["pub", "other"] {
        let r = admin.post(s.url(&format!("/api/v1/b/{b}"))).send().await;
        assert_eq!(r.unwrap().status(), 201);
    }
    for e in 0..ENTRIES {
        write(&admin, &s, "pub", &format!("e{e}"), 1).await;
    }
    let reader = bearer(&token_value(&admin, &s, "reader", r#"{"read": ["pub"]}"#).await);
    // Warm-up, then the bystander's figures without tails.
    bystander_writes(&admin, &s, "other", 1, 10).await;
    let (base50, base99, base_cpu) = bystander_writes(&admin, &s, "other", 100, WRITES).await;
    // Idle tails of every entry of `pub` (a glob over 100 entries each).
    let mut tails = Vec::new();
    for _ in 0..TAILS {
        let r = reader
            .get(s.url("/api/v1/b/pub/query?entries=**&follow=true&meta=true&heartbeat=3600"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        tails.push(r.bytes_stream());
    }
    assert_eq!(
        common::metric(&admin, &s, "tsblob_query_follows").await,
        TAILS as i64
    );
    // Before the fix (debug build): every write woke 200 tails that walked 100 entries
    // each, 20,000 index walks per write: every round as slow. A burst of load on a shared
    // machine slows one round, so the figures are the first of at most three rounds within
    // the bounds below (or the third).
    let within = |p50: Duration, cpu: f64| {
        p50 < base50 * 4 + Duration::from_millis(10) && cpu < base_cpu * 4.0 + 0.005
    };
    let mut round = 0;
    let (p50, p99, cpu) = loop {
        let first_ts = 1000 + round * 1000;
        let (p50, p99, cpu) = bystander_writes(&admin, &s, "other", first_ts, WRITES).await;
        round += 1;
        if within(p50, cpu) || round == 3 {
            break (p50, p99, cpu);
        }
    };
    eprintln!(
        "bystander writes, {WRITES} in a row: without tails p50 {base50:?} p99 {base99:?} cpu {:.2} ms/write; with {TAILS} idle tails of {ENTRIES} entries (round {round}) p50 {p50:?} p99 {p99:?} cpu {:.2} ms/write",
        base_cpu * 1e3,
        cpu * 1e3
    );
    assert!(
        p50 < base50 * 4 + Duration::from_millis(10),
        "p50 {p50:?} against {base50:?} without tails"
    );
    assert!(
        cpu < base_cpu * 4.0 + 0.005,
        "{:.2} ms of server CPU per write against {:.2} without tails",
        cpu * 1e3,
        base_cpu * 1e3
    );
    // The tails still work: a write to `pub` reaches each of them.
    write(&admin, &s, "pub", "e7", 2).await;
    for t in tails.iter_mut() {
        let mut text = String::new();
        while !text.contains("\"ts\":2") {
            let chunk = tokio::time::timeout(Duration::from_secs(20), t.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

/// Tails are capped per token (`--max-tails-per-token`) and per server (`--max-tails`):
/// past either, a new one is answered 429 `too_many_tails` saying which limit and how to
/// go on, and `tsblob_tails_refused_total{limit}` counts it.
#[tokio::test]
async fn tails_past_their_caps_are_refused_with_429() {
    let s = Server::start(&[
        "--token",
        "root",
        "--max-tails",
        "3",
        "--max-tails-per-token",
        "2",
    ]);
    let admin = bearer("root");
    admin.post(s.url("/api/v1/b/b")).send().await.unwrap();
    write(&admin, &s, "b", "cam", 1).await;
    let reader = bearer(&token_value(&admin, &s, "reader", r#"{"read": ["b"]}"#).await);
    let tail = |c: &reqwest::Client| {
        let (c, url) = (
            c.clone(),
            s.url("/api/v1/b/b/cam/query?follow=true&heartbeat=1"),
        );
        async move { c.get(url).send().await.unwrap() }
    };
    let (r1, r2) = (tail(&reader).await, tail(&reader).await);
    assert_eq!((r1.status().as_u16(), r2.status().as_u16()), (200, 200));
    let refused = tail(&reader).await;
    assert_eq!(refused.status(), 429);
    let v: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(v["error"]["code"], "too_many_tails");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-tails-per-token 2"));
    // another token has room, until the server's limit
    let a1 = tail(&admin).await;
    assert_eq!(a1.status(), 200);
    let refused = tail(&admin).await;
    assert_eq!(refused.status(), 429);
    let v: serde_json::Value = refused.json().await.unwrap();
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-tails 3"));
    // a plain query is not a tail: not capped
    let r = admin
        .get(s.url("/api/v1/b/b/cam/query"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = admin
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("tsblob_tails_refused_total{limit=\"token\"} 1"));
    assert!(text.contains("tsblob_tails_refused_total{limit=\"server\"} 1"));
    assert!(text.contains("tsblob_query_follows 3"));
    // a tail that ends gives its place back
    drop(r1);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = tail(&reader).await;
        if r.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the closed tail kept its place");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop((r2, a1));
}

/// What a stream delivered: records (entry, ts), and how it ended.
#[derive(Debug, Default)]
struct Delivered {
    records: Vec<(Option<String>, u64)>,
    end: Option<u64>,
    error: Option<serde_json::Value>,
    /// The body ended (cleanly or cut).
    closed: bool,
    /// The decoder and its unread bytes, kept from one read to the next.
    dec: tsblob_proto::framing::Decoder,
    buf: bytes::BytesMut,
}

/// Reads a record stream until `until` says so, the body ends, or `wait` passes without a
/// byte.
async fn read_stream(
    body: &mut (impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    got: &mut Delivered,
    wait: Duration,
    until: impl Fn(&Delivered) -> bool,
) {
    use tsblob_proto::framing::Event;
    while !until(got) {
        match tokio::time::timeout(wait, body.next()).await {
            Err(_) => return,
            Ok(None) | Ok(Some(Err(_))) => {
                got.closed = true;
                return;
            }
            Ok(Some(Ok(chunk))) => got.buf.extend_from_slice(&chunk),
        }
        while let Some(ev) = got.dec.next(&mut got.buf).unwrap() {
            match ev {
                Event::Record(h) => got.records.push((h.entry, h.ts)),
                Event::End(n) => got.end = Some(n),
                Event::Error(j) => got.error = Some(serde_json::from_slice(&j).unwrap()),
                _ => {}
            }
        }
    }
}

/// A live tail of `c` at `path` (200 asserted), read until its first record arrived.
async fn tail_past_its_first_record(
    c: &reqwest::Client,
    s: &Server,
    path: &str,
) -> (
    impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
    Delivered,
) {
    let r = c.get(s.url(path)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut tail = r.bytes_stream();
    let mut got = Delivered::default();
    read_stream(&mut tail, &mut got, Duration::from_secs(20), |g| {
        !g.records.is_empty()
    })
    .await;
    (tail, got)
}

/// Defect 5 of issue 27: a tail opened with a token kept streaming new records after the
/// token was deleted (new requests got 401). A long-lived stream now checks its token
/// again whenever the tokens change, and ends with an error frame (401 `token_revoked`)
/// once its token is gone, an idle tail at once, a long query between two steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_kept_streaming_after_its_token_was_deleted() {
    let s = Server::start(&["--token", "root"]);
    let admin = bearer("root");
    admin.post(s.url("/api/v1/b/b")).send().await.unwrap();
    write(&admin, &s, "b", "cam", 1).await;
    let reader = bearer(&token_value(&admin, &s, "reader", r#"{"read": ["b"]}"#).await);
    let other = bearer(&token_value(&admin, &s, "other", r#"{"read": ["b"]}"#).await);
    let r = reader
        .get(s.url("/api/v1/b/b/cam/query?follow=true&heartbeat=3600"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut tail = r.bytes_stream();
    // a tail of another token, which must go on
    let r = other
        .get(s.url("/api/v1/b/b/cam/query?follow=true&heartbeat=3600"))
        .send()
        .await
        .unwrap();
    let mut bystander = r.bytes_stream();
    let mut got = Delivered::default();
    read_stream(&mut tail, &mut got, Duration::from_secs(20), |g| {
        !g.records.is_empty()
    })
    .await;
    assert_eq!(got.records, [(None, 1)]);
    // A long query of the same token, read slowly: far more than the buffers hold.
    let batch: Vec<u8> = {
        let mut b = bytes::BytesMut::new();
        for ts in 0..600u64 {
            tsblob_proto::framing::put_record(
                &mut b,
                1000 + ts,
                "",
                &tsblob_proto::Labels::new(),
                &[7u8; 64 << 10],
            );
        }
        tsblob_proto::framing::put_end(&mut b, 600);
        b.to_vec()
    };
    let r = admin
        .post(s.url("/api/v1/b/b/big/batch"))
        .header("content-type", tsblob_proto::framing::MEDIA_TYPE)
        .body(batch)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = reader
        .get(s.url("/api/v1/b/b/big/query"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut long = r.bytes_stream();
    let mut long_got = Delivered::default();
    read_stream(&mut long, &mut long_got, Duration::from_secs(20), |g| {
        g.records.len() >= 10
    })
    .await;
    // The token goes: new requests are refused...
    let r = admin
        .delete(s.url("/api/v1/tokens/reader"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = reader.get(s.url("/api/v1/b/b")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    // ...the idle tail ends at once with an error frame, without a write to wake it...
    read_stream(&mut tail, &mut got, Duration::from_secs(10), |g| {
        g.error.is_some()
    })
    .await;
    let e = got
        .error
        .as_ref()
        .expect("the tail went on after its token was deleted");
    assert_eq!(e["error"]["code"], "token_revoked", "{e}");
    read_stream(&mut tail, &mut got, Duration::from_secs(10), |_| false).await;
    assert!(got.closed, "the tail's body did not end");
    // ...a record written now reaches the other token's tail only...
    write(&admin, &s, "b", "cam", 2).await;
    assert_eq!(got.records, [(None, 1)]);
    let mut by = Delivered::default();
    read_stream(&mut bystander, &mut by, Duration::from_secs(20), |g| {
        g.records.len() == 2
    })
    .await;
    assert_eq!(by.records, [(None, 1), (None, 2)]);
    assert!(by.error.is_none());
    // ...and the long query ends with the error frame before its last record.
    read_stream(&mut long, &mut long_got, Duration::from_secs(20), |_| false).await;
    assert!(long_got.closed);
    assert!(
        long_got.records.len() < 600,
        "the long query streamed all {} records after its token was deleted",
        long_got.records.len()
    );
    assert_eq!(long_got.end, None);
    assert_eq!(
        long_got.error.as_ref().map(|e| e["error"]["code"].clone()),
        Some("token_revoked".into())
    );
}

/// Issue 28: a stream outlived its token's expiry and rotation (checked on every request,
/// but a tail is one request). A tail of a token that expires (`expires_at`, or `ttl` of
/// inactivity) ends within a bounded time with an error frame `token_expired`, an idle
/// tail without a write to wake it; a tail of a rotated token ends with `token_revoked`
/// saying so; another token's tail goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_kept_streaming_after_its_token_expired_or_was_rotated() {
    let s = Server::start(&["--token", "root"]);
    let admin = bearer("root");
    admin.post(s.url("/api/v1/b/b")).send().await.unwrap();
    write(&admin, &s, "b", "cam", 1).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let expires_at = now + 6_000_000;
    let timed = token_value(
        &admin,
        &s,
        "timed",
        &format!(r#"{{"read": ["b"], "expires_at": {expires_at}}}"#),
    )
    .await;
    let idle = token_value(&admin, &s, "idle", r#"{"read": ["b"], "ttl": 4}"#).await;
    let rotated = token_value(&admin, &s, "rotated", r#"{"read": ["b"]}"#).await;
    let other = token_value(&admin, &s, "other", r#"{"read": ["b"]}"#).await;
    let mut tails = Vec::new();
    for value in [&timed, &idle, &rotated, &other] {
        let r = bearer(value)
            .get(s.url("/api/v1/b/b/cam/query?follow=true&heartbeat=3600"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut body = r.bytes_stream();
        let mut got = Delivered::default();
        read_stream(&mut body, &mut got, Duration::from_secs(20), |g| {
            !g.records.is_empty()
        })
        .await;
        assert_eq!(got.records, [(None, 1)]);
        tails.push((body, got));
    }
    // Rotation: the old value's tail ends at once, saying why.
    let r = admin
        .post(s.url("/api/v1/tokens/rotated/rotate"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (body, got) = &mut tails[2];
    read_stream(body, got, Duration::from_secs(10), |g| g.error.is_some()).await;
    let e = got
        .error
        .clone()
        .expect("the tail went on after its token was rotated");
    assert_eq!(e["error"]["code"], "token_revoked", "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("rotated"),
        "{e}"
    );
    // Expiry: both idle tails end by themselves, within a second or so of their token's end.
    for i in [0, 1] {
        let (body, got) = &mut tails[i];
        read_stream(body, got, Duration::from_secs(15), |g| g.error.is_some()).await;
        let e = got
            .error
            .clone()
            .unwrap_or_else(|| panic!("tail {i} went on after its token expired"));
        assert_eq!(e["error"]["code"], "token_expired", "{e}");
        read_stream(body, got, Duration::from_secs(10), |_| false).await;
        assert!(got.closed, "tail {i}'s body did not end");
    }
    let ended = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    assert!(ended >= expires_at, "a tail ended before its token expired");
    assert!(
        ended < expires_at + 5_000_000,
        "the tails ended {} ms after the token expired",
        (ended - expires_at) / 1000
    );
    // A record written now reaches the other token's tail only.
    write(&admin, &s, "b", "cam", 2).await;
    let (body, got) = &mut tails[3];
    read_stream(body, got, Duration::from_secs(20), |g| g.records.len() == 2).await;
    assert_eq!(got.records, [(None, 1), (None, 2)]);
    assert!(got.error.is_none());
    for (_, got) in &tails[..3] {
        assert_eq!(got.records, [(None, 1)]);
    }
}

/// Defect 5's permission variant: a tail opened while the server needed no token (the
/// default) kept streaming after the first token was created and authentication came on,
/// although its caller may no longer read anything. It now ends like a revoked token's.
#[tokio::test]
async fn tail_kept_streaming_after_its_permission_was_withdrawn() {
    let s = Server::start(&[]);
    let open = reqwest::Client::new();
    open.post(s.url("/api/v1/b/b")).send().await.unwrap();
    write(&open, &s, "b", "cam", 1).await;
    let (mut tail, mut got) = tail_past_its_first_record(
        &open,
        &s,
        "/api/v1/b/b/query?entries=cam&follow=true&heartbeat=3600",
    )
    .await;
    let value = token_value(&open, &s, "first", r#"{"full_access": true}"#).await;
    read_stream(&mut tail, &mut got, Duration::from_secs(10), |g| g.closed).await;
    let e = got
        .error
        .as_ref()
        .expect("the tail went on without a token");
    assert_eq!(e["error"]["code"], "token_revoked", "{e}");
    write(&bearer(&value), &s, "b", "cam", 2).await;
    assert_eq!(got.records, [(Some("cam".into()), 1)]);
}

/// Reads probe of 2026-11-28: a live tail of an entry that was then removed went on
/// sending heartbeats for ever (64 of them held their tail and stream slots), and did not
/// see the entry made again under its name (a new entry, which its walk never reads). It
/// now ends at its next heartbeat with 404 `entry_not_found`, saying to follow again.
#[tokio::test]
async fn a_tail_of_a_removed_entry_sent_heartbeats_for_ever() {
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    c.post(s.url("/api/v1/b/b")).send().await.unwrap();
    write(&c, &s, "b", "cam", 1).await;
    let (mut tail, mut got) = tail_past_its_first_record(
        &c,
        &s,
        "/api/v1/b/b/query?entries=cam&follow=true&heartbeat=1",
    )
    .await;
    let gone = c.delete(s.url("/api/v1/b/b/cam")).send().await.unwrap();
    assert_eq!(gone.status(), 200);
    // The entry made again. (Heartbeats arrive each second: the whole wait is bounded,
    // not each read's.)
    write(&c, &s, "b", "cam", 2).await;
    let ended = tokio::time::timeout(
        Duration::from_secs(10),
        read_stream(&mut tail, &mut got, Duration::from_secs(10), |g| g.closed),
    )
    .await;
    assert!(
        ended.is_ok() && got.closed,
        "the tail of a removed entry went on"
    );
    let e = got.error.as_ref().expect("no error frame");
    assert_eq!(e["error"]["code"], "entry_not_found", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("follow again"),
        "{e}"
    );
    assert_eq!(got.records, [(Some("cam".into()), 1)]);
}

/// Item 6 of issue 27: a `settle_ms` tail never delivered a record stamped ahead of the
/// clock until some unrelated write arrived (its settle timer ran once, then was not set
/// again). The walk now notes the first record it left past its horizon and the tail's
/// timer is set from it.
#[tokio::test]
async fn a_settle_tail_never_delivered_a_record_ahead_of_the_clock_without_another_write() {
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    c.post(s.url("/api/v1/b/b")).send().await.unwrap();
    // Taken with the clock the record is stamped from: however long the write and the
    // tail's opening take, the record may come only 2 s (plus the settle time) after it.
    let started = Instant::now();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let ahead = now + 2_000_000;
    write(&c, &s, "b", "cam", ahead).await;
    let r = c
        .get(s.url("/api/v1/b/b/query?entries=cam&follow=true&settle_ms=300&heartbeat=3600"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut body = r.bytes_stream();
    let mut got = Delivered::default();
    read_stream(&mut body, &mut got, Duration::from_secs(10), |g| {
        !g.records.is_empty()
    })
    .await;
    assert_eq!(
        got.records,
        [(Some("cam".into()), ahead)],
        "the record stamped 2 s ahead never came"
    );
    // not before the clock passed its timestamp (plus the settle time, 2.3 s in all)
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "delivered {:?} after it was stamped 2 s ahead",
        started.elapsed()
    );
}

/// Item 6 of issue 27: writes stamped older than a bucket's `max_age` were answered 201 and
/// deleted a second later by retention. They are now refused with 422 `too_old`: a single
/// write (the writer thread's path and the compared one), and each such record of a batch.
#[tokio::test]
async fn writes_older_than_max_age_were_acknowledged_then_deleted() {
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    let r = c
        .post(s.url("/api/v1/b/m"))
        .body(r#"{"max_age": "1h"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let old = now - 2 * 3_600_000_000;
    for q in ["", "&if_exists=compare"] {
        let r = c
            .post(s.url(&format!("/api/v1/b/m/e?ts={old}{q}")))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{q}");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "too_old");
        assert!(v["error"]["message"].as_str().unwrap().contains("max_age"));
    }
    // a batch: the old record refused, the recent one kept
    let mut b = bytes::BytesMut::new();
    let none = tsblob_proto::Labels::new();
    tsblob_proto::framing::put_record(&mut b, old, "", &none, b"old");
    tsblob_proto::framing::put_record(&mut b, now, "", &none, b"new");
    tsblob_proto::framing::put_end(&mut b, 2);
    let r = c
        .post(s.url("/api/v1/b/m/e/batch"))
        .header("content-type", tsblob_proto::framing::MEDIA_TYPE)
        .body(b.to_vec())
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["results"][0]["status"], 422, "{v}");
    assert_eq!(v["results"][0]["error"]["code"], "too_old", "{v}");
    assert_eq!(v["results"][1]["status"], 201, "{v}");
    // nothing old was stored
    let r = c
        .get(s.url(&format!("/api/v1/b/m/e?ts={old}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // a bucket without max_age takes any timestamp
    c.post(s.url("/api/v1/b/keep")).send().await.unwrap();
    write(&c, &s, "keep", "e", 1).await;
}

/// Races probe of 2026-11-29: a live tail of an entry (or of a bucket) that was renamed
/// kept streaming the records written under the new name, labelled with the old one, for
/// as long as records kept coming (it looked for the rename at heartbeats only), past a
/// token that may read only the old bucket. It now ends before its next walk with 404
/// `entry_not_found`, and delivers nothing written under the new name.
#[tokio::test]
async fn a_tail_streamed_a_renamed_entry_or_bucket_under_its_old_name() {
    let s = Server::start(&["--token", "root"]);
    let admin = bearer("root");
    for (rename, path, moved_to) in [
        (
            "/api/v1/b/a1/cam/rename",
            "/api/v1/b/a1/query?entries=cam&follow=true&heartbeat=3600",
            ("a1", "cam2"),
        ),
        (
            "/api/v1/b/a2/rename",
            "/api/v1/b/a2/query?entries=cam&follow=true&heartbeat=3600",
            ("z2", "cam"),
        ),
    ] {
        let bucket = path.split('/').nth(4).unwrap();
        admin
            .post(s.url(&format!("/api/v1/b/{bucket}")))
            .send()
            .await
            .unwrap();
        write(&admin, &s, bucket, "cam", 1).await;
        let reader = bearer(
            &token_value(
                &admin,
                &s,
                &format!("r-{bucket}"),
                &format!(r#"{{"read": ["{bucket}"]}}"#),
            )
            .await,
        );
        let (mut tail, mut got) = tail_past_its_first_record(&reader, &s, path).await;
        let body = if rename.ends_with("cam/rename") {
            r#"{"new_name": "cam2"}"#
        } else {
            r#"{"new_name": "z2"}"#
        };
        let r = admin
            .put(s.url(rename))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        // Records keep coming under the new name: the tail never idles into a heartbeat.
        for ts in 2..30u64 {
            write(&admin, &s, moved_to.0, moved_to.1, ts).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let ended = tokio::time::timeout(
            Duration::from_secs(10),
            read_stream(&mut tail, &mut got, Duration::from_secs(10), |g| g.closed),
        )
        .await;
        assert!(ended.is_ok() && got.closed, "{rename}: the tail went on");
        let e = got.error.as_ref().expect("no error frame");
        assert_eq!(e["error"]["code"], "entry_not_found", "{rename}: {e}");
        assert_eq!(got.records, [(Some("cam".into()), 1)], "{rename}");
    }
}

/// Races probe of 2026-11-29: a tail opened while its token was being removed was never
/// cut off (23 of ~366 in the probe): the stream's grant, made after the first step, took
/// a removal between the request's admission and the grant as already seen. The grant now
/// checks the token at its first step.
#[tokio::test]
async fn a_tail_opened_while_its_token_was_removed_was_never_cut_off() {
    let s = Server::start(&["--token", "root"]);
    let admin = bearer("root");
    admin.post(s.url("/api/v1/b/b")).send().await.unwrap();
    let mut survivors = Vec::new();
    for round in 0..20 {
        let (name, entry) = (format!("t{round}"), format!("cam{round}"));
        write(&admin, &s, "b", &entry, 1).await;
        let reader = bearer(&token_value(&admin, &s, &name, r#"{"read": ["b"]}"#).await);
        let url = s.url(&format!(
            "/api/v1/b/b/{entry}/query?follow=true&heartbeat=3600"
        ));
        let open = tokio::spawn(async move { reader.get(url).send().await });
        let removed = admin
            .delete(s.url(&format!("/api/v1/tokens/{name}")))
            .send()
            .await
            .unwrap();
        assert_eq!(removed.status(), 200);
        let Ok(r) = open.await.unwrap() else { continue };
        if r.status() != 200 {
            continue; // refused at admission: the removal came first
        }
        // Opened: a record written after the removal must end it, not reach it.
        write(&admin, &s, "b", &entry, 2).await;
        let mut tail = r.bytes_stream();
        let mut got = Delivered::default();
        read_stream(&mut tail, &mut got, Duration::from_secs(5), |g| g.closed).await;
        if !got.closed || got.records.iter().any(|(_, ts)| *ts == 2) {
            survivors.push((round, got.records, got.error));
        }
    }
    assert!(
        survivors.is_empty(),
        "tails outlived their removed token: {survivors:?}"
    );
}
