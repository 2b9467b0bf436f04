//! Query links (issue 28): `POST /api/v1/links` makes a signed, expiring URL; `GET` of it
//! needs no token and runs the query as the creating token, now. Hostile cases: altered
//! signatures and parameters, expiry, a removed (or replaced) token, a removed bucket, many
//! downloads of one link at once (the stream caps), a reader that stalls. A module of the
//! router test binary.

use super::*;

const ROOT: &str = "root-secret";

fn req(method: &str, uri: &str, token: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    let mut r = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "localhost:8686");
    if let Some(t) = token {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    r.body(body.into()).unwrap()
}

impl Fixture {
    async fn as_root(&self, method: &str, uri: &str, body: impl Into<Body>) -> Answer {
        self.send(req(method, uri, Some(ROOT), body)).await
    }

    /// Makes a link as `token`; returns its path and query (what follows the host).
    async fn link(&self, token: &str, spec: Value) -> String {
        let a = self
            .send(req("POST", "/api/v1/links", Some(token), spec.to_string()))
            .await;
        assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
        let link = a.json()["link"].as_str().unwrap().to_string();
        link.strip_prefix("http://localhost:8686")
            .unwrap_or_else(|| panic!("{link}"))
            .to_string()
    }

    /// Downloads a link without a token.
    async fn get(&self, path: &str) -> Answer {
        self.send(req("GET", path, None, "")).await
    }

    async fn token(&self, name: &str, read: &[&str]) -> String {
        let body = json!({"read": read}).to_string();
        let a = self
            .as_root("POST", &format!("/api/v1/tokens/{name}"), body)
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
        a.json()["value"].as_str().unwrap().to_string()
    }
}

/// A server with a token, bucket `b`, entries `cams/front` (ts 1..=5, label n) and
/// `cams/back` (ts 3).
async fn seeded(limits: Limits) -> Fixture {
    let f = fixture_with(Some(ROOT), limits);
    assert_eq!(
        f.as_root("POST", "/api/v1/b/b", "").await.status,
        StatusCode::CREATED
    );
    for ts in 1..=5u64 {
        let r = Request::builder()
            .method("POST")
            .uri(format!("/api/v1/b/b/cams/front?ts={ts}"))
            .header("authorization", format!("Bearer {ROOT}"))
            .header("content-type", "image/jpeg")
            .header("x-tsblob-label-n", ts.to_string())
            .body(Body::from(format!("front-{ts}")))
            .unwrap();
        assert_eq!(f.send(r).await.status, StatusCode::CREATED);
    }
    let a = f
        .as_root("POST", "/api/v1/b/b/cams/back?ts=3", "back-3")
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    f
}

