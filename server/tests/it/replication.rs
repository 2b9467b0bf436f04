//! Replication (issue 13) between two real `tsblob serve` processes, through a TCP proxy
//! that cuts, stalls and slows the link, with kill -9 of either side. After every scenario
//! the destination must hold exactly the matching records, byte-identical (payload,
//! content type, labels), none twice.
#![allow(clippy::unwrap_used)]

use crate::common;
use crate::replication_util;

use std::time::Duration;

use common::Server;
use replication_util::proxy::{Mode, Proxy};
use replication_util::*;
use reqwest::Method;
use serde_json::json;

/// The records of `dump` that a task with these entries and condition replicates.
fn matching(
    dump: &Dump,
    entry_ok: impl Fn(&str) -> bool,
    keep: impl Fn(&tsblob_storage::Labels) -> bool,
) -> Dump {
    dump.iter()
        .filter(|((e, _), (_, l, _))| entry_ok(e) && keep(l))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Entry globs and a `when` condition select what is sent; out-of-order timestamps (older
/// than what was already replicated) are not missed; content types and labels arrive as
/// written; `from` backfills older records; the token is never echoed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_records_arrive_byte_identical_including_late_timestamps() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src_s, dst_s) = (start(d1.path()), start(d2.path()));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("edge", json!({})).await;
    dst.create_bucket("cloud", json!({})).await;
    // Written before the task: only the backfilling task sends them.
    let old: Vec<_> = (1..=20u64)
        .map(|ts| {
            (
                ts,
                "text/plain",
                labels(&[("keep", "yes")]),
                payload("cam/front", ts, 300, true),
            )
        })
        .collect();
    src.write("edge", "cam/front", &old).await.unwrap();

    let mut spec = task_spec("edge", &dst_s.url(""), "cloud");
    spec["entries"] = json!(["cam/*"]);
    spec["when"] = json!({"&keep": {"$eq": "yes"}});
    spec["dst_token"] = json!("not-needed-but-secret");
    let (s, v) = src.put_task("t", spec.clone()).await;
    assert_eq!(s, 201, "{v}");
    assert!(
        !v.to_string().contains("not-needed-but-secret"),
        "the token was echoed: {v}"
    );
    assert_eq!(v["settings"]["dst_token_set"], json!(true));

    for round in 0..3u64 {
        for entry in ["cam/front", "cam/rear", "imu"] {
            let recs: Vec<_> = (0..50u64)
                .map(|i| {
                    // Each round writes timestamps *below* the previous round's.
                    let ts = 1_000_000 - round * 10_000 + i * 7;
                    let keep = if i % 3 == 0 { "no" } else { "yes" };
                    let ct = if i % 2 == 0 {
                        "image/jpeg"
                    } else {
                        "application/json"
                    };
                    (
                        ts,
                        ct,
                        labels(&[("keep", keep), ("i", &i.to_string())]),
                        payload(entry, ts, 100 + i as usize * 37, i % 4 == 0),
                    )
                })
                .collect();
            assert!(src
                .write("edge", entry, &recs)
                .await
                .unwrap()
                .iter()
                .all(|s| *s == 201));
        }
        src.wait_caught_up("t", Duration::from_secs(30)).await;
    }
    let want = matching(
        &src.dump("edge").await,
        |e| e.starts_with("cam/"),
        |l| l["keep"] == "yes",
    );
    // Without `from`, the records written before the task stay behind.
    let new: Dump = want
        .iter()
        .filter(|((_, ts), _)| *ts > 20)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(new.len(), want.len() - 20);
    assert_same(&new, &dst.dump("cloud").await);

    // A second task with `from` backfills them (and finds the rest already there: 200s).
    let mut spec2 = task_spec("edge", &dst_s.url(""), "cloud");
    spec2["from"] = json!(0);
    spec2["entries"] = json!(["cam/*"]);
    spec2["when"] = json!({"&keep": {"$eq": "yes"}});
    let (s, v) = src.put_task("backfill", spec2).await;
    assert_eq!(s, 201, "{v}");
    let v = src
        .wait_caught_up("backfill", Duration::from_secs(30))
        .await;
    let got = dst.dump("cloud").await;
    assert_same(&want, &got);
    assert_eq!(v["status"]["sent_records"], json!(20), "{v}");
    assert!(v["status"]["existing_records"].as_u64().unwrap() > 0, "{v}");

    // Listing, metrics, removal.
    let (s, list) = src.json(Method::GET, "/api/v1/replications", None).await;
    assert_eq!(s, 200);
    assert_eq!(list["replications"].as_array().unwrap().len(), 2);
    let m = src.metrics().await;
    assert!(
        m.contains("tsblob_replication_sent_records_total{task=\"t\"}"),
        "{m}"
    );
    let (s, _) = src
        .json(Method::DELETE, "/api/v1/replications/backfill", None)
        .await;
    assert_eq!(s, 200);
    let (s, v) = src
        .json(Method::GET, "/api/v1/replications/backfill", None)
        .await;
    assert_eq!(s, 404, "{v}");
    assert_eq!(v["error"]["code"], json!("replication_not_found"));
}

/// Cuts, stalls and a slow link between the servers while records are written: the
/// destination ends with exactly the source's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_cut_stalled_and_slowed_loses_and_duplicates_nothing() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src_s, dst_s) = (start(d1.path()), start(d2.path()));
    let proxy = Proxy::start(&addr_of(&dst_s.url("")));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("b", json!({})).await;
    dst.create_bucket("b", json!({})).await;
    let (s, v) = src.put_task("t", task_spec("b", &proxy.url(), "b")).await;
    assert_eq!(s, 201, "{v}");
    let mut ts = 1u64;
    let mut write = |n: u64, len: usize| {
        let recs: Vec<_> = (0..n)
            .map(|_| {
                ts += 1;
                (
                    ts,
                    "application/octet-stream",
                    labels(&[]),
                    payload("e", ts, len, false),
                )
            })
            .collect();
        recs
    };
    for (mode, pause) in [
        (Mode::Cut, 1500),
        (Mode::Stall, 4000), // longer than the sender's 3 s timeout
        (Mode::Slow(200_000), 2000),
        (Mode::Cut, 800),
    ] {
        src.write("b", "e", &write(100, 4000)).await.unwrap();
        proxy.set(mode);
        src.write("b", "e", &write(100, 4000)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(pause)).await;
        proxy.set(Mode::Pass);
    }
    let v = src.wait_caught_up("t", Duration::from_secs(60)).await;
    assert_same(&src.dump("b").await, &dst.dump("b").await);
    assert!(
        v["status"]["errors"].as_u64().unwrap() > 0,
        "the faults were not seen: {v}"
    );
    assert!(v["status"]["last_error"]["message"].is_string(), "{v}");
    // Recovered: the last error is history, older than the last delivery (bug "replication
    // ls keeps the old last_error after the task recovers": nothing told the two apart).
    assert!(
        v["status"]["last_sent_at"].as_u64() > v["status"]["last_error"]["at"].as_u64(),
        "{v}"
    );
}

