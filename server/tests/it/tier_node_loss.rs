//! One machine of a distributed object store lost while tsblob tiers into it: SeaweedFS as
//! a master, three volume servers (every chunk on two of them, replication `001`) and a
//! filer with the S3 gateway, one volume server killed with SIGKILL while blocks upload and
//! tiered records are read, then started again.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common;
use crate::tier::{
    bucket_info, check_record, client, create_bucket, health, payload, query, serve, tier_args,
    wait_tiered, write, Engine, Store, SMALL,
};

/// Bytes of volume data (`.dat` files) under a volume server's folder.
fn volume_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|f| f.path().extension().is_some_and(|e| e == "dat"))
                .filter_map(|f| f.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// What one read during the outage got.
#[derive(Debug)]
struct Read {
    ts: u64,
    status: u16,
    code: String,
    took: Duration,
}

/// With one of three volume servers gone (kill -9) while tsblob uploads blocks and reads
/// tiered records: every write is acknowledged (the local disk takes it), every read either
/// answers the right bytes or fails cleanly (503 `tier_unavailable` within
/// `--tier-timeout`, never a hang, never "damaged"), and once the server is back every
/// block is tiered and every record reads back byte-identical, from the writer and from a
/// restore made from the object store alone. With every volume server gone (the gateway
/// up), reads of tiered records answer 503 `tier_unavailable`, not 500 `tier_damaged`.
#[tokio::test(flavor = "multi_thread")]
async fn a_volume_server_killed_during_tiered_uploads_and_reads_loses_nothing_and_reads_recover() {
    let mut store = Store::start(Engine::Seaweedfs);
    let timeout = Duration::from_secs(5);
    let data = tempfile::tempdir().unwrap();
    let args = tier_args(
        &store,
        "nodes",
        &["--tier-timeout", "5s", "--tier-cache", "4KiB"],
    );
    let s = serve(data.path(), &args);
    let c = client();
    create_bucket(&c, &s, "cams", SMALL).await;
    for ts in 1..=40u64 {
        assert_eq!(write(&c, &s, "front", ts).await, 201);
    }
    wait_tiered(&c, &s, 8).await;
    // The volume server holding the most data goes.
    let root = store.peer().root().to_path_buf();
    let victim = (0..3)
        .map(|i| format!("volume{i}"))
        .max_by_key(|v| volume_bytes(&root.join(v)))
        .unwrap();
    assert!(
        volume_bytes(&root.join(&victim)) > 0,
        "no volume server holds data yet"
    );

    // Writes and reads go on throughout; the volume server is killed a second in.
    let url = s.url("");
    let writer = {
        let (c, url) = (c.clone(), url.clone());
        tokio::spawn(async move {
            let mut refused = Vec::new();
            for ts in 41..=200u64 {
                let r = c
                    .post(format!("{url}/api/v1/b/cams/front?ts={ts}"))
                    .header("x-tsblob-label-k", format!("v{}", ts % 3))
                    .body(payload(ts, 1000))
                    .send()
                    .await
                    .unwrap();
                if r.status() != 201 {
                    refused.push((ts, r.status().as_u16()));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            refused
        })
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (c, url, stop) = (c.clone(), url.clone(), stop.clone());
        tokio::spawn(async move {
            let mut reads = Vec::new();
            let mut ts = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ts = ts % 40 + 1;
                let t0 = Instant::now();
                let r = c
                    .get(format!("{url}/api/v1/b/cams/front?ts={ts}"))
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let body = r.bytes().await.unwrap();
                let took = t0.elapsed();
                let code = if status == 200 {
                    assert!(body[..] == payload(ts, 1000)[..], "payload of {ts} differs");
                    String::new()
                } else {
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    v["error"]["code"].as_str().unwrap_or("").to_string()
                };
                reads.push(Read {
                    ts,
                    status,
                    code,
                    took,
                });
            }
            reads
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let uploaded_before = common::metric(&c, &s, "tsblob_tier_uploaded_blocks_total").await;
    store.peer().kill_node(&victim).unwrap();
    let killed = Instant::now();
    let refused = writer.await.unwrap();
    assert!(refused.is_empty(), "writes refused: {refused:?}");
    let uploaded_during =
        common::metric(&c, &s, "tsblob_tier_uploaded_blocks_total").await - uploaded_before;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.await.unwrap();
    let outage = killed.elapsed();

    let ok = reads.iter().filter(|r| r.status == 200).count();
    for r in &reads {
        assert!(
            r.status == 200 || (r.status == 503 && r.code == "tier_unavailable"),
            "a read of record {} failed uncleanly with {victim} down: {r:?}",
            r.ts
        );
        assert!(
            r.took < timeout + Duration::from_secs(3),
            "a read waited past --tier-timeout: {r:?}"
        );
    }
    eprintln!(
        "{victim} down {outage:?}: {} reads, {ok} answered, {} failed cleanly (slowest {:?}); \
         {uploaded_during} uploads while it was down",
        reads.len(),
        reads.len() - ok,
        reads.iter().map(|r| r.took).max()
    );

    // Then every volume server gone, the gateway still up: it answers, but has no data to
    // give. Reads of tiered records fail as an outage (503, within the timeout), not as
    // damage (500 `tier_damaged`, "do not retry") and not by hanging.
    let others: Vec<String> = (0..3)
        .map(|i| format!("volume{i}"))
        .filter(|v| *v != victim)
        .collect();
    for v in &others {
        store.peer().kill_node(v).unwrap();
    }
    let (mut unavailable, mut slowest) = (0, Duration::ZERO);
    let all_down = Instant::now();
    // (Each read waits about a second for the gateway's own retries: ten of them.)
    for ts in (1..=40u64).step_by(4) {
        let t0 = Instant::now();
        let r = c
            .get(s.url(&format!("/api/v1/b/cams/front?ts={ts}")))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = r.bytes().await.unwrap();
        let took = t0.elapsed();
        slowest = slowest.max(took);
        assert!(
            took < timeout + Duration::from_secs(3),
            "record {ts} waited {took:?} with every volume server down"
        );
        match status {
            200 => assert!(body[..] == payload(ts, 1000)[..], "payload of {ts} differs"),
            503 => {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(v["error"]["code"], "tier_unavailable", "record {ts}: {v}");
                unavailable += 1;
            }
            other => panic!(
                "record {ts} answered {other} with every volume server down: {}",
                String::from_utf8_lossy(&body)
            ),
        }
    }
    eprintln!(
        "every volume server down: 10 reads in {:?}, {unavailable} answered 503 (slowest {slowest:?})",
        all_down.elapsed()
    );
    assert!(
        unavailable > 0,
        "every read answered with no volume server up"
    );
    for v in &others {
        store.peer().restart_node(v).unwrap();
    }

    store.peer().restart_node(&victim).unwrap();
    // Uploads catch up: every sealed block goes up.
    let deadline = Instant::now() + Duration::from_secs(60);
    let info = loop {
        let info = bucket_info(&c, &s).await;
        let (blocks, tiered) = (
            info["block_count"].as_u64().unwrap(),
            info["tiered_blocks"].as_u64().unwrap(),
        );
        if tiered + 1 >= blocks {
            break info;
        }
        assert!(Instant::now() < deadline, "uploads never caught up: {info}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(info["record_count"], 200, "{info}");
    for ts in 1..=200u64 {
        check_record(&c, &s, "front", ts).await;
    }
    assert_eq!(health(&c, &s).await["tier"]["status"], "available");

    // Nothing acknowledged is lost in the store either: a restart seals and tiers the last
    // block, and a restore from the object store alone has every record.
    drop(s);
    let s = serve(data.path(), &args);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = bucket_info(&c, &s).await;
        if info["tiered_blocks"] == info["block_count"] {
            break;
        }
        assert!(Instant::now() < deadline, "not everything tiered: {info}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(s);
    let fresh = tempfile::tempdir().unwrap();
    let mut restore = args.clone();
    restore[0] = "--restore-from".into();
    let r = serve(fresh.path(), &restore);
    let got: Vec<u64> = query(&c, &r, "front")
        .await
        .iter()
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(got, (1..=200).collect::<Vec<u64>>());
    for ts in [1u64, 77, 150, 200] {
        check_record(&c, &r, "front", ts).await;
    }
}
