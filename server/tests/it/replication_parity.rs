//! Replication parity with ReductStore 1.21 (issue 28) between real `tsblob serve`
//! processes: the `disabled` mode, `!` exclusions in entry patterns, a destination entry
//! prefix, `$limit` counted per entry, compression on the wire, tasks that follow a bucket
//! rename, and ReductStore destinations (batch protocol v1) that answer slowly or endlessly.
#![allow(clippy::unwrap_used)]

use crate::common;
use crate::outbound_util::{Answer, Hostile};
use crate::replication_util;

use std::time::{Duration, Instant};

use common::Server;
use replication_util::*;
use reqwest::Method;
use serde_json::json;

/// `n` records of `entry` in `bucket`, timestamps `from..from+n`.
async fn fill(api: &Api, bucket: &str, entry: &str, from: u64, n: u64) {
    let recs: Vec<_> = (from..from + n)
        .map(|ts| {
            (
                ts,
                "text/plain",
                labels(&[("n", &ts.to_string())]),
                payload(entry, ts, 200, true),
            )
        })
        .collect();
    let st = api.write(bucket, entry, &recs).await.unwrap();
    assert!(st.iter().all(|s| *s == 201), "{st:?}");
}

/// The (entry, ts) pairs of a dump.
fn keys(d: &Dump) -> Vec<(String, u64)> {
    d.keys().cloned().collect()
}

/// A disabled task sends nothing and opens no connection; its writes are not kept (no
/// feed reader, nothing pending); enabled again, it sends only what is written after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_task_sends_nothing_holds_no_connection_and_keeps_no_backlog() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src_s, dst_s) = (start(d1.path()), start(d2.path()));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("edge", json!({})).await;
    dst.create_bucket("cloud", json!({})).await;
    // A listener that counts every connection it gets.
    let watch = Hostile::start(Answer::Fixed {
        status: 503,
        content_type: "text/plain".into(),
        body: String::new(),
    });
    let mut spec = task_spec("edge", &watch.url(), "cloud");
    spec["mode"] = json!("disabled");
    let (s, v) = src.put_task("t", spec.clone()).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["settings"]["mode"], json!("disabled"));
    fill(&src, "edge", "cam", 1, 50).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let v = src.task("t").await;
    assert_eq!(watch.requests(), 0, "a disabled task sent requests");
    assert_eq!(v["status"]["phase"], json!("disabled"), "{v}");
    assert_eq!(v["status"]["pending_records"], json!(0), "{v}");
    assert!(
        !src.metrics()
            .await
            .contains("tsblob_replication_pending_records{task=\"t\"} 50"),
        "a disabled task kept a backlog"
    );
    // Enabled, to a real destination: only the records written from now on.
    spec["mode"] = json!("enabled");
    spec["dst_url"] = json!(dst_s.url(""));
    let (s, v) = src.put_task("t", spec.clone()).await;
    assert_eq!(s, 200, "{v}");
    fill(&src, "edge", "cam", 100, 5).await;
    src.wait_caught_up("t", Duration::from_secs(30)).await;
    let got = dst.dump("cloud").await;
    assert_eq!(
        keys(&got),
        (100..105)
            .map(|ts| ("cam".to_string(), ts))
            .collect::<Vec<_>>()
    );
    // Disabled again, after a restart too: nothing is sent.
    spec["mode"] = json!("disabled");
    let (s, _) = src.put_task("t", spec).await;
    assert_eq!(s, 200);
    drop(src_s);
    let src_s = start(d1.path());
    let src = Api::new(&src_s.url(""), None);
    fill(&src, "edge", "cam", 200, 5).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(dst.dump("cloud").await.len(), 5);
    assert_eq!(src.task("t").await["status"]["phase"], json!("disabled"));
}

