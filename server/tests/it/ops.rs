//! Operating a server (issue 31, item 3): log formats and the access log, metric names,
//! the config file, the packaged systemd unit, TLS on the listener.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::common::Server;

/// Waits until `s` logged a line containing `needle`, then a little more.
fn settle(s: &Server, needle: &str) {
    assert!(
        s.stderr_contains(needle, Duration::from_secs(5)),
        "no {needle:?} in {}",
        s.stderr_text()
    );
}

/// Logs written to a pipe (a file, journald) carried ANSI colour codes.
#[tokio::test]
async fn logs_to_a_pipe_carried_colour_codes() {
    let s = Server::start(&["--log", "debug"]);
    let c = reqwest::Client::new();
    c.get(s.url("/health")).send().await.unwrap();
    settle(&s, "request");
    let text = s.stderr_text();
    assert!(text.contains("DEBUG"), "{text}");
    assert!(!text.contains('\u{1b}'), "escape codes in {text:?}");
}

/// `--log-format json`: every line one JSON object; `--access-log` logs each request at
/// info, with its method, path and status.
#[tokio::test]
async fn json_logs_and_the_access_log() {
    let s = Server::start(&["--log-format", "json", "--access-log"]);
    let c = reqwest::Client::new();
    let r = c.get(s.url("/api/v1/b/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    settle(&s, "/api/v1/b/nope");
    let text = s.stderr_text();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let access = lines
        .iter()
        .find(|l| l["path"] == "/api/v1/b/nope")
        .unwrap();
    assert_eq!(access["level"], "INFO", "{access}");
    assert_eq!(access["target"], "tsblob::access", "{access}");
    assert_eq!(access["status"], 404, "{access}");
    assert_eq!(access["method"], "GET", "{access}");
    assert!(access["micros"].is_u64(), "{access}");
    assert!(access["timestamp"].is_string(), "{access}");
}

/// Without `--access-log` a client error (4xx) is not logged at info or warn: a client
/// probing for missing buckets does not fill the operator's log.
#[tokio::test]
async fn client_errors_are_logged_at_debug_only() {
    let s = Server::start(&["--log-format", "json"]);
    let c = reqwest::Client::new();
    for _ in 0..5 {
        let r = c.get(s.url("/api/v1/b/nope")).send().await.unwrap();
        assert_eq!(r.status(), 404);
    }
    let r = c.post(s.url("/api/v1/b/x/e?ts=abc")).send().await.unwrap();
    assert!(r.status().is_client_error());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = s.stderr_text();
    assert!(!text.contains("nope"), "{text}");
    assert!(!text.contains("\"WARN\""), "{text}");
    // At debug the same requests are there.
    let s = Server::start(&["--log-format", "json", "--log", "info,tsblob::access=debug"]);
    c.get(s.url("/api/v1/b/nope")).send().await.unwrap();
    settle(&s, "/api/v1/b/nope");
    assert!(s.stderr_text().contains("\"DEBUG\""));
}

/// Monotonic counts (`tsblob_quota_evicted_blocks`, `tsblob_tier_*`) were exported as gauges
/// without `_total`; there were no `process_*` metrics and no build information.
#[tokio::test]
async fn counts_were_gauges_without_total_and_no_process_metrics() {
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    let text = c
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for counter in [
        "tsblob_quota_evicted_blocks_total",
        "tsblob_retention_expired_blocks_total",
        "tsblob_http_requests_total",
        "process_cpu_seconds_total",
    ] {
        assert!(
            text.contains(&format!("# TYPE {counter} counter")),
            "{counter} is not a counter in {text}"
        );
    }
    // The Prometheus conventions: a counter is named `_total`, and only a counter is.
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut words = line.split_whitespace().skip(2);
        let (name, kind) = (words.next().unwrap(), words.next().unwrap());
        assert_eq!(
            name.ends_with("_total"),
            kind == "counter",
            "{line}: counters and only counters end in _total"
        );
    }
    for gauge in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            text.contains(&format!("\n{gauge} ")),
            "no {gauge} in {text}"
        );
    }
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        text.lines().any(|l| l.starts_with("tsblob_build_info{")
            && l.contains(&format!("version=\"{version}\""))
            && l.ends_with(" 1")),
        "no tsblob_build_info in {text}"
    );
}

