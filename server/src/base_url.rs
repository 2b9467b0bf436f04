//! One check for a URL given as the base of other URLs: a link's `base_url` (`http/links.rs`)
//! and a replication task's `dst_url` (`replication/mod.rs`). Each caller words the advice
//! for its own field; what is refused, and why, is decided here once.

use thiserror::Error;

/// Why a text is not a base URL. Its message says what is wrong, not how the caller's
/// field is fixed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BaseUrlError {
    /// The URL parser drops tabs and line breaks and reads `\` as `/`: the URL called would
    /// not be the one stored and shown, and a line break would go raw into the log (hostile
    /// probe of 2026-11-29: `.../a b\r\nX-Inj: 1` forged log lines).
    #[error(
        "holds {0:?}: use printable ASCII without spaces or '\\' (percent-encode what needs it)"
    )]
    Unprintable(char),
    #[error("is not a URL ({0})")]
    NotAUrl(#[from] url::ParseError),
    #[error("is a {0}:// URL: give an http:// or https:// URL with a host")]
    NotHttp(String),
    /// Credentials in a base are answered to every reader of what holds it and written to
    /// the log with every error.
    #[error("carries credentials (user:password@)")]
    Credentials,
    #[error("has a query or fragment (?... or #...): a base has neither")]
    QueryOrFragment,
}

impl BaseUrlError {
    /// The URL as an error message may quote it: none that may carry a secret (credentials,
    /// a query such as `?token=`), which the message must not echo back into logs and
    /// answers (`replication_task_with_unsendable_token_or_url_credentials_was_stored`).
    pub fn quoted(&self, s: &str) -> String {
        // Whatever the check that failed first: `http://u:secret@h:99999` fails as no URL
        // (its port) before its credentials are looked at (review of 2026-11-30).
        let may_hold_secret = matches!(self, Self::Credentials | Self::QueryOrFragment)
            || s.contains(['@', '?', '#']);
        if may_hold_secret {
            "(not repeated here)".to_string()
        } else {
            tsblob_proto::quote_short(s)
        }
    }
}

/// Parses `s` as an http or https base URL: printable ASCII without `\`, a host, no
/// credentials, no query or fragment.
pub fn check(s: &str) -> Result<reqwest::Url, BaseUrlError> {
    if let Some(c) = s.chars().find(|c| !c.is_ascii_graphic() || *c == '\\') {
        return Err(BaseUrlError::Unprintable(c));
    }
    let url = reqwest::Url::parse(s)?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(BaseUrlError::NotHttp(url.scheme().to_string()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(BaseUrlError::Credentials);
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(BaseUrlError::QueryOrFragment);
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_base_url_refuses() {
        for (bad, want) in [
            ("http://h:1/a b\r\nX-Inj: 1", BaseUrlError::Unprintable(' ')),
            ("http://h\t/", BaseUrlError::Unprintable('\t')),
            ("http://h:1\\@evil:2", BaseUrlError::Unprintable('\\')),
            ("http://h/é", BaseUrlError::Unprintable('é')),
            ("ftp://h", BaseUrlError::NotHttp("ftp".into())),
            ("http://a:b@evil.example", BaseUrlError::Credentials),
            ("http://u@h", BaseUrlError::Credentials),
            ("http://h/?a=1", BaseUrlError::QueryOrFragment),
            ("http://h/#x", BaseUrlError::QueryOrFragment),
        ] {
            assert_eq!(check(bad).unwrap_err(), want, "{bad:?}");
        }
        assert!(matches!(check("nope"), Err(BaseUrlError::NotAUrl(_))));
        let e = check("http://u:secret@h").unwrap_err();
        assert!(!e.quoted("http://u:secret@h").contains("secret"));
        let e = check("http://h/?token=secret").unwrap_err();
        assert!(!e.quoted("http://h/?token=secret").contains("secret"));
        for bad in ["http://u:secret@h:99999", "http://h/?token=a secret"] {
            let e = check(bad).unwrap_err();
            assert!(!e.quoted(bad).contains("secret"), "{e:?}");
        }
        assert_eq!(
            check("https://cloud.example:8686/prefix").unwrap().as_str(),
            "https://cloud.example:8686/prefix"
        );
    }
}
