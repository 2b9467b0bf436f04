//! `tsblob cp SRC DST`: one-off copies between servers, and export to / import from a
//! folder (layout in `docs/cli.md`, "Export folder layout"):
//!
//! ```text
//! FOLDER/<entry>/index.ndjson      one JSON line per record:
//!                                  {"ts", "file", "content_type", "labels", "size", "crc32c"}
//! FOLDER/<entry>/<ts, 20 digits>.<ext>   the payload, byte for byte
//! ```
//!
//! A place is a server bucket, `http://host:port/BUCKET[/ENTRY-GLOB]`, or a folder. Records
//! are read by a producer (a streamed multi-entry query, or the folder's index files) into
//! a bounded channel and written by the sink (batches with `if_exists=compare`, or files):
//! a copy run again finds what the first run wrote (same timestamp, same payload CRC) and
//! counts it as already there, so an interrupted copy is simply run again. At the end the
//! counts are checked: every record read was written or found already there; a conflict (a
//! different payload at the same timestamp, never overwritten) fails the command. The
//! copied entries' attachments follow their records (`attachments.rs`;
//! `FOLDER/<entry>/attachments.json` in a folder).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use reqwest::Method;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tsblob_storage::{EntryPattern, Labels};

use super::filters::when_param;
use super::human::{parse_time, size};
use super::records::bar;
use super::{seg, Client};
use crate::batch_client::{Destination, OutRecord};

mod attachments;
mod mcap;
mod sink;
mod source;

use sink::{write_folder, write_server};
use source::{folder_entries, read_folder, read_index, read_server};

/// Records in flight between the reader and the writer ...
const CHANNEL: usize = 64;
/// ... holding at most this many payload bytes (a larger record travels alone).
const CHANNEL_BYTES: usize = 256 << 20;

/// The sending end of the copy's queue: bounded by records and by payload bytes. Bug "cp
/// queues 64 whole records": 64 records of any size were held, so a source announcing huge
/// records made the copy hold them all.
pub(super) struct Tx {
    tx: mpsc::Sender<OutRecord>,
    budget: std::sync::Arc<tokio::sync::Semaphore>,
    bytes: u32,
}

/// The receiving end of [`Tx`].
pub(super) struct Rx {
    rx: mpsc::Receiver<OutRecord>,
    budget: std::sync::Arc<tokio::sync::Semaphore>,
    bytes: u32,
}

/// The permits a record of this size takes (all of them for one of `bytes` or more).
fn cost(len: usize, bytes: u32) -> u32 {
    len.min(bytes as usize) as u32
}

/// A queue of at most `records` records and `bytes` payload bytes (at most
/// `CHANNEL_BYTES`).
pub(super) fn queue(records: usize, bytes: usize) -> (Tx, Rx) {
    let (tx, rx) = mpsc::channel(records);
    let bytes = bytes.min(CHANNEL_BYTES) as u32;
    let budget = std::sync::Arc::new(tokio::sync::Semaphore::new(bytes as usize));
    (
        Tx {
            tx,
            budget: budget.clone(),
            bytes,
        },
        Rx { rx, budget, bytes },
    )
}

impl Tx {
    /// Queues a record once there is room for it; an error once the receiver is gone.
    pub(super) async fn send(&self, r: OutRecord) -> Result<(), ()> {
        let n = cost(r.data.len(), self.bytes);
        match self.budget.acquire_many(n).await {
            Ok(p) => p.forget(),
            Err(_) => return Err(()),
        }
        self.tx.send(r).await.map_err(|_| ())
    }

    /// The same from a blocking thread.
    pub(super) fn blocking_send(&self, r: OutRecord) -> Result<(), ()> {
        tokio::runtime::Handle::current().block_on(self.send(r))
    }
}