#[tokio::test]
async fn a_link_downloads_one_record_or_the_whole_query_without_a_token() {
    let f = seeded(Limits::default()).await;
    // One record by index of the query (ts 2..5 with n > 2: 3, 4, 5; index 1 is ts 4).
    let path = f
        .link(
            ROOT,
            json!({"bucket": "b", "entry": "cams/front", "start": 2,
                   "when": {"&n": {"$gt": 2}}, "index": 1}),
        )
        .await;
    // Named by the record's content type (image/jpeg), not .bin.
    assert!(path.starts_with("/api/v1/links/front_1.jpg?q="), "{path}");
    let a = f.get(&path).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(&a.body[..], b"front-4");
    assert_eq!(a.headers["content-type"], "image/jpeg");
    assert_eq!(a.headers["x-tsblob-ts"], "4");
    assert_eq!(a.headers["x-tsblob-entry"], "cams/front");
    assert_eq!(a.headers["x-tsblob-label-n"], "4");
    assert_eq!(
        a.headers["content-disposition"],
        "attachment; filename=\"front_1.jpg\"; filename*=UTF-8''front_1.jpg"
    );
    // One record by entry and timestamp, across a glob; HEAD says the same without a body.
    let path = f
        .link(
            ROOT,
            json!({"bucket": "b", "entries": ["cams/*"], "record": {"entry": "cams/back", "ts": 3},
                   "file_name": "shots/back.bin"}),
        )
        .await;
    let a = f.get(&path).await;
    assert_eq!((a.status, &a.body[..]), (StatusCode::OK, &b"back-3"[..]));
    assert!(path.starts_with("/api/v1/links/shots/back.bin?"), "{path}");
    let a = f.send(req("HEAD", &path, None, "")).await;
    assert_eq!(
        (a.status, a.headers["x-tsblob-ts"].to_str().unwrap()),
        (StatusCode::OK, "3")
    );
    // A record the query does not select: 404.
    let path = f
        .link(
            ROOT,
            json!({"bucket": "b", "entry": "cams/front", "stop": 3, "record": {"entry": "cams/front", "ts": 4}}),
        )
        .await;
    assert_eq!(f.get(&path).await.code(), "record_not_found");
    // The whole query: record frames naming their entries.
    let path = f
        .link(
            ROOT,
            json!({"bucket": "b", "entries": ["cams/*"], "start": 3}),
        )
        .await;
    let a = f.get(&path).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.headers["content-type"], tsblob_proto::framing::MEDIA_TYPE);
    assert!(a.headers["content-disposition"]
        .to_str()
        .unwrap()
        .contains("filename=\"b.bin\""));
    let (records, end, err) = decode(&a.body);
    assert_eq!((end, err), (Some(4), None));
    let got: Vec<(String, u64)> = records
        .iter()
        .map(|(h, _)| (h.entry.clone().unwrap_or_default(), h.ts))
        .collect();
    assert_eq!(
        got,
        [
            ("cams/back".to_string(), 3),
            ("cams/front".to_string(), 3),
            ("cams/front".to_string(), 4),
            ("cams/front".to_string(), 5)
        ]
    );
}

#[tokio::test]
async fn links_are_made_only_within_their_bounds_and_permissions() {
    let limits = Limits {
        links: tsblob_server::http::links::LinkLimits {
            max_length: 600,
            max_ttl: std::time::Duration::from_secs(3600),
            ..Default::default()
        },
        ..Limits::default()
    };
    let f = seeded(limits).await;
    let post = |token: Option<&str>, v: Value| req("POST", "/api/v1/links", token, v.to_string());
    let a = f
        .send(post(None, json!({"bucket": "b", "entry": "cams/front"})))
        .await;
    assert_eq!(a.code(), "unauthorized");
    let other = f.token("other", &["nope"]).await;
    let a = f
        .send(post(
            Some(&other),
            json!({"bucket": "b", "entry": "cams/front"}),
        ))
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::FORBIDDEN, "forbidden")
    );
    for (spec, code) in [
        (
            json!({"bucket": "b", "entry": "cams/front", "expires_in": 7200}),
            "invalid_expiry",
        ),
        (
            json!({"bucket": "b", "entry": "cams/front", "expires_at": 1}),
            "invalid_expiry",
        ),
        (
            json!({"bucket": "b", "entry": "cams/front", "when": {"&n": {"$in": ["x".repeat(700)]}}}),
            "link_too_long",
        ),
        (
            json!({"bucket": "b", "entry": "cams/front", "file_name": "../x"}),
            "invalid_link",
        ),
        (
            json!({"bucket": "b", "entry": "cams/front", "base_url": "ftp://x"}),
            "invalid_link",
        ),
        (json!({"bucket": "b", "entry": "nope"}), "entry_not_found"),
        (json!({"bucket": "nope", "entry": "e"}), "bucket_not_found"),
        (
            json!({"bucket": "b", "entry": "cams/front", "when": {"&n": {"$nope": 1}}}),
            "bad_request",
        ),
        (json!({"bucket": "b"}), "bad_request"),
        (
            json!({"bucket": "b", "entry": "cams/front", "index": 0, "format": "mcap"}),
            "bad_request",
        ),
    ] {
        let a = f.send(post(Some(ROOT), spec.clone())).await;
        assert_eq!(a.code(), code, "{spec}: {:?}", a.body);
        assert!(a.json()["error"]["message"].as_str().unwrap().len() > 20);
    }
    // base_url sets the link's start.
    let a = f
        .send(post(
            Some(ROOT),
            json!({"bucket": "b", "entry": "cams/front", "base_url": "https://data.example.com/x/"}),
        ))
        .await;
    let link = a.json()["link"].as_str().unwrap().to_string();
    assert!(
        link.starts_with("https://data.example.com/x/api/v1/links/front.bin?q="),
        "{link}"
    );
}

