//! `tsblob entry info|rename|rm`.

use anyhow::Context;
use serde_json::Value;

use super::client::{connect, ClientArgs};
use super::human;
use super::usage::Usage;

/// `tsblob entry ...`
#[derive(Debug, clap::Args)]
pub struct EntryArgs {
    #[command(subcommand)]
    pub command: EntryCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum EntryCommand {
    /// Show an entry's records, size and time span.
    Info {
        bucket: String,
        entry: String,
        /// The API's entry object as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rename an entry (its records stay; the new name must be free).
    Rename {
        bucket: String,
        entry: String,
        new_name: String,
    },
    /// Remove an entry and all its records (needs --force).
    Rm {
        bucket: String,
        entry: String,
        /// Yes, remove every record of the entry.
        #[arg(long)]
        force: bool,
    },
}

/// One line of an entry: name, size, records, oldest → latest.
pub fn print_entry_line(e: &Value) {
    println!(
        "  {:<30} {:>12} {:>10} rec  {}  →  {}",
        human::field(&e["name"]),
        human::size(e["size"].as_u64().unwrap_or(0)),
        e["record_count"].as_u64().unwrap_or(0),
        human::opt_time(&e["oldest"]),
        human::opt_time(&e["latest"]),
    );
}

pub async fn entry(args: EntryArgs) -> anyhow::Result<()> {
    let c = connect(&args.client)?;
    match args.command {
        EntryCommand::Info {
            bucket,
            entry,
            json,
        } => {
            let e = c.entry(&bucket, &entry).await?;
            if json {
                println!("{e}");
            } else {
                print_entry_line(&e);
            }
        }
        EntryCommand::Rename {
            bucket,
            entry,
            new_name,
        } => {
            c.rename_entry(&bucket, &entry, &new_name)
                .await
                .with_context(|| format!("renaming entry {bucket}/{entry}"))?;
            println!("renamed entry {bucket}/{entry} to {bucket}/{new_name}");
        }
        EntryCommand::Rm {
            bucket,
            entry,
            force,
        } => {
            if !force {
                return Err(Usage(format!(
                    "removing entry {bucket}/{entry} deletes all its records: add --force to do it"
                ))
                .into());
            }
            c.remove_entry(&bucket, &entry)
                .await
                .with_context(|| format!("removing entry {bucket}/{entry}"))?;
            println!("removed entry {bucket}/{entry}");
        }
    }
    Ok(())
}
