//! The server's integration tests, one test binary (one link of tokio, axum and reqwest
//! instead of thirteen): each file a module, `common` (a real `tsblob serve` child process)
//! and `reliability_util` shared. Run one part with `cargo test -p tsblob-server --test it
//! reliability_crash::` (a module path filters).
#![allow(clippy::unwrap_used)]

mod common;
mod outbound_util;
mod reliability_util;
mod replication_util;
mod tier_hostile_util;

mod big_record;
mod browser;
mod bystander;
mod cli_hostile;
#[cfg(feature = "bench")]
mod compare_e2e;
#[cfg(feature = "bench")]
mod compare_limit;
mod connections;
mod console;
mod costly_condition;
mod cp;
mod damaged_query;
mod links_cli;
mod mcap_hostile;
mod newuser_cli;
mod ops;
mod outbound;
mod range_frames;
mod reliability_cost;
mod reliability_crash;
mod reliability_disk;
mod reliability_hostile;
mod reliability_input;
mod reliability_integrity;
mod reliability_repair;
mod reliability_security;
mod reliability_soak;
mod replication;
mod replication_attachments;
mod replication_down;
mod replication_large;
mod replication_parity;
mod replication_tls;
mod router;
mod serve;
mod stalled_clients;
mod tail;
mod tail_hostile;
mod tier;
mod tier_faults;
mod tier_hostile;
mod tier_labels;
mod tier_node_loss;
mod tier_sidecars;
mod tier_tls;
mod tokens_hostile;
