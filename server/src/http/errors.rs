//! The one error type of the HTTP layer: a status, a stable code and a message that says
//! how to fix the request. Every engine error maps to exactly one (status, code) pair; the
//! table in `docs/api.md` is this module written out.
//!
//! A server error (5xx other than 507) never tells the client what failed inside: engine
//! messages name block files and folders of the server. Its details go to the log under a
//! reference, and the client gets `internal error (ref <id>): see the server log`.
//!
//! Errors are logged in one layer: when they are answered ([`AppError::answer`], which
//! every answer's rendering goes through), not when they are built, so an error that is
//! made and then handled (retried, mapped, dropped) leaves no log line.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use tsblob_proto::ErrorCode;
use tsblob_storage::{
    AttachmentError, BucketError, Error, NameError, NotFound, QueryError, RenameError, TierError,
    WriteError,
};

/// An error answered to a client as `{"error": {"code", "message"}}`.
#[derive(Debug, Clone)]
pub struct AppError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
    /// What the log gets once the error is answered (`AppError::answer`): a server error's
    /// own text under the reference its message names, or an engine error's text the
    /// message leaves out.
    log: Option<Arc<Logged>>,
}

/// A log line kept for when its error is answered.
#[derive(Debug)]
struct Logged {
    level: tracing::Level,
    /// The reference a server error's message names.
    reference: Option<String>,
    text: String,
}

pub use crate::answers::{ErrorBody, ErrorDetail};

impl AppError {
    /// An error; a server error's message is replaced by a fresh reference, under which it
    /// is logged once answered (see the module documentation).
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> AppError {
        let message = message.into();
        // 507 (disk full), 503 (object store unavailable) and 500 `tier_damaged` messages
        // are built from what the client may know (see `From<Error>`), and say what to do;
        // so is 501 (a transfer coding the server does not decode: `headers::chunked_only`).
        if status.is_server_error()
            && status != StatusCode::INSUFFICIENT_STORAGE
            && status != StatusCode::SERVICE_UNAVAILABLE
            && status != StatusCode::NOT_IMPLEMENTED
            && code != ErrorCode::TierDamaged
        {
            let reference = format!("{:08x}", rand::random::<u32>());
            // Bug (new-user walkthrough): a damaged record's 500 said only "see the server
            // log"; what to do is known without its path.
            let answer = if code == ErrorCode::CorruptRecord {
                format!("stored data is damaged on disk (it fails its checksum): do not retry; remove the damaged record (or attachment) and write it again, or restore it from a replica or backup; the server log names the file and offset under ref {reference}")
            } else {
                format!("internal error (ref {reference}): see the server log")
            };
            return AppError {
                status,
                code,
                message: answer,
                log: None,
            }
            .logging(tracing::Level::ERROR, Some(reference), message);
        }
        // A full disk or quota is the operator's concern: logged, message and all.
        let log = (status == StatusCode::INSUFFICIENT_STORAGE).then(|| {
            Arc::new(Logged {
                level: tracing::Level::WARN,
                reference: None,
                text: message.clone(),
            })
        });
        AppError {
            status,
            code,
            message,
            log,
        }
    }

    /// The error with what the log gets once it is answered (instead of anything before).
    fn logging(
        mut self,
        level: tracing::Level,
        reference: Option<String>,
        text: String,
    ) -> AppError {
        self.log = Some(Arc::new(Logged {
            level,
            reference,
            text,
        }));
        self
    }

    /// The error as its client gets it, `{code, message}`: every answer (a response, a
    /// stream's error frame, a batch record's result or header, a replication task's
    /// status) is rendered through here, which logs what the log gets of it.
    pub fn answer(&self) -> ErrorDetail {
        self.log();
        ErrorDetail {
            code: self.code.as_str().to_string(),
            message: self.message.clone(),
        }
    }