impl Rx {
    /// The next record, its bytes given back to the queue.
    pub(super) async fn recv(&mut self) -> Option<OutRecord> {
        let r = self.rx.recv().await?;
        self.budget
            .add_permits(cost(r.data.len(), self.bytes) as usize);
        Some(r)
    }
}
const INDEX: &str = "index.ndjson";

/// `tsblob cp SRC DST`
#[derive(Debug, clap::Args)]
pub struct CpArgs {
    /// Source: `http[s]://host:port/BUCKET[/ENTRY-GLOB]`, an export folder, an MCAP file
    /// (`*.mcap`) or a rosbag2 folder (holding `metadata.yaml` and the files it lists).
    pub src: String,
    /// Destination: `http[s]://host:port/BUCKET`, a folder, or an MCAP file (`*.mcap`,
    /// from a server source).
    pub dst: String,
    /// Entry names or globs (`*` in a segment, `**` across), comma-separated; default: the
    /// source URL's entry part, or every entry.
    #[arg(long)]
    pub entries: Option<String>,
    /// From this time (inclusive; µs, RFC 3339, now-1h).
    #[arg(long, value_parser = parse_time)]
    pub start: Option<u64>,
    /// To this time (exclusive).
    #[arg(long, value_parser = parse_time)]
    pub stop: Option<u64>,
    /// Only records matching this condition of the query language (JSON).
    #[arg(long)]
    pub when: Option<String>,
    /// Continue where an earlier copy to the same destination ended: start at the oldest
    /// of the destination's latest timestamps of the copied entries (a restart from there
    /// finds the boundary records already there).
    #[arg(long, conflicts_with = "start")]
    pub from_last: bool,
    /// Token for a server source.
    #[arg(long, env = "TSBLOB_SRC_TOKEN", hide_env_values = true)]
    pub src_token: Option<String>,
    /// Token for a server destination.
    #[arg(long, env = "TSBLOB_DST_TOKEN", hide_env_values = true)]
    pub dst_token: Option<String>,
    /// PEM file of certificates to trust for https:// servers besides the Mozilla roots
    /// (a private CA, a self-signed certificate).
    #[arg(long, env = "TSBLOB_CA")]
    pub ca: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub max_record: super::records::MaxRecordArgs,
    /// A destination bucket that does not exist is created with the source bucket's
    /// settings (quota, blocks, compression, retention, tiering) when the source is a
    /// server; with this flag, or from a folder or MCAP source (they keep no bucket
    /// settings), with the destination server's defaults.
    #[arg(long)]
    pub no_source_settings: bool,
}

