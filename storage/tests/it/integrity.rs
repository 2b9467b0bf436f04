//! Regression tests for the integrity issue: each names the bug it pins. Concurrency,
//! receipt before reservation, durable removal, failed commits, local damage, bounds.
#![allow(clippy::unwrap_used)]

use crate::common;
use common::*;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use tsblob_storage::*;

fn small_blocks(records: u64) -> BucketSettings {
    BucketSettings {
        max_block_records: records,
        ..BucketSettings::default()
    }
}

/// Runs `f` on a thread and fails if it does not finish in `secs` (a hang is a failure).
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what} did not finish within {secs} s: a hang"))
}

/// Bug: two concurrent PATCHes of one record each decremented its block's live count; at
/// zero the block was deleted with its untouched neighbour (9 of 60 tries over HTTP).
#[test]
fn concurrent_patches_of_one_record_keep_its_neighbours() {
    for round in 0..60 {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        s.create_bucket("b", small_blocks(2)).unwrap();
        for ts in 1..=3 {
            s.write("b", "e", &meta(ts), &payload(ts, 100)).unwrap();
        }
        let go = Arc::new(Barrier::new(2));
        let hs: Vec<_> = (0..2)
            .map(|i| {
                let (s, go) = (s.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    s.update_labels("b", "e", 2, &labels(&[("k", &format!("{i}"))]), &[])
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap().unwrap();
        }
        for ts in 1..=3 {
            let r = s.read("b", "e", Some(ts)).unwrap_or_else(|e| {
                panic!("round {round}: record {ts} lost after two PATCHes of ts 2: {e}")
            });
            assert_eq!(r.data, payload(ts, 100));
        }
        assert_eq!(s.entry("b", "e").unwrap().record_count, 3, "round {round}");
        drop(s);
        let s = open(dir.path());
        assert_eq!(
            s.entry("b", "e").unwrap().record_count,
            3,
            "round {round} reopened"
        );
    }
}

/// Bug: a PATCH racing a DELETE of the same record brought the deleted record back.
#[test]
fn patch_racing_delete_never_resurrects() {
    for round in 0..60 {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        s.create_bucket("b", small_blocks(2)).unwrap();
        for ts in 1..=3 {
            s.write("b", "e", &meta(ts), &payload(ts, 100)).unwrap();
        }
        let go = Arc::new(Barrier::new(2));
        let (s1, g1) = (s.clone(), go.clone());
        let patch = std::thread::spawn(move || {
            g1.wait();
            s1.update_labels("b", "e", 2, &labels(&[("k", "v")]), &[])
        });
        let (s2, g2) = (s.clone(), go.clone());
        let delete = std::thread::spawn(move || {
            g2.wait();
            s2.remove_record("b", "e", 2)
        });
        let _ = patch.join().unwrap();
        delete.join().unwrap().unwrap();
        let check = |s: &Store| {
            assert!(
                matches!(s.read("b", "e", Some(2)), Err(Error::NotFound(_))),
                "round {round}: the removed record came back"
            );
            for ts in [1, 3] {
                assert_eq!(s.read("b", "e", Some(ts)).unwrap().data, payload(ts, 100));
            }
        };
        check(&s);
        drop(s);
        check(&open(dir.path()));
    }
}

/// A reader that yields a little, then stalls until released.
struct SlowReader {
    sent: usize,
    release: Arc<std::sync::atomic::AtomicBool>,
}

impl std::io::Read for SlowReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.sent < 300_000 {
            let n = buf.len().min(300_000 - self.sent);
            buf[..n].fill(7);
            self.sent += n;
            return Ok(n);
        }
        while !self.release.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(0)
    }
}

/// Bug: a slow streamed upload held its entry's mutex while reading; `stats` (entries map
/// lock, then each entry mutex) and `remove_entry` (entry mutex, then the map) deadlocked,
/// and every later write to the bucket hung.
#[test]
fn slow_upload_stats_and_entry_removal_do_not_hang() {
    let watch = DeadlockWatch::start();
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    s.write("b", "zzz", &meta(1), b"x").unwrap();
    s.write("b", "slow", &meta(1), b"x").unwrap();
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s1, r1) = (s.clone(), release.clone());
    let upload = std::thread::spawn(move || {
        let mut r = SlowReader {
            sent: 0,
            release: r1,
        };
        s1.write_stream("b", "slow", &meta(2), &mut r, None)
    });
    std::thread::sleep(Duration::from_millis(100));
    for _ in 0..20 {
        let s2 = s.clone();
        within(10, "stats during a slow upload", move || s2.stats());
    }
    let s3 = s.clone();
    within(10, "remove_entry during a slow upload", move || {
        s3.remove_entry("b", "zzz")
    })
    .unwrap();
    let s4 = s.clone();
    within(10, "a write to the slow entry", move || {
        s4.write("b", "slow", &meta(3), b"y")
    })
    .unwrap();
    release.store(true, std::sync::atomic::Ordering::Release);
    assert_eq!(upload.join().unwrap().unwrap(), 2);
    assert_eq!(s.read("b", "slow", Some(2)).unwrap().data.len(), 300_000);
    watch.finish();
}

