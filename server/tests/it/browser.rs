//! Browsers kept out by default (issue 27, defect 6): each rule of
//! `server/src/http/browser.rs` pinned by a test named after the hole it closes. Most drive
//! the router without a socket (`oneshot`, with the headers a browser would send); the
//! flags and the start-up refusal go through a real `tsblob serve`. The whole attack in a
//! real Chromium is `client-py/tests/ui/test_browser_attack.py`.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request};
use axum::Router;
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;
use tsblob_server::http::browser::{parse_allowed_host, parse_origin, BrowserPolicy};
use tsblob_server::http::{app, auth::Auth, Limits};
use tsblob_storage::{Store, StoreOptions};

use crate::common::Server;

/// The `Host` a browser sends to the default server.
const OWN: &str = "127.0.0.1:8686";

struct Fixture {
    app: Router,
    _dir: tempfile::TempDir,
}

struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
    fn has_cors_headers(&self) -> bool {
        self.headers
            .keys()
            .any(|k| k.as_str().starts_with("access-control-"))
    }
}

fn loopback() -> SocketAddr {
    "127.0.0.1:8686".parse().unwrap()
}

fn fixture(policy: BrowserPolicy) -> Fixture {
    fixture_of(policy, |state, _| app(state))
}

/// The ReductStore API's router over the same state (`--reductstore-listen`).
fn reduct_fixture(policy: BrowserPolicy) -> Fixture {
    fixture_of(policy, |state, policy| {
        let limits = tsblob_server::reduct::query::SessionLimits::default();
        tsblob_server::reduct::Reduct::new(state, limits).router(policy)
    })
}

fn fixture_of(
    policy: BrowserPolicy,
    router: impl FnOnce(tsblob_server::http::AppState, BrowserPolicy) -> Router,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let auth = Auth::load(dir.path(), None).unwrap();
    let limits = Limits {
        browser: policy.clone(),
        ..Limits::default()
    };
    let state = tsblob_server::assemble::state(store, auth, limits).unwrap();
    Fixture {
        app: router(state, policy),
        _dir: dir,
    }
}

impl Fixture {
    async fn send(&self, method: &str, uri: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let mut req = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = self
            .app
            .clone()
            .oneshot(req.body(Body::from(body.to_vec())).unwrap())
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            headers,
            body,
        }
    }

    /// As curl, the SDK and the CLI call: no `Origin`, no `Sec-Fetch-*`.
    async fn curl(&self, method: &str, uri: &str, body: &[u8]) -> Answer {
        self.send(method, uri, &[("host", OWN)], body).await
    }
}

/// What a page on another origin sends, in the three forms a browser uses.
const FOREIGN: [(&str, &str); 4] = [
    ("http://attacker.example", "cross-site"),
    // Another port of the same host is "same-site" to a browser, and still another origin.
    ("http://127.0.0.1:9999", "same-site"),
    ("http://localhost:8686", "same-site"),
    // Sandboxed frames, file: pages and cross-origin redirects send `Origin: null`.
    ("null", "cross-site"),
];

#[tokio::test]
async fn a_page_on_another_site_could_create_a_full_access_token() {
    let f = fixture(BrowserPolicy::default());
    for (origin, site) in FOREIGN {
        let a = f
            .send(
                "POST",
                "/api/v1/tokens/owned",
                &[
                    ("host", OWN),
                    ("origin", origin),
                    ("sec-fetch-site", site),
                    ("content-type", "text/plain"),
                ],
                br#"{"full_access": true}"#,
            )
            .await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (403, "cross_origin"),
            "{origin}"
        );
        let message = a.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(message.contains("--cors-origin"), "{message}");
        assert!(!a.has_cors_headers());
    }
    // No token was created: the owner still needs none, and none is listed.
    let a = f.curl("GET", "/api/v1/tokens", b"").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["tokens"], serde_json::json!([]));
}

#[tokio::test]
async fn a_page_on_another_site_could_create_buckets_and_write_records() {
    let f = fixture(BrowserPolicy::default());
    for (origin, site) in FOREIGN {
        let headers = [("host", OWN), ("origin", origin), ("sec-fetch-site", site)];
        let a = f.send("POST", "/api/v1/b/pwned", &headers, b"").await;
        assert_eq!((a.status, a.code().as_str()), (403, "cross_origin"));
        let a = f
            .send("POST", "/api/v1/b/pwned/e/batch", &headers, b"junk")
            .await;
        assert_eq!((a.status, a.code().as_str()), (403, "cross_origin"));
    }
    // A form post sends `Origin` as well; without Sec-Fetch-Site (older browsers) too.
    let a = f
        .send(
            "POST",
            "/api/v1/b/pwned",
            &[("host", OWN), ("origin", "http://attacker.example")],
            b"",
        )
        .await;
    assert_eq!(a.status, 403);
    assert_eq!(
        f.curl("GET", "/api/v1/b", b"").await.json()["buckets"],
        serde_json::json!([])
    );
}

