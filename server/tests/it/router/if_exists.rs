//! `if_exists=compare` on the single-record write, and the batch's 413 `record_too_large`
//! (what replication and `tsblob cp` use to send records over the destination's
//! `--max-batch-record` alone): a module of the router test binary.

use super::*;

/// The same payload at the timestamp is 200, another one 409 `conflict` and stays; for a
/// small body (to the writer thread), a 600 KiB one (held in memory, its CRC32C computed
/// only for the comparison) and a 5 MiB one (received into a spool that becomes its own
/// block: the spool's CRC32C, taken as it was appended after the block head's room, is
/// the one compared).
#[tokio::test]
async fn single_write_if_exists_compare() {
    let f = fixture();
    f.bucket("b").await;
    let big: Vec<u8> = (0..(600u32 << 10)).map(|i| (i % 251) as u8).collect();
    let mut other = big.clone();
    other[300_000] ^= 1;
    let huge: Vec<u8> = (0..(5u32 << 20)).map(|i| (i % 253) as u8).collect();
    let mut huge_other = huge.clone();
    huge_other[(5 << 20) - 1] ^= 1;
    // Without Content-Length every body is spooled; with it, the small one goes to the
    // writer thread, 600 KiB is held in memory and 5 MiB is spooled.
    let post = |uri: String, body: Bytes, with_len: bool| {
        let mut req = Request::builder().method("POST").uri(uri);
        if with_len {
            req = req.header("content-length", body.len());
        }
        f.send(req.body(Body::from(body)).unwrap())
    };
    for with_len in [false, true] {
        let cases = [
            (
                1u64,
                Bytes::from_static(b"small"),
                Bytes::from_static(b"smalL"),
            ),
            (2, Bytes::from(big.clone()), Bytes::from(other.clone())),
            (
                3,
                Bytes::from(huge.clone()),
                Bytes::from(huge_other.clone()),
            ),
        ];
        for (ts, body, changed) in cases {
            let ts = ts + 10 * u64::from(with_len);
            let uri = format!("/api/v1/b/b/e?ts={ts}&if_exists=compare");
            let a = post(uri.clone(), body.clone(), with_len).await;
            assert_eq!(a.status, StatusCode::CREATED, "{ts}: {:?}", a.body);
            let a = post(uri.clone(), body.clone(), with_len).await;
            assert_eq!(a.status, StatusCode::OK, "{ts}: {:?}", a.body);
            assert_eq!(a.json()["ts"], ts);
            let a = post(uri, changed, with_len).await;
            assert_eq!(a.status, StatusCode::CONFLICT, "{ts}: {:?}", a.body);
            assert_eq!(a.code(), "conflict");
            // Without the parameter: the plain 409.
            let a = post(format!("/api/v1/b/b/e?ts={ts}"), body.clone(), with_len).await;
            assert_eq!(a.code(), "timestamp_exists");
            let a = f.call("GET", &format!("/api/v1/b/b/e?ts={ts}"), "").await;
            assert!(
                a.body == body,
                "{ts}: a conflict overwrote the stored record"
            );
        }
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
