//! A hostile client's sweep of the whole HTTP surface against a real `tsblob serve`: each
//! test pins one bug the sweep found and is named after it (what broke, not what is
//! right). The sweep's cases that found nothing broken are listed in the final report of
//! the `hostile` branch; the cases of `reliability_input`, `reliability_integrity` and
//! `reliability_security` are not repeated here.
#![allow(clippy::unwrap_used)]

use crate::common;
use crate::reliability_util;

use std::time::{Duration, Instant};

use common::Server;
use reliability_util::*;
use serde_json::Value;

const T: Duration = Duration::from_secs(20);
const ADMIN: &str = "hostile-admin";

/// One request on a fresh connection with the admin token and `headers`; (status, JSON
/// body or Null).
fn call(a: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {ADMIN}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    let (status, answer) = raw_http(a, &r, T);
    let json = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

/// Asserts an error answer: `status`, the JSON error body with `code` and a message.
fn assert_error(got: &(u16, Value), status: u16, code: &str) {
    assert_eq!(got.0, status, "{}", got.1);
    assert_eq!(got.1["error"]["code"], code, "{}", got.1);
    let message = got.1["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "no message: {}", got.1);
}

fn start(data: &std::path::Path) -> (Server, String) {
    let s = Server::start_in(data, &["--token", ADMIN]);
    let a = addr_of(&s.url(""));
    (s, a)
}

fn task(src: &str, dst_url: &str, from: Option<u64>) -> Vec<u8> {
    let mut spec = serde_json::json!({
        "src_bucket": src, "dst_url": dst_url, "dst_bucket": "dst", "dst_token": ADMIN,
    });
    if let Some(from) = from {
        spec["from"] = from.into();
    }
    spec.to_string().into_bytes()
}

/// Bug "temp-file bucket": the server wrote its `tokens` and `replications` files through
/// `tokens.tmp` / `replications.tmp` beside them in the data folder, both valid bucket
/// names. Once a bucket had taken one, its folder made every token or replication change a
/// 500 (and the task stayed in memory while its file said otherwise).
#[test]
fn temp_file_bucket_broke_token_and_replication_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (s, a) = start(dir.path());
    for b in ["tokens.tmp", "replications.tmp", "src"] {
        assert_eq!(call(&a, "POST", &format!("/api/v1/b/{b}"), &[], b"").0, 201);
    }
    let (status, v) = call(
        &a,
        "POST",
        "/api/v1/tokens/reader",
        &[],
        br#"{"read": ["src"]}"#,
    );
    assert_eq!(status, 201, "{v}");
    let value = v["value"].as_str().unwrap().to_string();
    let spec = task("src", "http://127.0.0.1:1", None);
    let (status, v) = call(&a, "PUT", "/api/v1/replications/r", &[], &spec);
    assert_eq!(status, 201, "{v}");
    // The buckets kept their folders, and a restart finds the token and the task.
    drop(s);
    let (_s, a) = start(dir.path());
    for b in ["tokens.tmp", "replications.tmp"] {
        assert_eq!(call(&a, "GET", &format!("/api/v1/b/{b}"), &[], b"").0, 200);
    }
    let me = format!(
        "GET /api/v1/me HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {value}\r\n\r\n"
    );
    let (status, answer) = raw_http(&a, me.as_bytes(), T);
    assert_eq!(status, 200, "the token was lost: {answer}");
    let (status, v) = call(&a, "GET", "/api/v1/replications/r", &[], b"");
    assert_eq!(status, 200, "the task was lost: {v}");
}

/// Bug "save race": a replication sender saved the task file (its backfill position)
/// without the lock the HTTP handlers take, through the same temporary file: a `PUT` of a
/// task racing a sender's save answered 500 (about one in six while backfills ran), and
/// an older snapshot could be renamed over a newer one.
#[test]
fn replication_put_racing_a_sender_save_was_a_500() {
    let dir = tempfile::tempdir().unwrap();
    let (s, a) = start(dir.path());
    for b in ["src", "dst"] {
        assert_eq!(call(&a, "POST", &format!("/api/v1/b/{b}"), &[], b"").0, 201);
    }
    for ts in 1..=20 {
        assert_eq!(
            call(&a, "POST", &format!("/api/v1/b/src/e?ts={ts}"), &[], b"x").0,
            201
        );
    }
    // Tasks replicating into this very server; each PUT moves `from`, so its sender starts
    // a backfill and saves its position while the next PUTs save theirs.
    let url = s.url("");
    let url = url.trim_end_matches('/');
    let until = Instant::now() + Duration::from_secs(3);
    let mut n = 0u64;
    while Instant::now() < until || n < 100 {
        let spec = task("src", url, Some(n % 20));
        let (status, v) = call(
            &a,
            "PUT",
            &format!("/api/v1/replications/t{}", n % 6),
            &[],
            &spec,
        );
        assert!(status == 200 || status == 201, "PUT {n}: {status} {v}");
        n += 1;
    }
    drop(s);
    let (_s, a) = start(dir.path());
    let (status, v) = call(&a, "GET", "/api/v1/replications", &[], b"");
    assert_eq!(status, 200, "{v}");
    let names: Vec<&str> = v["replications"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["t0", "t1", "t2", "t3", "t4", "t5"], "{v}");
}

/// Bug "encoded payload": a single write with `Content-Encoding: gzip` (or `zstd`) was
/// stored as the compressed bytes and read back without any encoding: the client got
/// something else than what it meant to store. It is refused (415) and stores nothing.
#[test]
fn content_encoding_on_a_single_write_was_stored_encoded() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, a) = start(dir.path());
    assert_eq!(call(&a, "POST", "/api/v1/b/b", &[], b"").0, 201);
    for (ts, coding) in [(1, "gzip"), (2, "zstd"), (3, "br, gzip")] {
        for method in ["POST", "PUT"] {
            let got = call(
                &a,
                method,
                &format!("/api/v1/b/b/e?ts={ts}"),
                &[("Content-Encoding", coding)],
                b"not really compressed",
            );
            assert_error(&got, 415, "unsupported_encoding");
        }
        assert_error(
            &call(&a, "GET", &format!("/api/v1/b/b/e?ts={ts}"), &[], b""),
            404,
            "entry_not_found",
        );
    }
    // `identity` is the payload as it is.
    let got = call(
        &a,
        "POST",
        "/api/v1/b/b/e?ts=4",
        &[("Content-Encoding", "identity")],
        b"plain",
    );
    assert_eq!(got.0, 201, "{}", got.1);
    let (status, answer) = raw_http(
        &a,
        format!("GET /api/v1/b/b/e?ts=4 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {ADMIN}\r\n\r\n").as_bytes(),
        T,
    );
    assert_eq!(status, 200);
    assert!(answer.ends_with("\r\n\r\nplain"), "{answer}");
}

