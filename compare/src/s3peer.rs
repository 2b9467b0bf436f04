//! The S3 engines the object-store tier is tested and measured against, started on loopback
//! from the binaries `scripts/install-peers.sh` caches: MinIO (one process) and SeaweedFS as
//! the distributed store it is (a master, three volume servers holding every chunk twice,
//! replication `001`, and a filer serving the S3 gateway). Blocking, with std processes only,
//! so tests of any flavour and the benchmarks use the same code.
//!
//! Every process gets free ports, a folder under one temporary root and a log file there; an
//! [`S3Peer`] kills (SIGKILL) and reaps all of them when dropped. A process can be killed and
//! started again on the same ports and folders ([`S3Peer::kill_node`],
//! [`S3Peer::restart_node`]): the fault tests take one volume server away that way.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::spawn::{find_binary, free_port, log_tail};

/// An S3 engine tsblob's tier is tested against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// MinIO's community server (one process, one folder).
    Minio,
    /// SeaweedFS: master, three volume servers (replication 001), filer with the S3 gateway.
    Seaweedfs,
}

impl Engine {
    /// Every engine, in the order reports list them.
    pub const ALL: [Engine; 2] = [Engine::Minio, Engine::Seaweedfs];

    /// Its name in flags, test names and tables.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Minio => "minio",
            Engine::Seaweedfs => "seaweedfs",
        }
    }

    /// The engine named `s` (`minio`, `seaweedfs`).
    pub fn parse(s: &str) -> Result<Engine> {
        match s {
            "minio" => Ok(Engine::Minio),
            "seaweedfs" | "seaweed" => Ok(Engine::Seaweedfs),
            other => bail!("unknown S3 engine {other:?}: expected minio or seaweedfs"),
        }
    }
}

/// How many volume servers a SeaweedFS cluster has.
pub const SEAWEED_VOLUMES: usize = 3;
/// The replica placement of the SeaweedFS cluster: one more copy on another server of the
/// same rack, so every chunk is on two of the three volume servers.
pub const SEAWEED_REPLICATION: &str = "001";

/// One process of an engine: its command line, kept so it restarts the same way.
struct Node {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn spawn(&mut self) -> Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("cannot open log file {}", self.log.display()))?;
        let err = log.try_clone().context("cannot duplicate a log handle")?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .with_context(|| format!("cannot start {} ({})", self.name, self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Fails with the log's end if the process has exited.
    fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut() {
            if let Some(status) = c.try_wait().context("cannot poll a child process")? {
                return Err(Exited(format!(
                    "{} exited ({status}); its log {} ends with:\n{}",
                    self.name,
                    self.log.display(),
                    log_tail(&self.log)
                ))
                .into());
            }
        }
        Ok(())
    }
}

/// A process of the engine exited while it was starting (its message holds its log's end).
#[derive(Debug)]
struct Exited(String);

impl std::fmt::Display for Exited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Exited {}

/// A running S3 engine on loopback, stopped when dropped.
pub struct S3Peer {
    engine: Engine,
    nodes: Vec<Node>,
    /// `http(s)://127.0.0.1:<port>` of the S3 API.
    endpoint: String,
    /// `127.0.0.1:<port>` of the SeaweedFS master's HTTP API.
    master: Option<String>,
    tls: bool,
    root: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

/// How long an engine may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

impl S3Peer {
    /// Starts `engine` with the access key `user` and secret `secret`, in a temporary folder.
    pub fn start(engine: Engine, user: &str, secret: &str) -> Result<S3Peer> {
        S3Peer::start_in(engine, user, secret, None, None)
    }

    /// A MinIO serving https with `public.crt` and `private.key` of `certs` (TLS is tested
    /// on MinIO only).
    pub fn start_minio_tls(user: &str, secret: &str, certs: &Path) -> Result<S3Peer> {
        S3Peer::start_in(Engine::Minio, user, secret, Some(certs), None)
    }

    /// Starts `engine` under `work_dir` (a fresh temporary folder when `None`).
    pub fn start_in(
        engine: Engine,
        user: &str,
        secret: &str,
        certs: Option<&Path>,
        work_dir: Option<&Path>,
    ) -> Result<S3Peer> {
        // Ports are picked free and bound by the engine a moment later: a process of a test
        // running beside this one may take one in between, and the engine then exits. That,
        // and only that, is retried on fresh ports.
        let mut attempt = 1;
        loop {
            match S3Peer::start_once(engine, user, secret, certs, work_dir) {
                Err(e) if attempt < 3 && e.downcast_ref::<Exited>().is_some() => attempt += 1,
                other => return other,
            }
        }
    }

