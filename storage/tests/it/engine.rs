//! The engine's behaviour through its public API: buckets, writes, reads, queries,
//! removals, labels, compression, quotas and reopening.
#![allow(clippy::unwrap_used)]

use crate::common;
use common::*;
use std::io::Read;
use tsblob_storage::*;

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    (dir, s)
}

#[test]
fn bucket_lifecycle() {
    let (_d, s) = store();
    assert!(matches!(
        s.create_bucket("b", BucketSettings::default()),
        Err(Error::Bucket(BucketError::Exists(_)))
    ));
    assert!(matches!(
        s.bucket("nope"),
        Err(Error::NotFound(NotFound::Bucket(_)))
    ));
    assert!(matches!(
        s.create_bucket("../x", BucketSettings::default()),
        Err(Error::Name(_))
    ));
    // (A FIFO quota of 0 bytes was the invalid example here until ReductStore's meaning of
    // it, a zero-byte quota, was taken: issue 29.)
    let bad = BucketSettings {
        max_block_size: 100,
        ..BucketSettings::default()
    };
    assert!(matches!(
        s.create_bucket("c", bad),
        Err(Error::Bucket(BucketError::InvalidSettings(_)))
    ));
    let zero = BucketSettings {
        quota_type: QuotaType::Fifo,
        quota_size: 0,
        ..BucketSettings::default()
    };
    s.create_bucket("z", zero).unwrap();
    s.remove_bucket("z").unwrap();
    s.create_bucket("c", BucketSettings::default()).unwrap();
    let names: Vec<String> = s
        .list_buckets()
        .unwrap()
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert_eq!(names, ["b", "c"]);
    let upd = BucketSettingsUpdate {
        compression: Some(Compression::Zstd { level: 5 }),
        ..Default::default()
    };
    assert_eq!(
        s.update_bucket("c", &upd).unwrap().settings.compression,
        Compression::Zstd { level: 5 }
    );
    s.write("c", "e", &meta(1), b"x").unwrap();
    s.remove_bucket("c").unwrap();
    assert!(s.bucket("c").is_err());
    assert!(!s.path().join("c").exists());
}

#[test]
fn write_read_head_and_metadata() {
    let (_d, s) = store();
    let m = WriteMeta {
        ts: Some(1_000),
        content_type: Some("image/jpeg".into()),
        labels: labels(&[("cam", "front"), ("q", "90")]),
    };
    assert_eq!(s.write("b", "robot1/cam", &m, b"jpegbytes").unwrap(), 1_000);
    let r = s.read("b", "robot1/cam", Some(1_000)).unwrap();
    assert_eq!(r.data, b"jpegbytes");
    assert_eq!(r.meta.content_type, "image/jpeg");
    assert_eq!(r.meta.labels, m.labels);
    let h = s.head("b", "robot1/cam", None).unwrap();
    assert_eq!((h.ts, h.size), (1_000, 9));
    // default content type
    s.write("b", "robot1/cam", &meta(2_000), b"").unwrap();
    assert_eq!(
        s.read("b", "robot1/cam", None).unwrap().meta.content_type,
        DEFAULT_CONTENT_TYPE
    );
    assert!(matches!(
        s.read("b", "robot1/cam", Some(5)),
        Err(Error::NotFound(NotFound::Record { .. }))
    ));
    assert!(matches!(
        s.read("b", "nope", None),
        Err(Error::NotFound(NotFound::Entry { .. }))
    ));
    assert!(matches!(
        s.write("zz", "e", &meta(1), b""),
        Err(Error::NotFound(NotFound::Bucket(_)))
    ));
    let e = s.entry("b", "robot1/cam").unwrap();
    assert_eq!(
        (e.record_count, e.oldest, e.latest),
        (2, Some(1_000), Some(2_000))
    );
}

#[test]
fn duplicate_timestamp_is_a_conflict_and_late_writes_are_found() {
    let (_d, s) = store();
    s.write("b", "e", &meta(100), b"first").unwrap();
    let err = s.write("b", "e", &meta(100), b"second").unwrap_err();
    assert!(
        matches!(err, Error::Write(WriteError::Conflict { ts: 100, .. })),
        "{err}"
    );
    assert_eq!(s.read("b", "e", Some(100)).unwrap().data, b"first");
    s.write("b", "e", &meta(300), b"c").unwrap();
    s.write("b", "e", &meta(200), b"late").unwrap();
    assert_eq!(all_ts(&s, "b", "e", &Query::default()), [100, 200, 300]);
}

