//! Files of the server's own state in the data folder (`tokens`, `replications`): written
//! atomically (a temporary file, fsync, rename, folder fsync) and readable by the owner only.

use std::io::Write;
use std::path::Path;

/// Replaces `path` with `bytes` atomically; the file is created with mode 0600. The
/// temporary file is `.<name>.tmp` beside it: a name starting with `.`, which no bucket
/// may take (`tokens.tmp` was a valid bucket name, and its folder broke every token write).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{} names no file", path.display())))?;
    let mut hidden = std::ffi::OsString::from(".");
    hidden.push(name);
    hidden.push(".tmp");
    let tmp = path.with_file_name(hidden);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
