//! Router tests without a socket: the whole API driven through `tower::ServiceExt::oneshot`
//! over a real engine on a temporary folder. Every documented error code is provoked here.
#![allow(clippy::unwrap_used)]

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde_json::{json, Value};
use tower::ServiceExt;
use tsblob_proto::framing::{
    put_end, put_heartbeat, put_record, Decoder, Event, FrameHead, TS_NOW,
};
use tsblob_server::http::{app, auth::Auth, Limits};
use tsblob_storage::{Labels, Store, StoreOptions, DEFAULT_CONTENT_TYPE};

struct Fixture {
    app: Router,
    _dir: tempfile::TempDir,
}

fn fixture_with(token: Option<&str>, limits: Limits) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        when_parser: Some(tsblob_server::config::when_parser()),
        ..StoreOptions::default()
    };
    let store = Store::open(dir.path(), opts).unwrap();
    let auth = Auth::load(dir.path(), token).unwrap();
    let state = tsblob_server::assemble::state(store, auth, limits).unwrap();
    Fixture {
        app: app(state),
        _dir: dir,
    }
}

fn fixture() -> Fixture {
    fixture_with(None, Limits::default())
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

impl Fixture {
    async fn send(&self, req: Request<Body>) -> Answer {
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            headers,
            body,
        }
    }
    async fn call(&self, method: &str, uri: &str, body: impl Into<Body>) -> Answer {
        self.send(
            Request::builder()
                .method(method)
                .uri(uri)
                .body(body.into())
                .unwrap(),
        )
        .await
    }
    async fn bucket(&self, name: &str) {
        let a = self.call("POST", &format!("/api/v1/b/{name}"), "").await;
        assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    }
}

/// A record for a test batch: ts, content type, labels, payload.
type Rec<'a> = (u64, &'a str, &'a [(&'a str, &'a str)], &'a [u8]);
/// A decoded query answer: records, end count, error document.
type Decoded = (Vec<(FrameHead, Vec<u8>)>, Option<u64>, Option<Value>);

fn frames(records: &[Rec<'_>], end: Option<u64>) -> Bytes {
    let mut b = BytesMut::new();
    for (ts, ct, labels, data) in records {
        let labels: Labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        put_record(&mut b, *ts, ct, &labels, data);
    }
    if let Some(n) = end {
        put_end(&mut b, n);
    }
    b.freeze()
}

/// Decodes a query answer into (head, payload) pairs and the end count.
fn decode(body: &[u8]) -> Decoded {
    let mut d = Decoder::new();
    let mut buf = BytesMut::from(body);
    let mut out: Vec<(FrameHead, Vec<u8>)> = Vec::new();
    let (mut end, mut err) = (None, None);
    while let Some(ev) = d.next(&mut buf).unwrap() {
        match ev {
            Event::Record(h) => out.push((h, Vec::new())),
            Event::Data(x) => out.last_mut().unwrap().1.extend_from_slice(&x),
            Event::End(n) => end = Some(n),
            Event::Error(j) => err = Some(serde_json::from_slice(&j).unwrap()),
            Event::Heartbeat(_) | Event::Skipped(_) => {}
        }
    }
    assert!(buf.is_empty(), "trailing bytes in the stream");
    (out, end, err)
}

#[tokio::test]
async fn health_metrics_openapi_and_unknown_routes() {
    let f = fixture();
    let a = f.call("GET", "/health", "").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json()["status"], "ok");

    let a = f.call("GET", "/api/v1/openapi.json", "").await;
    assert_eq!(a.status, StatusCode::OK);
    let doc = a.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for p in [
        "/api/v1/b/{bucket}/{entry}",
        "/api/v1/b/{bucket}/{entry}/query",
        "/api/v1/b/{bucket}/{entry}/batch",
        "/api/v1/tokens/{name}",
    ] {
        assert!(
            doc["paths"][p].is_object(),
            "{p} missing from the OpenAPI document"
        );
    }

    let a = f.call("GET", "/metrics", "").await;
    assert_eq!(a.status, StatusCode::OK);
    let text = String::from_utf8_lossy(&a.body);
    for m in [
        "tsblob_http_requests_total",
        "tsblob_disk_usage_bytes",
        "tsblob_quota_evicted_blocks_total",
        "tsblob_http_request_duration_seconds",
    ] {
        assert!(text.contains(m), "{m} missing from /metrics");
    }

    let a = f.call("GET", "/nope", "").await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let a = f.call("PATCH", "/api/v1/b", "").await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(a.code(), "method_not_allowed");

    // An extractor rejection (a path that is not UTF-8) has the JSON shape too.
    let a = f.call("GET", "/api/v1/b/%FF", "").await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );

    let a = f.call("GET", "/api/v1/info", "").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json()["sync"], "periodic:1000ms");
}

