//! Record transfers of the CLI: `put` streams a file up, `get` streams a record down,
//! `query` parses the frame stream incrementally (files into a folder, or payloads to
//! stdout), `rm` removes. Long transfers show progress bars on stderr.

use std::path::PathBuf;

use anyhow::{bail, Context};
use bytes::BytesMut;
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::Method;
use tokio::io::AsyncWriteExt;

use super::client::{check, connect, connect_reading, ClientArgs};
use super::filters::{parse_label, FilterArgs};
use super::human::{count, format_time, parse_time, size, term};
use super::usage::Usage;
use crate::content_type::{extension_of, guess_content_type};
use tsblob_proto::client::entry_path;
use tsblob_proto::framing::{Event, FrameHead};

pub(crate) fn bar(len: Option<u64>) -> ProgressBar {
    match len {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {bytes} {bytes_per_sec} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    }
}

/// A download that ended before its end: a record shorter than announced, a query stream
/// without its end frame. Exit code 7 (`app::exit::NETWORK`, "the answer cut off"). Bug
/// "cut-off download exits 1" (hostile probe of 2026-11-28): `query` exited 1 for it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CutOff(pub String);

/// An error frame that ended a query's stream (`{"error": {"code", "message"}}`). Its
/// `busy` (the server stopping, a stream refused for want of room) exits 6
/// (`app::exit::SERVER`), and a tail reopens after it. Bug (ops probe of 2026-11-29): a
/// tail ended with exit 1 at every server restart, though the frame says "follow again".
#[derive(Debug, thiserror::Error)]
#[error("the server stopped the query after {records}: {text}")]
pub struct StreamStopped {
    pub code: String,
    records: String,
    text: String,
}

impl StreamStopped {
    /// Whether the server asks to come back later (`busy`, `too_many_*`).
    pub fn busy(&self) -> bool {
        self.code == "busy" || self.code.starts_with("too_many_")
    }
}

/// The default of `--max-record`.
pub(crate) const MAX_RECORD: u64 = 1 << 30;

/// `--max-record` of the commands reading records from a query stream (`query`, `cp`).
#[derive(Debug, Clone, clap::Args)]
pub struct MaxRecordArgs {
    /// The largest record the server may send (bytes, e.g. 1073741824): a larger one fails
    /// the command at its head, before its payload is read (`cp` holds a record whole in
    /// memory, `query` writes it out).
    #[arg(long, value_name = "BYTES", default_value_t = MAX_RECORD)]
    pub max_record: u64,
}

impl MaxRecordArgs {
    /// Refuses a record frame announcing more than `--max-record` bytes. Bug "query has no
    /// record size limit" (hostile probe of 2026-11-28): a frame announcing 2^63 bytes made
    /// `query --out` write until the disk was full.
    pub(crate) fn check(&self, h: &FrameHead) -> anyhow::Result<()> {
        if h.payload_len > self.max_record {
            bail!(
                "the server sent a record of {} bytes ({} at {}), more than --max-record {}: give a larger --max-record to read it",
                h.payload_len,
                term(h.entry.as_deref().unwrap_or("")),
                h.ts,
                self.max_record
            );
        }
        Ok(())
    }
}

/// The query route of one entry, or the bucket-level one with `entries=` added to `params`.
fn query_path(
    bucket: &str,
    entry: Option<&str>,
    entries: Option<&str>,
    params: &mut Vec<(String, String)>,
) -> String {
    match (entry, entries) {
        (Some(e), _) => format!("{}/query", entry_path(bucket, e)),
        (None, list) => {
            params.push(("entries".into(), list.unwrap_or("**").to_string()));
            format!("{}/query", tsblob_proto::client::bucket_path(bucket))
        }
    }
}

/// A `query` or `tail` that names no entry: a usage error saying both ways to name them.
/// Bug (newcomer walkthrough of 2026-11-30): clap's "the following required arguments were
/// not provided: <ENTRY>" did not mention --entries.
fn name_the_entries(command: &str, bucket: &str, named: bool) -> anyhow::Result<()> {
    if named {
        return Ok(());
    }
    Err(Usage(format!(
        "say which entry to {command}: `tsblob {command} {} ENTRY`, or several with --entries LIST (names and globs, comma-separated: 'cams/*,imu'; `**` for every entry)",
        term(bucket)
    ))
    .into())
}

