//! Renaming entries and buckets over HTTP (issue 28): ReductStore's `PUT …/rename` with
//! `{"new_name": ...}`, the route word `rename` reserved, and what a write to an entry ending in a route word
//! is told: a module of the router test
//! binary.

use super::*;

/// Bug (issue 28): `PUT /api/v1/b/b/e1/rename`, ReductStore's entry rename, was a record
/// write into a new entry named `e1/rename` (201). Now it renames `e1`, and any other
/// method on such a path is refused with a message naming the route; `rename` is reserved.
#[tokio::test]
async fn put_rename_wrote_a_record_into_an_entry_named_rename() {
    let f = fixture();
    f.bucket("b").await;
    for ts in [1, 2, 3] {
        let a = f
            .call("POST", &format!("/api/v1/b/b/e1?ts={ts}"), "x")
            .await;
        assert_eq!(a.status, StatusCode::CREATED);
    }
    let a = f
        .call("PUT", "/api/v1/b/b/e1/rename", r#"{"new_name": "cams/e2"}"#)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(a.json()["name"], "cams/e2");
    assert_eq!(a.json()["record_count"], 3);
    let a = f.call("GET", "/api/v1/b/b/cams/e2?ts=2", "").await;
    assert_eq!((a.status, &a.body[..]), (StatusCode::OK, &b"x"[..]));
    assert_eq!(
        f.call("GET", "/api/v1/b/b/e1?ts=2", "").await.code(),
        "entry_not_found"
    );
    let a = f.call("GET", "/api/v1/b/b", "").await;
    let names: Vec<String> = a.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["cams/e2"], "no entry named …/rename was made");

    // Other methods on a rename path: a clear refusal, nothing written.
    for method in ["POST", "GET", "DELETE", "PATCH"] {
        let a = f.call(method, "/api/v1/b/b/cams/e2/rename?ts=9", "x").await;
        assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        let msg = a.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            msg.contains("reserved") && msg.contains("new_name"),
            "{msg}"
        );
    }
    // `rename` as an entry name's last segment is refused wherever a name is given
    let a = f
        .call(
            "PUT",
            "/api/v1/b/b/cams/e2/rename",
            r#"{"new_name": "x/rename"}"#,
        )
        .await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_name".into())
    );

    // conflicts and malformed bodies
    f.call("POST", "/api/v1/b/b/other?ts=1", "y").await;
    let a = f
        .call(
            "PUT",
            "/api/v1/b/b/cams/e2/rename",
            r#"{"new_name": "other"}"#,
        )
        .await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::CONFLICT, "entry_exists".into())
    );
    let a = f.call("PUT", "/api/v1/b/b/cams/e2/rename", "{}").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("new_name"));
    let a = f
        .call("PUT", "/api/v1/b/b/nope/rename", r#"{"new_name": "x"}"#)
        .await;
    assert_eq!(a.code(), "entry_not_found");

    // the bucket: PUT /api/v1/b/{bucket}/rename
    f.bucket("taken").await;
    let a = f
        .call("PUT", "/api/v1/b/b/rename", r#"{"new_name": "taken"}"#)
        .await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::CONFLICT, "bucket_exists".into())
    );
    let a = f
        .call("PUT", "/api/v1/b/b/rename", r#"{"new_name": "b2"}"#)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(a.json()["name"], "b2");
    let a = f.call("GET", "/api/v1/b/b2/cams/e2?ts=3", "").await;
    assert_eq!((a.status, &a.body[..]), (StatusCode::OK, &b"x"[..]));
    assert_eq!(
        f.call("GET", "/api/v1/b/b", "").await.code(),
        "bucket_not_found"
    );
    let a = f.call("POST", "/api/v1/b/b2/rename", "x").await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
}

/// Bug (new-user walkthrough): a write to an entry whose last segment is a route word got
/// an unrelated answer: `POST …/x/info` "POST is not supported on the Info route", `POST
/// …/x/query?ts=1` "a POST query takes its parameters in the JSON body". Both say the word
/// names a route and cannot end an entry name.
#[tokio::test]
async fn a_write_to_an_entry_named_info_got_an_unrelated_answer() {
    let f = fixture();
    let a = f.call("POST", "/api/v1/b/r", "").await;
    assert_eq!(a.status, StatusCode::CREATED);
    for (path, word) in [
        ("/api/v1/b/r/x/info?ts=1", "info"),
        ("/api/v1/b/r/x/histogram?ts=1", "histogram"),
        ("/api/v1/b/r/x/query?ts=1", "query"),
    ] {
        let a = f.call("POST", path, "x").await;
        assert!(a.status.is_client_error(), "{path}: {:?}", a.body);
        let message = a.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            message.contains(&format!("`{word}`"))
                && message.contains("cannot be an entry name's last segment"),
            "{path}: {message}"
        );
    }
}