    /// Logs what the log gets of the error: for an error that ends a stream without an
    /// answer of its own (a cut), the rest through [`AppError::answer`].
    pub fn log(&self) {
        if let Some(l) = &self.log {
            let (code, reference) = (self.code.as_str(), l.reference.as_deref().unwrap_or(""));
            match l.level {
                // Throttled per code: a client repeating a refused request (a full quota,
                // `--max-entries`) logged a line each time (`log_throttle`).
                tracing::Level::ERROR => {
                    crate::throttled!(error, code, code, reference, "{}", l.text)
                }
                tracing::Level::WARN => crate::throttled!(warn, code, code, "{}", l.text),
                _ => tracing::debug!(code, "{}", l.text),
            }
        }
    }
    pub fn bad_request(message: impl Into<String>) -> AppError {
        AppError::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, message)
    }
    /// A 422 with its own code: a well-formed request tsblob does not carry out.
    pub fn unprocessable(code: ErrorCode, message: impl Into<String>) -> AppError {
        AppError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }
    pub fn invalid_timestamp(message: impl Into<String>) -> AppError {
        AppError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::InvalidTimestamp,
            message,
        )
    }
    pub fn invalid_label(message: impl Into<String>) -> AppError {
        AppError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::InvalidLabel,
            message,
        )
    }
    pub fn invalid_settings(message: impl Into<String>) -> AppError {
        AppError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::InvalidSettings,
            message,
        )
    }
    pub fn too_large(limit: u64) -> AppError {
        AppError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::PayloadTooLarge,
            format!(
                "the request body is over the server's limit of {limit} bytes: send less, or start the server with a larger --max-body"
            ),
        )
    }
    /// 503 `busy`: a bound of the server (memory, streams) is spent right now; answered
    /// with a `Retry-After` of [`RETRY_AFTER_SECS`].
    pub fn busy(message: impl Into<String>) -> AppError {
        AppError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Busy, message)
    }
    /// 429 `too_many_streams`: the caller's own share of a bound is spent; with a
    /// `Retry-After` too.
    pub fn too_many(message: impl Into<String>) -> AppError {
        AppError::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::TooManyStreams,
            message,
        )
    }
    /// Whether the answer carries a `Retry-After` (a bound that frees itself).
    pub fn retry_later(&self) -> bool {
        self.code == ErrorCode::Busy || self.status == StatusCode::TOO_MANY_REQUESTS
    }
    pub fn internal(message: impl Into<String>) -> AppError {
        AppError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            message,
        )
    }
    pub fn not_found(message: impl Into<String>) -> AppError {
        AppError::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, message)
    }

    /// The error document (through [`AppError::answer`]: logged).
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.answer(),
        }
    }

    /// The error document as JSON bytes (for error frames in streams).
    pub fn json_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.body()).unwrap_or_else(|_| b"{}".to_vec())
    }

    /// The error as a whole HTTP/1.1 answer that closes its connection, for the places
    /// that answer before (or without) hyper and axum: a connection over the caps
    /// (`connections.rs`), a request head hyper could not parse (`head_errors.rs`). Its
    /// message also goes in `x-reduct-error` (ASCII only), for ReductStore's clients.
    pub fn raw_answer(&self) -> Vec<u8> {
        let body = self.json_bytes();
        let said: String = self
            .message
            .chars()
            .map(|c| {
                if c.is_ascii() && !c.is_ascii_control() {
                    c
                } else {
                    ' '
                }
            })
            .collect();
        let retry = if self.retry_later() {
            format!("retry-after: {RETRY_AFTER_SECS}\r\n")
        } else {
            String::new()
        };
        let mut out = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-content-type-options: nosniff\r\n{retry}x-reduct-error: {said}\r\nconnection: close\r\n\r\n",
            self.status.as_u16(),
            self.status.canonical_reason().unwrap_or(""),
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let retry = self.retry_later();
        // A body refused as too large, or one that stalled (408), is mostly unread: the
        // connection cannot carry another request. Bug "the next call fails after a stall"
        // (ReductStore parity probe of 2026-11-29): after a 408 the connection stayed open,
        // and the client's next, unrelated request was read as the rest of the body (400).
        let too_large = matches!(
            self.status,
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT
        );
        let mut resp = (self.status, Json(self.body())).into_response();
        if retry {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(RETRY_AFTER_SECS),
            );
        }
        if too_large {
            // hyper closes the connection after this answer; saying so lets a client drop
            // it instead of finding out on its next request.
            resp.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        resp
    }
}