fn fifo_bucket(s: &Store, quota: u64) {
    s.create_bucket(
        "f",
        BucketSettings {
            quota_type: QuotaType::Fifo,
            quota_size: quota,
            max_block_size: 16 << 10,
            ..BucketSettings::default()
        },
    )
    .unwrap();
}

/// Bug: a streamed write reserved (and FIFO evicted for) its announced length before a
/// byte arrived: one `Content-Length: 1 GiB` that sent nothing emptied a full FIFO bucket.
#[test]
fn a_promised_length_that_never_arrives_evicts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    fifo_bucket(&s, 256 << 10);
    for ts in 1..=150 {
        s.write("f", "x", &meta(ts), &payload(ts, 1500)).unwrap();
    }
    let before = s.bucket("f").unwrap().record_count;
    assert!(before > 100, "{before}");
    let mut nothing: &[u8] = &[];
    let r = s.write_stream("f", "x", &meta(1000), &mut nothing, Some(1 << 30));
    assert!(
        matches!(r, Err(Error::Write(WriteError::LengthMismatch { .. }))),
        "{r:?}"
    );
    assert_eq!(s.bucket("f").unwrap().record_count, before);
    // A body cut short after some bytes: the same.
    let mut some = std::io::Read::take(std::io::repeat(1), 200_000);
    let r = s.write_stream("f", "x", &meta(1001), &mut some, Some(1 << 30));
    assert!(r.is_err());
    assert_eq!(s.bucket("f").unwrap().record_count, before);
    assert!(matches!(
        s.read("f", "x", Some(1001)),
        Err(Error::NotFound(_))
    ));
}

/// Bug: a stream of unknown length (chunked upload) was reserved as 0 bytes, so 50 MB went
/// into a bucket with a 1 MB HARD quota.
#[test]
fn hard_quota_counts_streams_of_unknown_length() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket(
        "h",
        BucketSettings {
            quota_type: QuotaType::Hard,
            quota_size: 1 << 20,
            ..BucketSettings::default()
        },
    )
    .unwrap();
    let mut big = std::io::Read::take(std::io::repeat(3), 50 << 20);
    let r = s.write_stream("h", "x", &meta(1), &mut big, None);
    // Refused once what arrived is larger than the whole quota (no removal could fit it).
    assert!(
        matches!(r, Err(Error::Write(WriteError::LargerThanQuota { .. }))),
        "{r:?}"
    );
    assert!(s.bucket("h").unwrap().size <= 1 << 20);
    // What fits is taken.
    let mut fits = std::io::Read::take(std::io::repeat(3), 500 << 10);
    s.write_stream("h", "x", &meta(2), &mut fits, None).unwrap();
    assert!(s.bucket("h").unwrap().size <= 1 << 20);
}

/// The spool API: bytes received in pieces, then one write; a dropped spool stores nothing.
#[test]
fn spooled_writes_store_what_was_received_and_dropped_spools_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    for compression in [Compression::None, Compression::Zstd { level: 1 }] {
        let name = format!("s{}", matches!(compression, Compression::None) as u8);
        s.create_bucket(
            &name,
            BucketSettings {
                compression,
                ..BucketSettings::default()
            },
        )
        .unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut spool = s.spool(&name).unwrap();
        // Half as single appends, half as gathered pieces (one pwritev), empty ones included.
        let (first, second) = data.split_at(1_500_000);
        for piece in first.chunks(65_537) {
            spool.append(piece).unwrap();
        }
        let mut pieces: Vec<&[u8]> = second.chunks(7_001).collect();
        pieces.insert(3, &[]);
        for group in pieces.chunks(100) {
            spool.append_pieces(group).unwrap();
        }
        assert_eq!(spool.len(), data.len() as u64);
        let ts = s
            .write_spooled(&name, "e", &WriteMeta::at(5), spool)
            .unwrap();
        assert_eq!(s.read(&name, "e", Some(ts)).unwrap().data, data);
        let mut dropped = s.spool(&name).unwrap();
        dropped.append(&data[..1000]).unwrap();
        drop(dropped);
        assert_eq!(s.entry(&name, "e").unwrap().record_count, 1);
    }
    // Nothing is left in the data folder by spools (they have no name).
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| ["index", "tsblob.lock", ".trash", "s0", "s1"].contains(&n.as_str())),
        "{names:?}"
    );
}

