//! The CLI's usage errors (leaf module: every command may raise one).

/// A bad value that only the command itself can see (a `--when` that is not JSON, a server
/// URL that is not one, a label update naming no records, an unknown alias): exit code 2
/// (`app::exit::USAGE`), as clap's own usage errors. Bug "bad values exit 1 or 7": these were
/// plain errors (1), and a URL that does not parse was reported as "cannot reach the
/// server" (7).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);
