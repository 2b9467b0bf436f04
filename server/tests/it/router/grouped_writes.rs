//! Single writes of small bodies go through the store's writer thread, which writes the
//! writes queued meanwhile as one round (one append per entry and one index commit for the
//! whole round, `server/src/http/writer.rs`, `Store::write_groups`): many concurrent writes
//! to many entries and to one entry are all acknowledged and read back, and a write that
//! fails inside a round (timestamp taken: 409, unknown bucket: 404, bad entry name: 422, a
//! label value over 4 KiB: 422) fails alone.

use super::*;

fn put(uri: String, body: Vec<u8>) -> Request<Body> {
    put_labelled(uri, body, false)
}

/// A write, with a label value of 5,000 bytes (over the 4 KiB limit) when `long_label`.
fn put_labelled(uri: String, body: Vec<u8>, long_label: bool) -> Request<Body> {
    let mut req = Request::builder()
        .method("POST")
        .uri(uri)
        .header("content-length", body.len());
    if long_label {
        req = req.header("x-tsblob-label-big", "v".repeat(5000));
    }
    req.body(Body::from(body)).unwrap()
}

fn body_of(entry: &str, ts: u64) -> Vec<u8> {
    format!("{entry}@{ts}:").repeat(60).into_bytes()
}

/// A request: its URI, the status it must get, and the entry and timestamp to read back
/// when it is stored.
type Case = (String, StatusCode, Option<(String, u64)>);

/// The `ts` parameter of a request's URI.
fn uri_ts(uri: &str) -> u64 {
    uri.rsplit("ts=")
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

/// Timestamps from here on are written with a label value over the limit (422).
const LONG_LABEL_TS: u64 = 1 << 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_small_writes_are_grouped_and_fail_alone() {
    let f = std::sync::Arc::new(fixture());
    f.bucket("b").await;
    // Taken timestamps: each is written again below, concurrently with everything else.
    for ts in 1..=20u64 {
        let a = f
            .send(put(
                format!("/api/v1/b/b/same?ts={ts}"),
                body_of("same", ts),
            ))
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    }
    let mut cases: Vec<Case> = Vec::new();
    for i in 0..400u64 {
        let (entry, ts) = match i % 4 {
            0 | 1 => (format!("cam{}", i % 25), 1000 + i),
            _ => ("same".to_string(), 1000 + i),
        };
        cases.push((
            format!("/api/v1/b/b/{entry}?ts={ts}"),
            StatusCode::CREATED,
            Some((entry, ts)),
        ));
        if i % 20 == 0 {
            let taken = 1 + i / 20;
            cases.push((
                format!("/api/v1/b/b/same?ts={taken}"),
                StatusCode::CONFLICT,
                None,
            ));
            cases.push((
                format!("/api/v1/b/nope/same?ts={ts}"),
                StatusCode::NOT_FOUND,
                None,
            ));
            cases.push((
                format!("/api/v1/b/b/bad$name?ts={ts}"),
                StatusCode::UNPROCESSABLE_ENTITY,
                None,
            ));
            // Its entry is written by the round's other requests; the marker below makes
            // the task add the label.
            cases.push((
                format!("/api/v1/b/b/cam{}?ts={}", i % 25, LONG_LABEL_TS + i),
                StatusCode::UNPROCESSABLE_ENTITY,
                None,
            ));
        }
    }
    let mut tasks = Vec::new();
    for (uri, want, back) in cases {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let body = match &back {
                Some((e, ts)) => body_of(e, *ts),
                None => b"refused".to_vec(),
            };
            let long = uri_ts(&uri) >= LONG_LABEL_TS;
            let a = f.send(put_labelled(uri.clone(), body, long)).await;
            assert_eq!(a.status, want, "{uri}: {:?}", a.body);
            if want != StatusCode::CREATED {
                assert!(!a.code().is_empty(), "{uri}: no error code in {:?}", a.body);
            }
            back
        }));
    }
    let mut written = Vec::new();
    for t in tasks {
        if let Some(w) = t.await.unwrap() {
            written.push(w);
        }
    }
    assert_eq!(written.len(), 400);
    for (entry, ts) in written {
        let a = f
            .call("GET", &format!("/api/v1/b/b/{entry}?ts={ts}"), "")
            .await;
        assert_eq!(a.status, StatusCode::OK, "{entry}@{ts}");
        assert_eq!(a.body, body_of(&entry, ts), "{entry}@{ts}");
    }
    // The taken timestamps still hold their first payloads.
    for ts in 1..=20u64 {
        let a = f
            .call("GET", &format!("/api/v1/b/b/same?ts={ts}"), "")
            .await;
        assert_eq!(a.body, body_of("same", ts), "same@{ts}");
    }
    let a = f.call("GET", "/api/v1/b/b/same", "").await;
    assert_eq!(a.status, StatusCode::OK);
}