/// `tsblob put BUCKET ENTRY FILE`
#[derive(Debug, clap::Args)]
pub struct PutArgs {
    pub bucket: String,
    pub entry: String,
    /// The file to store, or `-` for standard input (read whole before sending).
    pub file: PathBuf,
    /// Timestamp (µs, RFC 3339, now, now-5m); default: the server's "now".
    #[arg(long, value_parser = parse_time)]
    pub ts: Option<u64>,
    /// A label key=value (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Default: from the file's extension (a maintained MIME table plus robotics formats:
    /// .npy, .mcap, .pcd, .ply, .parquet...), else application/octet-stream (stdin too).
    #[arg(long)]
    pub content_type: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn put(args: PutArgs) -> anyhow::Result<()> {
    let c = connect(&args.client)?;
    if args.file.as_os_str() == "-" {
        let mut data = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::stdin(), &mut data)
            .await
            .context("cannot read standard input")?;
        let len = data.len() as u64;
        let ct = args
            .content_type
            .clone()
            .unwrap_or_else(|| "application/octet-stream".to_string());
        let req = c
            .write_request(&args.bucket, &args.entry, args.ts, &ct, &args.labels)
            .body(data);
        let v = c.json(req).await?;
        let ts = v["ts"].as_u64().unwrap_or(0);
        println!(
            "{}/{} @ {ts} ({}) {}",
            args.bucket,
            args.entry,
            format_time(ts),
            size(len)
        );
        return Ok(());
    }
    let file = tokio::fs::File::open(&args.file)
        .await
        .with_context(|| format!("cannot open {}", args.file.display()))?;
    let len = file.metadata().await?.len();
    let pb = bar(Some(len));
    let progress = pb.clone();
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 << 10).inspect(move |r| {
        if let Ok(b) = r {
            progress.inc(b.len() as u64);
        }
    });
    let ct = args
        .content_type
        .clone()
        .unwrap_or_else(|| guess_content_type(&args.file));
    let req = c
        .write_request(&args.bucket, &args.entry, args.ts, &ct, &args.labels)
        .header(reqwest::header::CONTENT_LENGTH, len)
        .body(reqwest::Body::wrap_stream(stream));
    let v = c.json(req).await;
    pb.finish_and_clear();
    let v = v?;
    let ts = v["ts"].as_u64().unwrap_or(0);
    println!(
        "{}/{} @ {ts} ({}) {}",
        args.bucket,
        args.entry,
        format_time(ts),
        size(len)
    );
    Ok(())
}

/// `tsblob get BUCKET ENTRY`
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    pub bucket: String,
    pub entry: String,
    /// Timestamp of the record; default: the latest.
    #[arg(long, value_parser = parse_time)]
    pub ts: Option<u64>,
    /// Write to this file instead of stdout (as <file>.part until complete: a download cut
    /// off leaves no file); `-` is stdout.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn get(mut args: GetArgs) -> anyhow::Result<()> {
    // Bug (ops probe of 2026-11-29): `get -o -` wrote a file named `-`.
    if args.out.as_deref() == Some(std::path::Path::new("-")) {
        args.out = None;
    }
    let c = connect(&args.client)?;
    let resp = c.read(&args.bucket, &args.entry, args.ts).await?;
    let len = resp.content_length();
    let ts = tsblob_proto::client::record_ts(&resp).unwrap_or(0);
    // With -o the record goes to `<file>.part`, renamed to the file once complete (bug
    // "cut-off download left as a normal file"; hostile probe of 2026-11-28).
    let (mut file, pb) = match &args.out {
        Some(p) => (
            Some(RecordFile::create(p.clone(), len.unwrap_or(0)).await?),
            bar(len),
        ),
        None => (None, ProgressBar::hidden()),
    };
    let mut stdout = tokio::io::stdout();
    let mut body = resp.bytes_stream();
    let copied = async {
        let mut got = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.context("the download was cut off")?;
            got += chunk.len() as u64;
            pb.inc(chunk.len() as u64);
            match file.as_mut() {
                Some(f) => f
                    .file
                    .write_all(&chunk)
                    .await
                    .with_context(|| format!("cannot write {}", f.part.display()))?,
                None => stdout
                    .write_all(&chunk)
                    .await
                    .map_err(super::output::stdout_error)?,
            }
        }
        stdout.flush().await.map_err(super::output::stdout_error)?;
        if let Some(n) = len {
            if got != n {
                return Err(CutOff(format!(
                    "the server announced {n} bytes but sent {got}: the record was not read completely"
                ))
                .into());
            }
        }
        anyhow::Ok(got)
    }
    .await;
    pb.finish_and_clear();
    let got = match (copied, file) {
        (Ok(got), Some(f)) => {
            f.finish().await?;
            got
        }
        (Ok(got), None) => got,
        (Err(e), f) => {
            if let Some(f) = f {
                f.discard().await;
            }
            return Err(e);
        }
    };
    eprintln!(
        "{}/{} @ {ts} ({}) {}",
        args.bucket,
        args.entry,
        format_time(ts),
        size(got)
    );
    Ok(())
}

