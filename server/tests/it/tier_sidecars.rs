//! The heads sidecar's length against real MinIO: labels shared by a block's records are
//! written once, and records with very many distinct large label sets keep their block
//! local instead of building a sidecar without bound (`codec/heads.rs`).
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::common::{self, Server};
use crate::tier::{
    bucket_info, check_record, client, create_bucket, serve, tier_args, wait_tiered, write, Engine,
    Store,
};
use crate::tier_labels::{label, restored, wait_sidecars};

/// Fifteen labels of 4,000 bytes (60 KB, under the 64 KiB of labels a record may have),
/// their values starting with `tag`.
fn big_labels(tag: &str) -> serde_json::Value {
    let labels: serde_json::Map<String, serde_json::Value> = (0..15)
        .map(|i| {
            (
                format!("l{i}"),
                format!("{tag}{}", "x".repeat(4000 - tag.len())).into(),
            )
        })
        .collect();
    labels.into()
}

async fn patch_query(c: &reqwest::Client, s: &Server, labels: serde_json::Value) -> u64 {
    let r = c
        .patch(s.url("/api/v1/b/cams/front/query"))
        .json(&serde_json::json!({ "labels": labels }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    r.json::<serde_json::Value>().await.unwrap()["updated"]
        .as_u64()
        .unwrap()
}

/// MinIO and a server tiering into `prefix`, whose bucket `cams` has blocks of `records`
/// records: `front` gets `records + 1` of them, and the first block is tiered.
async fn one_tiered_block(prefix: &str, records: u64) -> (Store, tempfile::TempDir, Server) {
    let store = Store::start(Engine::Minio);
    let data = tempfile::tempdir().unwrap();
    let s = serve(data.path(), &tier_args(&store, prefix, &[]));
    let c = client();
    let settings = format!(r#"{{"max_block_records": {records}, "tier_local_max": 0}}"#);
    create_bucket(&c, &s, "cams", &settings).await;
    // `records` fill the first block; the next one seals it.
    for ts in 1..=records + 1 {
        assert_eq!(write(&c, &s, "front", ts).await, 201);
    }
    wait_tiered(&c, &s, 1).await;
    (store, data, s)
}

/// Bug: the sidecar carried each record's labels, so one `PATCH` of a query giving the
/// 4,600 records of a tiered block the same 60 KB of labels made a 276 MB sidecar, built in
/// memory on the device and longer than what a restore reads whole (256 MiB): the
/// `--restore-from` failed. The label set is written once now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_large_label_set_on_every_record_of_a_tiered_block_reaches_a_restore() {
    let (store, _data, s) = one_tiered_block("sidecars/shared", 4600).await;
    let c = client();
    assert_eq!(patch_query(&c, &s, big_labels("shared")).await, 4601);
    wait_sidecars(&c, &s).await;
    assert_eq!(
        common::metric(&c, &s, "tsblob_tier_oversized_sidecars").await,
        0
    );
    drop(s);

    let fresh = tempfile::tempdir().unwrap();
    let r = restored(&store, "sidecars/shared", fresh.path());
    let expected = big_labels("shared");
    for ts in [1, 2300, 4600] {
        assert_eq!(
            label(&c, &r, ts, "l7").await.as_deref(),
            expected["l7"].as_str(),
            "record {ts} in the restore"
        );
    }
    let r2 = c
        .get(r.url("/api/v1/b/cams/front?ts=4600"))
        .send()
        .await
        .unwrap();
    assert_eq!(r2.status(), 200);
    assert!(r2.bytes().await.unwrap()[..] == crate::tier::payload(4600, 1000)[..]);
}

/// Gives records `from..=to` of `front` a distinct 60 KB label set each (138 MB for 2,300).
async fn relabel_each(c: &reqwest::Client, s: &Server, from: u64, to: u64) {
    for first in (from..=to).step_by(100) {
        let records: Vec<_> = (first..=to.min(first + 99))
            .map(|ts| serde_json::json!({"ts": ts, "labels": big_labels(&format!("{ts}-"))}))
            .collect();
        let n = records.len();
        let r = c
            .patch(s.url("/api/v1/b/cams/front/batch"))
            .json(&serde_json::json!({ "records": records }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        assert_eq!(r.json::<serde_json::Value>().await.unwrap()["done"], n);
    }
}

async fn wait_oversized(c: &reqwest::Client, s: &Server, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while common::metric(c, s, "tsblob_tier_oversized_sidecars").await != n {
        assert!(
            Instant::now() < deadline,
            "never {n} oversized sidecars: {}",
            s.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A local record's new labels go into a new frame (in the open block), so only a block
/// larger than its records' frames could need a sidecar over the bound: here a 256 MiB
/// block whose 2,300 records each got a distinct 60 KB label set (138 MB). It stays local
/// (every record readable, with its labels), is counted, is not offered again, and the
/// next block is tiered all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_whose_sidecar_would_be_over_the_bound_stays_local_and_others_tier() {
    let store = Store::start(Engine::Minio);
    let data = tempfile::tempdir().unwrap();
    let s = serve(data.path(), &tier_args(&store, "sidecars/local", &[]));
    let c = client();
    let settings =
        r#"{"max_block_size": 268435456, "max_block_records": 5000, "tier_local_max": 0}"#;
    create_bucket(&c, &s, "cams", settings).await;
    for ts in 1..=2300u64 {
        assert_eq!(write(&c, &s, "front", ts).await, 201);
    }
    relabel_each(&c, &s, 1, 2300).await;
    // More records until the first two blocks are sealed (a third is written to): the
    // first is turned down, the second tiered. Writing stops there, so no later block can
    // be sealed and tiered before the check (it was written on until one tiered, and a
    // slow tier thread then tiered several at once: CI, 2026-11-28).
    let mut ts = 2300u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while bucket_info(&c, &s).await["block_count"].as_u64() < Some(3) {
        for _ in 0..100 {
            ts += 1;
            assert_eq!(write(&c, &s, "front", ts).await, 201);
        }
        assert!(Instant::now() < deadline, "blocks not sealed");
    }
    loop {
        let info = bucket_info(&c, &s).await;
        if info["tiered_blocks"].as_u64() >= Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "no block tiered: {info}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        common::metric(&c, &s, "tsblob_tier_oversized_sidecars").await,
        1
    );
    assert!(
        s.stderr_contains(
            "stays local: its heads sidecar would be over",
            Duration::from_secs(5)
        ),
        "{}",
        s.stderr_text()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let info = bucket_info(&c, &s).await;
    assert_eq!(info["tiered_blocks"], 1, "{info}");
    assert_eq!(
        common::metric(&c, &s, "tsblob_tier_upload_errors_total").await,
        0
    );
    for ts in [1, 1234, 2300] {
        assert_eq!(
            label(&c, &s, ts, "l3").await.as_deref(),
            big_labels(&format!("{ts}-"))["l3"].as_str(),
            "record {ts}"
        );
        check_record(&c, &s, "front", ts).await;
    }
    check_record(&c, &s, "front", ts).await;
}

/// Tiered records relabelled each with a distinct 60 KB label set: the labels live in the
/// index only, and the block's new sidecar would be over the bound. It is not uploaded
/// (nor retried forever): the sidecar of the last upload that fit stays, so a restore gets
/// every record, with the labels of that upload; the writer keeps the new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_block_relabelled_past_the_bound_keeps_its_last_sidecar() {
    let (store, _data, s) = one_tiered_block("sidecars/tiered", 2300).await;
    let c = client();
    relabel_each(&c, &s, 1, 2300).await;
    wait_oversized(&c, &s, 1).await;
    wait_sidecars(&c, &s).await;
    assert_eq!(
        label(&c, &s, 7, "l0").await.as_deref(),
        big_labels("7-")["l0"].as_str()
    );
    drop(s);
    let fresh = tempfile::tempdir().unwrap();
    let r = restored(&store, "sidecars/tiered", fresh.path());
    // The last upload that fit happened after some of the 100-record batches (at most
    // ~2,230 records' labels fit under the bound): earlier records may have their new
    // labels there, the last ones cannot.
    for ts in [1, 7, 1500, 2300] {
        let got = label(&c, &r, ts, "l0").await;
        let new = big_labels(&format!("{ts}-"))["l0"]
            .as_str()
            .map(str::to_string);
        assert!(got.is_none() || got == new, "record {ts}: {got:?}");
        check_record(&c, &r, "front", ts).await;
    }
    assert_eq!(label(&c, &r, 2300, "l0").await, None);
}
