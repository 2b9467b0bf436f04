//! The HTTP client every part of tsblob builds (the CLI, `tsblob cp`, replication senders,
//! the bench): `http://` and `https://` servers, TLS by rustls (aws-lc-rs crypto, bundled:
//! no system OpenSSL), trusting the Mozilla root certificates of `webpki-root-certs` (the
//! same on every machine, whatever the system has) plus, when given, the certificates of a
//! PEM bundle: a private CA, or a destination's self-signed certificate. It follows no
//! redirect: a server that answers 3xx gets that answer back to the caller, which reports
//! it as an error ([`crate::outbound::redirect_message`]). A followed redirect sent a
//! replication task's token and records to whatever host a destination named, and copied
//! an internal page into the task's status.

use std::time::Duration;

use reqwest::{Certificate, ClientBuilder};
use thiserror::Error;

/// How long a connection may take to open ([`builder`] sets it; callers may shorten it).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client of the API ([`crate::client::Client::with_ca`]: the CLI, `tsblob cp`)
/// waits for the next bytes of an answer: per read, not for the whole answer, so a long
/// stream goes on as long as bytes keep coming. A live tail's server sends a heartbeat after
/// 15 s idle by default (the CLI raises this bound above a longer `--heartbeat`), so a
/// silent server is one that stopped answering. `TSBLOB_READ_TIMEOUT` (seconds) overrides it.
/// Not set by [`builder`] itself: replication senders bound their requests with their own
/// `--replication-timeout`.
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// [`READ_TIMEOUT`], or `TSBLOB_READ_TIMEOUT` (whole seconds, at least 1) when set.
pub fn read_timeout() -> Duration {
    std::env::var("TSBLOB_READ_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(READ_TIMEOUT, Duration::from_secs)
}

/// A CA bundle that cannot be used.
#[derive(Debug, Error)]
pub enum CaError {
    #[error("the CA bundle is not PEM certificates ({0}): give the CA's certificate(s), -----BEGIN CERTIFICATE----- blocks")]
    NotPem(String),
    #[error("the CA bundle holds no certificate: give the CA's certificate(s), -----BEGIN CERTIFICATE----- blocks")]
    Empty,
}

/// The certificates of a PEM bundle (at least one).
pub fn parse_ca(pem: &[u8]) -> Result<Vec<Certificate>, CaError> {
    let certs = Certificate::from_pem_bundle(pem).map_err(|e| CaError::NotPem(error_chain(&e)))?;
    if certs.is_empty() {
        return Err(CaError::Empty);
    }
    Ok(certs)
}

/// A client builder trusting the Mozilla roots and the certificates of `ca_pem`, following
/// no redirect, giving up on a connection not open after [`CONNECT_TIMEOUT`].
pub fn builder(ca_pem: Option<&[u8]>) -> Result<ClientBuilder, CaError> {
    let mut roots: Vec<Certificate> = webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .filter_map(|der| Certificate::from_der(der).ok())
        .collect();
    if let Some(pem) = ca_pem {
        roots.extend(parse_ca(pem)?);
    }
    Ok(reqwest::Client::builder()
        .tls_certs_only(roots)
        .redirect(reqwest::redirect::Policy::none())
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_TIMEOUT))
}

/// An error with its causes (`reqwest::Error` shows only its own message: "error sending
/// request", without the TLS or connection failure under it).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let m = s.to_string();
        if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        cur = s.source();
    }
    // (once: an error whose text holds the chain of another already has it)
    if let Some((_, hint)) = HINTS
        .iter()
        .find(|(says, hint)| out.contains(says) && !out.contains(hint))
    {
        out.push_str(" (");
        out.push_str(hint);
        out.push(')');
    }
    out
}

/// What a few opaque errors under a request mean, in words (the hostile probe of
/// 2026-11-28 met each: a certificate made by the `openssl req -x509` of the docs before
/// it named `CA:FALSE`, a plain `http://` URL to a TLS listener, a server sending a huge
/// answer head).
const HINTS: &[(&str, &str)] = &[
    (
        "CaUsedAsEndEntity",
        "the server's certificate is a CA certificate (basicConstraints CA:TRUE), which TLS \
         clients refuse as a server's own: make it with `-addext \
         basicConstraints=critical,CA:FALSE` (docs/operations.md, TLS)",
    ),
    // (newcomer walkthrough of 2026-11-30: `UnknownIssuer` came with no hint)
    (
        "UnknownIssuer",
        "the server's certificate is not signed by a CA this client trusts, as with a private \
         CA or a self-signed certificate: give it with --ca FILE or TSBLOB_CA (a replication \
         task: --dst-ca)",
    ),
    (
        "invalid HTTP version parsed",
        "the server did not answer in HTTP: if it serves TLS (--tls-cert), use an https:// URL",
    ),
    (
        "message head is too large",
        "the server was reached, but its answer's head is larger than a client takes",
    ),
];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn opaque_errors_are_explained() {
        #[derive(Debug, thiserror::Error)]
        #[error("error sending request")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other(
            "invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))",
        ));
        let text = error_chain(&e);
        assert!(
            text.contains("basicConstraints=critical,CA:FALSE"),
            "{text}"
        );
        let text = error_chain(&Outer(std::io::Error::other(
            "invalid peer certificate: UnknownIssuer",
        )));
        assert!(
            text.ends_with("give it with --ca FILE or TSBLOB_CA (a replication task: --dst-ca))"),
            "{text}"
        );
        let plain = error_chain(&Outer(std::io::Error::other("connection refused")));
        assert_eq!(plain, "error sending request: connection refused");
    }

    #[test]
    fn ca_bundles_are_checked() {
        assert!(matches!(parse_ca(b"hello"), Err(CaError::Empty)));
        assert!(matches!(
            parse_ca(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
            Err(CaError::NotPem(_))
        ));
        assert!(builder(None).unwrap().build().is_ok());
    }
}
