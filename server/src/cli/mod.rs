//! The CLI client in the `tsblob` binary: talks to a server (`--url`, `TSBLOB_URL`) with a
//! token (`--token`, `TSBLOB_TOKEN`). Bucket commands here, record transfers in
//! [`records`].

pub mod client;
pub mod cp;
pub mod histogram;
pub mod human;
pub mod records;
pub mod replication;

use anyhow::Context;
use reqwest::Method;
use serde_json::Value;

pub use client::{seg, Client, ClientArgs};
pub use cp::{cp, CpArgs};
pub use histogram::{histogram, HistogramArgs};
pub use records::{get, put, query, rm, tail, GetArgs, PutArgs, QueryArgs, RmArgs, TailArgs};
pub use replication::{replication, ReplicationArgs};

use crate::config::parse_size;

/// `tsblob bucket ...`
#[derive(Debug, clap::Args)]
pub struct BucketArgs {
    #[command(subcommand)]
    pub command: BucketCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum BucketCommand {
    /// Create a bucket (unset settings take the server's defaults).
    Create {
        name: String,
        /// none, fifo or hard.
        #[arg(long)]
        quota_type: Option<String>,
        /// Quota in bytes on disk (e.g. 10GiB).
        #[arg(long, value_parser = parse_size)]
        quota_size: Option<u64>,
        /// Block file size (e.g. 64MiB).
        #[arg(long, value_parser = parse_size)]
        max_block_size: Option<u64>,
        #[arg(long)]
        max_block_records: Option<u64>,
        /// none, zstd or zstd:<1-22>.
        #[arg(long)]
        compression: Option<String>,
    },
    /// List buckets with their sizes.
    Ls,
    /// Show a bucket's settings, sizes and entries.
    Info { name: String },
    /// Remove a bucket and everything in it.
    Rm { name: String },
}

fn opt_time(v: &Value) -> String {
    v.as_u64()
        .map(human::format_time)
        .unwrap_or_else(|| "-".into())
}

fn print_bucket_line(b: &Value) {
    let info = &b["info"];
    println!(
        "{:<24} {:>12} {:>10} rec  {:>4} entries  {}  →  {}",
        b["name"].as_str().unwrap_or(""),
        human::size(info["size"].as_u64().unwrap_or(0)),
        info["record_count"].as_u64().unwrap_or(0),
        info["entry_count"].as_u64().unwrap_or(0),
        opt_time(&info["oldest"]),
        opt_time(&info["latest"]),
    );
}

pub async fn bucket(args: BucketArgs) -> anyhow::Result<()> {
    let c = Client::new(&args.client)?;
    match args.command {
        BucketCommand::Create {
            name,
            quota_type,
            quota_size,
            max_block_size,
            max_block_records,
            compression,
        } => {
            let mut settings = serde_json::Map::new();
            let mut set = |k: &str, v: Option<Value>| {
                if let Some(v) = v {
                    settings.insert(k.into(), v);
                }
            };
            set("quota_type", quota_type.map(Value::from));
            set("quota_size", quota_size.map(Value::from));
            set("max_block_size", max_block_size.map(Value::from));
            set("max_block_records", max_block_records.map(Value::from));
            set("compression", compression.map(Value::from));
            let b = c
                .json(
                    c.request(Method::POST, &format!("/api/v1/b/{}", seg(&name)))
                        .json(&Value::Object(settings)),
                )
                .await?;
            println!("created bucket {name}: {}", b["settings"]);
        }
        BucketCommand::Ls => {
            let v = c.json(c.request(Method::GET, "/api/v1/b")).await?;
            for b in v["buckets"].as_array().into_iter().flatten() {
                print_bucket_line(b);
            }
        }
        BucketCommand::Info { name } => {
            let b = c
                .json(c.request(Method::GET, &format!("/api/v1/b/{}", seg(&name))))
                .await?;
            print_bucket_line(&b);
            let s = &b["settings"];
            println!(
                "  quota {} {} ({}), blocks of {} / {} records, compression {}, {} blocks, {} evicted",
                s["quota_type"].as_str().unwrap_or(""),
                human::size(s["quota_size"].as_u64().unwrap_or(0)),
                b["info"]["quota_used"]
                    .as_f64()
                    .map(|f| format!("{:.1}% used", f * 100.0))
                    .unwrap_or_else(|| "no quota".into()),
                human::size(s["max_block_size"].as_u64().unwrap_or(0)),
                s["max_block_records"],
                s["compression"].as_str().unwrap_or(""),
                b["info"]["block_count"],
                b["info"]["evicted_blocks"],
            );
            for e in b["entries"].as_array().into_iter().flatten() {
                println!(
                    "  {:<30} {:>12} {:>10} rec  {}  →  {}",
                    e["name"].as_str().unwrap_or(""),
                    human::size(e["size"].as_u64().unwrap_or(0)),
                    e["record_count"].as_u64().unwrap_or(0),
                    opt_time(&e["oldest"]),
                    opt_time(&e["latest"]),
                );
            }
        }
        BucketCommand::Rm { name } => {
            c.send(c.request(Method::DELETE, &format!("/api/v1/b/{}", seg(&name))))
                .await
                .with_context(|| format!("removing bucket {name}"))?;
            println!("removed bucket {name}");
        }
    }
    Ok(())
}
