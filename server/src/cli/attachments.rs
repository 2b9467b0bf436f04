//! `tsblob attachment ls|get|put|rm`: an entry's attachments (small JSON documents kept
//! with it under a name; `docs/api.md`, "Attachments").

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context};

use super::client::{connect, ClientArgs};

/// `tsblob attachment ...`
#[derive(Debug, clap::Args)]
pub struct AttachmentArgs {
    #[command(subcommand)]
    pub command: AttachmentCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum AttachmentCommand {
    /// Print an entry's attachments as one JSON object (name → document).
    Ls { bucket: String, entry: String },
    /// Print one attachment's JSON document.
    Get {
        bucket: String,
        entry: String,
        name: String,
    },
    /// Write one attachment (replacing one of the same name; the entry is created if
    /// needed): the JSON document given, or read from --file (`-`: stdin).
    Put {
        bucket: String,
        entry: String,
        name: String,
        /// The JSON document, e.g. '{"fps": 30}'.
        #[arg(conflicts_with = "file", required_unless_present = "file")]
        document: Option<String>,
        /// Read the document from this file (`-`: standard input).
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Remove attachments by name, or all of them with --all.
    Rm {
        bucket: String,
        entry: String,
        /// The attachments to remove (a name the entry does not have is skipped).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        names: Vec<String>,
        /// Remove every attachment of the entry.
        #[arg(long)]
        all: bool,
    },
}

/// The document of `put`: the argument, a file, or stdin.
fn document(arg: Option<String>, file: Option<PathBuf>) -> anyhow::Result<Vec<u8>> {
    match (arg, file) {
        (Some(doc), _) => Ok(doc.into_bytes()),
        (None, Some(p)) if p.as_os_str() == "-" => {
            let mut out = Vec::new();
            std::io::stdin()
                .read_to_end(&mut out)
                .context("reading the document from standard input")?;
            Ok(out)
        }
        (None, Some(p)) => std::fs::read(&p).with_context(|| format!("reading {}", p.display())),
        (None, None) => bail!("give the JSON document, or --file"),
    }
}

pub async fn attachment(args: AttachmentArgs) -> anyhow::Result<()> {
    let c = connect(&args.client)?;
    match args.command {
        AttachmentCommand::Ls { bucket, entry } => {
            let text = c
                .attachments(&bucket, &entry)
                .await
                .with_context(|| format!("reading the attachments of {bucket}/{entry}"))?;
            println!("{text}");
        }
        AttachmentCommand::Get {
            bucket,
            entry,
            name,
        } => {
            let text = c
                .attachment(&bucket, &entry, &name)
                .await
                .with_context(|| format!("reading attachment {name} of {bucket}/{entry}"))?;
            println!("{text}");
        }
        AttachmentCommand::Put {
            bucket,
            entry,
            name,
            document: doc,
            file,
        } => {
            let doc = document(doc, file)?;
            c.put_attachment(&bucket, &entry, &name, doc)
                .await
                .with_context(|| format!("writing attachment {name} of {bucket}/{entry}"))?;
            println!("wrote attachment {name} of {bucket}/{entry}");
        }
        AttachmentCommand::Rm {
            bucket,
            entry,
            names,
            all,
        } => {
            let names = (!all).then_some(names);
            let answer = c
                .remove_attachments(&bucket, &entry, names.as_deref())
                .await
                .with_context(|| format!("removing attachments of {bucket}/{entry}"))?;
            let removed: Vec<std::borrow::Cow<'_, str>> = answer["removed"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str())
                        .map(super::human::term)
                        .collect()
                })
                .unwrap_or_default();
            if removed.is_empty() {
                println!("no attachment removed from {bucket}/{entry}");
            } else {
                println!(
                    "removed {} of {bucket}/{entry}: {}",
                    super::human::count(removed.len() as u64, "attachment", "attachments"),
                    removed.join(", ")
                );
            }
        }
    }
    Ok(())
}