#[test]
fn automatic_timestamps_are_unique_and_monotonic() {
    let (_d, s) = store();
    let mut last = 0;
    for _ in 0..500 {
        let ts = s.write("b", "e", &WriteMeta::default(), b"x").unwrap();
        assert!(ts > last);
        last = ts;
    }
}

#[test]
fn invalid_input_is_refused_and_nothing_is_stored() {
    let (_d, s) = store();
    let bad_label = WriteMeta {
        labels: labels(&[("Bad Key", "v")]),
        ..meta(1)
    };
    assert!(matches!(
        s.write("b", "e", &bad_label, b"x"),
        Err(Error::Write(WriteError::InvalidLabel(_)))
    ));
    let bad_ct = WriteMeta {
        content_type: Some("a\nb".into()),
        ..meta(1)
    };
    assert!(matches!(
        s.write("b", "e", &bad_ct, b"x"),
        Err(Error::Write(WriteError::InvalidContentType(_)))
    ));
    assert!(matches!(
        s.write("b", "e", &meta(u64::MAX), b"x"),
        Err(Error::Write(WriteError::InvalidTimestamp { .. }))
    ));
    for bad in ["../etc", "a/../../b", "", "x\0y", "e/query"] {
        assert!(
            matches!(s.write("b", bad, &meta(1), b"x"), Err(Error::Name(_))),
            "{bad:?}"
        );
    }
    assert_eq!(s.bucket("b").unwrap().record_count, 0);
}

#[test]
fn query_filters_limits_and_direction() {
    let (_d, s) = store();
    for ts in 0..1000u64 {
        let m = WriteMeta {
            ts: Some(ts),
            content_type: None,
            labels: labels(&[("parity", if ts % 2 == 0 { "even" } else { "odd" })]),
        };
        s.write("b", "e", &m, &payload(ts, 10)).unwrap();
    }
    let q = |start, stop| Query {
        start,
        stop,
        ..Query::default()
    };
    assert_eq!(
        all_ts(&s, "b", "e", &q(Some(10), Some(15))),
        [10, 11, 12, 13, 14]
    );
    assert_eq!(all_ts(&s, "b", "e", &q(None, None)).len(), 1000);
    let desc = Query {
        start: Some(990),
        descending: true,
        limit: Some(3),
        ..Query::default()
    };
    assert_eq!(all_ts(&s, "b", "e", &desc), [999, 998, 997]);
    let odd = Query {
        stop: Some(10),
        filters: vec![LabelFilter::Eq("parity".into(), "odd".into())],
        ..Query::default()
    };
    assert_eq!(all_ts(&s, "b", "e", &odd), [1, 3, 5, 7, 9]);
    let ne = Query {
        stop: Some(6),
        filters: vec![
            LabelFilter::Ne("parity".into(), "odd".into()),
            LabelFilter::Has("parity".into()),
        ],
        ..Query::default()
    };
    assert_eq!(all_ts(&s, "b", "e", &ne), [0, 2, 4]);
    let none = Query {
        filters: vec![LabelFilter::Missing("parity".into())],
        ..Query::default()
    };
    assert!(all_ts(&s, "b", "e", &none).is_empty());
    for item in s.query("b", "e", &q(Some(500), Some(700))).unwrap() {
        let item = item.unwrap();
        assert_eq!(item.data().unwrap(), payload(item.meta.ts, 10));
    }
}

#[test]
fn batch_write_reports_each_record() {
    let (_d, s) = store();
    s.write("b", "e", &meta(5), b"exists").unwrap();
    let recs: Vec<BatchRecord> = (0..10u64)
        .map(|ts| BatchRecord {
            meta: meta(ts),
            data: payload(ts, 100),
        })
        .chain(std::iter::once(BatchRecord {
            meta: meta(3),
            data: vec![],
        }))
        .collect();
    let res = s.write_batch("b", "e", recs).unwrap();
    assert_eq!(res.len(), 11);
    for (i, r) in res.iter().enumerate() {
        match i {
            5 | 10 => assert!(
                matches!(r, Err(Error::Write(WriteError::Conflict { .. }))),
                "{i}: {r:?}"
            ),
            _ => assert_eq!(r.as_ref().unwrap(), &(i as u64)),
        }
    }
    assert_eq!(s.read("b", "e", Some(5)).unwrap().data, b"exists");
    assert_eq!(s.read("b", "e", Some(7)).unwrap().data, payload(7, 100));
    assert_eq!(s.entry("b", "e").unwrap().record_count, 10);
}

