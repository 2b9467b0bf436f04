//! The `tsblob` command line: every subcommand, parsed by clap (`docs/cli.md` is generated
//! from it: `TSBLOB_UPDATE_DOCS=1 cargo test -p tsblob-server --lib cli_reference`).

use clap::{Parser, Subcommand};

use crate::{cli, config, serve};

#[derive(Parser)]
#[command(
    name = "tsblob",
    version,
    about = "A store for timestamped blobs",
    long_about = "A store for timestamped blobs.\n\nThe client flags (--url, --token, -a/--alias, --ca) go before the command or after it: `tsblob -a robot1 bucket ls`, `tsblob bucket ls -a robot1`.\n\nExit codes of the client commands: 0 success; 1 any other failure (a request the server refused as invalid, a local file); 2 usage (an unknown flag or a bad value, a command that does not say which records or buckets it applies to, a removal without its --force, a bad config file); 3 not found (bucket, entry, record, token, task: 404); 4 conflict (exists already, or holds another payload: 409, 412); 5 authentication or permission (401, 403); 6 server error or busy (5xx, disk full, 429 too many requests); 7 network (the server cannot be reached, TLS refused, the answer cut off)."
)]
// The client flags before the command are the top-level command's own, not global: clap
// would add global ones to `serve`, `alias` and `cp` too, which take none of them (and
// `serve --token` is the admin token). The command's own client flags are global within
// it (`tsblob bucket -a r2 ls`); [`Cli::parse_with_config`] hands these down.
#[command(
    mut_arg("url", |a| a.global(false)),
    mut_arg("token", |a| a.global(false)),
    mut_arg("alias", |a| a.global(false)),
    mut_arg("ca", |a| a.global(false))
)]
pub struct Cli {
    /// The client flags given before the command (`tsblob -a robot1 bucket ls`). Bug
    /// "client flags have to come after the subcommand" (new-user walkthrough B.19).
    #[command(flatten)]
    pub client: cli::ClientArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
// Parsed once per process: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the server (data in ./tsblob-data, listening on 127.0.0.1:8686 by default).
    Serve(config::ServeArgs),
    /// Create, update, list, inspect and remove buckets on a server.
    Bucket(cli::BucketArgs),
    /// Inspect and remove entries.
    Entry(cli::EntryArgs),
    /// An entry's attachments (small JSON documents kept with it): ls, get, put, rm.
    Attachment(cli::AttachmentArgs),
    /// Write a file as one record.
    Put(cli::PutArgs),
    /// Read one record (the latest by default) to a file or stdout.
    Get(cli::GetArgs),
    /// Read the records of a time range into a folder or to stdout.
    Query(cli::QueryArgs),
    /// Records and bytes of an entry per time step (from the index, no payload read).
    Histogram(cli::HistogramArgs),
    /// Follow an entry: one line per record, then each new one as it is written.
    ///
    /// A tail follows what exists when it starts: an ENTRY that does not exist yet is not
    /// waited for (404 entry_not_found, exit 3: start the tail once the entry has its first
    /// record), and --entries follows the entries matching then (none matching: the tail
    /// ends at once). A dropped connection is reopened at the last timestamp printed,
    /// skipping the records already printed there (by entry), five times in a row at most.
    Tail(cli::TailArgs),
    /// Remove a record, a time range, the records matching filters, or a whole entry.
    Rm(cli::RmArgs),
    /// Set or remove labels of a record, of several by timestamp, or of every record a time
    /// range and condition select (one request).
    Label(cli::LabelArgs),
    /// Manage the server's access tokens.
    Token(cli::TokenArgs),
    /// Make query links: URLs that download a record or a query without a token.
    Link(cli::LinkArgs),
    /// Manage replication tasks (records pushed to another tsblob or to a ReductStore): ls,
    /// status, create, pause, resume, disable, rm.
    Replication(cli::ReplicationArgs),
    /// Manage a bucket's lifecycle rules (records removed, or stored compressed, once older
    /// than an age): ls, get, set, rm, run.
    Lifecycle(cli::LifecycleArgs),
    /// Copy records: server to server, server to a folder (export), folder to server (import),
    /// server to an MCAP file, MCAP file or ROS 2 bag to server.
    ///
    /// Attachments: the copied entries' attachments follow their records, whole (`--start`,
    /// `--stop` and `--when` select records only): to a server as a write of the same names
    /// (its attachments of other names stay), to a folder as `<entry>/attachments.json`,
    /// read back by an import.
    ///
    /// MCAP and ROS 2 bags: a destination ending in `.mcap` is an MCAP file (each entry a
    /// channel, each record a message at its timestamp, labels on a `<topic>#labels` channel,
    /// zstd chunks with a summary and message indexes); a source ending in `.mcap`, or a
    /// rosbag2 folder (metadata.yaml and the MCAP files it lists, rosbag2's zstd by message
    /// or by file undone), is imported (each topic an entry,
    /// its leading `/` dropped and other characters escaped as `.XX`; each message a record
    /// at its log time in µs, with the labels mcap.encoding, mcap.schema and
    /// mcap.schema_encoding). An import run again finds what is there; a damaged or truncated
    /// file imports every intact chunk, reports the rest and fails. The mapping both ways:
    /// docs/api.md, "MCAP export and import".
    Cp(cli::CpArgs),
    /// Save servers under short names, used with --alias/-a.
    Alias(cli::AliasArgs),
    /// Compare tsblob with MinIO and ReductStore on one seeded workload.
    #[cfg(feature = "bench")]
    Bench(tsblob_compare::BenchArgs),
    /// Drive a server with HTTP load and print throughput and latency (for docs/benchmarks).
    #[cfg(feature = "bench")]
    #[command(hide = true)]
    Loadgen(LoadgenArgs),
    /// The `limit` target of `tsblob bench` (started by it): discards writes, answers reads
    /// from memory (each record from its own copy of the bytes).
    #[cfg(feature = "bench")]
    #[command(hide = true, name = "bench-limit")]
    BenchLimit(tsblob_compare::limit::LimitArgs),
}