/// `tsblob query BUCKET ENTRY --start --stop`
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    pub bucket: String,
    /// The entry (or --entries for several).
    #[arg(conflicts_with = "entries")]
    pub entry: Option<String>,
    /// Several entries merged in timestamp order: names and globs, comma-separated
    /// ('cams/*,imu'; `*` within a segment, `**` across). Records are listed with their
    /// entry, and --out writes <folder>/<entry>/<ts><ext>.
    #[arg(long, value_name = "LIST")]
    pub entries: Option<String>,
    /// Inclusive start (µs, RFC 3339, now-1h); default: the oldest.
    #[arg(long, value_parser = parse_time)]
    pub start: Option<u64>,
    /// Exclusive stop; default: after the latest.
    #[arg(long, value_parser = parse_time)]
    pub stop: Option<u64>,
    #[arg(long)]
    pub limit: Option<u64>,
    /// Newest first.
    #[arg(long)]
    pub desc: bool,
    #[command(flatten)]
    pub filters: FilterArgs,
    /// Write one file per record (<ts><ext>) into this folder instead of payloads to stdout
    /// (each as <ts><ext>.part until complete: a record cut off leaves no file).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Print one metadata line per record instead of payloads (no payload is sent; with
    /// --out the payloads are written and listed).
    #[arg(long)]
    pub list: bool,
    /// Like --list, as JSON lines: {"ts", "size", "content_type", "labels"}.
    #[arg(long)]
    pub json: bool,
    /// At most one record per this step (after --when): "1s", "100ms", "5m". The first
    /// record starts the clock and is not kept (as in ReductStore): records at 1.0, 1.5,
    /// 2.0 and 5.0 s with --each-t 1s give those at 2.0 and 5.0 s.
    #[arg(long, value_name = "DURATION")]
    pub each_t: Option<String>,
    #[command(flatten)]
    pub max_record: MaxRecordArgs,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn query(args: QueryArgs) -> anyhow::Result<()> {
    name_the_entries(
        "query",
        &args.bucket,
        args.entry.is_some() || args.entries.is_some(),
    )?;
    let c = connect(&args.client)?;
    let mut params: Vec<(String, String)> = Vec::new();
    if let Some(s) = args.start {
        params.push(("start".into(), s.to_string()));
    }
    if let Some(s) = args.stop {
        params.push(("stop".into(), s.to_string()));
    }
    if let Some(l) = args.limit {
        params.push(("limit".into(), l.to_string()));
    }
    if args.desc {
        params.push(("desc".into(), "true".into()));
    }
    params.extend(args.filters.params(args.each_t.as_deref())?);
    let path = query_path(
        &args.bucket,
        args.entry.as_deref(),
        args.entries.as_deref(),
        &mut params,
    );
    if (args.list || args.json) && args.out.is_none() {
        params.push(("meta".into(), "true".into()));
        let resp = c.send(c.request(Method::GET, &path).query(&params)).await?;
        return list_meta(resp, args.json).await;
    }
    let mut stream = c.query(&path, &params).await?;
    if let Some(dir) = &args.out {
        tokio::fs::create_dir_all(dir)
            .await
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let pb = bar(None);
    let mut file: Option<RecordFile> = None;
    let read = read_frames(&args, &mut stream, &pb, &mut file).await;
    pb.finish_and_clear();
    if let Some(f) = file.take() {
        // Cut off (or refused) in the middle of a record: no partial file stays.
        f.discard().await;
    }
    let (records, bytes) = read?;
    eprintln!("{}", summary(records, bytes));
    Ok(())
}

/// Reads a query's frames: payloads into files (`--out`, the record open in `file`) or to
/// stdout; (records, payload bytes) once the end frame came.
async fn read_frames(
    args: &QueryArgs,
    stream: &mut tsblob_proto::client::QueryStream,
    pb: &ProgressBar,
    file: &mut Option<RecordFile>,
) -> anyhow::Result<(u64, u64)> {
    let mut stdout = tokio::io::stdout();
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut end = None;
    while let Some(ev) = stream
        .next_event()
        .await
        .context("the query stream was cut off")?
    {
        match ev {
            Event::Record(h) => {
                args.max_record.check(&h)?;
                records += 1;
                pb.set_message(count(records, "record", "records"));
                *file = open_record_file(args, &h).await?;
                if file.as_ref().is_some_and(|f| f.left == 0) {
                    if let Some(f) = file.take() {
                        f.finish().await?;
                    }
                }
            }
            Event::Data(d) => {
                bytes += d.len() as u64;
                pb.inc(d.len() as u64);
                match file.as_mut() {
                    Some(f) => {
                        f.file
                            .write_all(&d)
                            .await
                            .with_context(|| format!("cannot write {}", f.part.display()))?;
                        f.left = f.left.saturating_sub(d.len() as u64);
                        if f.left == 0 {
                            if let Some(f) = file.take() {
                                f.finish().await?;
                            }
                        }
                    }
                    None if !args.list => stdout
                        .write_all(&d)
                        .await
                        .map_err(super::output::stdout_error)?,
                    None => {}
                }
            }
            Event::End(n) => end = Some(n),
            Event::Heartbeat(_) => {}
            Event::Skipped(json) => eprintln!(
                "the server skipped damaged records: {}",
                term(&String::from_utf8_lossy(&json))
            ),
            Event::Error(json) => {
                bail!(
                    "the server stopped the query after {}: {}",
                    count(records, "record", "records"),
                    term(&String::from_utf8_lossy(&json))
                );
            }
        }
    }
    stdout.flush().await.map_err(super::output::stdout_error)?;
    match end {
        Some(n) if n == records => Ok((records, bytes)),
        Some(n) => bail!(
            "the query stream announced {n} records in its end frame but sent {records}: the result is not to be trusted"
        ),
        None if file.is_some() => Err(CutOff(format!(
            "the query stream was cut off in the middle of record {records}: the result is incomplete (the partial record was not kept)"
        ))
        .into()),
        None => Err(CutOff(format!(
            "the query stream ended without its end frame after {}: the result is incomplete",
            count(records, "record", "records")
        ))
        .into()),
    }
}

/// A record being written by `query --out`: into `<ts><ext>.part`, renamed to `<ts><ext>`
/// once its last byte came. Bug "cut-off download left as a normal file" (hostile probe of
/// 2026-11-28): a record cut off in the middle stayed as a normal-looking, shorter file.
/// A path that exists and is not a regular file (`get -o /dev/null`, a FIFO) is written
/// directly.
struct RecordFile {
    file: tokio::fs::File,
    /// The file written: `<path>.part`, or `path` itself when written directly.
    part: PathBuf,
    path: PathBuf,
    /// Payload bytes still to come.
    left: u64,
}

impl RecordFile {
    async fn create(path: PathBuf, len: u64) -> anyhow::Result<RecordFile> {
        let direct = tokio::fs::metadata(&path).await.is_ok_and(|m| !m.is_file());
        let part = if direct {
            path.clone()
        } else {
            let mut part = path.clone().into_os_string();
            part.push(".part");
            PathBuf::from(part)
        };
        let file = tokio::fs::File::create(&part)
            .await
            .with_context(|| format!("cannot create {}", part.display()))?;
        Ok(RecordFile {
            file,
            part,
            path,
            left: len,
        })
    }

    /// The record is complete: flushed and renamed into place.
    async fn finish(mut self) -> anyhow::Result<()> {
        let done = async {
            self.file.flush().await?;
            if self.part != self.path {
                tokio::fs::rename(&self.part, &self.path).await?;
            }
            std::io::Result::Ok(())
        }
        .await;
        if let Err(e) = done {
            let path = self.path.display().to_string();
            self.discard().await;
            return Err(anyhow::Error::from(e).context(format!("cannot write {path}")));
        }
        Ok(())
    }

    /// The record will not be complete: its `.part` file is removed.
    async fn discard(self) {
        drop(self.file);
        if self.part != self.path {
            let _ = tokio::fs::remove_file(&self.part).await;
        }
    }
}

/// Prints the NDJSON lines of a `meta=true` query, as they are or as text lines.
/// Prints one NDJSON metadata line of a query (as it is with `json`, else as a readable
/// line); returns the record's timestamp and size, or `None` for a live tail's heartbeat
/// line.
fn print_meta_line(line: &[u8], json: bool, records: u64) -> anyhow::Result<Option<(u64, u64)>> {
    let v: serde_json::Value = serde_json::from_slice(line).with_context(|| {
        format!(
            "the server sent a line that is not JSON: {}",
            term(&String::from_utf8_lossy(line))
        )
    })?;
    if v.get("error").is_some() {
        return Err(StreamStopped {
            code: v["error"]["code"].as_str().unwrap_or_default().to_string(),
            records: count(records, "record", "records"),
            text: super::human::json_text(&v),
        }
        .into());
    }
    if v.get("heartbeat").is_some() && v.get("ts").is_none() {
        return Ok(None);
    }
    let ts = v["ts"].as_u64().unwrap_or(0);
    let size_of = v["size"].as_u64().unwrap_or(0);
    if json {
        println!("{v}");
        return Ok(Some((ts, size_of)));
    }
    let labels: Vec<String> = v["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, x)| format!("{}={}", term(k), super::human::field(x)))
                .collect()
        })
        .unwrap_or_default();
    let entry = v["entry"]
        .as_str()
        .map(|e| format!("{} ", term(e)))
        .unwrap_or_default();
    println!(
        "{entry}{} {} {} {} {}",
        ts,
        format_time(ts),
        size(size_of),
        super::human::field(&v["content_type"]),
        labels.join(",")
    );
    Ok(Some((ts, size_of)))
}