#[test]
fn blocks_roll_over_and_emptied_blocks_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let settings = BucketSettings {
        max_block_size: 4096,
        max_block_records: 10,
        ..BucketSettings::default()
    };
    s.create_bucket("b", settings).unwrap();
    for ts in 0..100u64 {
        s.write("b", "e", &meta(ts), &payload(ts, 100)).unwrap();
    }
    let info = s.entry("b", "e").unwrap();
    assert_eq!(info.block_count, 10);
    assert_eq!(s.remove_range("b", "e", 0, 30).unwrap(), 30);
    assert_eq!(s.entry("b", "e").unwrap().block_count, 7);
    s.remove_record("b", "e", 50).unwrap();
    assert!(matches!(
        s.remove_record("b", "e", 50),
        Err(Error::NotFound(_))
    ));
    assert_eq!(s.entry("b", "e").unwrap().record_count, 69);
    let files = std::fs::read_dir(dir.path().join("b/e")).unwrap().count();
    assert_eq!(files, 7);
    s.remove_entry("b", "e").unwrap();
    assert!(s.entry("b", "e").is_err());
    assert_eq!(s.bucket("b").unwrap().size, 0);
}

#[test]
fn label_updates_persist_and_survive_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let m = WriteMeta {
            labels: labels(&[("a", "1"), ("b", "2")]),
            ..meta(7)
        };
        s.write("b", "e", &m, b"payload").unwrap();
        let out = s
            .update_labels(
                "b",
                "e",
                7,
                &labels(&[("c", "3"), ("a", "9")]),
                &["b".into()],
            )
            .unwrap();
        assert_eq!(out.labels, labels(&[("a", "9"), ("c", "3")]));
        assert_eq!(s.entry("b", "e").unwrap().record_count, 1);
    }
    rebuild_index(dir.path(), &opts()).unwrap();
    let s = open(dir.path());
    let r = s.read("b", "e", Some(7)).unwrap();
    assert_eq!(r.meta.labels, labels(&[("a", "9"), ("c", "3")]));
    assert_eq!(r.data, b"payload");
    assert_eq!(s.entry("b", "e").unwrap().record_count, 1);
}

#[test]
fn zstd_round_trips_and_stores_incompressible_data_raw() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let z = BucketSettings {
        compression: Compression::Zstd { level: 3 },
        ..BucketSettings::default()
    };
    s.create_bucket("z", z).unwrap();
    let json: Vec<u8> = (0..2000)
        .map(|i| format!("{{\"level\":\"info\",\"seq\":{i},\"msg\":\"sensor ok\"}}\n"))
        .collect::<String>()
        .into_bytes();
    let random = payload(1, 100_000);
    s.write("z", "logs", &meta(1), &json).unwrap();
    s.write("z", "raw", &meta(1), &random).unwrap();
    assert_eq!(s.read("z", "logs", Some(1)).unwrap().data, json);
    assert_eq!(s.read("z", "raw", Some(1)).unwrap().data, random);
    let logs = s.entry("z", "logs").unwrap();
    assert!(
        logs.size < json.len() as u64 / 5,
        "compressed {} of {}",
        logs.size,
        json.len()
    );
    let raw = s.entry("z", "raw").unwrap();
    assert!(
        raw.size < random.len() as u64 + 200,
        "raw stored in {}",
        raw.size
    );
    // streamed write + streamed read of a compressible payload larger than the sample
    let big: Vec<u8> = json.iter().copied().cycle().take(3 << 20).collect();
    s.write_stream(
        "z",
        "logs",
        &meta(2),
        &mut big.as_slice(),
        Some(big.len() as u64),
    )
    .unwrap();
    let mut out = Vec::new();
    s.open_record("z", "logs", Some(2))
        .unwrap()
        .read_to_end(&mut out)
        .unwrap();
    assert_eq!(out, big);
}