#[tokio::test]
async fn bucket_lifecycle_and_errors() {
    let f = fixture();
    let a = f
        .call(
            "POST",
            "/api/v1/b/cams",
            r#"{"quota_type":"fifo","quota_size":1000000,"compression":"zstd:5"}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert_eq!(a.json()["settings"]["compression"], "zstd:5");
    assert_eq!(a.json()["settings"]["quota_type"], "fifo");

    let a = f.call("POST", "/api/v1/b/cams", "").await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::CONFLICT, "bucket_exists")
    );
    let a = f
        .call("POST", "/api/v1/b/x", r#"{"quota_type":"sometimes"}"#)
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_settings")
    );
    let a = f
        .call("POST", "/api/v1/b/x", r#"{"quota_typo":"fifo"}"#)
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
    let a = f
        .call("POST", "/api/v1/b/x", r#"{"max_block_size":10}"#)
        .await;
    assert_eq!(a.code(), "invalid_settings");
    let a = f.call("POST", "/api/v1/b/..", "").await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_name")
    );
    let a = f.call("POST", "/api/v1/b/a%01b", "").await;
    assert_eq!(a.code(), "invalid_name");

    let a = f
        .call("PUT", "/api/v1/b/cams", r#"{"quota_size":2000000}"#)
        .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json()["settings"]["quota_size"], 2000000);
    assert_eq!(a.json()["info"]["quota_used"], 0.0);

    // Age-based retention: a duration string or microseconds in, microseconds out.
    let a = f
        .call("PUT", "/api/v1/b/cams", r#"{"max_age":"30d"}"#)
        .await;
    assert_eq!(a.json()["settings"]["max_age"], 30u64 * 86_400_000_000);
    assert_eq!(a.json()["info"]["expired_blocks"], 0);
    let a = f
        .call("PUT", "/api/v1/b/cams", r#"{"max_age":90000000}"#)
        .await;
    assert_eq!(a.json()["settings"]["max_age"], 90_000_000);
    let a = f
        .call("PUT", "/api/v1/b/cams", r#"{"max_age":"soon"}"#)
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_settings")
    );
    assert!(a.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("30d"));
    let a = f
        .call("PUT", "/api/v1/b/cams", r#"{"max_age":"none"}"#)
        .await;
    assert_eq!(a.json()["settings"]["max_age"], serde_json::Value::Null);

    let a = f.call("GET", "/api/v1/b", "").await;
    assert_eq!(a.json()["buckets"].as_array().unwrap().len(), 1);
    let a = f.call("GET", "/api/v1/b/cams", "").await;
    assert_eq!(a.json()["entries"], json!([]));

    let a = f.call("DELETE", "/api/v1/b/cams", "").await;
    assert_eq!(a.json(), json!({"removed": "cams"}));
    let a = f.call("GET", "/api/v1/b/cams", "").await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "bucket_not_found")
    );
    let a = f.call("DELETE", "/api/v1/b/cams", "").await;
    assert_eq!(a.code(), "bucket_not_found");
}

/// Bug (docs walkthrough of 2026-11-29): routes other than the entry routes ignored query
/// parameters they do not take, so `DELETE /api/v1/b/x?dry_run=true` removed the bucket and
/// `POST .../run?dry_run=true` ran an enabled rule for real. Refused with 400 naming it.
#[tokio::test]
async fn a_parameter_a_route_does_not_take_was_ignored() {
    let f = fixture();
    assert_eq!(
        f.call("POST", "/api/v1/b/keep", "").await.status,
        StatusCode::CREATED
    );
    let r = f
        .call(
            "PUT",
            "/api/v1/lifecycle/keep/old",
            r#"{"older_than": "30d"}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    for (method, uri) in [
        ("DELETE", "/api/v1/b/keep?dry_run=true"),
        ("POST", "/api/v1/lifecycle/keep/old/run?dry_run=true"),
        ("GET", "/api/v1/b?strat=1"),
        ("GET", "/api/v1/b/keep?x=1"),
        ("PUT", "/api/v1/b/keep?quota=1"),
        ("GET", "/api/v1/replications?x=1"),
        ("GET", "/api/v1/info?x=1"),
    ] {
        let a = f.call(method, uri, "").await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "{method} {uri}"
        );
        let key = uri.split('?').nth(1).unwrap().split('=').next().unwrap();
        assert!(
            a.json()["error"]["message"].as_str().unwrap().contains(key),
            "{method} {uri}"
        );
    }
    assert_eq!(
        f.call("GET", "/api/v1/b/keep", "").await.status,
        StatusCode::OK
    );
    // Routes with parameters keep them; the probes of load balancers keep theirs.
    assert_eq!(
        f.call("GET", "/health?probe=1", "").await.status,
        StatusCode::OK
    );
    assert_eq!(
        f.call("GET", "/api/v1/b/keep/e/query?strat=1", "")
            .await
            .code(),
        "bad_request"
    );
}

#[tokio::test]
async fn one_record_write_read_head_patch_remove() {
    let f = fixture();
    f.bucket("cams").await;
    let req = Request::post("/api/v1/b/cams/robot1/front?ts=1000")
        .header("content-type", "image/jpeg")
        .header("x-tsblob-label-camera", "front%20left")
        .header("x-tsblob-label-city", "K%C3%B6ln")
        .body(Body::from("jpeg bytes"))
        .unwrap();
    let a = f.send(req).await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    assert_eq!(a.json(), json!({"ts": 1000}));
    assert_eq!(a.headers["x-tsblob-ts"], "1000");

    let a = f.call("POST", "/api/v1/b/cams/robot1/front", "later").await;
    let now_ts = a.json()["ts"].as_u64().unwrap();
    assert!(now_ts > 1_600_000_000_000_000, "server-assigned ts is now");

    let a = f
        .call("GET", "/api/v1/b/cams/robot1/front?ts=1000", "")
        .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(&a.body[..], b"jpeg bytes");
    assert_eq!(a.headers["content-type"], "image/jpeg");
    assert_eq!(a.headers["x-tsblob-label-camera"], "front%20left");
    assert_eq!(a.headers["x-tsblob-label-city"], "K%C3%B6ln");

    let a = f.call("GET", "/api/v1/b/cams/robot1/front", "").await;
    assert_eq!(&a.body[..], b"later", "no ts: the latest record");

    let a = f
        .call("HEAD", "/api/v1/b/cams/robot1/front?ts=1000", "")
        .await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.body.is_empty());
    assert_eq!(a.headers["content-length"], "10");
    assert_eq!(a.headers["x-tsblob-ts"], "1000");

    let a = f
        .call(
            "PATCH",
            "/api/v1/b/cams/robot1/front?ts=1000",
            r#"{"labels":{"camera":null,"q":"good"}}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(a.json()["labels"], json!({"city": "Köln", "q": "good"}));
    let a = f
        .call("PATCH", "/api/v1/b/cams/robot1/front", r#"{"labels":{}}"#)
        .await;
    assert_eq!(a.code(), "bad_request");
    let a = f
        .call(
            "PATCH",
            "/api/v1/b/cams/robot1/front?ts=1000",
            r#"{"labels":{"Bad Key":"x"}}"#,
        )
        .await;
    assert_eq!(a.code(), "invalid_label");

    let a = f.call("GET", "/api/v1/b/cams/robot1/front/info", "").await;
    assert_eq!(a.json()["record_count"], 2);
    assert_eq!(a.json()["oldest"], 1000);

    let a = f
        .call("DELETE", "/api/v1/b/cams/robot1/front?ts=1000", "")
        .await;
    assert_eq!(a.json(), json!({"removed": 1}));
    let a = f
        .call("GET", "/api/v1/b/cams/robot1/front?ts=1000", "")
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "record_not_found")
    );
    let a = f.call("DELETE", "/api/v1/b/cams/robot1/front", "").await;
    assert_eq!(a.json(), json!({"removed": "robot1/front"}));
    let a = f.call("GET", "/api/v1/b/cams/robot1/front/info", "").await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "entry_not_found")
    );
}

