//! Quota and size settings on tsblob's own API: a module of the router test binary.

use super::*;

/// Bug "a FIFO quota set without its size removed the bucket": `{"quota_type":"fifo"}`
/// (the CLI's `bucket update B --quota-type fifo`, the SDK's `quota_type="fifo"`) was
/// accepted as a quota of 0 bytes, and the next write, to any entry, removed every older
/// block. Refused now with what to give, on create and on update; an update that changes
/// the type of a quota that has a size, or touches no quota field, still goes through.
#[tokio::test]
async fn a_fifo_quota_set_without_its_size_removed_the_bucket() {
    let f = fixture();
    for body in [
        r#"{"quota_type":"fifo"}"#,
        r#"{"quota_type":"hard","quota_size":0}"#,
    ] {
        refused_for_its_size(&f, "POST", body).await;
    }
    let a = f
        .call("POST", "/api/v1/b/q", r#"{"max_block_size":4096}"#)
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    let payload = "x".repeat(3000);
    for ts in 1..=6 {
        let a = f
            .call("POST", &format!("/api/v1/b/q/e?ts={ts}"), payload.clone())
            .await;
        assert_eq!(a.status, StatusCode::CREATED);
    }
    for body in [
        r#"{"quota_type":"fifo"}"#,
        r#"{"quota_type":"fifo","quota_size":0}"#,
        r#"{"quota_size":0,"quota_type":"hard"}"#,
    ] {
        refused_for_its_size(&f, "PUT", body).await;
    }
    // The next write removed nothing: the refused settings were not applied.
    let a = f.call("POST", "/api/v1/b/q/other?ts=7", "y").await;
    assert_eq!(a.status, StatusCode::CREATED);
    let a = f.call("GET", "/api/v1/b/q", "").await;
    assert_eq!(a.json()["settings"]["quota_type"], "none", "{:?}", a.body);
    assert_eq!(a.json()["info"]["record_count"], 7, "{:?}", a.body);
    // A size first, then the type alone: a quota with a size.
    let a = f
        .call(
            "PUT",
            "/api/v1/b/q",
            r#"{"quota_type":"hard","quota_size":1000000}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let a = f
        .call("PUT", "/api/v1/b/q", r#"{"quota_type":"fifo"}"#)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(a.json()["settings"]["quota_type"], "fifo");
    assert_eq!(a.json()["settings"]["quota_size"], 1000000);
    let a = f.call("PUT", "/api/v1/b/q", r#"{"quota_size":0}"#).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", a.body);
    let a = f
        .call(
            "PUT",
            "/api/v1/b/q",
            r#"{"quota_type":"none","quota_size":0}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
}

/// `body` sent to bucket `q` is 422 `invalid_settings`, saying a quota needs its size.
async fn refused_for_its_size(f: &Fixture, method: &str, body: &str) {
    let a = f.call(method, "/api/v1/b/q", body.to_string()).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_settings"),
        "{method} {body}: {:?}",
        a.body
    );
    let message = a.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(message.contains("needs a quota_size above 0"), "{message}");
}

/// Bug (new-user walkthrough): `"quota_size": "1GiB"` was refused with 400 "the settings
/// are not valid JSON" while `tier_local_max` and `max_age` took strings. Sizes take bytes
/// or a size string; a value of the wrong type is 422 `invalid_settings` naming the field.
#[tokio::test]
async fn a_quota_size_given_as_1gib_was_not_valid_json() {
    let f = fixture();
    let a = f
        .call(
            "POST",
            "/api/v1/b/s",
            r#"{"quota_type":"fifo","quota_size":"1GiB","max_block_size":"64MiB","max_age":"30d"}"#,
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    let a = f.call("GET", "/api/v1/b/s", "").await;
    assert_eq!(
        a.json()["settings"]["quota_size"],
        1u64 << 30,
        "{:?}",
        a.body
    );
    assert_eq!(a.json()["settings"]["max_block_size"], 64u64 << 20);
    let a = f
        .call("PUT", "/api/v1/b/s", r#"{"quota_size":2000000000}"#)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(a.json()["settings"]["quota_size"], 2000000000u64);
    for (body, field) in [
        (r#"{"quota_size":"lots"}"#, "quota_size"),
        (r#"{"quota_size":true}"#, "quota_size"),
        (r#"{"max_block_size":-4}"#, "max_block_size"),
    ] {
        let a = f.call("PUT", "/api/v1/b/s", body).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_settings"),
            "{body}: {:?}",
            a.body
        );
        let message = a.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            message.starts_with(field) && message.contains("\"10GiB\""),
            "{message}"
        );
    }
}