/// Hostile: every part of a link is covered by its signature. A changed `q` (another
/// bucket, a later expiry), a changed or missing `sig`, another file name in the path, or
/// a link signed by another server's secret is refused before anything in it is used.
#[tokio::test]
async fn an_altered_link_is_refused_by_its_signature() {
    let f = seeded(Limits::default()).await;
    let path = f
        .link(
            ROOT,
            json!({"bucket": "b", "entry": "cams/front", "index": 0}),
        )
        .await;
    assert_eq!(f.get(&path).await.status, StatusCode::OK);
    let (route, query) = path.split_once('?').unwrap();
    let params: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let (q, sig) = (&params[0].1, &params[1].1);
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut spec: Value = serde_json::from_slice(&b64.decode(q).unwrap()).unwrap();
    spec["x"] = json!(spec["x"].as_u64().unwrap() + 1);
    let later = b64.encode(spec.to_string());
    let flipped = {
        let mut s = sig.clone().into_bytes();
        s[0] = if s[0] == b'A' { b'B' } else { b'A' };
        String::from_utf8(s).unwrap()
    };
    for bad in [
        format!("{route}?q={later}&sig={sig}"),
        format!("{route}?q={q}&sig={flipped}"),
        format!("/api/v1/links/other.bin?q={q}&sig={sig}"),
    ] {
        let a = f.get(&bad).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::FORBIDDEN, "link_signature"),
            "{bad}"
        );
    }
    for bad in [
        format!("{route}?q={q}"),
        format!("{route}?q={q}&sig={sig}&sig={sig}"),
        format!("{route}?q={q}&sig={sig}&bucket=x"),
    ] {
        assert_eq!(f.get(&bad).await.code(), "bad_request", "{bad}");
    }
    // Another server (another secret) does not accept it.
    let g = seeded(Limits::default()).await;
    assert_eq!(g.get(&path).await.code(), "link_signature");
    // A path far longer than any link: 414 before any work.
    let long = format!("{path}{}", "A".repeat(10_000));
    assert_eq!(f.get(&long).await.status, StatusCode::URI_TOO_LONG);
}

#[tokio::test]
async fn an_expired_link_is_gone() {
    let f = seeded(Limits::default()).await;
    // 3 s: time to make the link and download it once on a loaded machine; then past it.
    let soon = tsblob_storage::now_micros() + 3_000_000;
    let path = f
        .link(
            ROOT,
            json!({"bucket": "b", "entry": "cams/front", "index": 0, "expires_at": soon}),
        )
        .await;
    assert_eq!(f.get(&path).await.status, StatusCode::OK);
    let left = soon.saturating_sub(tsblob_storage::now_micros());
    tokio::time::sleep(std::time::Duration::from_micros(left + 100_000)).await;
    let a = f.get(&path).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::GONE, "link_expired")
    );
}

