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
//! different payload at the same timestamp, never overwritten) fails the command.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::BytesMut;
use futures_util::StreamExt;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tsblob_storage::{EntryPattern, FeedFilter, Labels};

use super::filters::when_param;
use super::human::{parse_time, size};
use super::records::{bar, extension_of};
use super::{seg, Client};
use crate::batch_client::{post_batch, post_single, Destination, OutRecord, Single};

mod mcap;
use tsblob_proto::framing::{Decoder, Event};

/// A batch is sent when its payloads reach this many bytes ...
const BATCH_BYTES: usize = 8 << 20;
/// ... or this many records.
const BATCH_RECORDS: usize = 2000;
/// Records in flight between the reader and the writer.
const CHANNEL: usize = 64;
/// Attempts per batch before the copy fails (it can be run again).
const ATTEMPTS: u32 = 5;
const INDEX: &str = "index.ndjson";

/// `tsblob cp SRC DST`
#[derive(Debug, clap::Args)]
pub struct CpArgs {
    /// Source: `http[s]://host:port/BUCKET[/ENTRY-GLOB]`, an export folder, an MCAP file
    /// (`*.mcap`) or a rosbag2 folder (holding `metadata.yaml` and its `.mcap` files).
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
    /// A destination bucket that does not exist is created with the source bucket's
    /// settings (quota, blocks, compression, retention, tiering); with this flag, with the
    /// destination server's defaults instead.
    #[arg(long)]
    pub no_source_settings: bool,
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
        Err(e) => return Err(e).context(format!("the destination bucket {bucket}")),
    }
    let settings = match src {
        Place::Server {
            url, bucket: b, ca, ..
        } if !args.no_source_settings => {
            let s = Client::with_ca(url, args.src_token.as_deref(), ca.as_deref())
                .context("cannot set up the HTTP client")?;
            let v = s
                .bucket(b)
                .await
                .with_context(|| format!("reading the settings of the source bucket {b}"))?;
            v["settings"].clone()
        }
        _ => serde_json::json!({}),
    };
    d.create_bucket(bucket, &settings)
        .await
        .with_context(|| format!("creating the destination bucket {bucket} with {settings}"))?;
    eprintln!("created the destination bucket {bucket}: {settings}");
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
    bytes: u64,
}

