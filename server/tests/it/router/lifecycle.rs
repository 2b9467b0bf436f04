//! Lifecycle rules over HTTP (issue 28, item 3): `/api/v1/lifecycle/{bucket}[/{name}[/run]]`,
//! `max_age` as the shorthand rule, `compress` rules: a module of the router test binary.

use super::*;

#[tokio::test]
async fn rules_are_set_listed_run_and_removed() {
    let f = fixture();
    f.bucket("b").await;
    let old = tsblob_storage::now_micros() - 2 * 3_600_000_000;
    for (i, cam) in ["front", "back", "front", "back"].iter().enumerate() {
        let req = Request::builder()
            .method("POST")
            .uri(format!("/api/v1/b/b/cams/{cam}?ts={}", old + i as u64))
            .header("x-tsblob-label-kind", if i < 2 { "raw" } else { "jpeg" })
            .body(Body::from("x"))
            .unwrap();
        assert_eq!(f.send(req).await.status, StatusCode::CREATED);
    }
    let rule = json!({
        "older_than": "1h",
        "interval": "10m",
        "entries": ["cams/*", "!cams/back"],
        "when": {"&kind": {"$eq": "raw"}},
        "mode": "disabled",
    });
    let a = f
        .call("PUT", "/api/v1/lifecycle/b/raw", rule.to_string())
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    let j = a.json();
    assert_eq!(j["older_than"], 3_600_000_000u64);
    assert_eq!(j["interval"], 600_000_000u64);
    assert_eq!(j["when"], json!({"&kind": {"$eq": "raw"}}));
    assert_eq!(j["mode"], "disabled");
    assert_eq!(j["action"], "remove");
    // Replacing answers 200.
    let a = f
        .call("PUT", "/api/v1/lifecycle/b/raw", rule.to_string())
        .await;
    assert_eq!(a.status, StatusCode::OK);
    // A disabled rule runs when asked: the one old raw record of cams/front goes.
    let a = f.call("POST", "/api/v1/lifecycle/b/raw/run", "").await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(a.json()["removed"], 1);
    assert_eq!(a.json()["caught_up"], true);
    let a = f.call("GET", "/api/v1/b/b/cams/front/info", "").await;
    assert_eq!(a.json()["record_count"], 1);
    let a = f.call("GET", "/api/v1/b/b/cams/back/info", "").await;
    assert_eq!(a.json()["record_count"], 2);
    let a = f.call("GET", "/api/v1/lifecycle/b/raw", "").await;
    assert_eq!(a.json()["status"]["removed"], 1);
    assert!(a.json()["status"]["last_run"].is_u64());
    // max_age is the shorthand rule: set, listed first, removed.
    let a = f
        .call(
            "PUT",
            "/api/v1/lifecycle/b/max_age",
            r#"{"older_than": "30d"}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    assert_eq!(a.json()["shorthand"], true);
    let a = f.call("GET", "/api/v1/b/b", "").await;
    assert_eq!(a.json()["settings"]["max_age"], 30 * 86_400_000_000u64);
    let a = f.call("GET", "/api/v1/lifecycle/b", "").await;
    let list = a.json();
    let names: Vec<&str> = list["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["max_age", "raw"]);
    let a = f
        .call(
            "PUT",
            "/api/v1/lifecycle/b/max_age",
            r#"{"older_than": "30d", "when": {"&a": 1}}"#,
        )
        .await;
    assert_eq!(a.code(), "invalid_settings");
    assert_eq!(
        f.call("DELETE", "/api/v1/lifecycle/b/max_age", "")
            .await
            .status,
        StatusCode::OK
    );
    let a = f.call("GET", "/api/v1/b/b", "").await;
    assert_eq!(a.json()["settings"]["max_age"], Value::Null);
    assert_eq!(
        f.call("DELETE", "/api/v1/lifecycle/b/raw", "").await.status,
        StatusCode::OK
    );
    let a = f.call("GET", "/api/v1/lifecycle/b/raw", "").await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "rule_not_found")
    );
    // In the OpenAPI document.
    let doc = f.call("GET", "/api/v1/openapi.json", "").await.json();
    for path in [
        "/api/v1/lifecycle/{bucket}",
        "/api/v1/lifecycle/{bucket}/{name}",
        "/api/v1/lifecycle/{bucket}/{name}/run",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} is not documented");
    }
    assert!(doc["paths"]["/api/v1/lifecycle/{bucket}/{name}"]["put"].is_object());
}

