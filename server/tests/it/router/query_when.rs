//! Conditional queries over HTTP (`when`, `strict`, `meta`, `POST` and `DELETE` on the query
//! route): a module of the router test binary, driven through `oneshot` like the rest.

use super::*;

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Records 0..n: labels `n` (its index), `cam` (a/b/c by n % 3), payload "p<n>".
async fn seeded(f: &Fixture, n: u64) {
    f.bucket("b").await;
    let mut body = BytesMut::new();
    for i in 0..n {
        let labels: Labels = [
            ("n".to_string(), i.to_string()),
            (
                "cam".to_string(),
                ["a", "b", "c"][(i % 3) as usize].to_string(),
            ),
        ]
        .into();
        put_record(&mut body, i * 1000, "", &labels, format!("p{i}").as_bytes());
    }
    put_end(&mut body, n);
    let a = f
        .call("POST", "/api/v1/b/b/robot/cam/batch", body.freeze())
        .await;
    assert_eq!(a.json()["written"], n);
}

impl Fixture {
    /// The timestamps a GET query answers (status 200 expected).
    async fn when_ts(&self, params: &str) -> Vec<u64> {
        let a = self
            .call("GET", &format!("/api/v1/b/b/robot/cam/query?{params}"), "")
            .await;
        assert_eq!(a.status, StatusCode::OK, "{params}: {:?}", a.body);
        let (out, end, err) = decode(&a.body);
        assert_eq!(err, None, "{params}");
        assert_eq!(end, Some(out.len() as u64));
        out.into_iter().map(|(h, _)| h.ts / 1000).collect()
    }
}

