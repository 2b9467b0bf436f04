//! Label updates and removals of many records per request (issue 28): by a query
//! (`PATCH …/query`) and by timestamps (`PATCH`/`DELETE …/batch`): a module of the router
//! test binary.

use super::*;

async fn labels_at(f: &Fixture, ts: u64) -> Value {
    let a = f
        .call(
            "GET",
            &format!("/api/v1/b/b/cam/query?meta=true&start={ts}&stop={}", ts + 1),
            "",
        )
        .await;
    assert_eq!(a.status, StatusCode::OK);
    let line = String::from_utf8(a.body.to_vec()).unwrap();
    let v: Value = serde_json::from_str(line.trim()).unwrap();
    v["labels"].clone()
}

#[tokio::test]
async fn labels_are_updated_by_query_and_records_by_timestamp_list() {
    let f = fixture();
    f.bucket("b").await;
    for ts in 0..20u64 {
        let cam = if ts % 2 == 0 { "front" } else { "rear" };
        let a = f
            .send(
                Request::builder()
                    .method("POST")
                    .uri(format!("/api/v1/b/b/cam?ts={ts}"))
                    .header("x-tsblob-label-cam", cam)
                    .body(Body::from("x"))
                    .unwrap(),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED);
    }
    // by query: the front records in [4, 14), at most 3
    let body = r#"{"start": 4, "stop": 14, "when": {"&cam": {"$eq": "front"}}, "limit": 3,
                   "labels": {"reviewed": "yes", "cam": null}}"#;
    let a = f.call("PATCH", "/api/v1/b/b/cam/query", body).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(a.json()["updated"], 3);
    assert_eq!(labels_at(&f, 4).await, json!({"reviewed": "yes"}));
    assert_eq!(labels_at(&f, 8).await, json!({"reviewed": "yes"}));
    assert_eq!(labels_at(&f, 10).await, json!({"cam": "front"}));
    assert_eq!(labels_at(&f, 5).await, json!({"cam": "rear"}));
    let a = f
        .call("PATCH", "/api/v1/b/b/cam/query", r#"{"labels": {}}"#)
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = f
        .call(
            "PATCH",
            "/api/v1/b/b/cam/query",
            r#"{"when": {"&cam": {"$nope": 1}}, "labels": {"k": "v"}}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("$nope"));

    // by timestamps: each its own result
    let body =
        r#"{"records": [{"ts": 1, "labels": {"k": "v"}}, {"ts": 99, "labels": {"k": "v"}}]}"#;
    let a = f.call("PATCH", "/api/v1/b/b/cam/batch", body).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let j = a.json();
    assert_eq!(
        (j["done"].clone(), j["failed"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(j["results"][0]["status"], 200);
    assert_eq!(j["results"][1]["status"], 404);
    assert_eq!(j["results"][1]["error"]["code"], "record_not_found");
    assert_eq!(labels_at(&f, 1).await, json!({"cam": "rear", "k": "v"}));

    let a = f
        .call("DELETE", "/api/v1/b/b/cam/batch", r#"{"ts": [2, 3, 99]}"#)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let j = a.json();
    assert_eq!(
        (j["done"].clone(), j["failed"].clone()),
        (json!(2), json!(1))
    );
    let a = f.call("GET", "/api/v1/b/b/cam/info", "").await;
    assert_eq!(a.json()["record_count"], 18);
    let a = f
        .call("DELETE", "/api/v1/b/b/cam/batch", r#"{"ts": "x"}"#)
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = f
        .call("DELETE", "/api/v1/b/b/nope/batch", r#"{"ts": [1]}"#)
        .await;
    assert_eq!(a.code(), "entry_not_found");
}
