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