/// kill -9 of the source while it replicates (and while clients write): after a restart
/// on the same folder the task resumes from its durable position, and the destination
/// holds exactly the source's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_killed_mid_transfer_resumes_without_loss_or_duplicates() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let dst_s = start(d2.path());
    let proxy = Proxy::start(&addr_of(&dst_s.url("")));
    let dst = Api::new(&dst_s.url(""), None);
    dst.create_bucket("b", json!({})).await;
    let mut src_s = start(d1.path());
    let src = Api::new(&src_s.url(""), None);
    src.create_bucket("b", json!({})).await;
    let (s, _) = src.put_task("t", task_spec("b", &proxy.url(), "b")).await;
    assert_eq!(s, 201);
    // A slow link keeps a backlog in flight when the kill comes.
    proxy.set(Mode::Slow(300_000));
    for k in 0..10u64 {
        let recs: Vec<_> = (0..100u64)
            .map(|i| {
                let ts = 1 + k * 100 + i;
                (
                    ts,
                    "text/plain",
                    labels(&[("k", &k.to_string())]),
                    payload("e", ts, 2000, false),
                )
            })
            .collect();
        src.write("b", "e", &recs).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = dst.dump("b").await.len();
    assert!(
        before < 1000,
        "everything was sent before the kill ({before})"
    );
    src_s.kill9();
    proxy.set(Mode::Pass);
    let src_s = start(d1.path());
    let src = Api::new(&src_s.url(""), None);
    // Writes after the restart are replicated too.
    let recs: Vec<_> = (0..50u64)
        .map(|i| {
            (
                5000 + i,
                "text/plain",
                labels(&[]),
                payload("e", 5000 + i, 500, true),
            )
        })
        .collect();
    src.write("b", "e", &recs).await.unwrap();
    src.wait_caught_up("t", Duration::from_secs(60)).await;
    let want = src.dump("b").await;
    assert_eq!(want.len(), 1050);
    assert_same(&want, &dst.dump("b").await);
}