/// Issue 28: a `compress` rule (refused with 422 before) stores old records compressed; they
/// read back over HTTP with the same bytes, content type and labels.
#[tokio::test]
async fn a_compress_rule_runs_and_records_read_back_the_same() {
    let f = fixture();
    f.bucket("b").await;
    let old = tsblob_storage::now_micros() - 2 * 3_600_000_000;
    let body = |i: u64| format!("{i}: the same line again and again; ").repeat(50);
    for i in 0..4u64 {
        let req = Request::builder()
            .method("POST")
            .uri(format!("/api/v1/b/b/logs?ts={}", old + i))
            .header("content-type", "text/plain")
            .header("x-tsblob-label-n", i.to_string())
            .body(Body::from(body(i)))
            .unwrap();
        assert_eq!(f.send(req).await.status, StatusCode::CREATED);
    }
    let rule = json!({"older_than": "1h", "action": "compress", "mode": "disabled"});
    let a = f
        .call("PUT", "/api/v1/lifecycle/b/squeeze", rule.to_string())
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    assert_eq!(a.json()["action"], "compress");
    let a = f.call("POST", "/api/v1/lifecycle/b/squeeze/run", "").await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(
        (a.json()["compressed"].clone(), a.json()["removed"].clone()),
        (json!(4), json!(0))
    );
    assert!(a.json()["saved_bytes"].as_u64().unwrap() > 4 * 1000);
    let a = f.call("GET", "/api/v1/lifecycle/b/squeeze", "").await;
    assert_eq!(a.json()["status"]["compressed"], 4);
    for i in 0..4u64 {
        let a = f
            .call("GET", &format!("/api/v1/b/b/logs?ts={}", old + i), "")
            .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.body, body(i).as_bytes());
        assert_eq!(a.headers["content-type"], "text/plain");
        assert_eq!(a.headers["x-tsblob-label-n"], i.to_string().as_str());
    }
}

#[tokio::test]
async fn bad_rules_are_refused_with_the_reason() {
    let f = fixture();
    f.bucket("b").await;
    let cases = [
        (
            r#"{"older_than": "1d", "action": "squash"}"#,
            "invalid_settings",
        ),
        (r#"{"interval": "1h"}"#, "invalid_settings"),
        (r#"{"older_than": "soon"}"#, "invalid_settings"),
        (
            r#"{"older_than": "1d", "interval": "10ms"}"#,
            "invalid_settings",
        ),
        (
            r#"{"older_than": "1d", "mode": "sometimes"}"#,
            "invalid_settings",
        ),
        (
            r#"{"older_than": "1d", "entries": ["a/../b"]}"#,
            "invalid_settings",
        ),
        (
            r#"{"older_than": "1d", "when": {"$nope": 1}}"#,
            "bad_request",
        ),
        (r#"{"older_than": "1d", "colour": "red"}"#, "bad_request"),
    ];
    for (body, code) in cases {
        let a = f.call("PUT", "/api/v1/lifecycle/b/r", body).await;
        assert_eq!(a.code(), code, "{body}: {:?}", a.body);
        let msg = a.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.len() > 20, "{body}: {msg}");
    }
    let a = f
        .call(
            "PUT",
            "/api/v1/lifecycle/b/bad%20name",
            r#"{"older_than": "1d"}"#,
        )
        .await;
    assert_eq!(a.code(), "invalid_settings");
    let a = f
        .call("PUT", "/api/v1/lifecycle/nope/r", r#"{"older_than": "1d"}"#)
        .await;
    assert_eq!(a.code(), "bucket_not_found");
    // nothing was kept
    let a = f.call("GET", "/api/v1/lifecycle/b", "").await;
    assert_eq!(a.json()["rules"], json!([]));
}