pub async fn cp(args: CpArgs) -> anyhow::Result<()> {
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
    ensure_destination(&src, &dst, &args).await?;
    let pb = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let pb = bar(None);
        pb.enable_steady_tick(Duration::from_millis(200));
        pb
    };
    let (tx, rx) = mpsc::channel::<OutRecord>(CHANNEL);
    let producer = {
        let (src, patterns, args_when, stop) =
            (src.clone(), patterns.clone(), args.when.clone(), args.stop);
        let token = args.src_token.clone();
        tokio::spawn(async move {
            match src {
                Place::Server {
                    url, bucket, ca, ..
                } => read_server(
                    &url,
                    &bucket,
                    token,
                    ca.as_deref(),
                    &patterns,
                    start,
                    stop,
                    args_when.as_deref(),
                    tx,
                )
                .await
                .map(|n| (n, None)),
                Place::Folder(dir) => {
                    read_folder(&dir, &patterns, start, stop, args_when.as_deref(), tx)
                        .await
                        .map(|n| (n, None))
                }
                Place::Mcap(p) | Place::Bag(p) => {
                    mcap::import(p, patterns, start, stop, args_when, tx).await
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
    eprintln!(
        "{read} records read, {} written, {} already there, {} conflicts, {}",
        totals.written,
        totals.existing,
        totals.conflicts,
        size(totals.bytes)
    );
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
    Ok(())
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
            .await?
            .into_keys()
            .collect(),
        Place::Folder(dir) => folder_entries(dir)?.into_iter().map(|(e, _)| e).collect(),
        Place::Mcap(p) | Place::Bag(p) => bail!("--from-last does not read {}", p.display()),
    };
    let latest: HashMap<String, u64> = match dst {
        Place::Server {
            url, bucket, ca, ..
        } => server_entries(url, bucket, args.dst_token.clone(), ca.as_deref())
            .await?
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

/// Streams a multi-entry query of the source into `tx`; returns the records read.
#[allow(clippy::too_many_arguments)]
async fn read_server(
    url: &str,
    bucket: &str,
    token: Option<String>,
    ca: Option<&[u8]>,
    patterns: &[String],
    start: Option<u64>,
    stop: Option<u64>,
    when: Option<&str>,
    tx: mpsc::Sender<OutRecord>,
) -> anyhow::Result<u64> {
    let c = Client::with_ca(url, token.as_deref(), ca)?;
    let params = query_params(patterns, start, stop, when)?;
    let resp = c
        .send(
            c.request(Method::GET, &format!("/api/v1/b/{}/query", seg(bucket)))
                .query(&params),
        )
        .await?;
    let mut body = resp.bytes_stream();
    let mut dec = Decoder::new();
    let mut buf = BytesMut::new();
    let mut cur: Option<OutRecord> = None;
    let mut want = 0u64;
    let (mut records, mut end) = (0u64, None);
    loop {
        while let Some(ev) = dec.next(&mut buf)? {
            match ev {
                Event::Record(h) => {
                    want = h.payload_len;
                    cur = Some(OutRecord {
                        entry: h.entry.unwrap_or_default(),
                        ts: h.ts,
                        content_type: h.content_type,
                        labels: h.labels,
                        data: Vec::with_capacity(h.payload_len.min(1 << 20) as usize),
                    });
                }
                Event::Data(d) => {
                    if let Some(r) = cur.as_mut() {
                        r.data.extend_from_slice(&d);
                    }
                }
                Event::End(n) => end = Some(n),
                Event::Heartbeat(_) => {}
                Event::Skipped(json) => eprintln!(
                    "the source skipped damaged records (not copied): {}",
                    String::from_utf8_lossy(&json)
                ),
                Event::Error(json) => bail!(
                    "the source stopped the query after {records} records: {}",
                    String::from_utf8_lossy(&json)
                ),
            }
            if cur.as_ref().is_some_and(|r| r.data.len() as u64 == want) {
                if let Some(r) = cur.take() {
                    records += 1;
                    if tx.send(r).await.is_err() {
                        return Ok(records); // the writer stopped; it reports why
                    }
                }
            }
        }
        match body.next().await {
            Some(chunk) => {
                buf.extend_from_slice(&chunk.context("the source's query stream was cut off")?)
            }
            None => break,
        }
    }
    match end {
        Some(n) if n == records => Ok(records),
        _ => bail!("the source's query stream ended without its end frame after {records} records: run the copy again"),
    }
}

/// `(entry, index path)` of every entry of an export folder.
fn folder_entries(root: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let rd =
            std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?;
        for item in rd {
            let item = item?;
            let p = item.path();
            if item.file_type()?.is_dir() {
                stack.push(p);
            } else if item.file_name() == INDEX {
                let rel = dir.strip_prefix(root).unwrap_or(&dir);
                let entry = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                if !entry.is_empty() {
                    out.push((entry, p));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// An export index: ts → line (a torn last line, from an interrupted export, is ignored).
fn read_index(path: &Path) -> anyhow::Result<BTreeMap<u64, IndexLine>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Ok(l) = serde_json::from_str::<IndexLine>(line) {
            out.insert(l.ts, l);
        }
    }
    Ok(out)
}

/// Reads an export folder into `tx`, checking each payload's size and CRC.
async fn read_folder(
    root: &Path,
    patterns: &[String],
    start: Option<u64>,
    stop: Option<u64>,
    when: Option<&str>,
    tx: mpsc::Sender<OutRecord>,
) -> anyhow::Result<u64> {
    let cond = when
        .map(crate::http::when::parse_text)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--when: {}", e.message))?;
    let mut records = 0u64;
    let patterns = compile_patterns(patterns)?;
    for (entry, index) in folder_entries(root)? {
        if !patterns.iter().any(|p| p.matches(&entry)) {
            continue;
        }
        let mut filter = FeedFilter::new(Vec::new(), cond.as_ref());
        let dir = index.parent().map(Path::to_path_buf).unwrap_or_default();
        for (ts, line) in read_index(&index)? {
            if start.is_some_and(|s| ts < s) || stop.is_some_and(|s| ts >= s) {
                continue;
            }
            if !filter.wants(ts, &line.labels) {
                continue;
            }
            if line.file.contains('/') || line.file.starts_with('.') {
                bail!(
                    "{}: line {ts} names the file {:?}, which is not a plain file name in the entry's folder",
                    index.display(),
                    line.file
                );
            }
            let file = dir.join(&line.file);
            let data = tokio::fs::read(&file)
                .await
                .with_context(|| format!("cannot read {}", file.display()))?;
            if data.len() as u64 != line.size || crc32c::crc32c(&data) != line.crc32c {
                bail!(
                    "{} does not match its index line (size {} / CRC {:08x} expected): the export is damaged",
                    file.display(),
                    line.size,
                    line.crc32c
                );
            }
            records += 1;
            let r = OutRecord {
                entry: entry.clone(),
                ts,
                content_type: line.content_type,
                labels: line.labels,
                data,
            };
            if tx.send(r).await.is_err() {
                return Ok(records);
            }
        }
    }
    Ok(records)
}

/// Sends records in batches (one request per entry of a batch), retrying failed attempts.
async fn write_server(
    dst: &Destination,
    ca: Option<&[u8]>,
    mut rx: mpsc::Receiver<OutRecord>,
    pb: &indicatif::ProgressBar,
) -> anyhow::Result<Totals> {
    let http = tsblob_proto::tls::builder(ca)?
        .connect_timeout(Duration::from_secs(10))
        .build()?;
    let mut totals = Totals::default();
    let mut pending: BTreeMap<String, Vec<OutRecord>> = BTreeMap::new();
    let (mut held, mut count) = (0usize, 0usize);
    loop {
        let next = rx.recv().await;
        let done = next.is_none();
        if let Some(r) = next {
            totals.read += 1;
            pb.inc(r.data.len() as u64);
            held += r.data.len();
            count += 1;
            pending.entry(r.entry.clone()).or_default().push(r);
        }
        if done || held >= BATCH_BYTES || count >= BATCH_RECORDS {
            for (entry, recs) in std::mem::take(&mut pending) {
                send_with_retries(&http, dst, &entry, recs, &mut totals).await?;
            }
            (held, count) = (0, 0);
            pb.set_message(format!("{} records, {}", totals.read, size(totals.bytes)));
        }
        if done {
            return Ok(totals);
        }
    }
}

async fn send_with_retries(
    http: &reqwest::Client,
    dst: &Destination,
    entry: &str,
    mut recs: Vec<OutRecord>,
    totals: &mut Totals,
) -> anyhow::Result<()> {
    let mut wait = Duration::from_millis(200);
    let mut attempt = 1;
    while !recs.is_empty() {
        let (back, answer) = post_batch(http, dst, entry, recs, Duration::from_secs(30)).await;
        recs = back;
        let answer = match answer {
            Ok(a) => a,
            Err(e) if attempt < ATTEMPTS => {
                eprintln!("{e}; retrying in {wait:?}");
                tokio::time::sleep(wait).await;
                wait *= 2;
                attempt += 1;
                continue;
            }
            Err(e) => bail!("{e}; run the copy again to continue"),
        };
        let mut results = answer.results.into_iter();
        let mut left = Vec::new();
        let mut refused = None;
        let mut too_large = false;
        // A record too large for a batch went alone: the rest is sent at once.
        let mut moved = false;
        for r in recs {
            if too_large {
                // Not read by the destination after the record it found too large.
                left.push(r);
                continue;
            }
            match results.next().map(|x| (x.status, x.error)) {
                Some((413, Some(e))) if e.code == "record_too_large" => {
                    // Over the destination's --max-batch-record: sent alone.
                    too_large = true;
                    let outcome = send_alone(http, dst, entry, &r).await;
                    moved = !matches!(outcome, Single::Retry(_));
                    tally(outcome, &r, entry, totals, &mut refused, &mut left);
                }
                Some((201, _)) => tally(Single::Stored, &r, entry, totals, &mut refused, &mut left),
                Some((200, _)) => {
                    tally(Single::Existing, &r, entry, totals, &mut refused, &mut left)
                }
                Some((409, e)) => {
                    let m = e.map_or_else(|| format!("{entry} {}", r.ts), |e| e.message);
                    tally(
                        Single::Conflict(m),
                        &r,
                        entry,
                        totals,
                        &mut refused,
                        &mut left,
                    )
                }
                Some((s, _)) if s == 429 || s >= 500 => left.push(r),
                Some((s, e)) => {
                    let m = format!(
                        "{dst}/{entry} refused record {} ({s}): {}",
                        r.ts,
                        e.map_or_else(String::new, |e| e.message)
                    );
                    tally(
                        Single::Refused(m),
                        &r,
                        entry,
                        totals,
                        &mut refused,
                        &mut left,
                    )
                }
                None => left.push(r),
            }
        }
        if let Some(why) = refused {
            bail!(why);
        }
        recs = left;
        if moved || recs.is_empty() {
            continue; // the rest goes at once (a record too large is not a failure)
        }
        if attempt >= ATTEMPTS {
            bail!("{dst}/{entry}: {} record(s) still not stored after {ATTEMPTS} attempts; run the copy again", recs.len())
        }
        attempt += 1;
        tokio::time::sleep(wait).await;
        wait *= 2;
    }
    Ok(())
}

/// Sends one record with a single-record write (`if_exists=compare`): for a record over
/// the destination's `--max-batch-record`.
async fn send_alone(
    http: &reqwest::Client,
    dst: &Destination,
    entry: &str,
    r: &OutRecord,
) -> Single {
    let meta = tsblob_storage::RecordMeta {
        ts: r.ts,
        size: r.data.len() as u64,
        content_type: r.content_type.clone(),
        labels: r.labels.clone(),
    };
    post_single(
        http,
        dst,
        entry,
        &meta,
        r.data.clone().into(),
        Duration::from_secs(30),
    )
    .await
}

/// Counts what the destination did with record `r`.
fn tally(
    outcome: Single,
    r: &OutRecord,
    entry: &str,
    totals: &mut Totals,
    refused: &mut Option<String>,
    left: &mut Vec<OutRecord>,
) {
    match outcome {
        Single::Stored => {
            totals.written += 1;
            totals.bytes += r.data.len() as u64;
        }
        Single::Existing => totals.existing += 1,
        Single::Conflict(m) => {
            totals.conflicts += 1;
            eprintln!("conflict: {entry} {}: {m}", r.ts);
        }
        Single::Refused(m) => {
            refused.get_or_insert(m);
        }
        Single::Retry(m) => {
            eprintln!("{m}; retrying");
            left.push(r.clone());
        }
    }
}

/// Writes records into an export folder: payload file first, then its index line (so a
/// line always names a complete file); a timestamp already in the index with the same CRC
/// is counted as there, another CRC is a conflict.
async fn write_folder(
    root: &Path,
    mut rx: mpsc::Receiver<OutRecord>,
    pb: &indicatif::ProgressBar,
) -> anyhow::Result<Totals> {
    tokio::fs::create_dir_all(root)
        .await
        .with_context(|| format!("cannot create {}", root.display()))?;
    let mut totals = Totals::default();
    let mut indexes: HashMap<String, (BTreeMap<u64, IndexLine>, tokio::fs::File)> = HashMap::new();
    while let Some(r) = rx.recv().await {
        totals.read += 1;
        pb.inc(r.data.len() as u64);
        // Entry names come from the server: checked here too, so that a hostile or broken
        // server cannot make the export write outside its folder (`../x`, `/etc/x`).
        tsblob_proto::names::validate_entry_name(&r.entry).map_err(|e| {
            anyhow::anyhow!("the server sent a record of an entry this export cannot hold: {e}")
        })?;
        let dir = root.join(&r.entry);
        if !indexes.contains_key(&r.entry) {
            tokio::fs::create_dir_all(&dir)
                .await
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let path = dir.join(INDEX);
            let known = read_index(&path)?;
            let mut file = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .await
                .with_context(|| format!("cannot open {}", path.display()))?;
            // A torn last line (an interrupted export) is ended first, or the next line
            // would be glued to it and lost too.
            let ends_torn =
                std::fs::read(&path).is_ok_and(|b| b.last().is_some_and(|c| *c != b'\n'));
            if ends_torn {
                file.write_all(b"\n").await?;
            }
            indexes.insert(r.entry.clone(), (known, file));
        }
        let Some((known, index)) = indexes.get_mut(&r.entry) else {
            continue;
        };
        let crc = crc32c::crc32c(&r.data);
        if let Some(l) = known.get(&r.ts) {
            if l.crc32c == crc && l.size == r.data.len() as u64 {
                totals.existing += 1;
            } else {
                totals.conflicts += 1;
                eprintln!(
                    "conflict: {}/{} {} differs from the exported file",
                    root.display(),
                    r.entry,
                    r.ts
                );
            }
            continue;
        }
        let name = format!("{:020}{}", r.ts, extension_of(&r.content_type));
        let file = dir.join(&name);
        tokio::fs::write(&file, &r.data)
            .await
            .with_context(|| format!("cannot write {}", file.display()))?;
        let line = IndexLine {
            ts: r.ts,
            file: name,
            content_type: r.content_type,
            labels: r.labels,
            size: r.data.len() as u64,
            crc32c: crc,
        };
        let mut text = serde_json::to_vec(&line)?;
        text.push(b'\n');
        index.write_all(&text).await?;
        totals.written += 1;
        totals.bytes += line.size;
        known.insert(line.ts, line);
        pb.set_message(format!("{} records, {}", totals.read, size(totals.bytes)));
    }
    for (_, (_, f)) in indexes.iter_mut() {
        f.sync_all().await?;
    }
    Ok(totals)
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
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Bug "export escape": `tsblob cp` into a folder joined each record's entry name, as
    /// the server sent it, to the folder: a hostile server (or anyone between it and an
    /// http:// client) naming an entry `../outside` or `/abs` had files written outside it.
    #[tokio::test]
    async fn export_wrote_outside_its_folder_for_a_hostile_entry_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("export");
        for entry in ["../outside", "/abs/x", "a/../../outside"] {
            let (tx, rx) = mpsc::channel(1);
            tx.send(OutRecord {
                entry: entry.to_string(),
                ts: 1,
                content_type: String::new(),
                labels: Labels::new(),
                data: b"x".to_vec(),
            })
            .await
            .unwrap();
            drop(tx);
            let pb = indicatif::ProgressBar::hidden();
            let e = write_folder(&root, rx, &pb).await.unwrap_err().to_string();
            assert!(e.contains("cannot hold"), "{entry}: {e}");
        }
        let mut outside: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        outside.sort();
        assert_eq!(
            outside,
            ["export"],
            "files were written outside the export folder"
        );
        assert!(!std::path::Path::new("/abs").exists());
    }
}
