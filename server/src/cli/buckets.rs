//! `tsblob bucket create|update|ls|info|rm`.

use anyhow::{bail, Context};
use serde_json::Value;
use tsblob_proto::parse_size;

use super::client::{connect, ClientArgs};
use super::human;

/// `tsblob bucket ...`
#[derive(Debug, clap::Args)]
pub struct BucketArgs {
    #[command(subcommand)]
    pub command: BucketCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Bucket settings on the command line (unset ones are left as they are).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SettingsArgs {
    /// none, fifo or hard.
    #[arg(long)]
    pub quota_type: Option<String>,
    /// Quota in bytes on disk (e.g. 10GiB).
    #[arg(long, value_parser = parse_size)]
    pub quota_size: Option<u64>,
    /// Block file size (e.g. 64MiB).
    #[arg(long, value_parser = parse_size)]
    pub max_block_size: Option<u64>,
    #[arg(long)]
    pub max_block_records: Option<u64>,
    /// none, zstd or zstd:<1-22>.
    #[arg(long)]
    pub compression: Option<String>,
}

impl SettingsArgs {
    /// The settings JSON of the API (only the fields given).
    pub fn to_json(&self) -> Value {
        let mut settings = serde_json::Map::new();
        let mut set = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                settings.insert(k.into(), v);
            }
        };
        set("quota_type", self.quota_type.clone().map(Value::from));
        set("quota_size", self.quota_size.map(Value::from));
        set("max_block_size", self.max_block_size.map(Value::from));
        set("max_block_records", self.max_block_records.map(Value::from));
        set("compression", self.compression.clone().map(Value::from));
        Value::Object(settings)
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum BucketCommand {
    /// Create a bucket (unset settings take the server's defaults).
    Create {
        name: String,
        #[command(flatten)]
        settings: SettingsArgs,
        /// Succeed when the bucket exists already (exit 0; a warning on stderr names any
        /// setting given that differs from the bucket's). Without it: exit 4.
        #[arg(long)]
        exist_ok: bool,
    },
    /// Change a bucket's settings (those given; the others stay).
    Update {
        name: String,
        #[command(flatten)]
        settings: SettingsArgs,
    },
    /// List buckets with their sizes.
    Ls {
        /// JSON lines: one bucket object of the API per line.
        #[arg(long)]
        json: bool,
    },
    /// Show a bucket's settings, sizes and entries.
    Info {
        name: String,
        /// The API's bucket object as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rename a bucket (settings, entries and records stay; the new name must be free).
    Rename { name: String, new_name: String },
    /// Remove a bucket and everything in it (needs --force).
    Rm {
        name: String,
        /// Yes, remove every record of the bucket.
        #[arg(long)]
        force: bool,
    },
}

fn print_bucket_line(b: &Value) {
    let info = &b["info"];
    println!(
        "{:<24} {:>12} {:>10} rec  {:>4} entries  {}  →  {}",
        human::field(&b["name"]),
        human::size(info["size"].as_u64().unwrap_or(0)),
        info["record_count"].as_u64().unwrap_or(0),
        info["entry_count"].as_u64().unwrap_or(0),
        human::opt_time(&info["oldest"]),
        human::opt_time(&info["latest"]),
    );
}

fn print_bucket(b: &Value) {
    print_bucket_line(b);
    let s = &b["settings"];
    println!(
        "  quota {} {} ({}), blocks of {} / {} records, compression {}, {} blocks, {} evicted",
        human::field(&s["quota_type"]),
        human::size(s["quota_size"].as_u64().unwrap_or(0)),
        b["info"]["quota_used"]
            .as_f64()
            .map(|f| format!("{:.1}% used", f * 100.0))
            .unwrap_or_else(|| "no quota".into()),
        human::size(s["max_block_size"].as_u64().unwrap_or(0)),
        human::json_text(&s["max_block_records"]),
        human::field(&s["compression"]),
        human::json_text(&b["info"]["block_count"]),
        human::json_text(&b["info"]["evicted_blocks"]),
    );
    for e in b["entries"].as_array().into_iter().flatten() {
        super::entries::print_entry_line(e);
    }
}

pub async fn bucket(args: BucketArgs) -> anyhow::Result<()> {
    let c = connect(&args.client)?;
    match args.command {
        BucketCommand::Create {
            name,
            settings,
            exist_ok,
        } => {
            let wanted = settings.to_json();
            match c.create_bucket(&name, &wanted).await {
                Ok(b) => println!(
                    "created bucket {name}: {}",
                    human::json_text(&b["settings"])
                ),
                Err(tsblob_proto::client::ClientError::Status { code, .. })
                    if exist_ok && code == "bucket_exists" =>
                {
                    let b = c.bucket(&name).await?;
                    let have = &b["settings"];
                    for (k, v) in wanted.as_object().into_iter().flatten() {
                        if have.get(k).is_some_and(|h| h != v) {
                            eprintln!(
                                "warning: bucket {name} exists with {k} = {}, not {v} (left as it is; change it with `tsblob bucket update`)",
                                human::json_text(&have[k])
                            );
                        }
                    }
                    println!("bucket {name} exists: {}", human::json_text(have));
                }
                Err(e) => return Err(e.into()),
            }
        }
        BucketCommand::Update { name, settings } => {
            let body = settings.to_json();
            if body.as_object().is_some_and(|m| m.is_empty()) {
                bail!("say what to change: --quota-type, --quota-size, --max-block-size, --max-block-records or --compression");
            }
            let b = c.update_bucket(&name, &body).await?;
            println!(
                "updated bucket {name}: {}",
                human::json_text(&b["settings"])
            );
        }
        BucketCommand::Ls { json } => {
            let v = c.list_buckets().await?;
            human::print_list(&v["buckets"], json, print_bucket_line);
        }
        BucketCommand::Info { name, json } => {
            let b = c.bucket(&name).await?;
            if json {
                println!("{b}");
            } else {
                print_bucket(&b);
            }
        }
        BucketCommand::Rename { name, new_name } => {
            c.rename_bucket(&name, &new_name)
                .await
                .with_context(|| format!("renaming bucket {name}"))?;
            println!("renamed bucket {name} to {new_name}");
        }
        BucketCommand::Rm { name, force } => {
            if !force {
                bail!("removing bucket {name} deletes all its records: add --force to do it");
            }
            c.remove_bucket(&name)
                .await
                .with_context(|| format!("removing bucket {name}"))?;
            println!("removed bucket {name}");
        }
    }
    Ok(())
}