/// A local source, checked before the destination bucket is made. Bug "cp created the
/// destination bucket before reading its source": a missing folder, a plain file or a file
/// that is not MCAP left an empty bucket behind, and an empty folder copied nothing with
/// exit 0. What the check read is handed to the reader ([`Checked`]): a bag's metadata and
/// an export folder's entries are read once.
fn check_source(src: &Place) -> anyhow::Result<Checked> {
    const WHAT: &str = "give an export folder (`tsblob cp http://host/BUCKET FOLDER` makes one), an MCAP file (*.mcap) or a rosbag2 folder (with metadata.yaml)";
    Ok(match src {
        Place::Server {
            url, bucket, ca, ..
        } => Checked::Server {
            url: url.clone(),
            bucket: bucket.clone(),
            ca: ca.clone(),
        },
        Place::Folder(dir) if !dir.is_dir() => {
            bail!("{} is not a folder: {WHAT}", dir.display())
        }
        Place::Folder(dir) => {
            let entries = folder_entries(dir)?;
            if entries.is_empty() {
                bail!(
                    "{} holds no exported entry (no <entry>/{INDEX} under it): {WHAT}",
                    dir.display()
                )
            }
            Checked::Folder(entries)
        }
        Place::Mcap(p) => {
            let mcap = crate::mcap::has_magic(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            if !mcap {
                let path = p.display().to_string();
                return Err(crate::mcap::import::ImportError::NotMcap { path }.into());
            }
            Checked::Mcap(mcap::Input::File(p.clone()))
        }
        Place::Bag(p) => Checked::Mcap(mcap::Input::Bag(p.clone(), crate::mcap::bag::read(p)?)),
    })
}

/// A source as [`check_source`] found it.
enum Checked {
    Server {
        url: String,
        bucket: String,
        ca: Option<Vec<u8>>,
    },
    /// An export folder's `(entry, index file)`s.
    Folder(Vec<(String, PathBuf)>),
    Mcap(mcap::Input),
}

/// Creates the destination bucket when it is missing: with the source bucket's settings
/// (a server source, unless `--no-source-settings`), else the destination's defaults.
/// A copy into a missing bucket retried its 404s and ended with "Broken pipe".
async fn ensure_destination(src: &Place, dst: &Place, args: &CpArgs) -> anyhow::Result<()> {
    use tsblob_proto::client::ClientError;
    let Place::Server {
        url, bucket, ca, ..
    } = dst
    else {
        return Ok(());
    };
    let d = Client::with_ca(url, args.dst_token.as_deref(), ca.as_deref())
        .context("cannot set up the HTTP client")?;
    match d.bucket(bucket).await {
        Ok(_) => return Ok(()),
        Err(ClientError::Status { status: 404, .. }) => {}
        // A write-only destination token may not read the bucket (writing does not imply
        // reading): copy into it as it is; a missing bucket then fails the first write
        // with its 404 (review of 2026-11-29).
        Err(ClientError::Status { status: 403, .. }) => return Ok(()),
        Err(e) => return Err(e).context(format!("the destination bucket {bucket}")),
    }
    let (settings, from) = match src {
        Place::Server {
            url, bucket: b, ca, ..
        } if !args.no_source_settings => {
            let s = Client::with_ca(url, args.src_token.as_deref(), ca.as_deref())
                .context("cannot set up the HTTP client")?;
            let v = s
                .bucket(b)
                .await
                .with_context(|| format!("reading the settings of the source bucket {b}"))?;
            (v["settings"].clone(), format!("the settings of the source bucket {b}"))
        }
        Place::Server { .. } => (
            serde_json::json!({}),
            "the destination server's defaults (--no-source-settings)".to_string(),
        ),
        // Bug (new-user walkthrough): this printed "created ...: {}" as if settings were
        // copied; an export folder or MCAP file keeps none.
        _ => (
            serde_json::json!({}),
            "the destination server's defaults (a folder or MCAP file keeps no bucket settings: set them with `tsblob bucket update`)".to_string(),
        ),
    };
    d.create_bucket(bucket, &settings)
        .await
        .with_context(|| format!("creating the destination bucket {bucket} with {settings}"))?;
    if settings.as_object().is_some_and(|o| o.is_empty()) {
        eprintln!("created the destination bucket {bucket} with {from}");
    } else {
        eprintln!("created the destination bucket {bucket} with {from}: {settings}");
    }
    Ok(())
}

/// A server bucket or a folder.
#[derive(Debug, Clone)]
enum Place {
    Server {
        url: String,
        bucket: String,
        entries: Option<String>,
        /// `--ca`: certificates trusted for https besides the usual roots.
        ca: Option<Vec<u8>>,
    },
    Folder(PathBuf),
    /// An MCAP file (`*.mcap`).
    Mcap(PathBuf),
    /// A rosbag2 folder (`metadata.yaml` and `.mcap` files).
    Bag(PathBuf),
}

fn place(s: &str, ca: &Option<Vec<u8>>) -> anyhow::Result<Place> {
    let (scheme, rest) = match (s.strip_prefix("http://"), s.strip_prefix("https://")) {
        (Some(rest), _) => ("http", rest),
        (_, Some(rest)) => ("https", rest),
        _ => {
            let p = PathBuf::from(s);
            return Ok(if mcap::is_mcap(&p) {
                Place::Mcap(p)
            } else if mcap::is_bag(&p) {
                Place::Bag(p)
            } else {
                Place::Folder(p)
            });
        }
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut parts = path.trim_matches('/').splitn(2, '/');
    let bucket = parts.next().unwrap_or("").to_string();
    if bucket.is_empty() {
        bail!("{s}: name the bucket, as in {scheme}://{host}/BUCKET[/ENTRY-GLOB]");
    }
    tsblob_storage::validate_bucket_name(&bucket).map_err(|e| anyhow::anyhow!("{s}: {e}"))?;
    Ok(Place::Server {
        url: format!("{scheme}://{host}"),
        ca: ca.clone(),
        bucket,
        entries: parts.next().filter(|e| !e.is_empty()).map(String::from),
    })
}

/// One line of an export index.
#[derive(Debug, Serialize, Deserialize)]
struct IndexLine {
    ts: u64,
    file: String,
    content_type: String,
    labels: Labels,
    size: u64,
    crc32c: u32,
}

/// What a copy did.
#[derive(Debug, Default)]
struct Totals {
    read: u64,
    written: u64,
    existing: u64,
    conflicts: u64,
    /// Records the destination refused for themselves (not retried), and the first reason.
    refused: u64,
    first_refusal: Option<String>,
    bytes: u64,
}

/// The closing line of a copy: "1 record read, 1 written, 0 already there, ...".
fn summary_line(read: u64, t: &Totals) -> String {
    use crate::cli::human::count;
    format!(
        "{} read, {} written, {} already there, {}, {} refused, {}",
        count(read, "record", "records"),
        t.written,
        t.existing,
        count(t.conflicts, "conflict", "conflicts"),
        t.refused,
        size(t.bytes)
    )
}

pub async fn cp(args: CpArgs) -> anyhow::Result<()> {
    let servers = (is_server_url(&args.src), is_server_url(&args.dst));
    copy(args).await.map_err(|e| token_advice(e, servers))
}

fn is_server_url(place: &str) -> bool {
    place.starts_with("http://") || place.starts_with("https://")
}

/// A 401's advice as `cp` takes tokens: `--src-token`/`--dst-token` for the side that
/// answered (`cp` has no `--token`, and `TSBLOB_TOKEN` is not read). Bug (newcomer
/// walkthrough of 2026-11-30): a destination's 401 said "give one with --token,
/// TSBLOB_TOKEN, or a saved alias", three things `cp` does not take. The side is the only
/// server of the copy, else the one the error's context names, else both are named.
fn token_advice(mut e: anyhow::Error, (src, dst): (bool, bool)) -> anyhow::Error {
    use tsblob_proto::client::ClientError;
    const SRC: &str = "--src-token (or TSBLOB_SRC_TOKEN)";
    const DST: &str = "--dst-token (or TSBLOB_DST_TOKEN)";
    let said = |word: &str| {
        e.chain()
            .filter(|c| !c.is::<ClientError>())
            .any(|c| c.to_string().contains(word))
    };
    let advice = match (src, dst) {
        (true, false) => format!("give the source's token with {SRC}"),
        (false, true) => format!("give the destination's token with {DST}"),
        _ if said("destination") => format!("give the destination's token with {DST}"),
        _ if said("source") => format!("give the source's token with {SRC}"),
        _ => format!("give the source's token with {SRC} and the destination's with {DST}"),
    };
    if let Some(ClientError::Status {
        status: 401,
        message,
        ..
    }) = e.downcast_mut::<ClientError>()
    {
        const HTTP: &str = "send `Authorization: Bearer <token>`";
        if message.contains(HTTP) {
            *message = message.replacen(HTTP, &advice, 1);
        }
    }
    e
}

async fn copy(args: CpArgs) -> anyhow::Result<()> {
    let ca = match &args.ca {
        Some(path) => Some(
            std::fs::read(path).with_context(|| format!("cannot read --ca {}", path.display()))?,
        ),
        None => None,
    };
    let src = place(&args.src, &ca)?;
    let dst = place(&args.dst, &ca)?;
    if let Place::Server {
        entries: Some(e), ..
    } = &dst
    {
        bail!("the destination names an entry ({e}): give only http://host:port/BUCKET; entries keep their names");
    }
    let patterns: Vec<String> = match (&args.entries, &src) {
        (Some(list), _) => list.split(',').map(|s| s.trim().to_string()).collect(),
        (
            None,
            Place::Server {
                entries: Some(e), ..
            },
        ) => vec![e.clone()],
        _ => vec!["**".to_string()],
    };
    let mut start = args.start;
    match (&src, &dst) {
        (_, Place::Bag(p)) => bail!(
            "{} is a rosbag2 folder: give an MCAP file (out.mcap) to export to",
            p.display()
        ),
        (Place::Mcap(_) | Place::Bag(_), Place::Server { .. }) if args.from_last => bail!(
            "--from-last continues a copy between servers and folders; importing an MCAP again finds what is there already"
        ),
        (Place::Mcap(_) | Place::Bag(_), Place::Server { .. }) => {}
        (Place::Mcap(p) | Place::Bag(p), _) => bail!(
            "{} is read into a server bucket: give http[s]://host:port/BUCKET as the destination",
            p.display()
        ),
        (_, Place::Mcap(out)) => return export_mcap(&src, out, &patterns, &args).await,
        _ => {}
    }
    if args.from_last {
        start = from_last(&src, &dst, &patterns, &args).await?;
        match start {
            Some(t) => eprintln!("continuing from {t} ({})", super::human::format_time(t)),
            None => eprintln!(
                "nothing copied before (or an entry is missing there): copying everything"
            ),
        }
    }
    let checked = check_source(&src)?;
    ensure_destination(&src, &dst, &args).await?;
    let pb = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let pb = bar(None);
        pb.enable_steady_tick(Duration::from_millis(200));
        pb
    };
    let (tx, rx) = queue(CHANNEL, CHANNEL_BYTES);
    let max_record = args.max_record.clone();
    let producer = {
        let (patterns, args_when, stop) = (patterns.clone(), args.when.clone(), args.stop);
        let token = args.src_token.clone();
        tokio::spawn(async move {
            match checked {
                Checked::Server { url, bucket, ca } => read_server(
                    &url,
                    &bucket,
                    token,
                    ca.as_deref(),
                    &patterns,
                    start,
                    stop,
                    args_when.as_deref(),
                    max_record,
                    tx,
                )
                .await
                .map(|n| (n, None)),
                Checked::Folder(entries) => {
                    read_folder(entries, &patterns, start, stop, args_when.as_deref(), tx)
                        .await
                        .map(|n| (n, None))
                }
                Checked::Mcap(input) => {
                    mcap::import(input, patterns, start, stop, args_when, tx).await
                }
            }
        })
    };
    let consumed = match &dst {
        Place::Server {
            url, bucket, ca, ..
        } => {
            let d = Destination {
                url: url.clone(),
                bucket: bucket.clone(),
                token: args.dst_token.clone(),
                bounds: Default::default(),
                api: Default::default(),
                compression: Default::default(),
            };
            write_server(&d, ca.as_deref(), rx, &pb).await
        }
        Place::Folder(dir) => write_folder(dir, rx, &pb).await,
        // Refused above.
        Place::Mcap(p) | Place::Bag(p) => bail!("cannot copy into {}", p.display()),
    };
    let produced = producer.await.context("the reading task failed")?;
    pb.finish_and_clear();
    // A writer error stops the reader (its channel closes): report the writer's first.
    let totals = consumed?;
    let (read, incomplete) = produced?;
    if read == 0 {
        let note = match &src {
            Place::Server { bucket, .. } => {
                no_match_note(&format!("bucket {bucket}"), Some(bucket), &patterns)
            }
            _ => no_match_note(&args.src, None, &patterns),
        };
        eprintln!("{note}");
    }
    eprintln!("{}", summary_line(read, &totals));
    // Between servers and folders (an MCAP file has no attachments).
    if matches!(src, Place::Server { .. } | Place::Folder(_))
        && matches!(dst, Place::Server { .. } | Place::Folder(_))
    {
        let (docs, entries) = attachments::copy(&src, &dst, &patterns, &args).await?;
        if docs > 0 {
            eprintln!(
                "{} of {} copied",
                super::human::count(docs as u64, "attachment", "attachments"),
                super::human::count(entries as u64, "entry", "entries")
            );
        }
    }
    if totals.refused > 0 {
        bail!(
            "{} record(s) were refused by the destination and not copied (the first: {}); the others were",
            totals.refused,
            totals.first_refusal.as_deref().map_or(std::borrow::Cow::Borrowed(""), crate::cli::human::term)
        );
    }
    if totals.conflicts > 0 {
        bail!(
            "{} record(s) differ at the destination (same timestamp, another payload): they were kept there, not overwritten",
            totals.conflicts
        );
    }
    if totals.written + totals.existing != read || totals.read != read {
        bail!(
            "counts do not add up: {read} read, {} handed over, {} confirmed: run the copy again",
            totals.read,
            totals.written + totals.existing
        );
    }
    if let Some(why) = incomplete {
        bail!(why);
    }
    Ok(())
}

/// `tsblob cp SERVER/BUCKET out.mcap`.
async fn export_mcap(
    src: &Place,
    out: &Path,
    patterns: &[String],
    args: &CpArgs,
) -> anyhow::Result<()> {
    let Place::Server {
        url, bucket, ca, ..
    } = src
    else {
        bail!("an MCAP export reads from a server: give http[s]://host:port/BUCKET[/ENTRY-GLOB] as the source");
    };
    if args.from_last {
        bail!("--from-last continues a copy; an MCAP file is written whole: give --start");
    }
    let pb = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let pb = bar(None);
        pb.enable_steady_tick(Duration::from_millis(200));
        pb
    };
    let n = mcap::export(
        url,
        bucket,
        args.src_token.clone(),
        ca.as_deref(),
        patterns,
        args.start,
        args.stop,
        args.when.as_deref(),
        out,
        &pb,
    )
    .await;
    pb.finish_and_clear();
    eprintln!("{} written to {}", size(n?), out.display());
    // Bug (new-user walkthrough): `--entries 'nomatch*'` wrote an empty MCAP file and said
    // only "168 B written".
    let c = Client::with_ca(url, args.src_token.as_deref(), ca.as_deref())
        .context("cannot set up the HTTP client")?;
    if let Ok(v) = c.bucket(bucket).await {
        let compiled = compile_patterns(patterns)?;
        let names = v["entries"].as_array().into_iter().flatten();
        let matched = names
            .filter_map(|e| e["name"].as_str())
            .any(|name| compiled.iter().any(|p| p.matches(name)));
        if !matched {
            let source = format!("bucket {bucket}");
            eprintln!("{}", no_match_note(&source, Some(bucket), patterns));
        }
    }
    Ok(())
}

