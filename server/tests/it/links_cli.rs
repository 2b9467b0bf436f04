//! `tsblob link create` against a real server: the printed link downloads the record with
//! no token (issue 28, query links).
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::process::Command;

use crate::common::Server;

fn tsblob(s: &Server, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsblob"));
    for (k, _) in std::env::vars() {
        if k.starts_with("TSBLOB_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(args)
        .env("TSBLOB_URL", s.url(""))
        .env("TSBLOB_TOKEN", "root")
        .output()
        .unwrap()
}

#[test]
fn tsblob_link_create_prints_a_link_that_downloads_without_a_token() {
    let s = Server::start(&["--token", "root"]);
    assert!(tsblob(&s, &["bucket", "create", "b"]).status.success());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("payload");
    std::fs::write(&file, b"hello link").unwrap();
    let out = tsblob(
        &s,
        &[
            "put",
            "b",
            "cams/front",
            file.to_str().unwrap(),
            "--ts",
            "5",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tsblob(
        &s,
        &[
            "link",
            "create",
            "b",
            "cams/front",
            "--record",
            "cams/front@5",
            "--expires-in",
            "1h",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let link = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let rest = link.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_at(rest.find('/').unwrap());
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("hello link"), "{answer}");
    assert!(answer.contains("filename=\"front_5.bin\""), "{answer}");
    // A bad --record is refused by the CLI with the form to use.
    let out = tsblob(&s, &["link", "create", "b", "cams/front", "--record", "5"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ENTRY@TS"));
}
