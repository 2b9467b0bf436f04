//! The attachments of the copied entries (issue 28): copied whole with each entry that
//! `--entries` selects (an entry's attachments are not records: `--start`, `--stop` and
//! `--when` do not apply), after its records. Between servers `GET` then `PUT
//! …/{entry}/attachments` (the destination's attachments of other names stay; those of the
//! same names are replaced); an export writes `FOLDER/<entry>/attachments.json` (the
//! `{name: document}` object the API answers), an import reads it back. One entry's
//! attachments are held at a time (the server's `--max-attachments` ×
//! `--max-attachment-size`, and at most `JSON_MAX` of an answer).

use anyhow::{bail, Context};
use reqwest::Method;
use serde_json::value::RawValue;

use super::{compile_patterns, server_entries, CpArgs, Place};
use crate::cli::client::Client;
use tsblob_proto::client::entry_path;

/// The file of an entry's attachments in an export folder.
pub(super) const FILE: &str = "attachments.json";

/// One entry's attachments, as the API answers them: name → document.
type Docs = std::collections::BTreeMap<String, Box<RawValue>>;

/// Copies the attachments of the selected entries from `src` to `dst`; returns
/// (attachments, entries) copied.
pub(super) async fn copy(
    src: &Place,
    dst: &Place,
    patterns: &[String],
    args: &CpArgs,
) -> anyhow::Result<(usize, usize)> {
    let compiled = compile_patterns(patterns)?;
    let entries: Vec<String> = match src {
        Place::Server {
            url, bucket, ca, ..
        } => server_entries(url, bucket, args.src_token.clone(), ca.as_deref())
            .await?
            .into_keys()
            .collect(),
        Place::Folder(dir) => super::source::entries_holding(dir, FILE)?
            .into_iter()
            .map(|(e, _)| e)
            .collect(),
        Place::Mcap(_) | Place::Bag(_) => return Ok((0, 0)),
    };
    let (mut docs_copied, mut entries_copied) = (0, 0);
    for entry in entries
        .iter()
        .filter(|e| compiled.iter().any(|p| p.matches(e)))
    {
        let docs = read(src, entry, args).await?;
        if docs.is_empty() {
            continue;
        }
        write(dst, entry, &docs, args).await?;
        docs_copied += docs.len();
        entries_copied += 1;
    }
    Ok((docs_copied, entries_copied))
}

fn client(url: &str, token: Option<&str>, ca: Option<&[u8]>) -> anyhow::Result<Client> {
    Client::with_ca(url, token, ca).context("cannot set up the HTTP client")
}

async fn read(src: &Place, entry: &str, args: &CpArgs) -> anyhow::Result<Docs> {
    let text = match src {
        Place::Server {
            url, bucket, ca, ..
        } => {
            let c = client(url, args.src_token.as_deref(), ca.as_deref())?;
            c.attachments(bucket, entry)
                .await
                .with_context(|| format!("reading the attachments of {bucket}/{entry}"))?
        }
        Place::Folder(dir) => {
            let path = dir.join(entry).join(FILE);
            match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Docs::new()),
                Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
            }
        }
        Place::Mcap(_) | Place::Bag(_) => return Ok(Docs::new()),
    };
    serde_json::from_str(&text).with_context(|| {
        format!("the attachments of {entry} are not one JSON object of name → document")
    })
}

async fn write(dst: &Place, entry: &str, docs: &Docs, args: &CpArgs) -> anyhow::Result<()> {
    let body = serde_json::to_vec(docs)?;
    match dst {
        Place::Server {
            url, bucket, ca, ..
        } => {
            let c = client(url, args.dst_token.as_deref(), ca.as_deref())?;
            let req = c
                .request(
                    Method::PUT,
                    &format!("{}/attachments", entry_path(bucket, entry)),
                )
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
            c.json(req)
                .await
                .with_context(|| format!("writing the attachments of {bucket}/{entry}"))?;
        }
        Place::Folder(root) => {
            // Entry names come from the source: checked, so that the export cannot write
            // outside its folder.
            tsblob_proto::names::validate_entry_name(entry).map_err(|e| {
                anyhow::anyhow!("the source has an entry this export cannot hold: {e}")
            })?;
            let dir = root.join(entry);
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let path = dir.join(FILE);
            std::fs::write(&path, body)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Place::Mcap(p) | Place::Bag(p) => bail!("cannot copy attachments into {}", p.display()),
    }
    Ok(())
}