/// kill -9 of the destination mid-transfer, then minutes' worth of retries compressed to
/// seconds: it comes back on another port (the proxy follows it) and the task catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destination_killed_mid_transfer_is_caught_up_after_restart() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src_s = start(d1.path());
    let mut dst_s = start(d2.path());
    let proxy = Proxy::start(&addr_of(&dst_s.url("")));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("b", json!({})).await;
    dst.create_bucket("b", json!({})).await;
    let (s, _) = src.put_task("t", task_spec("b", &proxy.url(), "b")).await;
    assert_eq!(s, 201);
    proxy.set(Mode::Slow(300_000));
    for k in 0..8u64 {
        let recs: Vec<_> = (0..100u64)
            .map(|i| {
                let ts = 1 + k * 100 + i;
                (
                    ts,
                    "text/plain",
                    labels(&[]),
                    payload("a/b", ts, 3000, false),
                )
            })
            .collect();
        src.write("b", "a/b", &recs).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    dst_s.kill9();
    // Writes keep being acknowledged while the destination is dead.
    let recs: Vec<_> = (0..100u64)
        .map(|i| {
            (
                10_000 + i,
                "text/plain",
                labels(&[]),
                payload("a/b", 10_000 + i, 1000, true),
            )
        })
        .collect();
    assert!(src
        .write("b", "a/b", &recs)
        .await
        .unwrap()
        .iter()
        .all(|s| *s == 201));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let v = src.task("t").await;
    assert!(v["status"]["pending_records"].as_u64().unwrap() > 0, "{v}");
    assert!(
        v["status"]["oldest_pending_age_s"].as_f64().unwrap() > 0.5,
        "{v}"
    );
    let dst_s = start(d2.path());
    proxy.retarget(&addr_of(&dst_s.url("")));
    proxy.set(Mode::Pass);
    let dst = Api::new(&dst_s.url(""), None);
    src.wait_caught_up("t", Duration::from_secs(60)).await;
    let want = src.dump("b").await;
    assert_eq!(want.len(), 900);
    assert_same(&want, &dst.dump("b").await);
}