/// Arguments of `tsblob tail`.
#[derive(clap::Args)]
pub struct TailArgs {
    pub bucket: String,
    /// The entry (or --entries for several).
    #[arg(conflicts_with = "entries")]
    pub entry: Option<String>,
    /// Several entries merged in timestamp order: names and globs, comma-separated.
    #[arg(long, value_name = "LIST")]
    pub entries: Option<String>,
    /// Start here (µs, RFC 3339, now-1h); default: the oldest record.
    #[arg(long, value_parser = parse_time)]
    pub start: Option<u64>,
    #[command(flatten)]
    pub filters: FilterArgs,
    /// Print JSON lines: {"ts", "size", "content_type", "labels"}.
    #[arg(long)]
    pub json: bool,
    /// Seconds between the server's heartbeats while nothing arrives.
    #[arg(long, default_value_t = 15)]
    pub heartbeat: u64,
    /// Deliver a record only once the server's clock is this many ms past its timestamp.
    #[arg(long)]
    pub settle_ms: Option<u64>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The error of a tail the server refused; one of an entry that does not exist says that a
/// tail does not wait for it (bug "tail of an entry that does not exist yet exits 3 with
/// only entry_not_found", new-user walkthrough B.21: the server's tail follows existing
/// entries only).
fn tail_refused(args: &TailArgs, e: tsblob_proto::client::ClientError) -> anyhow::Error {
    use tsblob_proto::client::ClientError;
    let missing = matches!(&e, ClientError::Status { code, .. } if code == "entry_not_found");
    match &args.entry {
        Some(entry) if missing => anyhow::Error::new(e).context(format!(
            "cannot follow {}/{}: a tail follows an entry that exists, it does not wait for one to be made; start it once the entry has its first record",
            term(&args.bucket),
            term(entry)
        )),
        _ => e.into(),
    }
}

/// Where a tail stands, to reopen it without missing or repeating a record: the last
/// timestamp printed and the entries printed at it. A multi-entry tail holds several
/// records with one timestamp (one per entry), so it reopens *at* that timestamp and skips
/// those entries; reopening from the last timestamp + 1 lost the others (issue 27).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct TailCursor {
    last: Option<u64>,
    seen: std::collections::HashSet<Option<String>>,
}

