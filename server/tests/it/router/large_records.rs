//! Large records in batches (spooled as they arrive) and reads of large records (mapped
//! from their block, no copy): a module of the router test binary.

use super::*;

/// A payload of `n` bytes that differs from one record to the next.
fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A body that arrives in pieces of `piece` bytes, as it does from a socket (the batch
/// route sees many chunks, and a large record spans many of them).
fn in_pieces(body: Bytes, piece: usize) -> Body {
    let pieces: Vec<Result<Bytes, std::io::Error>> = body
        .chunks(piece)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Body::from_stream(futures_util::stream::iter(pieces))
}

async fn batch(f: &Fixture, uri: &str, body: Body) -> Answer {
    f.send(
        Request::builder()
            .method("POST")
            .uri(uri)
            .body(body)
            .unwrap(),
    )
    .await
}

fn statuses(a: &Answer) -> Vec<u64> {
    a.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect()
}

/// Records of 4 MiB and more in a batch are received into a spool, not held: they and the
/// small records around them are written in order, each result where its record is, and
/// every byte reads back (point reads and a query: both mapped from the block).
#[tokio::test]
async fn batch_spools_large_records_between_small_ones_in_order() {
    let f = fixture();
    f.bucket("b").await;
    let (big1, big2) = (payload(5 << 20, 1), payload(4 << 20, 2));
    let recs: Vec<Rec<'_>> = vec![
        (1, "", &[], b"one"),
        (2, "image/raw", &[("cam", "front")], &big1),
        (3, "", &[], b"three"),
        (4, "", &[], &big2),
        (5, "", &[], b"five"),
    ];
    let a = batch(
        &f,
        "/api/v1/b/b/e/batch",
        in_pieces(frames(&recs, Some(5)), 64 << 10),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(statuses(&a), [201; 5]);
    let ts: Vec<u64> = a.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ts"].as_u64().unwrap())
        .collect();
    assert_eq!(ts, [1, 2, 3, 4, 5]);
    for (ts, _, _, data) in &recs {
        let r = f.call("GET", &format!("/api/v1/b/b/e?ts={ts}"), "").await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body.len(), data.len(), "record {ts}");
        assert!(r.body == data, "record {ts} reads back different bytes");
    }
    let r = f.call("GET", "/api/v1/b/b/e?ts=2", "").await;
    assert_eq!(r.headers["content-type"], "image/raw");
    assert_eq!(r.headers["x-tsblob-label-cam"], "front");
    let q = f.call("GET", "/api/v1/b/b/e/query", "").await;
    let (got, end, err) = decode(&q.body);
    assert_eq!((end, err), (Some(5), None));
    for ((head, data), (ts, _, _, want)) in got.iter().zip(&recs) {
        assert_eq!(head.ts, *ts);
        assert!(data == want, "query: record {ts} differs");
    }
}

/// A batch cut off inside a large (spooled) record: 400 `malformed_batch`, the records
/// before it are kept and reported, nothing of the cut record is stored.
#[tokio::test]
async fn batch_cut_off_inside_a_spooled_record_stores_nothing_of_it() {
    let f = fixture();
    f.bucket("b").await;
    let big = payload(6 << 20, 3);
    let whole = frames(&[(1, "", &[], b"kept"), (2, "", &[], &big)], Some(2));
    let cut = whole.slice(..whole.len() - (2 << 20));
    let a = batch(&f, "/api/v1/b/b/e/batch", in_pieces(cut, 256 << 10)).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{:?}", a.body);
    assert_eq!(a.code(), "malformed_batch");
    assert_eq!(statuses(&a), [201]);
    assert_eq!(
        f.call("GET", "/api/v1/b/b/e?ts=1", "").await.body,
        &b"kept"[..]
    );
    let r = f.call("GET", "/api/v1/b/b/e?ts=2", "").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "a cut record was stored");
    // The spool left nothing behind in the data folder's accounting: the bucket holds
    // only the small record's frame.
    let info = f.call("GET", "/api/v1/b/b", "").await.json();
    assert!(
        info["info"]["size"].as_u64().unwrap_or(u64::MAX) < 1 << 20,
        "{info}"
    );
}

