//! `tsblob cp` to and from MCAP (`docs/cli.md`, "MCAP and ROS 2 bags"):
//!
//! * `tsblob cp http://host/BUCKET[/GLOB] out.mcap`: the server's MCAP export of the window
//!   (`GET /api/v1/b/{bucket}/query?...&format=mcap`, `crate::mcap::export`) streamed into
//!   `out.mcap.part`, renamed to `out.mcap` once complete (an interrupted export leaves no
//!   file that looks whole);
//! * `tsblob cp in.mcap http://host/BUCKET` (or a rosbag2 folder): the file read here
//!   (`crate::mcap::import`) into the copy's batch writer, `if_exists=compare` as every copy.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use futures_util::StreamExt;
use reqwest::Method;
use tokio::io::AsyncWriteExt;
use tsblob_storage::FeedFilter;

use super::super::human::size;
use super::super::{seg, Client};
use crate::batch_client::OutRecord;
use crate::mcap::bag::{self, Compression};
use crate::mcap::import::Importer;

/// Whether a path names an MCAP file (by its extension).
pub(super) fn is_mcap(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("mcap"))
}

/// Whether a path is a rosbag2 folder (it holds `metadata.yaml`).
pub(super) fn is_bag(path: &Path) -> bool {
    path.join("metadata.yaml").is_file()
}

/// Exports a window of a server's bucket into an MCAP file.
#[allow(clippy::too_many_arguments)]
pub(super) async fn export(
    url: &str,
    bucket: &str,
    token: Option<String>,
    ca: Option<&[u8]>,
    patterns: &[String],
    start: Option<u64>,
    stop: Option<u64>,
    when: Option<&str>,
    out: &Path,
    pb: &indicatif::ProgressBar,
) -> anyhow::Result<u64> {
    let c = Client::with_ca(url, token.as_deref(), ca)?;
    let mut params = super::query_params(patterns, start, stop, when)?;
    params.push(("format".into(), "mcap".into()));
    let resp = c
        .send(
            c.request(Method::GET, &format!("/api/v1/b/{}/query", seg(bucket)))
                .query(&params),
        )
        .await?;
    let mut part = out.as_os_str().to_owned();
    part.push(".part");
    let part = PathBuf::from(part);
    let mut file = tokio::fs::File::create(&part)
        .await
        .with_context(|| format!("cannot create {}", part.display()))?;
    let mut body = resp.bytes_stream();
    let mut written = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let _ = tokio::fs::remove_file(&part).await;
                bail!("the server's MCAP stream was cut off after {written} bytes ({e}): run the export again");
            }
        };
        file.write_all(&chunk)
            .await
            .with_context(|| format!("cannot write {}", part.display()))?;
        written += chunk.len() as u64;
        pb.inc(chunk.len() as u64);
        pb.set_message(size(written));
    }
    file.sync_all().await?;
    drop(file);
    // A complete MCAP ends with its magic: a stream cut at a chunk boundary does not.
    if !ends_with_magic(&part)? {
        let _ = tokio::fs::remove_file(&part).await;
        bail!("the server's MCAP stream ended before the file's end ({written} bytes): run the export again");
    }
    tokio::fs::rename(&part, out)
        .await
        .with_context(|| format!("cannot rename {} to {}", part.display(), out.display()))?;
    Ok(written)
}

fn ends_with_magic(path: &Path) -> anyhow::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let magic = ::mcap::MAGIC;
    if len < 2 * magic.len() as u64 {
        return Ok(false);
    }
    f.seek(SeekFrom::Start(len - magic.len() as u64))?;
    let mut tail = vec![0u8; magic.len()];
    f.read_exact(&mut tail)?;
    Ok(tail == magic)
}

/// What [`import`] reads: an MCAP file, or a rosbag2 folder with its metadata, read once
/// (by `check_source`).
pub(super) enum Input {
    File(PathBuf),
    Bag(PathBuf, bag::Bag),
}

/// Reads an MCAP file or a rosbag2 folder into `tx`: returns the records handed on and,
/// when something was skipped or the file breaks the format's rules (an undefined schema,
/// an id defined twice: [`crate::mcap::import::Report::complete`]), what (the copy fails
/// with it once the rest is written).
pub(super) async fn import(
    input: Input,
    patterns: Vec<String>,
    start: Option<u64>,
    stop: Option<u64>,
    when: Option<String>,
    tx: super::Tx,
) -> anyhow::Result<(u64, Option<String>)> {
    let cond = when
        .as_deref()
        .map(crate::http::when::parse_text)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--when: {}", e.message))?;
    let patterns = super::compile_patterns(&patterns)?;
    tokio::task::spawn_blocking(move || {
        let (path, files, compression, missing) = match input {
            Input::Bag(path, b) => {
                for f in &b.unlisted {
                    eprintln!("{f} is not listed in the bag's metadata.yaml: not imported");
                }
                (path, b.files, b.compression, b.missing)
            }
            Input::File(path) => (path.clone(), vec![path], Compression::None, Vec::new()),
        };
        let mut filter = FeedFilter::new(tsblob_storage::EntrySelection::all(), cond.as_ref());
        let mut sent = 0u64;
        let want = |r: &OutRecord| {
            patterns.iter().any(|p| p.matches(&r.entry))
                && start.is_none_or(|s| r.ts >= s)
                && stop.is_none_or(|s| r.ts < s)
                && filter.wants(r.ts, &r.labels)
        };
        let emit = |r: OutRecord| {
            sent += 1;
            tx.blocking_send(r).is_ok()
        };
        let mut imp = Importer::new(emit, want);
        if compression == Compression::Messages {
            imp = imp.inflating_messages();
        }
        imp.report.missing_files = missing;
        for f in &files {
            if compression == Compression::Files {
                let plain = bag::inflate(f)?;
                imp.read_file_as(plain.path(), &f.display().to_string())?;
            } else {
                imp.read_file(f)?;
            }
            if imp.stopped() {
                break; // the writer stopped: it reports why
            }
        }
        let report = std::mem::take(&mut imp.report);
        drop(imp);
        for line in report.lines() {
            eprintln!("{line}");
        }
        let incomplete = (!report.complete()).then(|| {
            format!(
                "{} of {} file(s) not imported whole, or malformed (see above): everything else in it was imported",
                path.display(),
                files.len()
            )
        });
        Ok((sent, incomplete))
    })
    .await
    .context("the MCAP reading task failed")?
}