/// FIFO pressure at the source while the destination is unreachable: records evicted
/// before they were sent are counted in `evicted_before_sent` (and the metric), every
/// record sent arrives intact, and sent + evicted = written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_evictions_before_sending_are_counted_not_skipped_silently() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src_s, dst_s) = (start(d1.path()), start(d2.path()));
    let proxy = Proxy::start(&addr_of(&dst_s.url("")));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket(
        "b",
        json!({"quota_type": "FIFO", "quota_size": 400_000, "max_block_size": 50_000}),
    )
    .await;
    dst.create_bucket("b", json!({})).await;
    let (s, _) = src.put_task("t", task_spec("b", &proxy.url(), "b")).await;
    assert_eq!(s, 201);
    proxy.set(Mode::Cut);
    let mut written = std::collections::BTreeMap::new();
    for k in 0..20u64 {
        let recs: Vec<_> = (0..50u64)
            .map(|i| {
                let ts = 1 + k * 50 + i;
                (
                    ts,
                    "application/octet-stream",
                    labels(&[]),
                    payload("e", ts, 1000, false),
                )
            })
            .collect();
        for r in &recs {
            written.insert(r.0, r.3.clone());
        }
        src.write("b", "e", &recs).await.unwrap();
    }
    let kept = src.dump("b").await.len();
    assert!(kept < 1000, "the quota evicted nothing");
    proxy.set(Mode::Pass);
    let v = src.wait_caught_up("t", Duration::from_secs(60)).await;
    let got = dst.dump("b").await;
    let evicted = v["status"]["evicted_before_sent"].as_u64().unwrap();
    assert_eq!(got.len() as u64 + evicted, 1000, "{v}");
    for ((_, ts), (_, _, data)) in &got {
        assert_eq!(&written[ts], data, "record {ts} differs");
    }
    let m = src.metrics().await;
    assert!(
        m.contains(&format!(
            "tsblob_replication_evicted_before_sent_total{{task=\"t\"}} {evicted}"
        )),
        "{m}"
    );
}

/// A destination token that may write one bucket only: the task to that bucket delivers,
/// a task to another bucket gets 403s (reported, retried, nothing written). The source's
/// replication routes are admin-only. A different record already at the destination is a
/// conflict, reported and never overwritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_destination_token_admin_only_routes_and_conflicts() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src_s = Server::start_in(d1.path(), &[FAST_RETRY, &["--token", "src-admin"]].concat());
    let dst_s = Server::start_in(d2.path(), &[FAST_RETRY, &["--token", "dst-admin"]].concat());
    let src = Api::new(&src_s.url(""), Some("src-admin"));
    let dst = Api::new(&dst_s.url(""), Some("dst-admin"));
    src.create_bucket("b", json!({})).await;
    for b in ["allowed", "other"] {
        dst.create_bucket(b, json!({})).await;
    }
    let (s, tok) = dst
        .json(
            Method::POST,
            "/api/v1/tokens/edge",
            Some(json!({"write": ["allowed"]})),
        )
        .await;
    assert_eq!(s, 201, "{tok}");
    let value = tok["value"].as_str().unwrap().to_string();
    // A different record already at the destination.
    dst.write(
        "allowed",
        "e",
        &[(3, "text/plain", labels(&[]), b"cloud's own".to_vec())],
    )
    .await
    .unwrap();

    // Non-admin tokens may not manage tasks.
    let (s, reader) = src
        .json(
            Method::POST,
            "/api/v1/tokens/reader",
            Some(json!({"read": ["*"], "write": ["b"]})),
        )
        .await;
    assert_eq!(s, 201);
    let weak = Api::new(&src_s.url(""), reader["value"].as_str());
    let (s, v) = weak.json(Method::GET, "/api/v1/replications", None).await;
    assert_eq!(s, 403, "{v}");
    let mut ok = task_spec("b", &dst_s.url(""), "allowed");
    ok["dst_token"] = json!(value);
    let (s, v) = weak.put_task("ok", ok.clone()).await;
    assert_eq!(s, 403, "{v}");

    let (s, v) = src.put_task("ok", ok).await;
    assert_eq!(s, 201, "{v}");
    assert!(!v.to_string().contains(&value), "token echoed");
    let mut denied = task_spec("b", &dst_s.url(""), "other");
    denied["dst_token"] = json!(value);
    let (s, _) = src.put_task("denied", denied).await;
    assert_eq!(s, 201);
    let recs: Vec<_> = (1..=30u64)
        .map(|ts| {
            (
                ts,
                "text/plain",
                labels(&[("n", &ts.to_string())]),
                payload("e", ts, 700, true),
            )
        })
        .collect();
    src.write("b", "e", &recs).await.unwrap();
    // A record over the sender's 4 MiB inline bound goes alone (a single-record POST with
    // if_exists=compare): write permission is enough for it too.
    let large = (
        31,
        "image/jpeg",
        labels(&[("n", "31")]),
        payload("e", 31, 5 << 20, false),
    );
    src.write("b", "e", &[large]).await.unwrap();
    let v = src.wait_caught_up("ok", Duration::from_secs(30)).await;
    assert_eq!(v["status"]["conflicts"], json!(1), "{v}");
    assert!(
        v["status"]["last_conflict"]["message"]
            .as_str()
            .unwrap()
            .contains("timestamp 3"),
        "{v}"
    );
    let mut want = src.dump("b").await;
    let theirs = want.get_mut(&("e".to_string(), 3)).unwrap();
    *theirs = ("text/plain".into(), labels(&[]), b"cloud's own".to_vec());
    assert_same(&want, &dst.dump("allowed").await);

    // The denied task's refusal is reported (it retries): its records stay pending.
    let v = wait_error(&src, "denied", |m| m.contains("403")).await;
    assert_eq!(v["status"]["pending_records"], json!(31), "{v}");
    assert!(dst.dump("other").await.is_empty());
}