/// `--config FILE`: a flag wins over its variable, the variable over the file, the file
/// over the default.
#[tokio::test]
async fn the_config_file_sits_below_variables_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tsblob.toml");
    std::fs::write(
        &file,
        // `listen` and `data` lose to the flags the test server is started with.
        "listen = \"192.0.2.1:1\"\ndata = \"/nonexistent/tsblob\"\nmax-body = \"10B\"\nlog-format = \"json\"\naccess-log = true\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let s = Server::start_in_env(
        &data,
        &["--config", file.to_str().unwrap()],
        &[("TSBLOB_MAX_BODY", "20B")],
    );
    let c = reqwest::Client::new();
    assert_eq!(
        c.post(s.url("/api/v1/b/b")).send().await.unwrap().status(),
        201
    );
    let put = |n: usize| {
        c.post(s.url(&format!("/api/v1/b/b/e?ts={n}")))
            .body(vec![b'x'; n])
            .send()
    };
    // The variable's 20 B, not the file's 10 B.
    assert_eq!(put(15).await.unwrap().status(), 201);
    assert_eq!(put(25).await.unwrap().status(), 413);
    // The file's log format and access log.
    settle(&s, "/api/v1/b/b/e");
    for line in s.stderr_text().lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    // The same with TSBLOB_CONFIG instead of the flag.
    let s = Server::start_in_env(
        &dir.path().join("data2"),
        &[],
        &[("TSBLOB_CONFIG", file.to_str().unwrap())],
    );
    assert_eq!(
        c.post(s.url("/api/v1/b/b")).send().await.unwrap().status(),
        201
    );
    assert_eq!(put_to(&c, &s, 15).await, 413, "the file's 10 B");
}

async fn put_to(c: &reqwest::Client, s: &Server, n: usize) -> u16 {
    c.post(s.url(&format!("/api/v1/b/b/e?ts={n}")))
        .body(vec![b'x'; n])
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// An unknown key in the config file stops the server at start, naming the key.
#[test]
fn an_unknown_config_key_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tsblob.toml");
    std::fs::write(&file, "max-body = \"1MiB\"\nmax-bodys = \"2MiB\"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .args(["serve", "--data"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&file)
        .env_remove("TSBLOB_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`max-bodys`"), "{stderr}");
    assert!(!dir.path().join("data").exists(), "it started");
}

/// Hostile probe of 2026-11-28: `--config /dev/zero` grew `serve` to 4.6 GB in 8 s, a
/// named pipe made it wait for ever, and a config file holding `token` that every user
/// could read started the server without a word. Now a config file is a regular file of
/// at most 1 MiB (exit 2, saying so), and such a token is warned about.
#[test]
fn a_config_file_of_any_size_or_kind_was_read_whole() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // A data "folder" that is a file: the server stops right after reading its config.
    let not_a_folder = dir.path().join("data");
    std::fs::write(&not_a_folder, b"").unwrap();
    let serve = |config: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
            .args(["serve", "--data"])
            .arg(&not_a_folder)
            .arg("--config")
            .arg(config)
            .env_remove("TSBLOB_CONFIG")
            .output()
            .unwrap()
    };
    let big = dir.path().join("big.toml");
    std::fs::write(&big, format!("# {}\n", "x".repeat(2 << 20))).unwrap();
    let fifo = dir.path().join("fifo.toml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for (config, says) in [
        (std::path::Path::new("/dev/zero"), "not a regular file"),
        (fifo.as_path(), "not a regular file"),
        (big.as_path(), "larger than 1024 KiB"),
    ] {
        let started = std::time::Instant::now();
        let out = serve(config);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{config:?}: {stderr}");
        assert!(stderr.contains(says), "{config:?}: {stderr}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }
    let open = dir.path().join("open.toml");
    std::fs::write(&open, "token = \"a-secret-token-0123456789\"\n").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let stderr = String::from_utf8_lossy(&serve(&open).stderr).into_owned();
    assert!(stderr.contains("can be read by every user"), "{stderr}");
    assert!(
        !stderr.contains("a-secret-token"),
        "the token was printed: {stderr}"
    );
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o600)).unwrap();
    let stderr = String::from_utf8_lossy(&serve(&open).stderr).into_owned();
    assert!(!stderr.contains("can be read by every user"), "{stderr}");
}