/// A large record over a HARD quota fails alone (507 `quota_exceeded`); the small ones
/// around it are written.
#[tokio::test]
async fn a_spooled_record_over_a_hard_quota_fails_alone() {
    let f = fixture();
    let a = f
        .call(
            "POST",
            "/api/v1/b/q",
            r#"{"quota_type":"hard","quota_size":3000000}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    let big = payload(5 << 20, 4);
    let recs: Vec<Rec<'_>> = vec![(1, "", &[], b"a"), (2, "", &[], &big), (3, "", &[], b"c")];
    let a = batch(
        &f,
        "/api/v1/b/q/e/batch",
        in_pieces(frames(&recs, Some(3)), 128 << 10),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(statuses(&a), [201, 507, 201]);
    assert_eq!(
        a.json()["results"][1]["error"]["code"],
        "quota_exceeded",
        "{:?}",
        a.body
    );
    assert_eq!(
        f.call("GET", "/api/v1/b/q/e?ts=3", "").await.body,
        &b"c"[..]
    );
    assert_eq!(
        f.call("GET", "/api/v1/b/q/e?ts=2", "").await.status,
        StatusCode::NOT_FOUND
    );
}

/// `if_exists=compare` on a spooled batch record: the same payload again is 200
/// (`existing`), another payload at its timestamp 409 `conflict`, and the stored one stays.
#[tokio::test]
async fn a_spooled_batch_record_compares_with_the_stored_one() {
    let f = fixture();
    f.bucket("b").await;
    let big = payload(4 << 20, 5);
    let mut other = big.clone();
    other[1 << 20] ^= 0xff;
    let uri = "/api/v1/b/b/e/batch?if_exists=compare";
    let body = |data: &[u8]| in_pieces(frames(&[(7, "", &[], data)], Some(1)), 1 << 20);
    let a = batch(&f, uri, body(&big)).await;
    assert_eq!(statuses(&a), [201]);
    let a = batch(&f, uri, body(&big)).await;
    assert_eq!(statuses(&a), [200]);
    assert_eq!(a.json()["existing"], 1);
    let a = batch(&f, uri, body(&other)).await;
    assert_eq!(statuses(&a), [409]);
    assert_eq!(a.json()["results"][0]["error"]["code"], "conflict");
    let r = f.call("GET", "/api/v1/b/b/e?ts=7", "").await;
    assert!(r.body == big, "a conflict overwrote the stored record");
}

/// The block file of the only block of `bucket/entry`.
fn only_block(f: &Fixture, bucket: &str, entry: &str) -> std::path::PathBuf {
    let dir = f._dir.path().join(bucket).join(entry);
    let blocks: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "blk"))
        .collect();
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    blocks[0].clone()
}

/// The skipped report (kind-5 frame) of a query answer, if it has one.
fn skipped_report(body: &[u8]) -> Option<serde_json::Value> {
    let mut d = Decoder::new();
    let mut buf = bytes::BytesMut::from(body);
    let mut report = None;
    while let Some(ev) = d.next(&mut buf).unwrap() {
        if let Event::Skipped(j) = ev {
            report = Some(serde_json::from_slice(&j).unwrap());
        }
    }
    report
}

/// A mapped read checks the CRC before a byte leaves: a flipped byte in a large record is
/// a 500 `corrupt_record` that names no server path (point read), and a query skips the
/// record and reports it (`damage.rs`) instead of sending it; a block cut short under the
/// index is an error too, never a crash (a mapping past the end of a file would be a
/// SIGBUS).
#[tokio::test]
async fn mapped_reads_refuse_corrupt_and_cut_records() {
    use std::os::unix::fs::FileExt;
    let f = fixture();
    f.bucket("b").await;
    let big = payload(1 << 20, 6);
    let a = f.call("POST", "/api/v1/b/b/e?ts=1", big.clone()).await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert!(f.call("GET", "/api/v1/b/b/e?ts=1", "").await.body == big);
    let path = only_block(&f, "b", "e");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(&path)
        .unwrap();
    let len = file.metadata().unwrap().len();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, len - 1000).unwrap();
    file.write_all_at(&[byte[0] ^ 0x55], len - 1000).unwrap();
    let r = f.call("GET", "/api/v1/b/b/e?ts=1", "").await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(r.code(), "corrupt_record");
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(
        !text.contains(&*f._dir.path().to_string_lossy()),
        "the 500 names a server path: {text}"
    );
    // A query skips the damaged record and says so: no record, the report, the end.
    let q = f.call("GET", "/api/v1/b/b/e/query", "").await;
    assert_eq!(q.status, StatusCode::OK, "{:?}", q.body);
    let (got, end, err) = decode(&q.body);
    assert_eq!(
        (got.len(), end, err),
        (0, Some(0), None),
        "a corrupt record was sent"
    );
    let report = skipped_report(&q.body).expect("no skipped report");
    assert_eq!(report["skipped_count"], 1);
    assert_eq!(report["skipped"][0]["ts"], 1);
    assert_eq!(report["skipped"][0]["code"], "corrupt_record");
    // After a good record: the good one is sent, the bad one reported.
    let a = f.call("POST", "/api/v1/b/b/e?ts=0", "good").await;
    assert_eq!(a.status, StatusCode::CREATED);
    let q = f.call("GET", "/api/v1/b/b/e/query", "").await;
    assert_eq!(q.status, StatusCode::OK);
    let (got, end, err) = decode(&q.body);
    assert_eq!(
        (got.len(), end, err),
        (1, Some(1), None),
        "a corrupt record was sent"
    );
    assert_eq!(got[0].1, b"good");
    assert_eq!(skipped_report(&q.body).unwrap()["skipped"][0]["ts"], 1);
    // Cut the block short under the index: refused, and the server goes on.
    file.set_len(len - 4096).unwrap();
    let r = f.call("GET", "/api/v1/b/b/e?ts=1", "").await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{:?}", r.body);
    assert_eq!(r.code(), "corrupt_record");
    // (The cut took the small record at the block's end too: both are skipped.)
    let q = f.call("GET", "/api/v1/b/b/e/query", "").await;
    assert_eq!(q.status, StatusCode::OK, "{:?}", q.body);
    let (got, end, err) = decode(&q.body);
    assert_eq!((got.len(), end, err), (0, Some(0), None));
    assert_eq!(skipped_report(&q.body).unwrap()["skipped_count"], 2);
    assert_eq!(
        f.call("POST", "/api/v1/b/b/other?ts=1", "alive")
            .await
            .status,
        StatusCode::CREATED
    );
}