/// Bug "unsendable task": a replication task whose `dst_token` held a newline (or any
/// byte a header value cannot hold) was stored (201) and then failed every send with
/// "builder error"; a `dst_url` with `user:password@` was stored and answered back in clear
/// by every GET of the task, while `dst_token` is never answered. Both are 422 now.
#[test]
fn replication_task_with_unsendable_token_or_url_credentials_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, a) = start(dir.path());
    assert_eq!(call(&a, "POST", "/api/v1/b/src", &[], b"").0, 201);
    let bad = [
        r#"{"src_bucket": "src", "dst_url": "http://127.0.0.1:1", "dst_bucket": "d", "dst_token": "tsb_a\r\nx-evil: 1"}"#,
        r#"{"src_bucket": "src", "dst_url": "http://127.0.0.1:1", "dst_bucket": "d", "dst_token": "tsb é"}"#,
        r#"{"src_bucket": "src", "dst_url": "http://user:secret@127.0.0.1:1", "dst_bucket": "d"}"#,
        r#"{"src_bucket": "src", "dst_url": "http://127.0.0.1:1/?token=secret", "dst_bucket": "d"}"#,
    ];
    for (i, spec) in bad.iter().enumerate() {
        let got = call(
            &a,
            "PUT",
            &format!("/api/v1/replications/r{i}"),
            &[],
            spec.as_bytes(),
        );
        assert_error(&got, 422, "invalid_replication");
        assert!(!got.1.to_string().contains("secret"), "{}", got.1);
    }
    let (status, v) = call(&a, "GET", "/api/v1/replications", &[], b"");
    assert_eq!(status, 200);
    assert_eq!(
        v["replications"],
        serde_json::json!([]),
        "a refused task was kept: {v}"
    );
    // A base URL with a path (a reverse proxy's prefix) and a plain token are fine.
    let ok = r#"{"src_bucket": "src", "dst_url": "http://127.0.0.1:1/tsblob/", "dst_bucket": "d", "dst_token": "tsb_0123"}"#;
    let (status, v) = call(&a, "PUT", "/api/v1/replications/ok", &[], ok.as_bytes());
    assert_eq!(status, 201, "{v}");
}