/// Bug: a bucket named `index` took writes that were 404 after a restart, and removing it
/// deleted the live index; `tokens` broke the server's token file.
#[test]
fn reserved_bucket_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    for name in [
        "index",
        "tokens",
        "tsblob.lock",
        "settings",
        ".trash",
        ".x",
        "index.old",
    ] {
        let r = s.create_bucket(name, BucketSettings::default());
        assert!(
            matches!(
                r,
                Err(Error::Name(
                    NameError::Reserved { .. } | NameError::ReservedPrefix { .. }
                ))
            ),
            "{name}: {r:?}"
        );
        assert!(r.unwrap_err().to_string().contains("reserved"));
    }
    s.create_bucket("b", BucketSettings::default()).unwrap();
    for name in ["settings", "settings.tmp"] {
        assert!(s.write("b", name, &meta(1), b"x").is_err(), "{name}");
    }
}

/// Bug: labels were unbounded through PATCH (past 65,535 the query framing broke, past
/// 64 MiB recovery cut the block at that frame). The same bounds hold on every path.
#[test]
fn labels_are_bounded_on_write_batch_and_patch() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    let many: Labels = (0..=MAX_LABELS)
        .map(|i| (format!("k{i}"), "v".into()))
        .collect();
    let fat: Labels = (0..40)
        .map(|i| (format!("k{i}"), "v".repeat(MAX_LABEL_VALUE)))
        .collect();
    for bad in [&many, &fat] {
        let m = WriteMeta {
            ts: Some(1),
            content_type: None,
            labels: bad.clone(),
        };
        assert!(matches!(
            s.write("b", "e", &m, b"x"),
            Err(Error::Write(WriteError::InvalidLabel(_)))
        ));
        let r = s
            .write_batch(
                "b",
                "e",
                vec![BatchRecord {
                    meta: m.clone(),
                    data: b"x".to_vec(),
                }],
            )
            .unwrap();
        assert!(matches!(
            r[0],
            Err(Error::Write(WriteError::InvalidLabel(_)))
        ));
    }
    s.write("b", "e", &meta(2), b"x").unwrap();
    for bad in [&many, &fat] {
        assert!(matches!(
            s.update_labels("b", "e", 2, bad, &[]),
            Err(Error::Write(WriteError::InvalidLabel(_)))
        ));
    }
    assert!(s.head("b", "e", Some(2)).unwrap().labels.is_empty());
    assert!(matches!(s.read("b", "e", Some(1)), Err(Error::NotFound(_))));
}

/// Bug: a failed index commit (LMDB map full) left its frames in the block, and a restart
/// re-indexed them: a write that answered an error came back.
#[test]
fn a_failed_commit_does_not_come_back_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let small = StoreOptions {
        map_size: 256 << 10,
        ..opts()
    };
    let mut failed = Vec::new();
    let mut ok = Vec::new();
    {
        let s = Store::open(dir.path(), small.clone()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let many: Labels = (0..200)
            .map(|i| (format!("k{i}"), format!("{i}")))
            .collect();
        for ts in 1..5000u64 {
            // Distinct label sets grow the index fast.
            let mut l = many.clone();
            l.insert("ts".into(), ts.to_string());
            let m = WriteMeta {
                ts: Some(ts),
                content_type: None,
                labels: l,
            };
            match s.write("b", &format!("e{}", ts % 7), &m, &payload(ts, 64)) {
                Ok(_) => ok.push(ts),
                Err(_) => {
                    failed.push(ts);
                    if failed.len() > 20 {
                        break;
                    }
                }
            }
        }
        assert!(!failed.is_empty(), "the map never filled");
    }
    let s = Store::open(
        dir.path(),
        StoreOptions {
            map_size: 1 << 30,
            ..opts()
        },
    )
    .unwrap();
    for ts in &failed {
        assert!(
            matches!(
                s.read("b", &format!("e{}", ts % 7), Some(*ts)),
                Err(Error::NotFound(_))
            ),
            "record {ts}, whose write failed, came back"
        );
    }
    for ts in &ok {
        assert_eq!(
            s.read("b", &format!("e{}", ts % 7), Some(*ts))
                .unwrap()
                .data,
            payload(*ts, 64)
        );
    }
}

