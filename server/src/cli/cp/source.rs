//! The sources of `tsblob cp`: a server bucket (a streamed multi-entry query) or an
//! export folder (its index files, each payload's size and CRC checked), read into the
//! copy's bounded channel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use bytes::BytesMut;
use futures_util::StreamExt;
use reqwest::Method;
use tsblob_proto::framing::{Decoder, Event};
use tsblob_storage::FeedFilter;

use super::{compile_patterns, query_params, IndexLine, Tx, INDEX};
use crate::batch_client::OutRecord;
use crate::cli::human::term;
use crate::cli::records::{CutOff, MaxRecordArgs};
use crate::cli::{seg, Client};

/// Streams a multi-entry query of the source into `tx`; returns the records read.
#[allow(clippy::too_many_arguments)]
pub(super) async fn read_server(
    url: &str,
    bucket: &str,
    token: Option<String>,
    ca: Option<&[u8]>,
    patterns: &[String],
    start: Option<u64>,
    stop: Option<u64>,
    when: Option<&str>,
    max_record: MaxRecordArgs,
    tx: Tx,
) -> anyhow::Result<u64> {
    let c = Client::with_ca(url, token.as_deref(), ca)?;
    let params = query_params(patterns, start, stop, when)?;
    let resp = c
        .send(
            c.request(Method::GET, &format!("/api/v1/b/{}/query", seg(bucket)))
                .query(&params),
        )
        .await
        .with_context(|| format!("querying the source bucket {bucket}"))?;
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
                    max_record.check(&h)?;
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
                    term(&String::from_utf8_lossy(&json))
                ),
                Event::Error(json) => bail!(
                    "the source stopped the query after {records} records: {}",
                    term(&String::from_utf8_lossy(&json))
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
        Some(n) => bail!("the source's query stream announced {n} records in its end frame but sent {records}: run the copy again"),
        None => Err(CutOff(format!("the source's query stream ended without its end frame after {records} records: run the copy again")).into()),
    }
}

/// `(entry, index path)` of every entry of an export folder.
pub(super) fn folder_entries(root: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    entries_holding(root, INDEX)
}

/// `(entry, path)` of every entry folder of an export folder that holds a file of this name
/// (its index, its attachments), sorted by entry.
pub(super) fn entries_holding(
    root: &Path,
    file_name: &str,
) -> anyhow::Result<Vec<(String, PathBuf)>> {
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
            } else if item.file_name() == file_name {
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
pub(super) fn read_index(path: &Path) -> anyhow::Result<BTreeMap<u64, IndexLine>> {
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

/// Reads an export folder's entries (`(entry, index file)`, [`folder_entries`]) into `tx`,
/// checking each payload's size and CRC.
pub(super) async fn read_folder(
    entries: Vec<(String, PathBuf)>,
    patterns: &[String],
    start: Option<u64>,
    stop: Option<u64>,
    when: Option<&str>,
    tx: Tx,
) -> anyhow::Result<u64> {
    let cond = when
        .map(crate::http::when::parse_text)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--when: {}", e.message))?;
    let mut records = 0u64;
    let patterns = compile_patterns(patterns)?;
    for (entry, index) in entries {
        if !patterns.iter().any(|p| p.matches(&entry)) {
            continue;
        }
        let mut filter = FeedFilter::new(tsblob_storage::EntrySelection::all(), cond.as_ref());
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
            if data.len() as u64 != line.size || tsblob_storage::crc::crc32c(&data) != line.crc32c {
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