/// Bug: a task's `$limit: 2` stopped after two records of all its entries together (its
/// aggregation state was shared); ReductStore keeps one per entry, so each entry sends two.
/// `!cam-debug` excludes an entry `cam*` names, and `dst_prefix` renames at the destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_limit_counts_per_entry_with_exclusions_and_a_destination_prefix() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src_s, dst_s) = (start(d1.path()), start(d2.path()));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("edge", json!({})).await;
    dst.create_bucket("cloud", json!({})).await;
    let mut spec = task_spec("edge", &dst_s.url(""), "cloud");
    spec["entries"] = json!(["cam*", "!cam-debug"]);
    spec["when"] = json!({"$limit": 2});
    spec["dst_prefix"] = json!("/robot-1/");
    spec["compression"] = json!("none");
    let (s, v) = src.put_task("t", spec.clone()).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["settings"]["dst_prefix"], json!("/robot-1/"));
    for e in ["cam-1", "cam-2", "cam-debug", "imu"] {
        fill(&src, "edge", e, 1, 5).await;
    }
    src.wait_caught_up("t", Duration::from_secs(30)).await;
    let want: Vec<(String, u64)> = ["robot-1/cam-1", "robot-1/cam-2"]
        .iter()
        .flat_map(|e| [1u64, 2].map(|ts| (e.to_string(), ts)))
        .collect();
    let got = dst.dump("cloud").await;
    assert_eq!(keys(&got), want);
    // Byte for byte, labels included.
    let src_dump = src.dump("edge").await;
    for ((e, ts), rec) in &got {
        let e = e.strip_prefix("robot-1/").unwrap();
        assert_eq!(&src_dump[&(e.to_string(), *ts)], rec);
    }
    // The same selection in a backfill.
    spec["from"] = json!(0);
    spec["dst_bucket"] = json!("cloud2");
    dst.create_bucket("cloud2", json!({})).await;
    let (s, v) = src.put_task("backfill", spec.clone()).await;
    assert_eq!(s, 201, "{v}");
    src.wait_caught_up("backfill", Duration::from_secs(30))
        .await;
    assert_eq!(keys(&dst.dump("cloud2").await), want);
    // A prefix that is not an entry name, an exclusion that is not a pattern: 422.
    for (k, bad) in [("dst_prefix", json!("a//b")), ("entries", json!(["!"]))] {
        let mut s2 = spec.clone();
        s2[k] = bad;
        let (s, v) = src.put_task("bad", s2).await;
        assert_eq!(s, 422, "{k}: {v}");
    }
}

/// `compression`: `none` never sets `Content-Encoding`, `zstd` always does (even for a body
/// that does not shrink), `auto` (the default) only when it pays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_none_never_and_zstd_always_compresses_batches() {
    let dir = tempfile::tempdir().unwrap();
    let src_s = start(dir.path());
    let src = Api::new(&src_s.url(""), None);
    src.create_bucket("edge", json!({})).await;
    // Incompressible payloads: `auto` sends them plain.
    let recs: Vec<_> = (1..=5u64)
        .map(|ts| {
            (
                ts,
                "application/octet-stream",
                labels(&[]),
                payload("cam", ts, 8192, false),
            )
        })
        .collect();
    src.write("edge", "cam", &recs).await.unwrap();
    for (mode, want) in [("none", false), ("zstd", true), ("auto", false)] {
        for api in ["tsblob", "reductstore"] {
            let watch = Hostile::start(Answer::Fixed {
                status: 503,
                content_type: "text/plain".into(),
                body: String::new(),
            });
            let mut spec = task_spec("edge", &watch.url(), "cloud");
            spec["from"] = json!(0);
            spec["compression"] = json!(mode);
            spec["dst_api"] = json!(api);
            let name = format!("{mode}-{api}");
            let (s, v) = src.put_task(&name, spec).await;
            assert_eq!(s, 201, "{v}");
            let deadline = Instant::now() + Duration::from_secs(20);
            while watch.requests() == 0 {
                assert!(Instant::now() < deadline, "{name}: no request");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let head = watch.heads.lock().unwrap()[0].to_lowercase();
            assert_eq!(
                head.contains("content-encoding: zstd"),
                want,
                "{name}: {head}"
            );
            if api == "reductstore" {
                assert!(
                    head.starts_with("post /api/v1/b/cloud/cam/batch ")
                        && head.contains("x-reduct-time-1: 8192,"),
                    "{name}: {head}"
                );
            }
            let (s, _) = src
                .json(
                    Method::DELETE,
                    &format!("/api/v1/replications/{name}"),
                    None,
                )
                .await;
            assert_eq!(s, 200);
        }
    }
}

