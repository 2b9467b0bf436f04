//! Entry attachments over HTTP (issue 28): `GET|PUT|DELETE …/{entry}/attachments[/{name}]`,
//! JSON documents kept with an entry, never records: a module of the router test binary.

use super::*;

#[tokio::test]
async fn attachments_are_written_read_replaced_and_removed() {
    let f = fixture();
    f.bucket("b").await;
    // A write creates the entry; the answer names each attachment with its timestamp.
    let a = f
        .call(
            "PUT",
            "/api/v1/b/b/cams/front/attachments",
            r#"{"schema": {"fields": ["x", "y"], "big": 123456789012345678901234567890}, "$plugin": [1, 2.5, null]}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let written = a.json()["written"].clone();
    assert!(written["schema"].as_u64().unwrap() > 0, "{written}");
    assert!(written["$plugin"].as_u64().is_some(), "{written}");
    // Documents come back as written (a big integer is not rounded through a float).
    let a = f
        .call("GET", "/api/v1/b/b/cams/front/attachments", "")
        .await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(
        String::from_utf8_lossy(&a.body).contains("123456789012345678901234567890"),
        "{:?}",
        a.body
    );
    assert_eq!(a.json()["$plugin"], json!([1, 2.5, null]));
    assert_eq!(a.json()["schema"]["fields"], json!(["x", "y"]));
    // One by name, with its timestamp; replaced by a later write.
    let a = f
        .call("GET", "/api/v1/b/b/cams/front/attachments/schema", "")
        .await;
    assert_eq!(a.status, StatusCode::OK);
    let ts1: u64 = a.headers["x-tsblob-ts"].to_str().unwrap().parse().unwrap();
    let a = f
        .call(
            "PUT",
            "/api/v1/b/b/cams/front/attachments/schema",
            r#"{"v": 2}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let a = f
        .call("GET", "/api/v1/b/b/cams/front/attachments/schema", "")
        .await;
    assert_eq!(a.json(), json!({"v": 2}));
    let ts2: u64 = a.headers["x-tsblob-ts"].to_str().unwrap().parse().unwrap();
    assert!(ts2 > ts1);
    // Never records: the entry holds none, a query lists none.
    let a = f.call("GET", "/api/v1/b/b/cams/front/info", "").await;
    assert_eq!(a.json()["record_count"], 0);
    let a = f.call("GET", "/api/v1/b/b/cams/front/query", "").await;
    assert_eq!(decode(&a.body).0.len(), 0);
    // Removal: one (404 when absent), some by name, all.
    let a = f
        .call("DELETE", "/api/v1/b/b/cams/front/attachments/schema", "")
        .await;
    assert_eq!(
        (a.status, a.json()),
        (StatusCode::OK, json!({"removed": ["schema"]}))
    );
    let a = f
        .call("DELETE", "/api/v1/b/b/cams/front/attachments/schema", "")
        .await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::NOT_FOUND, "attachment_not_found".into())
    );
    let a = f
        .call("GET", "/api/v1/b/b/cams/front/attachments/schema", "")
        .await;
    assert_eq!(a.code(), "attachment_not_found");
    f.call(
        "PUT",
        "/api/v1/b/b/cams/front/attachments",
        r#"{"a": 1, "b": 2, "c": 3}"#,
    )
    .await;
    let a = f
        .call(
            "DELETE",
            "/api/v1/b/b/cams/front/attachments?names=a,b,zz",
            "",
        )
        .await;
    assert_eq!(a.json(), json!({"removed": ["a", "b"]}));
    let a = f
        .call("DELETE", "/api/v1/b/b/cams/front/attachments", "")
        .await;
    assert_eq!(a.json(), json!({"removed": ["$plugin", "c"]}));
    let a = f
        .call("GET", "/api/v1/b/b/cams/front/attachments", "")
        .await;
    assert_eq!((a.status, a.json()), (StatusCode::OK, json!({})));
}

