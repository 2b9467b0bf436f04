//! Spawned targets: a process on a free loopback port with a fresh data folder, a readiness
//! wait, and a guaranteed stop.
//!
//! [`Spawned`] kills and reaps its process when dropped, so an error, a panic or Ctrl-C (which
//! drops the run future) all stop the peers; nothing is left listening after `tsblob bench`.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A child process that is killed and reaped on drop.
#[derive(Debug)]
pub struct Spawned {
    /// What it is, for messages.
    pub name: String,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Its data folder (measured for disk usage).
    pub data_dir: PathBuf,
    /// Where its stdout and stderr go.
    pub log_path: PathBuf,
    child: Child,
}

impl Spawned {
    /// Starts `cmd` (already given its arguments and environment) with output sent to
    /// `log_path`.
    pub fn start(
        name: &str,
        mut cmd: Command,
        port: u16,
        data_dir: PathBuf,
        log_path: PathBuf,
    ) -> Result<Spawned> {
        let log = File::create(&log_path)
            .with_context(|| format!("cannot create log file {}", log_path.display()))?;
        let log_err = log
            .try_clone()
            .context("cannot duplicate the log file handle")?;
        let program = cmd.get_program().to_string_lossy().into_owned();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .with_context(|| format!("cannot start {name} ({program})"))?;
        Ok(Spawned {
            name: name.to_string(),
            url: format!("http://127.0.0.1:{port}"),
            data_dir,
            log_path,
            child,
        })
    }

    /// CPU time (user + system, every thread, seconds) the process has used so far, from
    /// `/proc/<pid>/stat` (clock-tick resolution, usually 10 ms); `None` where there is no
    /// procfs.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // Fields after the command name (which may hold spaces) start at field 3 (state);
        // utime and stime are fields 14 and 15.
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace().skip(11);
        let utime: u64 = fields.next()?.parse().ok()?;
        let stime: u64 = fields.next()?.parse().ok()?;
        // SAFETY: sysconf has no preconditions.
        let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (tick > 0).then(|| (utime + stime) as f64 / tick as f64)
    }

    /// Polls `url` until it answers 2xx, the process exits, or `timeout` passes.
    pub async fn wait_ready(&mut self, path: &str, timeout: Duration) -> Result<()> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()
            .context("cannot build the readiness HTTP client")?;
        let url = format!("{}{}", self.url, path);
        let start = Instant::now();
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .context("cannot poll a child process")?
            {
                bail!(
                    "{} exited before it was ready ({status}); its log {} ends with:\n{}",
                    self.name,
                    self.log_path.display(),
                    log_tail(&self.log_path)
                );
            }
            if let Ok(resp) = client.get(&url).send().await {
                if resp.status().is_success() {
                    return Ok(());
                }
            }
            if start.elapsed() > timeout {
                bail!(
                    "{} did not answer {url} within {timeout:?}; its log {} ends with:\n{}",
                    self.name,
                    self.log_path.display(),
                    log_tail(&self.log_path)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // SIGKILL then wait: the data folder is removed right after, and a peer still
        // writing into it would make that fail.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port on 127.0.0.1 that was free a moment ago (the OS picks it).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .context("cannot bind a loopback port to find a free one")?;
    Ok(listener
        .local_addr()
        .context("cannot read a bound port")?
        .port())
}

/// Last lines of a log file, for error messages.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Finds a peer binary: the explicit flag, then `PATH`, then the cache folder where
/// `scripts/install-peers.sh` puts it.
pub fn find_binary(name: &str, explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if p.is_file() {
            return Ok(p.to_path_buf());
        }
        bail!("{name} binary {} does not exist", p.display());
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(dir) = std::env::var_os("TSBLOB_PEERS_BIN") {
        dirs.insert(0, PathBuf::from(dir));
    }
    if let Some(home) = std::env::var_os("HOME") {
        let cache = std::env::var_os("TSBLOB_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(&home).join(".cache/tsblob"));
        dirs.push(cache.join("peers/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "no {name} binary on PATH, in $TSBLOB_PEERS_BIN or in ~/.cache/tsblob/peers/bin: \
                 run scripts/install-peers.sh, pass --{name}-bin, or connect to a running one \
                 with --{name}-url"
            )
        })
}

/// Resident memory of a process, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rss {
    /// `VmRSS`: resident now.
    pub now: u64,
    /// `VmHWM`: the peak resident size so far.
    pub peak: u64,
}

/// `VmRSS` and `VmHWM` (peak) of a process, in bytes, from /proc.
pub fn rss_of(pid: u32) -> Option<Rss> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some(Rss {
        now: field("VmRSS:")?,
        peak: field("VmHWM:")?,
    })
}

/// `RssAnon` (heap, stacks) and `RssFile` (mapped files: the LMDB index) of a process:
/// mapped index pages are page cache the kernel can drop, heap is not.
pub fn rss_parts(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mb = |name: &str| -> f64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0.0, |kb| kb * 1024.0 / 1e6)
    };
    format!(
        "anon {:.1} MB, file {:.1} MB",
        mb("RssAnon:"),
        mb("RssFile:")
    )
}

/// Allocated bytes (st_blocks × 512) of every file under `dir`: what the data takes on disk,
/// including preallocated space and filesystem block rounding.
pub fn disk_usage(dir: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            // A peer may remove a folder while we walk (MinIO's temporary ones): skip it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", d.display())),
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.blocks() * 512;
            }
        }
    }
    Ok(total)
}
