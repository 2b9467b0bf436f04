//! Entry attachments (issue 28): small documents kept with an entry under a name, never
//! records; kept across renames, gone with their entry, bounded, serialized per entry.
//! Crashes mid-change: `crash_points.rs`; concurrency and kills at random: the model tester.
#![allow(clippy::unwrap_used)]

use crate::common;
use common::*;
use std::sync::Arc;
use tsblob_storage::*;

fn docs(pairs: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    pairs
        .iter()
        .map(|(n, d)| (n.to_string(), d.as_bytes().to_vec()))
        .collect()
}

fn names_and_data(s: &Store, b: &str, e: &str) -> Vec<(String, String)> {
    s.attachments(b, e)
        .unwrap()
        .into_iter()
        .map(|a| (a.name, String::from_utf8(a.data).unwrap()))
        .collect()
}

#[test]
fn attachments_are_kept_with_their_entry_and_are_never_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    // A write creates the entry; it holds no record.
    let stored = s
        .write_attachments(
            "b",
            "cam",
            docs(&[("schema", r#"{"v":1}"#), ("$plugin", "{}")]),
        )
        .unwrap();
    assert_eq!(stored.len(), 2);
    assert!(stored.iter().all(|a| a.ts > 0));
    assert_ne!(stored[0].ts, stored[1].ts);
    let info = s.entry("b", "cam").unwrap();
    assert_eq!((info.record_count, info.block_count), (0, 0));
    assert!(all_ts(&s, "b", "cam", &Query::default()).is_empty());
    // An upsert replaces by name, with a later timestamp.
    let before = s.attachment("b", "cam", "schema").unwrap();
    s.write_attachments("b", "cam", docs(&[("schema", r#"{"v":2}"#)]))
        .unwrap();
    let after = s.attachment("b", "cam", "schema").unwrap();
    assert_eq!(after.data, br#"{"v":2}"#);
    assert!(after.ts > before.ts);
    s.write("b", "cam", &meta(5), b"frame").unwrap();
    assert_eq!(s.entry("b", "cam").unwrap().record_count, 1);
    assert_eq!(
        names_and_data(&s, "b", "cam"),
        vec![
            ("$plugin".to_string(), "{}".to_string()),
            ("schema".to_string(), r#"{"v":2}"#.to_string())
        ]
    );
    // Kept across an entry rename, then a bucket rename, and a reopen with a rebuilt index.
    s.rename_entry("b", "cam", "cams/front").unwrap();
    s.rename_bucket("b", "b2").unwrap();
    assert_eq!(names_and_data(&s, "b2", "cams/front").len(), 2);
    assert!(matches!(
        s.attachments("b2", "cam"),
        Err(Error::NotFound(NotFound::Entry { .. }))
    ));
    drop(s);
    rebuild_index(dir.path(), &opts()).unwrap();
    let s = open(dir.path());
    assert_eq!(names_and_data(&s, "b2", "cams/front").len(), 2);
    // Removal by name (an unknown name skipped), then all.
    let gone = s
        .remove_attachments("b2", "cams/front", Some(&["schema".into(), "nope".into()]))
        .unwrap();
    assert_eq!(gone, vec!["schema".to_string()]);
    assert!(matches!(
        s.attachment("b2", "cams/front", "schema"),
        Err(Error::Attachment(AttachmentError::NotFound { .. }))
    ));
    s.write_attachments("b2", "cams/front", docs(&[("x", "1")]))
        .unwrap();
    // Gone with their entry: a new entry of the same name starts without any.
    s.remove_entry("b2", "cams/front").unwrap();
    s.write("b2", "cams/front", &meta(1), b"again").unwrap();
    assert!(s.attachments("b2", "cams/front").unwrap().is_empty());
    assert_eq!(
        s.remove_attachments("b2", "cams/front", None).unwrap(),
        Vec::<String>::new()
    );
}

#[test]
fn missing_buckets_and_entries_and_bad_names_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    assert!(matches!(
        s.write_attachments("nope", "e", docs(&[("a", "1")])),
        Err(Error::NotFound(NotFound::Bucket(_)))
    ));
    s.create_bucket("b", BucketSettings::default()).unwrap();
    assert!(matches!(
        s.attachments("b", "missing"),
        Err(Error::NotFound(NotFound::Entry { .. }))
    ));
    assert!(matches!(
        s.remove_attachments("b", "missing", None),
        Err(Error::NotFound(NotFound::Entry { .. }))
    ));
    for bad in ["", "..", "a/b", "a b"] {
        assert!(matches!(
            s.write_attachments("b", "e", docs(&[(bad, "1")])),
            Err(Error::Name(_))
        ));
    }
    // `attachments` is no entry name's segment: no record can take the route's place.
    for e in ["e/attachments", "attachments", "e/attachments/schema"] {
        assert!(matches!(
            s.write("b", e, &meta(1), b"x"),
            Err(Error::Name(NameError::Reserved { .. }))
        ));
    }
    assert!(matches!(s.entry("b", "e"), Err(Error::NotFound(_))));
}

#[test]
fn limits_refuse_the_whole_change_and_keep_what_was_there() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(
        dir.path(),
        StoreOptions {
            attachments: AttachmentLimits {
                max_size: 100,
                max_count: 3,
            },
            ..opts()
        },
    )
    .unwrap();
    s.create_bucket("b", BucketSettings::default()).unwrap();
    s.write_attachments("b", "e", docs(&[("a", "1"), ("b", "2")]))
        .unwrap();
    let big = "x".repeat(101);
    assert!(matches!(
        s.write_attachments("b", "e", docs(&[("c", "3"), ("d", &big)])),
        Err(Error::Attachment(AttachmentError::TooLarge {
            size: 101,
            max: 100,
            ..
        }))
    ));
    assert!(matches!(
        s.write_attachments("b", "e", docs(&[("c", "3"), ("d", "4")])),
        Err(Error::Attachment(AttachmentError::TooMany {
            count: 4,
            max: 3,
            ..
        }))
    ));
    assert_eq!(names_and_data(&s, "b", "e").len(), 2);
    // Replacing an existing name does not count twice; exactly the limit is fine.
    s.write_attachments("b", "e", docs(&[("a", "9"), ("c", &"y".repeat(100))]))
        .unwrap();
    assert_eq!(names_and_data(&s, "b", "e").len(), 3);
}

/// A damaged attachments file is a typed error (never a panic, never wrong bytes), and
/// removing them all clears it.
#[test]
fn a_damaged_attachments_file_is_reported_and_can_be_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    s.write_attachments("b", "e", docs(&[("a", r#"{"k":1}"#)]))
        .unwrap();
    let file = dir.path().join("b/e/attachments");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 6;
    bytes[last] ^= 0x55;
    std::fs::write(&file, bytes).unwrap();
    assert!(matches!(
        s.attachments("b", "e"),
        Err(Error::Attachment(AttachmentError::Damaged { .. }))
    ));
    assert!(s.remove_attachments("b", "e", None).unwrap().is_empty());
    s.write_attachments("b", "e", docs(&[("a", "2")])).unwrap();
    assert_eq!(names_and_data(&s, "b", "e"), vec![("a".into(), "2".into())]);
}

/// Threads writing one name and names of their own into one entry at once: every own name
/// survives (no lost update), the shared one holds one writer's last value.
#[test]
fn concurrent_writes_of_one_name_lose_no_other_name() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(open(dir.path()));
    s.create_bucket("b", BucketSettings::default()).unwrap();
    let watch = DeadlockWatch::start();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    let shared = format!(r#"{{"t":{t},"i":{i}}}"#);
                    s.write_attachments(
                        "b",
                        "e",
                        vec![
                            ("shared".into(), shared.into_bytes()),
                            (format!("t{t}-{}", i % 5), vec![b'1'; 10]),
                        ],
                    )
                    .unwrap();
                    if i % 7 == 0 {
                        s.write("b", "e", &meta(t * 100 + i + 1), b"r").unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    watch.finish();
    let all = names_and_data(&s, "b", "e");
    assert_eq!(all.len(), 1 + 4 * 5, "{all:?}");
    let shared = &all.iter().find(|(n, _)| n == "shared").unwrap().1;
    assert!(
        shared.ends_with(r#""i":24}"#),
        "the last write of some thread: {shared}"
    );
}

/// The attachment listener (replication's syncers) hears every saved change, with its
/// bucket and entry, and nothing for a refused write or a removal that removed nothing;
/// a second listener is refused.
#[test]
fn the_attachment_listener_hears_each_saved_change_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    let heard = Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
    let h = heard.clone();
    assert!(s.on_attachments(Box::new(move |b, e| {
        h.lock().unwrap().push((b.to_string(), e.to_string()))
    })));
    assert!(!s.on_attachments(Box::new(|_, _| {})));
    s.write_attachments("b", "cam/front", docs(&[("schema", "{}")]))
        .unwrap();
    assert!(s
        .write_attachments("b", "cam/front", docs(&[("bad name/", "{}")]))
        .is_err());
    assert!(s
        .remove_attachments("b", "cam/front", Some(&["nope".to_string()]))
        .unwrap()
        .is_empty());
    s.remove_attachments("b", "cam/front", None).unwrap();
    let want = vec![
        ("b".to_string(), "cam/front".to_string()),
        ("b".to_string(), "cam/front".to_string()),
    ];
    assert_eq!(*heard.lock().unwrap(), want);
}