/// The `Retry-After` (seconds) of a `busy` or `too_many_streams` answer.
pub const RETRY_AFTER_SECS: u64 = 1;

/// Turns the plain-text rejections of axum's extractors (a path that is not UTF-8, say)
/// into the JSON error shape, so that every error a client sees has one form (part of the
/// one middleware, `http::gate`).
pub(crate) async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let text = match axum::body::to_bytes(resp.into_body(), 64 << 10).await {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(_) => String::new(),
    };
    let code = match status {
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        s if s.is_server_error() => ErrorCode::Internal,
        _ => ErrorCode::BadRequest,
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    AppError::new(status, code, message).into_response()
}

/// True for an error that means "no space left": the engine's `DiskFull`, and an
/// `ENOSPC`/`EDQUOT` that reached it some other way. A group commit (`sync.rs`) hands every
/// waiter its leader's failure as text inside `Error::Index`, so the text is checked too.
/// The engine types every ENOSPC/EDQUOT it meets (block files, spools, the index, a group
/// commit's followers) as `WriteError::DiskFull`; an `Io` error carrying one is full too.
fn is_disk_full(e: &Error) -> bool {
    match e {
        Error::Write(WriteError::DiskFull { .. }) => true,
        Error::Io { source, .. } => tsblob_storage::no_space(source),
        _ => false,
    }
}

/// The status and code of an engine error.
pub fn classify(e: &Error) -> (StatusCode, ErrorCode) {
    use StatusCode as S;
    if is_disk_full(e) {
        return (S::INSUFFICIENT_STORAGE, ErrorCode::DiskFull);
    }
    match e {
        Error::Name(NameError::BadChar { kind: "label", .. })
        | Error::Name(NameError::Empty { kind: "label", .. })
        | Error::Name(NameError::TooLong { kind: "label", .. }) => {
            (S::UNPROCESSABLE_ENTITY, ErrorCode::InvalidLabel)
        }
        Error::Name(_) => (S::UNPROCESSABLE_ENTITY, ErrorCode::InvalidName),
        Error::Pattern(_) => (S::UNPROCESSABLE_ENTITY, ErrorCode::InvalidPattern),
        Error::NotFound(NotFound::Bucket(_)) => (S::NOT_FOUND, ErrorCode::BucketNotFound),
        Error::NotFound(NotFound::Entry { .. }) => (S::NOT_FOUND, ErrorCode::EntryNotFound),
        Error::NotFound(NotFound::Record { .. } | NotFound::NoRecords { .. }) => {
            (S::NOT_FOUND, ErrorCode::RecordNotFound)
        }
        Error::NotFound(NotFound::FeedReader(_)) => (S::NOT_FOUND, ErrorCode::ReplicationNotFound),
        Error::NotFound(NotFound::Rule { .. }) => (S::NOT_FOUND, ErrorCode::RuleNotFound),
        Error::Bucket(BucketError::Exists(_)) => (S::CONFLICT, ErrorCode::BucketExists),
        Error::Rename(RenameError::EntryExists { .. }) => (S::CONFLICT, ErrorCode::EntryExists),
        Error::Rename(RenameError::Tiered { .. }) => (S::CONFLICT, ErrorCode::RenameTiered),
        Error::Rename(RenameError::FolderExists { .. }) => (S::CONFLICT, ErrorCode::FolderExists),
        Error::Attachment(a) => match a {
            AttachmentError::NotFound { .. } => (S::NOT_FOUND, ErrorCode::AttachmentNotFound),
            AttachmentError::TooLarge { .. } => {
                (S::PAYLOAD_TOO_LARGE, ErrorCode::AttachmentTooLarge)
            }
            AttachmentError::TooMany { .. } => {
                (S::UNPROCESSABLE_ENTITY, ErrorCode::TooManyAttachments)
            }
            AttachmentError::Damaged { .. } => (S::INTERNAL_SERVER_ERROR, ErrorCode::CorruptRecord),
        },
        Error::Bucket(BucketError::InvalidSettings(_)) => {
            (S::UNPROCESSABLE_ENTITY, ErrorCode::InvalidSettings)
        }
        Error::Write(w) => match w {
            WriteError::Conflict { .. } => (S::CONFLICT, ErrorCode::TimestampExists),
            WriteError::InvalidTimestamp { .. } => {
                (S::UNPROCESSABLE_ENTITY, ErrorCode::InvalidTimestamp)
            }
            WriteError::TooOld { .. } => (S::UNPROCESSABLE_ENTITY, ErrorCode::TooOld),
            // A record larger than the whole quota is a quota refusal too: its message says
            // that no eviction or removal can make room, and to raise quota_size.
            WriteError::QuotaExceeded { .. } | WriteError::LargerThanQuota { .. } => {
                (S::INSUFFICIENT_STORAGE, ErrorCode::QuotaExceeded)
            }
            WriteError::DiskFull { .. } => (S::INSUFFICIENT_STORAGE, ErrorCode::DiskFull),
            WriteError::IndexFull => (S::INSUFFICIENT_STORAGE, ErrorCode::IndexFull),
            WriteError::TooManyEntries { .. } => {
                (S::INSUFFICIENT_STORAGE, ErrorCode::TooManyEntries)
            }
            WriteError::InvalidLabel(_) => (S::UNPROCESSABLE_ENTITY, ErrorCode::InvalidLabel),
            WriteError::InvalidContentType(_) => {
                (S::UNPROCESSABLE_ENTITY, ErrorCode::InvalidContentType)
            }
            WriteError::LengthMismatch { .. } => (S::BAD_REQUEST, ErrorCode::BadRequest),
        },
        Error::Query(QueryError::MissingLabel { .. }) => {
            (S::UNPROCESSABLE_ENTITY, ErrorCode::MissingLabel)
        }
        Error::Query(QueryError::Invalid { .. } | QueryError::TooLarge { .. }) => {
            (S::UNPROCESSABLE_ENTITY, ErrorCode::InvalidCondition)
        }
        Error::Tier(TierError::ReadOnly(_)) => (S::METHOD_NOT_ALLOWED, ErrorCode::ReadOnlyReplica),
        // Permanent damage of a tiered object is not an outage: a 500 the client does not
        // retry (a 503 said "retry once it is back" of an object that never would be).
        Error::Tier(TierError::Missing { .. } | TierError::Damaged { .. }) => {
            (S::INTERNAL_SERVER_ERROR, ErrorCode::TierDamaged)
        }
        Error::Tier(_) => (S::SERVICE_UNAVAILABLE, ErrorCode::TierUnavailable),
        Error::Corrupt(_) => (S::INTERNAL_SERVER_ERROR, ErrorCode::CorruptRecord),
        Error::Open(_) | Error::Io { .. } | Error::Index(_) => {
            (S::INTERNAL_SERVER_ERROR, ErrorCode::Internal)
        }
    }
}

