//! Many threads writing and reading the same entry and different ones at once.
#![allow(clippy::unwrap_used)]

use crate::common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tsblob_storage::*;

#[test]
fn writers_and_readers_on_shared_and_separate_entries() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket(
        "b",
        BucketSettings {
            max_block_size: 64 << 10,
            ..BucketSettings::default()
        },
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..6u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                // threads 0-2 share "shared", 3-5 have their own entry
                let entry = if t < 3 {
                    "shared".to_string()
                } else {
                    format!("own{t}")
                };
                for i in 0..400u64 {
                    let ts = i * 10 + t;
                    if i % 50 == 0 {
                        let recs: Vec<BatchRecord> = (0..10u64)
                            .map(|j| BatchRecord {
                                meta: meta(1_000_000 + t * 100_000 + i * 100 + j),
                                data: payload(j, 64),
                            })
                            .collect();
                        for r in s.write_batch("b", &entry, recs).unwrap() {
                            r.unwrap();
                        }
                    }
                    s.write(
                        "b",
                        &entry,
                        &meta(ts),
                        &payload(ts, 200 + (ts % 700) as usize),
                    )
                    .unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let s = s.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut seen = 0;
                while !stop.load(Ordering::Relaxed) {
                    let Ok(iter) = s.query(
                        "b",
                        "shared",
                        &Query {
                            stop: Some(1_000_000),
                            ..Query::default()
                        },
                    ) else {
                        continue;
                    };
                    for item in iter {
                        let item = item.unwrap();
                        let data = item.data().unwrap();
                        assert_eq!(
                            data,
                            payload(item.meta.ts, 200 + (item.meta.ts % 700) as usize)
                        );
                        seen += 1;
                    }
                }
                seen
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert_eq!(
        s.entry("b", "shared").unwrap().record_count,
        3 * 400 + 3 * 8 * 10
    );
    for t in 3..6 {
        assert_eq!(
            s.entry("b", &format!("own{t}")).unwrap().record_count,
            400 + 80
        );
    }
    let shared = all_ts(
        &s,
        "b",
        "shared",
        &Query {
            stop: Some(1_000_000),
            ..Query::default()
        },
    );
    assert_eq!(
        shared,
        (0..1200u64)
            .map(|i| (i / 3) * 10 + i % 3)
            .collect::<Vec<_>>()
    );
}

/// Risk "a query window past the committed length": a query maps a window of the block
/// its records are in while a writer keeps appending to that same block. The window spans
/// only frames the query listed from the index, so every record it hands out is whole and
/// its own bytes (CRC-checked), whatever the writer is doing at the end of the block.
#[test]
fn query_windows_racing_appends_to_their_block_read_whole_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    const SIZE: usize = 20 << 10;
    s.write("b", "e", &meta(0), &payload(0, SIZE)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut ts = 1;
            while !stop.load(Ordering::Relaxed) && ts < 3000 {
                s.write("b", "e", &meta(ts), &payload(ts, SIZE)).unwrap();
                ts += 1;
            }
            ts
        })
    };
    let mut queries = 0;
    let mut records = 0;
    while !writer.is_finished() || queries == 0 {
        let mut w = Windows::default();
        let mut last = None;
        for item in s.query("b", "e", &Query::default()).unwrap() {
            let item = item.unwrap();
            let p = item.payload_in(&mut w).unwrap().unwrap();
            assert!(
                p.as_ref() == payload(item.meta.ts, SIZE),
                "ts {} damaged",
                item.meta.ts
            );
            assert!(last.is_none_or(|l| l < item.meta.ts));
            last = Some(item.meta.ts);
            records += 1;
        }
        queries += 1;
        if queries >= 200 {
            stop.store(true, Ordering::Relaxed);
        }
    }
    let written = writer.join().unwrap();
    assert!(
        queries > 1 && records > written as usize,
        "{queries} queries, {records} records"
    );
}

/// Bug "settings of a removed bucket" (found by the HTTP hostile sweep): a settings update
/// racing the removal of its bucket wrote `settings.tmp` into a folder already moved to the
/// trash and failed with an I/O error (a 500) instead of `NotFound`; had the bucket been
/// created again meanwhile, the old bucket's settings would have been written over the new
/// bucket's file. An update is now serialized with removal and creation.
#[test]
fn settings_update_racing_bucket_removal_was_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) || rounds < 200 {
                let _ = s.create_bucket("b", BucketSettings::default());
                std::thread::sleep(std::time::Duration::from_micros(20));
                let _ = s.remove_bucket("b");
                rounds += 1;
            }
        })
    };
    let updaters: Vec<_> = (0..3u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut applied = 0u64;
                let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
                let mut i = 0u64;
                while std::time::Instant::now() < until {
                    i += 1;
                    let update = BucketSettingsUpdate {
                        max_block_records: Some(1000 + t * 10_000 + i),
                        ..BucketSettingsUpdate::default()
                    };
                    match s.update_bucket("b", &update) {
                        Ok(_) => applied += 1,
                        Err(Error::NotFound(NotFound::Bucket(_))) => {}
                        Err(e) => panic!("update {i} of thread {t}: {e}"),
                    }
                }
                applied
            })
        })
        .collect();
    let applied: u64 = updaters.into_iter().map(|u| u.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    assert!(applied > 0, "no update ever met the bucket");
    // The last bucket (if any) has the settings its file says, across a reopen.
    let before = s.bucket("b").ok().map(|b| b.settings.max_block_records);
    drop(s);
    let s = open(dir.path());
    let after = s.bucket("b").ok().map(|b| b.settings.max_block_records);
    assert_eq!(before, after);
}