#[tokio::test]
async fn a_page_on_another_site_could_read_a_private_bucket_without_cors() {
    let f = fixture(BrowserPolicy::default());
    assert_eq!(f.curl("POST", "/api/v1/b/private", b"").await.status, 201);
    assert_eq!(
        f.curl("POST", "/api/v1/b/private/e?ts=1", b"secret")
            .await
            .status,
        201
    );
    // `<img src>`, `<script src>`, fetch(mode: "no-cors") and links send no Origin on a GET,
    // only Sec-Fetch-Site: refused from another site, same-site (another port) included.
    for site in ["cross-site", "same-site"] {
        for uri in ["/api/v1/b/private/e?ts=1", "/api/v1/b", "/metrics"] {
            let a = f
                .send("GET", uri, &[("host", OWN), ("sec-fetch-site", site)], b"")
                .await;
            assert_eq!(
                (a.status, a.code().as_str()),
                (403, "cross_origin"),
                "{uri} {site}"
            );
            assert!(!a.body.windows(6).any(|w| w == b"secret"));
        }
    }
    // The console (same-origin), an address typed by the user (none) and curl (nothing).
    for headers in [
        vec![("host", OWN), ("sec-fetch-site", "same-origin")],
        vec![
            ("host", OWN),
            ("sec-fetch-site", "same-origin"),
            ("origin", "http://127.0.0.1:8686"),
        ],
        vec![("host", OWN), ("sec-fetch-site", "none")],
        vec![("host", OWN)],
        vec![],
    ] {
        let a = f
            .send("GET", "/api/v1/b/private/e?ts=1", &headers, b"")
            .await;
        assert_eq!(
            (a.status, &a.body[..]),
            (200, &b"secret"[..]),
            "{headers:?}"
        );
    }
    // The console's state changes send Origin, which is its own: accepted.
    let a = f
        .send(
            "DELETE",
            "/api/v1/b/private/e?ts=1",
            &[
                ("host", OWN),
                ("origin", "http://127.0.0.1:8686"),
                ("sec-fetch-site", "same-origin"),
            ],
            b"",
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.json());
}

#[tokio::test]
async fn dns_rebinding_reached_the_api_under_any_host_name() {
    let f = fixture(BrowserPolicy::default());
    // After rebinding, the page is same-origin with itself: Origin and Host agree.
    let a = f
        .send(
            "POST",
            "/api/v1/b/pwned",
            &[
                ("host", "attacker.example:8686"),
                ("origin", "http://attacker.example:8686"),
                ("sec-fetch-site", "same-origin"),
            ],
            b"",
        )
        .await;
    assert_eq!((a.status, a.code().as_str()), (403, "host_not_allowed"));
    let message = a.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("--allowed-hosts"), "{message}");
    for host in [
        "attacker.example",
        "127.0.0.1.nip.io:8686",
        "localhost.attacker.example",
    ] {
        let a = f.send("GET", "/api/v1/b", &[("host", host)], b"").await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (403, "host_not_allowed"),
            "{host}"
        );
        // The console's files too, though public.
        let a = f.send("GET", "/ui/", &[("host", host)], b"").await;
        assert_eq!(a.status, 403, "{host}");
    }
    for host in [
        "localhost:8686",
        "127.0.0.1:1234",
        "[::1]:8686",
        "LOCALHOST",
    ] {
        assert_eq!(
            f.send("GET", "/api/v1/b", &[("host", host)], b"")
                .await
                .status,
            200,
            "{host}"
        );
        assert_eq!(
            f.send("GET", "/ui/", &[("host", host)], b"").await.status,
            200
        );
    }
    // Probes name the host they like; /health holds no data.
    let a = f
        .send("GET", "/health", &[("host", "10.1.2.3:8686")], b"")
        .await;
    assert_eq!(a.status, 200);
}