#[tokio::test]
async fn attachments_follow_renames_and_go_with_their_entry() {
    let f = fixture();
    f.bucket("b").await;
    f.call("PUT", "/api/v1/b/b/e1/attachments/meta", r#"{"k": 1}"#)
        .await;
    f.call("POST", "/api/v1/b/b/e1?ts=1", "x").await;
    let a = f
        .call("PUT", "/api/v1/b/b/e1/rename", r#"{"new_name": "e2"}"#)
        .await;
    assert_eq!(a.status, StatusCode::OK);
    let a = f
        .call("PUT", "/api/v1/b/b/rename", r#"{"new_name": "b2"}"#)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let a = f.call("GET", "/api/v1/b/b2/e2/attachments", "").await;
    assert_eq!(a.json(), json!({"meta": {"k": 1}}));
    assert_eq!(
        f.call("GET", "/api/v1/b/b2/e1/attachments", "")
            .await
            .code(),
        "entry_not_found"
    );
    assert_eq!(
        f.call("DELETE", "/api/v1/b/b2/e2", "").await.status,
        StatusCode::OK
    );
    assert_eq!(
        f.call("GET", "/api/v1/b/b2/e2/attachments", "")
            .await
            .code(),
        "entry_not_found"
    );
    f.call("POST", "/api/v1/b/b2/e2?ts=1", "x").await;
    let a = f.call("GET", "/api/v1/b/b2/e2/attachments", "").await;
    assert_eq!(a.json(), json!({}), "a new entry of the name starts empty");
}

/// The errors: missing bucket or entry, a name or document that breaks the rules, an
/// oversize attachment (from its `Content-Length`, or as it crosses the limit), too many,
/// a body that stops short, a method the route does not take. Nothing is stored by any.
#[tokio::test]
async fn attachment_errors_are_clear_and_change_nothing() {
    let f = fixture();
    let a = f.call("PUT", "/api/v1/b/nope/e/attachments/a", "{}").await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::NOT_FOUND, "bucket_not_found".into())
    );
    f.bucket("b").await;
    let a = f.call("GET", "/api/v1/b/b/missing/attachments", "").await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::NOT_FOUND, "entry_not_found".into())
    );
    let a = f
        .call("DELETE", "/api/v1/b/b/missing/attachments", "")
        .await;
    assert_eq!(a.code(), "entry_not_found");
    let a = f
        .call("PUT", "/api/v1/b/b/e/attachments/a", "{not json")
        .await;
    assert_eq!(
        (a.status, a.code()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_attachment".into()
        )
    );
    let a = f
        .call("PUT", "/api/v1/b/b/e/attachments", r#"[1, 2]"#)
        .await;
    assert_eq!(a.code(), "invalid_attachment");
    let a = f.call("PUT", "/api/v1/b/b/e/attachments/a%20b", "{}").await;
    assert_eq!(a.code(), "invalid_name");
    let a = f
        .call("PUT", "/api/v1/b/b/e/attachments", r#"{"a b": 1}"#)
        .await;
    assert_eq!(a.code(), "invalid_name");
    // Oversize: 413 with a JSON error naming the flag, whether announced or chunked.
    let big = format!(r#""{}""#, "x".repeat(70_000));
    let a = f
        .call("PUT", "/api/v1/b/b/e/attachments/big", big.clone())
        .await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "attachment_too_large".into())
    );
    assert!(a.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-attachment-size"));
    let chunks: Vec<Result<Bytes, std::io::Error>> = big
        .as_bytes()
        .chunks(8192)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let a = f
        .send(
            Request::builder()
                .method("PUT")
                .uri("/api/v1/b/b/e/attachments/big")
                .body(Body::from_stream(futures_util::stream::iter(chunks)))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "attachment_too_large".into())
    );
    let a = f
        .call(
            "PUT",
            "/api/v1/b/b/e/attachments",
            format!(r#"{{"big": {big}}}"#),
        )
        .await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "attachment_too_large".into())
    );
    // Too many: the whole write refused.
    let many: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("n{i}"), json!(i))).collect();
    let a = f
        .call(
            "PUT",
            "/api/v1/b/b/e/attachments",
            Value::Object(many).to_string(),
        )
        .await;
    assert_eq!(
        (a.status, a.code()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "too_many_attachments".into()
        )
    );
    // A body that stops short: 400, nothing kept.
    let cut: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from_static(b"{\"half\": ")),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "gone",
        )),
    ];
    let a = f
        .send(
            Request::builder()
                .method("PUT")
                .uri("/api/v1/b/b/e/attachments/half")
                .body(Body::from_stream(futures_util::stream::iter(cut)))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::BAD_REQUEST, "bad_request".into())
    );
    // Nothing of the refused writes was stored (no entry was even made).
    assert_eq!(
        f.call("GET", "/api/v1/b/b/e/attachments", "").await.code(),
        "entry_not_found"
    );
    let a = f.call("POST", "/api/v1/b/b/e/attachments/a", "{}").await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
}