/// Bug: a kill -9 between an eviction's (or removal's) index commit and its unlink brought
/// the data back. The two states a crash can leave are made here by hand: a block renamed
/// into the trash with the index still knowing it, and a trashed block the index forgot.
#[test]
fn trashed_blocks_never_come_back() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.create_bucket("b", small_blocks(10)).unwrap();
        for ts in 1..=30 {
            s.write("b", "e", &meta(ts), &payload(ts, 100)).unwrap();
        }
    }
    let edir = dir.path().join("b").join("e");
    let mut blocks: Vec<_> = std::fs::read_dir(&edir)
        .unwrap()
        .map(|d| d.unwrap().path())
        .collect();
    blocks.sort();
    assert_eq!(blocks.len(), 3);
    // Crash after the rename, before the commit: the index still lists the block.
    std::fs::rename(&blocks[0], dir.path().join(".trash").join("1-0")).unwrap();
    let s = open(dir.path());
    for ts in 1..=10 {
        assert!(matches!(
            s.read("b", "e", Some(ts)),
            Err(Error::NotFound(_))
        ));
    }
    assert_eq!(s.entry("b", "e").unwrap().record_count, 20);
    assert_eq!(
        std::fs::read_dir(dir.path().join(".trash"))
            .unwrap()
            .count(),
        0
    );
    // Crash after the commit, before the unlink: an evicted block waits in the trash.
    s.update_bucket(
        "b",
        &BucketSettingsUpdate {
            quota_type: Some(QuotaType::Fifo),
            // Room for the record below and none of the blocks: every one is evicted. (A
            // quota smaller than the record refuses it and evicts nothing.)
            quota_size: Some(100),
            ..BucketSettingsUpdate::default()
        },
    )
    .unwrap();
    s.write("b", "e", &meta(100), b"z").unwrap();
    drop(s);
    let s = open(dir.path());
    for ts in 11..=30 {
        assert!(
            matches!(s.read("b", "e", Some(ts)), Err(Error::NotFound(_))),
            "evicted {ts} came back"
        );
    }
    assert_eq!(s.read("b", "e", Some(100)).unwrap().data, b"z");
}

/// Removed entries and buckets stay removed across a reopen, and their names can be used
/// again with nothing of the old data.
#[test]
fn removed_entries_and_buckets_stay_removed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        s.create_bucket("c", BucketSettings::default()).unwrap();
        for ts in 1..=5 {
            s.write("b", "e", &meta(ts), b"old").unwrap();
            s.write("c", "e", &meta(ts), b"old").unwrap();
        }
        s.remove_entry("b", "e").unwrap();
        s.remove_bucket("c").unwrap();
        s.write("b", "e", &meta(9), b"new").unwrap();
    }
    let s = open(dir.path());
    assert_eq!(s.entry("b", "e").unwrap().record_count, 1);
    assert!(matches!(s.bucket("c"), Err(Error::NotFound(_))));
    s.create_bucket("c", BucketSettings::default()).unwrap();
    assert!(s.list_entries("c").unwrap().is_empty());
}

/// Bug: a whole-block re-index stopped at the first bad frame and cut every record after
/// it. Damage now stays local: the bad frame is skipped, the rest re-indexed.
#[test]
fn reindex_skips_a_bad_frame_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        for ts in 1..=20 {
            s.write("b", "e", &meta(ts), &payload(ts, 1000)).unwrap();
        }
    }
    // Damage record 5's payload, and lose the index so every block is re-indexed whole.
    let edir = dir.path().join("b").join("e");
    let block = std::fs::read_dir(&edir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&block).unwrap();
    let needle = payload(5, 1000);
    let at = bytes.windows(64).position(|w| w == &needle[..64]).unwrap();
    bytes[at + 10] ^= 0xFF;
    std::fs::write(&block, &bytes).unwrap();
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let s = open(dir.path());
    let report = s.recovery_report().clone();
    assert!(report.skipped_bytes > 0, "{report:?}");
    assert!(
        report.events.iter().any(|e| e.contains("skipped")),
        "{report:?}"
    );
    for ts in 1..=20 {
        match s.read("b", "e", Some(ts)) {
            Ok(r) => assert_eq!(r.data, payload(ts, 1000)),
            Err(e) => assert_eq!(ts, 5, "record {ts} lost: {e}"),
        }
    }
    assert_eq!(s.entry("b", "e").unwrap().record_count, 19);
}

