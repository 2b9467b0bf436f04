//! Browsers kept out by default (issue 27, defect 6).
//!
//! A server on loopback without tokens (the default) trusts every program that can open a
//! connection to it. A web browser is such a program, and it runs code from whatever site
//! its user visits: without these rules, a page on another site could create a token
//! (locking the owner out), create buckets, store a `text/html` record and navigate to it
//! (script running in the server's origin, free to read every bucket), and, through DNS
//! rebinding, read the API as if it were its own site. The rules, applied to the API by its
//! one middleware (`http::gate`) before the token check, and to the console's files:
//!
//! 1. **`Host` allow-list.** On a loopback `--listen`, only loopback names and addresses
//!    (`localhost`, `127.x.x.x`, `[::1]`, any port) and the `--allowed-hosts` names are
//!    answered: a page on `attacker.example` whose name was made to resolve to 127.0.0.1
//!    sends `Host: attacker.example` and is refused (403 `host_not_allowed`). `/health` is
//!    exempt (probes send the host they like; it holds no data). Beyond loopback without
//!    `--allowed-hosts`, any name is answered while requests need a token (a rebound page
//!    has none); with authentication off (`--no-auth`, or the last token removed) only
//!    loopback names, IP addresses and the machine's own host name are: a rebound page
//!    always sends a name of its own site.
//! 2. **Other sites' pages are refused** (403 `cross_origin`), reads included (with no
//!    token a read is a leak): an `Origin` other than the server's own (its `Host`) or a
//!    `--cors-origin`, `Origin: null`, and, without `Origin`, `Sec-Fetch-Site: cross-site`
//!    or `same-site` (another port of the same host is "same-site": the origin could not
//!    be checked). The console at `/ui/` is same-origin and keeps working.
//! 3. **CORS only for `--cors-origin`**: a preflight from a listed origin is answered (204)
//!    and its requests carry `Access-Control-Allow-Origin`; no other answer has any
//!    `Access-Control-*` header.
//! 4. **Nothing the API answers runs in the server's origin**: every API answer (record
//!    payloads with their stored content type included) carries `X-Content-Type-Options:
//!    nosniff`, `Content-Security-Policy: sandbox; default-src 'none'` and
//!    `Cross-Origin-Resource-Policy: same-origin`, and any content type outside a short list
//!    of passive ones (images, audio, video, plain text, JSON, octet streams) is sent with
//!    `Content-Disposition: attachment`: an HTML, SVG, XML or script record downloads.
//!
//! curl, the SDK and the CLI send neither `Origin` nor `Sec-Fetch-Site`, and a loopback
//! `Host` (or the name they were given, on a server that allows it): nothing changes for them.

use std::borrow::Cow;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use tsblob_proto::ErrorCode;

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use super::errors::AppError;

/// The policy of every payload the API answers (rule 4): a document that the browser would
/// render runs no script, loads nothing, and gets a unique opaque origin.
pub const PAYLOAD_CSP: &str = "sandbox; default-src 'none'";

const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");
const SEC_FETCH_DEST: HeaderName = HeaderName::from_static("sec-fetch-dest");
const CROSS_ORIGIN_RESOURCE_POLICY: HeaderName =
    HeaderName::from_static("cross-origin-resource-policy");

/// Which `Host` values a server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hosts {
    /// Any (`--allowed-hosts '*'`).
    Any,
    /// Loopback names and addresses, and these (`name` or `name:port`, lower case).
    LoopbackAnd(Vec<String>),
    /// A non-loopback `--listen` without `--allowed-hosts`: any name while requests need a
    /// token; without one (`--no-auth`), loopback names, IP addresses and these (the
    /// machine's own names, lower case): DNS rebinding makes a browser send a name of the
    /// attacker's site, never an address or this machine's name.
    AnyWithToken(Vec<String>),
}

/// What a server accepts from browsers (`--allowed-hosts`, `--cors-origin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserPolicy {
    hosts: Hosts,
    /// `--cors-origin` origins, as [`parse_origin`] writes them.
    cors: Vec<String>,
}

impl Default for BrowserPolicy {
    /// The policy of a loopback server without flags: loopback `Host` only, no CORS.
    fn default() -> Self {
        BrowserPolicy {
            hosts: Hosts::LoopbackAnd(Vec::new()),
            cors: Vec::new(),
        }
    }
}

