//! The sinks of `tsblob cp`: a server bucket (batches with `if_exists=compare`, retried;
//! a record over the destination's batch limit sent alone) or an export folder (payload
//! file first, then its index line).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::AsyncWriteExt;

use super::source::read_index;
use super::{IndexLine, Totals, INDEX};
use crate::batch_client::{post_batch, post_single, Destination, OutRecord, Single};
use crate::cli::human::size;
use crate::content_type::extension_of;

/// A batch is sent when its payloads reach this many bytes ...
const BATCH_BYTES: usize = 8 << 20;
/// ... or this many records.
const BATCH_RECORDS: usize = 2000;
/// Attempts per batch before the copy fails (it can be run again).
const ATTEMPTS: u32 = 5;

/// Sends records in batches (one request per entry of a batch), retrying failed attempts.
pub(super) async fn write_server(
    dst: &Destination,
    ca: Option<&[u8]>,
    mut rx: super::Rx,
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
    // The last 429/5xx a record was answered (a full quota, too many entries), for the
    // message when retries run out.
    let mut last_error: Option<String> = None;
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
                    tally(outcome, &r, entry, totals, &mut left);
                }
                Some((201, _)) => tally(Single::Stored, &r, entry, totals, &mut left),
                Some((200, _)) => tally(Single::Existing, &r, entry, totals, &mut left),
                Some((409, e)) => {
                    let m = e.map_or_else(|| format!("{entry} {}", r.ts), |e| e.message);
                    tally(Single::Conflict(m), &r, entry, totals, &mut left)
                }
                Some((s, e)) if s == 429 || s >= 500 => {
                    if let Some(e) = e {
                        last_error = Some(format!("{s} {}: {}", e.code, e.message));
                    }
                    left.push(r)
                }
                Some((s, e)) => {
                    let m = format!(
                        "{dst}/{entry} refused record {} ({s}): {}",
                        r.ts,
                        e.map_or_else(String::new, |e| e.message)
                    );
                    tally(Single::Refused(m), &r, entry, totals, &mut left)
                }
                None => left.push(r),
            }
        }
        recs = left;
        if moved || recs.is_empty() {
            continue; // the rest goes at once (a record too large is not a failure)
        }
        if attempt >= ATTEMPTS {
            let why = last_error.map_or_else(String::new, |m| format!(" (last answer: {m})"));
            bail!("{dst}/{entry}: {} record(s) still not stored after {ATTEMPTS} attempts{why}; run the copy again", recs.len())
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

/// Refused records whose reason is printed; later ones are counted (the summary says how
/// many, and the first reason).
const REFUSED_SHOWN: u64 = 20;

/// Counts what the destination did with record `r`. A record refused for itself (a
/// label too long for the destination, …) is counted and reported, and the copy goes on:
/// one such record in an MCAP file stopped its import at record 1,999 of 30,000 (hostile
/// probe of 2026-11-28); the command fails at the end, saying how many.
fn tally(
    outcome: Single,
    r: &OutRecord,
    entry: &str,
    totals: &mut Totals,
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
            totals.refused += 1;
            if totals.refused <= REFUSED_SHOWN {
                eprintln!("refused: {}", crate::cli::human::term(&m));
            }
            totals.first_refusal.get_or_insert(m);
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
pub(super) async fn write_folder(
    root: &Path,
    mut rx: super::Rx,
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
        let crc = tsblob_storage::crc::crc32c(&r.data);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tsblob_storage::Labels;

    /// Bug "export escape": `tsblob cp` into a folder joined each record's entry name, as
    /// the server sent it, to the folder: a hostile server (or anyone between it and an
    /// http:// client) naming an entry `../outside` or `/abs` had files written outside it.
    #[tokio::test]
    async fn export_wrote_outside_its_folder_for_a_hostile_entry_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("export");
        for entry in ["../outside", "/abs/x", "a/../../outside"] {
            let (tx, rx) = super::super::queue(1, 1 << 20);
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