    fn start_once(
        engine: Engine,
        user: &str,
        secret: &str,
        certs: Option<&Path>,
        work_dir: Option<&Path>,
    ) -> Result<S3Peer> {
        let tmp = match work_dir {
            Some(d) => tempfile::Builder::new()
                .prefix("tsblob-s3peer-")
                .tempdir_in(d),
            None => tempfile::Builder::new().prefix("tsblob-s3peer-").tempdir(),
        }
        .context("cannot create the S3 engine's folder")?;
        let root = tmp.path().to_path_buf();
        let mut peer = match engine {
            Engine::Minio => minio(&root, user, secret, certs)?,
            Engine::Seaweedfs => {
                if certs.is_some() {
                    bail!("the SeaweedFS harness serves plain http only");
                }
                seaweedfs(&root, user, secret)?
            }
        };
        peer._tmp = Some(tmp);
        peer.restart()?;
        Ok(peer)
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The S3 endpoint (`--tier-endpoint`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The folder holding every process's data and log.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Names of its processes (`minio`; `master`, `volume0`..`volume2`, `filer-s3`).
    pub fn nodes(&self) -> Vec<&str> {
        self.nodes.iter().map(|n| n.name.as_str()).collect()
    }

    /// Process ids of the processes running now (for CPU accounting).
    pub fn pids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter_map(|n| n.child.as_ref().map(Child::id))
            .collect()
    }

    /// Kills (SIGKILL) every process: the whole store down.
    pub fn kill(&mut self) {
        // The gateway first, so clients see it go at once.
        for n in self.nodes.iter_mut().rev() {
            n.kill();
        }
    }

    /// Starts every process that is not running (on the same ports and folders) and waits
    /// until the store answers.
    pub fn restart(&mut self) -> Result<()> {
        for n in &mut self.nodes {
            if n.child.is_none() {
                n.spawn()?;
            }
        }
        self.wait_ready()
    }

    /// Kills (SIGKILL) the process named `name` (see [`S3Peer::nodes`]).
    pub fn kill_node(&mut self, name: &str) -> Result<()> {
        self.node(name)?.kill();
        Ok(())
    }

    /// Starts the process named `name` again and waits until the store has it back.
    pub fn restart_node(&mut self, name: &str) -> Result<()> {
        let n = self.node(name)?;
        if n.child.is_none() {
            n.spawn()?;
        }
        self.wait_ready()
    }

    fn node(&mut self, name: &str) -> Result<&mut Node> {
        let known = self.nodes().join(", ");
        self.nodes
            .iter_mut()
            .find(|n| n.name == name)
            .with_context(|| format!("no process {name:?} in this store (it has {known})"))
    }

    /// Waits until every running process is ready: MinIO's readiness probe; for SeaweedFS,
    /// every running volume server registered with the master, then the S3 gateway's.
    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let s3 = self
            .endpoint
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .to_string();
        let volumes = self
            .nodes
            .iter()
            .filter(|n| n.name.starts_with("volume") && n.child.is_some())
            .count();
        loop {
            for n in &mut self.nodes {
                n.check_alive()?;
            }
            let ready = match (self.engine, &self.master) {
                (Engine::Minio, _) if self.tls => {
                    // No TLS client here: the listener accepting is enough.
                    std::net::TcpStream::connect(&s3).is_ok()
                }
                (Engine::Minio, _) => http_get(&s3, "/minio/health/ready").0 == 200,
                (Engine::Seaweedfs, Some(master)) => {
                    live_volume_servers(master) >= volumes && http_get(&s3, "/healthz").0 == 200
                }
                (Engine::Seaweedfs, None) => bail!("a SeaweedFS store without a master"),
            };
            if ready {
                if self.tls {
                    std::thread::sleep(Duration::from_millis(500));
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| format!("{} ({}):\n{}", n.name, n.log.display(), log_tail(&n.log)))
                    .collect();
                bail!(
                    "{} was not ready within {READY_TIMEOUT:?}; logs:\n{}",
                    self.engine.name(),
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for S3Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn minio(root: &Path, user: &str, secret: &str, certs: Option<&Path>) -> Result<S3Peer> {
    let port = free_port()?;
    let mut args: Vec<OsString> = vec![
        "server".into(),
        root.join("data").into(),
        "--address".into(),
        format!("127.0.0.1:{port}").into(),
        "--console-address".into(),
        format!("127.0.0.1:{}", free_port()?).into(),
        "--quiet".into(),
    ];
    if let Some(c) = certs {
        args.extend(["--certs-dir".into(), c.as_os_str().to_owned()]);
    }
    let scheme = if certs.is_some() { "https" } else { "http" };
    Ok(S3Peer {
        engine: Engine::Minio,
        nodes: vec![Node {
            name: "minio".into(),
            program: find_binary("minio", None)?,
            args,
            env: vec![
                ("MINIO_ROOT_USER".into(), user.into()),
                ("MINIO_ROOT_PASSWORD".into(), secret.into()),
                ("MINIO_BROWSER".into(), "off".into()),
            ],
            log: root.join("minio.log"),
            child: None,
        }],
        endpoint: format!("{scheme}://127.0.0.1:{port}"),
        master: None,
        tls: certs.is_some(),
        root: root.to_path_buf(),
        _tmp: None,
    })
}

/// `-ip`, `-ip.bind`, `-port` and `-port.grpc` of a SeaweedFS process on loopback, its gRPC
/// port its HTTP port + 10000: SeaweedFS's convention, which some of its clients assume (the
/// filer's own S3 gateway dials the filer's port + 10000 whatever `-port.grpc` says).
fn listen(port: u16) -> Vec<OsString> {
    vec![
        "-ip=127.0.0.1".into(),
        "-ip.bind=127.0.0.1".into(),
        format!("-port={port}").into(),
        format!("-port.grpc={}", port + GRPC_OFFSET).into(),
    ]
}

/// SeaweedFS's gRPC port of a process: its HTTP port + this.
const GRPC_OFFSET: u16 = 10_000;

/// A free loopback port whose + 10000 is free too (see [`listen`]).
fn free_port_pair() -> Result<u16> {
    for _ in 0..500 {
        let p = free_port()?;
        if p > u16::MAX - GRPC_OFFSET {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", p + GRPC_OFFSET)).is_ok() {
            return Ok(p);
        }
    }
    bail!("found no free loopback port p with p + {GRPC_OFFSET} free too")
}

fn seaweedfs(root: &Path, user: &str, secret: &str) -> Result<S3Peer> {
    let weed = find_binary("weed", None)?;
    let dir = |name: &str| -> Result<PathBuf> {
        let d = root.join(name);
        std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
        Ok(d)
    };
    let node = |name: &str, args: Vec<OsString>| Node {
        name: name.to_string(),
        program: weed.clone(),
        args,
        env: Vec::new(),
        log: root.join(format!("{name}.log")),
        child: None,
    };
    let mport = free_port_pair()?;
    let master = format!("127.0.0.1:{mport}");
    let mut nodes = Vec::new();
    let mut args = vec!["master".into()];
    args.extend(listen(mport));
    args.extend([
        format!("-mdir={}", dir("master")?.display()).into(),
        "-peers=none".into(),
        format!("-defaultReplication={SEAWEED_REPLICATION}").into(),
        // Small volumes: a test writes megabytes, and every bucket grows volumes of its own.
        "-volumeSizeLimitMB=256".into(),
        "-telemetry=false".into(),
    ]);
    nodes.push(node("master", args));
    for i in 0..SEAWEED_VOLUMES {
        let mut args = vec!["volume".into()];
        args.extend(listen(free_port_pair()?));
        args.extend([
            format!("-dir={}", dir(&format!("volume{i}"))?.display()).into(),
            format!("-master={master}").into(),
            "-max=100".into(),
            "-dataCenter=dc1".into(),
            "-rack=rack1".into(),
            // Killed is killed: no grace period on a stop.
            "-preStopSeconds=0".into(),
            // Disk space is the test machine's: don't turn read-only on a nearly full one.
            "-minFreeSpace=64MiB".into(),
        ]);
        nodes.push(node(&format!("volume{i}"), args));
    }
    let config = root.join("s3.json");
    let identities = serde_json::json!({
        "identities": [{
            "name": "tsblob",
            "credentials": [{"accessKey": user, "secretKey": secret}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }]
    });
    std::fs::write(&config, identities.to_string())
        .with_context(|| format!("cannot write {}", config.display()))?;
    let s3 = free_port_pair()?;
    let mut args = vec!["filer".into()];
    args.extend(listen(free_port_pair()?));
    args.extend([
        format!("-master={master}").into(),
        format!("-defaultStoreDir={}", dir("filer")?.display()).into(),
        format!("-defaultReplicaPlacement={SEAWEED_REPLICATION}").into(),
        format!("-localSocket={}", root.join("filer.sock").display()).into(),
        "-s3".into(),
        format!("-s3.port={s3}").into(),
        format!("-s3.port.grpc={}", s3 + GRPC_OFFSET).into(),
        format!("-s3.config={}", config.display()).into(),
        format!("-s3.localSocket={}", root.join("s3.sock").display()).into(),
        "-s3.port.iceberg=0".into(),
        "-s3.port.lance=0".into(),
    ]);
    nodes.push(node("filer-s3", args));
    Ok(S3Peer {
        engine: Engine::Seaweedfs,
        nodes,
        endpoint: format!("http://127.0.0.1:{s3}"),
        master: Some(master),
        tls: false,
        root: root.to_path_buf(),
        _tmp: None,
    })
}

/// How many volume servers the master at `addr` has registered (0 when it does not answer).
fn live_volume_servers(addr: &str) -> usize {
    let (status, body) = http_get(addr, "/dir/status");
    if status != 200 {
        return 0;
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else {
        return 0;
    };
    let mut n = 0;
    for dc in v["Topology"]["DataCenters"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for rack in dc["Racks"].as_array().into_iter().flatten() {
            n += rack["DataNodes"].as_array().map_or(0, Vec::len);
        }
    }
    n
}

/// A plain HTTP/1.0 GET on loopback (no chunked answer to decode): (status, body), (0, "") when nothing answers.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let Ok(mut tcp) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(tcp, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
