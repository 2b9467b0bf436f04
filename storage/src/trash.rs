//! Durable removal: what is deleted leaves its place in one atomic step before the index
//! forgets it, and is unlinked only after.
//!
//! A block, an entry folder or a bucket folder being removed is first renamed into the data
//! folder's `.trash/` (one `rename`, atomic, and with `SyncPolicy::Always` made durable by
//! syncing the folder it left). Then the index commit that forgets it runs, then the trashed
//! copy is deleted. A crash at any point leaves one of two states that recovery reads the
//! same way: the thing is missing from its place, so the index's records of it are dropped
//! (`recover.rs` drops the index's state of vanished blocks and entries of vanished folders), and
//! whatever is in `.trash/` is deleted at open. A removal never comes back. If the index
//! commit fails, the rename is undone.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::files::sync_dir;
use crate::now_micros;
use crate::record::RecoveryReport;

pub(crate) const TRASH_DIR: &str = ".trash";

pub(crate) struct Trash {
    dir: PathBuf,
    next: AtomicU64,
    sync_dirs: bool,
}

impl Trash {
    /// The trash folder of a data folder, emptied of whatever a crash left there.
    pub fn open(root: &Path, sync_dirs: bool, report: &mut RecoveryReport) -> Result<Trash> {
        let dir = root.join(TRASH_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {dir:?}"), e))?;
        let rd = std::fs::read_dir(&dir).map_err(|e| Error::io(format!("listing {dir:?}"), e))?;
        let mut n = 0;
        for d in rd.flatten() {
            remove_any(&d.path());
            n += 1;
        }
        if n > 0 {
            let line =
                format!("deleted {n} removed file(s) or folder(s) a crash left in the trash");
            log::warn!("{line}");
            report.events.push(line);
        }
        Ok(Trash {
            dir,
            next: AtomicU64::new(0),
            sync_dirs,
        })
    }

    /// Moves `path` into the trash; `None` if it was not there.
    pub fn take(&self, path: &Path) -> Result<Option<PathBuf>> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let to = self.dir.join(format!("{}-{n}", now_micros()));
        match std::fs::rename(path, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(format!("moving {path:?} to the trash"), e)),
        }
        if self.sync_dirs {
            if let Some(parent) = path.parent() {
                sync_dir(parent)?;
            }
        }
        Ok(Some(to))
    }

    /// Puts a trashed path back (its removal's index commit failed).
    pub fn restore(&self, trashed: &Path, path: &Path) {
        if let Err(e) = std::fs::rename(trashed, path) {
            log::error!("could not put {path:?} back from the trash: {e}");
        }
    }

    /// Deletes a trashed path for good (a failure is logged: the next open retries).
    pub fn empty(&self, trashed: &Path) {
        remove_any(trashed);
    }
}

fn remove_any(p: &Path) {
    let res = if p.is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
    if let Err(e) = res {
        log::warn!("could not delete {p:?} from the trash: {e}");
    }
}