#[tokio::test]
async fn bad_input_gets_status_code_and_fix() {
    let f = fixture_with(
        None,
        Limits {
            max_body: 1000,
            ..Limits::default()
        },
    );
    f.bucket("b").await;
    for ts in [
        "-1",
        "abc",
        "1.5",
        "18446744073709551615",
        "99999999999999999999999",
    ] {
        let a = f.call("POST", &format!("/api/v1/b/b/e?ts={ts}"), "x").await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_timestamp"),
            "ts={ts}"
        );
        assert!(!a.json()["error"]["message"].as_str().unwrap().is_empty());
    }
    let a = f.call("POST", "/api/v1/b/b/e?ts=1", "x").await;
    assert_eq!(a.status, StatusCode::CREATED);
    let a = f.call("POST", "/api/v1/b/b/e?ts=1", "y").await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::CONFLICT, "timestamp_exists")
    );
    let a = f.call("GET", "/api/v1/b/b/e?ts=1", "").await;
    assert_eq!(&a.body[..], b"x", "a conflict never overwrites");

    let a = f.call("POST", "/api/v1/b/nope/e", "x").await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "bucket_not_found")
    );
    let a = f.call("GET", "/api/v1/b/b/other", "").await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "entry_not_found")
    );
    for bad in ["a/../b", "a%00b", "x%0Ay", "a//b", "q/batch%20x"] {
        let a = f.call("POST", &format!("/api/v1/b/b/{bad}"), "x").await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_name"),
            "{bad}"
        );
    }
    let a = f.call("POST", "/api/v1/b/b/e?strat=1", "x").await;
    assert_eq!(a.code(), "bad_request");

    // Over the limit: by Content-Length before reading, and by counting a chunked body.
    let big = vec![7u8; 2000];
    let a = f.call("POST", "/api/v1/b/b/e?ts=2", big.clone()).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let stream = futures_util::stream::iter(
        (0..4).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![1u8; 500]))),
    );
    let a = f
        .call("POST", "/api/v1/b/b/e?ts=3", Body::from_stream(stream))
        .await;
    assert_eq!(a.code(), "payload_too_large");
    let a = f.call("GET", "/api/v1/b/b/e?ts=3", "").await;
    assert_eq!(
        a.code(),
        "record_not_found",
        "a refused body leaves nothing behind"
    );

    let req = Request::post("/api/v1/b/b/e?ts=4")
        .header("x-tsblob-label-k", "%FF")
        .body(Body::from("x"))
        .unwrap();
    assert_eq!(f.send(req).await.code(), "invalid_label");
    let req = Request::post("/api/v1/b/b/e?ts=4")
        .header(
            "content-type",
            axum::http::HeaderValue::from_bytes(b"image/\xff").unwrap(),
        )
        .body(Body::from("x"))
        .unwrap();
    let a = f.send(req).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_content_type")
    );
}

#[tokio::test]
async fn quota_hard_is_507() {
    let f = fixture();
    let a = f
        .call(
            "POST",
            "/api/v1/b/q",
            r#"{"quota_type":"hard","quota_size":10000,"max_block_size":4096}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    let mut last = None;
    for ts in 1..100u64 {
        let a = f
            .call("POST", &format!("/api/v1/b/q/e?ts={ts}"), vec![1u8; 1000])
            .await;
        if a.status != StatusCode::CREATED {
            last = Some((a.status, a.code()));
            break;
        }
    }
    assert_eq!(
        last,
        Some((
            StatusCode::INSUFFICIENT_STORAGE,
            "quota_exceeded".to_string()
        ))
    );
}

#[tokio::test]
async fn batch_write_results_and_malformed_bodies() {
    let f = fixture();
    f.bucket("b").await;
    f.call("POST", "/api/v1/b/b/e?ts=2", "old").await;
    let body = frames(
        &[
            (1, "text/plain", &[("k", "v")], b"one"),
            (2, "", &[], b"dup"),
            (TS_NOW, "", &[], b"now"),
            (3, "", &[], b""),
        ],
        Some(4),
    );
    let a = f.call("POST", "/api/v1/b/b/e/batch", body).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let v = a.json();
    assert_eq!(
        (v["written"].as_u64(), v["failed"].as_u64()),
        (Some(3), Some(1))
    );
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 4);
    assert_eq!(r[0], json!({"ts": 1, "status": 201}));
    assert_eq!(r[1]["status"], 409);
    assert_eq!(r[1]["error"]["code"], "timestamp_exists");
    assert!(r[2]["ts"].as_u64().unwrap() > 1_600_000_000_000_000);
    let a = f.call("GET", "/api/v1/b/b/e?ts=1", "").await;
    assert_eq!(
        (&a.body[..], &a.headers["x-tsblob-label-k"]),
        (
            &b"one"[..],
            &"v".parse::<axum::http::HeaderValue>().unwrap()
        )
    );

    // No end frame: a truncated upload. Wrong count. Garbage. Nothing of these is written.
    for (body, what) in [
        (frames(&[(10, "", &[], b"a")], None), "no end frame"),
        (frames(&[(11, "", &[], b"a")], Some(5)), "wrong count"),
        (Bytes::from_static(b"\x07garbage"), "unknown kind"),
        (
            frames(&[(12, "", &[], b"abc")], None).slice(..27),
            "cut inside a payload",
        ),
    ] {
        let a = f.call("POST", "/api/v1/b/b/e/batch", body).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::BAD_REQUEST, "malformed_batch"),
            "{what}"
        );
        assert_eq!(a.json()["written"], 0, "{what}");
    }
    for ts in 10..13 {
        let a = f.call("GET", &format!("/api/v1/b/b/e?ts={ts}"), "").await;
        assert_eq!(
            a.status,
            StatusCode::NOT_FOUND,
            "malformed batch record {ts} was written"
        );
    }
    // Bug pinned: heartbeat frames made a batch 400 `malformed_batch`, so a query's answer
    // saved with its heartbeats (a downloaded link) was not a valid batch. They are skipped
    // (and not counted by the end frame), as a client skips them.
    let mut body = BytesMut::new();
    put_heartbeat(&mut body, 7);
    put_record(&mut body, 20, "", &Labels::new(), b"x");
    put_heartbeat(&mut body, 8);
    put_heartbeat(&mut body, 9);
    put_record(&mut body, 21, "", &Labels::new(), b"yz");
    put_heartbeat(&mut body, 10);
    put_end(&mut body, 2);
    let a = f.call("POST", "/api/v1/b/b/e/batch", body.freeze()).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(
        (a.json()["written"].as_u64(), a.json()["failed"].as_u64()),
        (Some(2), Some(0))
    );
    let a = f.call("GET", "/api/v1/b/b/e?ts=21", "").await;
    assert_eq!(&a.body[..], b"yz");
    let a = f
        .call("POST", "/api/v1/b/nope/e/batch", frames(&[], Some(0)))
        .await;
    assert_eq!(a.code(), "bucket_not_found");
    let a = f
        .call("POST", "/api/v1/b/b/e/batch", frames(&[], Some(0)))
        .await;
    assert_eq!(a.json(), json!({"written": 0, "failed": 0, "results": []}));
}

