//! A small async client of the HTTP API (`docs/api.md`) over reqwest, for the CLI, the
//! load generator and the bench: base URL, bearer token, path building, and every
//! non-2xx answer turned into [`ClientError::Status`] with the server's
//! `{"error": {"code", "message"}}` as it is.

use bytes::Bytes;
use reqwest::{Method, RequestBuilder, Response};
use serde_json::Value;
use thiserror::Error;

use crate::framing::{ChunkDecoder, Event, FrameError, MEDIA_TYPE};
use crate::headers::{encode_label_value, label_header, TS_HEADER};
use crate::LabelPairs;

/// What went wrong talking to a server.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The server could not be reached (refused, reset, timed out, bad URL, TLS).
    #[error("cannot reach the server at {url}: {}", crate::tls::error_chain(.source))]
    Connect {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with an error status.
    #[error("{status} {code}: {message}")]
    Status {
        status: u16,
        /// The error's `code` (`bucket_not_found`, ...), or `http_error` for an answer
        /// without the JSON error document.
        code: String,
        message: String,
    },
    /// The answer was cut off or could not be read.
    #[error("reading the server's answer failed: {0}")]
    Body(#[source] reqwest::Error),
    /// The answer is not the JSON or framing the API documents.
    #[error("the server's answer breaks the protocol: {0}")]
    Protocol(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    /// The CA bundle given for https is not usable.
    #[error(transparent)]
    Ca(#[from] crate::tls::CaError),
}

impl From<FrameError> for ClientError {
    fn from(e: FrameError) -> Self {
        ClientError::Protocol(e.0)
    }
}

/// Percent-encodes a name as one path segment (a bucket, token or task name): everything
/// but `A-Z a-z 0-9 - _ .` is encoded, `/` too. Bug "dot segments": a name was sent with its
/// `/` as they were, and the URL was normalized before it left, so `tsblob bucket rm a/b`
/// removed entry `b` of bucket `a`; now the server gets the name whole and refuses it.
pub fn seg(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.');

/// Percent-encodes an entry name as path segments: `/` is kept between its segments (it
/// separates them in the API too), unless one of them is empty, `.` or `..`, which URL
/// normalization would resolve before the request leaves (`tsblob entry rm cams
/// x/../../other` removed bucket `other`): then `/` is encoded too, and the server, given
/// the name whole, refuses it (422 `invalid_name`). (A name of dots alone, `.` or `..`,
/// is still resolved by the URL: it reaches no route, a 404.)
pub fn entry_seg(s: &str) -> String {
    if s.split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return seg(s);
    }
    percent_encoding::utf8_percent_encode(s, ENTRY_SEGMENTS).to_string()
}

const ENTRY_SEGMENTS: &percent_encoding::AsciiSet = &SEGMENT.remove(b'/');

/// `/api/v1/b/{bucket}`.
pub fn bucket_path(bucket: &str) -> String {
    format!("/api/v1/b/{}", seg(bucket))
}

/// `/api/v1/b/{bucket}/{entry}`.
pub fn entry_path(bucket: &str, entry: &str) -> String {
    format!("/api/v1/b/{}/{}", seg(bucket), entry_seg(entry))
}

/// The most of a JSON answer [`Client::json`] reads (a bucket's description with all its
/// entries, a token list): an answer past it is cut off, not held whole.
pub const JSON_MAX: usize = 64 << 20;

/// The most values (counted as [`json_parts`] does) of a JSON answer [`Client::json`]
/// parses. Its bytes are bounded by [`JSON_MAX`], but a parsed value costs far more than
/// its text: 10 million `{}` (20 MB) took the CLI to 1.86 GB (hostile probe of
/// 2026-11-28). 4 Mi parts hold a listing of ~200,000 entries and stay within a few
/// hundred MB; a server answering more is refused before parsing.
pub const JSON_PARTS_MAX: usize = 4 << 20;

/// An upper bound of the values in a JSON text: its `{`, `[`, `,` and `:` outside strings
/// (one pass, no allocation).
pub fn json_parts(text: &[u8]) -> usize {
    let (mut n, mut in_string, mut escaped) = (0, false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' | b',' | b':' => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// A client of one server.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// Shows the server, never the token.
impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

impl Client {
    /// A client of the server at `url` (`http://host:port` or `https://`), with a bearer
    /// token if given (an empty token counts as none).
    pub fn new(url: &str, token: Option<&str>) -> Result<Client, ClientError> {
        Client::with_ca(url, token, None)
    }

    /// The same, trusting also the certificates of a PEM bundle (see [`crate::tls`]); an
    /// answer that sends nothing for [`crate::tls::read_timeout`] fails (a server that
    /// accepts and never answers hung every command).
    pub fn with_ca(
        url: &str,
        token: Option<&str>,
        ca_pem: Option<&[u8]>,
    ) -> Result<Client, ClientError> {
        Client::with_ca_read_timeout(url, token, ca_pem, crate::tls::read_timeout())
    }

    /// The same with another per-read timeout (a live tail with a long heartbeat period).
    pub fn with_ca_read_timeout(
        url: &str,
        token: Option<&str>,
        ca_pem: Option<&[u8]>,
        read_timeout: std::time::Duration,
    ) -> Result<Client, ClientError> {
        let http = crate::tls::builder(ca_pem)?
            .read_timeout(read_timeout)
            .build()
            .map_err(ClientError::Build)?;
        Ok(Client::with_http(http, url, token))
    }

    /// The same over an HTTP client built by the caller (pool sizes, timeouts).
    pub fn with_http(http: reqwest::Client, url: &str, token: Option<&str>) -> Client {
        Client {
            http,
            base: url.trim_end_matches('/').to_string(),
            token: token.filter(|t| !t.is_empty()).map(str::to_string),
        }
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The full URL of an API path.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request to an API path, with the token.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let r = self.http.request(method, self.url(path));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// Sends; a non-2xx answer becomes [`ClientError::Status`].
    pub async fn send(&self, req: RequestBuilder) -> Result<Response, ClientError> {
        let resp = req.send().await.map_err(|source| ClientError::Connect {
            url: self.base.clone(),
            source,
        })?;
        check(resp).await
    }

    /// Sends and reads a JSON answer (at most [`JSON_MAX`] bytes of it).
    pub async fn json(&self, req: RequestBuilder) -> Result<Value, ClientError> {
        let resp = self.send(req).await?;
        let body = crate::outbound::read_bounded(resp, JSON_MAX)
            .await
            .map_err(|e| match e {
                crate::outbound::ReadError::Body(e) => ClientError::Body(e),
                too_large => ClientError::Protocol(too_large.to_string()),
            })?;
        let parts = json_parts(&body);
        if parts > JSON_PARTS_MAX {
            return Err(ClientError::Protocol(format!(
                "the answer holds more than {JSON_PARTS_MAX} JSON values ({parts}); a tsblob \
                 server answers far fewer: is this the server you meant?"
            )));
        }
        serde_json::from_slice(&body)
            .map_err(|e| ClientError::Protocol(format!("the answer is not JSON: {e}")))
    }

    /// `GET /health`.
    pub async fn health(&self) -> Result<Value, ClientError> {
        self.json(self.request(Method::GET, "/health")).await
    }

    /// `GET /api/v1/b`: `{"buckets": [...]}`.
    pub async fn list_buckets(&self) -> Result<Value, ClientError> {
        self.json(self.request(Method::GET, "/api/v1/b")).await
    }

    /// `POST /api/v1/b/{bucket}` with (partial) settings.
    pub async fn create_bucket(
        &self,
        bucket: &str,
        settings: &Value,
    ) -> Result<Value, ClientError> {
        self.send_settings(Method::POST, bucket, settings).await
    }

    /// Bucket settings sent with `method` (POST creates, PUT changes).
    async fn send_settings(
        &self,
        method: Method,
        bucket: &str,
        settings: &Value,
    ) -> Result<Value, ClientError> {
        let req = self.request(method, &bucket_path(bucket)).json(settings);
        self.json(req).await
    }

    /// `GET /api/v1/b/{bucket}`: settings, sizes and entries.
    pub async fn bucket(&self, bucket: &str) -> Result<Value, ClientError> {
        self.json(self.request(Method::GET, &bucket_path(bucket)))
            .await
    }

    /// `PUT /api/v1/b/{bucket}` with the settings to change.
    pub async fn update_bucket(
        &self,
        bucket: &str,
        settings: &Value,
    ) -> Result<Value, ClientError> {
        self.send_settings(Method::PUT, bucket, settings).await
    }

    /// `DELETE /api/v1/b/{bucket}`.
    pub async fn remove_bucket(&self, bucket: &str) -> Result<Value, ClientError> {
        self.json(self.request(Method::DELETE, &bucket_path(bucket)))
            .await
    }

    /// `GET /api/v1/b/{bucket}/{entry}/info`.
    pub async fn entry(&self, bucket: &str, entry: &str) -> Result<Value, ClientError> {
        let path = format!("{}/info", entry_path(bucket, entry));
        self.json(self.request(Method::GET, &path)).await
    }

    /// `DELETE /api/v1/b/{bucket}/{entry}`: the whole entry.
    pub async fn remove_entry(&self, bucket: &str, entry: &str) -> Result<Value, ClientError> {
        self.json(self.request(Method::DELETE, &entry_path(bucket, entry)))
            .await
    }

    /// `PUT /api/v1/b/{bucket}/{entry}/rename` with `{"new_name"}`: the entry's info under
    /// its new name.
    pub async fn rename_entry(
        &self,
        bucket: &str,
        entry: &str,
        new_name: &str,
    ) -> Result<Value, ClientError> {
        let path = format!("{}/rename", entry_path(bucket, entry));
        let body = serde_json::json!({ "new_name": new_name });
        self.json(self.request(Method::PUT, &path).json(&body))
            .await
    }

    /// Sends and reads an answer's text (at most [`JSON_MAX`] bytes), as sent: a JSON
    /// document whose numbers must not go through a float.
    pub async fn text(&self, req: RequestBuilder) -> Result<String, ClientError> {
        let resp = self.send(req).await?;
        let body = crate::outbound::read_bounded(resp, JSON_MAX)
            .await
            .map_err(|e| match e {
                crate::outbound::ReadError::Body(e) => ClientError::Body(e),
                too_large => ClientError::Protocol(too_large.to_string()),
            })?;
        String::from_utf8(body.to_vec())
            .map_err(|_| ClientError::Protocol("the answer is not UTF-8 text".into()))
    }

    /// `GET /api/v1/b/{bucket}/{entry}/attachments`: `{name: document}` as sent.
    pub async fn attachments(&self, bucket: &str, entry: &str) -> Result<String, ClientError> {
        let path = format!("{}/attachments", entry_path(bucket, entry));
        self.text(self.request(Method::GET, &path)).await
    }

    /// `GET /api/v1/b/{bucket}/{entry}/attachments/{name}`: the document as sent.
    pub async fn attachment(
        &self,
        bucket: &str,
        entry: &str,
        name: &str,
    ) -> Result<String, ClientError> {
        let path = format!("{}/attachments/{}", entry_path(bucket, entry), seg(name));
        self.text(self.request(Method::GET, &path)).await
    }

    /// `PUT /api/v1/b/{bucket}/{entry}/attachments/{name}` with the document:
    /// `{"written": {name: ts}}`.
    pub async fn put_attachment(
        &self,
        bucket: &str,
        entry: &str,
        name: &str,
        document: Vec<u8>,
    ) -> Result<Value, ClientError> {
        let path = format!("{}/attachments/{}", entry_path(bucket, entry), seg(name));
        let req = self
            .request(Method::PUT, &path)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(document);
        self.json(req).await
    }

    /// `DELETE /api/v1/b/{bucket}/{entry}/attachments[?names=…]`: `{"removed": [names]}`.
    pub async fn remove_attachments(
        &self,
        bucket: &str,
        entry: &str,
        names: Option<&[String]>,
    ) -> Result<Value, ClientError> {
        let path = format!("{}/attachments", entry_path(bucket, entry));
        let mut req = self.request(Method::DELETE, &path);
        if let Some(names) = names {
            req = req.query(&[("names", names.join(","))]);
        }
        self.json(req).await
    }

    /// `PUT /api/v1/b/{bucket}/rename` with `{"new_name"}`: the bucket under its new name.
    pub async fn rename_bucket(&self, bucket: &str, new_name: &str) -> Result<Value, ClientError> {
        let path = format!("{}/rename", bucket_path(bucket));
        let body = serde_json::json!({ "new_name": new_name });
        self.json(self.request(Method::PUT, &path).json(&body))
            .await
    }

    /// `GET /api/v1/tokens`: `{"tokens": [...]}`.
    pub async fn list_tokens(&self) -> Result<Value, ClientError> {
        self.json(self.request(Method::GET, "/api/v1/tokens")).await
    }

    /// `POST /api/v1/tokens/{name}` with `{"full_access", "read", "write"}`: `{"name",
    /// "value"}` (the value is shown once).
    pub async fn create_token(&self, name: &str, spec: &Value) -> Result<Value, ClientError> {
        let path = format!("/api/v1/tokens/{}", seg(name));
        self.json(self.request(Method::POST, &path).json(spec))
            .await
    }

    /// `POST /api/v1/tokens/{name}/rotate`: a new value (`{"name", "value"}`); the old one
    /// stops working at once.
    pub async fn rotate_token(&self, name: &str) -> Result<Value, ClientError> {
        let path = format!("/api/v1/tokens/{}/rotate", seg(name));
        self.json(self.request(Method::POST, &path)).await
    }

    /// `POST /api/v1/links`: a query link (`{"link", "expires_at", "file_name"}`).
    pub async fn create_link(&self, spec: &Value) -> Result<Value, ClientError> {
        self.json(self.request(Method::POST, "/api/v1/links").json(spec))
            .await
    }

    /// `DELETE /api/v1/tokens/{name}[?disable_auth=true]`.
    pub async fn remove_token(&self, name: &str, disable_auth: bool) -> Result<Value, ClientError> {
        let path = format!("/api/v1/tokens/{}", seg(name));
        let mut req = self.request(Method::DELETE, &path);
        if disable_auth {
            req = req.query(&[("disable_auth", "true")]);
        }
        self.json(req).await
    }

    /// `GET /api/v1/me`: the calling token's permissions.
    pub async fn me(&self) -> Result<Value, ClientError> {
        self.json(self.request(Method::GET, "/api/v1/me")).await
    }

    /// A request writing one record: `POST .../{entry}[?ts=]` with its content type and
    /// label headers; the caller adds the body and sends it with [`Client::json`].
    pub fn write_request(
        &self,
        bucket: &str,
        entry: &str,
        ts: Option<u64>,
        content_type: &str,
        labels: &(impl LabelPairs + ?Sized),
    ) -> RequestBuilder {
        let mut req = self
            .request(Method::POST, &entry_path(bucket, entry))
            .header(reqwest::header::CONTENT_TYPE, content_type);
        if let Some(ts) = ts {
            req = req.query(&[("ts", ts)]);
        }
        for (k, v) in labels.label_pairs() {
            req = req.header(label_header(k), encode_label_value(v));
        }
        req
    }

    /// Writes one record; answers its timestamp.
    pub async fn write(
        &self,
        bucket: &str,
        entry: &str,
        ts: Option<u64>,
        content_type: &str,
        labels: &(impl LabelPairs + ?Sized),
        payload: impl Into<reqwest::Body>,
    ) -> Result<u64, ClientError> {
        let req = self
            .write_request(bucket, entry, ts, content_type, labels)
            .body(payload);
        let v = self.json(req).await?;
        v["ts"]
            .as_u64()
            .ok_or_else(|| ClientError::Protocol(format!("a write answered {v}, without `ts`")))
    }

    /// `POST .../{entry}/batch` with a framed body (`framing::put_record` ..., `put_end`):
    /// the server's answer (`{"written", "failed", "results"}`).
    pub async fn write_batch(
        &self,
        bucket: &str,
        entry: &str,
        body: Bytes,
    ) -> Result<Value, ClientError> {
        let path = format!("{}/batch", entry_path(bucket, entry));
        let req = self
            .request(Method::POST, &path)
            .header(reqwest::header::CONTENT_TYPE, MEDIA_TYPE)
            .body(body);
        self.json(req).await
    }

    /// `GET .../{entry}[?ts=]`: the record's response (the latest without `ts`), its body
    /// not read yet.
    pub async fn read(
        &self,
        bucket: &str,
        entry: &str,
        ts: Option<u64>,
    ) -> Result<Response, ClientError> {
        let mut req = self.request(Method::GET, &entry_path(bucket, entry));
        if let Some(ts) = ts {
            req = req.query(&[("ts", ts)]);
        }
        self.send(req).await
    }

    /// A query stream: `GET` on `path` (an entry's or the bucket's `.../query`) with
    /// `params`, answered as a [`QueryStream`] of frame events.
    pub async fn query(
        &self,
        path: &str,
        params: &[(String, String)],
    ) -> Result<QueryStream, ClientError> {
        let resp = self
            .send(self.request(Method::GET, path).query(params))
            .await?;
        Ok(QueryStream {
            resp,
            dec: ChunkDecoder::new(),
            skipped: None,
        })
    }
}

/// The timestamp of a read's answer (`x-tsblob-ts`).
pub fn record_ts(resp: &Response) -> Option<u64> {
    resp.headers()
        .get(TS_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// The frames of a query answer, decoded as they arrive (payloads as slices of the
/// received chunks).
pub struct QueryStream {
    resp: Response,
    dec: ChunkDecoder,
    skipped: Option<Skipped>,
}

/// The records a query skipped because their stored bytes are damaged (frame kind 5).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skipped {
    /// The first ones, each named: at most as many as the server lists.
    pub records: Vec<SkippedRecord>,
    /// How many were skipped in all (more than `records.len()` once the list is full).
    pub count: u64,
}

/// One skipped record: its entry (multi-entry queries), timestamp and error code
/// (`corrupt_record`, `tier_object_missing`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRecord {
    pub entry: Option<String>,
    pub ts: u64,
    pub code: String,
}

/// The most skipped records a [`QueryStream`] keeps named over all the reports of a query
/// (the server names at most as many in one report, its `max_listed`); the rest are counted.
pub const MAX_SKIPPED_LISTED: usize = 1000;

impl Skipped {
    /// Adds a report: its count, and its records while fewer than [`MAX_SKIPPED_LISTED`]
    /// are listed. Bug "skipped reports grow for ever": a live tail's reports were all kept.
    pub fn add(&mut self, s: Skipped) {
        self.count = self.count.saturating_add(s.count);
        let room = MAX_SKIPPED_LISTED.saturating_sub(self.records.len());
        self.records.extend(s.records.into_iter().take(room));
    }

    /// Reads the JSON document of a skipped frame; `None` if it is not one.
    pub fn parse(json: &[u8]) -> Option<Skipped> {
        let v: Value = serde_json::from_slice(json).ok()?;
        let records = v["skipped"]
            .as_array()?
            .iter()
            .map(|r| {
                Some(SkippedRecord {
                    entry: r["entry"].as_str().map(String::from),
                    ts: r["ts"].as_u64()?,
                    code: r["code"].as_str()?.to_string(),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Skipped {
            count: v["skipped_count"].as_u64()?,
            records,
        })
    }
}

impl QueryStream {
    /// The next event; `Ok(None)` once the body has ended (after the end frame, or cut off:
    /// [`QueryStream::is_done`] tells which).
    pub async fn next_event(&mut self) -> Result<Option<Event>, ClientError> {
        loop {
            if let Some(e) = self.dec.next_event()? {
                if let Event::Skipped(json) = &e {
                    // (A live tail reports at each catch-up: the reports add up.)
                    if let Some(s) = Skipped::parse(json) {
                        self.skipped.get_or_insert_with(Skipped::default).add(s);
                    }
                }
                return Ok(Some(e));
            }
            match self.resp.chunk().await.map_err(ClientError::Body)? {
                Some(chunk) => self.dec.push(chunk),
                None => return Ok(None),
            }
        }
    }

    /// The records the server skipped as damaged, once its report arrived (just before the
    /// end frame); `None` if it skipped nothing (or the report has not come yet).
    pub fn skipped(&self) -> Option<&Skipped> {
        self.skipped.as_ref()
    }

    /// True once the end or error frame arrived.
    pub fn is_done(&self) -> bool {
        self.dec.is_done()
    }

    /// True between frames.
    pub fn at_frame_boundary(&self) -> bool {
        self.dec.at_frame_boundary()
    }

    /// Record frames received.
    pub fn records(&self) -> u64 {
        self.dec.records()
    }

    /// Bytes received but not decoded.
    pub fn buffered(&self) -> usize {
        self.dec.buffered()
    }
}

/// Passes a successful response through; otherwise [`ClientError::Status`] with the
/// server's error code and message (one short line each, see [`crate::outbound`]); an
/// answer that is not a tsblob error document is `http_error` with its size and type, never
/// its text; a redirect (never followed) names the host it points to.
pub async fn check(resp: Response) -> Result<Response, ClientError> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    let (status, code, message) = crate::outbound::describe_error(resp).await;
    Err(ClientError::Status {
        status: status.as_u16(),
        code: code.unwrap_or_else(|| "http_error".into()),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile probe of 2026-11-28: a JSON answer of 10 million `{}` (20 MB, under
    /// `JSON_MAX`) was parsed whole into values, 1.86 GB of the CLI. Parts are counted
    /// first; strings do not count, whatever they hold.
    #[test]
    fn a_json_answer_of_millions_of_values_was_parsed_whole() {
        assert_eq!(
            json_parts(br#"{"a": [1, 2, {"b": "x,y:[{"}], "c": "\",:"}"#),
            9
        );
        let many = format!("[{}{{}}]", "{},".repeat(JSON_PARTS_MAX));
        assert!(json_parts(many.as_bytes()) > JSON_PARTS_MAX);
        let entries: Vec<serde_json::Value> = (0..200_000)
            .map(|i| {
                serde_json::json!({"name": format!("e{i}"), "record_count": i, "size": 1,
                "block_count": 1, "oldest_record": 1, "latest_record": 2, "status": "ok"})
            })
            .collect();
        let listing = serde_json::to_vec(&serde_json::json!({"entries": entries})).unwrap();
        assert!(
            json_parts(&listing) <= JSON_PARTS_MAX,
            "a real listing fits"
        );
    }

    /// Bug "skipped reports grow for ever": every skipped-record report of a long query or
    /// live tail was appended to the list; now at most [`MAX_SKIPPED_LISTED`] stay listed.
    #[test]
    fn skipped_reports_grow_for_ever() {
        let mut all = Skipped::default();
        for i in 0..50u64 {
            all.add(Skipped {
                records: (0..1000)
                    .map(|j| SkippedRecord {
                        entry: None,
                        ts: i * 1000 + j,
                        code: "corrupt_record".into(),
                    })
                    .collect(),
                count: 1000,
            });
        }
        assert_eq!(all.count, 50_000);
        assert_eq!(all.records.len(), MAX_SKIPPED_LISTED);
        assert_eq!(all.records[0].ts, 0);
    }

    /// Bug "dot segments": `entry_path("cams", "x/../../other")` was
    /// `/api/v1/b/cams/x/../../other`, which URL normalization turned into
    /// `/api/v1/b/other` (a DELETE of it removed the bucket); `bucket_path("a/b")` addressed
    /// entry `b` of bucket `a`. Such names now travel whole, for the server to refuse.
    #[test]
    fn dot_segments_addressed_another_resource() {
        assert_eq!(
            entry_path("cams", "robot1/front"),
            "/api/v1/b/cams/robot1/front"
        );
        for (entry, sent) in [
            ("x/../../other", "x%2F..%2F..%2Fother"),
            ("a//b", "a%2F%2Fb"),
            ("./a", ".%2Fa"),
            ("a/", "a%2F"),
        ] {
            assert_eq!(entry_path("cams", entry), format!("/api/v1/b/cams/{sent}"));
        }
        assert_eq!(bucket_path("a/b"), "/api/v1/b/a%2Fb");
        assert_eq!(bucket_path("a/../other"), "/api/v1/b/a%2F..%2Fother");
        // What the URL keeps is what was meant: no dot segment is left to resolve.
        for path in [
            entry_path("cams", "x/../../other"),
            bucket_path("a/../other"),
        ] {
            let url = reqwest::Url::parse(&format!("http://h{path}")).map(|u| u.path().to_string());
            assert_eq!(url.ok().as_deref(), Some(path.as_str()));
        }
    }
}
