//! `if_exists=compare` on the single-record write, and the batch's 413 `record_too_large`
//! (what replication and `tsblob cp` use to send records over the destination's
//! `--max-batch-record` alone): a module of the router test binary.

use super::*;

/// The same payload at the timestamp is 200, another one 409 `conflict` and stays; for a
/// small body (in memory) and for a large one (received into a spool, its CRC32C taken as
/// it arrives).
#[tokio::test]
async fn single_write_if_exists_compare() {
    let f = fixture();
    f.bucket("b").await;
    let big: Vec<u8> = (0..(600u32 << 10)).map(|i| (i % 251) as u8).collect();
    let mut other = big.clone();
    other[300_000] ^= 1;
    for (ts, body, changed) in [
        (
            1u64,
            Bytes::from_static(b"small"),
            Bytes::from_static(b"smalL"),
        ),
        (2, Bytes::from(big), Bytes::from(other)),
    ] {
        let uri = format!("/api/v1/b/b/e?ts={ts}&if_exists=compare");
        let a = f.call("POST", &uri, body.clone()).await;
        assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
        let a = f.call("POST", &uri, body.clone()).await;
        assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
        assert_eq!(a.json()["ts"], ts);
        let a = f.call("POST", &uri, changed).await;
        assert_eq!(a.status, StatusCode::CONFLICT, "{:?}", a.body);
        assert_eq!(a.code(), "conflict");
        // Without the parameter: the plain 409.
        let a = f
            .call("POST", &format!("/api/v1/b/b/e?ts={ts}"), body.clone())
            .await;
        assert_eq!(a.code(), "timestamp_exists");
        let a = f.call("GET", &format!("/api/v1/b/b/e?ts={ts}"), "").await;
        assert_eq!(a.body, body, "a conflict overwrote the stored record");
    }
    let a = f
        .call("POST", "/api/v1/b/b/e?ts=9&if_exists=maybe", "x")
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = f.call("POST", "/api/v1/b/b/e?ts=9&nope=1", "x").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
}

/// A record over `--max-batch-record` ends the batch with a 413: the complete records
/// before it are written, its result (`record_too_large`) follows theirs, the rest is not
/// read.
#[tokio::test]
async fn batch_record_too_large_is_named_in_the_results() {
    let f = fixture_with(
        None,
        Limits {
            max_batch_record: 100,
            ..Limits::default()
        },
    );
    f.bucket("b").await;
    let large = [7u8; 101];
    let body = frames(
        &[
            (1, "", &[], b"a"),
            (2, "", &[], b"b"),
            (3, "", &[], &large),
            (4, "", &[], b"d"),
        ],
        Some(4),
    );
    let a = f
        .call("POST", "/api/v1/b/b/e/batch?if_exists=compare", body)
        .await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE, "{:?}", a.body);
    let v = a.json();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{v}");
    assert_eq!(
        (results[0]["status"].as_u64(), results[1]["status"].as_u64()),
        (Some(201), Some(201))
    );
    assert_eq!(results[2]["status"], 413);
    assert_eq!(results[2]["ts"], 3);
    assert_eq!(results[2]["error"]["code"], "record_too_large");
    assert_eq!(v["error"]["code"], "record_too_large");
    assert_eq!(
        f.call("GET", "/api/v1/b/b/e?ts=2", "").await.body,
        &b"b"[..]
    );
    assert_eq!(
        f.call("GET", "/api/v1/b/b/e?ts=4", "").await.status,
        StatusCode::NOT_FOUND
    );
}