/// The batch route decodes each distinct content type and labels of a body once and gives
/// one shared meta to every record that sends them: records taking turns among label sets
/// (and content types) each keep their own timestamp, content type and labels, and a set
/// with a bad label key fails each of its records, and only them.
#[tokio::test]
async fn batch_records_sharing_labels_each_keep_their_own() {
    let f = fixture();
    f.bucket("b").await;
    let sets: [(&str, &[(&str, &str)]); 4] = [
        ("", &[("cam", "front"), ("seq", "1")]),
        ("image/jpeg", &[("cam", "front"), ("seq", "1")]),
        ("", &[("cam", "back")]),
        ("", &[("bad key!", "x")]),
    ];
    let recs: Vec<Rec<'_>> = (0..40u64)
        .map(|i| {
            let (ct, labels) = sets[(i % 4) as usize];
            (100 + i, ct, labels, &b"payload"[..])
        })
        .collect();
    let a = f
        .call("POST", "/api/v1/b/b/e/batch", frames(&recs, Some(40)))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let v = a.json();
    assert_eq!(
        (v["written"].as_u64(), v["failed"].as_u64()),
        (Some(30), Some(10))
    );
    for (i, r) in v["results"].as_array().unwrap().iter().enumerate() {
        let want = if i % 4 == 3 { 422 } else { 201 };
        assert_eq!(r["status"], want, "record {i}: {r}");
        assert_eq!(r["ts"], 100 + i as u64, "record {i}");
    }
    let a = f.call("GET", "/api/v1/b/b/e/query", "").await;
    let (out, end, err) = decode(&a.body);
    assert_eq!((out.len(), end, err), (30, Some(30), None));
    for (h, data) in &out {
        let i = h.ts - 100;
        let (ct, labels) = sets[(i % 4) as usize];
        let want: Labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(h.labels, want, "record {i}");
        let ct = if ct.is_empty() {
            DEFAULT_CONTENT_TYPE
        } else {
            ct
        };
        assert_eq!(h.content_type, ct, "record {i}");
        assert_eq!(data, b"payload");
    }
}

#[tokio::test]
async fn batch_of_many_chunks_is_written_in_order() {
    let f = fixture();
    f.bucket("b").await;
    let payload = vec![5u8; 1000];
    let mut body = BytesMut::new();
    let n = 20_000u64; // several chunks of 8192 records
    for ts in 0..n {
        put_record(&mut body, ts, "", &Labels::new(), &payload);
    }
    put_end(&mut body, n);
    let a = f.call("POST", "/api/v1/b/b/e/batch", body.freeze()).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json()["written"], n);
    let a = f.call("GET", "/api/v1/b/b/e/info", "").await;
    assert_eq!(a.json()["record_count"], n);
}

#[tokio::test]
async fn query_streams_frames_with_filters_limit_and_desc() {
    let f = fixture();
    f.bucket("b").await;
    let recs: Vec<Rec<'_>> = vec![
        (10, "text/plain", &[("cam", "a")], b"ten"),
        (20, "", &[("cam", "b")], b"twenty"),
        (30, "", &[("cam", "a"), ("flag", "1")], b"thirty"),
        (40, "", &[], b"forty"),
    ];
    let a = f
        .call("POST", "/api/v1/b/b/e/batch", frames(&recs, Some(4)))
        .await;
    assert_eq!(a.json()["written"], 4);

    let a = f.call("GET", "/api/v1/b/b/e/query", "").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.headers["content-type"], "application/x-tsblob-records");
    let (out, end, err) = decode(&a.body);
    assert_eq!((out.len(), end, err), (4, Some(4), None));
    assert_eq!(out[0].0.content_type, "text/plain");
    assert_eq!(out[1].1, b"twenty");

    let fr = &f;
    let q = |s: &'static str| async move {
        let a = fr
            .call("GET", &format!("/api/v1/b/b/e/query?{s}"), "")
            .await;
        assert_eq!(a.status, StatusCode::OK, "{s}: {:?}", a.body);
        decode(&a.body)
            .0
            .into_iter()
            .map(|(h, _)| h.ts)
            .collect::<Vec<_>>()
    };
    assert_eq!(q("start=20&stop=40").await, vec![20, 30]);
    assert_eq!(q("eq.cam=a").await, vec![10, 30]);
    assert_eq!(q("ne.cam=a").await, vec![20, 40]);
    assert_eq!(q("has=flag").await, vec![30]);
    assert_eq!(q("missing=cam").await, vec![40]);
    assert_eq!(q("desc=true&limit=2").await, vec![40, 30]);
    assert_eq!(q("eq.cam=a&has=flag").await, vec![30]);

    let a = f
        .call("GET", "/api/v1/b/b/e/query?start=50&stop=10", "")
        .await;
    assert_eq!(a.code(), "invalid_timestamp");
    let a = f.call("GET", "/api/v1/b/b/e/query?eq.Bad=1", "").await;
    assert_eq!(a.code(), "invalid_label");
    let a = f.call("GET", "/api/v1/b/b/e/query?limit=x", "").await;
    assert_eq!(a.code(), "bad_request");
    let a = f.call("GET", "/api/v1/b/b/zzz/query", "").await;
    assert_eq!(a.code(), "entry_not_found");

    let a = f
        .call("DELETE", "/api/v1/b/b/e/query?start=15&stop=35", "")
        .await;
    assert_eq!(a.json(), json!({"removed": 2}));
    assert_eq!(q("").await, vec![10, 40]);
    let a = f.call("DELETE", "/api/v1/b/b/e?start=0&stop=11", "").await;
    assert_eq!(a.json(), json!({"removed": 1}));
}

