//! `tsblob lifecycle ls|get|set|rm|run`: a bucket's lifecycle rules (records removed, or
//! stored compressed, once older than an age), over `/api/v1/lifecycle/{bucket}`.

use anyhow::Context;
use reqwest::Method;
use serde_json::{json, Value};

use super::{human, seg, ClientArgs};
use crate::http::lifecycle::duration_text;

/// `tsblob lifecycle ...`
#[derive(Debug, clap::Args)]
pub struct LifecycleArgs {
    #[command(subcommand)]
    pub command: LifecycleCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum LifecycleCommand {
    /// List a bucket's rules (its max_age first, as the rule max_age) and what each removed.
    Ls {
        bucket: String,
        /// JSON lines: one rule object of the API per line.
        #[arg(long)]
        json: bool,
    },
    /// One rule with its status (as JSON with --json).
    Get {
        bucket: String,
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Create (or replace) a rule: records older than --older-than go, in the background.
    /// The name max_age sets the bucket's max_age (only --older-than).
    Set {
        bucket: String,
        name: String,
        /// Records older than this go (e.g. 30d, 12h).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        older_than: u64,
        /// How often the rule looks again (default 1h, at least 1s).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        interval: Option<u64>,
        /// Entry names or globs (`*` in a segment, `**` across), `!pattern` excludes; repeat
        /// or separate by commas. None: every entry.
        #[arg(long, value_delimiter = ',')]
        entries: Vec<String>,
        /// Only the records this condition of the query language keeps, as JSON.
        #[arg(long)]
        when: Option<String>,
        /// enabled (default), disabled (kept, not run) or dry_run (counts, removes nothing).
        #[arg(long, value_parser = ["enabled", "disabled", "dry_run"])]
        mode: Option<String>,
        /// remove (default) or compress: store the records zstd-compressed instead (they
        /// read back identical; the blocks they leave are deleted).
        #[arg(long, value_parser = ["remove", "compress"])]
        action: Option<String>,
    },
    /// Remove a rule (max_age: clears the bucket's max_age). Records are not touched.
    Rm { bucket: String, name: String },
    /// Run one pass of a rule now (whatever its mode) and print what it removed.
    Run { bucket: String, name: String },
}

/// `--older-than`, `--interval`: a duration (30d, 12h, 90s) in µs, read as the server reads
/// it. Bug (newcomer walkthrough of 2026-11-30): these were plain strings, so a bad one
/// went to the server and came back as 422 (exit 1), where `token create --ttl` refuses
/// its bad duration as a usage error (exit 2).
fn parse_duration(s: &str) -> Result<u64, String> {
    crate::http::lifecycle::duration_micros(s.trim())
        .ok_or_else(|| format!("{s:?} is not a duration above 0: use e.g. 30d, 12h or 90s"))
}

/// A count of the API's answer with its noun ([`human::count`]); as it is when not a number.
fn counted(v: &Value, one: &str, many: &str) -> String {
    match v.as_u64() {
        Some(n) => human::count(n, one, many),
        None => format!("{} {many}", human::json_text(v)),
    }
}

fn path(bucket: &str, name: &str) -> String {
    format!("/api/v1/lifecycle/{}/{}", seg(bucket), seg(name))
}

fn line(r: &Value) {
    let s = &r["status"];
    let entries = match r["entries"].as_array() {
        Some(e) if !e.is_empty() => e
            .iter()
            .filter_map(Value::as_str)
            .map(human::term)
            .collect::<Vec<_>>()
            .join(","),
        _ => "*".into(),
    };
    let (removed, compressed) = if r["mode"] == "dry_run" {
        ("would have removed", "would have compressed")
    } else {
        ("removed", "compressed")
    };
    let done = if r["action"] == "compress" {
        format!(
            "{compressed} {} ({} saved, {} freed)",
            counted(&s["compressed"], "record", "records"),
            counted(&s["saved_bytes"], "byte", "bytes"),
            counted(&s["removed_blocks"], "block", "blocks")
        )
    } else {
        format!(
            "{removed} {} ({})",
            counted(&s["removed"], "record", "records"),
            counted(&s["removed_blocks"], "block", "blocks")
        )
    };
    println!(
        "{:<20} {:<8} {:<8} older than {:<6} every {:<6} entries {}  when {}  {done}  last run {}{}",
        human::field(&r["name"]),
        human::term(r["action"].as_str().unwrap_or("remove")),
        human::field(&r["mode"]),
        duration_text(r["older_than"].as_u64().unwrap_or(0)),
        duration_text(r["interval"].as_u64().unwrap_or(0)),
        entries,
        if r["when"].is_null() { "-".to_string() } else { human::json_text(&r["when"]) },
        human::opt_time(&s["last_run"]),
        s["last_error"]
            .as_str()
            .map(|e| format!("  error: {}", human::term(e)))
            .unwrap_or_default(),
    );
}

pub async fn lifecycle(args: LifecycleArgs) -> anyhow::Result<()> {
    let c = super::connect(&args.client)?;
    match args.command {
        LifecycleCommand::Ls { bucket, json } => {
            let v = c
                .json(c.request(Method::GET, &format!("/api/v1/lifecycle/{}", seg(&bucket))))
                .await?;
            human::print_list(&v["rules"], json, line);
        }
        LifecycleCommand::Get { bucket, name, json } => {
            let r = c
                .json(c.request(Method::GET, &path(&bucket, &name)))
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                line(&r);
            }
        }
        LifecycleCommand::Set {
            bucket,
            name,
            older_than,
            interval,
            entries,
            when,
            mode,
            action,
        } => {
            let mut spec = json!({ "older_than": older_than });
            if let Some(a) = action {
                spec["action"] = json!(a);
            }
            if let Some(i) = interval {
                spec["interval"] = json!(i);
            }
            if !entries.is_empty() {
                spec["entries"] = json!(entries);
            }
            if let Some(w) = when {
                spec["when"] = super::filters::when_json(&w)?;
            }
            if let Some(m) = mode {
                spec["mode"] = json!(m);
            }
            let r = c
                .json(c.request(Method::PUT, &path(&bucket, &name)).json(&spec))
                .await?;
            line(&r);
        }
        LifecycleCommand::Rm { bucket, name } => {
            c.send(c.request(Method::DELETE, &path(&bucket, &name)))
                .await
                .with_context(|| format!("removing rule {name} of bucket {bucket}"))?;
            println!("removed rule {name} of bucket {bucket}");
        }
        LifecycleCommand::Run { bucket, name } => {
            let p = c
                .json(c.request(Method::POST, &format!("{}/run", path(&bucket, &name))))
                .await?;
            // Bug "a dry run said it removed records": a dry_run rule's pass counts only.
            let (removed, compressed) = if p["dry_run"] == json!(true) {
                ("dry run: would remove", "dry run: would compress")
            } else {
                ("removed", "compressed")
            };
            let done = if p["compressed"].as_u64().unwrap_or(0) > 0 {
                format!(
                    "{compressed} {} ({} saved, {} freed)",
                    counted(&p["compressed"], "record", "records"),
                    counted(&p["saved_bytes"], "byte", "bytes"),
                    counted(&p["blocks"], "block", "blocks")
                )
            } else {
                format!(
                    "{removed} {} ({})",
                    counted(&p["removed"], "record", "records"),
                    counted(&p["blocks"], "whole block", "whole blocks")
                )
            };
            println!(
                "rule {name} of {bucket}: {done}, looked at {}, {}",
                human::json_text(&p["looked_at"]),
                if p["caught_up"] == json!(true) {
                    "caught up"
                } else {
                    "more to do (the background goes on)"
                }
            );
        }
    }
    Ok(())
}