/// Bug "repeated parameter": a parameter given twice kept its last value, silently:
/// `DELETE ?start=100&stop=200&start=0` removed `[0, 200)`, and `POST ?ts=1&ts=2` stored
/// at 2. Every entry route refuses it (400) before touching anything.
#[test]
fn repeated_parameter_took_the_last_value() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, a) = start(dir.path());
    assert_eq!(call(&a, "POST", "/api/v1/b/b", &[], b"").0, 201);
    for ts in [10, 150] {
        assert_eq!(
            call(&a, "POST", &format!("/api/v1/b/b/e?ts={ts}"), &[], b"x").0,
            201
        );
    }
    let e = "/api/v1/b/b/e";
    for (method, path) in [
        ("DELETE", format!("{e}?start=100&stop=200&start=0")),
        ("DELETE", format!("{e}/query?start=100&start=0")),
        ("POST", format!("{e}?ts=1&ts=2")),
        ("GET", format!("{e}?ts=10&ts=150")),
        ("GET", format!("{e}/query?limit=1&limit=2")),
        ("GET", format!("{e}/histogram?step=10&step=20")),
        (
            "POST",
            format!("{e}/batch?if_exists=compare&if_exists=fail"),
        ),
    ] {
        let got = call(&a, method, &path, &[], b"");
        assert_error(&got, 400, "bad_request");
        assert!(
            got.1.to_string().contains("twice"),
            "{method} {path}: {}",
            got.1
        );
    }
    // Nothing was removed or written; parameters that add up still may repeat.
    let (status, answer) = raw_http(
        &a,
        format!("GET {e}/query?meta=true&has=x&has=y&ne.k=1&ne.k=2 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {ADMIN}\r\n\r\n").as_bytes(),
        T,
    );
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = raw_http(
        &a,
        format!("GET {e}/query?meta=true HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {ADMIN}\r\n\r\n").as_bytes(),
        T,
    );
    assert_eq!(status, 200);
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    for ts in ["\"ts\":10,", "\"ts\":150,"] {
        assert!(body.contains(ts), "{ts} is gone: {body}");
    }
    assert!(
        !body.contains("\"ts\":1,") && !body.contains("\"ts\":2,"),
        "{body}"
    );
}

/// A zstd frame of `blocks` RLE blocks of 128 KiB of `byte` each: 4 bytes of body per
/// 128 KiB of plain bytes (a zstd bomb, made by hand: compressing a GiB takes seconds).
fn zstd_bomb(blocks: usize, byte: u8) -> Vec<u8> {
    let mut out = vec![0x28, 0xB5, 0x2F, 0xFD]; // magic
    out.push(0x00); // frame header: no content size, no checksum, no dictionary
    out.push(7 << 3); // window descriptor: 2^(10+7) = 128 KiB
    for i in 0..blocks {
        let last = u32::from(i + 1 == blocks);
        let header = last | (1 << 1) | ((128u32 << 10) << 3); // RLE block of 128 KiB
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.push(byte);
    }
    out
}