#[tokio::test]
async fn large_records_stream_in_and_out() {
    let f = fixture();
    f.bucket("b").await;
    // Over the whole-body thresholds on both sides: streamed, and chunked in the query.
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let a = f.call("POST", "/api/v1/b/b/big?ts=1", data.clone()).await;
    assert_eq!(a.status, StatusCode::CREATED);
    let chunks = data
        .chunks(100_000)
        .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
        .collect::<Vec<_>>();
    let a = f
        .call(
            "POST",
            "/api/v1/b/b/big?ts=2",
            Body::from_stream(futures_util::stream::iter(chunks)),
        )
        .await;
    assert_eq!(
        a.status,
        StatusCode::CREATED,
        "chunked upload without Content-Length"
    );
    for ts in [1, 2] {
        let a = f.call("GET", &format!("/api/v1/b/b/big?ts={ts}"), "").await;
        assert_eq!(a.headers["content-length"], "3000000");
        assert!(a.body == data, "record {ts} reads back as written");
    }
    let a = f.call("GET", "/api/v1/b/b/big/query", "").await;
    let (out, end, _) = decode(&a.body);
    assert_eq!(end, Some(2));
    assert!(out
        .iter()
        .all(|(h, d)| h.payload_len == 3_000_000 && *d == data));
}

#[tokio::test]
async fn tokens_gate_every_route_but_health() {
    let f = fixture_with(Some("root-secret"), Limits::default());
    let with = |method: &str, uri: &str, token: Option<&str>, body: &'static str| {
        let mut r = Request::builder().method(method).uri(uri);
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        r.body(Body::from(body)).unwrap()
    };
    assert_eq!(
        f.send(with("GET", "/health", None, "")).await.status,
        StatusCode::OK
    );
    for uri in [
        "/api/v1/b",
        "/metrics",
        "/api/v1/openapi.json",
        "/api/v1/b/x/y",
    ] {
        let a = f.send(with("GET", uri, None, "")).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{uri}"
        );
    }
    let a = f.send(with("GET", "/api/v1/b", Some("wrong"), "")).await;
    assert_eq!(a.code(), "unauthorized");
    let root = Some("root-secret");
    assert_eq!(
        f.send(with("POST", "/api/v1/b/cam-1", root, ""))
            .await
            .status,
        StatusCode::CREATED
    );
    assert_eq!(
        f.send(with("POST", "/api/v1/b/other", root, ""))
            .await
            .status,
        StatusCode::CREATED
    );

    let a = f
        .send(with(
            "POST",
            "/api/v1/tokens/reader",
            root,
            r#"{"read":["cam-*"]}"#,
        ))
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    let reader = a.json()["value"].as_str().unwrap().to_string();
    let a = f
        .send(with(
            "POST",
            "/api/v1/tokens/writer",
            root,
            r#"{"write":["cam-1"]}"#,
        ))
        .await;
    let writer = a.json()["value"].as_str().unwrap().to_string();
    let a = f
        .send(with("POST", "/api/v1/tokens/writer", root, ""))
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::CONFLICT, "token_exists")
    );

    let w = Some(writer.as_str());
    let r = Some(reader.as_str());
    assert_eq!(
        f.send(with("POST", "/api/v1/b/cam-1/e?ts=1", w, "x"))
            .await
            .status,
        StatusCode::CREATED
    );
    let a = f.send(with("POST", "/api/v1/b/other/e?ts=1", w, "x")).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::FORBIDDEN, "forbidden")
    );
    let a = f.send(with("POST", "/api/v1/b/cam-1/e?ts=2", r, "x")).await;
    assert_eq!(a.code(), "forbidden");
    assert_eq!(
        f.send(with("GET", "/api/v1/b/cam-1/e?ts=1", r, ""))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        f.send(with("GET", "/api/v1/b/other", r, "")).await.code(),
        "forbidden"
    );
    let a = f.send(with("GET", "/api/v1/b", r, "")).await;
    assert_eq!(
        a.json()["buckets"].as_array().unwrap().len(),
        1,
        "lists only readable buckets"
    );
    assert_eq!(
        f.send(with("POST", "/api/v1/b/cam-2", r, "")).await.code(),
        "forbidden"
    );
    assert_eq!(
        f.send(with("GET", "/api/v1/tokens", r, "")).await.code(),
        "forbidden"
    );
    assert_eq!(
        f.send(with("GET", "/api/v1/me", r, "")).await.json()["name"],
        "reader"
    );

    let a = f.send(with("GET", "/api/v1/tokens", root, "")).await;
    let text = String::from_utf8_lossy(&a.body).to_string();
    assert!(!text.contains(&reader), "token values are never listed");
    assert_eq!(a.json()["tokens"].as_array().unwrap().len(), 2);
    assert_eq!(
        f.send(with("DELETE", "/api/v1/tokens/reader", root, ""))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        f.send(with("GET", "/api/v1/b/cam-1/e?ts=1", r, ""))
            .await
            .code(),
        "unauthorized"
    );
    assert_eq!(
        f.send(with("DELETE", "/api/v1/tokens/reader", root, ""))
            .await
            .code(),
        "token_not_found"
    );
}