/// Why the command line could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// A usage error, or `--help`/`--version` (clap prints and exits).
    #[error("{0}")]
    Clap(#[from] clap::Error),
    #[error(transparent)]
    ConfigFile(#[from] config::ConfigFileError),
    /// A value of the config file that its flag refuses.
    #[error("{}", config_value_message(.path, .error))]
    ConfigValue { path: String, error: clap::Error },
}

/// A config file's value that its flag refused, said by its key: `the config file
/// bad.toml: max-body = "lots" is invalid: "lots" is not a size: …`. Bug (newcomer
/// walkthrough of 2026-11-30): the message was clap's own inside ours, with a doubled
/// `error:`, the flag `--max-body <MAX_BODY>` for the key and the command line's "For more
/// information, try '--help'".
fn config_value_message(path: &str, error: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let text = |kind| match error.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    let key = text(ContextKind::InvalidArg).map(|arg| {
        arg.trim_start_matches('-')
            .split([' ', '='])
            .next()
            .unwrap_or_default()
            .to_string()
    });
    let why = std::error::Error::source(error)
        .map(|e| e.to_string())
        .or_else(|| match error.get(ContextKind::ValidValue) {
            Some(ContextValue::Strings(v)) => Some(format!("give one of {}", v.join(", "))),
            _ => None,
        })
        .map(|w| format!(": {w}"))
        .unwrap_or_default();
    match (key, text(ContextKind::InvalidValue)) {
        (Some(key), Some(value)) if !key.is_empty() => {
            format!("the config file {path}: {key} = {value:?} is invalid{why}")
        }
        _ => format!("the config file {path}: {}", clap_message(error)),
    }
}

/// clap's message without its `error: ` and its closing "For more information" line.
fn clap_message(error: &clap::Error) -> String {
    let text = error.to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let text = text
        .split("\n\nFor more information")
        .next()
        .unwrap_or(text);
    text.trim_end().to_string()
}

/// `--no-auth` with an admin token that came from the environment (or the config file):
/// clap said "the argument '--no-auth' cannot be used with '--token <TOKEN>'" although no
/// `--token` was given. Bug (newcomer walkthrough of 2026-11-30). `None` for other errors.
fn auth_conflict(
    e: &clap::Error,
    argv: &[std::ffi::OsString],
    from_file: bool,
) -> Option<clap::Error> {
    use clap::CommandFactory;
    let text = e.to_string();
    if e.kind() != clap::error::ErrorKind::ArgumentConflict
        || !text.contains("'--no-auth'")
        || !text.contains("'--token")
    {
        return None;
    }
    let given = |flag: &str| {
        argv.iter().any(|a| {
            let a = a.to_string_lossy();
            a == flag || a.starts_with(&format!("{flag}="))
        })
    };
    let env = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    let token = if given("--token") {
        "--token gives an admin token"
    } else if env("TSBLOB_TOKEN") {
        "TSBLOB_TOKEN is set (an admin token)"
    } else if from_file {
        "the config file sets token (an admin token)"
    } else {
        return None;
    };
    let no_auth = if given("--no-auth") {
        "--no-auth"
    } else if env("TSBLOB_NO_AUTH") {
        "TSBLOB_NO_AUTH"
    } else {
        "the config file's no-auth"
    };
    Some(Cli::command().error(
        clap::error::ErrorKind::ArgumentConflict,
        format!("{token} and {no_auth} asks for none: drop one of them"),
    ))
}

/// The ids of the client flags (`cli::ClientArgs`), with their spelling for messages.
const CLIENT_FLAGS: [(&str, &str); 4] = [
    ("url", "--url"),
    ("token", "--token"),
    ("alias", "-a/--alias"),
    ("ca", "--ca"),
];

impl Command {
    /// The client flags of a command that talks to a server.
    fn client_mut(&mut self) -> Option<&mut cli::ClientArgs> {
        Some(match self {
            Command::Bucket(a) => &mut a.client,
            Command::Entry(a) => &mut a.client,
            Command::Attachment(a) => &mut a.client,
            Command::Put(a) => &mut a.client,
            Command::Get(a) => &mut a.client,
            Command::Query(a) => &mut a.client,
            Command::Histogram(a) => &mut a.client,
            Command::Tail(a) => &mut a.client,
            Command::Rm(a) => &mut a.client,
            Command::Label(a) => &mut a.client,
            Command::Token(a) => &mut a.client,
            Command::Link(a) => &mut a.client,
            Command::Replication(a) => &mut a.client,
            Command::Lifecycle(a) => &mut a.client,
            #[cfg(feature = "bench")]
            Command::Loadgen(a) => &mut a.client,
            Command::Serve(_) | Command::Cp(_) | Command::Alias(_) => return None,
            #[cfg(feature = "bench")]
            Command::Bench(_) | Command::BenchLimit(_) => return None,
        })
    }
}

impl Cli {
    /// Parses `argv`; for `serve`, the config file (`--config`, `TSBLOB_CONFIG`) fills in
    /// what neither a flag nor a variable set (`config::config_file_args`).
    pub fn parse_with_config(argv: Vec<std::ffi::OsString>) -> Result<Cli, ParseError> {
        use clap::{CommandFactory, FromArgMatches};
        let command = Cli::command();
        let matches = command
            .clone()
            .try_get_matches_from(&argv)
            .map_err(|e| auth_conflict(&e, &argv, false).unwrap_or(e))?;
        let cli = Cli::from_arg_matches(&matches)?.hand_down_client_flags(&matches)?;
        let Some(("serve", serve)) = matches.subcommand() else {
            return Ok(cli);
        };
        let Some(path) = serve.get_one::<std::path::PathBuf>("config") else {
            return Ok(cli);
        };
        let serve_command = command
            .find_subcommand("serve")
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidSubcommand))?;
        let extra = config::config_file_args(path, serve_command, serve)?;
        let mut all = argv.clone();
        all.extend(extra);
        let matches = command.try_get_matches_from(all).map_err(|error| {
            match auth_conflict(&error, &argv, true) {
                Some(e) => ParseError::Clap(e),
                None => ParseError::ConfigValue {
                    path: path.display().to_string(),
                    error,
                },
            }
        })?;
        Ok(Cli::from_arg_matches(&matches)?)
    }

    /// The client flags given before the command, handed to it: a flag given after the
    /// command too wins (the nearer one); a command that talks to no server (`serve`,
    /// `alias`, `cp`) refuses them as a usage error.
    fn hand_down_client_flags(mut self, matches: &clap::ArgMatches) -> Result<Cli, clap::Error> {
        use clap::parser::ValueSource;
        use clap::CommandFactory;
        let given: Vec<(&str, &str)> = CLIENT_FLAGS
            .into_iter()
            .filter(|(id, _)| matches.value_source(id) == Some(ValueSource::CommandLine))
            .collect();
        if given.is_empty() {
            return Ok(self);
        }
        let Some((name, sub)) = matches.subcommand() else {
            return Ok(self); // (a command is required: clap refused its absence)
        };
        let top = self.client.clone();
        let Some(client) = self.command.client_mut() else {
            let flags: Vec<&str> = given.iter().map(|(_, flag)| *flag).collect();
            return Err(Cli::command().error(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "{} before `{name}`: the flags before a command are the client flags of the commands that talk to a server (`tsblob -a robot1 bucket ls`); `{name}` takes its own flags after it",
                    flags.join(", ")
                ),
            ));
        };
        for (id, _) in given {
            if sub.value_source(id) == Some(ValueSource::CommandLine) {
                continue;
            }
            match id {
                "url" => client.url = top.url.clone(),
                "token" => client.token = top.token.clone(),
                "alias" => client.alias = top.alias.clone(),
                _ => client.ca = top.ca.clone(),
            }
        }
        Ok(self)
    }
}

