//! What a replication task shows while its destination fails: the figures an operator's
//! alerts read (`/metrics`) and the error that says why (hostile probe of 2026-11-29).
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use serde_json::json;

use crate::outbound_util::{Answer, Hostile};
use crate::replication_util::*;

/// The value of `name{task="<task>"}` in `metrics`, if the line is there.
fn gauge(metrics: &str, name: &str, task: &str) -> Option<i64> {
    let prefix = format!("{name}{{task=\"{task}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Bug: with the destination down, `tsblob_replication_pending_records` and
/// `tsblob_replication_lag_seconds` stayed 0 (the loop that refreshes them waited for the
/// failing delivery), so the alert on the lag that docs/replication.md suggests never
/// fired, while the task's status said 5 pending and 75 s of lag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lag_gauges_stayed_0_while_the_destination_was_down() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let src = Api::new(&s.url(""), None);
    src.create_bucket("edge", json!({})).await;
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let (st, v) = src
        .put_task("down", task_spec("edge", &down, "cloud"))
        .await;
    assert_eq!(st, 201, "{v}");
    let recs: Vec<_> = (1..=5u64)
        .map(|ts| (ts, "text/plain", labels(&[]), payload("cam", ts, 100, true)))
        .collect();
    src.write("edge", "cam", &recs).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = src.metrics().await;
        let pending = gauge(&m, "tsblob_replication_pending_records", "down");
        let lag = gauge(&m, "tsblob_replication_lag_seconds", "down");
        if pending == Some(5) && lag.is_some_and(|l| l >= 2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pending {pending:?}, lag {lag:?} s; status {:#}",
            src.task("down").await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Bug: a destination answering 200 `{"written": 3, "failed": 0, "results": []}` held the
/// task in backoff for ever with `errors` 0, no `last_error` and no log line (the records
/// the answer said nothing of were sent again, silently).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_answering_200_without_results_stalled_the_task_silently() {
    let liar = Hostile::start(Answer::Fixed {
        status: 200,
        content_type: "application/json".into(),
        body: r#"{"written":3,"failed":0,"results":[]}"#.into(),
    });
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let src = Api::new(&s.url(""), None);
    src.create_bucket("edge", json!({})).await;
    let (st, v) = src
        .put_task("liar", task_spec("edge", &liar.url(), "cloud"))
        .await;
    assert_eq!(st, 201, "{v}");
    let recs: Vec<_> = (1..=3u64)
        .map(|ts| (ts, "text/plain", labels(&[]), payload("cam", ts, 100, true)))
        .collect();
    src.write("edge", "cam", &recs).await.unwrap();
    let v = wait_error(&src, "liar", |m| {
        m.contains("answered 0 results for a batch of 3 records")
    })
    .await;
    assert!(v["status"]["errors"].as_u64().unwrap() >= 1, "{v:#}");
    assert_eq!(v["status"]["pending_records"], json!(3), "{v:#}");
}
