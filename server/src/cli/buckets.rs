//! `tsblob bucket create|update|ls|info|rm`.

use anyhow::Context;
use serde_json::Value;
use tsblob_proto::parse_size;

use super::client::{connect, ClientArgs};
use super::human;
use super::usage::Usage;

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
    #[arg(long, value_parser = parse_quota_type)]
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
    #[arg(long, value_parser = parse_compression)]
    pub compression: Option<String>,
    /// Age-based retention: blocks whose newest record is older than this go (30d, 12h,
    /// 90m); none turns it off. Finer rules (some entries, a condition, compression
    /// instead of removal): `tsblob lifecycle set`.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_setting)]
    pub max_age: Option<Value>,
    /// With a tier (`serve --tier-url`): bytes of sealed blocks kept locally (e.g. 10GiB;
    /// none turns it off), the older ones uploaded to the object store.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_setting)]
    pub tier_local_max: Option<Value>,
    /// With a tier: sealed blocks whose newest record is older than this are uploaded
    /// (e.g. 1h; none turns it off).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_setting)]
    pub tier_after: Option<Value>,
}

/// `--quota-type`, `--compression`: checked as the server reads them, so that a bad one is
/// a usage error (exit 2) as every other bad value of the command line. Bug (newcomer
/// walkthrough of 2026-11-30): a plain string went to the server and came back 422, exit 1.
fn parse_quota_type(s: &str) -> Result<String, String> {
    s.parse::<tsblob_storage::QuotaType>()
        .map(|q| q.to_string())
}

/// `--compression` (see [`parse_quota_type`]).
fn parse_compression(s: &str) -> Result<String, String> {
    s.parse::<tsblob_storage::Compression>()?;
    Ok(s.to_string())
}

/// A duration setting (`--max-age`, `--tier-after`): µs for the API, or "none". Bug
/// "bucket create has no --max-age" (new-user walkthrough B.18).
fn parse_duration_setting(s: &str) -> Result<Value, String> {
    let s = s.trim();
    if s == "none" || s == "0" {
        return Ok(Value::from("none"));
    }
    crate::http::lifecycle::duration_micros(s)
        .map(Value::from)
        .ok_or_else(|| {
            format!("{s:?} is not a duration above zero: give e.g. 30d, 12h, 90m or 45s, or none")
        })
}

/// A size setting that may be turned off (`--tier-local-max`): bytes, or "none".
fn parse_size_setting(s: &str) -> Result<Value, String> {
    if s.trim() == "none" {
        return Ok(Value::from("none"));
    }
    parse_size(s).map(Value::from)
}

/// Whether a setting the bucket has is the one asked for ("none" is the API's `null`).
fn same_setting(have: &Value, wanted: &Value) -> bool {
    have == wanted || (wanted == "none" && have.is_null())
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
        set("max_age", self.max_age.clone());
        set("tier_local_max", self.tier_local_max.clone());
        set("tier_after", self.tier_after.clone());
        Value::Object(settings)
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum BucketCommand {
    /// Create a bucket (unset settings take the server's defaults). Retention by age:
    /// --max-age here, or rules by entry and condition with `tsblob lifecycle set`.
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

fn bucket_line(b: &Value) -> String {
    let info = &b["info"];
    let entries = info["entry_count"].as_u64().unwrap_or(0);
    format!(
        "{:<24} {:>12} {:>10} rec  {entries:>4} {:<7}  {}  →  {}",
        human::field(&b["name"]),
        human::size(info["size"].as_u64().unwrap_or(0)),
        info["record_count"].as_u64().unwrap_or(0),
        if entries == 1 { "entry" } else { "entries" },
        human::opt_time(&info["oldest"]),
        human::opt_time(&info["latest"]),
    )
}

fn print_bucket_line(b: &Value) {
    println!("{}", bucket_line(b));
}

fn print_bucket(b: &Value) {
    print_bucket_line(b);
    let s = &b["settings"];
    let max_age = match s["max_age"].as_u64() {
        Some(us) => humantime::format_duration(std::time::Duration::from_micros(us)).to_string(),
        None => "none".into(),
    };
    println!(
        "  quota {} {} ({}), blocks of {} / {} records, compression {}, max age {max_age}, {}, {} evicted",
        human::field(&s["quota_type"]),
        human::size(s["quota_size"].as_u64().unwrap_or(0)),
        b["info"]["quota_used"]
            .as_f64()
            .map(|f| format!("{:.1}% used", f * 100.0))
            .unwrap_or_else(|| "no quota".into()),
        human::size(s["max_block_size"].as_u64().unwrap_or(0)),
        human::json_text(&s["max_block_records"]),
        human::field(&s["compression"]),
        human::count(
            b["info"]["block_count"].as_u64().unwrap_or(0),
            "block",
            "blocks"
        ),
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
                        if have.get(k).is_some_and(|h| !same_setting(h, v)) {
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
                return Err(Usage("say what to change: --quota-type, --quota-size, --max-block-size, --max-block-records, --compression, --max-age, --tier-local-max or --tier-after".into()).into());
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
                return Err(Usage(format!(
                    "removing bucket {name} deletes all its records: add --force to do it"
                ))
                .into());
            }
            c.remove_bucket(&name)
                .await
                .with_context(|| format!("removing bucket {name}"))?;
            println!("removed bucket {name}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Settings {
        #[command(flatten)]
        s: SettingsArgs,
    }

    /// Bug "bucket create has no --max-age" (new-user walkthrough B.18): retention was only
    /// reachable through `tsblob lifecycle set B max_age`.
    #[test]
    fn bucket_create_had_no_max_age() {
        let s = Settings::try_parse_from([
            "x",
            "--max-age",
            "30d",
            "--tier-after",
            "1h",
            "--tier-local-max",
            "10GiB",
        ])
        .unwrap()
        .s;
        assert_eq!(
            s.to_json(),
            serde_json::json!({"max_age": 30u64 * 86_400_000_000, "tier_after": 3_600_000_000u64,
                "tier_local_max": 10u64 << 30})
        );
        let off = Settings::try_parse_from(["x", "--max-age", "none"])
            .unwrap()
            .s;
        assert_eq!(off.to_json(), serde_json::json!({"max_age": "none"}));
        assert!(Settings::try_parse_from(["x", "--max-age", "soon"]).is_err());
        assert!(Settings::try_parse_from(["x", "--max-age", "0s"]).is_err());
        // `none` asked, `null` answered: the same (no warning with --exist-ok).
        assert!(same_setting(&Value::Null, &Value::from("none")));
        assert!(!same_setting(&Value::from(5), &Value::from("none")));
    }

    /// Bug "counts are not pluralised" (new-user walkthrough B.24): "1 entries".
    #[test]
    fn a_bucket_of_one_entry_said_1_entries() {
        let b = serde_json::json!({"name": "b", "info": {"size": 1, "record_count": 1, "entry_count": 1}});
        assert!(
            bucket_line(&b).contains("   1 entry "),
            "{}",
            bucket_line(&b)
        );
        let b = serde_json::json!({"name": "b", "info": {"entry_count": 2}});
        assert!(
            bucket_line(&b).contains("   2 entries"),
            "{}",
            bucket_line(&b)
        );
    }
}
