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

/// A kill -9 between `create_block`'s creation of a file and its header write left a file
/// with no header, which every open set aside as `<id>.corrupt` and kept for good, logged as
/// corruption (kill -9 probe, F4). A file that ends inside its header never held a record:
/// it is deleted. A file whose header is wrong is still set aside.
#[test]
fn a_block_cut_inside_its_header_was_kept_as_corrupt_for_good() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 50);
    let block = only_block(dir.path());
    let name = block.file_stem().unwrap().to_str().unwrap();
    let id = u64::from_str_radix(name, 16).unwrap();
    let edir = dir.path().join("b/e");
    let path = |id: u64| edir.join(format!("{id:016x}.blk"));
    let header = std::fs::read(&block).unwrap();
    std::fs::write(path(id + 1), b"").unwrap();
    std::fs::write(path(id + 2), &header[..12]).unwrap();
    std::fs::write(path(id + 3), b"not a block header at all").unwrap();
    let s = open(dir.path());
    let r = s.recovery_report();
    let cut = r
        .events
        .iter()
        .filter(|e| e.contains("ends inside its header"))
        .count();
    assert_eq!(cut, 2, "{r:?}");
    assert!(!path(id + 1).exists() && !path(id + 2).exists());
    assert!(!edir.join(format!("{:016x}.corrupt", id + 1)).exists());
    assert!(!edir.join(format!("{:016x}.corrupt", id + 2)).exists());
    assert!(
        edir.join(format!("{:016x}.corrupt", id + 3)).exists(),
        "{r:?}"
    );
    check_all(&s, 0..50);
    drop(s);
    let s = open(dir.path());
    assert!(
        s.recovery_report().events.is_empty(),
        "{:?}",
        s.recovery_report()
    );
    check_all(&s, 0..50);
}

/// Writes `n` one-byte records to `b/entry`, each with labels of its own: an index of some
/// MiB (12,000 make about 3 MiB).
fn big_index(s: &Store, entry: &str, n: u64) {
    for ts in 0..n {
        let m = WriteMeta {
            labels: labels(&[("k", &format!("{ts:0120}"))]),
            ..meta(ts)
        };
        s.write("b", entry, &m, b"x").unwrap();
    }
}

/// Fills the file system holding `dir` to its last byte (another program's file).
fn fill_disk(dir: &Path) {
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![7u8; 1 << 16];
    loop {
        if f.write_all(&chunk).is_err() {
            break;
        }
    }
    // The last partial chunk: byte by byte until the file system says no more.
    while f.write_all(&[7]).is_ok() {}
}

/// Bug (kill -9 probe, F1): an open whose repair needs an index commit failed on a disk
/// another program had filled ("the disk holding the data folder is full", or LMDB's
/// "Input/output error" for a short write), so the server did not start and its API could
/// not free space. The ballast kept in `index/` gives the repair room, once; an open with
/// room makes it again.
#[test]
fn a_repair_on_a_full_disk_kept_the_store_from_opening() {
    let Some(fs) = own_tmpfs(
        "recovery::a_repair_on_a_full_disk_kept_the_store_from_opening",
        "64m",
    ) else {
        return;
    };
    let data = fs.path().join("data");
    fill(&data, 3_000);
    let ballast = data.join("index/ballast");
    assert_eq!(std::fs::metadata(&ballast).unwrap().len(), 1 << 20);
    // The repair: an index to rebuild from the block files (as an unusable one would be).
    for f in ["data.mdb", "lock.mdb"] {
        std::fs::remove_file(data.join("index").join(f)).unwrap();
    }
    fill_disk(fs.path());
    assert!(fs.free() < 4096, "{} bytes free", fs.free());
    let s = Store::open(&data, opts()).unwrap_or_else(|e| panic!("open on a full disk: {e}"));
    let r = s.recovery_report();
    assert!(r.rebuilt.is_some(), "{r:?}");
    assert!(
        r.events.iter().any(|e| e.contains("deleted the ballast")),
        "{r:?}"
    );
    assert!(!ballast.exists(), "no room: not made again");
    check_all(&s, 0..3_000);
    // Space freed: the ballast is made again at the next open.
    drop(s);
    std::fs::remove_file(fs.path().join("filler")).unwrap();
    let s = open(&data);
    assert!(
        s.recovery_report().events.is_empty(),
        "{:?}",
        s.recovery_report()
    );
    assert_eq!(std::fs::metadata(&ballast).unwrap().len(), 1 << 20);
    check_all(&s, 0..3_000);
}