impl From<Error> for AppError {
    fn from(e: Error) -> AppError {
        if let Error::Io { source, .. } = &e {
            crate::disk_errors::note(source);
        }
        let (status, code) = classify(&e);
        if code == ErrorCode::DiskFull {
            // The engine's message names the data folder: logged, not answered.
            let detail = match &e {
                Error::Write(WriteError::DiskFull {
                    available,
                    reserve,
                    needed,
                    ..
                }) if *reserve > 0 => {
                    format!(" (the write needs {needed} bytes, {available} are free and {reserve} kept in reserve)")
                }
                _ => String::new(),
            };
            return AppError::new(
                status,
                code,
                format!("the server's disk is full{detail}: writes are refused until space is freed (remove data, or lower --free-space-reserve); reads keep working"),
            )
            .logging(tracing::Level::WARN, None, format!("write refused, disk full: {e}"));
        }
        if let Error::Tier(t) = &e {
            return tier_error(status, code, t);
        }
        AppError::new(status, code, e.to_string())
    }
}

/// A tier failure for a client: what failed and what to do, without the object store's
/// own error text (logged instead: it names endpoints).
fn tier_error(status: StatusCode, code: ErrorCode, e: &TierError) -> AppError {
    let message = match e {
        TierError::Unavailable {
            bucket, entry, ts, ..
        } => format!("record {ts} of {bucket}/{entry} is kept only in the object store, which is unavailable: retry once it is back (GET /health reports the tier's state)"),
        TierError::Missing { bucket, entry, block, .. } => format!("a block ({block:016x}) of {bucket}/{entry} is missing from the object store: it was deleted outside tsblob; do not retry: restore the object or remove the records"),
        TierError::Damaged { bucket, entry, block, ts, .. } => format!("record {ts} of {bucket}/{entry} is in a block ({block:016x}) that is damaged in the object store (shorter than the index says): do not retry; restore the object or remove the records"),
        TierError::ReadOnly(_) => "this server is a read-only replica of an object store: send writes to the server that tiers into it".to_string(),
        TierError::Upload(_) | TierError::Refresh(_) | TierError::Oversized(_) => "the object store is unavailable: retry once it is back (GET /health reports the tier's state)".to_string(),
    };
    // A client's mistake (a write sent to a replica) is not the operator's concern.
    let level = if status.is_client_error() {
        tracing::Level::DEBUG
    } else {
        tracing::Level::WARN
    };
    AppError::new(status, code, message).logging(level, None, format!("{code}: {e}"))
}

