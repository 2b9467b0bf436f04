//! The `tsblob` CLI against a real server: what a new user's walkthrough met (report of the
//! new-user walkthrough, sections B.10–B.24), each test named after the bug it pins.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use crate::common::Server;

/// The `tsblob` under test: this build, or the one `TSBLOB_TEST_BIN` names (as for the
/// servers of `common`: an older build shows which of these tests fail without a fix).
fn bin() -> std::ffi::OsString {
    std::env::var_os("TSBLOB_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_tsblob").into())
}

/// Runs `tsblob` on `url` with `token` and nothing else from the environment (its
/// configuration folder, for aliases, is `config`): (exit code, stdout, stderr).
fn tsblob_in(
    config: &Path,
    url: &str,
    token: Option<&str>,
    args: &[&str],
) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    for (k, _) in std::env::vars() {
        if k.starts_with("TSBLOB_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(args)
        .env("TSBLOB_URL", url)
        .env("XDG_CONFIG_HOME", config)
        .env("HOME", config);
    if let Some(t) = token {
        cmd.env("TSBLOB_TOKEN", t);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A server and a way to run the CLI against it.
struct Cli {
    server: Server,
    config: tempfile::TempDir,
}

impl Cli {
    fn start(args: &[&str]) -> Cli {
        Cli {
            server: Server::start(args),
            config: tempfile::tempdir().unwrap(),
        }
    }

    fn run(&self, token: Option<&str>, args: &[&str]) -> (i32, String, String) {
        tsblob_in(self.config.path(), &self.server.url(""), token, args)
    }

    /// Runs and expects exit 0: (stdout, stderr).
    fn ok(&self, token: Option<&str>, args: &[&str]) -> (String, String) {
        let (code, out, err) = self.run(token, args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        (out, err)
    }

    fn file(&self, name: &str, data: &[u8]) -> String {
        let p = self.config.path().join(name);
        std::fs::write(&p, data).unwrap();
        p.to_str().unwrap().to_string()
    }
}

/// B.11: the server's advice for HTTP clients ("send `Authorization: Bearer <token>`",
/// "list them with GET /api/v1/replications") reached CLI users as it was.
#[test]
fn cli_errors_gave_http_advice() {
    let c = Cli::start(&["--token", "root"]);
    let (code, _, err) = c.run(None, &["bucket", "ls"]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("401 unauthorized: this server needs a token: give one with --token, TSBLOB_TOKEN, or a saved alias (-a ALIAS"),
        "{err}"
    );
    assert!(!err.contains("Authorization"), "{err}");
    let (code, _, err) = c.run(Some("root"), &["replication", "rm", "r1"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("404 replication_not_found")
            && err.contains("list them with `tsblob replication ls`"),
        "{err}"
    );
    assert!(!err.contains("GET /api"), "{err}");
}

/// B.11, B.10 and B.24 on a server without tokens: the last token's removal advised
/// `DELETE ...?disable_auth=true`, `token create admin` said "already exists", and
/// `token me` printed an empty name in a padded column.
#[test]
fn the_last_token_admin_and_token_me_on_an_open_server() {
    let c = Cli::start(&[]);
    let (out, _) = c.ok(None, &["token", "me"]);
    assert_eq!(
        out.trim(),
        "(no token: the server is open; every request has full access)"
    );
    let (code, _, err) = c.run(None, &["token", "create", "admin", "--full-access"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("409 token_exists")
            && err.contains("reserved for the server's --token admin token")
            && !err.contains("already exists"),
        "{err}"
    );
    let (out, _) = c.ok(None, &["token", "create", "boss", "--full-access"]);
    let boss = out.trim().to_string();
    let (code, _, err) = c.run(Some(&boss), &["token", "rm", "boss"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("409 last_token")
            && err.contains("or confirm with `tsblob token rm boss --disable-auth`"),
        "{err}"
    );
    c.ok(Some(&boss), &["token", "rm", "boss", "--disable-auth"]);
}

/// B.12: `put --ts 1700000010` stored a record in 1970 without a word.
#[test]
fn timestamps_in_seconds_were_taken_as_microseconds() {
    let c = Cli::start(&[]);
    c.ok(None, &["bucket", "create", "b"]);
    let f = c.file("t.txt", b"hi");
    let (out, err) = c.ok(None, &["put", "b", "e", &f, "--ts", "1700000010"]);
    assert!(out.contains("@ 1700000010 "), "{out}");
    assert!(
        err.contains("warning: timestamp 1700000010 looks like seconds since the epoch")
            && err.contains("give 1700000010000000"),
        "{err}"
    );
    let (_, err) = c.ok(
        None,
        &["query", "b", "e", "--start", "1700000000000", "--list"],
    );
    assert!(err.contains("looks like milliseconds"), "{err}");
    let (_, err) = c.ok(None, &["put", "b", "e", &f, "--ts", "1700000000000000"]);
    assert!(!err.contains("warning"), "{err}");
}

/// B.22: "you did not say which records" exited 2 for `label` but 1 for `rm`, and the
/// removals without --force exited 1; the help defines 2 as usage.
#[test]
fn no_selection_exited_1_or_2() {
    let c = Cli::start(&[]);
    c.ok(None, &["bucket", "create", "b"]);
    let f = c.file("t.txt", b"hi");
    c.ok(None, &["put", "b", "e", &f, "--ts", "5"]);
    for args in [
        &["rm", "b", "e"][..],
        &["rm", "b", "e", "--all"],
        &["label", "b", "e", "--set", "c=1"],
        &["bucket", "rm", "b"],
        &["entry", "rm", "b", "e"],
        &["bucket", "update", "b"],
        &["rm", "b", "e", "--limit", "1"],
    ] {
        let (code, _, err) = c.run(None, args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    let (out, _) = c.ok(None, &["query", "b", "e", "--list"]);
    assert_eq!(out.lines().count(), 1, "nothing was removed: {out}");
}

/// B.19: the client flags were unknown before the command (`tsblob -a r2 bucket ls`).
#[test]
fn client_flags_had_to_come_after_the_subcommand() {
    let c = Cli::start(&[]);
    c.ok(None, &["bucket", "create", "b"]);
    let url = c.server.url("");
    let (out, _) = c.ok(None, &["--url", &url, "bucket", "ls"]);
    assert!(out.starts_with("b "), "{out}");
    c.ok(None, &["alias", "add", "r2", &url]);
    // TSBLOB_URL points nowhere: only the alias finds the server.
    let run = |args: &[&str]| tsblob_in(c.config.path(), "http://127.0.0.1:9", None, args);
    let (code, out, err) = run(&["-a", "r2", "bucket", "ls"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("b "), "{out}");
    let (code, _, err) = run(&["bucket", "ls"]);
    assert_eq!(code, 7, "{err}");
    let (code, _, err) = run(&["-a", "r2", "serve"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("-a/--alias before `serve`"), "{err}");
}

/// B.24 and B.20: "1 records", "1 entries", "removed 1 attachment(s)"; `query --list` said
/// "3 records" where README.md shows "3 records, 31 B"; a link to a text/plain record was
/// named `.bin`.
#[test]
fn counts_and_link_names_a_new_user_met() {
    let c = Cli::start(&[]);
    c.ok(None, &["bucket", "create", "b"]);
    let f = c.file("t.txt", b"hi");
    c.ok(None, &["put", "b", "cam", &f, "--ts", "1700000000000000"]);
    let (_, err) = c.ok(None, &["query", "b", "cam"]);
    assert_eq!(err.trim(), "1 record, 2 B");
    let (out, err) = c.ok(None, &["query", "b", "cam", "--list"]);
    assert!(out.contains("text/plain"), "{out}");
    assert_eq!(err.trim(), "1 record, 2 B");
    let (out, _) = c.ok(None, &["bucket", "ls"]);
    assert!(out.contains("   1 entry "), "{out}");
    c.ok(
        None,
        &["attachment", "put", "b", "cam", "calib", "{\"k\": 1}"],
    );
    let (out, _) = c.ok(None, &["attachment", "rm", "b", "cam", "calib"]);
    assert_eq!(out.trim(), "removed 1 attachment of b/cam: calib");
    let (out, _) = c.ok(
        None,
        &["link", "create", "b", "cam", "--index", "0", "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["file_name"], "cam_0.txt", "{v}");
    assert!(
        v["link"]
            .as_str()
            .unwrap()
            .contains("/api/v1/links/cam_0.txt?"),
        "{v}"
    );
    let (out, _) = c.ok(
        None,
        &[
            "link",
            "create",
            "b",
            "cam",
            "--record",
            "cam@1700000000000000",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["file_name"], "cam_1700000000000000.txt", "{v}");
    // A name given is kept.
    let (out, _) = c.ok(
        None,
        &[
            "link",
            "create",
            "b",
            "cam",
            "--index",
            "0",
            "--file-name",
            "x.bin",
            "--json",
        ],
    );
    assert!(out.contains("\"file_name\":\"x.bin\""), "{out}");
}

/// B.18: `bucket create --max-age 30d` was an unknown argument.
#[test]
fn bucket_create_had_no_max_age() {
    let c = Cli::start(&[]);
    c.ok(None, &["bucket", "create", "b", "--max-age", "30d"]);
    let info = |c: &Cli| {
        let (out, _) = c.ok(None, &["bucket", "info", "b", "--json"]);
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    assert_eq!(info(&c)["settings"]["max_age"], 30u64 * 86_400 * 1_000_000);
    let (_, err) = c.ok(
        None,
        &["bucket", "create", "b", "--max-age", "30d", "--exist-ok"],
    );
    assert!(!err.contains("warning"), "{err}");
    c.ok(None, &["bucket", "update", "b", "--max-age", "none"]);
    assert!(info(&c)["settings"]["max_age"].is_null());
    let (_, err) = c.ok(
        None,
        &["bucket", "create", "b", "--max-age", "none", "--exist-ok"],
    );
    assert!(!err.contains("warning"), "{err}");
    let (out, _) = c.ok(None, &["bucket", "create", "--help"]);
    assert!(
        out.contains("--max-age") && out.contains("tsblob lifecycle set"),
        "{out}"
    );
}

/// B.21: `tail` of an entry with no record yet exited 3 with only "404 entry_not_found".
#[test]
fn tail_of_an_entry_that_does_not_exist_yet() {
    let c = Cli::start(&[]);
    c.ok(None, &["bucket", "create", "b"]);
    let (code, _, err) = c.run(None, &["tail", "b", "cam"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("does not wait for one to be made") && err.contains("404 entry_not_found"),
        "{err}"
    );
    let (out, _) = c.ok(None, &["tail", "--help"]);
    assert!(out.contains("404 entry_not_found, exit 3"), "{out}");
}

/// Docs walkthrough of 2026-11-29: a `--when` that is not JSON exited 1 from `link create`,
/// `lifecycle set` and `replication create` (2 from `query`, and `--help` says a usage
/// mistake is 2); `replication ls` showed a `dst_url` given with a trailing `/` as `…//b`.
#[test]
fn a_when_that_is_not_json_exited_1_from_three_commands() {
    let c = Cli::start(&[]);
    c.ok(None, &["bucket", "create", "b"]);
    for args in [
        &["link", "create", "b", "e", "--when", "{bad"][..],
        &[
            "lifecycle",
            "set",
            "b",
            "r",
            "--older-than",
            "1d",
            "--when",
            "{bad",
        ][..],
        &[
            "replication",
            "create",
            "t",
            "b",
            "http://127.0.0.1:9/",
            "c",
            "--when",
            "[1]",
        ][..],
        &["query", "b", "e", "--when", "{bad"][..],
    ] {
        let (code, out, err) = c.run(None, args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("--when"), "{args:?}: {err}");
    }
    c.ok(
        None,
        &[
            "replication",
            "create",
            "t",
            "b",
            "http://127.0.0.1:9/",
            "c",
        ],
    );
    let (out, _) = c.ok(None, &["replication", "ls"]);
    assert!(out.contains("http://127.0.0.1:9/c"), "{out}");
}

/// The start-up lines named the ReductStore API's own listener (`--reductstore-listen`) but
/// not its path under the main one (`--reductstore-prefix /reduct`): a user of the prefix
/// was not told the URL to give ReductStore clients.
#[test]
fn the_start_up_lines_did_not_name_the_reductstore_prefix() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--reductstore-prefix",
            "/reduct",
        ])
        .arg("--data")
        .arg(dir.path().join("data"))
        .env_remove("TSBLOB_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let next = || rx.recv_timeout(std::time::Duration::from_secs(30));
    let (first, second) = (next().unwrap(), next());
    let _ = child.kill();
    let _ = child.wait();
    let second = second.unwrap_or_else(|_| panic!("one start-up line: {first}"));
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{first}"));
    assert_eq!(second, format!("ReductStore API on http://{addr}/reduct"));
}

/// A pipe whose reader is gone (as after `| head -1` exited): its write end.
fn closed_pipe() -> std::process::Stdio {
    let (read, write) = pipe();
    drop(read);
    write.into()
}

/// A pipe: (read end, write end).
fn pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors, each owned once below.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both are fresh descriptors nothing else owns.
    unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    }
}

impl Cli {
    /// `tsblob ARGS` against this server, stdout still to be given.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        for (k, _) in std::env::vars() {
            if k.starts_with("TSBLOB_") {
                cmd.env_remove(k);
            }
        }
        cmd.args(args)
            .env("TSBLOB_URL", self.server.url(""))
            .env("XDG_CONFIG_HOME", self.config.path())
            .env("HOME", self.config.path())
            .stderr(std::process::Stdio::piped());
        cmd
    }
}

/// Bug (newcomer walkthrough of 2026-11-30): `tsblob bucket ls | head -1` and `tsblob query
/// … --list | head -1` panicked ("failed printing to stdout: Broken pipe") with a backtrace
/// and exit 101 once `head` had gone; they end quietly with exit 0.
#[test]
fn a_listing_piped_into_head_panicked() {
    let c = Cli::start(&[]);
    for b in ["b1", "b2"] {
        c.ok(None, &["bucket", "create", b]);
    }
    let f = c.file("p", b"xyz");
    for ts in ["1", "2"] {
        c.ok(None, &["put", "b1", "e", &f, "--ts", ts]);
    }
    for args in [
        &["bucket", "ls"][..],
        &["bucket", "ls", "--json"],
        &["query", "b1", "e", "--list"],
        &["token", "ls"],
    ] {
        let out = c.command(args).stdout(closed_pipe()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Review of 2026-11-30: with `--out DIR`, `--list` is a side channel of a download, and the
/// quiet exit on a closed stdout stopped the download after its first record, exit 0. The
/// listing stops; every record is still written.
#[test]
fn a_download_listed_into_head_stopped_at_its_first_record() {
    let c = Cli::start(&[]);
    c.ok(None, &["bucket", "create", "b1"]);
    let f = c.file("p", b"xyz");
    for ts in 1..=40 {
        c.ok(None, &["put", "b1", "e", &f, "--ts", &ts.to_string()]);
    }
    let dir = c.config.path().join("down");
    let d = dir.to_str().unwrap();
    let out = c
        .command(&["query", "b1", "e", "--list", "--out", d])
        .stdout(closed_pipe())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let files = walkdir_count(&dir);
    assert_eq!(files, 40, "{err}");
}

/// Files under `dir`, at any depth.
fn walkdir_count(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walkdir_count(&e.path())
            } else {
                1
            }
        })
        .sum()
}

/// Bug (newcomer walkthrough of 2026-11-30): `tsblob tail … | head -1` ran on after `head`
/// had exited, until the next record (only then did it fail to print); it ends within a
/// second of its reader going, exit 0.
#[test]
fn a_tail_piped_into_head_ran_on() {
    use std::io::BufRead;
    let c = Cli::start(&[]);
    c.ok(None, &["bucket", "create", "b"]);
    let f = c.file("p", b"xyz");
    c.ok(None, &["put", "b", "e", &f, "--ts", "1"]);
    let (read, write) = pipe();
    let mut child = c
        .command(&["tail", "b", "e", "--heartbeat", "1"])
        .stdout(write)
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(std::fs::File::from(read))
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("1 "), "{line}");
    // (the reader is gone now, as `head -1` after its line)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let status =
        status.unwrap_or_else(|| panic!("the tail still ran 5 s after its reader went: {err}"));
    assert_eq!(status.code(), Some(0), "{err}");
}

/// Bug (newcomer walkthrough of 2026-11-30): `tsblob cp`'s 401 said "give one with
/// --token, TSBLOB_TOKEN, or a saved alias", none of which `cp` takes; it names
/// `--dst-token`/`--src-token` for the side that answered.
#[test]
fn cp_told_to_give_a_token_it_does_not_take() {
    let c = Cli::start(&["--token", "root"]);
    let (out, _) = c.ok(Some("root"), &["bucket", "create", "src"]);
    assert!(out.contains("src"), "{out}");
    let from = c.server.url("/src");
    let to = c.server.url("/dst");
    let (code, _, err) = c.run(None, &["cp", &from, &to, "--quiet"]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("401 unauthorized")
            && err.contains("give the destination's token with --dst-token (or TSBLOB_DST_TOKEN)"),
        "{err}"
    );
    assert!(!err.contains("--token, TSBLOB_TOKEN"), "{err}");
    // The destination's token given, the source answers 401 (reading its settings).
    let (code, _, err) = c.run(None, &["cp", &from, &to, "--quiet", "--dst-token", "root"]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("give the source's token with --src-token (or TSBLOB_SRC_TOKEN)"),
        "{err}"
    );
    // To a folder: only the source is a server.
    let dir = c.config.path().join("out");
    let (code, _, err) = c.run(None, &["cp", &from, dir.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("--src-token"), "{err}");
}

/// Bug (newcomer walkthrough of 2026-11-30): the first token made on an open server turns
/// authentication on for every client, and `token create` said nothing of it.
#[test]
fn the_first_token_turned_auth_on_silently() {
    let c = Cli::start(&[]);
    // A token sent to an open server is not checked: `me` says the server is open.
    let (_, err) = c.ok(Some("stale"), &["token", "create", "boss", "--full-access"]);
    assert!(
        err.contains("this is the server's first token: authentication is now on"),
        "{err}"
    );
    let (code, _, _) = c.run(None, &["bucket", "ls"]);
    assert_eq!(code, 5, "auth is on now");
    // (the value: the boss token, made again with a known name from a fresh server)
    let c = Cli::start(&[]);
    let (value, err) = c.ok(None, &["token", "create", "boss", "--full-access"]);
    assert!(err.contains("the server's first token"), "{err}");
    let value = value.trim().to_string();
    let (_, err) = c.ok(Some(&value), &["token", "create", "cam", "--read", "b"]);
    assert!(!err.contains("first token"), "{err}");
    // And on a server with an admin --token: not the first.
    let c = Cli::start(&["--token", "root"]);
    let (_, err) = c.ok(Some("root"), &["token", "create", "cam", "--read", "b"]);
    assert!(!err.contains("first token"), "{err}");
}

/// Bug (newcomer walkthrough of 2026-11-30): `lifecycle set --older-than soon` and `--mode
/// sometimes` went to the server and exited 1 (422), where a bad `token create --ttl` exits
/// 2; a bad value of the command line is a usage error (2), said before any request.
#[test]
fn a_bad_lifecycle_value_exited_1() {
    let c = Cli::start(&[]);
    c.ok(None, &["bucket", "create", "b"]);
    for args in [
        &["lifecycle", "set", "b", "r", "--older-than", "soon"][..],
        &[
            "lifecycle",
            "set",
            "b",
            "r",
            "--older-than",
            "1d",
            "--interval",
            "0s",
        ],
        &[
            "lifecycle",
            "set",
            "b",
            "r",
            "--older-than",
            "1d",
            "--mode",
            "sometimes",
        ],
        &[
            "lifecycle",
            "set",
            "b",
            "r",
            "--older-than",
            "1d",
            "--action",
            "shred",
        ],
        &["bucket", "update", "b", "--quota-type", "lifo"],
        &["bucket", "update", "b", "--compression", "zstd:99"],
        &["token", "create", "t", "--read", "b", "--ttl", "5parsecs"],
    ] {
        let (code, _, err) = c.run(None, args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    // Good values still go through, the durations as the server reads them.
    let (out, _) = c.ok(
        None,
        &[
            "lifecycle",
            "set",
            "b",
            "r",
            "--older-than",
            "30d",
            "--interval",
            "90s",
            "--mode",
            "dry_run",
            "--action",
            "compress",
        ],
    );
    assert!(
        out.contains("older than 30d") && out.contains("every 90s") && out.contains("dry_run"),
        "{out}"
    );
    c.ok(
        None,
        &[
            "bucket",
            "update",
            "b",
            "--quota-type",
            "FIFO",
            "--quota-size",
            "1GiB",
        ],
    );
}

/// Bug (newcomer walkthrough of 2026-11-30): a `from` backfill that cannot deliver showed
/// `pending 0 (0 B)  lag -` in `replication ls` (its records are not pending): only
/// `status --json` said a backfill was under way.
#[test]
fn a_stuck_backfill_looked_idle_in_replication_ls() {
    let c = Cli::start(&[]);
    c.ok(None, &["bucket", "create", "b"]);
    let f = c.file("p", b"xyz");
    c.ok(None, &["put", "b", "e", &f, "--ts", "1"]);
    c.ok(
        None,
        &[
            "replication",
            "create",
            "stuck",
            "b",
            "http://127.0.0.1:9",
            "copy",
            "--from",
            "0",
        ],
    );
    let (out, _) = c.ok(None, &["replication", "ls"]);
    assert!(
        out.contains("backfilling (at 1970-01-01") && out.contains("not counted in pending"),
        "{out}"
    );
}

/// Bug (newcomer walkthrough of 2026-11-30): `tsblob query demo` said only "the following
/// required arguments were not provided: <ENTRY>", not that --entries names several.
#[test]
fn query_without_an_entry_did_not_mention_entries() {
    let c = Cli::start(&[]);
    for command in ["query", "tail"] {
        let (code, _, err) = c.run(None, &[command, "demo"]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("`tsblob {command} demo ENTRY`")) && err.contains("--entries"),
            "{err}"
        );
    }
}