/// `attachments` is reserved in entry names: a record cannot be written where the route is,
/// neither as the last segment nor further up.
#[tokio::test]
async fn an_entry_named_like_the_attachments_route_is_refused() {
    let f = fixture();
    f.bucket("b").await;
    // `e/attachments/x` as a record path is attachment `x` of `e` (POST: not a method of it)
    let a = f
        .call("POST", "/api/v1/b/b/e/attachments/x?ts=1", "{}")
        .await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    let a = f
        .call("POST", "/api/v1/b/b/attachments/deeper/e?ts=1", "x")
        .await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_name".into())
    );
    let a = f
        .call("PUT", "/api/v1/b/b/e/attachments", r#"{"x": 1}"#)
        .await;
    assert_eq!(a.status, StatusCode::OK);
    let a = f
        .call(
            "PUT",
            "/api/v1/b/b/e/rename",
            r#"{"new_name": "e/attachments"}"#,
        )
        .await;
    assert_eq!(a.code(), "invalid_name");
    let a = f.call("GET", "/api/v1/b/b", "").await;
    let names: Vec<&str> = a.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string().leak() as &str)
        .collect();
    assert_eq!(names, ["e"]);
    let doc = f.call("GET", "/api/v1/openapi.json", "").await.json();
    for p in [
        "/api/v1/b/{bucket}/{entry}/attachments",
        "/api/v1/b/{bucket}/{entry}/attachments/{name}",
    ] {
        assert!(doc["paths"][p].is_object(), "{p} missing from OpenAPI");
    }
    assert!(doc["paths"]["/api/v1/b/{bucket}/{entry}/attachments"]["delete"].is_object());
    assert!(doc["paths"]["/api/v1/b/{bucket}/{entry}/attachments"]["put"].is_object());
}

/// Tokens: reading attachments needs read access to the bucket, writing and removing them
/// write access; a token of another bucket gets 403.
#[tokio::test]
async fn attachments_need_the_bucket_rights_of_their_operation() {
    let f = fixture_with(Some("root-secret"), Limits::default());
    let req = |method: &str, uri: &str, token: &str, body: &'static str| {
        Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::from(body))
            .unwrap()
    };
    let root = "root-secret";
    f.send(req("POST", "/api/v1/b/cams", root, "")).await;
    f.send(req("POST", "/api/v1/b/other", root, "")).await;
    let token = |body: &'static str, name: &'static str| {
        let r = req("POST", &format!("/api/v1/tokens/{name}"), root, body);
        let f = &f;
        async move {
            f.send(r).await.json()["value"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let reader = token(r#"{"read":["cams"]}"#, "reader").await;
    let writer = token(r#"{"write":["cams"]}"#, "writer").await;
    let stranger = token(r#"{"read":["other"], "write":["other"]}"#, "stranger").await;
    let path = "/api/v1/b/cams/e/attachments";
    let a = f.send(req("PUT", path, &writer, r#"{"a": 1}"#)).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let a = f.send(req("GET", path, &reader, "")).await;
    assert_eq!((a.status, a.json()), (StatusCode::OK, json!({"a": 1})));
    for (method, body) in [("PUT", r#"{"b": 2}"#), ("DELETE", "")] {
        let a = f.send(req(method, path, &reader, body)).await;
        assert_eq!(
            (a.status, a.code()),
            (StatusCode::FORBIDDEN, "forbidden".into()),
            "{method}"
        );
    }
    for method in ["GET", "PUT", "DELETE"] {
        let a = f.send(req(method, path, &stranger, "{}")).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{method}");
    }
    let a = f.send(req("GET", path, &reader, "")).await;
    assert_eq!(a.json(), json!({"a": 1}), "nothing changed by the refusals");
}

/// Concurrent PUTs of one name (and one name of each writer's own) over HTTP: every
/// request succeeds, no writer's own name is lost, the shared one holds one of the values.
#[tokio::test]
async fn concurrent_puts_of_one_attachment_lose_no_other_name() {
    let f = fixture();
    f.bucket("b").await;
    let puts = (0..8).map(|i| {
        let body = format!(r#"{{"shared": {i}, "own{i}": {i}}}"#);
        f.call("PUT", "/api/v1/b/b/e/attachments", body)
    });
    for a in futures_util::future::join_all(puts).await {
        assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    }
    let all = f.call("GET", "/api/v1/b/b/e/attachments", "").await.json();
    let shared = all["shared"].as_u64().unwrap();
    assert!(shared < 8);
    for i in 0..8 {
        assert_eq!(all[format!("own{i}")], json!(i), "{all}");
    }
}