/// Hostile: a link runs as its creating token, now. Removing the token revokes its links
/// (a new token of the same name does not revive them); a token that loses the bucket
/// makes its links 403; a removed bucket is 404.
#[tokio::test]
async fn a_link_of_a_removed_token_stops_working() {
    let f = seeded(Limits::default()).await;
    let reader = f.token("reader", &["b"]).await;
    let path = f
        .link(
            &reader,
            json!({"bucket": "b", "entry": "cams/front", "index": 0}),
        )
        .await;
    assert_eq!(f.get(&path).await.status, StatusCode::OK);
    let whole = f
        .link(&reader, json!({"bucket": "b", "entry": "cams/front"}))
        .await;
    assert_eq!(f.get(&whole).await.status, StatusCode::OK);
    assert_eq!(
        f.as_root("DELETE", "/api/v1/tokens/reader", "")
            .await
            .status,
        StatusCode::OK
    );
    for p in [&path, &whole] {
        let a = f.get(p).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::GONE, "link_revoked")
        );
    }
    // The same name, another token: still revoked.
    f.token("reader", &["b"]).await;
    let a = f.get(&path).await;
    assert_eq!(a.code(), "link_revoked", "{:?}", a.body);
    // A token that may no longer read the bucket.
    let narrow = f.token("narrow", &["b"]).await;
    let path = f
        .link(
            &narrow,
            json!({"bucket": "b", "entry": "cams/front", "index": 0}),
        )
        .await;
    assert_eq!(
        f.as_root("DELETE", "/api/v1/tokens/narrow", "")
            .await
            .status,
        StatusCode::OK
    );
    f.token("narrow", &["other"]).await;
    assert_eq!(f.get(&path).await.code(), "link_revoked");
    // A removed bucket.
    let path = f
        .link(
            ROOT,
            json!({"bucket": "b", "entry": "cams/front", "index": 0}),
        )
        .await;
    assert_eq!(
        f.as_root("DELETE", "/api/v1/b/b", "").await.status,
        StatusCode::OK
    );
    let a = f.get(&path).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "bucket_not_found")
    );
}

/// Hostile: many downloads of one link at once count as the creating token's streams
/// (`--max-streams-per-token`): past them 429, and a stalled download gives its slot back
/// once dropped. A reader that stops reading holds one slot and a bounded queue, nothing
/// more.
#[tokio::test]
async fn many_downloads_of_one_link_are_bounded_by_the_stream_caps() {
    let limits = Limits {
        streams: tsblob_server::http::limits::Caps {
            max: 8,
            per_token: 2,
        },
        ..Limits::default()
    };
    let f = seeded(limits).await;
    // Enough data that a whole-query download does not fit in its queue.
    let big = vec![7u8; 1 << 20];
    for ts in 100..140u64 {
        let a = f
            .as_root("POST", &format!("/api/v1/b/b/big?ts={ts}"), big.clone())
            .await;
        assert_eq!(a.status, StatusCode::CREATED);
    }
    let reader = f.token("reader", &["b"]).await;
    for spec in [
        json!({"bucket": "b", "entry": "big"}),
        json!({"bucket": "b", "entry": "big", "index": 3}),
    ] {
        let path = f.link(&reader, spec.clone()).await;
        // Two downloads that are not read (slow readers) hold the token's two slots.
        let mut held = Vec::new();
        for _ in 0..2 {
            let resp = f
                .app
                .clone()
                .oneshot(req("GET", &path, None, ""))
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "{spec}");
            held.push(resp);
        }
        let a = f.get(&path).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::TOO_MANY_REQUESTS, "too_many_streams"),
            "{spec}"
        );
        assert!(a.headers.contains_key("retry-after"));
        // Another token's links are not held up by them.
        let mine = f
            .link(
                ROOT,
                json!({"bucket": "b", "entry": "cams/front", "index": 0}),
            )
            .await;
        assert_eq!(f.get(&mine).await.status, StatusCode::OK);
        // Read one piece of a stalled download, then drop both: the slots come back.
        let first = held.pop().unwrap().into_body().frame().await;
        assert!(first.is_some());
        drop(held);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let a = f.get(&path).await;
            if a.status == StatusCode::OK {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "slots never came back: {:?}",
                a.body
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Bug (hostile probe of 2026-11-29): a method a link does not take (`PUT`, `DELETE`) was
/// answered 405 "Method Not Allowed", without what to do, where every other route names
/// the method and where to find the routes' methods.
#[tokio::test]
async fn a_wrong_method_on_a_link_said_only_method_not_allowed() {
    let f = seeded(Limits::default()).await;
    let path = f
        .link(
            ROOT,
            json!({"bucket": "b", "entry": "cams/front", "index": 0}),
        )
        .await;
    let a = f.send(req("PUT", &path, None, "")).await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    let message = a.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.starts_with("PUT is not supported on /api/v1/links/"),
        "{message}"
    );
}
