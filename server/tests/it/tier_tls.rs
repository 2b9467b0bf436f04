//! Tiering over https: a real MinIO serving TLS with a self-signed certificate made here
//! (rcgen), trusted through `--tier-ca`; a server given the wrong CA refuses to start and
//! says why (it must neither hang nor tier in the clear).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::tier::{
    bucket_info, check_record, client, create_bucket, health, serve, wait_tiered, write, Store,
    PASSWORD, SMALL, USER,
};

/// A self-signed certificate for 127.0.0.1 and localhost: MinIO's `public.crt` and
/// `private.key` in `dir`; returns the certificate's PEM (the CA a client must trust).
fn self_signed(dir: &Path) -> String {
    let key =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let pem = key.cert.pem();
    std::fs::write(dir.join("public.crt"), &pem).unwrap();
    std::fs::write(dir.join("private.key"), key.signing_key.serialize_pem()).unwrap();
    pem
}

#[tokio::test(flavor = "multi_thread")]
async fn tiering_over_https_with_a_private_ca_reads_back_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = self_signed(&tmp.path().join("certs"));
    let ca_file = tmp.path().join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    let minio = Store::start_tls(&tmp.path().join("certs"));
    assert!(minio.endpoint().starts_with("https://"));
    let data = tempfile::tempdir().unwrap();
    let args: Vec<String> = vec![
        "--tier-url".into(),
        "s3://tsblob-tier/tls".into(),
        "--tier-endpoint".into(),
        minio.endpoint(),
        "--tier-ca".into(),
        ca_file.display().to_string(),
    ];
    let s = serve(data.path(), &args);
    let c = client();
    create_bucket(&c, &s, "cams", SMALL).await;
    let all: Vec<u64> = (1..=20).map(|i| 5_000 + i).collect();
    for &ts in &all {
        assert_eq!(write(&c, &s, "front", ts).await, 201);
    }
    let info = wait_tiered(&c, &s, 4).await;
    assert_eq!(info["record_count"], 20);
    for &ts in &all {
        check_record(&c, &s, "front", ts).await;
    }
    let h = health(&c, &s).await;
    assert_eq!(h["tier"]["available"], true, "{h}");
    assert!(bucket_info(&c, &s).await["tiered_size"].as_u64().unwrap() > 0);
}

/// Runs `tsblob serve` tiering to `endpoint` with `ca` and returns its stderr once it exits
/// (within 30 s: it must not hang).
fn serve_expecting_exit(endpoint: &str, ca: Option<&Path>, env: &[(&str, &str)]) -> String {
    let data = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsblob"));
    cmd.arg("serve")
        .arg("--data")
        .arg(data.path())
        .args(["--listen", "127.0.0.1:0"])
        .args([
            "--tier-url",
            "s3://tsblob-tier/x",
            "--tier-endpoint",
            endpoint,
        ])
        .env("AWS_ACCESS_KEY_ID", USER)
        .env("AWS_SECRET_ACCESS_KEY", PASSWORD)
        .env_remove("AWS_CA_BUNDLE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    if let Some(ca) = ca {
        cmd.arg("--tier-ca").arg(ca);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success(), "the server started");
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return err;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server neither started serving nor stopped within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_wrong_ca_or_none_stops_the_server_with_a_tls_error_that_names_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    self_signed(&tmp.path().join("certs"));
    // Another self-signed certificate: not the one MinIO presents.
    let wrong = self_signed(&tmp.path().join("other"));
    let wrong_file = tmp.path().join("wrong.pem");
    std::fs::write(&wrong_file, wrong).unwrap();
    let minio = Store::start_tls(&tmp.path().join("certs"));

    let err = serve_expecting_exit(&minio.endpoint(), Some(&wrong_file), &[]);
    assert!(err.contains("TLS handshake"), "{err}");
    assert!(err.contains("--tier-ca"), "{err}");
    // No CA at all: the system's roots do not know a self-signed certificate either.
    let err = serve_expecting_exit(&minio.endpoint(), None, &[]);
    assert!(err.contains("TLS handshake"), "{err}");
    // The wrong CA through AWS_CA_BUNDLE, the variable other AWS tools read.
    let err = serve_expecting_exit(
        &minio.endpoint(),
        None,
        &[("AWS_CA_BUNDLE", wrong_file.to_str().unwrap())],
    );
    assert!(err.contains("TLS handshake"), "{err}");
    // A CA file that is not PEM is refused before any connection.
    let junk = tmp.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let err = serve_expecting_exit(&minio.endpoint(), Some(&junk), &[]);
    assert!(err.contains("holds no certificate"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn aws_ca_bundle_is_honoured_when_tier_ca_is_absent() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = self_signed(&tmp.path().join("certs"));
    let ca_file = tmp.path().join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    let minio = Store::start_tls(&tmp.path().join("certs"));
    let data = tempfile::tempdir().unwrap();
    let a = [
        "--tier-url".to_string(),
        "s3://tsblob-tier/bundle".to_string(),
        "--tier-endpoint".to_string(),
        minio.endpoint(),
    ];
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let s = crate::common::Server::start_in_env(
        data.path(),
        &a,
        &[
            ("AWS_ACCESS_KEY_ID", USER),
            ("AWS_SECRET_ACCESS_KEY", PASSWORD),
            ("AWS_CA_BUNDLE", ca_file.to_str().unwrap()),
        ],
    );
    let c = client();
    create_bucket(&c, &s, "cams", SMALL).await;
    for ts in 1..=8u64 {
        assert_eq!(write(&c, &s, "front", ts).await, 201);
    }
    wait_tiered(&c, &s, 1).await;
    check_record(&c, &s, "front", 1).await;
}
