//! Where the CLI connects: `--url`/`--token`, a saved profile (`--alias`/`-a`, see
//! [`super::profiles`]), or `TSBLOB_URL`/`TSBLOB_TOKEN`, resolved into a
//! `tsblob_proto::client::Client`.

use anyhow::Context;
pub use tsblob_proto::client::{check, entry_seg, seg, Client};

use super::profiles;
use super::usage::Usage;

/// The server used when nothing names one.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8686";

/// Where the server is and how to authenticate. `--url` and `--token` win over `--alias`,
/// which wins over `TSBLOB_URL` and `TSBLOB_TOKEN`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientArgs {
    /// Server URL [default: $TSBLOB_URL, else http://127.0.0.1:8686].
    #[arg(long, global = true)]
    pub url: Option<String>,
    /// Bearer token (the server's --token, or one made with `tsblob token create`)
    /// [default: the alias's token, else $TSBLOB_TOKEN].
    #[arg(long, global = true)]
    pub token: Option<String>,
    /// A saved server profile (`tsblob alias add`): its URL and token.
    #[arg(long, short = 'a', env = "TSBLOB_ALIAS", global = true)]
    pub alias: Option<String>,
    /// PEM file of certificates to trust for an https:// server besides the Mozilla roots
    /// (a private CA, a self-signed certificate).
    #[arg(long, env = "TSBLOB_CA", global = true)]
    pub ca: Option<std::path::PathBuf>,
}

impl ClientArgs {
    /// The URL and token these arguments name.
    pub fn resolve(&self) -> anyhow::Result<(String, Option<String>)> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let (url, token) = match &self.alias {
            Some(name) => {
                let p = profiles::Profiles::load()?.get(name)?;
                (p.url, p.token)
            }
            None => (
                env("TSBLOB_URL").unwrap_or_else(|| DEFAULT_URL.to_string()),
                env("TSBLOB_TOKEN"),
            ),
        };
        Ok((
            self.url.clone().unwrap_or(url),
            self.token.clone().or(token),
        ))
    }
}

/// The client these arguments name. An answer sending nothing for
/// `tsblob_proto::tls::READ_TIMEOUT` (60 s; `TSBLOB_READ_TIMEOUT` seconds) fails.
pub fn connect(args: &ClientArgs) -> anyhow::Result<Client> {
    connect_reading(args, None)
}

/// The same, waiting at least `min_idle` for the next bytes of an answer (a live tail whose
/// heartbeats come further apart than the read timeout).
pub fn connect_reading(
    args: &ClientArgs,
    min_idle: Option<std::time::Duration>,
) -> anyhow::Result<Client> {
    let (url, token) = args.resolve()?;
    match reqwest::Url::parse(&url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        Ok(u) => {
            return Err(Usage(format!(
                "the server URL {url:?} is {}://: tsblob speaks http:// and https://",
                u.scheme()
            ))
            .into())
        }
        Err(e) => {
            return Err(Usage(format!(
                "the server URL {url:?} is not a URL ({e}): give e.g. --url http://127.0.0.1:8686"
            ))
            .into())
        }
    }
    let ca = match &args.ca {
        Some(path) => Some(
            std::fs::read(path).with_context(|| format!("cannot read --ca {}", path.display()))?,
        ),
        None => None,
    };
    let idle = tsblob_proto::tls::read_timeout().max(min_idle.unwrap_or_default());
    Client::with_ca_read_timeout(&url, token.as_deref(), ca.as_deref(), idle)
        .context("cannot set up the HTTP client")
}
