//! The `tsblob` binary's library: the HTTP server over the engine ([`http`], [`serve`]),
//! its configuration ([`config`]) and the CLI client ([`cli`]; `tsblob bench` and the
//! hidden `tsblob loadgen` are the `tsblob-compare` crate's). The wire format they share (framing, label headers, name rules, sizes)
//! is the `tsblob-proto` crate.
//!
//! **Architecture invariant:** only this crate knows HTTP and JSON; the engine
//! (`tsblob-storage`) is called on tokio's blocking pool and never sees a request.

pub mod answers;
pub mod assemble;
pub mod base_url;
pub mod batch_client;
pub mod blocking;
pub mod cli;
pub mod config;
pub mod connections;
pub mod content_type;
pub mod disk_errors;
pub mod head_errors;
pub mod http;
pub mod linger;
pub mod log_throttle;
pub mod mcap;
pub mod private_file;
pub mod record_stream;
pub mod reduct;
pub mod reduct_header;
pub mod replication;
pub mod send_watch;
pub mod serve;
pub mod tier;
pub mod when;