/// The CORS origin a request was admitted for (echoed in `Access-Control-Allow-Origin`).
#[derive(Debug)]
pub(crate) struct Cors(Option<HeaderValue>);

impl BrowserPolicy {
    /// The policy of a server on `listen`, with `allowed_hosts` as [`parse_allowed_host`]
    /// and `cors_origins` as [`parse_origin`] return them. Without `allowed_hosts`, a
    /// loopback server answers loopback names only, and any other server any name while
    /// requests need a token (it cannot know the names it is reached by), else addresses
    /// and the machine's own names only ([`Hosts::AnyWithToken`]).
    pub fn new(
        listen: SocketAddr,
        allowed_hosts: &[String],
        cors_origins: &[String],
    ) -> BrowserPolicy {
        let hosts = if allowed_hosts.iter().any(|h| h == "*") {
            Hosts::Any
        } else if allowed_hosts.is_empty() && !listen.ip().is_loopback() {
            Hosts::AnyWithToken(own_names())
        } else {
            Hosts::LoopbackAnd(allowed_hosts.to_vec())
        };
        BrowserPolicy {
            hosts,
            cors: cors_origins.to_vec(),
        }
    }

    /// Rules 1 to 3 for an API request: `Ok` with the CORS origin to answer (if any), or
    /// `Err` with the whole answer (a refusal, or a CORS preflight's 204). `auth_on`: do
    /// requests need a token now (asked only beyond loopback without `--allowed-hosts`).
    pub(crate) fn admit(
        &self,
        req: &Request,
        auth_on: impl FnOnce() -> bool,
    ) -> Result<Cors, Box<Response>> {
        let headers = req.headers();
        if req.uri().path() != "/health" {
            self.check_host(headers, auth_on)
                .map_err(|e| Box::new(refusal(e)))?;
        }
        check_dest(headers).map_err(|e| Box::new(refusal(e)))?;
        let cors = self
            .check_origin(headers)
            .map_err(|e| Box::new(refusal(e)))?;
        if let Some(origin) = &cors.0 {
            if req.method() == Method::OPTIONS
                && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
            {
                return Err(Box::new(preflight(origin, headers)));
            }
        }
        Ok(cors)
    }

    /// Rule 1 alone, for the console's files (public: only DNS rebinding matters there).
    pub(crate) fn admit_host(
        &self,
        req: &Request,
        auth_on: impl FnOnce() -> bool,
    ) -> Result<(), Box<Response>> {
        self.check_host(req.headers(), auth_on)
            .map_err(|e| Box::new(refusal(e)))
    }

    /// Rule 1 alone, for a query link's download (`links.rs`): a link is public (it is the
    /// permission), and a shared link is opened from other sites' pages; no CORS. Rule 4
    /// still applies to its answer ([`Self::finish`]).
    pub(crate) fn admit_public(
        &self,
        req: &Request,
        auth_on: impl FnOnce() -> bool,
    ) -> Result<Cors, Box<Response>> {
        self.admit_host(req, auth_on)?;
        check_dest(req.headers()).map_err(|e| Box::new(refusal(e)))?;
        Ok(Cors(None))
    }