#[tokio::test]
async fn get_with_when_filters_on_labels_and_timestamp() {
    let f = fixture();
    seeded(&f, 30).await;
    let w = |j: &str| format!("when={}", enc(j));
    assert_eq!(
        f.when_ts(&w(r#"{"&n": {"$gte": 25}}"#)).await,
        [25, 26, 27, 28, 29]
    );
    // numeric, not textual: "9" < "25" as text
    assert_eq!(f.when_ts(&w(r#"{"&n": {"$lt": 3}}"#)).await, [0, 1, 2]);
    // implicit AND of keys, $in in both notations, $or, $not, $timestamp
    assert_eq!(
        f.when_ts(&w(r#"{"&cam": {"$eq": "a"}, "&n": {"$gt": 20}}"#))
            .await,
        [21, 24, 27]
    );
    // a constant keeps its JSON type (ReductStore 1.21): the string "2" is text, never the
    // number 2
    assert_eq!(f.when_ts(&w(r#"{"$in": ["&n", 1, "2", 40]}"#)).await, [1]);
    assert_eq!(f.when_ts(&w(r#"{"$in": ["&n", 1, 2, 40]}"#)).await, [1, 2]);
    assert_eq!(
        f.when_ts(&w(
            r#"{"&n": {"$nin": [0, 1, 2]}, "$lt": ["$timestamp", 5000]}"#
        ))
        .await,
        [3, 4]
    );
    assert_eq!(
        f.when_ts(&w(
            r#"{"$or": [{"&n": {"$eq": 4}}, {"$not": [{"&n": {"$lt": 28}}]}]}"#
        ))
        .await,
        [4, 28, 29]
    );
    // with the other parameters: range, desc, limit, label filters
    assert_eq!(
        f.when_ts(&format!(
            "{}&start=3000&stop=20000&desc=true&limit=2&eq.cam=b",
            w(r#"{"&n": {"$ne": 16}}"#)
        ))
        .await,
        [19, 13]
    );
    // a missing label makes its comparison false
    assert!(f.when_ts(&w(r#"{"&gone": {"$ne": 1}}"#)).await.is_empty());
}

#[tokio::test]
async fn aggregation_operators_over_http() {
    let f = fixture();
    seeded(&f, 30).await;
    let w = |j: &str| format!("when={}", enc(j));
    assert_eq!(
        f.when_ts(&w(r#"{"&cam": {"$eq": "a"}, "$each_n": 3}"#))
            .await,
        [6, 15, 24]
    );
    // records are 1 ms apart: one per 5 ms after the first (which sets the clock)
    assert_eq!(
        f.when_ts(&w(r#"{"$each_t": "5ms"}"#)).await,
        [5, 10, 15, 20, 25]
    );
    assert_eq!(f.when_ts(&w(r#"{"$each_t": 0.01}"#)).await, [10, 20]);
    assert_eq!(
        f.when_ts(&w(r#"{"&n": {"$gt": 10}, "$limit": 3}"#)).await,
        [11, 12, 13]
    );
}

#[tokio::test]
async fn strict_missing_labels_and_malformed_conditions() {
    let f = fixture();
    seeded(&f, 5).await;
    let unlabelled = f.call("POST", "/api/v1/b/b/robot/cam?ts=9000", "x").await;
    assert_eq!(unlabelled.status, StatusCode::CREATED);
    let get = |q: String| {
        let f = &f;
        async move {
            f.call("GET", &format!("/api/v1/b/b/robot/cam/query?{q}"), "")
                .await
        }
    };
    let w = enc(r#"{"&cam": {"$eq": "a"}}"#);
    // not strict: the unlabelled record just does not match
    assert_eq!(f.when_ts(&format!("when={w}")).await, [0, 3]);
    // strict, failing before any record: a status naming the label
    let a = get(format!("when={w}&strict=true&start=8000")).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(a.code(), "missing_label");
    assert!(a.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("\"cam\""));
    // strict, failing after records: they come, then an error frame
    let a = get(format!("when={w}&strict=true")).await;
    assert_eq!(a.status, StatusCode::OK);
    let (out, end, err) = decode(&a.body);
    assert_eq!((out.len(), end), (2, None));
    assert_eq!(err.unwrap()["error"]["code"], "missing_label");

    for (when, want) in [
        ("{not json", "not valid JSON"),
        (r#"{"&cam": {"$regex": "a"}}"#, "unknown operator $regex"),
        // (a string operator in object notation is valid since ReductStore 1.21 semantics)
        (r#"{"$gt": ["&n"]}"#, "$gt takes exactly 2 operands"),
        (r#"{"&cam": "a"}"#, "needs an operator"),
    ] {
        let a = get(format!("when={}", enc(when))).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{when}");
        let msg = a.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(want), "{when}: {msg}");
    }
    let a = get(format!("when={w}&when={w}")).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = get("strict=maybe".into()).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn post_queries_and_meta_lines() {
    let f = fixture();
    seeded(&f, 12).await;
    let post = |body: Value| {
        let f = &f;
        async move {
            f.call("POST", "/api/v1/b/b/robot/cam/query", body.to_string())
                .await
        }
    };
    let a = post(
        json!({"start": 2000, "stop": 11000, "when": {"&cam": {"$in": ["a", "c"]}},
                        "limit": 4, "desc": true}),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let (out, _, _) = decode(&a.body);
    let ts: Vec<u64> = out.iter().map(|(h, _)| h.ts).collect();
    assert_eq!(ts, [9000, 8000, 6000, 5000]);
    assert_eq!(out[0].1, b"p9");

    // meta: NDJSON, one object per record, no payload
    let a = post(json!({"when": {"&n": {"$gte": 10}}, "meta": true})).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.headers["content-type"], "application/x-ndjson");
    let text = String::from_utf8(a.body.to_vec()).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            json!({"ts": 10000, "size": 3, "content_type": "application/octet-stream",
                   "labels": {"cam": "b", "n": "10"}}),
            json!({"ts": 11000, "size": 3, "content_type": "application/octet-stream",
                   "labels": {"cam": "c", "n": "11"}}),
        ]
    );
    // the same over GET
    let a = f
        .call(
            "GET",
            &format!(
                "/api/v1/b/b/robot/cam/query?meta=true&when={}",
                enc(r#"{"&n": {"$gte": 10}}"#)
            ),
            "",
        )
        .await;
    assert_eq!(a.body, text.as_bytes());
    // strict over meta: an error line after the records
    f.call("POST", "/api/v1/b/b/robot/cam?ts=20000", "x").await;
    let a = post(json!({"when": {"&n": {"$gte": 11}}, "meta": true, "strict": true})).await;
    let text = String::from_utf8(a.body.to_vec()).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert_eq!(last["error"]["code"], "missing_label");

    for (body, want) in [
        ("{", "the body must be JSON"),
        (r#"{"start": -1}"#, "the body must be JSON"),
        (r#"{"statr": 1}"#, "unknown field"),
        (r#"{"when": {"$foo": 1}}"#, "unknown operator $foo"),
        (r#"{"when": [1]}"#, "must be a JSON object"),
    ] {
        let a = f.call("POST", "/api/v1/b/b/robot/cam/query", body).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{body}");
        let msg = a.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(want), "{body}: {msg}");
    }
    let a = f
        .call(
            "POST",
            "/api/v1/b/b/robot/cam/query",
            r#"{"start": 5, "stop": 1}"#,
        )
        .await;
    assert_eq!(a.code(), "invalid_timestamp");
    let a = f
        .call("POST", "/api/v1/b/b/robot/cam/query?limit=1", "{}")
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = f.call("POST", "/api/v1/b/b/zzz/query", "{}").await;
    assert_eq!(a.code(), "entry_not_found");
}

#[tokio::test]
async fn delete_with_when_removes_only_matches() {
    let f = fixture();
    seeded(&f, 30).await;
    let del = |q: String| {
        let f = &f;
        async move {
            f.call("DELETE", &format!("/api/v1/b/b/robot/cam/query?{q}"), "")
                .await
        }
    };
    let a = del(format!(
        "start=3000&stop=27000&when={}",
        enc(r#"{"&cam": {"$eq": "b"}}"#)
    ))
    .await;
    assert_eq!(a.json(), json!({"removed": 8}), "{:?}", a.body);
    let left = f.when_ts("").await;
    assert_eq!(left.len(), 22);
    assert!(left.contains(&1) && left.contains(&28) && !left.contains(&4));
    let a = del(format!("when={}&limit=2", enc(r#"{"&cam": {"$eq": "a"}}"#))).await;
    assert_eq!(a.json(), json!({"removed": 2}));
    // An invalid condition (an unknown operator; `{"$has": 1}` was the example until `$has`
    // took computed names, which made it valid) removes nothing.
    let a = del(format!("when={}", enc(r#"{"&cam": {"$no_such_op": 1}}"#))).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = del("ts=1".into()).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = del("meta=true".into()).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    // Bug pinned: `heartbeat=` (and `settle_ms=`) were accepted by DELETE and ignored; a
    // removal sends one answer at its end, so they are refused, naming the parameter.
    for q in ["heartbeat=5", "settle_ms=10"] {
        let a = del(q.into()).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{q}");
        let msg = a.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(q.split('=').next().unwrap()), "{q}: {msg}");
    }
    assert_eq!(f.when_ts("").await.len(), 20);
}

/// A query answered in one step (a short query: here 30 records) has its whole answer
/// queued in its body when the response is returned: the connection writes the status,
/// the headers and the records at once, where a pump task spawned to send the step left
/// the body empty when hyper first polled it (two `writev` per query:
/// `docs/benchmarks/reads-2-2026-11-26b.md`).
#[tokio::test]
async fn a_short_querys_whole_answer_is_in_its_body_when_the_response_is_returned() {
    use futures_util::FutureExt;
    let f = fixture();
    seeded(&f, 30).await;
    let req = Request::builder()
        .method("GET")
        .uri("/api/v1/b/b/robot/cam/query")
        .body(Body::empty())
        .unwrap();
    let resp = f.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut got = BytesMut::new();
    loop {
        match body.frame().now_or_never() {
            Some(Some(frame)) => {
                if let Ok(d) = frame.unwrap().into_data() {
                    got.extend_from_slice(&d);
                }
            }
            Some(None) => break,
            None => panic!("the body waited for a task: the answer was not queued in it"),
        }
    }
    let (out, end, err) = decode(&got);
    assert_eq!((out.len(), end, err), (30, Some(30), None));
    assert_eq!(out[29].1, b"p29");
}
