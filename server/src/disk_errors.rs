//! The data folder's last I/O failure that is not the disk being full (a permission
//! denied, a read-only file system, an I/O error): what `/health` says for a minute after
//! it. Bug (ops probe of 2026-11-29): with the data folder made read-only, every write
//! failed with 500 while `/health` answered `ok`, so a readiness probe stayed green.
//!
//! Process-wide, as the log it stands beside (`log_throttle`): every engine error reaches
//! the HTTP layer through `AppError::from`, which notes it here.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long after a failure `/health` reports it.
pub const REPORTED_FOR: Duration = Duration::from_secs(60);

static LAST: Mutex<Option<(Instant, &'static str)>> = Mutex::new(None);

/// The kind of `e` worth reporting, if it is one: the disk refusing or failing, not a full
/// disk (`disk: full` says that) or a missing file (a race with a removal).
fn kind_of(e: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind;
    match (e.kind(), e.raw_os_error()) {
        (ErrorKind::PermissionDenied, _) | (_, Some(libc::EACCES | libc::EPERM)) => {
            Some("permission denied")
        }
        (ErrorKind::ReadOnlyFilesystem, _) | (_, Some(libc::EROFS)) => {
            Some("read-only file system")
        }
        (_, Some(libc::EIO)) => Some("I/O error"),
        _ => None,
    }
}

/// Notes `e` if it is a failure of the disk worth reporting.
pub fn note(e: &std::io::Error) {
    if let Some(kind) = kind_of(e) {
        let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
        *last = Some((Instant::now(), kind));
    }
}

/// The failure noted within [`REPORTED_FOR`], with how long ago.
pub fn recent() -> Option<(Duration, &'static str)> {
    let last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    last.and_then(|(at, kind)| {
        let ago = at.elapsed();
        (ago < REPORTED_FOR).then_some((ago, kind))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_of_the_disk_are_noted() {
        assert_eq!(
            kind_of(&std::io::Error::from_raw_os_error(libc::EROFS)),
            Some("read-only file system")
        );
        assert_eq!(
            kind_of(&std::io::Error::from_raw_os_error(libc::EACCES)),
            Some("permission denied")
        );
        assert_eq!(
            kind_of(&std::io::Error::from_raw_os_error(libc::EIO)),
            Some("I/O error")
        );
        assert_eq!(
            kind_of(&std::io::Error::from_raw_os_error(libc::ENOSPC)),
            None
        );
        assert_eq!(
            kind_of(&std::io::Error::from_raw_os_error(libc::ENOENT)),
            None
        );
    }
}