#[tokio::test]
async fn allowed_hosts_admit_names_and_star_admits_any() {
    let names = vec![parse_allowed_host("tsblob.example.com").unwrap()];
    let f = fixture(BrowserPolicy::new(loopback(), &names, &[]));
    for (host, status) in [
        ("tsblob.example.com", 200),
        ("tsblob.example.com:443", 200),
        ("localhost:8686", 200),
        ("evil.example.com", 403),
    ] {
        let a = f.send("GET", "/api/v1/b", &[("host", host)], b"").await;
        assert_eq!(a.status, status, "{host}");
    }
    let any = vec!["*".to_string()];
    let f = fixture(BrowserPolicy::new(loopback(), &any, &[]));
    assert_eq!(
        f.send("GET", "/api/v1/b", &[("host", "whatever.example")], b"")
            .await
            .status,
        200
    );
    // Beyond loopback without the flag and without a token (`--no-auth`): addresses, not
    // names (dns_rebinding_reached_a_no_auth_server_beyond_loopback; with a token, any name).
    let f = fixture(BrowserPolicy::new(
        "0.0.0.0:8686".parse().unwrap(),
        &[],
        &[],
    ));
    for (host, status) in [("tsblob.lan:8686", 403), ("192.0.2.9:8686", 200)] {
        let a = f.send("GET", "/api/v1/b", &[("host", host)], b"").await;
        assert_eq!(a.status, status, "{host}");
    }
}

