//! The CLI client in the `tsblob` binary: talks to a server (`--url`, `TSBLOB_URL`, or a
//! saved `--alias`) with a token (`--token`, `TSBLOB_TOKEN`) through
//! `tsblob_proto::client`. The command tree is [`app`]; buckets, entries, records, tokens
//! and profiles have a module each.

pub mod app;
pub mod attachments;
pub mod buckets;
pub mod client;
pub mod cp;
pub mod entries;
pub mod filters;
pub mod histogram;
pub mod human;
pub mod labels;
pub mod lifecycle;
pub mod links;
pub mod output;
pub mod profiles;
pub mod records;
pub mod replication;
pub mod tokens;
pub mod usage;

pub use attachments::{attachment, AttachmentArgs};
pub use buckets::{bucket, BucketArgs};
pub use client::{connect, seg, Client, ClientArgs};
pub use cp::{cp, CpArgs};
pub use entries::{entry, EntryArgs};
pub use histogram::{histogram, HistogramArgs};
pub use labels::{label, LabelArgs};
pub use lifecycle::{lifecycle, LifecycleArgs};
pub use links::{link, LinkArgs};
pub use profiles::{alias, AliasArgs};
pub use records::{get, put, query, rm, tail, GetArgs, PutArgs, QueryArgs, RmArgs, TailArgs};
pub use replication::{replication, ReplicationArgs};
pub use tokens::{token, TokenArgs};
