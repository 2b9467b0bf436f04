//! A real `tsblob serve` child process for integration tests: started on a free loopback
//! port (`--listen 127.0.0.1:0`, the address read back from its first line of output),
//! with its own data folder, and killed when dropped.
#![allow(clippy::unwrap_used, dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    addr: String,
    data: PathBuf,
    _dir: Option<tempfile::TempDir>,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    pub fn start(args: &[&str]) -> Server {
        Server::start_on("127.0.0.1:0", args)
    }

    pub fn start_on(listen: &str, args: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Server::spawn(dir.path(), listen, args);
        s._dir = Some(dir);
        s
    }

    /// A server on an existing data folder (not removed when this server is dropped).
    pub fn start_in(data: &Path, args: &[&str]) -> Server {
        Server::spawn_env(data, "127.0.0.1:0", args, &[])
    }

    /// `start_in` with extra environment variables (credentials of a peer, say).
    pub fn start_in_env(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::spawn_env(data, "127.0.0.1:0", args, env)
    }

    fn spawn(data: &Path, listen: &str, args: &[&str]) -> Server {
        Server::spawn_env(data, listen, args, &[])
    }

    /// A server whose process may open at most `limit` files (`ulimit -n LIMIT`, soft and
    /// hard), on a fresh data folder.
    pub fn start_with_open_files(args: &[&str], limit: u64) -> Server {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = serve_command(dir.path(), "127.0.0.1:0", args, &[]);
        // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut s = Server::spawn_command(dir.path(), cmd);
        s._dir = Some(dir);
        s
    }

    /// A server whose process starts with SIGHUP at its default action (`ignore` false) or
    /// ignored (true, as `nohup` leaves it), whatever the test runner's own disposition (a
    /// runner under `nohup` passes its ignored SIGHUP on to every child).
    pub fn start_with_sighup(ignore: bool, args: &[&str]) -> Server {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = serve_command(dir.path(), "127.0.0.1:0", args, &[]);
        // SAFETY: only signal(2), async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let action = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
                if libc::signal(libc::SIGHUP, action) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut s = Server::spawn_command(dir.path(), cmd);
        s._dir = Some(dir);
        s
    }

    fn spawn_env(data: &Path, listen: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::spawn_command(data, serve_command(data, listen, args, env))
    }

    fn spawn_command(data: &Path, mut cmd: Command) -> Server {
        cmd.stdout(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {} // keep the pipe drained
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("tsblob serve did not start: {}", stderr.lock().unwrap()));
        // "tsblob 0.1.0 serving DIR on http://ADDR (sync ...)"
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .replace("0.0.0.0", "127.0.0.1");
        let s = Server {
            child,
            addr,
            data: data.to_path_buf(),
            _dir: None,
            stderr,
        };
        s.wait_healthy();
        s
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(mut tcp) = std::net::TcpStream::connect(&self.addr) {
                use std::io::Write;
                let _ = tcp.write_all(
                    b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
                );
                let mut answer = String::new();
                let _ = tcp.read_to_string(&mut answer);
                if answer.starts_with("HTTP/1.1 200") {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("/health never answered 200");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn dir(&self) -> &Path {
        &self.data
    }

    pub fn signal_term(&self) {
        self.signal("TERM");
    }

    /// Sends the signal named `name` (`TERM`, `HUP`, `INT`).
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} failed");
    }

    /// SIGKILL, then reaps the process.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn stderr_contains(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.stderr.lock().unwrap().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `VmRSS` and `VmHWM` (peak) of the server, in bytes.
    pub fn rss(&self) -> (u64, u64) {
        let r = tsblob_compare::spawn::rss_of(self.pid()).unwrap_or_default();
        (r.now, r.peak)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tsblob serve --data <data> --listen <listen> <args>`, with only the `TSBLOB_*`
/// variables of `env` (none inherited from the test's own environment) and stderr piped.
/// `TSBLOB_TEST_BIN` names another build of the server (the attack report runs the
/// bystander harness against a release build).
pub fn serve_command(data: &Path, listen: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let bin =
        std::env::var_os("TSBLOB_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_tsblob").into());
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .arg("--data")
        .arg(data)
        .args(["--listen", listen])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("TSBLOB_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    cmd
}

/// Runs `tsblob serve` with `args` (and `env`) on a fresh data folder for at most
/// `within`, for a server expected to refuse to start: its exit status and standard
/// error, or `None` (killed) if it was still running.
pub fn run_serve_briefly(
    args: &[&str],
    env: &[(&str, &str)],
    within: Duration,
) -> (Option<i32>, String) {
    let data = tempfile::tempdir().unwrap();
    let mut child = serve_command(data.path(), "127.0.0.1:0", args, env)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    (status, err)
}

/// The value of an unlabelled series `name` in the server's `/metrics` (fails if absent).
pub async fn metric(c: &reqwest::Client, s: &Server, name: &str) -> i64 {
    let text = c
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
        .trim()
        .parse()
        .unwrap()
}

/// A client sending `Authorization: Bearer <token>`.
pub fn bearer(token: &str) -> reqwest::Client {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(h)
        .build()
        .unwrap()
}

/// POST /api/v1/tokens/{name} with `spec` (JSON) as `admin`: (status, JSON answer).
pub async fn create_token(
    admin: &reqwest::Client,
    s: &Server,
    name: &str,
    spec: &str,
) -> (u16, serde_json::Value) {
    let r = admin
        .post(s.url(&format!("/api/v1/tokens/{name}")))
        .body(spec.to_string())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// Creates a token with `spec` (JSON), which must succeed, and returns its value.
pub async fn token_value(admin: &reqwest::Client, s: &Server, name: &str, spec: &str) -> String {
    let (status, v) = create_token(admin, s, name, spec).await;
    assert_eq!(status, 201, "{v}");
    v["value"].as_str().unwrap().to_string()
}
