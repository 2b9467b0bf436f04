//! Records over the destination's `--max-batch-record` reach it (issue 13): the batch
//! endpoint answers 413 `record_too_large` for such a record, and the replication sender
//! (and `tsblob cp`) sends it alone with a single-record `POST ?if_exists=compare`, its
//! payload streamed from the source's block. The same idempotency as batches: a copy
//! already there counts as existing, a different record there is a conflict, never
//! overwritten; a connection cut in the middle of a large body stores nothing half-way
//! and the record arrives on a retry.
#![allow(clippy::unwrap_used)]

use crate::common;
use crate::replication_util;

use std::time::Duration;

use common::Server;
use replication_util::proxy::{Mode, Proxy};
use replication_util::*;
use serde_json::json;

/// The destination refuses batched records over 64 KiB (so the test data stays small).
fn start_small_batches(dir: &std::path::Path) -> Server {
    let mut args = FAST_RETRY.to_vec();
    args.extend(["--max-batch-record", "64KiB"]);
    Server::start_in(dir, &args)
}

/// Sizes: small ones go in batches, 200 KiB ones are refused by the destination's batch
/// endpoint (sent alone from memory), 5 MiB ones are over the sender's inline bound
/// (never read into a page: streamed from the block).
fn size_of(ts: u64) -> usize {
    match ts % 3 {
        0 => 1000 + ts as usize,
        1 => 200 << 10,
        _ => 5 << 20,
    }
}

fn record(ts: u64) -> (u64, &'static str, tsblob_storage::Labels, Vec<u8>) {
    (
        ts,
        "image/jpeg",
        labels(&[("n", &ts.to_string())]),
        payload("big", ts, size_of(ts), false),
    )
}

/// A single-record write as a test client does it.
async fn write_one(api: &Api, bucket: &str, ts: u64, ct: &str, l: &[(&str, &str)], d: Vec<u8>) {
    let mut req = api
        .http
        .post(format!("{}/api/v1/b/{bucket}/big?ts={ts}", api.base))
        .header("content-type", ct);
    for (k, v) in l {
        req = req.header(format!("x-tsblob-label-{k}"), *v);
    }
    let resp = req.body(d).send().await.unwrap();
    assert_eq!(
        resp.status().as_u16(),
        201,
        "{}",
        resp.text().await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_over_the_destination_batch_limit_arrive_alone_through_a_cut() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src_s, dst_s) = (start(d1.path()), start_small_batches(d2.path()));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("edge", json!({})).await;
    dst.create_bucket("cloud", json!({})).await;
    // At the destination already: the same 200 KiB record as the source's ts 4 (existing)
    // and another payload at the 5 MiB record's ts 5 (a conflict: it stays).
    let same = record(4);
    write_one(&dst, "cloud", 4, same.1, &[("n", "4")], same.3.clone()).await;
    let other = payload("other", 5, 5 << 20, false);
    write_one(&dst, "cloud", 5, "image/jpeg", &[("n", "5")], other.clone()).await;

    let proxy = Proxy::start(&addr_of(&dst_s.url("")));
    let (s, v) = src
        .put_task("big", task_spec("edge", &proxy.url(), "cloud"))
        .await;
    assert_eq!(s, 201, "{v}");
    // A slow link (1 MiB/s): a 5 MiB body takes seconds, and is cut in its middle.
    proxy.set(Mode::Slow(1 << 20));
    for ts in 1..=9u64 {
        assert_eq!(
            src.write("edge", "big", &[record(ts)]).await.unwrap(),
            [201]
        );
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    proxy.set(Mode::Cut);
    tokio::time::sleep(Duration::from_millis(700)).await;
    proxy.set(Mode::Pass);
    let v = src.wait_caught_up("big", Duration::from_secs(60)).await;
    let st = &v["status"];
    assert!(
        st["errors"].as_u64().unwrap() > 0,
        "the cut was not seen: {v}"
    );
    assert_eq!(st["conflicts"], json!(1), "{v}");
    assert!(
        st["last_conflict"]["message"]
            .as_str()
            .unwrap()
            .contains('5'),
        "{v}"
    );
    assert!(st["existing_records"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(st["evicted_before_sent"], json!(0), "{v}");

    // Exactly the source's records, byte for byte, except the conflict kept as it was.
    let mut want = src.dump("edge").await;
    let k = ("big".to_string(), 5u64);
    let kept = want.get_mut(&k).unwrap();
    kept.2 = other;
    assert_same(&want, &dst.dump("cloud").await);

    // `tsblob cp` to a destination with the same limit falls back the same way, and a
    // second run finds everything there.
    let d3 = tempfile::tempdir().unwrap();
    let dst2_s = start_small_batches(d3.path());
    let dst2 = Api::new(&dst2_s.url(""), None);
    dst2.create_bucket("copy", json!({})).await;
    let from = format!("{}/edge", src_s.url(""));
    let to = format!("{}/copy", dst2_s.url(""));
    for run in 0..2 {
        let (ok, text) = tsblob_cli(&["cp", &from, &to, "--quiet"]);
        assert!(ok, "cp run {run}: {text}");
        if run == 1 {
            assert!(text.contains("0 written, 9 already there"), "{text}");
        }
    }
    assert_same(&src.dump("edge").await, &dst2.dump("copy").await);
}