fn cli(url: &str, args: &[&str]) -> (bool, String) {
    let mut all = vec!["replication"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--url", url, "--token", "admin"]);
    tsblob_cli(&all)
}

/// The CLI drives the task API: create (paused, with a token that is then never shown),
/// status, resume (the paused backlog is sent), pause, ls, rm; errors are the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_creates_pauses_resumes_and_removes_tasks() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src_s = Server::start_in(d1.path(), &[FAST_RETRY, &["--token", "admin"]].concat());
    let dst_s = start(d2.path());
    let src = Api::new(&src_s.url(""), Some("admin"));
    let dst = Api::new(&dst_s.url(""), None);
    src.create_bucket("b", json!({})).await;
    dst.create_bucket("c", json!({})).await;
    let url = src_s.url("");
    let (ok, out) = cli(
        &url,
        &[
            "create",
            "t",
            "b",
            &dst_s.url(""),
            "c",
            "--paused",
            "--entries",
            "x/*",
            "--dst-token",
            "s3cret",
        ],
    );
    assert!(ok, "{out}");
    let recs: Vec<_> = (1..=10u64)
        .map(|ts| (ts, "text/plain", labels(&[]), payload("x/y", ts, 100, true)))
        .collect();
    src.write("b", "x/y", &recs).await.unwrap();
    src.write("b", "other", &recs).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ok, out) = cli(&url, &["status", "t", "--json"]);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"]["phase"], json!("paused"), "{v}");
    assert_eq!(v["status"]["pending_records"], json!(10), "{v}");
    assert!(!out.contains("s3cret"));
    assert!(dst.dump("c").await.is_empty());
    let (ok, out) = cli(&url, &["resume", "t"]);
    assert!(ok, "{out}");
    src.wait_caught_up("t", Duration::from_secs(30)).await;
    let want = matching(&src.dump("b").await, |e| e == "x/y", |_| true);
    assert_same(&want, &dst.dump("c").await);
    // The token survived the pause/resume round trip (kept when a PUT gives none).
    assert_eq!(
        src.task("t").await["settings"]["dst_token_set"],
        json!(true)
    );
    let (ok, out) = cli(&url, &["pause", "t"]);
    assert!(ok, "{out}");
    let (ok, out) = cli(&url, &["ls"]);
    assert!(ok && out.contains("paused"), "{out}");
    let (ok, out) = cli(&url, &["rm", "t"]);
    assert!(ok, "{out}");
    let (ok, out) = cli(&url, &["rm", "t"]);
    assert!(!ok && out.contains("replication_not_found"), "{out}");
}