/// What a copy that found no entry (or no record) says; `bucket` for a server source.
fn no_match_note(source: &str, bucket: Option<&str>, patterns: &[String]) -> String {
    let hint = bucket
        .map(|b| format!("; `tsblob bucket info {b}` lists its entries"))
        .unwrap_or_default();
    format!(
        "note: nothing matched: no record of {source} in the entries {} (and --start/--stop/--when, if given){hint}",
        patterns.join(",")
    )
}

/// `--entries` compiled once (matched in linear time; at most
/// `tsblob_storage::MAX_PATTERN_WILDCARDS` wildcards each).
fn compile_patterns(patterns: &[String]) -> anyhow::Result<Vec<EntryPattern>> {
    patterns
        .iter()
        .map(|p| EntryPattern::compile(p).map_err(|e| anyhow::anyhow!("--entries: {e}")))
        .collect()
}

/// The start of a `--from-last` copy: the oldest of the destination's latest timestamps
/// over the source's matching entries (`None`: one is missing there: start from the beginning).
async fn from_last(
    src: &Place,
    dst: &Place,
    patterns: &[String],
    args: &CpArgs,
) -> anyhow::Result<Option<u64>> {
    let source_entries: Vec<String> = match src {
        Place::Server {
            url, bucket, ca, ..
        } => server_entries(url, bucket, args.src_token.clone(), ca.as_deref())
            .await
            .with_context(|| format!("the source bucket {bucket}"))?
            .into_keys()
            .collect(),
        Place::Folder(dir) => folder_entries(dir)?.into_iter().map(|(e, _)| e).collect(),
        Place::Mcap(p) | Place::Bag(p) => bail!("--from-last does not read {}", p.display()),
    };
    let latest: HashMap<String, u64> = match dst {
        Place::Server {
            url, bucket, ca, ..
        } => server_entries(url, bucket, args.dst_token.clone(), ca.as_deref())
            .await
            .with_context(|| format!("the destination bucket {bucket}"))?
            .into_iter()
            .filter_map(|(e, l)| l.map(|l| (e, l)))
            .collect(),
        Place::Folder(dir) => {
            let mut out = HashMap::new();
            for (e, path) in folder_entries(dir)? {
                if let Some(max) = read_index(&path)?.keys().max() {
                    out.insert(e, *max);
                }
            }
            out
        }
        Place::Mcap(p) | Place::Bag(p) => bail!("--from-last does not read {}", p.display()),
    };
    let mut start: Option<u64> = None;
    let patterns = compile_patterns(patterns)?;
    for e in source_entries
        .iter()
        .filter(|e| patterns.iter().any(|p| p.matches(e)))
    {
        match latest.get(e) {
            Some(l) => start = Some(start.map_or(*l, |s| s.min(*l))),
            None => return Ok(None),
        }
    }
    Ok(start)
}

