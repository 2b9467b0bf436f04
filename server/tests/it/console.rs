//! The web console's server side without a socket: the histogram route and the console's
//! assets (public, with a Content-Security-Policy), through `tower::ServiceExt::oneshot`.
#![allow(clippy::unwrap_used)]

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;
use tsblob_server::http::{app, auth::Auth, Limits};
use tsblob_storage::{Store, StoreOptions};

struct Fixture {
    app: Router,
    _dir: tempfile::TempDir,
}

fn fixture(token: Option<&str>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let auth = Auth::load(dir.path(), token).unwrap();
    let state = tsblob_server::assemble::state(store, auth, Limits::default()).unwrap();
    Fixture {
        app: app(state),
        _dir: dir,
    }
}

impl Fixture {
    async fn send(
        &self,
        method: &str,
        uri: &str,
        token: Option<&str>,
        body: &'static [u8],
    ) -> (StatusCode, HeaderMap, Bytes) {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = self
            .app
            .clone()
            .oneshot(req.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, headers, body)
    }
}

fn json(b: &Bytes) -> Value {
    serde_json::from_slice(b).unwrap()
}

#[tokio::test]
async fn histogram_counts_per_step() {
    let f = fixture(None);
    assert_eq!(
        f.send("POST", "/api/v1/b/cams", None, b"").await.0,
        StatusCode::CREATED
    );
    for ts in [100u64, 150, 250, 999] {
        let (s, _, _) = f
            .send(
                "POST",
                &format!("/api/v1/b/cams/robot1/front?ts={ts}"),
                None,
                b"abcd",
            )
            .await;
        assert_eq!(s, StatusCode::CREATED);
    }
    let (s, _, b) = f
        .send(
            "GET",
            "/api/v1/b/cams/robot1/front/histogram?start=0&stop=1000&step=100",
            None,
            b"",
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
    let h = json(&b);
    assert_eq!(h["step"], 100);
    assert_eq!(
        h["counts"],
        serde_json::json!([0, 2, 1, 0, 0, 0, 0, 0, 0, 1])
    );
    assert_eq!(h["bytes"][1], 8);
    assert_eq!(h["truncated_at"], Value::Null);

    // Defaults: oldest to latest + 1, about 200 steps.
    let (_, _, b) = f
        .send("GET", "/api/v1/b/cams/robot1/front/histogram", None, b"")
        .await;
    let h = json(&b);
    assert_eq!(
        (h["start"].as_u64(), h["stop"].as_u64()),
        (Some(100), Some(1000))
    );
    assert_eq!(
        h["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .sum::<u64>(),
        4
    );

    let code = |b: &Bytes| json(b)["error"]["code"].as_str().unwrap().to_string();
    let (s, _, b) = f
        .send(
            "GET",
            "/api/v1/b/cams/robot1/front/histogram?start=0&stop=100000&step=1",
            None,
            b"",
        )
        .await;
    assert_eq!(
        (s, code(&b).as_str()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
    let (s, _, b) = f
        .send("GET", "/api/v1/b/cams/nope/histogram", None, b"")
        .await;
    assert_eq!(
        (s, code(&b).as_str()),
        (StatusCode::NOT_FOUND, "entry_not_found")
    );
    // "histogram" is a reserved last segment: no entry may take it (405, naming the route
    // word: `router::a_route_word_as_a_whole_entry_name_was_called_empty`).
    let (s, _, b) = f.send("POST", "/api/v1/b/cams/histogram", None, b"x").await;
    assert_eq!(
        (s, code(&b).as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );
}

#[tokio::test]
async fn histogram_needs_read_permission() {
    let f = fixture(Some("root"));
    f.send("POST", "/api/v1/b/cams", Some("root"), b"").await;
    f.send("POST", "/api/v1/b/cams/e?ts=5", Some("root"), b"x")
        .await;
    let (s, _, _) = f.send("GET", "/api/v1/b/cams/e/histogram", None, b"").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (_, _, b) = f
        .send(
            "POST",
            "/api/v1/tokens/other",
            Some("root"),
            br#"{"read": ["imu"]}"#,
        )
        .await;
    let other = json(&b)["value"].as_str().unwrap().to_string();
    let (s, _, _) = f
        .send("GET", "/api/v1/b/cams/e/histogram", Some(&other), b"")
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = f
        .send("GET", "/api/v1/b/cams/e/histogram", Some("root"), b"")
        .await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn console_assets_are_public_with_a_csp_and_data_is_not() {
    let f = fixture(Some("root"));
    for path in [
        "/ui/",
        "/ui/app.js",
        "/ui/pages/entry.js",
        "/ui/style.css",
        "/",
    ] {
        let (s, h, _) = f.send("GET", path, None, b"").await;
        assert_eq!(s, StatusCode::OK, "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("default-src 'self'") && !csp.contains("unsafe"),
            "{csp}"
        );
        assert_eq!(h["x-content-type-options"], "nosniff");
    }
    let (_, h, b) = f.send("GET", "/ui/app.js", None, b"").await;
    assert!(h["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    assert!(std::str::from_utf8(&b).unwrap().contains("import"));
    let (_, _, b) = f.send("GET", "/", None, b"").await;
    assert!(std::str::from_utf8(&b).unwrap().contains("href=\"/ui/\""));
    let (s, h, _) = f.send("GET", "/ui", None, b"").await;
    assert_eq!(
        (s, h["location"].to_str().unwrap()),
        (StatusCode::PERMANENT_REDIRECT, "/ui/")
    );
    let (s, _, b) = f.send("GET", "/ui/../tokens", None, b"").await;
    assert!(
        s == StatusCode::NOT_FOUND || s == StatusCode::UNAUTHORIZED,
        "{s} {b:?}"
    );
    let (s, h, b) = f.send("GET", "/ui/nope.js", None, b"").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(json(&b)["error"]["code"], "not_found");
    // It repeats the path: with the API's hardening headers (browser probe of 2026-11-29).
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert!(h.contains_key("content-security-policy"), "{h:?}");
    // Everything with data still needs the token.
    for path in ["/api/v1/b", "/api/v1/info", "/api/v1/me", "/metrics"] {
        assert_eq!(
            f.send("GET", path, None, b"").await.0,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
}