fn packaging(file: &str) -> (std::path::PathBuf, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../packaging")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

/// `packaging/tsblob.service`: `systemd-analyze verify` finds nothing to say about it (where
/// systemd is installed; it runs the unit's ExecStart against the binary just built), its
/// ExecStart parses as `tsblob serve` flags, and `packaging/tsblob.env` and
/// `packaging/tsblob.toml` name only settings that exist.
#[test]
fn the_packaged_unit_env_file_and_config_are_valid() {
    use clap::CommandFactory;
    use tsblob_server::cli::app::Cli;
    let (_, unit) = packaging("tsblob.service");
    // The parser check that runs everywhere: sections and Key=Value lines only.
    let mut section = "";
    let mut exec = None;
    for line in unit.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            section = line;
            assert!(
                ["[Unit]", "[Service]", "[Install]"].contains(&line),
                "{line}"
            );
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("{line:?}"));
        assert!(!section.is_empty(), "{line} before any section");
        assert!(key.chars().all(|c| c.is_ascii_alphanumeric()), "{line}");
        if key == "ExecStart" {
            exec = Some(value.to_string());
        }
    }
    let exec = exec.expect("no ExecStart");
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(argv[0], "/usr/local/bin/tsblob");
    // Every flag of ExecStart exists (parsed without reading the config file it names).
    let mut parsed_argv = vec!["tsblob"];
    parsed_argv.extend(&argv[1..]);
    Cli::command()
        .try_get_matches_from(&parsed_argv)
        .unwrap_or_else(|e| panic!("ExecStart {exec}: {e}"));

    let serve = Cli::command();
    let serve = serve.find_subcommand("serve").unwrap();
    let vars: Vec<String> = serve
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    let (_, env) = packaging("tsblob.env");
    for line in env.lines().map(|l| l.trim().trim_start_matches('#')) {
        let Some((key, _)) = line.split_once('=') else {
            continue;
        };
        if key.starts_with("TSBLOB_") {
            assert!(
                vars.iter().any(|v| v == key),
                "{key} is no setting of serve"
            );
        } else {
            assert!(key.starts_with("AWS_"), "{line}");
        }
    }
    // The example config file parses with the server's own parser.
    let (toml_path, _) = packaging("tsblob.toml");
    let cli = Cli::parse_with_config(
        ["tsblob", "serve", "--config", toml_path.to_str().unwrap()]
            .iter()
            .map(Into::into)
            .collect(),
    )
    .unwrap_or_else(|e| panic!("packaging/tsblob.toml: {e}"));
    assert!(matches!(
        cli.command,
        tsblob_server::cli::app::Command::Serve(_)
    ));

    // systemd's own check, where systemd is installed.
    let Ok(probe) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("systemd-analyze is not installed: the unit was only parsed");
        return;
    };
    assert!(probe.status.success());
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tsblob.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/tsblob", env!("CARGO_BIN_EXE_tsblob")),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // verify exits 0 on an unknown or unparsable key, but says so.
    let about_it: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("tsblob.service"))
        .collect();
    assert!(about_it.is_empty(), "{about_it:#?}");
}

