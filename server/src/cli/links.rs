//! `tsblob link create`: the query link route of the API (`docs/api.md`, Query links).

use anyhow::Context;
use serde_json::{json, Value};

use super::client::{connect, ClientArgs};
use super::human::parse_time;
use super::usage::Usage;

/// `tsblob link ...`
#[derive(Debug, clap::Args)]
pub struct LinkArgs {
    #[command(subcommand)]
    pub command: LinkCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum LinkCommand {
    /// Make a link that downloads one record (--index or --record) or a whole query without
    /// a token, until it expires; prints the URL. It runs as the token that made it, and
    /// stops working when that token is removed.
    Create {
        bucket: String,
        /// Entry names or globs (`cams/*`, `**`).
        #[arg(required = true)]
        entries: Vec<String>,
        /// From this time (µs, RFC 3339, now-1h), inclusive.
        #[arg(long, value_parser = parse_time)]
        start: Option<u64>,
        /// Up to this time, exclusive.
        #[arg(long, value_parser = parse_time)]
        stop: Option<u64>,
        /// A condition as JSON, e.g. '{"&score": {"$gt": 10}}'.
        #[arg(long)]
        when: Option<String>,
        /// At most this many records.
        #[arg(long)]
        limit: Option<u64>,
        /// The link answers the n-th record of the query (0 first): its payload.
        #[arg(long, conflicts_with = "record")]
        index: Option<u64>,
        /// The link answers this record: ENTRY@TS (the query must select it).
        #[arg(long, value_name = "ENTRY@TS")]
        record: Option<String>,
        /// The whole query as one MCAP file.
        #[arg(long, conflicts_with_all = ["index", "record"])]
        mcap: bool,
        /// How long the link works: "1h", "7days" (default 24h; at most the server's
        /// --max-link-ttl).
        #[arg(long)]
        expires_in: Option<String>,
        /// The name the download is saved under. Default: the entry's last segment (the
        /// bucket's name for several entries), then `_<index>` or `_<ts>` and an extension
        /// by the record's content type (`cam_0.jpg`; `.mcap` with --mcap, else `.bin`). A
        /// name given must end in a passive extension (jpg, png, txt, json, mcap, bin...).
        #[arg(long)]
        file_name: Option<String>,
        /// The link's base URL (default: the server's --public-url, or the URL used here).
        #[arg(long)]
        base_url: Option<String>,
        /// Print the API's answer {"link", "expires_at", "file_name"} as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub async fn link(args: LinkArgs) -> anyhow::Result<()> {
    let c = connect(&args.client)?;
    let LinkCommand::Create {
        bucket,
        entries,
        start,
        stop,
        when,
        limit,
        index,
        record,
        mcap,
        expires_in,
        file_name,
        base_url,
        json,
    } = args.command;
    let mut spec = json!({"bucket": bucket, "entries": entries});
    let mut set = |k: &str, v: Value| {
        spec[k] = v;
    };
    if let Some(s) = start {
        set("start", json!(s));
    }
    if let Some(s) = stop {
        set("stop", json!(s));
    }
    if let Some(w) = when {
        set("when", super::filters::when_json(&w)?);
    }
    if let Some(l) = limit {
        set("limit", json!(l));
    }
    if let Some(i) = index {
        set("index", json!(i));
    }
    if let Some(r) = record {
        let Some((entry, ts)) = r.rsplit_once('@') else {
            return Err(Usage(format!(
                "--record {r}: give ENTRY@TS, e.g. cams/front@1700000000000000"
            ))
            .into());
        };
        let ts = parse_time(ts).map_err(|e| Usage(format!("--record: {e}")))?;
        set("record", json!({"entry": entry, "ts": ts}));
    }
    if mcap {
        set("format", json!("mcap"));
    }
    if let Some(d) = expires_in {
        let d = humantime::parse_duration(&d)
            .with_context(|| format!("--expires-in {d:?}: use e.g. 1h, 7days"))?;
        set("expires_in", json!(d.as_secs().max(1)));
    }
    if let Some(f) = file_name {
        set("file_name", json!(f));
    }
    if let Some(b) = base_url {
        set("base_url", json!(b));
    }
    let v = c.create_link(&spec).await?;
    if json {
        println!("{v}");
    } else {
        println!("{}", super::human::field(&v["link"]));
    }
    Ok(())
}
