//! Damage a data folder on purpose and check that opening it repairs what it can and
//! never returns wrong bytes: torn tails, garbage, a deleted or corrupted index, a block
//! truncated mid-record, a flipped payload byte.
#![allow(clippy::unwrap_used)]

use crate::common;
use common::*;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use tsblob_storage::*;

fn fill(dir: &Path, n: u64) {
    let s = open(dir);
    s.create_bucket("b", BucketSettings::default()).unwrap();
    for ts in 0..n {
        let m = WriteMeta {
            labels: labels(&[("k", &format!("{}", ts % 3))]),
            ..meta(ts)
        };
        s.write("b", "e", &m, &payload(ts, 300 + ts as usize))
            .unwrap();
    }
}

fn only_block(dir: &Path) -> PathBuf {
    let mut blocks: Vec<PathBuf> = std::fs::read_dir(dir.join("b/e"))
        .unwrap()
        .map(|d| d.unwrap().path())
        .collect();
    blocks.sort();
    blocks.pop().unwrap()
}

fn check_all(s: &Store, expect: impl Iterator<Item = u64>) {
    let want: Vec<u64> = expect.collect();
    assert_eq!(all_ts(s, "b", "e", &Query::default()), want);
    for ts in want {
        assert_eq!(
            s.read("b", "e", Some(ts)).unwrap().data,
            payload(ts, 300 + ts as usize)
        );
    }
}

#[test]
fn garbage_appended_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 50);
    let block = only_block(dir.path());
    let before = std::fs::metadata(&block).unwrap().len();
    OpenOptions::new()
        .append(true)
        .open(&block)
        .unwrap()
        .write_all(&[0xA5, 0x00, 1, 2, 3, 0xff, 0xff, 9, 9, 9, 9])
        .unwrap();
    let s = open(dir.path());
    let r = s.recovery_report();
    assert_eq!(r.truncated_bytes, 11, "{r:?}");
    assert!(r.events.iter().any(|e| e.contains("cut 11 bytes")), "{r:?}");
    assert_eq!(std::fs::metadata(&block).unwrap().len(), before);
    check_all(&s, 0..50);
}

#[test]
fn unindexed_tail_records_are_reindexed_and_a_torn_one_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 20);
    // Write 5 more records into a copy of the data folder state, then restore the old
    // index: the block has frames the index never saw, like a crash between the block
    // write and the index commit.
    let saved = dir.path().join("saved-index");
    copy_dir(&dir.path().join("index"), &saved);
    {
        let s = open(dir.path());
        for ts in 20..25 {
            s.write("b", "e", &meta(ts), &payload(ts, 300 + ts as usize))
                .unwrap();
        }
    }
    // After a reopen the writes went to a new block, which the old index has never seen.
    let block = only_block(dir.path());
    let full_len = std::fs::metadata(&block).unwrap().len();
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    copy_dir(&saved, &dir.path().join("index"));
    std::fs::remove_dir_all(&saved).unwrap();
    // Tear the last record in half.
    OpenOptions::new()
        .write(true)
        .open(&block)
        .unwrap()
        .set_len(full_len - 100)
        .unwrap();
    let s = open(dir.path());
    let r = s.recovery_report();
    assert_eq!(r.reindexed, 4, "{r:?}");
    assert!(r.truncated_bytes > 0, "{r:?}");
    let want: Vec<u64> = (0..24).collect();
    assert_eq!(all_ts(&s, "b", "e", &Query::default()), want);
    for ts in 20..24u64 {
        assert_eq!(s.read("b", "e", Some(ts)).unwrap().meta.size, 300 + ts);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for d in std::fs::read_dir(from).unwrap() {
        let d = d.unwrap();
        std::fs::copy(d.path(), to.join(d.file_name())).unwrap();
    }
}

#[test]
fn deleted_index_is_rebuilt_and_answers_the_same() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 300);
    let q = Query {
        start: Some(10),
        stop: Some(200),
        filters: vec![LabelFilter::Eq("k".into(), "1".into())],
        ..Query::default()
    };
    let before = {
        let s = open(dir.path());
        s.remove_record("b", "e", 13).unwrap();
        all_ts(&s, "b", "e", &q)
    };
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let s = open(dir.path());
    assert_eq!(
        s.recovery_report().rebuilt.as_deref(),
        Some("index missing")
    );
    assert_eq!(all_ts(&s, "b", "e", &q), before);
    assert!(
        s.read("b", "e", Some(13)).is_err(),
        "a removed record came back"
    );
    assert_eq!(s.entry("b", "e").unwrap().record_count, 299);
}

#[test]
fn corrupted_index_is_detected_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 100);
    let mdb = dir.path().join("index/data.mdb");
    let len = std::fs::metadata(&mdb).unwrap().len();
    // Clobber the two meta pages: LMDB refuses the file.
    let mut f = OpenOptions::new().write(true).open(&mdb).unwrap();
    f.write_all(&vec![0x5a; 8192.min(len as usize)]).unwrap();
    drop(f);
    let s = open(dir.path());
    let r = s.recovery_report();
    assert!(r.rebuilt.is_some(), "{r:?}");
    check_all(&s, 0..100);
}

#[test]
fn block_truncated_mid_record_loses_only_the_cut_records() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 50);
    let block = only_block(dir.path());
    let len = std::fs::metadata(&block).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&block)
        .unwrap()
        .set_len(len - 1000)
        .unwrap();
    let s = open(dir.path());
    let r = s.recovery_report();
    assert!(
        r.events.iter().any(|e| e.contains("re-indexing it whole")),
        "{r:?}"
    );
    let got = all_ts(&s, "b", "e", &Query::default());
    assert!(
        got.len() >= 46 && got.len() < 50,
        "{} records left",
        got.len()
    );
    check_all(&s, 0..got.len() as u64);
}

#[test]
fn flipped_payload_byte_is_an_error_not_wrong_bytes() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 5);
    let block = only_block(dir.path());
    let bytes = std::fs::read(&block).unwrap();
    let mut damaged = bytes.clone();
    let at = bytes.len() - 10;
    damaged[at] ^= 0xff;
    std::fs::write(&block, &damaged).unwrap();
    let s = open(dir.path());
    let err = s.read("b", "e", Some(4)).unwrap_err();
    assert!(
        matches!(err, Error::Corrupt(CorruptionError::Record { .. })),
        "{err}"
    );
    let mut r = s.open_record("b", "e", Some(4)).unwrap();
    let mut out = Vec::new();
    let e = std::io::Read::read_to_end(&mut r, &mut out).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert_eq!(s.read("b", "e", Some(3)).unwrap().data, payload(3, 303));
}
