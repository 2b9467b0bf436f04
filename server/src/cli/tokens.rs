//! `tsblob token ls|create|rotate|rm|me`: the token routes of the API.

use serde_json::{json, Value};

use super::client::{connect, ClientArgs};
use super::human;
use super::usage::Usage;

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
        /// The token stops working at this time: RFC 3339 (2026-12-31T00:00:00Z), µs since
        /// the epoch, or now+<duration> (now+30d). Default: never.
        #[arg(long, value_name = "TIME", value_parser = parse_expiry)]
        expires_at: Option<u64>,
        /// The token stops working once unused for this long (whole seconds: 90s, 12h, 30d);
        /// each request with it starts the clock again. Default: no limit.
        #[arg(long, value_name = "DURATION", value_parser = parse_ttl)]
        ttl: Option<u64>,
        /// A client address or CIDR network the token may be used from (repeatable, or
        /// comma-separated: 10.0.0.0/8,203.0.113.7). Default: any address.
        #[arg(long, value_name = "CIDR", value_delimiter = ',')]
        ip_allow: Vec<String>,
        /// Print the API's answer {"name", "value"} as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Give a token a new value, printed once: the old value stops working at once (streams
    /// opened with it end). Permissions and limits stay.
    Rotate {
        name: String,
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

/// `--expires-at`: `now+<duration>`, or a time as everywhere else (`human::parse_time`).
fn parse_expiry(s: &str) -> Result<u64, String> {
    match s.trim().strip_prefix("now+") {
        Some(d) => humantime::parse_duration(d)
            .map(|d| tsblob_storage::now_micros().saturating_add(d.as_micros() as u64))
            .map_err(|e| format!("{d:?} is not a duration ({e}): use e.g. now+30d")),
        None => human::parse_time(s),
    }
}

/// `--ttl`: a duration of whole seconds, at least one.
fn parse_ttl(s: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}): use e.g. 90s, 12h or 30d"))?;
    if d.subsec_nanos() != 0 || d.as_secs() == 0 {
        return Err(format!(
            "--ttl {s}: give whole seconds, at least 1s (the API counts the ttl in seconds)"
        ));
    }
    Ok(d.as_secs())
}

fn list(v: &Value) -> String {
    let names: Vec<std::borrow::Cow<'_, str>> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(human::term)
        .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(",")
    }
}

fn print_token(t: &Value) {
    println!("{}", token_line(t));
}

/// Said when `token create` made an open server's first token. Bug (newcomer walkthrough
/// of 2026-11-30): the first token turned authentication on for every client (scripts,
/// loggers, this CLI) and the CLI said nothing of it.
const FIRST_TOKEN_NOTE: &str = "note: this is the server's first token: authentication is now on, and every request needs a token from now on (this CLI's too: give it with --token or TSBLOB_TOKEN, or save it with `tsblob alias add`)";

/// Whether `me`'s answer is an open server's (no token checked: no name).
fn is_open(me: &Value) -> bool {
    me["name"].as_str().is_none_or(str::is_empty)
}

/// The line of `tsblob token me`: the token's, or what an open server's nameless answer
/// means. Bug "token me on an open server prints an empty name in a padded column"
/// (new-user walkthrough B.24).
fn me_line(t: &Value, token_sent: bool) -> String {
    if is_open(t) {
        return if token_sent {
            "(no token in use: the server is open and did not check the token sent; every request has full access)".into()
        } else {
            "(no token: the server is open; every request has full access)".into()
        };
    }
    token_line(t)
}

fn token_line(t: &Value) -> String {
    let rights = if t["full_access"].as_bool() == Some(true) {
        "full access".to_string()
    } else {
        format!("read {}  write {}", list(&t["read"]), list(&t["write"]))
    };
    let created = t["created"]
        .as_u64()
        .map(human::format_time)
        .unwrap_or_default();
    let mut limits = String::new();
    if t["is_expired"].as_bool() == Some(true) {
        limits.push_str("  EXPIRED");
    }
    if let Some(at) = t["expires_at"].as_u64() {
        limits.push_str(&format!("  expires {}", human::format_time(at)));
    }
    if let Some(ttl) = t["ttl"].as_u64() {
        limits.push_str(&format!(
            "  ttl {}",
            humantime::format_duration(std::time::Duration::from_secs(ttl))
        ));
    }
    if t["ip_allowlist"].as_array().is_some_and(|a| !a.is_empty()) {
        limits.push_str(&format!("  from {}", list(&t["ip_allowlist"])));
    }
    if let Some(at) = t["last_access"].as_u64() {
        limits.push_str(&format!("  used {}", human::format_time(at)));
    }
    format!(
        "{:<24} {rights}  {created}{limits}",
        human::field(&t["name"])
    )
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
            expires_at,
            ttl,
            ip_allow,
            json,
        } => {
            if !full_access && read.is_empty() && write.is_empty() {
                return Err(Usage("a token with no right is useless: give --full-access, --read BUCKET or --write BUCKET".into()).into());
            }
            let mut spec = json!({"full_access": full_access, "read": read, "write": write});
            if let Some(at) = expires_at {
                spec["expires_at"] = json!(at);
            }
            if let Some(ttl) = ttl {
                spec["ttl"] = json!(ttl);
            }
            if !ip_allow.is_empty() {
                spec["ip_allowlist"] = json!(ip_allow);
            }
            // Whether the server is open (no token yet): a request without a token that it
            // answers, or `me` answering nameless (an open server checks no token sent).
            let (_, sent) = args.client.resolve()?;
            let open_before = match sent {
                None => true,
                Some(_) => c.me().await.is_ok_and(|me| is_open(&me)),
            };
            let v = c.create_token(&name, &spec).await?;
            if json {
                println!("{v}");
            } else {
                println!("{}", human::field(&v["value"]));
                eprintln!("created token {name}: the value above is shown only once");
            }
            if open_before {
                eprintln!("{FIRST_TOKEN_NOTE}");
            }
        }
        TokenCommand::Rotate { name, json } => {
            let v = c.rotate_token(&name).await?;
            if json {
                println!("{v}");
            } else {
                println!("{}", human::field(&v["value"]));
                eprintln!(
                    "rotated token {name}: the value above is shown only once; the old one no longer works"
                );
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
                let (_, token) = args.client.resolve()?;
                println!("{}", me_line(&v, token.is_some()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bug "token me on an open server prints an empty name in a padded column".
    #[test]
    fn token_me_on_an_open_server_printed_an_empty_name() {
        let open = json!({"name": "", "full_access": true, "read": [], "write": []});
        assert_eq!(
            me_line(&open, false),
            "(no token: the server is open; every request has full access)"
        );
        assert!(me_line(&open, true).contains("did not check the token sent"));
        let named = json!({"name": "cam", "full_access": true, "created": 0});
        assert!(
            me_line(&named, true).starts_with("cam "),
            "{}",
            me_line(&named, true)
        );
    }
}
