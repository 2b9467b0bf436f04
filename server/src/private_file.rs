//! Files of the server's own state in the data folder (`tokens`, `replications`): written
//! atomically (a temporary file, fsync, rename, folder fsync) and readable by the owner only.

use std::io::Write;
use std::path::{Path, PathBuf};

/// A file of the server's own that could not be written. On a full disk it is answered
/// 507 `disk_full`, as the engine's writes are (before: 500 `internal` for a token, a
/// replication task or the first query link; kill -9 probe, F2); else 500. Its path goes to
/// the log, never to a client.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the {what} {}: {source}", path.display())]
pub struct NotWritten {
    what: &'static str,
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

impl NotWritten {
    pub fn new(what: &'static str, path: &Path, source: std::io::Error) -> NotWritten {
        NotWritten {
            what,
            path: path.to_path_buf(),
            source,
        }
    }

    /// What the file is ("token file"), for a client's message.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// Whether the file system had no room (ENOSPC, or the user's disk quota: EDQUOT).
    pub fn disk_full(&self) -> bool {
        tsblob_storage::no_space(&self.source)
    }
}

/// [`write_atomic`], its failure named `what` (a "token file").
pub fn write_state(what: &'static str, path: &Path, bytes: &[u8]) -> Result<(), NotWritten> {
    write_atomic(path, bytes).map_err(|e| NotWritten::new(what, path, e))
}

/// Replaces `path` with `bytes` atomically; the file is created with mode 0600. The
/// temporary file is `.<name>.tmp` beside it: a name starting with `.`, which no bucket
/// may take (`tokens.tmp` was a valid bucket name, and its folder broke every token write).
/// A failed write deletes its temporary file (a full disk left one of 0 bytes per name).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{} names no file", path.display())))?;
    let mut hidden = std::ffi::OsString::from(".");
    hidden.push(name);
    hidden.push(".tmp");
    let tmp = path.with_file_name(hidden);
    replace_with(path, &tmp, bytes).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn replace_with(path: &Path, tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
