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
    // Blanks around it (an env file's CRLF line end) are not part of it.
    let url = url.trim().to_string();
    // The one rule for a base URL (`crate::base_url`). Bug (ops probe of 2026-11-29): a URL
    // with `user:pw@` sent Basic auth in place of --token (a 401 that named neither), one
    // with `?token=` failed as "the answer is not JSON".
    if let Err(e) = crate::base_url::check(&url) {
        let advice = match e {
            crate::base_url::BaseUrlError::Credentials
            | crate::base_url::BaseUrlError::QueryOrFragment => {
                "give the server's address alone, e.g. --url http://127.0.0.1:8686, and a token with --token or TSBLOB_TOKEN"
            }
            _ => "give e.g. --url http://127.0.0.1:8686 (or https:// for a server started with --tls-cert)",
        };
        return Err(Usage(format!("the server URL {} {e}: {advice}", e.quoted(&url))).into());
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

/// The server's advice for an HTTP client, as the CLI's: each pair is what the server's
/// message says and what a CLI user does instead. Bug "CLI errors give HTTP advice"
/// (new-user walkthrough B.11): a 401 said "send `Authorization: Bearer <token>`", the last
/// token's removal "confirm with DELETE /api/v1/tokens/boss?disable_auth=true", a missing
/// task "list them with GET /api/v1/replications".
fn cli_advice(message: &str) -> Option<String> {
    /// The text of `message` between `before` and `after` (a name the server put there).
    fn between<'a>(message: &'a str, before: &str, after: &str) -> Option<&'a str> {
        let rest = &message[message.find(before)? + before.len()..];
        Some(&rest[..rest.find(after)?])
    }
    let mut out = message.to_string();
    let replace = |out: &mut String, from: &str, to: &str| {
        if out.contains(from) {
            *out = out.replacen(from, to, 1);
        }
    };
    replace(
        &mut out,
        "send `Authorization: Bearer <token>`",
        "give one with --token, TSBLOB_TOKEN, or a saved alias (-a ALIAS, made by `tsblob alias add`)",
    );
    if let Some(name) = between(
        message,
        "confirm with DELETE /api/v1/tokens/",
        "?disable_auth=true",
    ) {
        replace(
            &mut out,
            &format!("confirm with DELETE /api/v1/tokens/{name}?disable_auth=true"),
            &format!("confirm with `tsblob token rm {name} --disable-auth`"),
        );
    }
    if let Some(name) = between(message, "(POST /api/v1/tokens/", "/rotate)") {
        replace(
            &mut out,
            &format!("(POST /api/v1/tokens/{name}/rotate)"),
            &format!("(`tsblob token rotate {name}`)"),
        );
    }
    replace(
        &mut out,
        "list them with GET /api/v1/replications",
        "list them with `tsblob replication ls`",
    );
    if let Some(bucket) = between(message, "bucket \"", "\" has no lifecycle rule") {
        replace(
            &mut out,
            "(GET its lifecycle rules to list them)",
            &format!("(list them with `tsblob lifecycle ls {bucket}`)"),
        );
    }
    if message.contains("dst_url moves it from") {
        for (what, flags) in [
            ("dst_token and dst_ca", "--dst-token and --dst-ca"),
            ("dst_token", "--dst-token"),
            ("dst_ca", "--dst-ca"),
        ] {
            replace(
                &mut out,
                &format!("give {what} for the new destination in the same request (\"\" for none)"),
                &format!("give {flags} for the new destination in the same command"),
            );
        }
    }
    (out != message).then_some(out)
}

/// Rewrites the server's advice in a failed command's error into the CLI's ([`cli_advice`]),
/// in place: the status, the code and the rest of the message stay, and so does the chain
/// of causes (the exit code is read from it).
pub fn with_cli_advice(mut e: anyhow::Error) -> anyhow::Error {
    if let Some(tsblob_proto::client::ClientError::Status { message, .. }) =
        e.downcast_mut::<tsblob_proto::client::ClientError>()
    {
        if let Some(m) = cli_advice(message) {
            *message = m;
        }
    }
    e
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tsblob_proto::client::ClientError;

    fn status(status: u16, code: &str, message: &str) -> anyhow::Error {
        anyhow::Error::new(ClientError::Status {
            status,
            code: code.into(),
            message: message.into(),
        })
    }

    /// Bug (docs walkthrough): a task moved to another origin was told "give dst_token".
    #[test]
    fn a_task_moved_to_another_origin_was_told_the_api_field() {
        let m = "task \"t\": dst_url moves it from http://a:1 to http://b:2, and the stored dst_token was given for http://a:1 only (it is never sent elsewhere): give dst_token for the new destination in the same request (\"\" for none)";
        let out = cli_advice(m).unwrap();
        assert!(
            out.ends_with("give --dst-token for the new destination in the same command"),
            "{out}"
        );
    }

    /// Bug "CLI errors give HTTP advice instead of CLI advice" (new-user walkthrough B.11).
    #[test]
    fn cli_errors_gave_http_advice() {
        let e = with_cli_advice(
            status(
                401,
                "unauthorized",
                "this server needs a token: send `Authorization: Bearer <token>`",
            )
            .context("listing buckets"),
        );
        let text = format!("{e:#}");
        assert!(
            text.contains("401 unauthorized: this server needs a token: give one with --token, TSBLOB_TOKEN, or a saved alias (-a ALIAS"),
            "{text}"
        );
        assert!(!text.contains("Authorization"), "{text}");
        // (the chain and its ClientError stay: the exit code is read from them)
        assert!(e.chain().any(|c| matches!(
            c.downcast_ref::<ClientError>(),
            Some(ClientError::Status { status: 401, .. })
        )));

        let e = with_cli_advice(status(409, "last_token", "\"boss\" is the last token and the server has no --token admin token: removing it would switch authentication off and open every route to anyone. Create another token first, or confirm with DELETE /api/v1/tokens/boss?disable_auth=true"));
        let text = e.to_string();
        assert!(
            text.starts_with("409 last_token: \"boss\" is the last token"),
            "{text}"
        );
        assert!(
            text.ends_with("or confirm with `tsblob token rm boss --disable-auth`"),
            "{text}"
        );

        let e = with_cli_advice(status(
            404,
            "replication_not_found",
            "there is no replication task \"r1\": list them with GET /api/v1/replications",
        ));
        assert_eq!(
            e.to_string(),
            "404 replication_not_found: there is no replication task \"r1\": list them with `tsblob replication ls`"
        );

        let e = with_cli_advice(status(401, "token_expired", "token \"cam\" expired: it was not used for more than its ttl of 5 s (last used x): ask an administrator to rotate it (POST /api/v1/tokens/cam/rotate) or for a new token"));
        assert!(
            e.to_string()
                .contains("rotate it (`tsblob token rotate cam`) or for a new token"),
            "{e}"
        );

        let e = with_cli_advice(status(
            404,
            "rule_not_found",
            "bucket \"b1\" has no lifecycle rule \"r\" (GET its lifecycle rules to list them)",
        ));
        assert!(
            e.to_string()
                .ends_with("(list them with `tsblob lifecycle ls b1`)"),
            "{e}"
        );

        // Other messages are left as they are.
        let plain = "bucket \"x\" does not exist: create it first";
        assert_eq!(
            with_cli_advice(status(404, "bucket_not_found", plain)).to_string(),
            format!("404 bucket_not_found: {plain}")
        );
    }
}