/// Bug "zstd bomb": a `Content-Encoding: zstd` batch was decompressed whole into memory
/// (up to `--max-body`, 4 GiB by default) before its frames were parsed: a 32 KB body of
/// one repeated byte took 1 GiB of the server's memory, and a few of them at once would
/// have had it killed. It is decompressed as it is parsed now: the parser refuses the
/// garbage in the first piece and the rest is never produced.
#[test]
fn zstd_bomb_batch_was_decompressed_whole_into_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (s, a) = start(dir.path());
    assert_eq!(call(&a, "POST", "/api/v1/b/b", &[], b"").0, 201);
    let bomb = zstd_bomb(8192, 0x01); // 1 GiB of 0x01: a record frame announcing junk
    assert!(bomb.len() < 40_000);
    let (_, peak_before) = s.rss();
    let started = Instant::now();
    let got = call(
        &a,
        "POST",
        "/api/v1/b/b/e/batch",
        &[
            ("Content-Encoding", "zstd"),
            ("Content-Type", "application/x-tsblob-records"),
        ],
        &bomb,
    );
    assert!(
        got.0 == 400 || got.0 == 413,
        "the bomb was not refused: {} {}",
        got.0,
        got.1
    );
    assert!(got.1["error"]["code"].is_string(), "{}", got.1);
    let (_, peak_after) = s.rss();
    assert!(
        peak_after < peak_before + (256 << 20),
        "peak RSS went from {} MiB to {} MiB for a {}-byte body",
        peak_before >> 20,
        peak_after >> 20,
        bomb.len()
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    // Nothing was stored, and a real zstd batch still goes through.
    let (status, _) = call(&a, "GET", "/api/v1/b/b/e/info", &[], b"");
    assert_eq!(status, 404);
    let body = batch_body(&[(1, 100), (2, 300_000)]);
    let packed = zstd::bulk::compress(&body, 3).unwrap();
    let got = call(
        &a,
        "POST",
        "/api/v1/b/b/e/batch",
        &[("Content-Encoding", "zstd")],
        &packed,
    );
    assert_eq!(got.0, 200, "{}", got.1);
    assert_eq!(got.1["written"], 2, "{}", got.1);
    let (status, answer) = raw_http(
        &a,
        format!("GET /api/v1/b/b/e?ts=2 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {ADMIN}\r\n\r\n").as_bytes(),
        T,
    );
    assert_eq!(status, 200);
    assert!(answer.len() > 300_000, "{} bytes", answer.len());
    // A body that is not zstd at all is still a 400 with the error JSON.
    let got = call(
        &a,
        "POST",
        "/api/v1/b/b/e/batch",
        &[("Content-Encoding", "zstd")],
        b"not zstd",
    );
    assert_error(&got, 400, "bad_request");
}

/// Bug "folder too long": `a/a/.../a`, 255 bytes, was a valid entry name, but its folder
/// (each `/` stored as `%2F`: 509 bytes) was over the file system's 255: its first write
/// was a 500. It is 422 `invalid_name` now, saying why; names that fit still work.
#[test]
fn entry_whose_folder_name_was_too_long_was_a_500() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, a) = start(dir.path());
    assert_eq!(call(&a, "POST", "/api/v1/b/b", &[], b"").0, 201);
    let deep = format!("{}a", "a/".repeat(127));
    for (method, path) in [
        ("POST", format!("/api/v1/b/b/{deep}?ts=1")),
        ("POST", format!("/api/v1/b/b/{deep}/batch")),
    ] {
        let got = call(&a, method, &path, &[], b"x");
        assert_error(&got, 422, "invalid_name");
        assert!(
            got.1["error"]["message"].as_str().unwrap().contains("%2F"),
            "{}",
            got.1
        );
    }
    let fits = format!("{}{}", "abcdefgh/".repeat(20), "y".repeat(35));
    for entry in [fits, "z".repeat(255)] {
        let got = call(&a, "POST", &format!("/api/v1/b/b/{entry}?ts=1"), &[], b"x");
        assert_eq!(got.0, 201, "{entry}: {}", got.1);
        let got = call(&a, "GET", &format!("/api/v1/b/b/{entry}/info"), &[], b"");
        assert_eq!(got.1["record_count"], 1, "{}", got.1);
    }
}

