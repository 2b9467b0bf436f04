//! Token expiry, IP allow-lists and rotation (issue 28) tried the way a careless or hostile
//! client would: an expired token on every kind of route of both APIs, limits at their
//! bounds at creation, an address outside the list, a spoofed `X-Forwarded-For`, the old
//! value of a rotated token. Streams of such tokens: `tail_hostile.rs`.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{bearer, create_token, token_value, Server};

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

#[tokio::test]
async fn an_expired_token_is_refused_on_every_kind_of_route() {
    let s = Server::start(&["--token", "root", "--reductstore-prefix", "/reduct"]);
    let admin = bearer("root");
    assert_eq!(
        admin
            .post(s.url("/api/v1/b/b"))
            .send()
            .await
            .unwrap()
            .status(),
        201
    );
    let r = admin
        .post(s.url("/api/v1/b/b/cam?ts=1"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // Valid for 5 s: long enough for its creation and the two requests below on a loaded
    // machine; the test then waits past it.
    let at = now_us() + 5_000_000;
    let v = token_value(
        &admin,
        &s,
        "brief",
        &format!(r#"{{"read": ["*"], "write": ["b"], "expires_at": {at}}}"#),
    )
    .await;
    let c = bearer(&v);
    assert_eq!(
        c.get(s.url("/api/v1/b/b")).send().await.unwrap().status(),
        200
    );
    let me: serde_json::Value = c
        .get(s.url("/api/v1/me"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (me["expires_at"].as_u64(), me["is_expired"].as_bool()),
        (Some(at), Some(false))
    );
    assert!(me["last_access"].as_u64().is_some(), "{me}");
    tokio::time::sleep(
        Duration::from_micros(at.saturating_sub(now_us())) + Duration::from_millis(50),
    )
    .await;
    let routes: &[(&str, &str)] = &[
        ("GET", "/api/v1/me"),
        ("GET", "/api/v1/info"),
        ("GET", "/api/v1/b"),
        ("GET", "/api/v1/b/b"),
        ("POST", "/api/v1/b/b/cam?ts=2"),
        ("GET", "/api/v1/b/b/cam?ts=1"),
        ("HEAD", "/api/v1/b/b/cam?ts=1"),
        ("GET", "/api/v1/b/b/cam/query"),
        ("GET", "/api/v1/b/b/query?entries=cam&follow=true"),
        ("GET", "/api/v1/b/b/cam/histogram"),
        ("DELETE", "/api/v1/b/b/cam?ts=1"),
        ("GET", "/metrics"),
        ("GET", "/reduct/api/v1/me"),
        ("GET", "/reduct/api/v1/b/b"),
        ("POST", "/reduct/api/v1/b/b/cam?ts=3"),
        ("GET", "/reduct/api/v1/b/b/cam?ts=1"),
        ("POST", "/reduct/api/v1/io/b/q"),
    ];
    for (method, path) in routes {
        let r = c
            .request(method.parse().unwrap(), s.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{method} {path}");
        if path.starts_with("/reduct") {
            let why = r.headers()["x-reduct-error"].to_str().unwrap().to_string();
            assert!(why.contains("expired"), "{method} {path}: {why}");
        } else if *method != "HEAD" {
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(
                body["error"]["code"], "token_expired",
                "{method} {path}: {body}"
            );
            assert!(
                body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("expires_at"),
                "{body}"
            );
        }
    }
    // Nothing was written or removed through it; the listing says it expired.
    let r = admin
        .get(s.url("/api/v1/b/b/cam?ts=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let list: serde_json::Value = admin
        .get(s.url("/api/v1/tokens"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["tokens"][0]["is_expired"], true, "{list}");
    let rs: serde_json::Value = admin
        .get(s.url("/reduct/api/v1/tokens/brief"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rs["is_expired"], true, "{rs}");
    assert!(rs["expires_at"].as_str().unwrap().ends_with('Z'), "{rs}");
    // An expired token cannot be rotated back to life.
    let r = admin
        .post(s.url("/api/v1/tokens/brief/rotate"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
}

#[tokio::test]
async fn token_limits_are_checked_at_creation() {
    let s = Server::start(&["--token", "root", "--reductstore-prefix", "/reduct"]);
    let admin = bearer("root");
    let now = now_us();
    for (spec, code) in [
        (
            format!(r#"{{"expires_at": {}}}"#, now - 1_000_000),
            "invalid_expiry",
        ),
        (r#"{"expires_at": 0}"#.to_string(), "invalid_expiry"),
        (
            r#"{"expires_at": 18446744073709551615}"#.to_string(),
            "invalid_expiry",
        ),
        (r#"{"ttl": 0}"#.to_string(), "invalid_ttl"),
        (
            r#"{"ip_allowlist": ["10.0.0.0/33"]}"#.to_string(),
            "invalid_ip_allowlist",
        ),
        (
            r#"{"ip_allowlist": ["example.com"]}"#.to_string(),
            "invalid_ip_allowlist",
        ),
    ] {
        let (status, body) = create_token(&admin, &s, "t", &spec).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (422, Some(code)),
            "{spec}: {body}"
        );
    }
    let (status, body) = create_token(&admin, &s, "t", r#"{"ttl": -1}"#).await;
    assert_eq!(status, 400, "{body}");
    // ReductStore's shapes: RFC 3339 times.
    for body in [
        r#"{"permissions": {"read": ["*"]}, "expires_at": "2001-01-01T00:00:00Z"}"#,
        r#"{"permissions": {"read": ["*"]}, "expires_at": "next week"}"#,
        r#"{"permissions": {"read": ["*"]}, "ttl": 0}"#,
        r#"{"permissions": {"read": ["*"]}, "ip_allowlist": ["300.1.1.1"]}"#,
    ] {
        let r = admin
            .post(s.url("/reduct/api/v1/tokens/t"))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{body}");
        assert!(r.headers().contains_key("x-reduct-error"));
    }
    // Nothing was made.
    let list: serde_json::Value = admin
        .get(s.url("/api/v1/tokens"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["tokens"], serde_json::json!([]));
    // A good one through the ReductStore API reads back in both shapes.
    let r = admin
        .post(s.url("/reduct/api/v1/tokens/t"))
        .body(r#"{"permissions": {"read": ["*"]}, "expires_at": "2999-01-01T02:00:00+02:00", "ttl": 3600, "ip_allowlist": ["10.0.0.0/8", "127.0.0.1"]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let native: serde_json::Value = admin
        .get(s.url("/api/v1/tokens"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let t = &native["tokens"][0];
    assert_eq!(t["expires_at"], 32_472_144_000_000_000u64, "{t}");
    assert_eq!(
        (t["ttl"].as_u64(), t["ip_allowlist"].clone()),
        (Some(3600), serde_json::json!(["10.0.0.0/8", "127.0.0.1"]))
    );
    let rs: serde_json::Value = admin
        .get(s.url("/reduct/api/v1/tokens/t"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rs["expires_at"], "2999-01-01T00:00:00.000000Z", "{rs}");
    assert_eq!(
        (rs["ttl"].as_u64(), rs["is_expired"].as_bool()),
        (Some(3600), Some(false))
    );
}

#[tokio::test]
async fn a_token_is_refused_from_an_address_outside_its_allowlist() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_in(dir.path(), &["--token", "root"]);
    let admin = bearer("root");
    admin.post(s.url("/api/v1/b/b")).send().await.unwrap();
    let far = bearer(
        &token_value(
            &admin,
            &s,
            "far",
            r#"{"read": ["b"], "ip_allowlist": ["203.0.113.10"]}"#,
        )
        .await,
    );
    let local = bearer(
        &token_value(
            &admin,
            &s,
            "local",
            r#"{"read": ["b"], "ip_allowlist": ["127.0.0.0/8", "::1"]}"#,
        )
        .await,
    );
    let r = far.get(s.url("/api/v1/b/b")).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "ip_not_allowed", "{body}");
    let why = body["error"]["message"].as_str().unwrap();
    assert!(
        why.contains("127.0.0.1") && why.contains("ip_allowlist"),
        "{why}"
    );
    // Claiming the allowed address in X-Forwarded-For changes nothing without a trusted
    // proxy.
    for h in ["x-forwarded-for", "forwarded", "x-real-ip"] {
        let v = if h == "forwarded" {
            "for=203.0.113.10"
        } else {
            "203.0.113.10"
        };
        let r = far
            .get(s.url("/api/v1/b/b"))
            .header(h, v)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{h}");
    }
    assert_eq!(
        local
            .get(s.url("/api/v1/b/b"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // A refused use is not a use.
    let list: serde_json::Value = admin
        .get(s.url("/api/v1/tokens"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let far_t = list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "far")
        .unwrap()
        .clone();
    assert!(far_t.get("last_access").is_none(), "{far_t}");

    // Behind a trusted proxy (here: loopback), the address it appends is the client's.
    drop(s);
    let s = Server::start_in(
        dir.path(),
        &["--token", "root", "--trusted-proxies", "127.0.0.1"],
    );
    let r = far
        .get(s.url("/api/v1/b/b"))
        .header("x-forwarded-for", "198.51.100.1, 203.0.113.10")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A client putting the allowed address first fools nobody: the proxy appends the real
    // one.
    let r = far
        .get(s.url("/api/v1/b/b"))
        .header("x-forwarded-for", "203.0.113.10, 198.51.100.1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("198.51.100.1"),
        "{body}"
    );
    // And the loopback token, seen through the proxy from elsewhere, is refused.
    let r = local
        .get(s.url("/api/v1/b/b"))
        .header("x-forwarded-for", "198.51.100.1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn a_rotated_token_s_old_value_stops_working_at_once() {
    let s = Server::start(&["--token", "root", "--reductstore-prefix", "/reduct"]);
    let admin = bearer("root");
    admin.post(s.url("/api/v1/b/b")).send().await.unwrap();
    let old = token_value(&admin, &s, "cam", r#"{"read": ["b"], "ttl": 3600}"#).await;
    assert_eq!(
        bearer(&old)
            .get(s.url("/api/v1/b/b"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let r = admin
        .post(s.url("/api/v1/tokens/cam/rotate"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    let new = v["value"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    assert_eq!(
        bearer(&old)
            .get(s.url("/api/v1/b/b"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    let me: serde_json::Value = bearer(&new)
        .get(s.url("/api/v1/me"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (me["read"].clone(), me["ttl"].as_u64()),
        (serde_json::json!(["b"]), Some(3600))
    );
    assert!(me["rotated"].as_u64().is_some(), "{me}");
    // Through the ReductStore API, in its shape.
    let r = admin
        .post(s.url("/reduct/api/v1/tokens/cam/rotate"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(v["created_at"].as_str().is_some(), "{v}");
    assert_eq!(
        bearer(&new)
            .get(s.url("/api/v1/b/b"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    let newer = bearer(v["value"].as_str().unwrap());
    assert_eq!(
        newer
            .get(s.url("/reduct/api/v1/b/b"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // Only an administrator rotates; unknown names and the --token admin token are 404.
    assert_eq!(
        newer
            .post(s.url("/api/v1/tokens/cam/rotate"))
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    for name in ["nope", "admin"] {
        let r = admin
            .post(s.url(&format!("/api/v1/tokens/{name}/rotate")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{name}");
    }
}

/// An MCAP export is a stream like a query (issue 28: token checks on long-lived
/// streams): one whose token is rotated while it is read ends cut (no footer) before its
/// last record, and one whose token expires likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcap_export_ends_when_its_token_is_rotated_or_expires() {
    use futures_util::StreamExt;
    let s = Server::start(&["--token", "root"]);
    let admin = bearer("root");
    admin.post(s.url("/api/v1/b/b")).send().await.unwrap();
    // 600 incompressible records of 64 KiB (MCAP chunks are compressed): far more than
    // the export's queue and the socket buffers.
    let mut b = bytes::BytesMut::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for ts in 0..600u64 {
        let payload: Vec<u8> = (0..64 << 10)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        tsblob_proto::framing::put_record(
            &mut b,
            1 + ts,
            "",
            &tsblob_proto::Labels::new(),
            &payload,
        );
    }
    tsblob_proto::framing::put_end(&mut b, 600);
    let r = admin
        .post(s.url("/api/v1/b/b/e/batch"))
        .header("content-type", tsblob_proto::framing::MEDIA_TYPE)
        .body(b.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let full = 600 * (64 << 10);
    for rotate in [true, false] {
        // The brief token is made just before its export, valid 5 s: time enough for the
        // export to start on a loaded machine; the test then waits past its expiry.
        let mut expires_at = 0;
        let value = if rotate {
            token_value(&admin, &s, "rot", r#"{"read": ["b"]}"#).await
        } else {
            expires_at = now_us() + 5_000_000;
            token_value(
                &admin,
                &s,
                "brief",
                &format!(r#"{{"read": ["b"], "expires_at": {expires_at}}}"#),
            )
            .await
        };
        let r = bearer(&value)
            .get(s.url("/api/v1/b/b/query?entries=e&format=mcap"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut body = r.bytes_stream();
        let mut got = 0usize;
        while got < 1 << 20 {
            got += body.next().await.unwrap().unwrap().len();
        }
        if rotate {
            let r = admin
                .post(s.url("/api/v1/tokens/rot/rotate"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        } else {
            // Past the expiry (and a second more).
            tokio::time::sleep(
                Duration::from_micros(expires_at.saturating_sub(now_us())) + Duration::from_secs(1),
            )
            .await;
        }
        let mut cut = false;
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(20), body.next())
            .await
            .expect("the export stalled")
        {
            match chunk {
                Ok(c) => got += c.len(),
                Err(_) => {
                    cut = true;
                    break;
                }
            }
        }
        assert!(
            cut,
            "the export ended cleanly after its token was {}",
            if rotate { "rotated" } else { "expired" }
        );
        assert!(got < full, "the whole export ({got} bytes) was sent");
    }
}

/// `last_access` is kept across a restart (written by the periodic flush and at a clean
/// shutdown, never by a request).
#[tokio::test]
async fn last_access_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start_in(
        dir.path(),
        &["--token", "root", "--token-access-flush", "1h"],
    );
    let admin = bearer("root");
    let v = token_value(&admin, &s, "user", r#"{"read": ["*"]}"#).await;
    let before = now_us();
    assert_eq!(
        bearer(&v)
            .get(s.url("/api/v1/b"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let file = std::fs::read_to_string(dir.path().join("tokens")).unwrap();
    assert!(
        !file.contains("last_access"),
        "a request wrote the token file: {file}"
    );
    s.signal_term();
    assert!(s
        .wait(Duration::from_secs(20))
        .is_some_and(|st| st.success()));
    let s = Server::start_in(dir.path(), &["--token", "root"]);
    let list: serde_json::Value = admin
        .get(s.url("/api/v1/tokens"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let at = list["tokens"][0]["last_access"].as_u64().unwrap();
    assert!(at >= before - 1_000_000 && at <= now_us(), "{list}");
}

/// Bug pinned (hostile round of 2026-11-27): ReductStore's v1 query route looked the entry
/// up before checking the caller's permission, so a token without access to the bucket
/// told existing entries (403) from missing ones (404).
#[tokio::test]
async fn a_v1_query_without_permission_does_not_tell_which_entries_exist() {
    let s = Server::start(&["--token", "root", "--reductstore-prefix", "/reduct"]);
    let admin = bearer("root");
    for path in ["/api/v1/b/b", "/api/v1/b/other"] {
        assert_eq!(admin.post(s.url(path)).send().await.unwrap().status(), 201);
    }
    let r = admin
        .post(s.url("/api/v1/b/b/cam?ts=1"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let outsider = bearer(
        &token_value(
            &admin,
            &s,
            "outsider",
            r#"{"read": ["other"], "write": ["other"]}"#,
        )
        .await,
    );
    let mut answers = Vec::new();
    for entry in ["cam", "ghost"] {
        let get = outsider
            .get(s.url(&format!("/reduct/api/v1/b/b/{entry}/q")))
            .send()
            .await
            .unwrap();
        let post = outsider
            .post(s.url(&format!("/reduct/api/v1/b/b/{entry}/q")))
            .body(r#"{"query_type": "QUERY"}"#)
            .send()
            .await
            .unwrap();
        let remove = outsider
            .post(s.url(&format!("/reduct/api/v1/b/b/{entry}/q")))
            .body(r#"{"query_type": "REMOVE", "start": 0}"#)
            .send()
            .await
            .unwrap();
        let mut statuses = Vec::new();
        for r in [get, post, remove] {
            statuses.push(r.status().as_u16());
            let _ = r.bytes().await.unwrap();
        }
        answers.push(statuses);
    }
    assert_eq!(answers, vec![vec![403, 403, 403], vec![403, 403, 403]]);
    // The root token still tells them apart, as ReductStore does.
    let missing = admin
        .get(s.url("/reduct/api/v1/b/b/ghost/q"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}