#[cfg(feature = "bench")]
/// `tsblob loadgen`: the load (`tsblob_compare::loadgen`) and where to send it.
#[derive(Debug, clap::Args)]
pub struct LoadgenArgs {
    #[command(flatten)]
    pub load: tsblob_compare::loadgen::LoadArgs,
    #[command(flatten)]
    pub client: cli::ClientArgs,
}

/// The exit codes (documented in `Cli`'s long help, so in `docs/cli.md`).
pub mod exit {
    pub const FAILURE: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const NOT_FOUND: u8 = 3;
    pub const CONFLICT: u8 = 4;
    pub const AUTH: u8 = 5;
    pub const SERVER: u8 = 6;
    pub const NETWORK: u8 = 7;
}

/// The exit code of a failed command: a [`super::usage::Usage`] error, else the first client error in its
/// chain of causes.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    use tsblob_proto::client::ClientError;
    if e.chain().any(|c| c.is::<super::usage::Usage>()) {
        return exit::USAGE;
    }
    if e.chain().any(|c| c.is::<super::records::CutOff>()) {
        return exit::NETWORK;
    }
    if super::records::is_busy(e) {
        return exit::SERVER;
    }
    let client = e.chain().find_map(|c| c.downcast_ref::<ClientError>());
    match client {
        Some(ClientError::Status { status, .. }) => match status {
            404 => exit::NOT_FOUND,
            409 | 412 => exit::CONFLICT,
            401 | 403 => exit::AUTH,
            429 | 500.. => exit::SERVER,
            _ => exit::FAILURE,
        },
        Some(ClientError::Connect { .. } | ClientError::Body(_)) => exit::NETWORK,
        Some(_) => exit::FAILURE,
        None if e
            .chain()
            .any(|c| c.downcast_ref::<reqwest::Error>().is_some()) =>
        {
            exit::NETWORK
        }
        None => exit::FAILURE,
    }
}