    /// Rules 3 and 4 on an API answer.
    pub(crate) fn finish(&self, cors: Cors, mut resp: Response) -> Response {
        let headers = resp.headers_mut();
        harden(headers);
        if !self.cors.is_empty() {
            headers.append(header::VARY, HeaderValue::from_static("Origin"));
        }
        if let Some(origin) = cors.0 {
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            // Label headers have dynamic names: `*` (valid without credentials mode
            // "include"; tsblob uses no cookies).
            headers.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static("*"),
            );
        }
        resp
    }

    fn check_host(
        &self,
        headers: &HeaderMap,
        auth_on: impl FnOnce() -> bool,
    ) -> Result<(), AppError> {
        let (extra, addresses) = match &self.hosts {
            Hosts::Any => return Ok(()),
            Hosts::LoopbackAnd(extra) => (extra, false),
            Hosts::AnyWithToken(own) => {
                if auth_on() {
                    return Ok(());
                }
                (own, true)
            }
        };
        // No Host: HTTP/1.0 or an in-process call, never a browser (browsers always send it).
        let Some(value) = headers.get(header::HOST) else {
            return Ok(());
        };
        // Lower-cased only when it has upper case (browsers send it lower-cased already).
        let raw = value.to_str().unwrap_or_default();
        let host: Cow<'_, str> = if raw.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(raw.to_ascii_lowercase())
        } else {
            Cow::Borrowed(raw)
        };
        if is_loopback_host(&host)
            || extra.iter().any(|allowed| host_matches(allowed, &host))
            || (addresses && is_address_host(&host))
        {
            return Ok(());
        }
        let listed = if addresses {
            format!(
                ", IP addresses and this machine's names ({}) while authentication is off (--no-auth)",
                extra.join(", ")
            )
        } else if extra.is_empty() {
            String::new()
        } else {
            format!(" and the --allowed-hosts names ({})", extra.join(", "))
        };
        Err(AppError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::HostNotAllowed,
            format!(
                "this server answers only the Host names localhost, 127.0.0.1 and [::1]{listed}, not {}: a web page on another name that resolves to this machine (DNS rebinding) must not reach it. Behind a name, start the server with --allowed-hosts <name> (TSBLOB_ALLOWED_HOSTS; '*' answers any name)",
                tsblob_proto::quote_short(&String::from_utf8_lossy(value.as_bytes()))
            ),
        ))
    }

    fn check_origin(&self, headers: &HeaderMap) -> Result<Cors, AppError> {
        let site = headers.get(SEC_FETCH_SITE).map(HeaderValue::as_bytes);
        let Some(origin) = headers.get(header::ORIGIN) else {
            return match site {
                Some(b"cross-site" | b"same-site") => Err(cross_origin(None, site)),
                _ => Ok(Cors(None)),
            };
        };
        if let Some(normal) = origin.to_str().ok().and_then(|o| parse_origin(o).ok()) {
            if self.cors.contains(&normal) {
                return Ok(Cors(Some(origin.clone())));
            }
            // The browser's own word wins over the Origin's host: `http://name` and
            // `https://name` share a host but not an origin (Chromium says `cross-site`).
            // Bug (browser probe of 2026-11-29): a page at http://tsblob.test posted to the
            // server at https://tsblob.test, tokenless, and created its first token.
            let foreign_site = matches!(site, Some(b"cross-site" | b"same-site"));
            if !foreign_site && same_origin(&normal, headers.get(header::HOST)) {
                return Ok(Cors(None));
            }
        }
        Err(cross_origin(Some(origin), site))
    }
}

/// What a browser says it will use an answer as (`Sec-Fetch-Dest`) that no answer of the
/// API or of a query link may become: a script, a style sheet, a worker or a frame. A
/// record's writer chose its content type: a record of type `text/javascript` was run by
/// `<script src>` from a page of this server's origin, whose policy allows its own scripts
/// (browser probe of 2026-11-29). The console reads every answer with `fetch` (`empty`).
const REFUSED_DESTS: &[&[u8]] = &[
    b"script",
    b"style",
    b"worker",
    b"sharedworker",
    b"serviceworker",
    b"audioworklet",
    b"paintworklet",
    b"xslt",
    b"iframe",
    b"frame",
    b"fencedframe",
    b"object",
    b"embed",
];

fn check_dest(headers: &HeaderMap) -> Result<(), AppError> {
    let Some(dest) = headers.get(SEC_FETCH_DEST) else {
        return Ok(());
    };
    if !REFUSED_DESTS.contains(&dest.as_bytes()) {
        return Ok(());
    }
    Err(AppError::new(
        StatusCode::FORBIDDEN,
        ErrorCode::CrossOrigin,
        format!(
            "a browser asked for this answer as a {} (Sec-Fetch-Dest): the API's answers and records are never loaded as scripts, style sheets, workers or frames; read them with fetch() or open them as a page",
            tsblob_proto::quote_short(&String::from_utf8_lossy(dest.as_bytes()))
        ),
    ))
}

fn refusal(e: AppError) -> Response {
    let mut resp = e.into_response();
    harden(resp.headers_mut());
    resp
}