/// The most entries a [`TailCursor`] remembers at one timestamp. Bug "seen list quadratic":
/// each record at the last timestamp was looked up in a list of all the earlier ones.
const MAX_SEEN: usize = 100_000;

impl TailCursor {
    /// Notes a record about to be printed; false for one printed before a reconnection.
    fn take(&mut self, ts: u64, entry: Option<&str>) -> bool {
        let entry = entry.map(str::to_string);
        if self.last == Some(ts) {
            if self.seen.contains(&entry) {
                return false;
            }
            // Past the cap an entry is not remembered: printed twice at worst after a
            // reconnection, never lost.
            if self.seen.len() < MAX_SEEN {
                self.seen.insert(entry);
            }
        } else {
            self.last = Some(ts);
            self.seen.clear();
            self.seen.insert(entry);
        }
        true
    }

    /// The `start` of the reopened tail.
    fn start(&self, first: Option<u64>) -> Option<u64> {
        self.last.or(first)
    }
}

/// The timestamp and entry of a metadata line (`None` for a heartbeat or an error line).
fn line_key(line: &[u8]) -> Option<(u64, Option<String>)> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let ts = v.get("ts")?.as_u64()?;
    Some((
        ts,
        v.get("entry").and_then(|e| e.as_str()).map(String::from),
    ))
}

/// The longest NDJSON line a query stream may send (a server's lines are at most ~1 MiB of
/// labels).
const MAX_LINE: usize = 2 << 20;

/// Splits a stream's bytes into lines, searching only the bytes that arrived since the last
/// search. Bug "line buffer unbounded": a server sending no newline grew the buffer without
/// end, rescanning all of it at each chunk.
#[derive(Default)]
struct Lines {
    buf: BytesMut,
    /// Bytes of `buf` already searched for a newline.
    scanned: usize,
}