/// A `tsblob serve --tls-cert --tls-key` child process: its https address and the process.
struct TlsServer {
    child: std::process::Child,
    addr: String,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_tls(dir: &std::path::Path, cert: &std::path::Path, key: &std::path::Path) -> TlsServer {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.join("data"))
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .env_remove("TSBLOB_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("https://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("not serving https: {line:?}"))
        .to_string();
    TlsServer { child, addr }
}

/// `--tls-cert`/`--tls-key`: the listener speaks TLS (rustls); a client trusting the
/// certificate (reqwest, the CLI with `--ca`) gets answers, one that does not, or that
/// speaks plain http, gets none.
#[tokio::test]
async fn the_listener_serves_tls_with_the_given_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let (cert, key, ca) = (
        dir.path().join("cert.pem"),
        dir.path().join("key.pem"),
        made.cert.pem(),
    );
    std::fs::write(&cert, &ca).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let s = serve_tls(dir.path(), &cert, &key);
    let port = s.addr.rsplit(':').next().unwrap().to_string();

    // A real TLS client trusting the certificate.
    let trusting = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .build()
        .unwrap();
    for host in ["localhost", "127.0.0.1"] {
        let r = trusting
            .get(format!("https://{host}:{port}/health"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{host}");
        assert_eq!(r.version(), reqwest::Version::HTTP_11);
    }
    let r = trusting
        .post(format!("https://localhost:{port}/api/v1/b/cams"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // Not trusting it, or speaking plain http: no answer.
    let e = reqwest::Client::new()
        .get(format!("https://localhost:{port}/health"))
        .send()
        .await
        .unwrap_err();
    assert!(e.is_connect(), "{e:?}");
    assert!(reqwest::Client::new()
        .get(format!("http://localhost:{port}/health"))
        .send()
        .await
        .is_err());

    // The CLI with --ca (and TSBLOB_CA), and without.
    let cli = |args: &[&str], env: &[(&str, &std::path::Path)]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"));
        cmd.args(args)
            .args(["--url", &format!("https://localhost:{port}")])
            .env_remove("TSBLOB_CA")
            .env_remove("TSBLOB_URL")
            .env_remove("TSBLOB_TOKEN")
            .env_remove("TSBLOB_ALIAS");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let out = cli(&["bucket", "ls", "--ca", cert.to_str().unwrap()], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("cams"));
    let out = cli(&["bucket", "ls"], &[("TSBLOB_CA", &cert)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&["bucket", "ls"], &[]);
    assert!(!out.status.success());
}

/// A key that is not the certificate's, or a file that is no certificate, stops the start
/// with a message naming the flag.
#[test]
fn a_mismatched_tls_pair_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let a = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let b = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, a.cert.pem()).unwrap();
    std::fs::write(&key, b.signing_key.serialize_pem()).unwrap();
    let run = |cert: &std::path::Path, key: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir.path().join("data"))
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .env_remove("TSBLOB_CONFIG")
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run(&cert, &key);
    assert!(e.contains("--tls-cert and --tls-key"), "{e}");
    let e = run(&key, &key);
    assert!(e.contains("--tls-cert"), "{e}");
    // One without the other is a usage error.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .args(["serve", "--tls-cert"])
        .arg(&cert)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Runs the `tsblob` CLI against `url` (none of the caller's TSBLOB_* variables), with
/// `stdin`: exit code, stdout, stderr.
fn tsblob(url: &str, args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    use std::io::Write;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"));
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("TSBLOB_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("TSBLOB_URL", url);
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Bug "bad values exit 1 or 7": a server URL that is not one was "cannot reach the server"
/// (7, the network's code), and a `--when` that is not JSON or an unknown alias exited 1;
/// each is a usage error (2), as clap's own, said before any request.
#[test]
fn bad_values_exit_with_the_usage_code() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().to_str().unwrap();
    for (args, says) in [
        (&["bucket", "ls", "--url", "notaurl"][..], "is not a URL"),
        (
            &["bucket", "ls", "--url", "ftp://x"][..],
            "http:// or https://",
        ),
        // Credentials or a query in the URL (ops probe of 2026-11-29: Basic auth replaced
        // the token; `?token=` failed as "not JSON"), never repeated in the message.
        (
            &["bucket", "ls", "--url", "http://user:s3cret@127.0.0.1:9"][..],
            "carries credentials",
        ),
        (
            &["bucket", "ls", "--url", "http://127.0.0.1:9/?token=s3cret"][..],
            "has a query",
        ),
        (&["query", "b", "e", "--when", "{bad"][..], "--when"),
        (&["query", "b", "e", "--when", "[1]"][..], "JSON object"),
        (&["bucket", "ls", "-a", "nosuchalias"][..], "no alias"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
            .args(args)
            .env_remove("TSBLOB_URL")
            .env_remove("TSBLOB_ALIAS")
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home)
            .env("TSBLOB_URL", "http://127.0.0.1:9")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("s3cret"), "{args:?}: {err}");
    }
}

/// `tsblob cp` into a missing bucket retried the 404 and ended with "Broken pipe"; it now
/// creates the bucket with the source's settings (or, with --no-source-settings, the
/// destination's defaults) and copies.
#[tokio::test]
async fn cp_into_a_missing_bucket_ended_with_broken_pipe() {
    let a = Server::start(&[]);
    let b = Server::start(&[]);
    let c = reqwest::Client::new();
    let r = c
        .post(a.url("/api/v1/b/src"))
        .body(r#"{"quota_type":"fifo","quota_size":1048576,"compression":"zstd"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    for ts in 1..=3 {
        let r = c
            .post(a.url(&format!("/api/v1/b/src/cam?ts={ts}")))
            .body(vec![b'x'; 100])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let (code, _, err) = tsblob(
        &a.url(""),
        &["cp", &a.url("/src"), &b.url("/dst"), "-q"],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let info: serde_json::Value = c
        .get(b.url("/api/v1/b/dst"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["settings"]["quota_type"], "fifo", "{info}");
    assert_eq!(info["settings"]["quota_size"], 1048576, "{info}");
    assert_eq!(info["info"]["record_count"], 3, "{info}");
    let (code, _, err) = tsblob(
        &a.url(""),
        &[
            "cp",
            &a.url("/src"),
            &b.url("/plain"),
            "-q",
            "--no-source-settings",
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let info: serde_json::Value = c
        .get(b.url("/api/v1/b/plain"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["settings"]["quota_type"], "none", "{info}");
    assert_eq!(info["info"]["record_count"], 3, "{info}");
}

/// Every error exited 1; now usage 2, not found 3, conflict 4, auth 5, network 7
/// (`tsblob --help` lists them); `bucket create --exist-ok` succeeds on an existing bucket
/// and warns about a setting that differs; `put -` reads stdin; listings take --json.
#[test]
fn every_cli_error_exited_1() {
    let s = Server::start(&[]);
    let url = s.url("");
    assert_eq!(tsblob(&url, &["bucket", "info", "nope"], b"").0, 3);
    assert_eq!(tsblob(&url, &["bucket", "create", "b"], b"").0, 0);
    assert_eq!(tsblob(&url, &["bucket", "create", "b"], b"").0, 4);
    let (code, _, err) = tsblob(
        &url,
        &[
            "bucket",
            "create",
            "b",
            "--exist-ok",
            "--quota-type",
            "fifo",
            "--quota-size",
            "1MiB",
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("quota_type"), "{err}");
    assert!(!tsblob(&url, &["bucket", "create", "b", "--exist-ok"], b"")
        .1
        .is_empty());
    assert_eq!(tsblob(&url, &["bucket", "ls", "--no-such-flag"], b"").0, 2);
    let (code, _, err) = tsblob(&url, &["put", "b", "e", "-", "--ts", "5"], b"from stdin");
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = tsblob(&url, &["get", "b", "e", "--ts", "5"], b"");
    assert_eq!((code, out.as_str()), (0, "from stdin"));
    let (code, out, err) = tsblob(&url, &["replication", "ls", "--json"], b"");
    assert_eq!(code, 0, "{err}");
    assert!(out.is_empty(), "{out}");
    // Closed port: network.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (code, _, err) = tsblob(&format!("http://127.0.0.1:{port}"), &["bucket", "ls"], b"");
    assert_eq!(code, 7, "{err}");
    // Bug "said twice": the message quoted its causes and the CLI printed the chain of
    // causes after it again ("...: Connection refused (os error 111): error sending...").
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    // A missing MCAP file: the I/O error once.
    let dest = format!("{}/b", url.trim_end_matches('/'));
    let (code, _, err) = tsblob(&url, &["cp", "/nonexistent/in.mcap", &dest], b"");
    assert_ne!(code, 0, "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
    // A server with a token, asked without one: auth.
    let t = Server::start(&["--token", "s3cret"]);
    assert_eq!(tsblob(&t.url(""), &["bucket", "ls"], b"").0, 5);
}

/// `tsblob lifecycle set|ls|get|run|rm` (issue 28, item 3): a bucket's lifecycle rules from
/// the command line; a missing rule exits 3.
#[test]
fn lifecycle_cli_sets_lists_runs_and_removes_rules() {
    let s = Server::start(&[]);
    let url = s.url("");
    assert_eq!(tsblob(&url, &["bucket", "create", "b"], b"").0, 0);
    let old = tsblob_storage::now_micros() - 2 * 3_600_000_000;
    for (e, ts) in [("cams/raw", old), ("cams/raw", old + 1), ("cams/jpeg", old)] {
        let ts = ts.to_string();
        let (code, _, err) = tsblob(&url, &["put", "b", e, "-", "--ts", &ts], b"x");
        assert_eq!(code, 0, "{err}");
    }
    let (code, out, err) = tsblob(
        &url,
        &[
            "lifecycle",
            "set",
            "b",
            "raw",
            "--older-than",
            "1h",
            "--interval",
            "10m",
            "--entries",
            "cams/*,!cams/jpeg",
            "--mode",
            "disabled",
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("raw") && out.contains("older than 1h"),
        "{out}"
    );
    let (code, out, err) = tsblob(&url, &["lifecycle", "run", "b", "raw"], b"");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("removed 2 records"), "{out}");
    let (code, out, _) = tsblob(&url, &["lifecycle", "get", "b", "raw", "--json"], b"");
    assert_eq!(code, 0);
    let rule: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rule["status"]["removed"], 2);
    assert_eq!(rule["entries"], serde_json::json!(["cams/*", "!cams/jpeg"]));
    let (code, out, _) = tsblob(&url, &["lifecycle", "ls", "b", "--json"], b"");
    assert_eq!((code, out.lines().count()), (0, 1), "{out}");
    assert_eq!(tsblob(&url, &["lifecycle", "rm", "b", "raw"], b"").0, 0);
    assert_eq!(tsblob(&url, &["lifecycle", "get", "b", "raw"], b"").0, 3);
    let (code, _, err) = tsblob(
        &url,
        &[
            "lifecycle",
            "set",
            "b",
            "c",
            "--older-than",
            "1d",
            "--when",
            "{nope",
        ],
        b"",
    );
    // A usage mistake: 2, as `--help` says (it was 1 here, 2 from `query`).
    assert_eq!(code, 2, "{err}");
}

/// Bug "a dry run said it removed records": `tsblob lifecycle run` of a `dry_run` rule
/// printed "removed 3 records" and `lifecycle ls` "removed 3", with every record still
/// there. They say what it would have removed.
#[test]
fn a_dry_run_said_it_removed_records() {
    let s = Server::start(&[]);
    let url = s.url("");
    assert_eq!(tsblob(&url, &["bucket", "create", "b"], b"").0, 0);
    let old = tsblob_storage::now_micros() - 2 * 3_600_000_000;
    for ts in [old, old + 1, old + 2] {
        let ts = ts.to_string();
        assert_eq!(
            tsblob(&url, &["put", "b", "e", "-", "--ts", &ts], b"x").0,
            0
        );
    }
    let set = [
        "lifecycle",
        "set",
        "b",
        "r",
        "--older-than",
        "1h",
        "--mode",
        "dry_run",
    ];
    let (code, _, err) = tsblob(&url, &set, b"");
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = tsblob(&url, &["lifecycle", "run", "b", "r"], b"");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("dry run: would remove 3 records"), "{out}");
    assert!(!out.contains("removed"), "{out}");
    let (code, out, err) = tsblob(&url, &["lifecycle", "ls", "b"], b"");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("would have removed 3"), "{out}");
    let (code, out, err) = tsblob(&url, &["query", "b", "e", "--json"], b"");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 3, "{out}");
}

/// Issue 28: the bulk routes (`PATCH …/query`, `PATCH`/`DELETE …/batch`) had no CLI; a
/// change to many records took one `tsblob` call each. `tsblob label` sets and removes labels
/// of one record, of several by timestamp, or of a selection; `tsblob rm --ts` repeats. A
/// missing record fails alone (exit 3, the others changed).
#[tokio::test]
async fn cli_label_and_rm_of_many_records_in_one_request() {
    let s = Server::start(&[]);
    let c = reqwest::Client::new();
    let r = c.post(s.url("/api/v1/b/cams")).send().await.unwrap();
    assert_eq!(r.status(), 201);
    for ts in 1..=6u64 {
        let side = if ts % 2 == 0 { "left" } else { "right" };
        let r = c
            .post(s.url(&format!("/api/v1/b/cams/e?ts={ts}")))
            .header("x-tsblob-label-side", side)
            .body(vec![b'x'; 10])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    let url = s.url("");
    let labels = |c: reqwest::Client, url: String| async move {
        let r = c
            .get(format!("{url}/api/v1/b/cams/e/query?meta=true"))
            .send()
            .await
            .unwrap();
        let body = r.text().await.unwrap();
        body.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["ts"].is_u64())
            .map(|v| (v["ts"].as_u64().unwrap(), v["labels"].clone()))
            .collect::<std::collections::BTreeMap<u64, serde_json::Value>>()
    };

    // A selection: the left records of [1, 5), evaluated before the change.
    let (code, out, err) = tsblob(
        &url,
        &[
            "label",
            "cams",
            "e",
            "--set",
            "seen=yes",
            "--unset",
            "side",
            "--start",
            "1",
            "--stop",
            "5",
            "--when",
            r#"{"&side": {"$eq": "left"}}"#,
        ],
        b"",
    );
    assert_eq!((code, out.trim()), (0, "updated 2"), "{err}");
    let l = labels(c.clone(), url.clone()).await;
    assert_eq!(l[&2], serde_json::json!({"seen": "yes"}));
    assert_eq!(l[&4], serde_json::json!({"seen": "yes"}));
    assert_eq!(
        l[&6],
        serde_json::json!({"side": "left"}),
        "outside the range"
    );
    assert_eq!(l[&3], serde_json::json!({"side": "right"}), "not matching");

    // Several timestamps: one missing fails alone, with the not-found exit code.
    let (code, out, err) = tsblob(
        &url,
        &[
            "label", "cams", "e", "--set", "k=v", "--ts", "1", "--ts", "99", "--ts", "3",
        ],
        b"",
    );
    assert_eq!(code, 3, "{out} {err}");
    assert!(
        out.contains("updated 2") && err.contains("ts 99: 404"),
        "{out} {err}"
    );
    let l = labels(c.clone(), url.clone()).await;
    assert_eq!(
        (&l[&1]["k"], &l[&3]["k"]),
        (&serde_json::json!("v"), &serde_json::json!("v"))
    );

    // Nothing to change, or no selection: refused before any request (the usage exit
    // code), nothing changed.
    let (code, _, err) = tsblob(&url, &["label", "cams", "e", "--ts", "1"], b"");
    assert!(code == 2 && err.contains("--set"), "{err}");
    let (code, _, err) = tsblob(&url, &["label", "cams", "e", "--set", "a=b"], b"");
    assert!(code == 2 && err.contains("--all"), "{err}");
    assert_eq!(labels(c.clone(), url.clone()).await, l);

    // rm with several --ts: the listed records go, a missing one is reported.
    let (code, out, err) = tsblob(
        &url,
        &["rm", "cams", "e", "--ts", "2", "--ts", "5", "--ts", "77"],
        b"",
    );
    assert_eq!(code, 3, "{out} {err}");
    assert!(
        out.contains("removed 2") && err.contains("ts 77: 404"),
        "{out} {err}"
    );
    let left: Vec<u64> = labels(c.clone(), url.clone()).await.into_keys().collect();
    assert_eq!(left, vec![1, 3, 4, 6]);
}

/// Bug (newcomer walkthrough of 2026-11-30): `packaging/tsblob.env` ships
/// `TSBLOB_TOKEN=change-me-to-a-long-random-token`, and a server given it (the install's
/// `sed` step skipped) started on any address with an admin token published in the
/// repository; a 1-character token on 0.0.0.0 was taken without a word. The placeholder is
/// refused at start, and a token shorter than 16 characters beyond loopback is warned about.
#[test]
fn the_packaged_placeholder_token_was_accepted() {
    let (_, env) = packaging("tsblob.env");
    let placeholder = env
        .lines()
        .find_map(|l| {
            l.trim()
                .trim_start_matches('#')
                .strip_prefix("TSBLOB_TOKEN=")
        })
        .unwrap();
    assert_eq!(placeholder, tsblob_server::serve::PLACEHOLDER_TOKEN);
    for (args, env) in [
        (&[][..], &[("TSBLOB_TOKEN", placeholder)][..]),
        (&["--token", placeholder][..], &[][..]),
    ] {
        let (status, err) = crate::common::run_serve_briefly(args, env, Duration::from_secs(20));
        assert!(
            status.is_some_and(|s| s != 0),
            "started with the placeholder token ({status:?}): {err}"
        );
        assert!(
            err.contains("placeholder") && err.contains("openssl rand -hex 32"),
            "{err}"
        );
    }

    let short = Server::start_on("0.0.0.0:0", &["--token", "a"]);
    settle(&short, "is only 1 character long");
    assert!(
        short.stderr_text().contains("openssl rand -hex 32"),
        "{}",
        short.stderr_text()
    );
    // A long token beyond loopback, or a short one on loopback: nothing to say.
    let long = Server::start_on("0.0.0.0:0", &["--token", "0123456789abcdef"]);
    let local = Server::start(&["--token", "a"]);
    std::thread::sleep(Duration::from_millis(300));
    for s in [&long, &local] {
        assert!(!s.stderr_text().contains("is only"), "{}", s.stderr_text());
    }
}

/// Bug (newcomer walkthrough of 2026-11-30): `TSBLOB_TOKEN` in the environment and
/// `--no-auth` said "the argument '--no-auth' cannot be used with '--token <TOKEN>'",
/// though no `--token` was given.
#[test]
fn no_auth_with_the_token_variable_blamed_a_flag_not_given() {
    let (status, err) = crate::common::run_serve_briefly(
        &["--no-auth"],
        &[("TSBLOB_TOKEN", "0123456789abcdef0123")],
        Duration::from_secs(20),
    );
    assert_eq!(status, Some(2), "{err}");
    assert!(
        err.contains(
            "TSBLOB_TOKEN is set (an admin token) and --no-auth asks for none: drop one of them"
        ),
        "{err}"
    );
    assert!(!err.contains("'--token <TOKEN>'"), "{err}");
}

/// Bug (ops probe of 2026-11-29): docs/operations.md says every flag of `tsblob serve` is
/// in its configuration table, but `--default-max-age` and `--max-open-files` were not.
#[test]
fn every_serve_flag_is_in_the_operations_table() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md"),
    )
    .unwrap();
    let table: Vec<&str> = docs.lines().filter(|l| l.starts_with("| `--")).collect();
    let flags: Vec<&str> = help
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .filter_map(|l| l.split([' ', '<']).next())
        .filter(|f| *f != "help")
        .collect();
    assert!(flags.len() > 50, "{help}");
    let missing: Vec<&&str> = flags
        .iter()
        .filter(|f| {
            !table.iter().any(|row| {
                row.starts_with(&format!("| `--{f} ")) || row.starts_with(&format!("| `--{f}`"))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/operations.md's table: {missing:?}"
    );
}
