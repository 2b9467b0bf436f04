//! Damaged records in a query (issue 27, item 5): a record whose stored bytes fail their
//! check used to end the whole query stream with an error frame, so the records after it
//! were out of reach. The query now skips it, goes on to the end, and reports what it
//! skipped (entry, timestamp, error code) in a kind-5 frame just before the end frame.
#![allow(clippy::unwrap_used)]

use crate::common::Server;
use crate::reliability_util::files_ending;

use bytes::BytesMut;
use serde_json::{json, Value};
use tsblob_proto::framing::{Decoder, Event};

/// A payload that names its record, so that its bytes can be found in a block file.
fn payload(entry: &str, ts: u64) -> Vec<u8> {
    format!("<{entry}:{ts:04}>").repeat(40).into_bytes()
}

/// Writes records 1..=n to `entry`, one by one (blocks of 4 records: several blocks).
async fn fill(c: &reqwest::Client, s: &Server, entry: &str, n: u64) {
    for ts in 1..=n {
        let r = c
            .post(s.url(&format!("/api/v1/b/b/{entry}?ts={ts}")))
            .body(payload(entry, ts))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
}

/// Overwrites the stored payload of `entry`'s record `ts` in its block file (the CRC
/// then fails), as a bad disk sector or a stray write would.
fn corrupt(s: &Server, entry: &str, ts: u64) {
    let needle = payload(entry, ts);
    let blocks = files_ending(s.dir(), ".blk");
    assert!(blocks.len() > 1, "want several blocks: {blocks:?}");
    for path in blocks {
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            bytes[at + 10] ^= 0xff;
            std::fs::write(&path, &bytes).unwrap();
            return;
        }
    }
    panic!("record {entry}:{ts} not found in any block file");
}

/// What a query answered.
#[derive(Debug, Default)]
struct Answer {
    /// (entry, ts) of each record, its payload checked.
    records: Vec<(Option<String>, u64)>,
    skipped: Option<Value>,
    end: Option<u64>,
    error: Option<String>,
}

async fn query(c: &reqwest::Client, s: &Server, path: &str) -> Answer {
    let r = c.get(s.url(path)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body = r.bytes().await.unwrap();
    let (mut d, mut buf) = (Decoder::new(), BytesMut::from(&body[..]));
    let mut a = Answer::default();
    let mut data: Vec<u8> = Vec::new();
    let check = |a: &Answer, data: &[u8]| {
        if let Some((e, ts)) = a.records.last() {
            assert_eq!(
                data,
                payload(e.as_deref().unwrap_or("e"), *ts),
                "{e:?} {ts}"
            );
        }
    };
    while let Some(ev) = d.next(&mut buf).unwrap() {
        match ev {
            Event::Record(h) => {
                check(&a, &data);
                data.clear();
                a.records.push((h.entry, h.ts));
            }
            Event::Data(b) => data.extend_from_slice(&b),
            Event::Skipped(j) => a.skipped = Some(serde_json::from_slice(&j).unwrap()),
            Event::End(n) => a.end = Some(n),
            Event::Error(j) => a.error = Some(String::from_utf8_lossy(&j).into_owned()),
            Event::Heartbeat(_) => {}
        }
    }
    check(&a, &data);
    a
}

async fn server() -> (Server, reqwest::Client) {
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    let r = c
        .post(s.url("/api/v1/b/b"))
        .json(&json!({"max_block_records": 4}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    (s, c)
}

/// Bug: a record whose payload fails its CRC check ended the query with an error frame;
/// the records after it (here 7 to 12, in later blocks) never arrived.
#[tokio::test]
async fn damaged_record_is_skipped_and_reported_not_ending_the_query() {
    let (s, c) = server().await;
    fill(&c, &s, "e", 12).await;
    corrupt(&s, "e", 6);

    let a = query(&c, &s, "/api/v1/b/b/e/query").await;
    assert_eq!(a.error, None);
    let ts: Vec<u64> = a.records.iter().map(|r| r.1).collect();
    assert_eq!(ts, [1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]);
    assert_eq!(a.end, Some(11));
    assert_eq!(
        a.skipped,
        Some(json!({"skipped": [{"ts": 6, "code": "corrupt_record"}], "skipped_count": 1}))
    );

    // Newest first too, and a range that does not hold it reports nothing.
    let a = query(&c, &s, "/api/v1/b/b/e/query?desc=true").await;
    assert_eq!(a.records.len(), 11);
    assert_eq!(a.skipped.unwrap()["skipped_count"], 1);
    let a = query(&c, &s, "/api/v1/b/b/e/query?start=7").await;
    assert_eq!((a.records.len(), a.skipped), (6, None));

    // meta=true reads no payload: every record is listed, nothing is skipped.
    let r = c
        .get(s.url("/api/v1/b/b/e/query?meta=true"))
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    assert_eq!(text.lines().count(), 12, "{text}");
    assert!(!text.contains("skipped"), "{text}");

    // A read of the record itself still says what is wrong.
    let r = c.get(s.url("/api/v1/b/b/e?ts=6")).send().await.unwrap();
    assert_eq!(r.status(), 500);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "corrupt_record");
}

/// The multi-entry variant: damaged records of two entries are skipped, each named with
/// its entry, and every other record of both entries arrives in timestamp order.
#[tokio::test]
async fn damaged_records_of_a_multi_entry_query_are_skipped_and_named() {
    let (s, c) = server().await;
    fill(&c, &s, "a", 10).await;
    fill(&c, &s, "b", 10).await;
    corrupt(&s, "a", 3);
    corrupt(&s, "b", 8);

    let a = query(&c, &s, "/api/v1/b/b/query?entries=a,b").await;
    assert_eq!(a.error, None);
    assert_eq!(a.records.len(), 18);
    assert_eq!(a.end, Some(18));
    let missing = |e: &str, ts: u64| !a.records.contains(&(Some(e.to_string()), ts));
    assert!(missing("a", 3) && missing("b", 8));
    assert_eq!(
        a.skipped,
        Some(json!({"skipped": [
            {"entry": "a", "ts": 3, "code": "corrupt_record"},
            {"entry": "b", "ts": 8, "code": "corrupt_record"},
        ], "skipped_count": 2}))
    );

    // meta=true: every record listed.
    let r = c
        .get(s.url("/api/v1/b/b/query?entries=a,b&meta=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap().lines().count(), 20);
}