/// Bug: every entry kept its active block open plus up to 512 read handles: a few thousand
/// entries ran out of descriptors. A child process lowers its own `RLIMIT_NOFILE` to 1024
/// (as `ulimit -n 1024` would) and opens the store with the default budget; 10,000 entries
/// are written and read back.
#[test]
fn ten_thousand_entries_under_ulimit_1024() {
    if let Ok(dir) = std::env::var("TSBLOB_ULIMIT_CHILD_DIR") {
        let lim = libc::rlimit {
            rlim_cur: 1024,
            rlim_max: 1024,
        };
        // SAFETY: a valid rlimit for this process.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
        ten_thousand_entries(std::path::Path::new(&dir), None);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "integrity::ten_thousand_entries_under_ulimit_1024",
            "--exact",
            "--nocapture",
        ])
        .env("TSBLOB_ULIMIT_CHILD_DIR", dir.path())
        .status()
        .unwrap();
    assert!(status.success(), "the child under ulimit -n 1024 failed");
}

/// The same with an explicit budget of 64 handles, checked against /proc/self/fd. In a
/// process of its own: the descriptors of the tests running beside it in the one test binary
/// counted against the budget (CI: "11 -> 495 descriptors" while other modules ran).
#[test]
fn ten_thousand_entries_within_an_explicit_budget() {
    if !own_process("integrity::ten_thousand_entries_within_an_explicit_budget") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    ten_thousand_entries(dir.path(), Some(64));
}

fn ten_thousand_entries(dir: &std::path::Path, budget: Option<usize>) {
    let s = Store::open(
        dir,
        StoreOptions {
            max_open_files: budget,
            ..opts()
        },
    )
    .unwrap();
    s.create_bucket("b", BucketSettings::default()).unwrap();
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let start = fds();
    let slack = budget.unwrap_or(448) + 80;
    let t = Instant::now();
    for i in 0..10_000u64 {
        s.write("b", &format!("e{i}"), &meta(1), &i.to_le_bytes())
            .unwrap();
    }
    let peak = fds();
    assert!(peak < start + slack, "{start} -> {peak} descriptors");
    for i in (0..10_000u64).step_by(7) {
        assert_eq!(
            s.read("b", &format!("e{i}"), Some(1)).unwrap().data,
            i.to_le_bytes()
        );
    }
    assert!(fds() < start + slack);
    eprintln!("10,000 entries written and read in {:?}", t.elapsed());
}

/// Creation, removal and writes racing on one bucket name and one entry name: nothing
/// hangs, every answer is a result or a clean error, and the reopened store is consistent
/// (its index needs no rebuild, every record it lists reads back).
#[test]
fn same_name_races_of_buckets_entries_and_writes() {
    let watch = DeadlockWatch::start();
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", small_blocks(4)).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut hs = Vec::new();
    for t in 0..5u64 {
        let (s, stop) = (s.clone(), stop.clone());
        hs.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let _ = match t {
                    0 | 1 => s
                        .write("b", "e", &meta(t * 1_000_000 + i), &payload(i, 200))
                        .map(|_| ()),
                    2 => s.remove_entry("b", "e"),
                    3 => s
                        .remove_bucket("b")
                        .and_then(|_| s.create_bucket("b", small_blocks(4)).map(|_| ())),
                    _ => {
                        let _ = s.stats();
                        s.update_labels("b", "e", 1_000_001, &labels(&[("k", "v")]), &[])
                            .map(|_| ())
                    }
                };
            }
        }));
    }
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hs {
        within(20, "a racing thread", move || h.join().unwrap());
    }
    drop(s);
    let s = open(dir.path());
    assert!(
        s.recovery_report().rebuilt.is_none(),
        "{:?}",
        s.recovery_report()
    );
    if s.bucket("b").is_ok() {
        if let Ok(info) = s.entry("b", "e") {
            let mut n = 0;
            for item in s.query("b", "e", &Query::default()).unwrap() {
                let item = item.unwrap();
                let data = item.data().unwrap();
                assert_eq!(data, payload(item.meta.ts % 1_000_000, 200));
                n += 1;
            }
            assert_eq!(n, info.record_count);
        }
    }
    watch.finish();
}

