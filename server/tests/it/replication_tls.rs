//! https destinations (issue 13): the tsblob server speaks plain HTTP, so a TLS-terminating
//! proxy with a self-signed certificate (rcgen) stands in front of the destination.
//! Replication through it works with the certificate given as the task's `dst_ca`; with
//! another CA (or none: the Mozilla roots alone) every attempt fails at once with a
//! `last_error` that names the certificate problem, and nothing hangs. `tsblob cp` and the
//! CLI reach it with `--ca`.
#![allow(clippy::unwrap_used)]

use crate::replication_util;

use std::time::{Duration, Instant};

use replication_util::tls_proxy::{Cert, TlsProxy};
use replication_util::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_destination_with_its_ca_and_a_wrong_ca_fails_clearly() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src_s, dst_s) = (start(d1.path()), start(d2.path()));
    let (src, dst) = (
        Api::new(&src_s.url(""), None),
        Api::new(&dst_s.url(""), None),
    );
    src.create_bucket("edge", json!({})).await;
    dst.create_bucket("cloud", json!({})).await;
    dst.create_bucket("nowhere", json!({})).await;
    let cert = Cert::new();
    let proxy = TlsProxy::start(&cert, &addr_of(&dst_s.url("")));

    // A CA that is not PEM is refused up front.
    let mut spec = task_spec("edge", &proxy.url(), "cloud");
    spec["dst_ca"] = json!("not a certificate");
    let (s, v) = src.put_task("tls", spec).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (422, Some("invalid_replication")),
        "{v}"
    );

    let mut spec = task_spec("edge", &proxy.url(), "cloud");
    spec["dst_ca"] = json!(cert.pem);
    let (s, v) = src.put_task("tls", spec).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["settings"]["dst_ca_set"], json!(true), "{v}");
    // The wrong CA (another self-signed certificate), and none at all.
    let other = Cert::new();
    let mut spec = task_spec("edge", &proxy.url(), "nowhere");
    spec["dst_ca"] = json!(other.pem);
    assert_eq!(src.put_task("wrong-ca", spec).await.0, 201);
    let spec = task_spec("edge", &proxy.url(), "nowhere");
    assert_eq!(src.put_task("no-ca", spec).await.0, 201);

    for i in 0..20u64 {
        let ts = 1000 + i;
        let rec = (
            ts,
            "application/json",
            labels(&[("i", &i.to_string())]),
            payload("e", ts, 3000, i % 2 == 0),
        );
        assert_eq!(src.write("edge", "e", &[rec]).await.unwrap(), [201]);
    }
    src.wait_caught_up("tls", Duration::from_secs(30)).await;
    assert_same(&src.dump("edge").await, &dst.dump("cloud").await);

    let deadline = Instant::now() + Duration::from_secs(15);
    for name in ["wrong-ca", "no-ca"] {
        loop {
            let v = src.task(name).await;
            let st = &v["status"];
            let err = st["last_error"]["message"]
                .as_str()
                .unwrap_or("")
                .to_lowercase();
            if err.contains("certificate") {
                assert_eq!(st["sent_records"], json!(0), "{v}");
                assert!(st["pending_records"].as_u64().unwrap() > 0, "{v}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: no clear certificate error: {v:#}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(dst.dump("nowhere").await.is_empty());

    // `tsblob cp` and the CLI with --ca; without it the certificate is refused.
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &cert.pem).unwrap();
    let ca = ca.to_str().unwrap();
    dst.create_bucket("copy", json!({})).await;
    let from = format!("{}/edge", src_s.url(""));
    let to = format!("{}/copy", proxy.url());
    let (ok, text) = tsblob_cli(&["cp", &from, &to, "--quiet"]);
    assert!(!ok && text.to_lowercase().contains("certificate"), "{text}");
    let (ok, text) = tsblob_cli(&["cp", &from, &to, "--quiet", "--ca", ca]);
    assert!(ok, "{text}");
    assert_same(&src.dump("edge").await, &dst.dump("copy").await);
    let (ok, text) = tsblob_cli(&["bucket", "ls", "--url", &proxy.url(), "--ca", ca]);
    assert!(ok && text.contains("copy"), "{text}");
    let (ok, text) = tsblob_cli(&["bucket", "ls", "--url", &proxy.url()]);
    assert!(!ok && text.to_lowercase().contains("certificate"), "{text}");
}