#[tokio::test]
async fn first_token_switches_authentication_on() {
    let f = fixture();
    assert_eq!(f.call("GET", "/api/v1/b", "").await.status, StatusCode::OK);
    let a = f
        .call("POST", "/api/v1/tokens/ops", r#"{"full_access":true}"#)
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert_eq!(f.call("GET", "/api/v1/b", "").await.code(), "unauthorized");
}

#[tokio::test]
async fn fifo_quota_evicts_and_metrics_count_it() {
    let f = fixture();
    let a = f
        .call(
            "POST",
            "/api/v1/b/f",
            r#"{"quota_type":"fifo","quota_size":20000,"max_block_size":4096}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    for ts in 1..100u64 {
        let a = f
            .call("POST", &format!("/api/v1/b/f/e?ts={ts}"), vec![1u8; 1000])
            .await;
        assert_eq!(
            a.status,
            StatusCode::CREATED,
            "FIFO never refuses: {:?}",
            a.body
        );
    }
    let b = f.call("GET", "/api/v1/b/f", "").await.json();
    assert!(b["info"]["evicted_blocks"].as_u64().unwrap() > 0, "{b}");
    assert!(b["info"]["size"].as_u64().unwrap() <= 20000 + 4096, "{b}");
    assert!(
        b["info"]["oldest"].as_u64().unwrap() > 1,
        "the oldest records went first"
    );
    let a = f.call("GET", "/api/v1/b/f/e?ts=99", "").await;
    assert_eq!(a.status, StatusCode::OK, "the newest record stays");
    let text = String::from_utf8_lossy(&f.call("GET", "/metrics", "").await.body).to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("tsblob_quota_evicted_blocks_total "))
        .unwrap();
    assert!(
        line.split(' ').nth(1).unwrap().parse::<u64>().unwrap() > 0,
        "{line}"
    );
}

/// Deterministic pseudo-random numbers for the garbage tests (the repository's one seeded
/// RNG, `rand_xoshiro`).
fn next(rng: &mut Xoshiro256PlusPlus) -> u64 {
    rng.next_u64()
}

#[tokio::test]
async fn mangled_batches_never_crash_or_half_write_silently() {
    let f = fixture();
    f.bucket("g").await;
    let valid = frames(
        &[
            (1, "text/plain", &[("a", "b")], b"first"),
            (2, "", &[], b"second"),
            (3, "", &[("k", "v"), ("x", "y")], &[9u8; 300]),
        ],
        Some(3),
    );
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(42);
    for round in 0..300u64 {
        let mut body = valid.to_vec();
        // Flip, cut or extend at random places.
        match next(&mut rng) % 3 {
            0 => {
                for _ in 0..1 + next(&mut rng) % 4 {
                    let i = (next(&mut rng) as usize) % body.len();
                    body[i] = next(&mut rng) as u8;
                }
            }
            1 => body.truncate((next(&mut rng) as usize) % body.len()),
            _ => body.extend((0..next(&mut rng) % 40).map(|_| next(&mut rng) as u8)),
        }
        let entry = format!("e{round}");
        let a = f
            .call("POST", &format!("/api/v1/b/g/{entry}/batch"), body)
            .await;
        // 413 `record_too_large`: a mangled length claims a payload over the batch limit.
        assert!(
            a.status == StatusCode::OK
                || a.status == StatusCode::BAD_REQUEST
                || a.status == StatusCode::PAYLOAD_TOO_LARGE,
            "round {round}: {} {:?}",
            a.status,
            a.body
        );
        let v = a.json();
        // What the answer says was written is exactly what reads back.
        let written = v["written"].as_u64().unwrap();
        let stored = f
            .call("GET", &format!("/api/v1/b/g/{entry}/info"), "")
            .await;
        let count = if stored.status == StatusCode::OK {
            stored.json()["record_count"].as_u64().unwrap()
        } else {
            0
        };
        assert_eq!(count, written, "round {round}: {v}");
    }
    assert_eq!(f.call("GET", "/health", "").await.status, StatusCode::OK);
}

/// Bug "metrics labels": `/metrics` label values came from client strings (any HTTP method
/// token became a new series, kept forever). Requests are counted before authentication,
/// so even unauthenticated junk must map to a fixed set of label values.
#[tokio::test]
async fn metrics_series_stay_bounded_whatever_the_methods_and_paths() {
    let f = fixture_with(Some("root-secret"), Limits::default());
    let mut seed = Xoshiro256PlusPlus::seed_from_u64(7);
    for i in 0..300 {
        let method = format!("M{:x}", next(&mut seed));
        let path = format!("/api/v1/b/b{i}/e{}/query", next(&mut seed) % 1000);
        let _ = f.call(&method, &path, "").await;
        let _ = f.call(&method, &format!("/x{}", next(&mut seed)), "").await;
    }
    let a = f
        .send(
            Request::builder()
                .uri("/metrics")
                .header("authorization", "Bearer root-secret")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK);
    let text = String::from_utf8_lossy(&a.body);
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tsblob_http_requests_total{"))
        .collect();
    assert!(series.len() <= 8, "{} series: {series:#?}", series.len());
    assert!(
        !text.contains("method=\"M"),
        "a client's method became a label"
    );
    assert!(!text.contains("b1"), "a bucket name became a label");
    assert!(text.contains("method=\"other\""), "{text}");
}

/// Bug "tokens": deleting the last stored token silently switched authentication off; and
/// `/api/v1/info` and `/metrics` (figures over every bucket) were readable by any token.
#[tokio::test]
async fn the_last_token_needs_a_confirmation_and_server_figures_need_every_bucket() {
    let f = fixture();
    let a = f
        .call("POST", "/api/v1/tokens/ops", r#"{"full_access":true}"#)
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    let ops = a.json()["value"].as_str().unwrap().to_string();
    let with = |method: &str, uri: &str, token: &str, body: &'static str| {
        Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::from(body))
            .unwrap()
    };
    for (name, spec) in [
        ("narrow", r#"{"read":["cams"]}"#),
        ("all", r#"{"read":["*"]}"#),
    ] {
        let a = f
            .send(with("POST", &format!("/api/v1/tokens/{name}"), &ops, spec))
            .await;
        assert_eq!(a.status, StatusCode::CREATED);
        let value = a.json()["value"].as_str().unwrap().to_string();
        let expect = if name == "all" {
            StatusCode::OK
        } else {
            StatusCode::FORBIDDEN
        };
        for uri in ["/metrics", "/api/v1/info"] {
            let a = f.send(with("GET", uri, &value, "")).await;
            assert_eq!(a.status, expect, "{name} on {uri}");
        }
        let a = f
            .send(with("DELETE", &format!("/api/v1/tokens/{name}"), &ops, ""))
            .await;
        assert_eq!(a.status, StatusCode::OK);
    }
    // `ops` is now the last token: removing it would open the server.
    let a = f.send(with("DELETE", "/api/v1/tokens/ops", &ops, "")).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::CONFLICT, "last_token")
    );
    assert!(a.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("disable_auth=true"));
    assert_eq!(f.call("GET", "/api/v1/b", "").await.code(), "unauthorized");
    let a = f
        .send(with(
            "DELETE",
            "/api/v1/tokens/ops?disable_auth=yes",
            &ops,
            "",
        ))
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = f
        .send(with(
            "DELETE",
            "/api/v1/tokens/ops?disable_auth=true",
            &ops,
            "",
        ))
        .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(f.call("GET", "/api/v1/b", "").await.status, StatusCode::OK);
}