/// Bug: a bucket rename left its replication tasks naming the old bucket (docs/api.md said
/// to fix them by hand): the backlog and later writes were never sent. Now the task's
/// `src_bucket` follows, with its position and backlog, also across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_rename_moves_its_tasks_with_their_backlog() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src_s, dst_s) = (start(d1.path()), start(d2.path()));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("edge", json!({})).await;
    dst.create_bucket("cloud", json!({})).await;
    let mut spec = task_spec("edge", &dst_s.url(""), "cloud");
    spec["mode"] = json!("paused");
    let (s, v) = src.put_task("t", spec.clone()).await;
    assert_eq!(s, 201, "{v}");
    fill(&src, "edge", "cam", 1, 10).await;
    let (s, v) = src
        .json(
            Method::PUT,
            "/api/v1/b/edge/rename",
            Some(json!({"new_name": "edge2"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let v = src.task("t").await;
    assert_eq!(v["settings"]["src_bucket"], json!("edge2"), "{v}");
    assert_eq!(v["status"]["pending_records"], json!(10), "{v}");
    fill(&src, "edge2", "cam", 11, 5).await;
    // Resumed (the task now names edge2): everything arrives, none twice.
    spec["src_bucket"] = json!("edge2");
    spec["mode"] = json!("enabled");
    let (s, v) = src.put_task("t", spec).await;
    assert_eq!(s, 200, "{v}");
    src.wait_caught_up("t", Duration::from_secs(30)).await;
    assert_same(&src.dump("edge2").await, &dst.dump("cloud").await);
    let v = src.task("t").await;
    assert_eq!(v["status"]["evicted_before_sent"], json!(0), "{v}");
    // Renamed while enabled, then a restart: the task still sends from the new name.
    let (s, _) = src
        .json(
            Method::PUT,
            "/api/v1/b/edge2/rename",
            Some(json!({"new_name": "edge3"})),
        )
        .await;
    assert_eq!(s, 200);
    drop(src_s);
    let src_s = start(d1.path());
    let src = Api::new(&src_s.url(""), None);
    fill(&src, "edge3", "cam", 20, 5).await;
    let v = src.wait_caught_up("t", Duration::from_secs(30)).await;
    assert_eq!(v["settings"]["src_bucket"], json!("edge3"), "{v}");
    assert_same(&src.dump("edge3").await, &dst.dump("cloud").await);
}

/// A ReductStore destination that answers an endless body, or nothing for longer than the
/// sender's timeout: the outbound bounds hold as for a tsblob destination (the answer is
/// cut, the source's memory stays flat, the attempt fails and is retried).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_reductstore_destination_is_cut_off_and_timed_out() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let src = Api::new(&s.url(""), None);
    src.create_bucket("edge", json!({})).await;
    fill(&src, "edge", "cam", 1, 20).await;
    let (rss_before, _) = s.rss();
    let cases = [
        (Answer::Endless { status: 200 }, "cut off"),
        (Answer::Endless { status: 500 }, "cut off"),
        (Answer::Slow { secs: 30 }, "failed"),
    ];
    for (i, (answer, says)) in cases.into_iter().enumerate() {
        let hostile = Hostile::start(answer);
        let mut spec = task_spec("edge", &hostile.url(), "cloud");
        spec["from"] = json!(0);
        spec["dst_api"] = json!("reductstore");
        let name = format!("h{i}");
        let (st, v) = src.put_task(&name, spec).await;
        assert_eq!(st, 201, "{v}");
        let started = Instant::now();
        let v = wait_error(&src, &name, |m| m.contains(says)).await;
        // `--replication-timeout 3s` (FAST_RETRY) plus the body's time.
        assert!(started.elapsed() < Duration::from_secs(20), "{v}");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (_, peak) = s.rss();
        assert!(
            peak < rss_before + (64 << 20),
            "{name}: the source grew from {} MB to a peak of {} MB",
            rss_before >> 20,
            peak >> 20
        );
        assert!(
            !src.task(&name).await["status"]["last_error"]["message"]
                .as_str()
                .unwrap()
                .contains("    "),
            "the answer's body was echoed"
        );
        let (st, _) = src
            .json(
                Method::DELETE,
                &format!("/api/v1/replications/{name}"),
                None,
            )
            .await;
        assert_eq!(st, 200);
    }
}

/// The CLI's new settings: `--entries` with a `!` exclusion, `--dst-prefix`,
/// `--compression`, `--dst-api`, `--disabled`, and `tsblob replication disable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_sets_prefix_exclusions_compression_and_disables_tasks() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src_s, dst_s) = (start(d1.path()), start(d2.path()));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("b", json!({})).await;
    dst.create_bucket("c", json!({})).await;
    let url = src_s.url("");
    let cli = |args: &[&str]| {
        let mut all = vec!["replication", "--url", url.as_str()];
        all.extend_from_slice(args);
        tsblob_cli(&all)
    };
    let dst_url = dst_s.url("");
    let (ok, out) = cli(&[
        "create",
        "t",
        "b",
        &dst_url,
        "c",
        "--entries",
        "cam*,!cam-debug",
        "--dst-prefix",
        "r1",
        "--compression",
        "none",
        "--dst-api",
        "tsblob",
        "--disabled",
    ]);
    assert!(ok, "{out}");
    let v = src.task("t").await;
    assert_eq!(v["settings"]["mode"], json!("disabled"), "{v}");
    assert_eq!(v["settings"]["entries"], json!(["cam*", "!cam-debug"]));
    assert_eq!(v["settings"]["dst_prefix"], json!("r1"));
    assert_eq!(v["settings"]["compression"], json!("none"));
    let (ok, out) = cli(&["resume", "t"]);
    assert!(ok, "{out}");
    for e in ["cam", "cam-debug"] {
        fill(&src, "b", e, 1, 3).await;
    }
    src.wait_caught_up("t", Duration::from_secs(30)).await;
    assert_eq!(
        keys(&dst.dump("c").await),
        (1..=3u64)
            .map(|ts| ("r1/cam".to_string(), ts))
            .collect::<Vec<_>>()
    );
    let (ok, out) = cli(&["disable", "t"]);
    assert!(ok && out.contains("disabled"), "{out}");
    assert_eq!(src.task("t").await["status"]["phase"], json!("disabled"));
}

/// Bug: the ReductStore API's batch write refused `Content-Encoding: zstd` (and gzip: 415), so a
/// ReductStore 1.21 sender configured with `compression: zstd` (or tsblob's, to a
/// `dst_api: reductstore` destination) could never replicate into tsblob. Now it is
/// decoded as the native batch decodes it; the records arrive byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tsblob_reductstore_listener_takes_zstd_batches_from_a_sender() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let src_s = start(d1.path());
    let dst_s = Server::start_in(
        d2.path(),
        &[FAST_RETRY, &["--reductstore-listen", &listen]].concat(),
    );
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("edge", json!({})).await;
    for (mode, bucket) in [("zstd", "cz"), ("none", "cn"), ("gzip", "cg")] {
        let mut spec = task_spec("edge", &format!("http://{listen}"), bucket);
        spec["dst_api"] = json!("reductstore");
        spec["compression"] = json!(mode);
        spec["from"] = json!(0);
        let (s, v) = src.put_task(mode, spec).await;
        assert_eq!(s, 201, "{v}");
    }
    for e in ["a", "b/c"] {
        fill(&src, "edge", e, 1, 100).await;
    }
    for mode in ["zstd", "none", "gzip"] {
        let v = src.wait_caught_up(mode, Duration::from_secs(30)).await;
        assert_eq!(v["status"]["errors"], json!(0), "{v}");
    }
    // The destination bucket was created by the sender; every record is there, as written.
    let want = src.dump("edge").await;
    assert_same(&want, &dst.dump("cz").await);
    assert_same(&want, &dst.dump("cn").await);
    assert_same(&want, &dst.dump("cg").await);
    // gzip is for ReductStore destinations only (tsblob's native batch decodes zstd).
    let mut spec = task_spec("edge", &dst_s.url(""), "x");
    spec["compression"] = json!("gzip");
    let (s, v) = src.put_task("gz-native", spec).await;
    assert_eq!(s, 422, "{v}");
}
