//! Reading the answers of servers tsblob calls out to (a replication destination, the
//! target of `tsblob cp`, the server of a CLI command) as if they were hostile: an answer
//! is read up to a named limit, streamed and cut there (an endless body from a compromised
//! destination took a source from 27 MB to 1 GB in seconds); a redirect is never followed
//! (the client builder of [`crate::tls`] refuses them) and is reported by its status and
//! the host of its `Location` only; and an error answer is described by its status plus,
//! at most, the `code` and `message` of a tsblob error document (`{"error": {"code",
//! "message"}}`), each made one short line of printable characters. Its raw body never
//! reaches a status field, a log line or a terminal (the first 300 bytes of an internal
//! page a destination redirected to were copied into a task's `last_error`).

use bytes::{Bytes, BytesMut};
use reqwest::{Response, StatusCode};
use thiserror::Error;

/// The most of an error answer read: a tsblob error document is far smaller.
pub const ERROR_BODY_MAX: usize = 64 << 10;
/// The most of a JSON answer read by default (a record write's `{"ts": ...}`, a task's
/// status...).
pub const JSON_ANSWER_MAX: usize = 1 << 20;
/// The most characters of an error message kept from an answer.
pub const MESSAGE_MAX: usize = 512;
/// The most characters of an error code kept from an answer.
const CODE_MAX: usize = 64;

/// The bounds a caller reads answers with (`tsblob serve`'s `--outbound-answer-max`,
/// `--outbound-error-max`, `--outbound-message-max` for replication; the defaults, the
/// constants above, elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The most of a JSON answer read ([`JSON_ANSWER_MAX`]).
    pub answer_max: usize,
    /// The most of an error answer read, also the base of a batch answer's bound
    /// ([`ERROR_BODY_MAX`]).
    pub error_max: usize,
    /// The most characters of an error message kept ([`MESSAGE_MAX`]).
    pub message_max: usize,
}

impl Bounds {
    pub const DEFAULT: Bounds = Bounds {
        answer_max: JSON_ANSWER_MAX,
        error_max: ERROR_BODY_MAX,
        message_max: MESSAGE_MAX,
    };
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds::DEFAULT
    }
}

/// An answer that could not be read whole.
#[derive(Debug, Error)]
pub enum ReadError {
    /// The answer is longer than the limit: it was cut off there (and the connection
    /// dropped).
    #[error("the answer is over {limit} bytes, the most read from a server: it was cut off")]
    TooLarge { limit: usize },
    /// The connection failed (or timed out) while the answer was read.
    #[error("reading the answer failed: {}", crate::tls::error_chain(.0))]
    Body(#[source] reqwest::Error),
}

/// The body of `resp`, read as it arrives up to `limit` bytes: an answer announcing more
/// (`Content-Length`) is refused before a byte is read, one that sends more is cut at the
/// limit. A timeout set on the request covers this read too.
pub async fn read_bounded(mut resp: Response, limit: usize) -> Result<Bytes, ReadError> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(ReadError::TooLarge { limit });
    }
    let mut buf = BytesMut::new();
    while let Some(chunk) = resp.chunk().await.map_err(ReadError::Body)? {
        if buf.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge { limit });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// `s` as one line of at most `max` printable characters: control characters (line
/// breaks, escape sequences) become spaces, runs of spaces one, and a longer text is cut
/// with `...`.
pub fn one_line(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max + 3));
    let mut space = false;
    for (n, c) in s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .filter(|c| {
            let dup = *c == ' ' && space;
            space = *c == ' ';
            !dup
        })
        .enumerate()
    {
        if n == max {
            out.push_str("...");
            break;
        }
        out.push(c);
    }
    out.trim().to_string()
}

/// The `code` and `message` of a tsblob error document (`{"error": {"code", "message"}}`),
/// each made one short line (a code that is not `[a-z0-9_]` is dropped); `None` for
/// anything else.
pub fn error_fields(body: &[u8]) -> Option<(Option<String>, String)> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let e = v.get("error")?;
    let message = one_line(e.get("message")?.as_str()?, MESSAGE_MAX);
    let code = e
        .get("code")
        .and_then(|c| c.as_str())
        .filter(|c| {
            !c.is_empty()
                && c.len() <= CODE_MAX
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
        .map(str::to_string);
    Some((code, message))
}

/// A redirect answer described by the host its `Location` names (resolved against the URL
/// asked for), never the rest of that URL (its path and query may carry what the
/// redirecting server should not pass on) nor the body.
pub fn redirect_message(resp: &Response) -> String {
    let host = resp
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|l| l.to_str().ok())
        .and_then(|l| resp.url().join(l).ok())
        .and_then(|u| {
            u.host_str().map(|h| match u.port() {
                Some(p) => format!("{h}:{p}"),
                None => h.to_string(),
            })
        });
    let to = match host {
        Some(h) => format!("a redirect to host {}", one_line(&h, 255)),
        None => "a redirect without a usable Location".to_string(),
    };
    format!(
        "{to}: redirects are not followed (give the server's own URL, the one that answers without redirecting)"
    )
}

/// An error answer (any status but 2xx) as its status, the code of its tsblob error
/// document if it has a usable one, and one line saying what it was: the document's
/// message; for a redirect, [`redirect_message`]; for anything else its size and content
/// type only. The body is read up to [`ERROR_BODY_MAX`].
pub async fn describe_error(resp: Response) -> (StatusCode, Option<String>, String) {
    let status = resp.status();
    if status.is_redirection() {
        return (status, None, redirect_message(&resp));
    }
    let ct = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| one_line(v, 64));
    let (code, message) = match read_bounded(resp, ERROR_BODY_MAX).await {
        Ok(body) => match error_fields(&body) {
            Some(fields) => fields,
            None if body.is_empty() => (None, "no error document".to_string()),
            None => (
                None,
                format!(
                    "{} bytes{}, not a tsblob error document",
                    body.len(),
                    ct.map_or_else(String::new, |c| format!(" of {c}"))
                ),
            ),
        },
        Err(e) => (None, e.to_string()),
    };
    (status, code, message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn foreign_text_becomes_one_short_line() {
        assert_eq!(one_line("a\r\n\x1b[31mb\t\tc  ", 100), "a [31mb c");
        assert_eq!(
            one_line(&"x".repeat(600), 10),
            format!("{}...", "x".repeat(10))
        );
        assert_eq!(one_line("ééé", 2), "éé...");
    }

    #[test]
    fn only_the_fields_of_an_error_document_are_kept() {
        let (code, m) =
            error_fields(br#"{"error":{"code":"bucket_not_found","message":"no\nbucket"}}"#)
                .unwrap();
        assert_eq!(code.as_deref(), Some("bucket_not_found"));
        assert_eq!(m, "no bucket");
        let (code, _) = error_fields(br#"{"error":{"code":"<script>","message":"m"}}"#).unwrap();
        assert_eq!(code, None);
        assert!(error_fields(b"<html>secret internal page</html>").is_none());
        assert!(error_fields(br#"{"results":[]}"#).is_none());
    }
}