mod attachments;
mod batch_memo;
mod batch_rounds;
mod bulk;
mod grouped_writes;
mod if_exists;
mod large_records;
mod lifecycle;
mod links;
mod query_when;
mod quota;
mod rename;

/// `if_exists=compare` (what replication and `tsblob cp` send): a record already stored
/// with the same payload is 200 and counted in `existing`, a different one is 409
/// `conflict` and stays; `Content-Encoding: zstd` bodies are accepted, broken ones are 400,
/// other codings 415.
#[tokio::test]
async fn batch_if_exists_compare_and_zstd_bodies() {
    let f = fixture();
    f.bucket("b").await;
    f.call("POST", "/api/v1/b/b/e?ts=1", "same").await;
    f.call("POST", "/api/v1/b/b/e?ts=2", "theirs").await;
    let body = frames(
        &[
            (1, "", &[], b"same"),
            (2, "", &[], b"mine"),
            (3, "", &[], b"new"),
        ],
        Some(3),
    );
    let packed = zstd::bulk::compress(&body, 3).unwrap();
    let req = Request::builder()
        .method("POST")
        .uri("/api/v1/b/b/e/batch?if_exists=compare")
        .header("content-encoding", "zstd")
        .body(Body::from(packed))
        .unwrap();
    let a = f.send(req).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let v = a.json();
    let statuses: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, vec![200, 409, 201], "{v}");
    assert_eq!(v["results"][1]["error"]["code"], "conflict");
    assert_eq!(
        (
            v["written"].as_u64(),
            v["existing"].as_u64(),
            v["failed"].as_u64()
        ),
        (Some(1), Some(1), Some(1))
    );
    let a = f.call("GET", "/api/v1/b/b/e?ts=2", "").await;
    assert_eq!(
        &a.body[..],
        b"theirs",
        "a conflict overwrote the stored record"
    );
    // Without the parameter a taken timestamp stays a plain 409 timestamp_exists.
    let a = f
        .call(
            "POST",
            "/api/v1/b/b/e/batch",
            frames(&[(1, "", &[], b"same")], Some(1)),
        )
        .await;
    assert_eq!(a.json()["results"][0]["error"]["code"], "timestamp_exists");
    for (uri, enc, body, status, code) in [
        (
            "/api/v1/b/b/e/batch?if_exists=maybe",
            None,
            Bytes::new(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "/api/v1/b/b/e/batch",
            Some("zstd"),
            Bytes::from_static(b"not zstd"),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "/api/v1/b/b/e/batch",
            Some("gzip"),
            Bytes::new(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_encoding",
        ),
    ] {
        let mut r = Request::builder().method("POST").uri(uri);
        if let Some(e) = enc {
            r = r.header("content-encoding", e);
        }
        let a = f.send(r.body(Body::from(body)).unwrap()).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (status, code),
            "{uri} {enc:?}"
        );
    }
}