impl From<crate::when::WhenError> for AppError {
    fn from(e: crate::when::WhenError) -> AppError {
        // (`when.rs` keeps its codes as text: its fuzz target compiles it alone.)
        match ErrorCode::parse(e.code) {
            Some(ErrorCode::BadRequest) => AppError::bad_request(e.message),
            Some(code) => AppError::unprocessable(code, e.message),
            None => AppError::internal(format!(
                "a when error with a code not in ErrorCode ({}): {}",
                e.code, e.message
            )),
        }
    }
}

impl From<crate::private_file::NotWritten> for AppError {
    fn from(e: crate::private_file::NotWritten) -> AppError {
        if !e.disk_full() {
            return AppError::internal(e.to_string());
        }
        AppError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::DiskFull,
            format!("the server's disk is full: the {} cannot be written, so the change was not made; free space (remove data) and retry; reads keep working", e.what()),
        )
        .logging(tracing::Level::WARN, None, e.to_string())
    }
}

impl From<crate::replication::ReplicationError> for AppError {
    fn from(e: crate::replication::ReplicationError) -> AppError {
        use crate::replication::ReplicationError as R;
        match e {
            R::Invalid(message) => AppError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidReplication,
                message,
            ),
            R::TooManyTasks => {
                AppError::new(StatusCode::CONFLICT, ErrorCode::TooManyTasks, e.to_string())
            }
            R::NotFound(_) => AppError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::ReplicationNotFound,
                e.to_string(),
            ),
            R::When(e) => e.into(),
            R::Storage(e) => e.into(),
            R::Internal(message) => AppError::internal(message),
            R::NotWritten(e) => e.into(),
        }
    }
}

/// How a replication error reads in its task's status and the log
/// ([`crate::replication::Explain`]): the message a client would be answered.
pub fn explain_replication(e: crate::replication::ReplicationError) -> String {
    AppError::from(e).answer().message
}

impl From<NameError> for AppError {
    fn from(e: NameError) -> AppError {
        AppError::from(Error::Name(e))
    }
}

/// Runs blocking engine work on the blocking pool ([`crate::blocking::run`]). A panic
/// inside becomes a 500 instead of taking the connection (or the server) down.
pub async fn blocking<T, F>(f: F) -> Result<T, AppError>
where
    F: FnOnce() -> Result<T, AppError> + Send + 'static,
    T: Send + 'static,
{
    crate::blocking::run(f).await
}

