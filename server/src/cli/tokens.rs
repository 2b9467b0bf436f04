//! `tsblob token ls|create|rm|me`: the token routes of the API.

use anyhow::bail;
use serde_json::{json, Value};

use super::client::{connect, ClientArgs};
use super::human;

/// `tsblob token ...`
#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// List the stored tokens and their permissions (not their values).
    Ls {
        /// JSON lines: one token object of the API per line.
        #[arg(long)]
        json: bool,
    },
    /// Create a token; its value is printed once.
    Create {
        name: String,
        /// Every right, including token management.
        #[arg(long)]
        full_access: bool,
        /// A bucket the token may read (repeatable, or comma-separated).
        #[arg(long, value_name = "BUCKET", value_delimiter = ',')]
        read: Vec<String>,
        /// A bucket the token may write (repeatable, or comma-separated).
        #[arg(long, value_name = "BUCKET", value_delimiter = ',')]
        write: Vec<String>,
        /// Print the API's answer {"name", "value"} as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a token.
    Rm {
        name: String,
        /// Removing the last stored token of a server without an admin --token turns
        /// authentication off: say so.
        #[arg(long)]
        disable_auth: bool,
    },
    /// Show the permissions of the token in use.
    Me {
        /// The API's answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn list(v: &Value) -> String {
    let names: Vec<&str> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(",")
    }
}

fn print_token(t: &Value) {
    let rights = if t["full_access"].as_bool() == Some(true) {
        "full access".to_string()
    } else {
        format!("read {}  write {}", list(&t["read"]), list(&t["write"]))
    };
    let created = t["created"]
        .as_u64()
        .map(human::format_time)
        .unwrap_or_default();
    println!(
        "{:<24} {rights}  {created}",
        t["name"].as_str().unwrap_or("")
    );
}

pub async fn token(args: TokenArgs) -> anyhow::Result<()> {
    let c = connect(&args.client)?;
    match args.command {
        TokenCommand::Ls { json } => {
            let v = c.list_tokens().await?;
            human::print_list(&v["tokens"], json, print_token);
        }
        TokenCommand::Create {
            name,
            full_access,
            read,
            write,
            json,
        } => {
            if !full_access && read.is_empty() && write.is_empty() {
                bail!("a token with no right is useless: give --full-access, --read BUCKET or --write BUCKET");
            }
            let spec = json!({"full_access": full_access, "read": read, "write": write});
            let v = c.create_token(&name, &spec).await?;
            if json {
                println!("{v}");
            } else {
                println!("{}", v["value"].as_str().unwrap_or(""));
                eprintln!("created token {name}: the value above is shown only once");
            }
        }
        TokenCommand::Rm { name, disable_auth } => {
            c.remove_token(&name, disable_auth).await?;
            println!("removed token {name}");
        }
        TokenCommand::Me { json } => {
            let v = c.me().await?;
            if json {
                println!("{v}");
            } else {
                print_token(&v);
            }
        }
    }
    Ok(())
}