/// Two batches race to store a large (spooled) record at the same timestamp of one entry:
/// exactly one wins (201), the other gets 409 `timestamp_exists`, and the stored bytes are
/// the winner's whole payload, never a mix of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_batches_racing_for_one_spooled_record_store_one_whole() {
    let f = std::sync::Arc::new(fixture());
    f.bucket("b").await;
    let payloads = [payload(5 << 20, 7), payload(5 << 20, 8)];
    let tasks: Vec<_> = payloads
        .iter()
        .map(|p| {
            let (f, body) = (f.clone(), frames(&[(42, "", &[], p)], Some(1)));
            tokio::spawn(async move {
                let a = batch(&f, "/api/v1/b/b/e/batch", in_pieces(body, 256 << 10)).await;
                assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
                (
                    statuses(&a)[0],
                    a.json()["results"][0]["error"]["code"].clone(),
                )
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    let won: Vec<usize> = (0..2).filter(|&i| outcomes[i].0 == 201).collect();
    assert_eq!(won.len(), 1, "{outcomes:?}");
    let lost = 1 - won[0];
    assert_eq!(outcomes[lost].0, 409, "{outcomes:?}");
    assert_eq!(outcomes[lost].1, "timestamp_exists");
    let r = f.call("GET", "/api/v1/b/b/e?ts=42", "").await;
    assert!(
        r.body == payloads[won[0]],
        "the stored record is not the winner's"
    );
}

/// Single writes whose body is cut off mid-way store nothing, on both paths whose last step
/// changed: a 1 MiB body held in memory (its CRC taken as it arrived, `CheckedBody`) and a
/// 6 MiB body spooled (its last append and the engine's write one call on the worker). The
/// whole bodies written next at the same timestamps are stored, read back byte-identical
/// and compare equal (`if_exists=compare`: the CRC taken on arrival is the stored one's);
/// a one-byte change compares as a conflict. Multi-threaded, so `run_here` runs in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_write_cut_off_mid_body_stores_nothing_and_its_whole_retry_compares_equal() {
    let f = fixture();
    f.bucket("b").await;
    for (ts, n) in [(1u64, 1usize << 20), (2, 6 << 20)] {
        let data = Bytes::from(payload(n, ts as u8));
        let uri = format!("/api/v1/b/b/e?ts={ts}");
        let cut: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(data.slice(..n / 3)),
            Ok(data.slice(n / 3..n * 2 / 3)),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "client went away",
            )),
        ];
        let send = |body: Body, uri: String| {
            f.send(
                Request::builder()
                    .method("POST")
                    .uri(uri)
                    .header("content-length", n.to_string())
                    .body(body)
                    .unwrap(),
            )
        };
        let a = send(
            Body::from_stream(futures_util::stream::iter(cut)),
            uri.clone(),
        )
        .await;
        assert!(!a.status.is_success(), "{n}: {:?} {:?}", a.status, a.body);
        let r = f.call("GET", &uri, "").await;
        assert_eq!(
            r.status,
            StatusCode::NOT_FOUND,
            "{n}: a cut body was stored"
        );
        let a = send(in_pieces(data.clone(), 100_003), uri.clone()).await;
        assert_eq!(a.status, StatusCode::CREATED, "{n}: {:?}", a.body);
        assert!(f.call("GET", &uri, "").await.body == data, "{n}: read back");
        let compare = format!("{uri}&if_exists=compare");
        let a = send(in_pieces(data.clone(), 65_536), compare.clone()).await;
        assert_eq!(a.status, StatusCode::OK, "{n}: {:?}", a.body);
        let mut other = data.to_vec();
        other[n / 2] ^= 1;
        let a = send(in_pieces(Bytes::from(other), 65_536), compare).await;
        assert_eq!(a.status, StatusCode::CONFLICT, "{n}: {:?}", a.body);
    }
}