fn cross_origin(origin: Option<&HeaderValue>, site: Option<&[u8]>) -> AppError {
    let site = String::from_utf8_lossy(site.unwrap_or(b"absent"));
    let from = match origin {
        Some(o) => format!(
            "a web page at {} (Sec-Fetch-Site: {site})",
            tsblob_proto::quote_short(&String::from_utf8_lossy(o.as_bytes()))
        ),
        None => format!("a web page of another site (Sec-Fetch-Site: {site}; no Origin)"),
    };
    AppError::new(
        StatusCode::FORBIDDEN,
        ErrorCode::CrossOrigin,
        format!(
            "this request comes from {from}, not from this server's own console: the API refuses other sites' pages (reads too), so that a page the user happens to visit cannot read or change this server through their browser. To let a web application call the API, start the server with --cors-origin <its origin, e.g. https://dash.example.com> (TSBLOB_CORS_ORIGIN) and call it with fetch(); programs that are not browsers (curl, the SDK, the CLI) are not affected"
        ),
    )
}

/// The answer to a CORS preflight from a `--cors-origin` origin.
fn preflight(origin: &HeaderValue, headers: &HeaderMap) -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let out = resp.headers_mut();
    out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    out.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, HEAD, POST, PUT, PATCH, DELETE"),
    );
    // The headers asked for, if they are header names (`*` would not cover Authorization).
    if let Some(asked) = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
        let names = asked.to_str().unwrap_or("");
        let valid = names
            .split(',')
            .map(str::trim)
            .all(|n| HeaderName::from_bytes(n.as_bytes()).is_ok());
        if valid {
            out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
        }
    }
    out.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    out.insert(
        header::VARY,
        HeaderValue::from_static(
            "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
        ),
    );
    harden(out);
    resp
}

/// How an answer a browser must not show is sent: saved, under a name whose extension
/// opens nothing. Bug (browser probe of 2026-11-29): a bare `attachment` let the browser
/// name the file from the URL and the writer's content type (`dl.html`, `setup.exe`), which
/// ran when opened from the downloads folder.
pub(crate) const ATTACHMENT: &str = "attachment; filename=\"tsblob-download.bin\"";

/// Rule 4 on the headers of an API answer (also the ReductStore API's probes and its 404
/// outside `/api/v1/`, answered before the native middleware).
pub(crate) fn harden(headers: &mut HeaderMap) {
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAYLOAD_CSP),
    );
    headers.insert(
        CROSS_ORIGIN_RESOURCE_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    // (An answer that is an attachment already keeps its file name: a query link's.)
    let attachment = headers
        .get(header::CONTENT_DISPOSITION)
        .is_some_and(|v| v.as_bytes().starts_with(b"attachment"));
    if !attachment && !is_passive(headers.get(header::CONTENT_TYPE)) {
        headers.insert(
            header::CONTENT_DISPOSITION,
            HeaderValue::from_static(ATTACHMENT),
        );
    }
}

/// Content types a browser shows without running anything: they stay inline; any other
/// (HTML, SVG, XML, scripts, PDF, types it does not know, none at all) is an attachment.
/// Compared without regard to ASCII case, in place (no lower-cased copy per answer).
fn is_passive(content_type: Option<&HeaderValue>) -> bool {
    let Some(ct) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    // A list (`image/png;,text/html`): browsers take the last type of a comma-separated
    // header (Fetch's "extract a MIME type"), so any comma, even one inside a quoted
    // parameter, makes the record a download.
    if ct.contains(',') {
        return false;
    }
    let essence = ct.split(';').next().unwrap_or("").trim();
    let Some((kind, sub)) = essence.split_once('/') else {
        return false;
    };
    let one_of = |s: &str, names: &[&str]| names.iter().any(|n| s.eq_ignore_ascii_case(n));
    if one_of(kind, &["audio", "video"]) {
        true
    } else if kind.eq_ignore_ascii_case("image") {
        one_of(
            sub,
            &[
                "png", "jpeg", "gif", "webp", "avif", "bmp", "tiff", "x-icon",
            ],
        )
    } else if kind.eq_ignore_ascii_case("text") {
        one_of(sub, &["plain", "csv"])
    } else if kind.eq_ignore_ascii_case("application") {
        const JSON: &str = "+json";
        one_of(
            sub,
            &[
                "json",
                "x-ndjson",
                "octet-stream",
                "x-tsblob-records",
                "cbor",
                "zstd",
            ],
        ) || sub
            .len()
            .checked_sub(JSON.len())
            .and_then(|at| sub.get(at..))
            .is_some_and(|end| end.eq_ignore_ascii_case(JSON))
    } else {
        false
    }
}