#[test]
fn streamed_records_of_unknown_length_and_length_mismatch() {
    let (_d, s) = store();
    let data = payload(9, 5 << 20);
    let ts = s
        .write_stream("b", "e", &WriteMeta::default(), &mut data.as_slice(), None)
        .unwrap();
    let mut r = s.open_record("b", "e", Some(ts)).unwrap();
    assert_eq!(r.meta().size, data.len() as u64);
    let mut out = Vec::new();
    r.read_to_end(&mut out).unwrap();
    assert_eq!(out, data);
    let err = s
        .write_stream("b", "e", &meta(1), &mut data.as_slice(), Some(10 << 20))
        .unwrap_err();
    assert!(
        matches!(err, Error::Write(WriteError::LengthMismatch { .. })),
        "{err}"
    );
    assert!(s.read("b", "e", Some(1)).is_err());
    // the failed write left nothing behind: the next write and a reopen see a clean block
    s.write("b", "e", &meta(2), b"after").unwrap();
    assert_eq!(s.read("b", "e", Some(2)).unwrap().data, b"after");
}

#[test]
fn fifo_quota_evicts_oldest_blocks_and_never_fails() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let settings = BucketSettings {
        quota_type: QuotaType::Fifo,
        quota_size: 100_000,
        max_block_size: 10_000,
        ..BucketSettings::default()
    };
    s.create_bucket("f", settings).unwrap();
    for ts in 0..1000u64 {
        let entry = if ts % 2 == 0 { "a" } else { "b" };
        s.write("f", entry, &meta(ts), &payload(ts, 1000)).unwrap();
        let info = s.bucket("f").unwrap();
        assert!(
            info.size <= 100_000 + 10_000 + 1100,
            "size {} at {ts}",
            info.size
        );
    }
    let info = s.bucket("f").unwrap();
    assert!(info.evicted_blocks > 0);
    let a = all_ts(&s, "f", "a", &Query::default());
    assert!(
        a.first().copied().unwrap() > 500,
        "oldest survivor {:?}",
        a.first()
    );
    assert_eq!(*a.last().unwrap(), 998);
    for ts in a {
        assert_eq!(s.read("f", "a", Some(ts)).unwrap().data, payload(ts, 1000));
    }
}

#[test]
fn hard_quota_rejects_writes() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let settings = BucketSettings {
        quota_type: QuotaType::Hard,
        quota_size: 10_000,
        ..BucketSettings::default()
    };
    s.create_bucket("h", settings).unwrap();
    let mut ok = 0;
    let err = loop {
        match s.write("h", "e", &meta(ok), &payload(ok, 1000)) {
            Ok(_) => ok += 1,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, Error::Write(WriteError::QuotaExceeded { .. })),
        "{err}"
    );
    assert!((7..=10).contains(&ok), "{ok} writes fit");
    assert_eq!(s.entry("h", "e").unwrap().record_count, ok);
}

#[test]
fn free_space_guard_refuses_writes_and_reads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        s.write("b", "e", &meta(1), b"kept").unwrap();
    }
    let greedy = StoreOptions {
        free_space_reserve: u64::MAX / 2,
        ..opts()
    };
    let s = Store::open(dir.path(), greedy).unwrap();
    let err = s.write("b", "e", &meta(2), b"x").unwrap_err();
    assert!(
        matches!(err, Error::Write(WriteError::DiskFull { .. })),
        "{err}"
    );
    assert_eq!(s.read("b", "e", Some(1)).unwrap().data, b"kept");
}

/// Bug "a deleted lock file lets a second server in": with `tsblob.lock` removed under an
/// open store, a second open created a new one, locked it and opened the same folder.
#[test]
fn a_second_open_is_refused_even_after_the_lock_file_was_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    std::fs::remove_file(dir.path().join("tsblob.lock")).unwrap();
    assert!(matches!(
        Store::open(dir.path(), opts()),
        Err(Error::Open(OpenError::Locked(_)))
    ));
    drop(s);
    let s = open(dir.path());
    assert!(s.bucket("b").is_ok());
    assert!(dir.path().join("tsblob.lock").is_file());
}

