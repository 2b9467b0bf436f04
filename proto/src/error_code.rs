//! The `code` of an error answer (`{"error": {"code", "message"}}`), one list for the
//! server that answers them and the clients that branch on them. `docs/api.md`'s table
//! of errors lists the same codes with their statuses (a server test compares them, and
//! checks every code the server's source answers is one of these).

use std::fmt;

macro_rules! codes {
    ($( $(#[$doc:meta])* $name:ident = $text:literal, )*) => {
        /// A stable, machine-readable error code (its text is [`ErrorCode::as_str`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode {
            $( $(#[$doc])* $name, )*
        }

        impl ErrorCode {
            /// Every code, in the order of `docs/api.md`'s table.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name,)*];

            /// The code as sent on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$name => $text,)*
                }
            }

            /// The code of its wire text, if it is one.
            pub fn parse(text: &str) -> Option<ErrorCode> {
                match text {
                    $($text => Some(ErrorCode::$name),)*
                    _ => None,
                }
            }
        }
    };
}

codes! {
    /// 400: a malformed query string, JSON or header; an unknown or repeated parameter.
    BadRequest = "bad_request",
    /// 400: a batch body that does not parse.
    MalformedBatch = "malformed_batch",
    /// 401: a missing or unknown bearer token.
    Unauthorized = "unauthorized",
    /// 401: a token past its `expires_at` or unused for its `ttl` (also ends its streams).
    TokenExpired = "token_expired",
    /// 403: the token may not do this (also ends a stream whose token lost the right).
    Forbidden = "forbidden",
    /// 403: a token used from an address outside its `ip_allowlist`.
    IpNotAllowed = "ip_not_allowed",
    /// 403: a web page of another origin.
    CrossOrigin = "cross_origin",
    /// 403: a `Host` the server does not answer.
    HostNotAllowed = "host_not_allowed",
    /// 403: a query link that is not signed by this server as it is (altered).
    LinkSignature = "link_signature",
    /// 404: no such bucket.
    BucketNotFound = "bucket_not_found",
    /// 404: no such entry.
    EntryNotFound = "entry_not_found",
    /// 404: no such record.
    RecordNotFound = "record_not_found",
    /// 404: no such token.
    TokenNotFound = "token_not_found",
    /// 404: no such replication task.
    ReplicationNotFound = "replication_not_found",
    /// 404: no such lifecycle rule.
    RuleNotFound = "rule_not_found",
    /// 404: no attachment of that name in the entry.
    AttachmentNotFound = "attachment_not_found",
    /// 404: no such route.
    NotFound = "not_found",
    /// 405: the route exists, the method does not.
    MethodNotAllowed = "method_not_allowed",
    /// 405: a write sent to a read-only replica.
    ReadOnlyReplica = "read_only_replica",
    /// 408: a request body too slow or silent.
    RequestTimeout = "request_timeout",
    /// 409: the bucket exists.
    BucketExists = "bucket_exists",
    /// 409: a rename's new entry name is taken.
    EntryExists = "entry_exists",
    /// 409: a rename of an entry with blocks in the object store.
    RenameTiered = "rename_tiered",
    /// 409: a rename found a folder under the new name.
    FolderExists = "folder_exists",
    /// 409: a record is stored at this timestamp.
    TimestampExists = "timestamp_exists",
    /// 409: another payload at this timestamp (`if_exists=compare`).
    Conflict = "conflict",
    /// 409: the token exists.
    TokenExists = "token_exists",
    /// 409: removing the last token would switch authentication off.
    LastToken = "last_token",
    /// 409: the server holds as many replication tasks as it may.
    TooManyTasks = "too_many_tasks",
    /// 409: a replication of this name exists (ReductStore API's `POST /replications/{name}`).
    ReplicationExists = "replication_exists",
    /// 410: a query link past its expiry.
    LinkExpired = "link_expired",
    /// 410: a query link whose creating token was removed.
    LinkRevoked = "link_revoked",
    /// 414 (used) or 422 (made): a query link over --max-link-length.
    LinkTooLong = "link_too_long",
    /// 400: a request head the HTTP parser could not read (a malformed request line or
    /// header, two `Content-Length`s); the connection is closed.
    MalformedHead = "malformed_head",
    /// 414: a request target (path and query) over 64 KiB; the connection is closed.
    UriTooLong = "uri_too_long",
    /// 431: a request head over its bound (too many header lines, or too many bytes).
    HeadTooLarge = "head_too_large",
    /// 415: a `Content-Encoding` the route does not take; 501: a `Transfer-Encoding` other
    /// than `chunked`.
    UnsupportedEncoding = "unsupported_encoding",
    /// 413: a body over the server's limit.
    PayloadTooLarge = "payload_too_large",
    /// 413: a record over the batch limit (send it alone).
    RecordTooLarge = "record_too_large",
    /// 413: an attachment over `--max-attachment-size`.
    AttachmentTooLarge = "attachment_too_large",
    /// 422: a name that breaks the name rules.
    InvalidName = "invalid_name",
    /// 422: a timestamp out of range.
    InvalidTimestamp = "invalid_timestamp",
    /// 422: a label that breaks the label rules.
    InvalidLabel = "invalid_label",
    /// 422: bucket settings that do not hold.
    InvalidSettings = "invalid_settings",
    /// 422: a content type that is not one.
    InvalidContentType = "invalid_content_type",
    /// 422: a token's `expires_at` not in the future (or past year 9999).
    InvalidExpiry = "invalid_expiry",
    /// 422: a token's `ttl` of 0.
    InvalidTtl = "invalid_ttl",
    /// 422: an `ip_allowlist` entry that is not an address or a CIDR network.
    InvalidIpAllowlist = "invalid_ip_allowlist",
    /// 422: a rotation of a token past its `expires_at`.
    ExpiredNotRotatable = "expired_not_rotatable",
    /// 422: an entry pattern that does not compile.
    InvalidPattern = "invalid_pattern",
    /// 422: replication task settings that do not hold.
    InvalidReplication = "invalid_replication",
    /// 422: a query link's file name or base URL that does not hold.
    InvalidLink = "invalid_link",
    /// 422: a ReductStore API feature tsblob does not have (lifecycle rules, managing
    /// replications...): nothing was changed.
    Unsupported = "unsupported",
    /// 422: an attachment that is not a JSON document.
    InvalidAttachment = "invalid_attachment",
    /// 422: an entry would hold more than `--max-attachments` attachments.
    TooManyAttachments = "too_many_attachments",
    /// 422: a `strict` query's condition cannot be evaluated on a record.
    InvalidCondition = "invalid_condition",
    /// 422: a `when` directive tsblob does not evaluate.
    UnsupportedDirective = "unsupported_directive",
    /// 422: a `when` time zone tsblob does not evaluate.
    UnsupportedTimeZone = "unsupported_time_zone",
    /// 422: a strict query met a record without the label.
    MissingLabel = "missing_label",
    /// 422: a record older than its bucket keeps.
    TooOld = "too_old",
    /// 429: too many live tails.
    TooManyTails = "too_many_tails",
    /// 429: too many query streams.
    TooManyStreams = "too_many_streams",
    /// 429: too many connections open from one client address.
    TooManyConnections = "too_many_connections",
    /// 401: a stream whose token was removed or rotated while it streamed.
    TokenRevoked = "token_revoked",
    /// 500: stored bytes fail their CRC.
    CorruptRecord = "corrupt_record",
    /// 500: a failure inside the server (its details are in the log).
    Internal = "internal",
    /// 503: the object store is unavailable.
    TierUnavailable = "tier_unavailable",
    /// 503: the server is busy (its memory budget is spent): retry.
    Busy = "busy",
    /// 500: a tiered object is damaged or missing: do not retry.
    TierDamaged = "tier_damaged",
    /// 507: the bucket's hard quota is full.
    QuotaExceeded = "quota_exceeded",
    /// 507: the disk is full (the free-space guard).
    DiskFull = "disk_full",
    /// 507: the index map (`--index-map-size`) is full.
    IndexFull = "index_full",
    /// 507: a new entry past `--max-entries`.
    TooManyEntries = "too_many_entries",
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_and_is_snake_case_once() {
        let mut seen = std::collections::BTreeSet::new();
        for &c in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(c.as_str()), Some(c));
            assert!(
                c.as_str()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{c}"
            );
            assert!(seen.insert(c.as_str()), "{c} twice");
        }
        assert_eq!(ErrorCode::parse("no_such_code"), None);
    }
}
