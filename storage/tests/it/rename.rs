//! Renaming entries and buckets (issue 28): records keep their bytes and timestamps under
//! the new name, conflicts are typed errors, and a rename racing writers loses no record a
//! writer was told is stored. Crashes mid-rename: `crash_points.rs`.
#![allow(clippy::unwrap_used)]

use crate::common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tsblob_storage::*;

#[test]
fn renamed_entries_and_buckets_keep_their_records_and_conflicts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    s.create_bucket("taken", BucketSettings::default()).unwrap();
    for ts in 1..=20 {
        s.write("b", "cams/front", &meta(ts), &payload(ts, 50))
            .unwrap();
    }
    s.write("b", "imu", &meta(1), b"imu").unwrap();

    let info = s.rename_entry("b", "cams/front", "cams/left").unwrap();
    assert_eq!((info.name.as_str(), info.record_count), ("cams/left", 20));
    assert_eq!(
        s.read("b", "cams/left", Some(7)).unwrap().data,
        payload(7, 50)
    );
    assert!(matches!(
        s.read("b", "cams/front", Some(7)),
        Err(Error::NotFound(NotFound::Entry { .. }))
    ));
    // typed refusals, nothing changed by them
    assert!(matches!(
        s.rename_entry("b", "cams/left", "imu"),
        Err(Error::Rename(RenameError::EntryExists { .. }))
    ));
    assert!(matches!(
        s.rename_entry("b", "cams/left", "x/query"),
        Err(Error::Name(_))
    ));
    assert!(matches!(
        s.rename_entry("b", "nope", "x"),
        Err(Error::NotFound(NotFound::Entry { .. }))
    ));
    assert!(matches!(
        s.rename_bucket("b", "taken"),
        Err(Error::Bucket(BucketError::Exists(_)))
    ));
    assert!(matches!(s.rename_bucket("b", "index"), Err(Error::Name(_))));
    assert!(matches!(
        s.rename_bucket("nope", "x"),
        Err(Error::NotFound(NotFound::Bucket(_)))
    ));
    // the same name: nothing to do
    assert_eq!(s.rename_entry("b", "imu", "imu").unwrap().record_count, 1);
    // a write to the old name makes a new entry
    s.write("b", "cams/front", &meta(100), b"new").unwrap();
    assert_eq!(s.entry("b", "cams/front").unwrap().record_count, 1);

    let info = s.rename_bucket("b", "b2").unwrap();
    assert_eq!((info.name.as_str(), info.entry_count), ("b2", 3));
    assert!(matches!(s.bucket("b"), Err(Error::NotFound(_))));
    assert_eq!(s.read("b2", "imu", Some(1)).unwrap().data, b"imu");
    // renamed again, written to, reopened, rebuilt: the same
    s.rename_entry("b2", "cams/left", "left").unwrap();
    s.write("b2", "left", &meta(21), b"after").unwrap();
    drop(s);
    for rebuild in [false, true] {
        if rebuild {
            rebuild_index(dir.path(), &opts()).unwrap();
        }
        let s = open(dir.path());
        assert_eq!(
            all_ts(&s, "b2", "left", &Query::default()),
            (1..=21).collect::<Vec<_>>()
        );
        assert_eq!(s.read("b2", "left", Some(21)).unwrap().data, b"after");
        assert_eq!(s.read("b2", "cams/front", Some(100)).unwrap().data, b"new");
        let mut names: Vec<String> = s
            .list_entries("b2")
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        names.sort();
        assert_eq!(names, ["cams/front", "imu", "left"]);
        assert!(matches!(s.bucket("b"), Err(Error::NotFound(_))));
    }
}

/// Writers keep writing to an entry while it is renamed back and forth (and its bucket
/// once): every write a writer was told succeeded reads back from exactly one of the names.
#[test]
fn a_rename_racing_writers_loses_no_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket(
        "b",
        BucketSettings {
            max_block_records: 7,
            ..BucketSettings::default()
        },
    )
    .unwrap();
    s.write("b", "e", &meta(0), b"first").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let writers: Vec<_> = (0..3u64)
        .map(|w| {
            let (s, stop, acked) = (s.clone(), stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut ts = 1 + w;
                while !stop.load(Ordering::Relaxed) {
                    // The bucket may be gone (renamed): that write fails, unacknowledged.
                    if s.write("b", "e", &meta(ts), &payload(ts, 30)).is_ok() {
                        acked.lock().unwrap().push(ts);
                    }
                    ts += 3;
                }
            })
        })
        .collect();
    let mut names = vec!["e".to_string()];
    for i in 0..40 {
        std::thread::sleep(std::time::Duration::from_millis(2));
        let to = format!("e{i}");
        s.rename_entry("b", "e", &to).unwrap();
        names.push(to);
    }
    s.rename_bucket("b", "b2").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 40,
        "the writers barely wrote: {}",
        acked.len()
    );
    let check = |s: &Store| {
        let mut found = std::collections::HashMap::new();
        for bucket in ["b", "b2"] {
            for e in s.list_entries(bucket).unwrap_or_default() {
                for ts in all_ts(s, bucket, &e.name, &Query::default()) {
                    assert!(
                        found.insert(ts, format!("{bucket}/{}", e.name)).is_none(),
                        "record {ts} is under two names"
                    );
                }
            }
        }
        for ts in &acked {
            let at = found
                .get(ts)
                .unwrap_or_else(|| panic!("acknowledged record {ts} is lost"));
            let (b, e) = at.split_once('/').unwrap();
            assert_eq!(s.read(b, e, Some(*ts)).unwrap().data, payload(*ts, 30));
        }
        assert!(found.contains_key(&0));
    };
    check(&s);
    drop(s);
    let s = open(dir.path());
    check(&s);
}