/// Bug "a bucket without its settings file vanishes": its entries were dropped from the index
/// as removed, and a bucket created again under its name hid them until the next open.
#[test]
fn a_bucket_whose_settings_file_was_lost_is_kept_with_every_record() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        for ts in 0..50u64 {
            s.write("b", "e", &meta(ts), &payload(ts, 300)).unwrap();
        }
    }
    std::fs::remove_file(dir.path().join("b").join("settings")).unwrap();
    let s = open(dir.path());
    assert!(
        s.recovery_report()
            .events
            .iter()
            .any(|e| e.contains("bucket folder b holds entries but had no settings file")),
        "{:?}",
        s.recovery_report()
    );
    assert_eq!(all_ts(&s, "b", "e", &Query::default()).len(), 50);
    assert_eq!(s.read("b", "e", Some(7)).unwrap().data, payload(7, 300));
    // Creating it again is a conflict, not a second bucket over the same folder.
    assert!(s.create_bucket("b", BucketSettings::default()).is_err());
    drop(s);
    let s = open(dir.path());
    assert!(
        s.recovery_report().events.is_empty(),
        "{:?}",
        s.recovery_report()
    );
    assert_eq!(all_ts(&s, "b", "e", &Query::default()).len(), 50);
}

#[test]
fn data_persists_across_reopen_and_second_open_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        for ts in 0..100u64 {
            s.write("b", "e", &meta(ts), &payload(ts, 500)).unwrap();
        }
        assert!(matches!(
            Store::open(dir.path(), opts()),
            Err(Error::Open(OpenError::Locked(_)))
        ));
    }
    let s = open(dir.path());
    assert!(
        s.recovery_report().events.is_empty(),
        "{:?}",
        s.recovery_report()
    );
    assert_eq!(all_ts(&s, "b", "e", &Query::default()).len(), 100);
    s.write("b", "e", &meta(100), b"more").unwrap();
    assert_eq!(s.entry("b", "e").unwrap().record_count, 101);
}

/// A FIFO bucket that meets the free-space guard gives up its oldest blocks instead of
/// refusing the write (found by the reliability suite's disk-full test: the guard ran
/// before eviction, so a full disk stayed full).
#[test]
fn fifo_bucket_evicts_under_disk_pressure_and_others_are_refused() {
    // A process and a file system of its own (seen: `DiskFull` 28 KiB short once the
    // engine's tests shared one binary; the shared disk's free space moves with others).
    let Some(fs) = own_tmpfs(
        "engine::fifo_bucket_evicts_under_disk_pressure_and_others_are_refused",
        "32m",
    ) else {
        return;
    };
    let opts = StoreOptions {
        free_space_reserve: 4 << 20,
        map_size: 64 << 20,
        ..opts()
    };
    let s = Store::open(fs.path(), opts).unwrap();
    let small_blocks = BucketSettings {
        max_block_size: 1 << 20,
        ..BucketSettings::default()
    };
    s.create_bucket("plain", small_blocks.clone()).unwrap();
    s.create_bucket(
        "fifo",
        BucketSettings {
            quota_type: QuotaType::Fifo,
            quota_size: 1 << 40,
            ..small_blocks
        },
    )
    .unwrap();
    // The FIFO bucket writes 60 MB into a 32 MB file system and is never refused.
    let mut ts = 0;
    for _ in 0..600 {
        s.write("fifo", "e", &meta(ts), &payload(ts, 100_000))
            .unwrap();
        ts += 1;
    }
    let info = s.bucket("fifo").unwrap();
    assert!(info.evicted_blocks > 0);
    assert!(info.size < 32 << 20, "{}", info.size);
    assert_eq!(s.entry("fifo", "e").unwrap().latest, Some(ts - 1));
    let first = s.entry("fifo", "e").unwrap().oldest.unwrap();
    assert_eq!(
        s.read("fifo", "e", Some(first)).unwrap().data,
        payload(first, 100_000)
    );
    // A bucket without a quota is refused by the guard, and nothing of it is stored.
    let err = s
        .write("plain", "e", &meta(1), &payload(1, 8 << 20))
        .unwrap_err();
    assert!(
        matches!(err, Error::Write(WriteError::DiskFull { .. })),
        "{err}"
    );
    assert!(s.read("plain", "e", Some(1)).is_err());
}