impl Lines {
    fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole line (without its newline); an error once a line passes [`MAX_LINE`].
    fn next_line(&mut self) -> anyhow::Result<Option<BytesMut>> {
        match self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                let mut line = self.buf.split_to(self.scanned + i + 1);
                self.scanned = 0;
                line.truncate(line.len() - 1);
                Ok(Some(line))
            }
            None => {
                self.scanned = self.buf.len();
                if self.buf.len() > MAX_LINE {
                    bail!(
                        "the server sent a line longer than {} without a newline: not a tsblob query stream",
                        size(MAX_LINE as u64)
                    );
                }
                Ok(None)
            }
        }
    }
}

/// `tsblob tail`: one line per record, from --start on, then each new record as it is
/// written, until interrupted. A dropped connection is reopened from the last timestamp,
/// skipping the records already printed at it (five times in a row at most, with a
/// growing pause).
pub async fn tail(args: TailArgs) -> anyhow::Result<()> {
    // Between records a tail prints nothing (heartbeats only): `tail … | head -1` would
    // run on until the next record's line failed to print. Bug (newcomer walkthrough of
    // 2026-11-30): it kept running after `head` had exited.
    tokio::select! {
        r = follow(args) => r,
        () = super::output::closed() => Err(super::output::StdoutClosed.into()),
    }
}

async fn follow(args: TailArgs) -> anyhow::Result<()> {
    name_the_entries(
        "tail",
        &args.bucket,
        args.entry.is_some() || args.entries.is_some(),
    )?;
    // Heartbeats come every --heartbeat seconds while idle: wait well past that.
    let idle = std::time::Duration::from_secs(args.heartbeat.saturating_mul(2).saturating_add(10));
    let c = connect_reading(&args.client, Some(idle))?;
    let mut entries = Vec::new();
    let path = query_path(
        &args.bucket,
        args.entry.as_deref(),
        args.entries.as_deref(),
        &mut entries,
    );
    let filters = args.filters.params(None)?;
    let mut cursor = TailCursor::default();
    let (mut records, mut failures) = (0u64, 0u32);
    loop {
        let mut params: Vec<(String, String)> = vec![
            ("follow".into(), "true".into()),
            ("meta".into(), "true".into()),
            ("heartbeat".into(), args.heartbeat.to_string()),
        ];
        params.extend(entries.iter().cloned());
        if let Some(s) = cursor.start(args.start) {
            params.push(("start".into(), s.to_string()));
        }
        params.extend(filters.iter().cloned());
        if let Some(s) = args.settle_ms {
            params.push(("settle_ms".into(), s.to_string()));
        }
        let cut = match c.request(Method::GET, &path).query(&params).send().await {
            Err(e) => anyhow::Error::from(e).context("cannot reach the server"),
            Ok(resp) => {
                // An error status (unknown entry, bad condition...): no point in retrying.
                let resp = check(resp).await.map_err(|e| tail_refused(&args, e))?;
                let mut body = resp.bytes_stream();
                let mut lines = Lines::default();
                let cut = 'read: loop {
                    while let Some(line) = lines.next_line()? {
                        let line = &line[..];
                        if line.is_empty() {
                            continue;
                        }
                        if let Some((ts, entry)) = line_key(line) {
                            if !cursor.take(ts, entry.as_deref()) {
                                continue; // printed before the connection dropped
                            }
                        }
                        match print_meta_line(line, args.json, records) {
                            Ok(Some(_)) => {
                                records += 1;
                                failures = 0;
                            }
                            Ok(None) => {}
                            // The server stopping ("follow again once it is back"): reopened
                            // as a dropped connection is.
                            Err(e) if is_busy(&e) => break 'read e,
                            Err(e) => return Err(e),
                        }
                    }
                    match body.next().await {
                        Some(Ok(chunk)) => lines.push(&chunk),
                        Some(Err(e)) => break anyhow::Error::from(e),
                        // The stream ended: its $limit was reached.
                        None => return Ok(()),
                    }
                };
                cut
            }
        };
        failures += 1;
        if failures > 5 {
            return Err(cut.context("the tail's connection failed 5 times in a row"));
        }
        eprintln!(
            "tail: {cut:#}; reconnecting from {:?}",
            cursor.start(args.start)
        );
        tokio::time::sleep(std::time::Duration::from_millis(250 << failures)).await;
    }
}

/// Whether `e` is an error frame asking to come back later ([`StreamStopped::busy`]).
pub(crate) fn is_busy(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<StreamStopped>()
            .is_some_and(StreamStopped::busy)
    })
}

