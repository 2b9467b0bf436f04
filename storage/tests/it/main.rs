//! The engine's integration tests, one test binary (one link instead of eight): each file a
//! module. Tests that must run in a process of their own (a crash, a kill, a lower file
//! limit, a deliberate deadlock) re-run this binary with `--exact module::test`.
#![allow(clippy::unwrap_used)]

mod attachments;
mod by_query;
mod common;
mod concurrency;
mod crash;
mod crash_points;
mod engine;
mod feed;
mod index_format;
mod integrity;
mod lifecycle;
mod model;
mod pieces;
mod quota;
mod recovery;
mod rename;
mod rounds;