/// A bucket's entries with their latest timestamps.
async fn server_entries(
    url: &str,
    bucket: &str,
    token: Option<String>,
    ca: Option<&[u8]>,
) -> anyhow::Result<BTreeMap<String, Option<u64>>> {
    let c = Client::with_ca(url, token.as_deref(), ca)?;
    let b = c
        .json(c.request(Method::GET, &format!("/api/v1/b/{}", seg(bucket))))
        .await?;
    Ok(b["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["name"].as_str()?.to_string(), e["latest"].as_u64())))
        .collect())
}

/// The query-string of a multi-entry query of `tsblob cp` (records or an MCAP export).
fn query_params(
    patterns: &[String],
    start: Option<u64>,
    stop: Option<u64>,
    when: Option<&str>,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut params: Vec<(String, String)> = vec![("entries".into(), patterns.join(","))];
    if let Some(s) = start {
        params.push(("start".into(), s.to_string()));
    }
    if let Some(s) = stop {
        params.push(("stop".into(), s.to_string()));
    }
    if let Some(w) = when_param(when, None)? {
        params.push(("when".into(), w));
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bug "cp's summary said 1 records read" (new-user walkthrough).
    #[test]
    fn one_record_was_1_records_read() {
        let t = Totals {
            written: 1,
            conflicts: 1,
            bytes: 2,
            ..Totals::default()
        };
        let line = summary_line(1, &t);
        assert!(
            line.starts_with("1 record read, 1 written, 0 already there, 1 conflict, 0 refused"),
            "{line}"
        );
        assert!(summary_line(2, &Totals::default()).starts_with("2 records read"));
    }
}