async fn list_meta(resp: reqwest::Response, json: bool) -> anyhow::Result<()> {
    let mut body = resp.bytes_stream();
    let mut lines = Lines::default();
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut print = |line: &[u8]| -> anyhow::Result<()> {
        if let Some((_, size)) = print_meta_line(line, json, records)? {
            records += 1;
            bytes = bytes.saturating_add(size);
        }
        Ok(())
    };
    loop {
        while let Some(line) = lines.next_line()? {
            if !line.is_empty() {
                print(&line)?;
            }
        }
        match body.next().await {
            Some(chunk) => lines.push(&chunk.context("the query stream was cut off")?),
            None => break,
        }
    }
    if !lines.buf.is_empty() {
        print(&lines.buf)?;
    }
    eprintln!("{}", summary(records, bytes));
    Ok(())
}

/// The last line of a query on stderr: `3 records, 31 B` (with --list too: bug "README's
/// `3 records, 31 B` is not what --list prints", new-user walkthrough B.20).
fn summary(records: u64, bytes: u64) -> String {
    format!("{}, {}", count(records, "record", "records"), size(bytes))
}

async fn open_record_file(args: &QueryArgs, h: &FrameHead) -> anyhow::Result<Option<RecordFile>> {
    let labels: Vec<String> = h
        .labels
        .iter()
        .map(|(k, v)| format!("{}={}", term(k), term(v)))
        .collect();
    let entry = h
        .entry
        .as_deref()
        .map(|e| format!("{} ", term(e)))
        .unwrap_or_default();
    let line = format!(
        "{entry}{} {} {} {} {}",
        h.ts,
        format_time(h.ts),
        size(h.payload_len),
        term(&h.content_type),
        labels.join(",")
    );
    if args.list {
        if args.out.is_some() {
            // A side channel of the download: its reader gone (`--list | head -1`) ends the
            // listing, not the download (review of 2026-11-30: the closed-stdout exit
            // stopped the download after the first record, with exit 0).
            use std::io::Write;
            let _ = writeln!(std::io::stdout(), "{line}");
        } else {
            println!("{line}");
        }
    }
    match &args.out {
        Some(dir) => {
            let dir = match &h.entry {
                // Entry names come from the server: checked here too, as `cp` does, so
                // that a hostile or broken server (or one behind plain http) cannot make
                // the query write outside its folder (`../x`, `/etc/profile.d`: hostile
                // probe of 2026-11-28).
                Some(e) => {
                    tsblob_proto::names::validate_entry_name(e).map_err(|err| {
                        anyhow::anyhow!(
                            "the server sent a record of an entry this query cannot write \
                             into {}: {}",
                            dir.display(),
                            term(&err.to_string())
                        )
                    })?;
                    let d = dir.join(e);
                    tokio::fs::create_dir_all(&d)
                        .await
                        .with_context(|| format!("cannot create {}", d.display()))?;
                    d
                }
                None => dir.clone(),
            };
            let p = dir.join(format!("{}{}", h.ts, extension_of(&h.content_type)));
            Ok(Some(RecordFile::create(p, h.payload_len).await?))
        }
        None => Ok(None),
    }
}

