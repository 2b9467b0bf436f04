//! Tokens against a real `tsblob serve` (issue #7): with tokens configured every route but
//! `/health` refuses a missing or wrong token; a read-only token cannot write, create or
//! remove; a token for one bucket cannot see another; token values never reach the log
//! (even at trace level) or the data folder in plain text.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::Server;
use reqwest::{Client, Method, StatusCode};
use serde_json::Value;

const ADMIN: &str = "admin-secret-0123456789";

async fn call(
    c: &Client,
    s: &Server,
    m: Method,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, Value) {
    let mut req = c.request(m, s.url(path)).body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Every route of the API (with a method it takes) and a body that would be valid.
fn routes() -> Vec<(Method, &'static str, &'static str)> {
    vec![
        (Method::GET, "/metrics", ""),
        (Method::GET, "/api/v1/info", ""),
        (Method::GET, "/api/v1/openapi.json", ""),
        (Method::GET, "/api/v1/me", ""),
        (Method::GET, "/api/v1/tokens", ""),
        (Method::POST, "/api/v1/tokens/newtok", "{}"),
        (Method::DELETE, "/api/v1/tokens/reader", ""),
        (Method::GET, "/api/v1/b", ""),
        (Method::POST, "/api/v1/b/new", ""),
        (Method::GET, "/api/v1/b/b1", ""),
        (Method::PUT, "/api/v1/b/b1", "{}"),
        (Method::DELETE, "/api/v1/b/b1", ""),
        (Method::POST, "/api/v1/b/b1/e?ts=99", "x"),
        (Method::PUT, "/api/v1/b/b1/e?ts=98", "x"),
        (Method::GET, "/api/v1/b/b1/e?ts=1", ""),
        (Method::HEAD, "/api/v1/b/b1/e?ts=1", ""),
        (
            Method::PATCH,
            "/api/v1/b/b1/e?ts=1",
            r#"{"labels": {"a": "b"}}"#,
        ),
        (Method::DELETE, "/api/v1/b/b1/e?ts=1", ""),
        (Method::DELETE, "/api/v1/b/b1/e", ""),
        (Method::GET, "/api/v1/b/b1/e/info", ""),
        (Method::GET, "/api/v1/b/b1/e/query", ""),
        (Method::DELETE, "/api/v1/b/b1/e/query?start=0&stop=1", ""),
        (Method::POST, "/api/v1/b/b1/e/batch", ""),
    ]
}

#[tokio::test]
async fn tokens_guard_every_route_and_never_leak() {
    let s = Server::start(&["--token", ADMIN, "--log", "trace"]);
    let c = Client::new();
    for b in ["b1", "b2"] {
        assert_eq!(
            call(
                &c,
                &s,
                Method::POST,
                &format!("/api/v1/b/{b}"),
                Some(ADMIN),
                ""
            )
            .await
            .0,
            201
        );
        let p = format!("/api/v1/b/{b}/e?ts=1");
        assert_eq!(
            call(&c, &s, Method::POST, &p, Some(ADMIN), "secret payload")
                .await
                .0,
            201
        );
    }
    let mut values = vec![ADMIN.to_string()];
    let make = |name: &'static str, body: &'static str| {
        let (c, s) = (c.clone(), &s);
        async move {
            let (st, v) = call(
                &c,
                s,
                Method::POST,
                &format!("/api/v1/tokens/{name}"),
                Some(ADMIN),
                body,
            )
            .await;
            assert_eq!(st, 201, "{v}");
            v["value"].as_str().unwrap().to_string()
        }
    };
    let reader = make("reader", r#"{"read": ["b1"]}"#).await;
    let writer = make("writer", r#"{"write": ["b1"]}"#).await;
    values.push(reader.clone());
    values.push(writer.clone());

    // No token, a wrong token, a token with a wrong scheme: 401 on every route but /health.
    for (m, path, body) in routes() {
        for token in [None, Some("wrong-token"), Some("")] {
            let (st, v) = call(&c, &s, m.clone(), path, token, body).await;
            assert_eq!(st, 401, "{m} {path} with {token:?}: {v}");
            if m != Method::HEAD {
                assert_eq!(v["error"]["code"], "unauthorized", "{m} {path}: {v}");
            }
        }
        let r = c
            .request(m.clone(), s.url(path))
            .header("authorization", format!("Basic {ADMIN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{m} {path} with Basic auth");
    }
    assert_eq!(call(&c, &s, Method::GET, "/health", None, "").await.0, 200);

    // The read-only token reads b1, and can do nothing else.
    let ro = Some(reader.as_str());
    assert_eq!(
        call(&c, &s, Method::GET, "/api/v1/b/b1/e?ts=1", ro, "")
            .await
            .0,
        200
    );
    assert_eq!(
        call(&c, &s, Method::GET, "/api/v1/b/b1/e/query", ro, "")
            .await
            .0,
        200
    );
    for (m, path, body) in [
        (Method::POST, "/api/v1/b/b1/e?ts=5", "x"),
        (Method::POST, "/api/v1/b/b1/e/batch", ""),
        (
            Method::PATCH,
            "/api/v1/b/b1/e?ts=1",
            r#"{"labels": {"a": "b"}}"#,
        ),
        (Method::DELETE, "/api/v1/b/b1/e?ts=1", ""),
        (Method::DELETE, "/api/v1/b/b1/e", ""),
        (Method::DELETE, "/api/v1/b/b1/e/query?start=0", ""),
        (Method::POST, "/api/v1/b/b3", ""),
        (
            Method::PUT,
            "/api/v1/b/b1",
            r#"{"quota_type": "fifo", "quota_size": 1}"#,
        ),
        (Method::DELETE, "/api/v1/b/b1", ""),
        (
            Method::POST,
            "/api/v1/tokens/escalate",
            r#"{"full_access": true}"#,
        ),
        (Method::DELETE, "/api/v1/tokens/writer", ""),
        // Server-wide figures need full access or read access to every bucket.
        (Method::GET, "/metrics", ""),
        (Method::GET, "/api/v1/info", ""),
    ] {
        let (st, v) = call(&c, &s, m.clone(), path, ro, body).await;
        assert_eq!(st, 403, "read-only token: {m} {path}: {v}");
        assert_eq!(v["error"]["code"], "forbidden");
    }
    // Still there after all those refusals.
    assert_eq!(
        call(&c, &s, Method::GET, "/api/v1/b/b1/e?ts=1", Some(ADMIN), "")
            .await
            .0,
        200
    );

    // A token for b1 (read or write) cannot see b2: not listed, not readable, not writable;
    // a write-only token does not see b1 either (writing does not imply reading).
    for (t, listed) in [(reader.as_str(), vec!["b1"]), (writer.as_str(), vec![])] {
        let (_, list) = call(&c, &s, Method::GET, "/api/v1/b", Some(t), "").await;
        let names: Vec<&str> = list["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, listed, "{list}");
        for (m, path) in [
            (Method::GET, "/api/v1/b/b2"),
            (Method::GET, "/api/v1/b/b2/e?ts=1"),
            (Method::GET, "/api/v1/b/b2/e/query"),
            (Method::GET, "/api/v1/b/b2/e/info"),
            (Method::POST, "/api/v1/b/b2/e?ts=7"),
            (Method::DELETE, "/api/v1/b/b2/e"),
        ] {
            let (st, v) = call(&c, &s, m.clone(), path, Some(t), "x").await;
            assert_eq!(st, 403, "b1 token on {m} {path}: {v}");
            assert!(!v.to_string().contains("secret payload"));
        }
    }
    // The writer writes b1, and cannot read it back (ReductStore parity probe of
    // 2026-11-29: a write-only token read, queried and linked every record it could write).
    for (m, path) in [
        (Method::GET, "/api/v1/b/b1"),
        (Method::GET, "/api/v1/b/b1/e?ts=1"),
        (Method::GET, "/api/v1/b/b1/e/query"),
        (Method::GET, "/api/v1/b/b1/e/info"),
    ] {
        let (st, v) = call(&c, &s, m.clone(), path, Some(&writer), "").await;
        assert_eq!(st, 403, "write-only token on {m} {path}: {v}");
        assert!(!v.to_string().contains("secret payload"));
    }
    assert_eq!(
        call(
            &c,
            &s,
            Method::POST,
            "/api/v1/b/b1/e?ts=2",
            Some(&writer),
            "w"
        )
        .await
        .0,
        201
    );
    // A removed token stops working at once.
    assert_eq!(
        call(
            &c,
            &s,
            Method::DELETE,
            "/api/v1/tokens/reader",
            Some(ADMIN),
            ""
        )
        .await
        .0,
        200
    );
    assert_eq!(
        call(&c, &s, Method::GET, "/api/v1/b/b1/e?ts=1", ro, "")
            .await
            .0,
        401
    );

    // Never in the log (trace level, every request above carried one), never on disk.
    for v in &values {
        assert!(
            !s.stderr_contains(v, Duration::from_millis(300)),
            "a token value is in the log"
        );
        for f in walk(s.dir()) {
            let bytes = std::fs::read(&f).unwrap();
            assert!(
                !bytes.windows(v.len()).any(|w| w == v.as_bytes()),
                "a token value is stored in plain text in {f:?}"
            );
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
