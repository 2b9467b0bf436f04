//! A connection's batches keep the label sets they sent for its next batch
//! (`server/src/http/batch.rs`, `LabelMemo`, `--batch-label-memo`): records of later batches
//! that send a kept set are stored with exactly the content type and labels they sent, and a
//! caller that sends a new set per record leaves nothing kept past the limit.

use super::*;
use tsblob_server::http::batch::LabelMemo;

/// Sets that differ only in their content type, in one label's value, or in having a label.
const SETS: [(&str, &[(&str, &str)]); 5] = [
    ("", &[("cam", "front"), ("seq", "1")]),
    ("image/jpeg", &[("cam", "front"), ("seq", "1")]),
    ("", &[("cam", "front"), ("seq", "2")]),
    ("", &[("cam", "front")]),
    ("text/plain", &[]),
];

async fn batch(f: &Fixture, memo: &LabelMemo, entry: &str, recs: &[Rec<'_>]) -> Value {
    let req = Request::builder()
        .method("POST")
        .uri(format!("/api/v1/b/b/{entry}/batch"))
        .extension(memo.clone())
        .body(Body::from(frames(recs, Some(recs.len() as u64))))
        .unwrap();
    let a = f.send(req).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let v = a.json();
    assert_eq!(v["written"], recs.len() as u64, "{v}");
    v
}

#[tokio::test]
async fn label_sets_kept_between_batches_read_back_as_sent_and_stay_bounded() {
    let limit = 16 << 10;
    let f = fixture_with(
        None,
        Limits {
            batch_label_memo: limit,
            ..Limits::default()
        },
    );
    f.bucket("b").await;
    let memo = LabelMemo::default();
    let payload = b"p".repeat(100);
    // Batch 0 takes turns through the first three sets; batches 1 and 2 (to another entry
    // too) use all five out of turn, with the kept sets among them.
    let mut want: Vec<(String, u64, usize)> = Vec::new();
    for (b, entry, walk) in [(0u64, "m", 3usize), (1, "m", 5), (2, "n", 5)] {
        let recs: Vec<Rec<'_>> = (0..40u64)
            .map(|i| {
                let set = ((i * 7 + b * 3 + i / 4) as usize) % walk;
                want.push((entry.to_string(), b * 1000 + i, set));
                let (ct, labels) = SETS[set];
                (b * 1000 + i, ct, labels, payload.as_slice())
            })
            .collect();
        let v = batch(&f, &memo, entry, &recs).await;
        assert!(
            (1..=limit).contains(&memo.kept_bytes()),
            "batch {b}: {} bytes kept ({v})",
            memo.kept_bytes()
        );
    }
    // A caller sending a new set per record: stored as sent, and nothing kept after it
    // (its sets would be over the limit).
    let values: Vec<String> = (0..300).map(|i| format!("value-{i:04}")).collect();
    let labels: Vec<[(&str, &str); 1]> = values.iter().map(|v| [("k", v.as_str())]).collect();
    let recs: Vec<Rec<'_>> = (0..300u64)
        .map(|i| (5000 + i, "", &labels[i as usize][..], payload.as_slice()))
        .collect();
    batch(&f, &memo, "m", &recs).await;
    assert_eq!(memo.kept_bytes(), 0, "a new set per record is not kept");
    // The next batch starts afresh and keeps its own sets again.
    let recs: Vec<Rec<'_>> = (0..10u64)
        .map(|i| {
            want.push(("m".into(), 6000 + i, (i % 2) as usize));
            let (ct, labels) = SETS[(i % 2) as usize];
            (6000 + i, ct, labels, payload.as_slice())
        })
        .collect();
    batch(&f, &memo, "m", &recs).await;
    assert!(memo.kept_bytes() > 0);

    for entry in ["m", "n"] {
        let a = f
            .call("GET", &format!("/api/v1/b/b/{entry}/query"), "")
            .await;
        let (out, _, err) = decode(&a.body);
        assert_eq!(err, None);
        let mut wanted = want.iter().filter(|(e, _, _)| e == entry);
        for (h, data) in &out {
            assert_eq!(data, &payload, "record {}", h.ts);
            if (5000..5300).contains(&h.ts) {
                let v = &values[(h.ts - 5000) as usize];
                assert_eq!(h.labels.get("k"), Some(v), "record {}", h.ts);
                assert_eq!(h.labels.len(), 1, "record {}", h.ts);
                continue;
            }
            let (_, ts, set) = wanted.next().unwrap();
            assert_eq!(h.ts, *ts);
            let (ct, labels) = SETS[*set];
            let labels: Labels = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(h.labels, labels, "record {}", h.ts);
            let ct = if ct.is_empty() {
                DEFAULT_CONTENT_TYPE
            } else {
                ct
            };
            assert_eq!(h.content_type, ct, "record {}", h.ts);
        }
        assert!(wanted.next().is_none(), "entry {entry}: records missing");
    }
}

#[tokio::test]
async fn batch_label_memo_zero_keeps_nothing() {
    let f = fixture_with(
        None,
        Limits {
            batch_label_memo: 0,
            ..Limits::default()
        },
    );
    f.bucket("b").await;
    let memo = LabelMemo::default();
    let recs: Vec<Rec<'_>> = (0..10u64)
        .map(|i| (i + 1, SETS[0].0, SETS[0].1, b"x".as_slice()))
        .collect();
    batch(&f, &memo, "m", &recs).await;
    assert_eq!(memo.kept_bytes(), 0);
}
