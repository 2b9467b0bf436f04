//! Single writes of small bodies go through the store's writer thread, which writes the
//! writes queued meanwhile in groups (one append and one commit per entry,
//! `server/src/http/writer.rs`): many concurrent writes to many entries and to one entry are
//! all acknowledged and read back, and a write that fails inside a group (timestamp taken:
//! 409, unknown bucket: 404, bad entry name: 422) fails alone.

use super::*;

fn put(uri: String, body: Vec<u8>) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri(uri)
        .header("content-length", body.len())
        .body(Body::from(body))
        .unwrap()
}

fn body_of(entry: &str, ts: u64) -> Vec<u8> {
    format!("{entry}@{ts}:").repeat(60).into_bytes()
}

/// A request: its URI, the status it must get, and the entry and timestamp to read back
/// when it is stored.
type Case = (String, StatusCode, Option<(String, u64)>);

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
            let a = f.send(put(uri.clone(), body)).await;
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
