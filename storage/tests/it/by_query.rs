//! Label updates and removals of many records at once (issue 28): by a query (range, label
//! filters, condition) and by a list of timestamps, each record's result its own.
#![allow(clippy::unwrap_used)]

use crate::common;
use common::*;
use tsblob_storage::*;

fn store(dir: &std::path::Path) -> Store {
    let s = open(dir);
    s.create_bucket(
        "b",
        BucketSettings {
            max_block_records: 16,
            ..BucketSettings::default()
        },
    )
    .unwrap();
    for ts in 0..100u64 {
        let cam = if ts % 2 == 0 { "front" } else { "rear" };
        let meta = WriteMeta {
            labels: labels(&[("cam", cam), ("n", &ts.to_string())]),
            ..meta(ts)
        };
        s.write("b", "e", &meta, &payload(ts, 40)).unwrap();
    }
    s
}

fn cond(text: &str) -> Condition {
    // {"&cam": {"$eq": <text>}}
    Condition::Compare(
        CmpOp::Eq,
        Operand::Label("cam".into()),
        Operand::Const(Value::Str(text.into())),
    )
}

#[test]
fn labels_of_the_records_a_query_selects_are_updated_and_only_those() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let q = Query {
        start: Some(10),
        stop: Some(60),
        when: Some(Condition::And(vec![cond("front"), Condition::Limit(20)])),
        ..Query::default()
    };
    let set = labels(&[("reviewed", "yes")]);
    let n = s
        .update_labels_where("b", "e", &q, &set, &["n".to_string()])
        .unwrap();
    assert_eq!(n, 20);
    let reviewed = Query {
        filters: vec![LabelFilter::Eq("reviewed".into(), "yes".into())],
        ..Query::default()
    };
    let got = all_ts(&s, "b", "e", &reviewed);
    assert_eq!(got, (10..50).step_by(2).collect::<Vec<_>>());
    for ts in [10u64, 11, 48, 50] {
        let r = s.read("b", "e", Some(ts)).unwrap();
        assert_eq!(r.data, payload(ts, 40), "payload of {ts} unchanged");
        let updated = got.contains(&ts);
        assert_eq!(r.meta.labels.contains_key("n"), !updated, "{ts}");
        assert_eq!(r.meta.labels.contains_key("reviewed"), updated, "{ts}");
    }
    // a strict condition meeting a missing label: an error, nothing more updated
    let strict = Query {
        when: Some(Condition::Compare(
            CmpOp::Gt,
            Operand::Label("n".into()),
            Operand::Const(Value::Int(0)),
        )),
        strict: true,
        ..Query::default()
    };
    let err = s
        .update_labels_where("b", "e", &strict, &set, &[])
        .unwrap_err();
    assert!(
        matches!(err, Error::Query(QueryError::MissingLabel { .. })),
        "{err}"
    );
    // reopened (and rebuilt), the same
    drop(s);
    rebuild_index(dir.path(), &opts()).unwrap();
    let s = open(dir.path());
    assert_eq!(all_ts(&s, "b", "e", &reviewed), got);
}

#[test]
fn batches_by_timestamp_answer_per_record() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let updates = vec![
        (3u64, labels(&[("k", "v")]), vec![]),
        (1000, labels(&[("k", "v")]), vec![]),
        (4, Labels::new(), vec!["cam".to_string()]),
    ];
    let r = s.update_labels_batch("b", "e", &updates).unwrap();
    assert_eq!(r[0].as_ref().unwrap().labels["k"], "v");
    assert!(matches!(
        r[1],
        Err(Error::NotFound(NotFound::Record { ts: 1000, .. }))
    ));
    assert!(!r[2].as_ref().unwrap().labels.contains_key("cam"));
    let r = s.remove_records("b", "e", &[5, 6, 5, 2000]).unwrap();
    assert!(r[0].is_ok() && r[1].is_ok());
    assert!(matches!(r[2], Err(Error::NotFound(_))) && matches!(r[3], Err(Error::NotFound(_))));
    assert_eq!(s.entry("b", "e").unwrap().record_count, 98);
    assert!(matches!(
        s.remove_records("b", "nope", &[1]),
        Err(Error::NotFound(NotFound::Entry { .. }))
    ));
}
