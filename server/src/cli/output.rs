//! The client commands' standard output once its reader is gone (`tsblob bucket ls | head
//! -1`): the command ends quietly with exit 0, as a listing piped into `head` should.
//!
//! Bug (newcomer walkthrough of 2026-11-30): `println!` to a closed pipe panicked ("failed
//! printing to stdout: Broken pipe") with a backtrace and exit 101, and a `tail` piped into
//! `head` ran on until its next record. SIGPIPE is not restored to its default for this:
//! the client's own sockets (a server closing a connection mid-upload) must stay errors,
//! and `tsblob serve` keeps ignoring it (sockets to departed clients).

use std::time::Duration;

/// An error meaning standard output was closed by its reader: the command stops quietly
/// (exit 0; `main` checks [`stdout_closed`]).
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct StdoutClosed;

/// A write to standard output that failed: [`StdoutClosed`] when its reader is gone, else
/// the error itself.
pub fn stdout_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        StdoutClosed.into()
    } else {
        anyhow::Error::new(e).context("cannot write to standard output")
    }
}

/// Whether a failed command failed only because standard output was closed.
pub fn stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<StdoutClosed>())
}

/// Whether a panic's message is `print!`/`println!`'s on a closed standard output ("failed
/// printing to stdout: Broken pipe (os error 32)").
fn is_closed_stdout_panic(message: &str) -> bool {
    message.starts_with("failed printing to stdout")
        && message.contains(&format!("(os error {})", libc::EPIPE))
}

/// For the client commands: a `println!` to a closed standard output ends the process
/// quietly with exit 0 instead of panicking; every other panic is reported as before.
pub fn quiet_on_closed_stdout() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if is_closed_stdout_panic(message) {
            std::process::exit(0);
        }
        previous(info);
    }));
}

/// Whether standard output is a pipe or socket whose reader is gone (poll(2) reports
/// POLLERR or POLLHUP on it); never for a terminal or a file.
pub fn reader_gone() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one pollfd that lives across the call; a timeout of 0 does not block.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n > 0 && fd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Resolves once standard output's reader is gone, looked at every 250 ms: a `tail` that
/// prints nothing between records (heartbeats only) notices `| head -1` having exited.
pub async fn closed() {
    let mut every = tokio::time::interval(Duration::from_millis(250));
    loop {
        every.tick().await;
        if reader_gone() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_closed_stdouts_panic_is_recognised() {
        assert!(is_closed_stdout_panic(
            "failed printing to stdout: Broken pipe (os error 32)"
        ));
        assert!(!is_closed_stdout_panic(
            "failed printing to stdout: No space left on device (os error 28)"
        ));
        assert!(!is_closed_stdout_panic("index out of bounds"));
        let e = stdout_error(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(stdout_closed(&e.context("printing")));
        let e = stdout_error(std::io::Error::from(std::io::ErrorKind::StorageFull));
        assert!(!stdout_closed(&e));
    }
}