/// Age-based retention: blocks whose newest record is older than `max_age` go (a pass of
/// its shorthand lifecycle rule, run here at once, the background runs it every second);
/// newer ones stay; the counts say so.
#[test]
fn retention_deletes_whole_blocks_older_than_max_age() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("r", small_blocks(10)).unwrap();
    let now = now_micros();
    let hour = 3_600_000_000u64;
    // 30 records two hours old (3 blocks), then 5 current ones.
    for i in 0..30 {
        s.write("r", "e", &meta(now - 2 * hour + i), b"old")
            .unwrap();
    }
    for i in 0..5 {
        s.write("r", "e", &meta(now + i), b"new").unwrap();
    }
    assert_eq!(s.entry("r", "e").unwrap().record_count, 35);
    let info = s
        .update_bucket(
            "r",
            &BucketSettingsUpdate {
                max_age: Some(Some(hour)),
                ..BucketSettingsUpdate::default()
            },
        )
        .unwrap();
    assert_eq!(info.settings.max_age, Some(hour));
    let pass = s
        .run_lifecycle("r", tsblob_storage::MAX_AGE_RULE, now_micros(), u64::MAX)
        .unwrap();
    assert_eq!((pass.blocks, pass.removed), (3, 30), "{pass:?}");
    s.write("r", "e", &meta(now + 100), b"newer").unwrap();
    let info = s.bucket("r").unwrap();
    assert_eq!(info.expired_blocks, 3, "{info:?}");
    assert_eq!(info.record_count, 6);
    assert!(matches!(
        s.read("r", "e", Some(now - 2 * hour)),
        Err(Error::NotFound(_))
    ));
    assert_eq!(s.read("r", "e", Some(now)).unwrap().data, b"new");
    assert_eq!(s.stats().expired_blocks, 3);
    // The setting survives a reopen.
    drop(s);
    let s = open(dir.path());
    assert_eq!(s.bucket("r").unwrap().settings.max_age, Some(hour));
    assert_eq!(s.bucket("r").unwrap().record_count, 6);
}

/// Retention runs in the background too: no write needed.
#[test]
fn retention_runs_without_writes() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("r", small_blocks(5)).unwrap();
    let now = now_micros();
    for i in 0..20 {
        s.write("r", "e", &meta(now - 10_000_000_000 + i), b"old")
            .unwrap();
    }
    s.update_bucket(
        "r",
        &BucketSettingsUpdate {
            max_age: Some(Some(1_000_000_000)),
            ..BucketSettingsUpdate::default()
        },
    )
    .unwrap();
    let t = Instant::now();
    while s.bucket("r").unwrap().record_count > 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "retention never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(s.bucket("r").unwrap().expired_blocks, 4);
    // max_age 0 is refused with a message; "off" is None.
    let r = s.update_bucket(
        "r",
        &BucketSettingsUpdate {
            max_age: Some(Some(0)),
            ..BucketSettingsUpdate::default()
        },
    );
    assert!(matches!(
        r,
        Err(Error::Bucket(BucketError::InvalidSettings(_)))
    ));
}

/// The deadlock watch can fail: two threads deadlocked on purpose. The stuck threads stay
/// until their process exits, and parking_lot's detector is process-wide, so the deadlock is
/// made in a child process of this test binary: in the one test binary of the crate it would
/// otherwise be seen by every other test's watch.
#[test]
fn deadlock_watch_sees_a_real_cycle() {
    if std::env::var_os("TSBLOB_DEADLOCK_CHILD").is_some() {
        let watch = DeadlockWatch::start();
        let a = Arc::new(parking_lot::Mutex::new(()));
        let b = Arc::new(parking_lot::Mutex::new(()));
        let go = Arc::new(Barrier::new(2));
        for (x, y) in [(a.clone(), b.clone()), (b, a)] {
            let go = go.clone();
            std::thread::spawn(move || {
                let _x = x.lock();
                go.wait();
                let _y = y.lock();
            });
        }
        std::thread::sleep(Duration::from_millis(400));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| watch.finish()));
        assert!(r.is_err(), "the watch missed a deadlock");
        // The deadlocked threads would keep the process alive: exit with the verdict.
        std::process::exit(0);
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "integrity::deadlock_watch_sees_a_real_cycle",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TSBLOB_DEADLOCK_CHILD", "1")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "the child's deadlock watch missed the cycle"
    );
}