/// Labelled records spread over many index chunks, some written late, with more distinct
/// label sets than the index interns per entry: filters, limits and both directions give
/// the same answers after a reopen and after a rebuild.
#[test]
fn label_filters_across_chunks_reopen_and_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let label_of = |ts: u64| {
        let mut l = labels(&[(
            "cam",
            if ts.is_multiple_of(3) {
                "front"
            } else {
                "back"
            },
        )]);
        if ts % 3 == 1 {
            // Unique: ~330 more sets, past the 256 the index interns per entry.
            l.insert("frame".into(), format!("f{ts}"));
        }
        l
    };
    let want = |q: &Query| -> Vec<u64> {
        let mut v: Vec<u64> = (0..1000u64)
            .filter(|ts| ts % 5 != 4) // removed below
            .filter(|ts| q.start.is_none_or(|s| *ts >= s) && q.stop.is_none_or(|s| *ts < s))
            .filter(|ts| q.filters.iter().all(|f| f.matches(&label_of(*ts))))
            .collect();
        if q.descending {
            v.reverse();
        }
        v.truncate(q.limit.map_or(usize::MAX, |l| l as usize));
        v
    };
    let queries = [
        Query::default(),
        Query {
            filters: vec![LabelFilter::Eq("cam".into(), "front".into())],
            ..Query::default()
        },
        Query {
            start: Some(130),
            stop: Some(870),
            filters: vec![LabelFilter::Has("frame".into())],
            descending: true,
            ..Query::default()
        },
        Query {
            start: Some(63),
            stop: Some(700),
            limit: Some(70),
            filters: vec![LabelFilter::Ne("cam".into(), "front".into())],
            descending: true,
            ..Query::default()
        },
        Query {
            start: Some(64),
            limit: Some(129),
            filters: vec![LabelFilter::Missing("frame".into())],
            ..Query::default()
        },
    ];
    let check = |s: &Store| {
        for q in &queries {
            assert_eq!(all_ts(s, "b", "e", q), want(q), "{q:?}");
        }
        for item in s.query("b", "e", &Query::default()).unwrap() {
            let item = item.unwrap();
            assert_eq!(item.meta.labels, label_of(item.meta.ts));
            assert_eq!(item.data().unwrap(), payload(item.meta.ts, 100));
        }
        assert_eq!(s.entry("b", "e").unwrap().record_count, 800);
    };
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        // Odd timestamps first in batches, then even ones one by one (late writes).
        for order in [1u64, 0] {
            let recs: Vec<BatchRecord> = (0..1000u64)
                .filter(|ts| ts % 2 == order)
                .map(|ts| BatchRecord {
                    meta: WriteMeta {
                        labels: label_of(ts),
                        ..meta(ts)
                    },
                    data: payload(ts, 100),
                })
                .collect();
            if order == 1 {
                for r in s.write_batch("b", "e", &recs).unwrap() {
                    r.unwrap();
                }
            } else {
                for r in &recs {
                    s.write("b", "e", &r.meta, &r.data).unwrap();
                }
            }
        }
        for ts in (4..1000).step_by(5) {
            s.remove_record("b", "e", ts).unwrap();
        }
        check(&s);
    }
    let s = open(dir.path());
    assert!(s.recovery_report().rebuilt.is_none());
    check(&s);
    drop(s);
    rebuild_index(dir.path(), &opts()).unwrap();
    check(&open(dir.path()));
}

/// An index of the previous format (one node per record) is rebuilt from the blocks.
#[test]
fn an_index_of_version_1_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        for ts in 0..100 {
            s.write("b", "e", &meta(ts), &payload(ts, 50)).unwrap();
        }
    }
    {
        // SAFETY: the store is closed; nothing else maps the file.
        let env = unsafe {
            heed::EnvOpenOptions::new()
                .max_dbs(8)
                .map_size(1 << 30)
                .open(dir.path().join("index"))
                .unwrap()
        };
        let mut w = env.write_txn().unwrap();
        let meta_db: heed::Database<heed::types::Bytes, heed::types::Bytes> =
            env.open_database(&w, Some("meta")).unwrap().unwrap();
        meta_db.put(&mut w, b"version", b"tsblob-index-1").unwrap();
        let old: heed::Database<heed::types::Bytes, heed::types::Bytes> =
            env.create_database(&mut w, Some("records")).unwrap();
        old.put(&mut w, b"old record key", b"old value").unwrap();
        w.commit().unwrap();
    }
    let s = open(dir.path());
    let why = s.recovery_report().rebuilt.clone().unwrap();
    assert!(why.contains("tsblob-index-1"), "{why}");
    assert_eq!(
        all_ts(&s, "b", "e", &Query::default()),
        (0..100).collect::<Vec<_>>()
    );
    assert_eq!(s.read("b", "e", Some(42)).unwrap().data, payload(42, 50));
}