/// The index (and with it the change feed and the task's position) is lost: the server
/// rebuilds it from the blocks, the task notices its feed reader is gone, sends again
/// everything it selects (the destination counts what it has as existing) and keeps
/// replicating new writes. Nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_index_resends_everything_the_task_selects() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let dst_s = start(d2.path());
    let dst = Api::new(&dst_s.url(""), None);
    dst.create_bucket("b", json!({})).await;
    let mut src_s = start(d1.path());
    let src = Api::new(&src_s.url(""), None);
    src.create_bucket("b", json!({})).await;
    let (s, _) = src.put_task("t", task_spec("b", &dst_s.url(""), "b")).await;
    assert_eq!(s, 201);
    let recs: Vec<_> = (1..=100u64)
        .map(|ts| (ts, "text/plain", labels(&[]), payload("e", ts, 800, false)))
        .collect();
    src.write("b", "e", &recs).await.unwrap();
    src.wait_caught_up("t", Duration::from_secs(30)).await;
    // Paused while the index goes: these records are in the lost feed only.
    let mut paused = task_spec("b", &dst_s.url(""), "b");
    paused["mode"] = json!("paused");
    src.put_task("t", paused).await;
    let more: Vec<_> = (101..=150u64)
        .map(|ts| (ts, "text/plain", labels(&[]), payload("e", ts, 800, false)))
        .collect();
    src.write("b", "e", &more).await.unwrap();
    src_s.signal_term();
    assert!(src_s.wait(Duration::from_secs(30)).is_some());
    std::fs::remove_dir_all(d1.path().join("index")).unwrap();
    let src_s = start(d1.path());
    let src = Api::new(&src_s.url(""), None);
    src.put_task("t", task_spec("b", &dst_s.url(""), "b")).await;
    let v = src.wait_caught_up("t", Duration::from_secs(30)).await;
    assert_same(&src.dump("b").await, &dst.dump("b").await);
    assert_eq!(v["status"]["existing_records"], json!(100), "{v}");
}

/// Bug (the new-user walkthrough of 2026-11-28): a task into a bucket the tsblob destination
/// does not have was accepted and failed every attempt, for ever, with "bucket does not
/// exist: create it first" (a ReductStore destination had its bucket made). The sender
/// makes it, with the destination's defaults, as ReductStore's replication does: batches
/// and records sent alone (over the batch limit) both arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_into_a_missing_destination_bucket_failed_for_ever() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src_s, dst_s) = (start(d1.path()), start(d2.path()));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("edge", json!({})).await;
    let small: Vec<_> = (1..=30u64)
        .map(|ts| (ts, "text/plain", labels(&[]), payload("cam", ts, 200, true)))
        .collect();
    src.write("edge", "cam", &small).await.unwrap();
    // A record over 4 MiB goes alone, streamed: into its own missing bucket.
    let big = vec![(
        1u64,
        "application/octet-stream",
        labels(&[]),
        vec![7u8; 5 << 20],
    )];
    src.write("edge", "big", &big).await.unwrap();
    let mut spec = task_spec("edge", &dst_s.url(""), "cloud");
    spec["entries"] = json!(["cam"]);
    spec["from"] = json!(0);
    let (s, v) = src.put_task("t", spec).await;
    assert_eq!(s, 201, "{v}");
    let mut spec = task_spec("edge", &dst_s.url(""), "cloud2");
    spec["entries"] = json!(["big"]);
    spec["from"] = json!(0);
    let (s, v) = src.put_task("t2", spec).await;
    assert_eq!(s, 201, "{v}");
    src.wait_caught_up("t", Duration::from_secs(30)).await;
    src.wait_caught_up("t2", Duration::from_secs(30)).await;
    let want = matching(&src.dump("edge").await, |e| e == "cam", |_| true);
    assert_eq!(dst.dump("cloud").await, want);
    let want = matching(&src.dump("edge").await, |e| e == "big", |_| true);
    assert_eq!(dst.dump("cloud2").await, want);
}