/// `host[:port]` split (an IPv6 host keeps its brackets).
fn split_host_port(s: &str) -> (&str, Option<&str>) {
    if s.starts_with('[') {
        return match s.find(']') {
            Some(end) => match s[end + 1..].strip_prefix(':') {
                Some(port) => (&s[..=end], Some(port)),
                None => (s, None),
            },
            None => (s, None),
        };
    }
    match s.rsplit_once(':') {
        Some((host, port))
            if !host.contains(':')
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            (host, Some(port))
        }
        _ => (s, None),
    }
}

/// `localhost`, `127.x.x.x` or `[::1]` (any port, lower case).
/// An IP address, with or without a port: never what a rebound page sends (its `Host` is
/// a name of its own site).
fn is_address_host(host: &str) -> bool {
    let (name, port) = split_host_port(host);
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return false;
    }
    match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        Some(v6) => v6.parse::<Ipv6Addr>().is_ok(),
        None => name.parse::<Ipv4Addr>().is_ok(),
    }
}

/// The machine's own host name, and `<name>.local` (mDNS), lower case: a rebound page
/// cannot make a browser send them (they are not names of its site).
fn own_names() -> Vec<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Vec::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let name = name.trim_end_matches('.');
    if name.is_empty()
        || name == "localhost"
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return Vec::new();
    }
    let mut names = vec![name.to_string()];
    if !name.ends_with(".local") {
        names.push(format!("{name}.local"));
    }
    names
}

fn is_loopback_host(host: &str) -> bool {
    let (name, port) = split_host_port(host);
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return false;
    }
    if name == "localhost" {
        return true;
    }
    if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().is_ok_and(|ip| {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        });
    }
    name.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// An `--allowed-hosts` entry without a port allows any port.
fn host_matches(allowed: &str, host: &str) -> bool {
    match split_host_port(allowed) {
        (_, Some(_)) => allowed == host,
        (name, None) => split_host_port(host).0 == name,
    }
}

/// True when `origin` (as [`parse_origin`] writes it) is the one of the server at `host`.
fn same_origin(origin: &str, host: Option<&HeaderValue>) -> bool {
    let Some(host) = host.and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    authority == without_default_port(scheme, &host.to_ascii_lowercase())
}

fn without_default_port<'a>(scheme: &str, authority: &'a str) -> &'a str {
    let default = if scheme == "https" { ":443" } else { ":80" };
    authority.strip_suffix(default).unwrap_or(authority)
}

/// An `--allowed-hosts` entry: a host name or address, optionally with `:port`, or `*`.
pub fn parse_allowed_host(s: &str) -> Result<String, String> {
    let s = s.trim().to_ascii_lowercase();
    if s == "*" {
        return Ok(s);
    }
    let (name, port) = split_host_port(&s);
    let name_ok = !name.is_empty()
        && (name.starts_with('[') && name.ends_with(']')
            || name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')));
    if !name_ok || port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return Err(format!(
            "{} is not a host name: give names as the browser's address bar shows them, such as tsblob.example.com or tsblob.example.com:8686 (no scheme, no path), or '*' for any",
            tsblob_proto::quote_short(&s)
        ));
    }
    Ok(s)
}