/// `tsblob rm BUCKET ENTRY`
#[derive(Debug, clap::Args)]
pub struct RmArgs {
    pub bucket: String,
    pub entry: String,
    /// Remove the record at this timestamp; repeat it for several (one request, each
    /// record answered on its own: a missing one fails alone, the others are removed).
    #[arg(long, value_parser = parse_time, conflicts_with_all = ["start", "stop", "all", "limit"])]
    pub ts: Vec<u64>,
    /// Remove records from this time (inclusive) ...
    #[arg(long, value_parser = parse_time)]
    pub start: Option<u64>,
    /// ... to this one (exclusive).
    #[arg(long, value_parser = parse_time)]
    pub stop: Option<u64>,
    /// With filters: remove at most this many matching records, oldest first.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Only the records that match these filters (within --start/--stop).
    #[command(flatten)]
    pub filters: FilterArgs,
    /// Remove the whole entry (needs --force; the same as `tsblob entry rm`).
    #[arg(long, conflicts_with_all = ["start", "stop", "limit"])]
    pub all: bool,
    /// Yes, remove the whole entry.
    #[arg(long, requires = "all")]
    pub force: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn rm(args: RmArgs) -> anyhow::Result<()> {
    let c = connect(&args.client)?;
    let path = entry_path(&args.bucket, &args.entry);
    let range: Vec<(String, String)> = [("start", args.start), ("stop", args.stop)]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v.to_string())))
        .collect();
    if !args.filters.any() && (args.filters.strict || args.limit.is_some()) {
        // Alone they would select every record of the entry.
        return Err(Usage(
            "--strict and --limit go with a filter (--when, --eq, --ne, --has, --missing)".into(),
        )
        .into());
    }
    let req = if args.filters.any() {
        if !args.ts.is_empty() || args.all {
            return Err(Usage("filters choose among a time range: use them with --start/--stop, not --ts or --all".into()).into());
        }
        // The matching records of the range: DELETE on the query route.
        let mut params = range;
        params.extend(args.filters.params(None)?);
        if let Some(l) = args.limit {
            params.push(("limit".into(), l.to_string()));
        }
        c.request(Method::DELETE, &format!("{path}/query"))
            .query(&params)
    } else if let [ts] = args.ts.as_slice() {
        c.request(Method::DELETE, &path).query(&[("ts", ts)])
    } else if !args.ts.is_empty() {
        let v = c
            .json(
                c.request(Method::DELETE, &format!("{path}/batch"))
                    .json(&serde_json::json!({ "ts": args.ts })),
            )
            .await?;
        return super::labels::batch_outcome(&v, "removed");
    } else if !range.is_empty() {
        c.request(Method::DELETE, &path).query(&range)
    } else if args.all {
        if !args.force {
            return Err(Usage(format!(
                "removing entry {}/{} deletes all its records: add --force to do it",
                args.bucket, args.entry
            ))
            .into());
        }
        c.request(Method::DELETE, &path)
    } else {
        // Bug "exit codes for the same mistake differ" (new-user walkthrough B.22): this
        // exited 1 where `label` without a selection exits 2 (usage).
        return Err(Usage("say what to remove: --ts, --start/--stop, filters (--when, --eq, ...), or --all --force for the whole entry".into()).into());
    };
    let v = c.json(req).await?;
    println!("removed {}", v["removed"]);
    Ok(())
}

#[cfg(test)]
mod tail_tests {
    use super::*;

    /// Issue 27: `tsblob tail --entries` reopened a dropped tail from the last timestamp
    /// plus one, which skipped the records of other entries with that same timestamp. It
    /// now reopens at that timestamp and skips only what it printed.
    #[test]
    fn a_multi_entry_tail_resumed_from_last_ts_plus_one_skipped_records() {
        let mut c = TailCursor::default();
        assert_eq!(c.start(Some(5)), Some(5));
        assert!(c.take(10, Some("a")));
        // the connection drops here: b's record at 10 is still to come
        assert_eq!(c.start(Some(5)), Some(10));
        assert!(!c.take(10, Some("a")), "printed before the cut: skipped");
        assert!(c.take(10, Some("b")));
        assert!(!c.take(10, Some("b")));
        assert!(c.take(11, Some("a")));
        assert_eq!(c.start(None), Some(11));
        // one entry: the same rule
        let mut one = TailCursor::default();
        assert!(one.take(3, None));
        assert!(!one.take(3, None));
        assert_eq!(
            line_key(br#"{"ts":10,"entry":"a","size":1}"#),
            Some((10, Some("a".to_string())))
        );
        assert_eq!(line_key(br#"{"heartbeat":10}"#), None);
    }

    /// Bug "seen list quadratic": the entries printed at the last timestamp were a list
    /// searched at each record (O(n²) for many records at one timestamp); now a set, capped.
    #[test]
    fn seen_list_quadratic() {
        let t0 = std::time::Instant::now();
        let mut c = TailCursor::default();
        for i in 0..200_000u32 {
            assert!(c.take(7, Some(&i.to_string())));
        }
        assert!(!c.take(7, Some("5")), "printed: skipped");
        assert!(c.seen.len() <= MAX_SEEN);
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            t0.elapsed()
        );
    }

    /// Bug "line buffer unbounded": a line without a newline grew the buffer for ever.
    #[test]
    fn line_buffer_unbounded() {
        let mut l = Lines::default();
        l.push(b"{\"ts\":1}\n{\"ts\"");
        assert_eq!(l.next_line().unwrap().as_deref(), Some(&b"{\"ts\":1}"[..]));
        assert!(l.next_line().unwrap().is_none());
        l.push(b":2}\n");
        assert_eq!(l.next_line().unwrap().as_deref(), Some(&b"{\"ts\":2}"[..]));
        for _ in 0..3 {
            l.push(&[b'a'; 1 << 20]);
            let _ = l.next_line();
        }
        assert!(l.next_line().is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bug "counts are not pluralised" (new-user walkthrough B.24): "1 records, 2 B".
    #[test]
    fn one_record_was_1_records() {
        assert_eq!(summary(1, 2), "1 record, 2 B");
        assert_eq!(summary(3, 31), "3 records, 31 B");
        assert_eq!(summary(0, 0), "0 records, 0 B");
    }
}
