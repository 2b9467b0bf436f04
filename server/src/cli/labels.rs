//! `tsblob label`: sets and removes labels of one record, of several by timestamp, or of every
//! record a selection matches, in one request each (`PATCH …/{entry}`, `PATCH …/batch`,
//! `PATCH …/query`). The answers of a batch by timestamps (also `tsblob rm --ts` given more
//! than once) are read by [`batch_outcome`].

use std::collections::BTreeMap;

use reqwest::Method;
use serde_json::{json, Value};
use tsblob_proto::client::{entry_path, ClientError};

use super::client::{connect, ClientArgs};
use super::filters::{parse_label, when_param};
use super::human::json_text;
use super::human::parse_time;
use super::usage::Usage;

/// `tsblob label BUCKET ENTRY`
#[derive(Debug, clap::Args)]
pub struct LabelArgs {
    pub bucket: String,
    pub entry: String,
    /// Set label KEY to VALUE (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub set: Vec<(String, String)>,
    /// Remove label KEY (repeatable).
    #[arg(long = "unset", value_name = "KEY")]
    pub unset: Vec<String>,
    /// The record at this timestamp; repeat it for several (one request, each record
    /// answered on its own: a missing one fails alone).
    #[arg(long, value_parser = parse_time, conflicts_with_all = ["start", "stop", "when", "limit", "all"])]
    pub ts: Vec<u64>,
    /// Every record from this time (inclusive) ...
    #[arg(long, value_parser = parse_time)]
    pub start: Option<u64>,
    /// ... to this one (exclusive).
    #[arg(long, value_parser = parse_time)]
    pub stop: Option<u64>,
    /// Only the records matching this condition (ReductStore's `when` language), evaluated
    /// on the labels before the change, e.g. '{"&score": {"$lt": 0.5}}'.
    #[arg(long, value_name = "JSON")]
    pub when: Option<String>,
    /// A comparison with a missing label is an error instead of false.
    #[arg(long, requires = "when")]
    pub strict: bool,
    /// At most this many records, oldest first.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Every record of the entry (when no --ts, --start/--stop or --when narrows it).
    #[arg(long, conflicts_with_all = ["start", "stop", "when"])]
    pub all: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The label changes as the API takes them: a value sets, `null` removes.
fn changes(args: &LabelArgs) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut labels = BTreeMap::new();
    for (k, v) in &args.set {
        labels.insert(k.clone(), Value::String(v.clone()));
    }
    for k in &args.unset {
        if labels.insert(k.clone(), Value::Null).is_some() {
            return Err(Usage(format!("label {k:?} is both set and unset: give it once")).into());
        }
    }
    if labels.is_empty() {
        return Err(
            Usage("say which labels to change: --set KEY=VALUE and/or --unset KEY".into()).into(),
        );
    }
    Ok(labels)
}

pub async fn label(args: LabelArgs) -> anyhow::Result<()> {
    let labels = changes(&args)?;
    let c = connect(&args.client)?;
    let path = entry_path(&args.bucket, &args.entry);
    match args.ts.as_slice() {
        [ts] => {
            c.json(
                c.request(Method::PATCH, &path)
                    .query(&[("ts", ts)])
                    .json(&json!({ "labels": labels })),
            )
            .await?;
            println!("updated 1");
        }
        [] => {
            let narrowed = args.start.is_some() || args.stop.is_some() || args.when.is_some();
            if !narrowed && !args.all {
                return Err(Usage("say which records: --ts, --start/--stop, --when, or --all for every record of the entry".into()).into());
            }
            let mut body = json!({ "labels": labels, "start": args.start, "stop": args.stop,
                "limit": args.limit, "strict": args.strict });
            if let Some(w) = when_param(args.when.as_deref(), None)? {
                body["when"] = serde_json::from_str(&w)?;
            }
            let v = c
                .json(
                    c.request(Method::PATCH, &format!("{path}/query"))
                        .json(&body),
                )
                .await?;
            println!("updated {}", json_text(&v["updated"]));
        }
        many => {
            let records: Vec<Value> = many
                .iter()
                .map(|ts| json!({ "ts": ts, "labels": labels }))
                .collect();
            let v = c
                .json(
                    c.request(Method::PATCH, &format!("{path}/batch"))
                        .json(&json!({ "records": records })),
                )
                .await?;
            batch_outcome(&v, "updated")?;
        }
    }
    Ok(())
}

/// Prints what a batch by timestamps did (`{"done", "failed", "results"}`): the count, and
/// each failed record on stderr; fails with the first failure's status (so the exit code
/// says "not found" when a record was missing) once every record was tried.
pub(crate) fn batch_outcome(v: &Value, verb: &str) -> anyhow::Result<()> {
    println!("{verb} {}", json_text(&v["done"]));
    let failed: Vec<&Value> = v["results"]
        .as_array()
        .map(|r| r.iter().filter(|r| r["status"] != 200).collect())
        .unwrap_or_default();
    for r in &failed {
        eprintln!(
            "ts {}: {} {}",
            json_text(&r["ts"]),
            json_text(&r["status"]),
            json_text(&r["error"]["message"])
        );
    }
    match failed.first() {
        None => Ok(()),
        Some(first) => Err(anyhow::Error::new(ClientError::Status {
            status: first["status"].as_u64().unwrap_or(0) as u16,
            code: first["error"]["code"]
                .as_str()
                .unwrap_or("http_error")
                .to_string(),
            message: first["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        })
        .context(format!(
            "{} of {} failed (the others were {verb})",
            failed.len(),
            super::human::count(
                v["results"].as_array().map_or(0, Vec::len) as u64,
                "record",
                "records"
            )
        ))),
    }
}
