//! Live tails (`follow=true`) against a real `tsblob serve`: one writer and three tailers
//! (each record seen exactly once, in order), a tailer that drops its connection and
//! resumes from its last timestamp + 1, heartbeats while idle, a condition's state across
//! walks, and no state left behind by tails that went away.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use bytes::BytesMut;
use common::Server;
use futures_util::StreamExt;
use tsblob_proto::framing::{Decoder, Event};

/// What a tail delivered, as it arrives.
#[derive(Debug, PartialEq)]
enum Got {
    Record(u64),
    Heartbeat,
    End(u64),
    Error(String),
}

/// Opens a tail and sends every event into the returned channel; dropping the task (or
/// the receiver) closes the connection.
async fn open_tail(
    s: &Server,
    path_and_query: &str,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<Got>,
    tokio::task::JoinHandle<()>,
) {
    let resp = reqwest::get(s.url(path_and_query)).await.unwrap();
    assert_eq!(resp.status(), 200, "{path_and_query}");
    events_of(resp)
}

/// Sends every event of a query's answer into the returned channel, as in `open_tail`.
fn events_of(
    resp: reqwest::Response,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<Got>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        let (mut dec, mut buf) = (Decoder::new(), BytesMut::new());
        while let Some(Ok(chunk)) = body.next().await {
            buf.extend_from_slice(&chunk);
            while let Some(ev) = dec.next(&mut buf).unwrap() {
                let got = match ev {
                    Event::Record(h) => Got::Record(h.ts),
                    Event::Data(_) | Event::Skipped(_) => continue,
                    Event::Heartbeat(_) => Got::Heartbeat,
                    Event::End(n) => Got::End(n),
                    Event::Error(j) => Got::Error(String::from_utf8_lossy(&j).into_owned()),
                };
                if tx.send(got).is_err() {
                    return;
                }
            }
        }
    });
    (rx, task)
}

/// The next record's timestamp, skipping heartbeats (fails after 20 s of silence).
async fn next_ts(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Got>) -> u64 {
    loop {
        match tokio::time::timeout(Duration::from_secs(20), rx.recv()).await {
            Ok(Some(Got::Record(ts))) => return ts,
            Ok(Some(Got::Heartbeat)) => continue,
            other => panic!("expected a record, got {other:?}"),
        }
    }
}

