//! Entry attachments follow a replication task (issue 28), between real processes: to a
//! second `tsblob serve` (its attachments API) and to a real ReductStore 1.21 (records of
//! `<entry>/$meta`, as ReductStore's own replication sends them); and a hostile
//! destination of attachments is cut off without the source growing.
#![allow(clippy::unwrap_used)]

use crate::common;
use crate::outbound_util::{Answer, Hostile};
use crate::replication_util;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Server;
use replication_util::*;
use reqwest::Method;
use serde_json::{json, Value};

fn start(dir: &Path) -> Server {
    Server::start_in(dir, FAST_RETRY)
}

async fn put_attachment(api: &Api, bucket: &str, entry: &str, name: &str, doc: Value) -> u64 {
    let (s, v) = api
        .json(
            Method::PUT,
            &format!("/api/v1/b/{bucket}/{entry}/attachments/{name}"),
            Some(doc),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    v["written"][name].as_u64().unwrap()
}

async fn attachments(api: &Api, bucket: &str, entry: &str) -> (u16, Value) {
    api.json(
        Method::GET,
        &format!("/api/v1/b/{bucket}/{entry}/attachments"),
        None,
    )
    .await
}

/// Waits until `f` holds of the destination entry's attachments; panics with them.
async fn wait_attachments(api: &Api, bucket: &str, entry: &str, want: Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (s, v) = attachments(api, bucket, entry).await;
        if s == 200 && v == want {
            return;
        }
        if Instant::now() > deadline {
            panic!("{bucket}/{entry} has {s} {v}, not {want}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Bug: a task carried records but never an entry's attachments, so the destination
/// lacked the schema documents its records were written with. Now those that exist are
/// written at the task's start, and each later write and removal follows; the task's
/// entries apply (with `!` exclusions and `dst_prefix`), its `when` does not (as in
/// ReductStore).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_reach_a_tsblob_destination_at_start_and_on_every_change() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src_s, dst_s) = (start(d1.path()), start(d2.path()));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("edge", json!({})).await;
    dst.create_bucket("cloud", json!({})).await;
    // Before the task: sent at its start.
    put_attachment(&src, "edge", "cam/front", "schema", json!({"version": 1})).await;
    put_attachment(&src, "edge", "cam-debug", "schema", json!({"debug": true})).await;
    let mut spec = task_spec("edge", &dst_s.url(""), "cloud");
    spec["entries"] = json!(["cam/*", "cam*", "!cam-debug"]);
    spec["when"] = json!({"&never": {"$eq": "x"}});
    spec["dst_prefix"] = json!("robot-1");
    let (s, v) = src.put_task("t", spec).await;
    assert_eq!(s, 201, "{v}");
    wait_attachments(
        &dst,
        "cloud",
        "robot-1/cam/front",
        json!({"schema": {"version": 1}}),
    )
    .await;
    // On change: a new one, a new version, a removal.
    put_attachment(&src, "edge", "cam/front", "calib", json!({"k": [1, 2, 3]})).await;
    put_attachment(&src, "edge", "cam/front", "schema", json!({"version": 2})).await;
    wait_attachments(
        &dst,
        "cloud",
        "robot-1/cam/front",
        json!({"schema": {"version": 2}, "calib": {"k": [1, 2, 3]}}),
    )
    .await;
    let (s, v) = src
        .json(
            Method::DELETE,
            "/api/v1/b/edge/cam/front/attachments/calib",
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    wait_attachments(
        &dst,
        "cloud",
        "robot-1/cam/front",
        json!({"schema": {"version": 2}}),
    )
    .await;
    // The excluded entry sent nothing.
    let (s, _) = attachments(&dst, "cloud", "robot-1/cam-debug").await;
    assert_eq!(s, 404);
    let v = src.task("t").await;
    assert!(
        v["status"]["attachments_sent"].as_u64().unwrap() >= 3,
        "{v}"
    );
    // A restart sends them again (the same documents) and goes on following changes.
    drop(src_s);
    let src_s = start(d1.path());
    let src = Api::new(&src_s.url(""), None);
    put_attachment(&src, "edge", "cam/front", "after", json!("restart")).await;
    wait_attachments(
        &dst,
        "cloud",
        "robot-1/cam/front",
        json!({"schema": {"version": 2}, "after": "restart"}),
    )
    .await;
}

/// A destination that answers attachments with an endless body, or never: each attempt
/// is cut off at the task's bounds (or timed out), reported and retried, and the source
/// does not grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_destination_of_attachments_is_cut_off_and_the_source_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let src = Api::new(&s.url(""), None);
    src.create_bucket("edge", json!({})).await;
    for i in 0..8 {
        put_attachment(&src, "edge", &format!("cam-{i}"), "schema", json!({"i": i})).await;
    }
    let (rss_before, _) = s.rss();
    let cases = [
        (Answer::Endless { status: 200 }, "cut off"),
        (Answer::Endless { status: 500 }, "cut off"),
        (Answer::Slow { secs: 30 }, "failed"),
    ];
    for (i, (answer, says)) in cases.into_iter().enumerate() {
        let hostile = Hostile::start(answer);
        let name = format!("h{i}");
        let (st, v) = src
            .put_task(&name, task_spec("edge", &hostile.url(), "cloud"))
            .await;
        assert_eq!(st, 201, "{v}");
        let started = Instant::now();
        let deadline = started + Duration::from_secs(30);
        loop {
            let v = src.task(&name).await;
            let m = v["status"]["last_error"]["message"].as_str().unwrap_or("");
            if m.contains(says) && m.contains("attachment") {
                assert!(!m.contains("    "), "the answer's body was echoed: {m}");
                break;
            }
            assert!(Instant::now() < deadline, "no error of {name}: {v:#}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (_, peak) = s.rss();
        assert!(
            peak < rss_before + (64 << 20),
            "{name}: the source grew from {} MB to a peak of {} MB",
            rss_before >> 20,
            peak >> 20
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

/// A real ReductStore, removed (process and data) on drop.
struct Reduct {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Reduct {
    fn start() -> Reduct {
        let bin = peers_bin().join("reductstore");
        assert!(
            bin.is_file(),
            "{} is missing: run scripts/install-peers.sh (or set TSBLOB_PEERS_BIN)",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(bin)
            .env("RS_DATA_PATH", dir.path().join("data"))
            .env("RS_HOST", "127.0.0.1")
            .env("RS_PORT", port.to_string())
            .env("RS_DISABLE_AUTH", "true")
            .env("RS_LOG_LEVEL", "WARN")
            .env_remove("RS_API_TOKEN")
            .env_remove("RS_INIT_API_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let r = Reduct {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "ReductStore did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Reduct {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn peers_bin() -> PathBuf {
    match std::env::var_os("TSBLOB_PEERS_BIN") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/tsblob/peers/bin"),
    }
}

/// The record of `entry` at `ts` in a ReductStore: its status, `key` and `remove` labels
/// and body.
async fn reduct_record(base: &str, entry: &str, ts: u64) -> (u16, Option<String>, bool, String) {
    let resp = reqwest::Client::new()
        .get(format!("{base}/api/v1/b/cloud/{entry}?ts={ts}"))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let label = |n: &str| {
        resp.headers()
            .get(format!("x-reduct-label-{n}"))
            .map(|v| v.to_str().unwrap().to_string())
    };
    let (key, remove) = (label("key"), label("remove").as_deref() == Some("true"));
    (status, key, remove, resp.text().await.unwrap())
}

/// Waits until the ReductStore record of `entry` at `ts` satisfies `ok`.
async fn wait_reduct(
    base: &str,
    entry: &str,
    ts: u64,
    ok: impl Fn(&(u16, Option<String>, bool, String)) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = reduct_record(base, entry, ts).await;
        if ok(&r) {
            return;
        }
        assert!(Instant::now() < deadline, "{entry} at {ts}: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// To a real ReductStore, attachments go as ReductStore's replication sends them: records
/// of `<entry>/$meta` at the source's timestamps, labelled `key`, a newer version
/// replacing the older there, and a removal as the update `remove=true`. The missing
/// destination bucket is created. Bug: several attachments sent at once went in name
/// order, but batch protocol v1 carries payloads in timestamp order: each was refused as
/// not JSON (or stored with another's bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_reach_a_real_reductstore_as_meta_records() {
    let rs = Reduct::start();
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let src = Api::new(&s.url(""), None);
    src.create_bucket("edge", json!({})).await;
    let v1 = put_attachment(&src, "edge", "cam", "schema", json!({"version": 1})).await;
    // Names and timestamps in different orders: one batch at the start.
    let c0 = put_attachment(&src, "edge", "cam", "calib", json!([0])).await;
    let mut spec = task_spec("edge", &rs.url(), "cloud");
    spec["dst_api"] = json!("reductstore");
    let (st, v) = src.put_task("t", spec).await;
    assert_eq!(st, 201, "{v}");
    let base = rs.url();
    wait_reduct(&base, "cam/$meta", v1, |r| {
        r.0 == 200 && r.1.as_deref() == Some("schema") && r.3 == r#"{"version":1}"#
    })
    .await;
    wait_reduct(&base, "cam/$meta", c0, |r| r.0 == 200 && r.3 == "[0]").await;
    let v2 = put_attachment(&src, "edge", "cam", "schema", json!({"version": 2})).await;
    let c1 = put_attachment(&src, "edge", "cam", "calib", json!([1, 2])).await;
    wait_reduct(&base, "cam/$meta", c1, |r| r.0 == 200 && r.3 == "[1,2]").await;
    wait_reduct(&base, "cam/$meta", v2, |r| {
        r.0 == 200 && r.3 == r#"{"version":2}"#
    })
    .await;
    // ReductStore keeps the newest record of a key: the older version is gone there.
    assert_eq!(reduct_record(&base, "cam/$meta", v1).await.0, 404);
    assert_eq!(reduct_record(&base, "cam/$meta", c0).await.0, 404);
    let (st, v) = src
        .json(Method::DELETE, "/api/v1/b/edge/cam/attachments/calib", None)
        .await;
    assert_eq!(st, 200, "{v}");
    wait_reduct(&base, "cam/$meta", c1, |r| r.0 == 200 && r.2).await;
    let v = src.task("t").await;
    assert_eq!(v["status"]["attachments_sent"], json!(4), "{v}");
    assert_eq!(v["status"]["errors"], json!(0), "{v}");
}

/// A tsblob's `--reductstore-listen` as a ReductStore destination: the `$meta` records the
/// sender writes land as the destination's attachments, and a removal removes there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_reach_a_tsblob_reductstore_listener() {
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
    put_attachment(&src, "edge", "cam", "schema", json!({"version": 1})).await;
    put_attachment(&src, "edge", "cam", "calib", json!([1])).await;
    let mut spec = task_spec("edge", &format!("http://{listen}"), "cloud");
    spec["dst_api"] = json!("reductstore");
    let (s, v) = src.put_task("t", spec).await;
    assert_eq!(s, 201, "{v}");
    wait_attachments(
        &dst,
        "cloud",
        "cam",
        json!({"schema": {"version": 1}, "calib": [1]}),
    )
    .await;
    let (st, v) = src
        .json(Method::DELETE, "/api/v1/b/edge/cam/attachments/calib", None)
        .await;
    assert_eq!(st, 200, "{v}");
    wait_attachments(&dst, "cloud", "cam", json!({"schema": {"version": 1}})).await;
    let v = src.task("t").await;
    assert_eq!(v["status"]["errors"], json!(0), "{v}");
}