/// Bug (docs walkthrough of 2026-11-29): a task whose destination token may write a bucket
/// that does not exist there, but not create buckets, reported only "bucket does not
/// exist: create it first"; the 403 of the creation it tried was in the source's log alone.
/// Both go into `last_error`, for batches and for a record sent alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_the_destination_token_could_not_create_was_reported_as_missing() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src_s = start(d1.path());
    let dst_s = Server::start_in(d2.path(), &[FAST_RETRY, &["--token", "dst-admin"]].concat());
    let src = Api::new(&src_s.url(""), None);
    let dst = Api::new(&dst_s.url(""), Some("dst-admin"));
    let (s, tok) = dst
        .json(
            Method::POST,
            "/api/v1/tokens/edge",
            Some(json!({"write": ["cloud", "cloud2"]})),
        )
        .await;
    assert_eq!(s, 201, "{tok}");
    src.create_bucket("edge", json!({})).await;
    let small: Vec<_> = (1..=5u64)
        .map(|ts| (ts, "text/plain", labels(&[]), payload("cam", ts, 200, true)))
        .collect();
    src.write("edge", "cam", &small).await.unwrap();
    let big = vec![(
        1u64,
        "application/octet-stream",
        labels(&[]),
        vec![7u8; 5 << 20],
    )];
    src.write("edge", "big", &big).await.unwrap();
    for (task, entry, bucket) in [("t", "cam", "cloud"), ("t2", "big", "cloud2")] {
        let mut spec = task_spec("edge", &dst_s.url(""), bucket);
        spec["entries"] = json!([entry]);
        spec["from"] = json!(0);
        spec["dst_token"] = tok["value"].clone();
        let (s, v) = src.put_task(task, spec).await;
        assert_eq!(s, 201, "{v}");
        let v = wait_error(&src, task, |m| m.contains("creating it was answered 403")).await;
        let m = v["status"]["last_error"]["message"].as_str().unwrap();
        assert!(m.contains("does not exist"), "{m}");
    }
    let (s, _) = dst.json(Method::GET, "/api/v1/b/cloud", None).await;
    assert_eq!(s, 404);
}

/// Bug (kill -9 probe of 2026-11-29, R1): a start that repaired the task file (a task
/// following its renamed source bucket) and could not write it, on a full disk, failed:
/// "starting the replication tasks: the server's disk is full", so the server whose API
/// frees the disk did not come up. The file cannot be written here because a folder holds
/// the name of its temporary file. The start goes on, the task follows the rename, and the
/// file is written once it can be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_file_the_start_could_not_write_kept_the_server_down() {
    let d = tempfile::tempdir().unwrap();
    let mut s = start(d.path());
    let api = Api::new(&s.url(""), None);
    api.create_bucket("a", json!({})).await;
    let (st, v) = api
        .put_task("t", task_spec("a", "http://127.0.0.1:9", "cloud"))
        .await;
    assert_eq!(st, 201, "{v}");
    let blocker = d.path().join(".replications.tmp");
    std::fs::create_dir(&blocker).unwrap();
    let (st, v) = api
        .json(
            Method::PUT,
            "/api/v1/b/a/rename",
            Some(json!({"new_name": "b"})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    s.kill9();
    let s = start(d.path());
    let api = Api::new(&s.url(""), None);
    let v = api.task("t").await;
    assert_eq!(v["settings"]["src_bucket"], json!("b"), "{v}");
    assert!(
        s.stderr_contains(
            "cannot save the tasks repaired at start",
            Duration::from_secs(5)
        ),
        "{}",
        s.stderr_text()
    );
    std::fs::remove_dir(&blocker).unwrap();
    let (st, v) = api
        .put_task("t2", task_spec("b", "http://127.0.0.1:9", "cloud"))
        .await;
    assert_eq!(st, 201, "{v}");
    let file = std::fs::read_to_string(d.path().join("replications")).unwrap();
    assert!(file.contains("\"src_bucket\": \"b\""), "{file}");
    assert!(!file.contains("\"src_bucket\": \"a\""), "{file}");
}