/// Runs one command. A server's error that advises an HTTP request says what to do with
/// the CLI instead (`client::with_cli_advice`).
pub async fn run(command: Command) -> anyhow::Result<()> {
    run_command(command)
        .await
        .map_err(cli::client::with_cli_advice)
}

async fn run_command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::run(args).await,
        Command::Bucket(args) => cli::bucket(args).await,
        Command::Entry(args) => cli::entry(args).await,
        Command::Attachment(args) => cli::attachment(args).await,
        Command::Put(args) => cli::put(args).await,
        Command::Get(args) => cli::get(args).await,
        Command::Query(args) => cli::query(args).await,
        Command::Histogram(args) => cli::histogram(args).await,
        Command::Rm(args) => cli::rm(args).await,
        Command::Label(args) => cli::label(args).await,
        Command::Tail(args) => cli::tail(args).await,
        Command::Token(args) => cli::token(args).await,
        Command::Link(args) => cli::link(args).await,
        Command::Replication(args) => cli::replication(args).await,
        Command::Lifecycle(args) => cli::lifecycle(args).await,
        Command::Cp(args) => cli::cp(args).await,
        Command::Alias(args) => cli::alias(args),
        #[cfg(feature = "bench")]
        Command::Bench(args) => tsblob_compare::run(args).await,
        #[cfg(feature = "bench")]
        Command::Loadgen(args) => {
            tsblob_compare::loadgen::run(cli::connect(&args.client)?, args.load).await
        }
        #[cfg(feature = "bench")]
        Command::BenchLimit(args) => tsblob_compare::limit::serve(args).await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The command tree as `docs/cli.md` shows it: each command's usage line as `--help`
    /// prints it, and each flag's environment variable. Bug "docs/cli.md differs from
    /// --help" (new-user walkthrough B.19): `clap_markdown` reads the tree before clap
    /// builds it, so a command given only its group's global flags had no `[OPTIONS]` in
    /// its usage line (`tsblob bucket rename <NAME> <NEW_NAME>`), and it prints no
    /// `[env: ...]`.
    fn reference_command() -> clap::Command {
        use clap::CommandFactory;
        let mut built = Cli::command();
        built.build();
        for_reference(Cli::command(), &built, "")
    }

    fn for_reference(mut c: clap::Command, built: &clap::Command, parent: &str) -> clap::Command {
        if !parent.is_empty() {
            // `clap_markdown` writes the parent path before the usage it renders.
            let usage = built.clone().render_usage().to_string();
            let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage);
            let own = usage
                .strip_prefix(parent)
                .map_or(usage, str::trim_start)
                .to_string();
            c = c.override_usage(own);
        }
        c = c.mut_args(|a| {
            let Some(env) = a.get_env().map(|e| e.to_string_lossy().into_owned()) else {
                return a;
            };
            if a.is_hide_env_set() {
                return a;
            }
            match (a.get_long_help(), a.get_help()) {
                (Some(long), _) => {
                    let text = format!("{long}\n\n[env: {env}]");
                    a.long_help(text)
                }
                (None, Some(help)) => {
                    let text = format!("{help} [env: {env}]");
                    a.help(text)
                }
                (None, None) => a.help(format!("[env: {env}]")),
            }
        });
        let path = if parent.is_empty() {
            c.get_name().to_string()
        } else {
            format!("{parent} {}", c.get_name())
        };
        let names: Vec<String> = c
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        for name in names {
            if let Some(b) = built.find_subcommand(&name) {
                c = c.mut_subcommand(&name, |s| for_reference(s, b, &path));
            }
        }
        c
    }

    /// The reference shows what `--help` does: `[OPTIONS]` where a group's client flags
    /// apply, the environment variables, the client flags before the command.
    #[test]
    fn docs_cli_md_differed_from_help() {
        let md = clap_markdown::help_markdown_command(&reference_command());
        for line in [
            "**Usage:** `tsblob bucket rename [OPTIONS] <NAME> <NEW_NAME>`",
            "**Usage:** `tsblob replication rm [OPTIONS] <NAME>`",
            "**Usage:** `tsblob lifecycle run [OPTIONS] <BUCKET> <NAME>`",
            "**Usage:** `tsblob alias rm <NAME>`",
            "**Usage:** `tsblob [OPTIONS] <COMMAND>`",
        ] {
            assert!(md.contains(line), "{line}");
        }
        assert!(md.contains("[env: TSBLOB_ALIAS]"));
        assert!(md.contains("[env: TSBLOB_CA]"));
        assert!(md.contains("[env: TSBLOB_LISTEN]"), "serve's variables");
    }

    /// `docs/cli.md` is the clap definition printed as Markdown; this fails when a flag
    /// changed and the page was not regenerated (`TSBLOB_UPDATE_DOCS=1` rewrites it).
    #[test]
    fn cli_reference_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md");
        let generated = format!(
            "<!-- Generated from the clap definitions (server/src/cli/app.rs) by the test\n     cli_reference_is_current: TSBLOB_UPDATE_DOCS=1 cargo test -p tsblob-server --lib cli_reference -->\n\n{}",
            clap_markdown::help_markdown_command(&reference_command())
        );
        if std::env::var_os("TSBLOB_UPDATE_DOCS").is_some() {
            std::fs::write(path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/cli.md is stale: regenerate it with TSBLOB_UPDATE_DOCS=1 cargo test -p tsblob-server --lib cli_reference"
        );
    }

    /// Bug "429 exits 1" (CLI probe of 2026-11-28): a server too busy for the request
    /// (429 too_many_streams, too_many_connections) is "server error or busy", exit 6.
    #[test]
    fn a_busy_servers_429_exited_1() {
        let status = |status| {
            anyhow::Error::new(tsblob_proto::client::ClientError::Status {
                status,
                code: "too_many_streams".into(),
                message: String::new(),
            })
            .context("query")
        };
        assert_eq!(exit_code(&status(429)), exit::SERVER);
        assert_eq!(exit_code(&status(503)), exit::SERVER);
        assert_eq!(exit_code(&status(422)), exit::FAILURE);
        assert_eq!(exit_code(&status(404)), exit::NOT_FOUND);
    }

    #[test]
    fn removals_of_whole_buckets_and_entries_need_force() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        for args in [
            &["tsblob", "bucket", "rm", "b"][..],
            &["tsblob", "entry", "rm", "b", "e"],
            &["tsblob", "rm", "b", "e", "--all"],
        ] {
            // They parse (the refusal is an error at run time, exit 2 as a usage error)...
            assert!(Cli::try_parse_from(args).is_ok(), "{args:?}");
        }
        // ... and --force is a flag of each.
        for args in [
            &["tsblob", "bucket", "rm", "b", "--force"][..],
            &["tsblob", "entry", "rm", "b", "e", "--force"],
            &["tsblob", "rm", "b", "e", "--all", "--force"],
            &["tsblob", "bucket", "ls", "-a", "prod", "--json"],
            &["tsblob", "bucket", "-a", "prod", "ls"],
        ] {
            assert!(Cli::try_parse_from(args).is_ok(), "{args:?}");
        }
    }

    /// Bug "client flags have to come after the subcommand" (new-user walkthrough B.19):
    /// `tsblob -a r2 bucket ls` and `tsblob --url X bucket ls` were unknown arguments.
    #[test]
    fn client_flags_had_to_come_after_the_subcommand() {
        let parse = |args: &[&str]| Cli::parse_with_config(args.iter().map(Into::into).collect());
        let client = |args: &[&str]| match parse(args).unwrap().command {
            Command::Bucket(b) => b.client,
            Command::Put(p) => p.client,
            _ => panic!("{args:?}"),
        };
        let c = client(&["tsblob", "-a", "r2", "bucket", "ls"]);
        assert_eq!(c.alias.as_deref(), Some("r2"));
        let c = client(&[
            "tsblob",
            "--url",
            "http://x:1",
            "--token",
            "t",
            "--ca",
            "ca.pem",
            "put",
            "b",
            "e",
            "f",
        ]);
        assert_eq!(
            (c.url.as_deref(), c.token.as_deref(), c.ca),
            (Some("http://x:1"), Some("t"), Some("ca.pem".into()))
        );
        // Given on both sides: the one after the command wins; the others still come down.
        let c = client(&[
            "tsblob",
            "--url",
            "http://x:1",
            "-a",
            "r2",
            "bucket",
            "ls",
            "--url",
            "http://y:2",
        ]);
        assert_eq!(
            (c.url.as_deref(), c.alias.as_deref()),
            (Some("http://y:2"), Some("r2"))
        );
        let c = client(&["tsblob", "bucket", "-a", "r3", "ls"]);
        assert_eq!(c.alias.as_deref(), Some("r3"));
        // A command that talks to no server refuses them (exit 2, clap's usage error).
        for args in [
            &["tsblob", "--url", "http://x:1", "serve"][..],
            &["tsblob", "-a", "r2", "alias", "ls"],
            &["tsblob", "--token", "t", "cp", "a", "b"],
        ] {
            match parse(args) {
                Err(ParseError::Clap(e)) => {
                    assert_eq!(e.exit_code(), i32::from(exit::USAGE), "{args:?}");
                    assert!(e.to_string().contains("before `"), "{e}");
                }
                _ => panic!("{args:?} should be refused"),
            }
        }
        // `serve --token` is still serve's own.
        match parse(&["tsblob", "serve", "--token", "admin-secret"])
            .unwrap()
            .command
        {
            Command::Serve(s) => assert_eq!(s.token.as_deref(), Some("admin-secret")),
            _ => panic!("not serve"),
        }
    }

    /// Bug "--each-t help hides that the first record is dropped" (new-user walkthrough
    /// B.16): docs/api.md says so of `$each_t`; `tsblob query --help` did not.
    #[test]
    fn each_t_help_hid_that_the_first_record_is_dropped() {
        use clap::CommandFactory;
        let command = Cli::command();
        let query = command.find_subcommand("query").unwrap();
        let each_t = query
            .get_arguments()
            .find(|a| a.get_id() == "each_t")
            .unwrap();
        let help = each_t
            .get_long_help()
            .or(each_t.get_help())
            .unwrap()
            .to_string();
        assert!(
            help.contains("The first record starts the clock and is not kept"),
            "{help}"
        );
    }

    /// The config file's keys come from the clap tree: every flag of `serve` (its default
    /// written as the value) is a key, and a file of them all parses.
    #[test]
    fn every_flag_is_a_config_key() {
        use clap::CommandFactory;
        let command = Cli::command();
        let serve = command.find_subcommand("serve").unwrap();
        let mut file = String::new();
        let mut keys = 0;
        for arg in serve.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if ["config", "help", "token", "no-auth"].contains(&long) {
                continue;
            }
            keys += 1;
            match arg.get_default_values().first() {
                _ if !arg.get_action().takes_values() => {
                    file.push_str(&format!("{long} = false\n"))
                }
                Some(d) => file.push_str(&format!("{long} = {:?}\n", d.to_string_lossy())),
                None => {}
            }
        }
        assert!(keys > 40, "{keys} keys");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tsblob.toml");
        std::fs::write(&path, &file).unwrap();
        let argv = ["tsblob", "serve", "--config", path.to_str().unwrap()];
        let cli = Cli::parse_with_config(argv.iter().map(Into::into).collect()).unwrap();
        let Command::Serve(s) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(s.listen.to_string(), "127.0.0.1:8686");
    }

    fn parse_with(file: &str, flags: &[&str]) -> Result<config::ServeArgs, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tsblob.toml");
        std::fs::write(&path, file).unwrap();
        let mut argv: Vec<std::ffi::OsString> = vec!["tsblob".into(), "serve".into()];
        argv.push("--config".into());
        argv.push(path.into());
        argv.extend(flags.iter().map(Into::into));
        match Cli::parse_with_config(argv) {
            Ok(Cli {
                command: Command::Serve(s),
                ..
            }) => Ok(s),
            Ok(_) => Err("not serve".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn config_file_values_lose_to_flags_and_unknown_keys_are_named() {
        let file = "max-body = \"10KiB\"\nlisten = \"0.0.0.0:9000\"\naccess-log = true\nallowed-hosts = [\"a.example\", \"b.example\"]\nlog-format = \"json\"\nmax-tails = 7\n";
        let s = parse_with(file, &[]).unwrap();
        assert_eq!(s.max_body, 10 << 10);
        assert_eq!(s.listen.to_string(), "0.0.0.0:9000");
        assert!(s.access_log);
        assert_eq!(s.allowed_hosts, ["a.example", "b.example"]);
        assert_eq!(s.log_format, config::LogFormat::Json);
        assert_eq!(s.cost.max_tails, 7);
        // A flag wins over the file.
        let s = parse_with(file, &["--max-body", "1MiB", "--listen", "127.0.0.1:1"]).unwrap();
        assert_eq!(s.max_body, 1 << 20);
        assert_eq!(s.listen.to_string(), "127.0.0.1:1");
        assert_eq!(s.cost.max_tails, 7);
        // Unknown keys are errors naming the key (with the flag's spelling when close).
        let e = parse_with("max_body = \"1MiB\"\n", &[]).unwrap_err();
        assert!(
            e.contains("`max_body`") && e.contains("did you mean `max-body`"),
            "{e}"
        );
        let e = parse_with("colour = true\n", &[]).unwrap_err();
        assert!(e.contains("`colour`"), "{e}");
        let e = parse_with("config = \"x\"\n", &[]).unwrap_err();
        assert!(e.contains("`config`"), "{e}");
        // A value the flag refuses names the file and the key. Bug (newcomer walkthrough
        // of 2026-11-30): it read "a value in the config file F is invalid: error: invalid
        // value 'lots' for '--max-body <MAX_BODY>': … For more information, try '--help'."
        let e = parse_with("max-body = \"lots\"\n", &[]).unwrap_err();
        assert!(
            e.starts_with("the config file ")
                && e.contains(": max-body = \"lots\" is invalid: ")
                && e.contains("is not a size"),
            "{e}"
        );
        assert!(
            !e.contains("error:") && !e.contains("--help") && !e.contains("<MAX_BODY>"),
            "{e}"
        );
        let e = parse_with("log-format = \"xml\"\n", &[]).unwrap_err();
        assert!(e.contains("log-format = \"xml\" is invalid"), "{e}");
        assert!(!e.contains("error:"), "{e}");
        let e = parse_with("access-log = \"yes\"\n", &[]).unwrap_err();
        assert!(
            e.contains("access-log") && e.contains("true or false"),
            "{e}"
        );
        let e = parse_with("[serve]\nlisten = 1\n", &[]).unwrap_err();
        assert!(e.contains("`serve`"), "{e}");
    }
}
