//! Label updates (PATCH) of tiered records against real S3 engines (MinIO, SeaweedFS: each
//! test once against each): the new labels are read
//! back at once, survive a restart, a `--restore-from` into a new folder and reach a read
//! replica; two clients updating one tiered record, updates while blocks upload, and a
//! kill -9 between the index commit and the sidecar's upload end with the object store
//! agreeing with the writer.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{self, Server};
use crate::tier::{
    bucket_info, check_record, client, create_bucket, on_each_engine, serve, tier_args,
    wait_tiered, write, Engine, Store, PASSWORD, SMALL, USER,
};

/// PATCHes the labels of `ts`; returns the status.
async fn patch(c: &reqwest::Client, s: &Server, ts: u64, labels: &str) -> u16 {
    let r = c
        .patch(s.url(&format!("/api/v1/b/cams/front?ts={ts}")))
        .body(format!(r#"{{"labels": {labels}}}"#))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    if status != 200 {
        panic!("PATCH {ts}: {status} {}", r.text().await.unwrap());
    }
    status
}

/// The `x-tsblob-label-<key>` of record `ts` (HEAD), `None` when it has no such label.
pub(crate) async fn label(c: &reqwest::Client, s: &Server, ts: u64, key: &str) -> Option<String> {
    let r = c
        .head(s.url(&format!("/api/v1/b/cams/front?ts={ts}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "HEAD {ts}");
    r.headers()
        .get(format!("x-tsblob-label-{key}"))
        .map(|v| v.to_str().unwrap().to_string())
}

/// Waits until no heads sidecar waits to be uploaded again.
pub(crate) async fn wait_sidecars(c: &reqwest::Client, s: &Server) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while common::metric(c, s, "tsblob_tier_pending_sidecars").await != 0 {
        assert!(Instant::now() < deadline, "sidecars never went up again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A new data folder restored from `prefix`, served (tiering on into the same prefix).
pub(crate) fn restored(store: &Store, prefix: &str, data: &Path) -> Server {
    let mut a = tier_args(store, prefix, &[]);
    a[0] = "--restore-from".into();
    serve(data, &a)
}

async fn labels_of_tiered_records_change_and_reach_restores_and_replicas(engine: Engine) {
    let store = Store::start(engine);
    let data = tempfile::tempdir().unwrap();
    let args = tier_args(&store, "lab/one", &[]);
    let s = serve(data.path(), &args);
    let c = client();
    create_bucket(&c, &s, "cams", SMALL).await;
    for ts in 1..=24u64 {
        assert_eq!(write(&c, &s, "front", ts).await, 201);
    }
    wait_tiered(&c, &s, 5).await;
    // A replica of the prefix, before the updates: it must pick them up on refresh.
    let rdata = tempfile::tempdir().unwrap();
    let replica = serve(
        rdata.path(),
        &[
            "--read-replica".into(),
            "s3://tsblob-tier/lab/one".into(),
            "--tier-endpoint".into(),
            store.endpoint(),
            "--replica-refresh".into(),
            "200ms".into(),
        ],
    );
    assert_eq!(label(&c, &replica, 2, "k").await.as_deref(), Some("v2"));

    // Record 2 is in the first block: tiered by now.
    assert_eq!(
        patch(&c, &s, 2, r#"{"k": "changed", "new": "x"}"#).await,
        200
    );
    assert_eq!(label(&c, &s, 2, "k").await.as_deref(), Some("changed"));
    assert_eq!(label(&c, &s, 2, "new").await.as_deref(), Some("x"));
    // Removing a label (null) works the same way.
    assert_eq!(patch(&c, &s, 3, r#"{"k": null}"#).await, 200);
    assert_eq!(label(&c, &s, 3, "k").await, None);
    // The payload is untouched (it is still read from the object store).
    let r = c
        .get(s.url("/api/v1/b/cams/front?ts=2"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.bytes().await.unwrap()[..] == crate::tier::payload(2, 1000)[..]);
    wait_sidecars(&c, &s).await;

    // The replica sees the new labels once it refreshes.
    let deadline = Instant::now() + Duration::from_secs(20);
    while label(&c, &replica, 2, "k").await.as_deref() != Some("changed") {
        assert!(
            Instant::now() < deadline,
            "the replica never saw the update"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(label(&c, &replica, 3, "k").await, None);
    check_record(&c, &replica, "front", 5).await;

    // A restart keeps them (the index is the truth for labels).
    drop(s);
    let s = serve(data.path(), &args);
    assert_eq!(label(&c, &s, 2, "k").await.as_deref(), Some("changed"));
    drop(s);
    // A restore into a new folder gets them from the sidecars.
    let fresh = tempfile::tempdir().unwrap();
    let r = restored(&store, "lab/one", fresh.path());
    assert_eq!(label(&c, &r, 2, "k").await.as_deref(), Some("changed"));
    assert_eq!(label(&c, &r, 2, "new").await.as_deref(), Some("x"));
    assert_eq!(label(&c, &r, 3, "k").await, None);
    assert_eq!(label(&c, &r, 4, "k").await.as_deref(), Some("v1"));
}

async fn concurrent_updates_and_updates_during_uploads_leave_the_store_agreeing(engine: Engine) {
    let store = Store::start(engine);
    let data = tempfile::tempdir().unwrap();
    let args = tier_args(&store, "lab/race", &[]);
    let s = serve(data.path(), &args);
    let c = client();
    create_bucket(&c, &s, "cams", SMALL).await;
    for ts in 1..=8u64 {
        assert_eq!(write(&c, &s, "front", ts).await, 201);
    }
    wait_tiered(&c, &s, 1).await;
    // Two clients update one tiered record 20 times each, at once.
    let url = s.url("/api/v1/b/cams/front?ts=1");
    let mut tasks = Vec::new();
    for who in ["a", "b"] {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let r = c
                    .patch(&url)
                    .body(format!(
                        r#"{{"labels": {{"who": "{who}", "{who}": "{i}"}}}}"#
                    ))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
            }
        }));
    }
    // Meanwhile, new records are written and updated while their blocks seal and upload.
    for ts in 9..=40u64 {
        assert_eq!(write(&c, &s, "front", ts).await, 201);
        let r = c
            .patch(s.url(&format!("/api/v1/b/cams/front?ts={}", ts - 1)))
            .body(format!(r#"{{"labels": {{"gen": "{ts}"}}}}"#))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Both clients' last updates are there (each set its own key), and who is one of them.
    assert_eq!(label(&c, &s, 1, "a").await.as_deref(), Some("19"));
    assert_eq!(label(&c, &s, 1, "b").await.as_deref(), Some("19"));
    let who = label(&c, &s, 1, "who").await.unwrap();
    // Everything tiers; the object store then holds what the writer answers.
    let n = bucket_info(&c, &s).await["block_count"].as_u64().unwrap();
    wait_tiered(&c, &s, n.saturating_sub(2)).await;
    wait_sidecars(&c, &s).await;
    let mut expected = Vec::new();
    for ts in 1..=39u64 {
        expected.push((label(&c, &s, ts, "gen").await, label(&c, &s, ts, "k").await));
    }
    drop(s);
    let fresh = tempfile::tempdir().unwrap();
    let r = restored(&store, "lab/race", fresh.path());
    assert_eq!(label(&c, &r, 1, "who").await, Some(who));
    assert_eq!(label(&c, &r, 1, "a").await.as_deref(), Some("19"));
    for ts in 1..=39u64 {
        // Records of blocks still local on the writer are not in the object store yet.
        let h = c
            .head(r.url(&format!("/api/v1/b/cams/front?ts={ts}")))
            .send()
            .await
            .unwrap();
        if h.status() == 404 {
            continue;
        }
        let got = (label(&c, &r, ts, "gen").await, label(&c, &r, ts, "k").await);
        assert_eq!(
            got,
            expected[(ts - 1) as usize],
            "labels of {ts} after restore"
        );
    }
}

async fn a_kill_between_the_label_commit_and_the_sidecar_upload_loses_nothing(engine: Engine) {
    let store = Store::start(engine);
    let c = client();
    // Aborts (as kill -9 would leave it) right after the index commit of a label update,
    // before anything goes to the object store; and before that commit, after the note.
    for (step, expected) in [
        ("tier-label-committed", "after-crash"),
        ("tier-label-noted", "v1"),
    ] {
        let data = tempfile::tempdir().unwrap();
        let prefix = format!("lab/{step}");
        let args = tier_args(&store, &prefix, &[]);
        let s = serve(data.path(), &args);
        create_bucket(&c, &s, "cams", SMALL).await;
        for ts in 1..=8u64 {
            assert_eq!(write(&c, &s, "front", ts).await, 201);
        }
        wait_tiered(&c, &s, 1).await;
        drop(s);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut s = Server::start_in_env(
            data.path(),
            &a,
            &[
                ("AWS_ACCESS_KEY_ID", USER),
                ("AWS_SECRET_ACCESS_KEY", PASSWORD),
                ("TSBLOB_CRASH_AT", step),
            ],
        );
        let r = c
            .patch(s.url("/api/v1/b/cams/front?ts=1"))
            .body(r#"{"labels": {"k": "after-crash"}}"#)
            .send()
            .await;
        assert!(r.is_err() || r.unwrap().status() != 200, "{step}");
        assert!(
            s.wait(Duration::from_secs(10)).is_some(),
            "no crash at {step}"
        );
        // Committed or not, the restarted server and the object store agree: the note
        // makes it upload the sidecar from the index.
        let s = serve(data.path(), &args);
        assert_eq!(
            label(&c, &s, 1, "k").await.as_deref(),
            Some(expected),
            "{step}"
        );
        wait_sidecars(&c, &s).await;
        drop(s);
        let fresh = tempfile::tempdir().unwrap();
        let r = restored(&store, &prefix, fresh.path());
        assert_eq!(
            label(&c, &r, 1, "k").await.as_deref(),
            Some(expected),
            "{step}"
        );
        check_record(&c, &r, "front", 2).await;
    }
}

// The tests above that take an engine, once against each.
on_each_engine!(
    labels_of_tiered_records_change_and_reach_restores_and_replicas,
    concurrent_updates_and_updates_during_uploads_leave_the_store_agreeing,
    a_kill_between_the_label_commit_and_the_sidecar_upload_loses_nothing,
);