/// A `--cors-origin` (or a request's `Origin`): `http(s)://host[:port]`, returned in lower
/// case without a default port or a trailing slash, as browsers send it.
pub fn parse_origin(s: &str) -> Result<String, String> {
    let lower = s.trim().trim_end_matches('/').to_ascii_lowercase();
    let bad = || {
        format!(
            "{} is not an origin: give scheme, host and port of the web application, such as https://dash.example.com or http://localhost:3000 (no path; '*' is not accepted: it would let every web page use this server)",
            tsblob_proto::quote_short(s)
        )
    };
    let (scheme, authority) = lower.split_once("://").ok_or_else(bad)?;
    if !matches!(scheme, "http" | "https") {
        return Err(bad());
    }
    let (name, port) = split_host_port(authority);
    let name_ok = !name.is_empty()
        && (name.starts_with('[') && name.ends_with(']')
            || name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')));
    if !name_ok || port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return Err(bad());
    }
    Ok(format!(
        "{scheme}://{}",
        without_default_port(scheme, authority)
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn loopback_hosts_are_recognised_and_lookalikes_are_not() {
        for ok in [
            "localhost",
            "localhost:8686",
            "127.0.0.1",
            "127.0.0.1:8686",
            "127.1.2.3:1",
            "[::1]",
            "[::1]:8686",
            "[::ffff:127.0.0.1]:80",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for refused in [
            "",
            "localhost.",
            "localhost.attacker.example",
            "attacker.example:8686",
            "127.0.0.1.nip.io",
            "10.0.0.1:8686",
            "[::2]:8686",
            "localhost:99999",
            "localhost:abc",
            "[::1",
            "::1",
        ] {
            assert!(!is_loopback_host(refused), "{refused}");
        }
    }

    #[test]
    fn origins_are_normalised_as_browsers_send_them() {
        assert_eq!(
            parse_origin("HTTPS://Dash.Example.com:443/").unwrap(),
            "https://dash.example.com"
        );
        assert_eq!(
            parse_origin("http://localhost:3000").unwrap(),
            "http://localhost:3000"
        );
        assert_eq!(parse_origin("http://[::1]:80").unwrap(), "http://[::1]");
        for bad in [
            "*",
            "null",
            "dash.example.com",
            "ftp://x",
            "https://x/y",
            "https://",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
        assert!(same_origin(
            "http://127.0.0.1:8686",
            Some(&HeaderValue::from_static("127.0.0.1:8686"))
        ));
        assert!(same_origin(
            "http://example.com",
            Some(&HeaderValue::from_static("EXAMPLE.com:80"))
        ));
        assert!(!same_origin(
            "http://127.0.0.1:9999",
            Some(&HeaderValue::from_static("127.0.0.1:8686"))
        ));
    }

    /// Bug (browser probe of 2026-11-29): the Origin check compared hosts only, so a page
    /// at `http://tsblob.test` reached the server at `https://tsblob.test` (and the other way
    /// round); the browser's `Sec-Fetch-Site: cross-site` was not read when an Origin came.
    #[test]
    fn an_origin_of_the_other_scheme_on_the_same_host_was_taken_as_the_servers_own() {
        let policy = BrowserPolicy::new(
            "127.0.0.1:8383".parse().unwrap(),
            &["tsblob.test".to_string()],
            &["https://dash.example.com".to_string()],
        );
        let check = |origin: &'static str, site: Option<&'static str>| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_static("tsblob.test"));
            h.insert(header::ORIGIN, HeaderValue::from_static(origin));
            if let Some(site) = site {
                h.insert(SEC_FETCH_SITE, HeaderValue::from_static(site));
            }
            policy.check_origin(&h).is_ok()
        };
        assert!(check("http://tsblob.test", Some("same-origin")));
        assert!(check("http://tsblob.test", None), "an old browser");
        assert!(!check("http://tsblob.test", Some("cross-site")));
        assert!(!check("http://tsblob.test", Some("same-site")));
        // A --cors-origin page is cross-site by nature.
        assert!(check("https://dash.example.com", Some("cross-site")));
    }

    /// Bug (browser probe of 2026-11-29): a record of type `text/javascript` ran through
    /// `<script src>` from a page of the server's origin. No API answer is ever a script,
    /// a style sheet, a worker or a frame; fetch, pages, images and media pass.
    #[test]
    fn a_record_was_loaded_as_a_script_by_a_page_of_the_servers_origin() {
        let dest = |d: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(SEC_FETCH_DEST, HeaderValue::from_static(d));
            check_dest(&h).is_ok()
        };
        for refused in [
            "script",
            "style",
            "worker",
            "serviceworker",
            "iframe",
            "object",
            "embed",
        ] {
            assert!(!dest(refused), "{refused}");
        }
        for ok in ["empty", "document", "image", "video", "audio"] {
            assert!(dest(ok), "{ok}");
        }
        assert!(check_dest(&HeaderMap::new()).is_ok(), "no Sec-Fetch-Dest");
    }

    /// The Host check lower-cases only a name that has upper case (no copy per request):
    /// any case of an allowed name passes, a lookalike in any case does not.
    #[test]
    fn the_host_check_ignores_case_and_refuses_other_names() {
        let policy = BrowserPolicy::new(
            "127.0.0.1:8383".parse().unwrap(),
            &["tsblob.local".to_string()],
            &[],
        );
        let check = |host: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_static(host));
            policy.check_host(&h, || false).is_ok()
        };
        for ok in [
            "localhost:8383",
            "LocalHost:8383",
            "127.0.0.1",
            "[::1]:1",
            "tsblob.local",
            "TSBLOB.Local:80",
        ] {
            assert!(check(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "EVIL.example:8383",
            "localhost.evil",
            "TSBLOB.local.evil",
        ] {
            assert!(!check(bad), "{bad}");
        }
        assert!(
            policy.check_host(&HeaderMap::new(), || false).is_ok(),
            "no Host"
        );
    }

    /// Beyond loopback without `--allowed-hosts`: any name while a token is needed; with
    /// authentication off, addresses, loopback and the machine's own names only.
    #[test]
    fn beyond_loopback_without_a_token_only_addresses_and_own_names_are_answered() {
        let policy = BrowserPolicy::new("0.0.0.0:8686".parse().unwrap(), &[], &[]);
        let check = |host: &str, auth_on: bool| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            policy.check_host(&h, || auth_on).is_ok()
        };
        for any in ["evil.example", "192.0.2.1:8686", "tsblob.example.com"] {
            assert!(check(any, true), "{any} with a token");
        }
        let own = own_names();
        let mut ok = vec![
            "192.0.2.1:8686",
            "10.0.0.2",
            "[2001:db8::1]:80",
            "localhost:8686",
        ];
        ok.extend(own.iter().map(String::as_str));
        for host in ok {
            assert!(check(host, false), "{host} without a token");
        }
        for bad in [
            "evil.example",
            "evil.example:8686",
            "192.0.2.1.evil",
            "[2001:db8::1]:x",
            "10.0.0.2:99999",
        ] {
            assert!(!check(bad, false), "{bad} without a token");
        }
    }

    #[test]
    fn allowed_hosts_match_with_or_without_a_port() {
        assert!(host_matches(
            "tsblob.example.com",
            "tsblob.example.com:8686"
        ));
        assert!(host_matches("tsblob.example.com", "tsblob.example.com"));
        assert!(host_matches(
            "tsblob.example.com:443",
            "tsblob.example.com:443"
        ));
        assert!(!host_matches(
            "tsblob.example.com:443",
            "tsblob.example.com:8686"
        ));
        assert!(!host_matches(
            "tsblob.example.com",
            "evil.tsblob.example.com"
        ));
        assert_eq!(
            parse_allowed_host(" TSBLOB.local ").unwrap(),
            "tsblob.local"
        );
        assert!(parse_allowed_host("http://x").is_err());
        assert!(parse_allowed_host("x/y").is_err());
    }

    #[test]
    fn only_passive_types_stay_inline() {
        let passive = |ct: &'static str| is_passive(Some(&HeaderValue::from_static(ct)));
        for ok in [
            "image/jpeg",
            "image/PNG",
            "text/plain; charset=utf-8",
            "application/json",
            "application/x-ndjson",
            "application/ld+json",
            "video/mp4",
            "application/octet-stream",
            "Application/LD+JSON",
            "AUDIO/ogg",
            "text/CSV",
        ] {
            assert!(passive(ok), "{ok}");
        }
        for active in [
            "text/html",
            " TEXT/HTML ; charset=utf-8",
            "image/svg+xml",
            "application/xhtml+xml",
            "text/xml",
            "application/xml",
            "application/rss+xml",
            "text/javascript",
            "application/javascript",
            "application/pdf",
            "text/xsl",
            "multipart/x-mixed-replace",
            "nonsense",
            "Image/SVG+XML",
            "application/+jso",
            "",
        ] {
            assert!(!passive(active), "{active}");
        }
        assert!(!is_passive(None));
    }
}
