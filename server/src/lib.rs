//! The `tsblob` binary's library: the HTTP server over the engine ([`http`], [`serve`]),
//! its configuration ([`config`]), the CLI client ([`cli`]), the record framing shared by
//! all of them ([`framing`]) and the HTTP load generator ([`loadgen`]).
//!
//! **Architecture invariant:** only this crate knows HTTP and JSON; the engine
//! (`tsblob-storage`) is called on tokio's blocking pool and never sees a request.

pub mod cli;
pub mod config;
pub mod framing;
pub mod http;
pub mod loadgen;
pub mod serve;
pub mod tier;