/// Runs the `tsblob` CLI against `url` with the admin token; (success, stdout + stderr).
fn cli(url: &str, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .args(args)
        .env("TSBLOB_URL", url)
        .env("TSBLOB_TOKEN", ADMIN)
        .env_remove("TSBLOB_ALIAS")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Bug "dot segments" (the CLI): names were put into URLs with their `/` as they were, and
/// the URL was normalized before the request left: `tsblob entry rm cams x/../../victim
/// --force` removed the whole bucket `victim`, `tsblob put cams a/../b` wrote to entry `b`
/// and said `cams/a/../b`, and `tsblob bucket rm a/b --force` would remove entry `b` of
/// bucket `a`. Such names now reach the server whole and are refused (422); nothing else
/// is touched.
#[test]
fn cli_dot_segments_removed_another_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let (s, a) = start(dir.path());
    let url = s.url("");
    let url = url.trim_end_matches('/');
    for b in ["cams", "victim", "a"] {
        assert_eq!(call(&a, "POST", &format!("/api/v1/b/{b}"), &[], b"").0, 201);
    }
    for (bucket, entry) in [("victim", "e"), ("a", "b"), ("cams", "b")] {
        let got = call(
            &a,
            "POST",
            &format!("/api/v1/b/{bucket}/{entry}?ts=1"),
            &[],
            b"x",
        );
        assert_eq!(got.0, 201, "{}", got.1);
    }
    let file = dir.path().join("payload");
    std::fs::write(&file, b"payload").unwrap();
    let file = file.to_str().unwrap();
    for args in [
        vec!["entry", "rm", "cams", "x/../../victim", "--force"],
        vec!["bucket", "rm", "a/b", "--force"],
        vec!["put", "cams", "a/../b", file, "--ts", "2"],
        vec!["rm", "cams", "x/../b", "--ts", "1"],
    ] {
        let (ok, out) = cli(url, &args);
        assert!(!ok, "{args:?} succeeded: {out}");
        assert!(out.contains("invalid_name"), "{args:?}: {out}");
    }
    // Everything is still there, untouched.
    for path in [
        "/api/v1/b/victim/e?ts=1",
        "/api/v1/b/a/b?ts=1",
        "/api/v1/b/cams/b?ts=1",
    ] {
        assert_eq!(call(&a, "GET", path, &[], b"").0, 200, "{path} is gone");
    }
    assert_eq!(call(&a, "GET", "/api/v1/b/cams/b?ts=2", &[], b"").0, 404);
}

/// Bug "echo": a refused 60 KB `Content-Type` (or bucket name, or token bucket pattern)
/// was quoted back whole in the error message; the answer now quotes its start and says
/// how long it was.
#[test]
fn errors_echoed_a_huge_value_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, a) = start(dir.path());
    assert_eq!(call(&a, "POST", "/api/v1/b/b", &[], b"").0, 201);
    let huge = "a".repeat(60_000);
    let content_type = format!("text/{huge}");
    let pattern = format!("[\"{huge}\"]");
    let token = format!("{{\"read\": {pattern}}}");
    for (method, path, headers, body, code) in [
        (
            "POST",
            "/api/v1/b/b/e?ts=1".to_string(),
            vec![("Content-Type", content_type.as_str())],
            "x",
            "invalid_content_type",
        ),
        (
            "POST",
            format!("/api/v1/b/{huge}"),
            vec![],
            "",
            "invalid_name",
        ),
        (
            "POST",
            "/api/v1/tokens/t".to_string(),
            vec![],
            token.as_str(),
            "invalid_name",
        ),
    ] {
        let got = call(&a, method, &path, &headers, body.as_bytes());
        assert_error(&got, 422, code);
        let message = got.1["error"]["message"].as_str().unwrap();
        assert!(message.len() < 1000, "{} bytes of message", message.len());
        assert!(message.contains("bytes)"), "{message}");
    }
}