#[tokio::test]
async fn a_stored_html_record_ran_script_in_the_servers_origin() {
    let f = fixture(BrowserPolicy::default());
    f.curl("POST", "/api/v1/b/b", b"").await;
    let active = [
        "text/html",
        "text/html; charset=utf-8",
        "image/svg+xml",
        "application/xhtml+xml",
        "text/xml",
        "application/xml",
        "text/javascript",
        "application/pdf",
        // Bug pinned (hostile probe of 2026-11-28): a list whose first type is passive was
        // served inline, and Chromium rendered its last type (HTML, SVG) at our origin.
        "image/png;,text/html",
        "image/png;a=b,text/html",
        "text/plain; charset=utf-8, text/html",
        "video/mp4,text/html",
        "text/plain;charset=x,image/svg+xml",
    ];
    for (i, ct) in active.iter().enumerate() {
        let ts = i + 1;
        let a = f
            .send(
                "POST",
                &format!("/api/v1/b/b/page?ts={ts}"),
                &[("host", OWN), ("content-type", ct)],
                b"<script>fetch('/api/v1/b')</script>",
            )
            .await;
        assert_eq!(a.status, 201);
        for method in ["GET", "HEAD"] {
            let a = f
                .send(
                    method,
                    &format!("/api/v1/b/b/page?ts={ts}"),
                    &[("host", OWN)],
                    b"",
                )
                .await;
            assert_eq!(a.status, 200);
            assert_eq!(a.header("content-type"), Some(*ct), "the stored type stays");
            assert_eq!(a.header("x-content-type-options"), Some("nosniff"));
            assert_eq!(
                a.header("content-security-policy"),
                Some("sandbox; default-src 'none'"),
                "{method} {ct}"
            );
            assert_eq!(
                a.header("content-disposition"),
                Some("attachment; filename=\"tsblob-download.bin\""),
                "{method} {ct}"
            );
            assert_eq!(
                a.header("cross-origin-resource-policy"),
                Some("same-origin")
            );
        }
    }
    // Passive types stay inline (the browser shows them), still sandboxed and nosniff.
    for (ts, ct) in [
        (100, "image/jpeg"),
        (101, "text/plain"),
        (102, "application/json"),
    ] {
        f.send(
            "POST",
            &format!("/api/v1/b/b/page?ts={ts}"),
            &[("host", OWN), ("content-type", ct)],
            b"x",
        )
        .await;
        let a = f
            .send(
                "GET",
                &format!("/api/v1/b/b/page?ts={ts}"),
                &[("host", OWN)],
                b"",
            )
            .await;
        assert_eq!(a.header("content-disposition"), None, "{ct}");
        assert_eq!(a.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(
            a.header("content-security-policy"),
            Some("sandbox; default-src 'none'")
        );
    }
    // Query streams carry payloads in their own media type: nosniff and sandboxed too.
    for uri in [
        "/api/v1/b/b/page/query",
        "/api/v1/b/b/page/query?meta=true",
        "/api/v1/b/b/query?entries=page",
    ] {
        let a = f.send("GET", uri, &[("host", OWN)], b"").await;
        assert_eq!(a.status, 200, "{uri}: {:?}", a.json());
        assert_eq!(a.header("x-content-type-options"), Some("nosniff"), "{uri}");
        assert_eq!(
            a.header("content-security-policy"),
            Some("sandbox; default-src 'none'")
        );
    }
}

/// Bug "the ReductStore listener's probes and 404s lacked the hardening headers": answered
/// before the native middleware, `/api/v1/alive` and a path outside `/api/v1/` (whose body
/// repeats the path asked for) had no `nosniff` and no sandboxing CSP.
#[tokio::test]
async fn reductstore_probes_and_404s_carry_the_hardening_headers() {
    let f = reduct_fixture(BrowserPolicy::default());
    for uri in [
        "/api/v1/alive",
        "/api/v1/ready",
        "/%3Cscript%3Ealert(1)%3C/script%3E",
    ] {
        let a = f.send("GET", uri, &[("host", "127.0.0.1:8383")], b"").await;
        assert_eq!(a.header("x-content-type-options"), Some("nosniff"), "{uri}");
        assert!(
            a.header("content-security-policy")
                .is_some_and(|v| v.contains("sandbox")),
            "{uri}: {:?}",
            a.headers
        );
    }
}

#[tokio::test]
async fn cors_answered_no_origin_and_is_now_only_for_listed_ones() {
    // Without --cors-origin: a preflight is refused, and no answer has a CORS header.
    let f = fixture(BrowserPolicy::default());
    let preflight = [
        ("host", OWN),
        ("origin", "http://dash.example.com"),
        ("sec-fetch-site", "cross-site"),
        ("access-control-request-method", "POST"),
        (
            "access-control-request-headers",
            "authorization, content-type",
        ),
    ];
    let a = f.send("OPTIONS", "/api/v1/b/x", &preflight, b"").await;
    assert_eq!(a.status, 403);
    assert!(!a.has_cors_headers());
    assert!(!f.curl("GET", "/api/v1/b", b"").await.has_cors_headers());

    let listed = vec![parse_origin("https://DASH.example.com:443/").unwrap()];
    let f = fixture(BrowserPolicy::new(loopback(), &[], &listed));
    let mut asked = preflight;
    asked[1] = ("origin", "https://dash.example.com");
    let a = f.send("OPTIONS", "/api/v1/b/x", &asked, b"").await;
    assert_eq!(a.status, 204);
    assert_eq!(
        a.header("access-control-allow-origin"),
        Some("https://dash.example.com")
    );
    assert!(a
        .header("access-control-allow-methods")
        .unwrap()
        .contains("POST"));
    assert_eq!(
        a.header("access-control-allow-headers"),
        Some("authorization, content-type")
    );
    // Its requests are admitted and answered with CORS headers.
    let a = f
        .send(
            "POST",
            "/api/v1/b/x",
            &[
                ("host", OWN),
                ("origin", "https://dash.example.com"),
                ("sec-fetch-site", "cross-site"),
            ],
            b"",
        )
        .await;
    assert_eq!(a.status, 201);
    assert_eq!(
        a.header("access-control-allow-origin"),
        Some("https://dash.example.com")
    );
    assert!(a.header("vary").unwrap().contains("Origin"));
    // Another origin still gets nothing, preflight or request.
    asked[1] = ("origin", "https://evil.example.com");
    let a = f.send("OPTIONS", "/api/v1/b/x", &asked, b"").await;
    assert_eq!((a.status, a.has_cors_headers()), (403, false));
    let a = f
        .send(
            "GET",
            "/api/v1/b",
            &[("host", OWN), ("origin", "http://dash.example.com")],
            b"",
        )
        .await;
    assert_eq!(
        (a.status, a.has_cors_headers()),
        (403, false),
        "scheme differs"
    );
}

/// One raw HTTP/1.1 request with the given Host and extra headers: the status.
fn raw_status(addr: &str, path: &str, host: &str, extra: &str) -> u16 {
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = tcp.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn browser_flags_reach_the_server() {
    let s = Server::start(&[
        "--allowed-hosts",
        "tsblob.example.com,other.example",
        "--cors-origin",
        "https://dash.example.com",
    ]);
    let addr = s.url("").trim_start_matches("http://").to_string();
    assert_eq!(
        raw_status(&addr, "/api/v1/b", "tsblob.example.com", ""),
        200
    );
    assert_eq!(raw_status(&addr, "/api/v1/b", "other.example:80", ""), 200);
    assert_eq!(raw_status(&addr, "/api/v1/b", "attacker.example", ""), 403);
    let from = |origin: &str| format!("Origin: {origin}\r\nSec-Fetch-Site: cross-site\r\n");
    assert_eq!(
        raw_status(&addr, "/api/v1/b", &addr, &from("https://dash.example.com")),
        200
    );
    assert_eq!(
        raw_status(&addr, "/api/v1/b", &addr, &from("https://evil.example.com")),
        403
    );
    // Bad values are refused at start, with the reason.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .args(["serve", "--listen", "127.0.0.1:0", "--cors-origin", "*"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an origin"));
}

#[test]
fn listening_beyond_loopback_without_a_token_started_open_to_anyone() {
    let data = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .arg("serve")
        .arg("--data")
        .arg(data.path())
        .args(["--listen", "0.0.0.0:0"])
        .env_remove("TSBLOB_TOKEN")
        .env_remove("TSBLOB_NO_AUTH")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it started: {stderr}");
    assert!(
        stderr.contains("--no-auth") && stderr.contains("TSBLOB_TOKEN"),
        "{stderr}"
    );
    // A new data folder is not made by a refused start (docs walkthrough: it was left
    // behind with its index and lock file).
    let new = data.path().join("new");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .arg("serve")
        .arg("--data")
        .arg(&new)
        .args(["--listen", "0.0.0.0:0"])
        .env_remove("TSBLOB_TOKEN")
        .env_remove("TSBLOB_NO_AUTH")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--no-auth"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!new.exists(), "a refused start made the data folder");
    // On purpose it starts (with the warning), and so does a server with a token.
    let open = Server::start_on("0.0.0.0:0", &["--no-auth"]);
    assert!(open.stderr_contains("without any token", Duration::from_secs(5)));
    let _with_token = Server::start_on("0.0.0.0:0", &["--token", "t0p"]);
    // Loopback stays tokenless by default (the README's quick start).
    let _local = Server::start(&[]);
}

/// Bug pinned (hostile probe of 2026-11-28): beyond loopback without `--allowed-hosts` the
/// server answered any `Host`, reasoning that it had a token; with `--no-auth` it has none,
/// and a page on any site whose name was rebound to the device's address read the buckets,
/// created a token (locking the operator out) and a replication task to itself. Now a
/// tokenless server beyond loopback answers loopback names, IP addresses and the machine's
/// own name only; a server with a token still answers any name (the token is the check).
#[test]
fn dns_rebinding_reached_a_no_auth_server_beyond_loopback() {
    let open = Server::start_on("0.0.0.0:0", &["--no-auth"]);
    let addr = open.url("").trim_start_matches("http://").to_string();
    let port = addr.rsplit(':').next().unwrap().to_string();
    for rebound in ["attacker.example", "attacker.example:80"] {
        let host = format!("{rebound}:{port}");
        for path in ["/api/v1/b", "/api/v1/tokens", "/ui/"] {
            assert_eq!(raw_status(&addr, path, &host, ""), 403, "{host} {path}");
        }
    }
    let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        tcp,
        "POST /api/v1/tokens/rebound HTTP/1.1\r\nHost: attacker.example:{port}\r\nOrigin: http://attacker.example:{port}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = tcp.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        answer.contains("host_not_allowed") && answer.contains("--allowed-hosts"),
        "{answer}"
    );
    // Still tokenless: the operator is not locked out, and addresses are answered.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("192.0.2.7:{port}"),
        format!("[2001:db8::1]:{port}"),
        format!("localhost:{port}"),
    ] {
        assert_eq!(raw_status(&addr, "/api/v1/b", &host, ""), 200, "{host}");
    }
    // With a token every name is answered (a rebound page has no token: 401, not 403).
    let locked = Server::start_on("0.0.0.0:0", &["--token", "t0p"]);
    let addr = locked.url("").trim_start_matches("http://").to_string();
    assert_eq!(raw_status(&addr, "/api/v1/b", "attacker.example", ""), 401);
    assert_eq!(
        raw_status(
            &addr,
            "/api/v1/b",
            "tsblob.example.com",
            "Authorization: Bearer t0p\r\n"
        ),
        200
    );
    // With --allowed-hosts the list decides, token or not.
    let listed = Server::start_on(
        "0.0.0.0:0",
        &["--no-auth", "--allowed-hosts", "tsblob.example.com"],
    );
    let addr = listed.url("").trim_start_matches("http://").to_string();
    assert_eq!(
        raw_status(&addr, "/api/v1/b", "tsblob.example.com", ""),
        200
    );
    assert_eq!(raw_status(&addr, "/api/v1/b", "attacker.example", ""), 403);
}