/// Replication task settings are checked before anything is stored, with a 4xx that says
/// what to fix.
#[tokio::test]
async fn replication_task_settings_are_validated() {
    let f = fixture();
    f.bucket("b").await;
    let put = |body: Value| {
        Request::builder()
            .method("PUT")
            .uri("/api/v1/replications/t")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let ok = json!({"src_bucket": "b", "dst_url": "http://127.0.0.1:9", "dst_bucket": "c", "mode": "paused"});
    for (change, status, code) in [
        (
            json!({"dst_url": "ftp://cloud"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_replication",
        ),
        (
            json!({"dst_url": "https://cloud", "dst_ca": "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_replication",
        ),
        (
            json!({"dst_url": "cloud"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_replication",
        ),
        (
            json!({"src_bucket": "nope"}),
            StatusCode::NOT_FOUND,
            "bucket_not_found",
        ),
        (
            json!({"entries": ["../x"]}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_name",
        ),
        (
            json!({"when": {"$bogus": 1}}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            json!({"surprise": 1}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            json!({"mode": "sometimes"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
    ] {
        let mut body = ok.clone();
        for (k, v) in change.as_object().unwrap() {
            body[k] = v.clone();
        }
        let a = f.send(put(body.clone())).await;
        assert_eq!(a.status, status, "{body}: {:?}", a.body);
        assert_eq!(a.code(), code, "{body}");
    }
    let a = f.call("GET", "/api/v1/replications", "").await;
    assert_eq!(
        a.json()["replications"],
        json!([]),
        "a refused task was stored"
    );
    let a = f.send(put(ok)).await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    assert_eq!(a.json()["status"]["phase"], "paused");
}

/// Hostile probe of 2026-11-28: a batch whose records all failed answered each with its
/// whole message (naming the bucket and the entry: ~450 bytes a record, 45 MB for 100,000
/// records sent as 102 KB of zstd), outside the memory budget. The first 16 failures of a
/// code keep their message, later ones a short one; the bulk routes answer the same way.
#[tokio::test]
async fn a_batch_of_failures_answered_each_with_its_whole_message() {
    let f = fixture();
    f.bucket("b").await;
    let recs: Vec<Rec<'_>> = (1..=40u64).map(|ts| (ts, "", &[][..], &b"x"[..])).collect();
    let a = f
        .call("POST", "/api/v1/b/b/e/batch", frames(&recs, Some(40)))
        .await;
    assert_eq!(a.json()["written"], 40);
    let a = f
        .call("POST", "/api/v1/b/b/e/batch", frames(&recs, Some(40)))
        .await;
    let v = a.json();
    assert_eq!(
        (v["written"].as_u64(), v["failed"].as_u64()),
        (Some(0), Some(40))
    );
    let messages: Vec<String> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["status"], 409, "{r}");
            assert_eq!(r["error"]["code"], "timestamp_exists", "{r}");
            r["error"]["message"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(
        messages[..16].iter().all(|m| m.contains("already exists")),
        "{messages:?}"
    );
    assert!(
        messages[16..]
            .iter()
            .all(|m| m == "as the first results with this code say"),
        "{messages:?}"
    );
    let body = format!(
        "{{\"ts\": [{}]}}",
        (1000..1040)
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let a = f.call("DELETE", "/api/v1/b/b/e/batch", body).await;
    let v = a.json();
    assert_eq!(
        (v["done"].as_u64(), v["failed"].as_u64()),
        (Some(0), Some(40)),
        "{v}"
    );
    let short = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["error"]["message"] == "as the first results with this code say")
        .count();
    assert_eq!(short, 24, "{v}");
}

/// Bug (probe of 2026-11-30): a write refused with 422 `too_old` (older than the bucket's
/// `max_age`) still made its entry, empty and for good, which took a place under
/// `--max-entries`: three stale writes into new entries, and a valid write into a fourth
/// was refused 507 `too_many_entries`. A batch whose records were all too old did the
/// same. A refused write leaves no entry now.
#[tokio::test]
async fn a_too_old_write_left_an_empty_entry_taking_a_place_under_max_entries() {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        when_parser: Some(tsblob_server::config::when_parser()),
        max_entries: 3,
        ..StoreOptions::default()
    };
    let store = Store::open(dir.path(), opts).unwrap();
    let auth = Auth::load(dir.path(), None).unwrap();
    let state = tsblob_server::assemble::state(store, auth, Limits::default()).unwrap();
    let f = Fixture {
        app: app(state),
        _dir: dir,
    };
    let a = f.call("POST", "/api/v1/b/old", r#"{"max_age":"1d"}"#).await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    for e in ["a", "b", "c", "d"] {
        let a = f
            .call("POST", &format!("/api/v1/b/old/{e}?ts=1"), "x")
            .await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "too_old"),
            "{e}"
        );
    }
    let a = f
        .call(
            "POST",
            "/api/v1/b/old/batchy/batch",
            frames(&[(1, "a/b", &[], b"x"), (2, "a/b", &[], b"y")], Some(2)),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert!(
        String::from_utf8_lossy(&a.body).contains("too_old"),
        "{:?}",
        a.body
    );
    let a = f.call("GET", "/api/v1/b/old", "").await;
    assert_eq!(a.json()["info"]["entry_count"], 0, "{}", a.json());
    for e in ["good", "good2", "good3"] {
        let a = f.call("POST", &format!("/api/v1/b/old/{e}"), "x").await;
        assert_eq!(a.status, StatusCode::CREATED, "{e}: {:?}", a.body);
    }
}

/// Bug (probe of 2026-11-30): `…/b/base/info`, `…/histogram` and `…/batch` (a route word
/// as a whole entry name) were answered 422 "entry name is empty", where docs/api.md
/// promises what `…/x/info` gets: a 405 saying the word cannot end an entry name.
#[tokio::test]
async fn a_route_word_as_a_whole_entry_name_was_called_empty() {
    let f = fixture();
    f.bucket("base").await;
    for word in ["info", "histogram", "batch"] {
        for method in ["POST", "PUT", "GET", "DELETE", "PATCH"] {
            let a = f
                .call(method, &format!("/api/v1/b/base/{word}?ts=7"), "hi")
                .await;
            assert_eq!(
                (a.status, a.code().as_str()),
                (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
                "{method} {word}: {:?}",
                a.body
            );
            let message = a.json()["error"]["message"].as_str().unwrap().to_string();
            assert!(
                message.contains(&format!("`{word}`"))
                    && message.contains("cannot be an entry name"),
                "{method} {word}: {message}"
            );
        }
    }
    let a = f.call("GET", "/api/v1/b/base", "").await;
    assert_eq!(a.json()["info"]["entry_count"], 0, "{}", a.json());
}

/// Bug (probe of 2026-11-30): GET of the latest record of an entry with none said
/// "no record at timestamp 0", a timestamp the client never asked for.
#[tokio::test]
async fn the_latest_of_an_empty_entry_was_no_record_at_timestamp_0() {
    let f = fixture();
    f.bucket("b").await;
    let a = f.call("POST", "/api/v1/b/b/e?ts=5", "x").await;
    assert_eq!(a.status, StatusCode::CREATED);
    let a = f.call("DELETE", "/api/v1/b/b/e?ts=5", "").await;
    assert!(a.status.is_success(), "{:?}", a.body);
    for method in ["GET", "HEAD"] {
        let a = f.call(method, "/api/v1/b/b/e", "").await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{method}");
        if method == "GET" {
            assert_eq!(a.code(), "record_not_found");
            let message = a.json()["error"]["message"].as_str().unwrap().to_string();
            assert!(
                message.contains("has no records") && !message.contains("timestamp 0"),
                "{message}"
            );
        }
    }
    let a = f.call("GET", "/api/v1/b/b/e?ts=0", "").await;
    let message = a.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("timestamp 0"), "{message}");
}

/// Bug (probe of 2026-11-30): a POST query body over 1 MiB was told to "start the server
/// with a larger --max-body", a flag that does not move the query route's fixed 1 MiB.
#[tokio::test]
async fn a_query_body_over_1_mib_was_told_to_raise_max_body() {
    let f = fixture();
    f.bucket("b").await;
    let a = f.call("POST", "/api/v1/b/b/e", "x").await;
    assert_eq!(a.status, StatusCode::CREATED);
    let values: Vec<String> = (0..200_000).map(|i| format!("v{i}")).collect();
    let body = json!({"when": {"&k": {"$in": values}}}).to_string();
    assert!(body.len() > 1 << 20);
    for uri in ["/api/v1/b/b/e/query", "/api/v1/b/b/query"] {
        let a = f.call("POST", uri, body.clone()).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            "{uri}"
        );
        let message = a.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            message.contains("1 MiB")
                && message.contains("condition smaller")
                && !message.contains("larger --max-body"),
            "{uri}: {message}"
        );
    }
}