impl From<crate::blocking::TaskFailed> for AppError {
    fn from(e: crate::blocking::TaskFailed) -> AppError {
        AppError::internal(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_a_whole_http_answer_with_the_json_error() {
        let e = AppError::busy("full");
        let bytes = e.raw_answer();
        let text = String::from_utf8(bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(head.contains("connection: close") && head.contains("retry-after: 1"));
        assert!(head.contains("\r\nx-reduct-error: full\r\n"), "{head}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "busy");
    }

    #[test]
    fn every_family_maps_to_its_documented_code() {
        let cases: Vec<(Error, u16, &str)> = vec![
            (NotFound::Bucket("b".into()).into(), 404, "bucket_not_found"),
            (
                NotFound::Entry {
                    bucket: "b".into(),
                    entry: "e".into(),
                }
                .into(),
                404,
                "entry_not_found",
            ),
            (BucketError::Exists("b".into()).into(), 409, "bucket_exists"),
            (
                WriteError::Conflict {
                    bucket: "b".into(),
                    entry: "e".into(),
                    ts: 1,
                }
                .into(),
                409,
                "timestamp_exists",
            ),
            (
                WriteError::QuotaExceeded {
                    bucket: "b".into(),
                    quota: 1,
                    used: 1,
                    needed: 1,
                }
                .into(),
                507,
                "quota_exceeded",
            ),
            (
                NameError::DotSegment {
                    kind: "entry",
                    name: "..".into(),
                }
                .into(),
                422,
                "invalid_name",
            ),
            (
                NameError::BadChar {
                    kind: "label",
                    name: "A".into(),
                    ch: 'A',
                    slash: "",
                }
                .into(),
                422,
                "invalid_label",
            ),
            (
                tsblob_storage::EntryPattern::parse(&"*a".repeat(40))
                    .unwrap_err()
                    .into(),
                422,
                "invalid_pattern",
            ),
            (Error::Index("x".into()), 500, "internal"),
            (WriteError::IndexFull.into(), 507, "index_full"),
            (
                WriteError::TooManyEntries { held: 3, limit: 3 }.into(),
                507,
                "too_many_entries",
            ),
            (
                WriteError::DiskFull {
                    path: "/srv/data".into(),
                    available: 1,
                    reserve: 2,
                    needed: 3,
                }
                .into(),
                507,
                "disk_full",
            ),
            (
                WriteError::LargerThanQuota {
                    bucket: "b".into(),
                    quota_type: tsblob_storage::QuotaType::Fifo,
                    quota: 1,
                    needed: 2,
                }
                .into(),
                507,
                "quota_exceeded",
            ),
            (
                Error::Io {
                    context: "writing a frame".into(),
                    source: std::io::Error::from_raw_os_error(122),
                },
                507,
                "disk_full",
            ),
        ];
        for (e, status, code) in cases {
            let a = AppError::from(e);
            assert_eq!(
                (a.status.as_u16(), a.code.as_str()),
                (status, code),
                "{}",
                a.message
            );
        }
    }

    /// A log written into a buffer, for as long as `f` runs.
    fn logged_while(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<parking_lot::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let w = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || w.clone())
            .finish();
        tracing::subscriber::with_default(sub, f);
        let out = String::from_utf8_lossy(&buf.0.lock()).into_owned();
        out
    }

    /// Bug "logged when built": `AppError::new` logged a server error as it was made, so
    /// one made and then handled (retried, mapped, dropped) left an error line all the
    /// same. Now an error is logged when it is answered, once, under its reference.
    #[test]
    fn an_error_was_logged_when_built_not_when_answered() {
        let mut made = None;
        let built = logged_while(|| {
            made = Some(AppError::internal("reading /srv/data/b/e/1.blk failed"));
            let _ = AppError::internal("a failure that was retried and handled");
            let _ = AppError::from(Error::Write(WriteError::DiskFull {
                path: "/srv/data".into(),
                available: 0,
                reserve: 0,
                needed: 0,
            }));
        });
        assert_eq!(built, "", "logged when built");
        let e = made.unwrap();
        let mut answered = String::new();
        let log = logged_while(|| answered = e.body().error.message);
        let reference = answered
            .strip_prefix("internal error (ref ")
            .and_then(|r| r.split(')').next())
            .unwrap_or_else(|| panic!("{answered}"));
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(
            log.contains("/srv/data/b/e/1.blk") && log.contains(reference),
            "{log}"
        );
    }

    #[test]
    fn server_errors_answer_a_reference_never_details() {
        let e = AppError::from(Error::Io {
            context: "reading /srv/secret/data/b/e/00000001.blk".into(),
            source: std::io::Error::other("boom"),
        });
        assert_eq!((e.status.as_u16(), e.code.as_str()), (500, "internal"));
        assert!(
            e.message.starts_with("internal error (ref "),
            "{}",
            e.message
        );
        assert!(!e.message.contains("/srv") && !e.message.contains("boom"));
        let c = AppError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::CorruptRecord,
            "corrupt record in block \"/srv/x\"",
        );
        assert_eq!(c.code, ErrorCode::CorruptRecord);
        assert!(!c.message.contains("/srv"), "{}", c.message);
        // (a damaged record said only "see the server log": it says what to do)
        assert!(
            c.message.contains("remove the damaged record"),
            "{}",
            c.message
        );
        let full = AppError::from(Error::from(WriteError::DiskFull {
            path: "/srv/data".into(),
            available: 5,
            reserve: 10,
            needed: 7,
        }));
        assert!(!full.message.contains("/srv"), "{}", full.message);
        assert!(full.message.contains("disk is full"), "{}", full.message);
        assert!(full.message.contains("needs 7 bytes"), "{}", full.message);
    }

    #[test]
    fn a_when_error_is_a_400_bad_request() {
        let e = AppError::from(crate::when::parse_text("{").expect_err("not JSON"));
        assert_eq!((e.status.as_u16(), e.code.as_str()), (400, "bad_request"));
        assert!(e.message.starts_with("when: "), "{}", e.message);
    }

    #[test]
    fn an_unsupported_when_directive_is_a_422() {
        for d in ["#ctx_before", "#ctx_after", "#select_labels", "#ext"] {
            let text = format!(r#"{{"{d}": 1, "&a": {{"$eq": 1}}}}"#);
            let e = AppError::from(crate::when::parse_text(&text).expect_err(d));
            assert_eq!(
                (e.status.as_u16(), e.code.as_str()),
                (422, "unsupported_directive"),
                "{d}"
            );
        }
    }

    #[test]
    fn replication_errors_map_to_their_documented_codes() {
        use crate::replication::ReplicationError as R;
        let cases: Vec<(R, u16, &str)> = vec![
            (R::Invalid("dst_url".into()), 422, "invalid_replication"),
            (R::TooManyTasks, 409, "too_many_tasks"),
            (R::NotFound("t".into()), 404, "replication_not_found"),
            (
                R::Storage(NotFound::Bucket("b".into()).into()),
                404,
                "bucket_not_found",
            ),
            (
                crate::when::parse_text("[")
                    .expect_err("not an object")
                    .into(),
                400,
                "bad_request",
            ),
            (R::Internal("task file".into()), 500, "internal"),
        ];
        for (e, status, code) in cases {
            let shown = e.to_string();
            let a = AppError::from(e);
            assert_eq!(
                (a.status.as_u16(), a.code.as_str()),
                (status, code),
                "{shown}"
            );
        }
    }

    /// A task's `last_error` shows what an error answer would: never an engine failure's
    /// paths (they are logged under a reference).
    #[test]
    fn a_replication_status_never_shows_engine_paths() {
        let e = crate::replication::ReplicationError::Storage(Error::Io {
            context: "reading /srv/secret/data/b/e/00000001.blk".into(),
            source: std::io::Error::other("boom"),
        });
        let shown = explain_replication(e);
        assert!(shown.starts_with("internal error (ref "), "{shown}");
        assert!(!shown.contains("/srv"), "{shown}");
    }

    /// The string literal right after `text[at..]`'s whitespace, if one starts there.
    fn literal_at(text: &str, at: usize) -> Option<&str> {
        let rest = text[at..].trim_start();
        let body = rest.strip_prefix('"')?;
        body.find('"').map(|end| &body[..end])
    }

    /// Where the first argument of the call whose `(` ends at `at` is over (its comma).
    fn after_first_argument(text: &str, at: usize) -> Option<usize> {
        let mut depth = 0i32;
        for (i, c) in text[at..].char_indices() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' if depth == 0 => return None,
                ')' | ']' | '}' => depth -= 1,
                ',' if depth == 0 => return Some(at + i + 1),
                _ => {}
            }
        }
        None
    }

    /// Every error code written in the server's source where a code goes: the second
    /// argument of `AppError::new` (and of the batch's `detail`), `(S::STATUS, "code")` of
    /// `classify`, `StatusCode::X => "code"` of `json_errors`, and `code == "code"`; and
    /// `when.rs`'s codes (`unprocessable("code"`, `code: "code"`), kept as text there.
    /// (`AppError`'s code is an `ErrorCode`: the compiler checks those where they are
    /// written, so little of this scan finds anything now.)
    fn codes_in_source() -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut dirs = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                if path.extension().is_none_or(|x| x != "rs") {
                    continue;
                }
                // Comment lines out: they quote codes as examples.
                let text: String = std::fs::read_to_string(&path)
                    .unwrap()
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .map(|l| format!("{l}\n"))
                    .collect();
                let file = path.display().to_string();
                // A code is snake_case (this scan's own patterns, quoted above, are not).
                let mut found = |code: Option<&str>| {
                    if let Some(c) = code.filter(|c| {
                        !c.is_empty() && c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                    }) {
                        out.push((c.to_string(), file.clone()));
                    }
                };
                for call in ["AppError::new(", "detail("] {
                    for (i, _) in text.match_indices(call) {
                        let open = i + call.len();
                        found(after_first_argument(&text, open).and_then(|a| literal_at(&text, a)));
                    }
                }
                for (i, _) in text.match_indices("(S::") {
                    let rest = &text[i + 4..];
                    let ident = rest
                        .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                        .unwrap_or(0);
                    if rest[ident..].starts_with(',') {
                        found(literal_at(&text, i + 4 + ident + 1));
                    }
                }
                for (i, _) in text.match_indices("StatusCode::") {
                    let rest = &text[i + 12..];
                    let ident = rest
                        .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                        .unwrap_or(0);
                    if let Some(arrow) = rest[ident..].strip_prefix(" => ") {
                        found(literal_at(arrow, 0));
                    }
                }
                for pattern in ["code == ", "unprocessable(", "code: "] {
                    for (i, _) in text.match_indices(pattern) {
                        found(literal_at(&text, i + pattern.len()));
                    }
                }
            }
        }
        out
    }

    /// One list of error codes (`tsblob_proto::ErrorCode`): every code the server's source
    /// answers is on it, and `docs/api.md`'s table of errors lists exactly its codes.
    #[test]
    fn every_error_code_is_in_the_one_list_and_the_api_table() {
        use tsblob_proto::ErrorCode;
        let found = codes_in_source();
        // What is still text: the CLI's comparisons, `when.rs`'s three codes.
        assert!(found.len() >= 5, "the scan found only {found:?}");
        for (code, file) in &found {
            assert!(
                ErrorCode::parse(code).is_some(),
                "{file} answers code {code:?}, which tsblob_proto::ErrorCode does not list: add it there and to docs/api.md's table"
            );
        }
        let api = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md"),
        )
        .unwrap();
        let start = api
            .find("| status | code | when |")
            .expect("the table of errors");
        let mut in_table = std::collections::BTreeSet::new();
        for line in api[start..].lines().skip(2) {
            if !line.starts_with('|') {
                break;
            }
            let code_cell = line.split('|').nth(2).unwrap_or("");
            for part in code_cell.split('`').skip(1).step_by(2) {
                in_table.insert(part.to_string());
            }
        }
        let listed: std::collections::BTreeSet<String> = ErrorCode::ALL
            .iter()
            .map(|c| c.as_str().to_string())
            .collect();
        assert_eq!(
            in_table, listed,
            "docs/api.md's table of errors against ErrorCode"
        );
        // The Python SDK's classes by code (`_BY_CODE`) name codes of the list only.
        let sdk = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../client-py/src/tsblob/_errors.py"),
        )
        .unwrap();
        let start = sdk.find("_BY_CODE").expect("the SDK's classes by code");
        let block = &sdk[start..];
        let block = &block[..block.find("\n}").expect("the end of _BY_CODE")];
        let mut sdk_codes = 0;
        for line in block.lines().skip(1) {
            let Some(code) = line
                .trim()
                .strip_prefix('"')
                .and_then(|l| l.split('"').next())
            else {
                continue;
            };
            sdk_codes += 1;
            assert!(
                ErrorCode::parse(code).is_some(),
                "client-py's _BY_CODE maps {code:?}, which tsblob_proto::ErrorCode does not list"
            );
        }
        assert!(sdk_codes > 20, "read only {sdk_codes} codes of _BY_CODE");
    }
}