/// The same where the disk keeps a little room (more than the 1 MiB under which the ballast
/// goes before the open) but not what the repair needs: the repair's commit fails for want
/// of space (ENOSPC, or LMDB's EIO for a short write), the ballast goes, the open is tried
/// once more and succeeds.
#[test]
fn a_repair_that_needs_more_than_the_free_space_gets_the_ballast() {
    let Some(fs) = own_tmpfs(
        "recovery::a_repair_that_needs_more_than_the_free_space_gets_the_ballast",
        "256m",
    ) else {
        return;
    };
    let data = fs.path().join("data");
    let n = 12_000u64;
    let s = open(&data);
    s.create_bucket("b", BucketSettings::default()).unwrap();
    big_index(&s, "e", n);
    drop(s);
    let index_len = std::fs::metadata(data.join("index/data.mdb"))
        .unwrap()
        .len();
    let ballast = data.join("index/ballast");
    assert_eq!(std::fs::metadata(&ballast).unwrap().len(), 4 << 20);
    std::fs::remove_file(data.join("index/data.mdb")).unwrap();
    // Leaves 1.25 MiB free: above the 1 MiB line, below what the rebuild writes.
    let leave = 5 << 18;
    assert!(index_len > leave + (1 << 20), "index of {index_len} bytes");
    let filler = fs.path().join("filler");
    let free = fs.free();
    let out = std::process::Command::new("fallocate")
        .args(["-l", &(free - leave).to_string()])
        .arg(&filler)
        .status()
        .unwrap();
    assert!(out.success());
    let s = Store::open(&data, opts()).unwrap_or_else(|e| {
        panic!(
            "open on a full disk: {e} (index was {index_len}, free {})",
            fs.free()
        )
    });
    let r = s.recovery_report();
    assert!(
        r.events
            .iter()
            .any(|e| e.contains("opening met a full disk")),
        "{r:?}"
    );
    assert_eq!(s.entry("b", "e").unwrap().record_count, n);
    assert_eq!(s.read("b", "e", Some(n - 1)).unwrap().data, b"x");
}

/// Bug (kill -9 probe of 2026-11-29, R2): on a disk another program filled while the store
/// ran, removing an entry of thousands of records failed with `DiskFull` ("free space or
/// remove data"): its index commit needs new pages before it frees old ones. A removal
/// gets the ballast's room; a write does not.
#[test]
fn removing_data_on_a_full_disk_was_refused_for_want_of_space() {
    let Some(fs) = own_tmpfs(
        "recovery::removing_data_on_a_full_disk_was_refused_for_want_of_space",
        "256m",
    ) else {
        return;
    };
    let data = fs.path().join("data");
    let s = open(&data);
    s.create_bucket("b", BucketSettings::default()).unwrap();
    big_index(&s, "e", 12_000);
    big_index(&s, "f", 12_000);
    assert!(data.join("index/ballast").exists());
    fill_disk(fs.path());
    let refused = s.write("b", "g", &meta(1), b"y").unwrap_err();
    assert!(
        matches!(refused, Error::Write(WriteError::DiskFull { .. })),
        "{refused}"
    );
    s.remove_entry("b", "e")
        .unwrap_or_else(|e| panic!("removing an entry on a full disk: {e}"));
    assert!(!data.join("index/ballast").exists());
    assert!(matches!(s.entry("b", "e"), Err(Error::NotFound(_))));
    assert_eq!(s.entry("b", "f").unwrap().record_count, 12_000);
    // Reopened: nothing to repair, the other entry whole.
    drop(s);
    let s = open(&data);
    assert_eq!(s.entry("b", "f").unwrap().record_count, 12_000);
    assert!(matches!(s.entry("b", "e"), Err(Error::NotFound(_))));
}

/// Bug: the ballast a removal on a full disk used came back only at the next start, so a
/// second full disk in the same run found no room for a removal (507 "remove data" again).
/// It is made again by the retention thread once the disk has room.
#[test]
fn the_ballast_a_removal_used_came_back_only_at_the_next_start() {
    let Some(fs) = own_tmpfs(
        "recovery::the_ballast_a_removal_used_came_back_only_at_the_next_start",
        "256m",
    ) else {
        return;
    };
    let data = fs.path().join("data");
    let ballast = data.join("index/ballast");
    let s = open(&data);
    s.create_bucket("b", BucketSettings::default()).unwrap();
    big_index(&s, "e", 12_000);
    big_index(&s, "f", 12_000);
    fill_disk(fs.path());
    s.remove_entry("b", "e")
        .unwrap_or_else(|e| panic!("the first removal on a full disk: {e}"));
    assert!(!ballast.exists());
    // The other program's file goes: the ballast is back within a few retention ticks.
    std::fs::remove_file(fs.path().join("filler")).unwrap();
    let t0 = std::time::Instant::now();
    while !ballast.exists() && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(ballast.exists(), "no ballast 10 s after the disk had room");
    // The pages the first removal freed are used again, and the disk fills a second time.
    big_index(&s, "g", 12_000);
    fill_disk(fs.path());
    s.remove_entry("b", "f")
        .unwrap_or_else(|e| panic!("the second removal on a full disk: {e}"));
    assert!(matches!(s.entry("b", "f"), Err(Error::NotFound(_))));
    assert_eq!(s.entry("b", "g").unwrap().record_count, 12_000);
}