async fn write(c: &reqwest::Client, s: &Server, entry: &str, ts: u64, labels: &[(&str, &str)]) {
    let mut req = c.post(s.url(&format!("/api/v1/b/b/{entry}?ts={ts}")));
    for (k, v) in labels {
        req = req.header(format!("x-tsblob-label-{k}"), *v);
    }
    let r = req.body(format!("p{ts}")).send().await.unwrap();
    assert_eq!(r.status(), 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_writer_three_tailers_each_see_every_record_once_in_order() {
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    assert_eq!(
        c.post(s.url("/api/v1/b/b")).send().await.unwrap().status(),
        201
    );
    // Records before the tails start: they come first.
    for ts in 1..=5 {
        write(&c, &s, "cam", ts, &[]).await;
    }
    let q = "/api/v1/b/b/cam/query?follow=true&heartbeat=1";
    let mut tails = Vec::new();
    for _ in 0..3 {
        tails.push(open_tail(&s, q).await);
    }
    const N: u64 = 300;
    let writer = {
        let (c, url) = (c.clone(), s.url("/api/v1/b/b/cam"));
        tokio::spawn(async move {
            for ts in 6..=N {
                let r = c
                    .post(format!("{url}?ts={ts}"))
                    .body(format!("p{ts}"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 201);
                if ts % 50 == 0 {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                }
            }
        })
    };
    // Tailer 0 reads everything; tailer 1 drops its connection after 100 records and
    // resumes from its last timestamp + 1; tailer 2 reads everything too.
    let mut seen: Vec<Vec<u64>> = vec![Vec::new(); 3];
    for (i, (rx, task)) in tails.iter_mut().enumerate() {
        let upto = if i == 1 { 100 } else { N };
        while (seen[i].len() as u64) < upto {
            seen[i].push(next_ts(rx).await);
        }
        if i == 1 {
            task.abort();
        }
    }
    let last = *seen[1].last().unwrap();
    let (mut rx, task) = open_tail(&s, &format!("{q}&start={}", last + 1)).await;
    while (seen[1].len() as u64) < N {
        seen[1].push(next_ts(&mut rx).await);
    }
    writer.await.unwrap();
    let want: Vec<u64> = (1..=N).collect();
    for (i, got) in seen.iter().enumerate() {
        assert_eq!(got, &want, "tailer {i}");
    }
    // Nothing more (and nothing twice) arrives: only heartbeats.
    for (rx, _) in tails.iter_mut().step_by(2) {
        let more = tokio::time::timeout(Duration::from_millis(1500), rx.recv()).await;
        assert!(matches!(more, Ok(Some(Got::Heartbeat))), "{more:?}");
    }
    task.abort();
    for (_, t) in tails {
        t.abort();
    }
}

#[tokio::test]
async fn an_idle_tail_sends_heartbeats_and_a_condition_keeps_its_state_across_walks() {
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    c.post(s.url("/api/v1/b/b")).send().await.unwrap();
    write(&c, &s, "cam", 1, &[]).await;
    // Taken before the tail opens: the server's heartbeat clock starts later (when it sends
    // the record), however late the record reaches the test.
    let started = std::time::Instant::now();
    let (mut rx, task) = open_tail(&s, "/api/v1/b/b/cam/query?follow=true&heartbeat=1").await;
    assert_eq!(next_ts(&mut rx).await, 1);
    let beat = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
    assert_eq!(beat.unwrap(), Some(Got::Heartbeat));
    assert!(started.elapsed() >= Duration::from_millis(800));
    task.abort();

    // $each_n and $limit count over the whole stream, walk after walk; the stream ends
    // with an end frame once $limit is reached.
    let when: String =
        form_urlencoded::byte_serialize(br#"{"&k": {"$eq": "x"}, "$each_n": 2, "$limit": 3}"#)
            .collect();
    // (a tail, like any query, is a 404 on an entry that does not exist yet)
    write(&c, &s, "cond", 5, &[("k", "z")]).await;
    let (mut rx, task) = open_tail(
        &s,
        &format!("/api/v1/b/b/cond/query?follow=true&heartbeat=1&start=0&when={when}"),
    )
    .await;
    for ts in 10..30 {
        let k = if ts % 5 == 0 { "y" } else { "x" };
        write(&c, &s, "cond", ts, &[("k", k)]).await;
    }
    // matching: 11 12 13 14 16 17 ...; every second one: 12 14 17; then the limit
    let mut got = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
        {
            Some(Got::Record(ts)) => got.push(ts),
            Some(Got::Heartbeat) => {}
            Some(Got::End(n)) => {
                assert_eq!(n, 3);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, [12, 14, 17]);
    task.abort();

    // meta=true: heartbeats are {"heartbeat": µs} lines
    let resp = reqwest::get(s.url("/api/v1/b/b/cam/query?follow=true&heartbeat=1&meta=true"))
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    while text.lines().count() < 2 {
        let chunk = tokio::time::timeout(Duration::from_secs(5), body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["ts"], 1);
    assert!(lines[1]["heartbeat"].as_u64().unwrap() > 1_600_000_000_000_000);

    // follow refuses desc and stop
    for bad in ["desc=true", "stop=10"] {
        let r = c
            .get(s.url(&format!("/api/v1/b/b/cam/query?follow=true&{bad}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tails_that_went_away_leave_nothing_behind() {
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    c.post(s.url("/api/v1/b/b")).send().await.unwrap();
    write(&c, &s, "cam", 1, &[]).await;
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", s.pid()))
            .unwrap()
            .count()
    };
    let before = fds();
    let mut tails = Vec::new();
    for _ in 0..50 {
        tails.push(open_tail(&s, "/api/v1/b/b/cam/query?follow=true&heartbeat=1").await);
    }
    for (rx, _) in tails.iter_mut() {
        assert_eq!(next_ts(rx).await, 1);
    }
    assert_eq!(common::metric(&c, &s, "tsblob_query_follows").await, 50);
    assert!(fds() >= before + 50);
    for (_, task) in tails {
        task.abort(); // the connection closes
    }
    // A commit wakes every tail; each finds its client gone at its next send (or
    // heartbeat, every second here).
    write(&c, &s, "cam", 2, &[]).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let live = common::metric(&c, &s, "tsblob_query_follows").await;
        if live == 0 && fds() <= before + 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{live} tails and {} fds (from {before}) left after the clients left",
            fds()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        common::metric(&c, &s, "tsblob_http_requests_in_flight").await,
        1
    );
    // still responsive
    let r = c.get(s.url("/api/v1/b/b/cam?ts=2")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "p2");
}

#[tokio::test]
async fn the_cli_tail_prints_one_line_per_record() {
    use std::io::BufRead;
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    c.post(s.url("/api/v1/b/b")).send().await.unwrap();
    write(&c, &s, "cam", 1, &[("k", "v")]).await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .args(["tail", "b", "cam", "--json", "--heartbeat", "1", "--url"])
        .arg(s.url(""))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let line = |rx: &std::sync::mpsc::Receiver<String>| -> serde_json::Value {
        serde_json::from_str(&rx.recv_timeout(Duration::from_secs(20)).unwrap()).unwrap()
    };
    assert_eq!(line(&rx)["ts"], 1);
    write(&c, &s, "cam", 2, &[]).await;
    write(&c, &s, "cam", 3, &[]).await;
    let (a, b) = (line(&rx), line(&rx));
    assert_eq!((a["ts"].as_u64(), b["ts"].as_u64()), (Some(2), Some(3)));
    assert_eq!(a["size"], 2);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// (entry, ts, payload) of a decoded record.
type Rec = (Option<String>, u64, Vec<u8>);

/// Decodes a whole (finished) answer: its records and the end count.
fn decode_all(body: &[u8]) -> (Vec<Rec>, Option<u64>) {
    let (mut dec, mut buf) = (Decoder::new(), BytesMut::from(body));
    let (mut out, mut end) = (Vec::new(), None);
    while let Some(ev) = dec.next(&mut buf).unwrap() {
        match ev {
            Event::Record(h) => out.push((h.entry, h.ts, Vec::new())),
            Event::Data(d) => out.last_mut().unwrap().2.extend_from_slice(&d),
            Event::End(n) => end = Some(n),
            Event::Heartbeat(_) | Event::Skipped(_) => {}
            Event::Error(j) => panic!("{}", String::from_utf8_lossy(&j)),
        }
    }
    (out, end)
}

#[tokio::test]
async fn multi_entry_queries_merge_in_timestamp_order() {
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    c.post(s.url("/api/v1/b/b")).send().await.unwrap();
    // three entries with interleaved timestamps, one tie, and one entry the glob misses
    for ts in 0..30u64 {
        let e = ["cams/front", "cams/rear", "imu"][(ts % 3) as usize];
        let k = if ts % 2 == 0 { "even" } else { "odd" };
        write(&c, &s, e, ts, &[("k", k)]).await;
    }
    write(&c, &s, "imu", 3, &[("k", "odd")]).await; // same ts as cams/front
    write(&c, &s, "cams/front/deep", 4, &[]).await;
    let get = |q: &str| {
        let (c, url) = (c.clone(), s.url(&format!("/api/v1/b/b/query?{q}")));
        async move { c.get(url).send().await.unwrap() }
    };
    let r = get("entries=cams/*,imu").await;
    assert_eq!(r.status(), 200);
    let (recs, end) = decode_all(&r.bytes().await.unwrap());
    assert_eq!(end, Some(31));
    let keys: Vec<(String, u64)> = recs
        .iter()
        .map(|(e, ts, _)| (e.clone().unwrap(), *ts))
        .collect();
    assert_eq!(
        &keys[..5],
        &[
            ("cams/front".to_string(), 0),
            ("cams/rear".to_string(), 1),
            ("imu".to_string(), 2),
            ("cams/front".to_string(), 3),
            ("imu".to_string(), 3),
        ]
    );
    assert!(keys
        .windows(2)
        .all(|w| (w[0].1, &w[0].0) < (w[1].1, &w[1].0)));
    assert_eq!(recs[4].2, b"p3");
    // ** reaches across segments
    let (recs, _) = decode_all(&get("entries=**").await.bytes().await.unwrap());
    assert_eq!(recs.len(), 32);
    // a condition and $limit count per entry (as in ReductStore, issue 28): 4 of each;
    // repeated entries= add up
    let when: String =
        form_urlencoded::byte_serialize(br#"{"&k": {"$eq": "odd"}, "$limit": 4}"#).collect();
    let (recs, _) = decode_all(
        &get(&format!("entries=cams/rear&entries=imu&when={when}"))
            .await
            .bytes()
            .await
            .unwrap(),
    );
    let keys: Vec<(String, u64)> = recs
        .into_iter()
        .map(|(e, ts, _)| (e.unwrap(), ts))
        .collect();
    assert_eq!(
        keys,
        [
            ("cams/rear".to_string(), 1),
            ("imu".to_string(), 3),
            ("imu".to_string(), 5),
            ("cams/rear".to_string(), 7),
            ("imu".to_string(), 11),
            ("cams/rear".to_string(), 13),
            ("imu".to_string(), 17),
            ("cams/rear".to_string(), 19)
        ]
    );
    // meta=true adds the entry; POST takes "entries" as a list
    let text = c
        .post(s.url("/api/v1/b/b/query"))
        .body(r#"{"entries": ["imu", "cams/rear"], "meta": true, "stop": 3}"#)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (&lines[0]["entry"], &lines[0]["ts"]),
        (&"cams/rear".into(), &1.into())
    );
    assert_eq!(
        (&lines[1]["entry"], &lines[1]["ts"]),
        (&"imu".into(), &2.into())
    );
    // a single-entry answer is unchanged: kind-1 frames, no "entry"
    let r = c
        .get(s.url("/api/v1/b/b/imu/query?stop=3"))
        .send()
        .await
        .unwrap();
    let body = r.bytes().await.unwrap();
    assert_eq!(body[0], 1);
    assert_eq!(decode_all(&body).0, [(None, 2, b"p2".to_vec())]);
    // errors: no entries, an unknown plain name, entries on the entry route, DELETE
    assert_eq!(get("start=0").await.status(), 400);
    assert_eq!(get("entries=nope").await.status(), 404);
    let (recs, end) = decode_all(&get("entries=nope/*").await.bytes().await.unwrap());
    assert_eq!((recs.len(), end), (0, Some(0)));
    let r = c
        .get(s.url("/api/v1/b/b/imu/query?entries=imu"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = c
        .delete(s.url("/api/v1/b/b/query?entries=imu"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    // an entry cannot be named `query`: the bucket-level route is unambiguous
    let r = c
        .post(s.url("/api/v1/b/b/x/query/y"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = c
        .post(s.url("/api/v1/b/b/query"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400); // a POST query body that is not JSON
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_entry_tail_follows_every_entry_in_order() {
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    c.post(s.url("/api/v1/b/b")).send().await.unwrap();
    write(&c, &s, "a", 1, &[]).await;
    write(&c, &s, "b", 2, &[]).await;
    let resp = reqwest::get(s.url("/api/v1/b/b/query?entries=a,b&follow=true&heartbeat=1"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let (mut dec, mut buf) = (Decoder::new(), BytesMut::new());
    let mut got: Vec<(String, u64)> = Vec::new();
    let mut next_ts = 3u64;
    while got.len() < 20 {
        // one write to each entry in turn, once the previous one arrived
        if got.len() as u64 == next_ts - 1 && next_ts <= 20 {
            let e = if next_ts.is_multiple_of(2) { "b" } else { "a" };
            write(&c, &s, e, next_ts, &[]).await;
            next_ts += 1;
        }
        let chunk = tokio::time::timeout(Duration::from_secs(10), body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        buf.extend_from_slice(&chunk);
        while let Some(ev) = dec.next(&mut buf).unwrap() {
            if let Event::Record(h) = ev {
                got.push((h.entry.unwrap(), h.ts));
            }
        }
    }
    let want: Vec<(String, u64)> = (1..=20u64)
        .map(|ts| {
            (
                (if ts.is_multiple_of(2) { "b" } else { "a" }).to_string(),
                ts,
            )
        })
        .collect();
    assert_eq!(got, want);
}

/// A plain query (no `follow`) walking a long range that matches nothing sent nothing
/// until it found a record or the end: a client's read timeout (the CLI's 60 s, the
/// Python SDK's 30 s) or a proxy's cut it. It now sends a heartbeat after `heartbeat=`
/// seconds (15 by default) without anything sent, then the record and the end as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_query_scanning_long_without_a_match_sends_heartbeats() {
    let dir = tempfile::tempdir().unwrap();
    let n: u64 = 15_000;
    {
        use tsblob_storage::{BatchRecord, BucketSettings, Store, StoreOptions, WriteMeta};
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        store.create_bucket("b", BucketSettings::default()).unwrap();
        let batch: Vec<BatchRecord> = (0..n)
            .map(|ts| BatchRecord {
                meta: WriteMeta {
                    ts: Some(ts),
                    content_type: None,
                    labels: [("n".to_string(), ts.to_string())].into(),
                },
                data: vec![b'x'],
            })
            .collect();
        for r in store.write_batch("b", "e", batch).unwrap() {
            r.unwrap();
        }
    }
    let s = Server::start_in(dir.path(), &[]);
    // Costly per record on purpose (each of 1,300 comparisons is false), true only
    // for the last record: the walk takes seconds and sends nothing before its end.
    let mut any: Vec<serde_json::Value> = (0..1300)
        .map(|_| serde_json::json!({"&n": {"$lt": 0}}))
        .collect();
    any.push(serde_json::json!({"&n": {"$eq": n - 1}}));
    let body = serde_json::json!({ "heartbeat": 1, "when": { "$or": any } });
    let started = std::time::Instant::now();
    let resp = reqwest::Client::new()
        .post(s.url("/api/v1/b/b/e/query"))
        .json(&body)
        .send()
        .await
        .unwrap();
    if resp.status() != 200 {
        panic!("{}: {}", resp.status(), resp.text().await.unwrap());
    }
    let (mut rx, _task) = events_of(resp);
    let mut got = Vec::new();
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(120), rx.recv()).await {
        let end = matches!(ev, Got::End(_) | Got::Error(_));
        got.push(ev);
        if end {
            break;
        }
    }
    let took = started.elapsed();
    assert!(
        took > Duration::from_millis(1500),
        "the walk took {took:?}: too short to need a heartbeat (make it costlier)"
    );
    let beats = got.iter().filter(|g| **g == Got::Heartbeat).count();
    assert!(beats >= 1, "{took:?}, {got:?}");
    let rest: Vec<&Got> = got.iter().filter(|g| **g != Got::Heartbeat).collect();
    assert_eq!(rest, [&Got::Record(n - 1), &Got::End(1)], "{got:?}");
    // Out of range: refused, not ignored.
    let r = reqwest::get(s.url("/api/v1/b/b/e/query?heartbeat=0"))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}
