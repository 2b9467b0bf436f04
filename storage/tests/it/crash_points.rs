//! A crash between any two steps: a child process performs one operation with
//! `TSBLOB_CRASH_AT=<step>` set and dies there (abort, as a kill -9 leaves it: no flush, no
//! destructor); the parent reopens the store and checks what must hold. Steps: a block moved
//! to the trash, its removal committed, an entry or bucket folder trashed, frames appended
//! but not committed, a write committed but not acknowledged, a label copy committed
//! before the old frame is flagged.
#![allow(clippy::unwrap_used)]

use crate::common;
use common::*;
use std::process::Command;
use tsblob_storage::*;

const STEPS: [&str; 13] = [
    "records-removal-committed",
    "retention-trashed",
    "retention-committed",
    "lifecycle-records-committed",
    "label-copy-appended",
    "block-trashed",
    "block-removal-committed",
    "entry-trashed",
    "entry-removal-committed",
    "bucket-trashed",
    "frames-appended",
    "write-committed",
    "label-copy-committed",
];

fn settings() -> BucketSettings {
    BucketSettings {
        max_block_records: 10,
        ..BucketSettings::default()
    }
}

/// The operation that passes through `step`.
fn operate(s: &Store, step: &str) {
    match step {
        "block-trashed" | "block-removal-committed" => {
            s.update_bucket(
                "b",
                &BucketSettingsUpdate {
                    quota_type: Some(QuotaType::Fifo),
                    quota_size: Some(2_000),
                    ..BucketSettingsUpdate::default()
                },
            )
            .unwrap();
            s.write("b", "e", &meta(100), b"evicts").unwrap();
        }
        "retention-trashed" | "retention-committed" => {
            // Records 1..=30 are timestamps near the epoch: a day's max_age expires them all.
            s.update_bucket(
                "b",
                &BucketSettingsUpdate {
                    max_age: Some(Some(86_400_000_000)),
                    ..BucketSettingsUpdate::default()
                },
            )
            .unwrap();
            s.run_lifecycle("b", tsblob_storage::MAX_AGE_RULE, now_micros(), u64::MAX)
                .unwrap();
        }
        "lifecycle-records-committed" => {
            // A rule (record by record: it has a when) removing records 1..=10.
            // Disabled: the reopened store's background does not run it with the clock.
            let rule = tsblob_storage::LifecycleRule {
                when: Some("all".into()),
                mode: LifecycleMode::Disabled,
                ..tsblob_storage::LifecycleRule::new("old", 1_000_000)
            };
            s.set_lifecycle_rule("b", rule).unwrap();
            s.run_lifecycle("b", "old", 11 + 1_000_000, u64::MAX)
                .unwrap();
        }
        "entry-trashed" | "entry-removal-committed" => s.remove_entry("b", "e").unwrap(),
        "records-removal-committed" => {
            // Removal by range (one loop with removal by condition) of the first block.
            s.remove_range("b", "e", 1, 11).unwrap();
        }
        "bucket-trashed" => s.remove_bucket("b").unwrap(),
        "entry-rename-moved" | "entry-rename-committed" => {
            s.rename_entry("b", "e", "e2").unwrap();
        }
        "bucket-rename-moved" | "bucket-rename-committed" => {
            s.rename_bucket("b", "b2").unwrap();
        }
        "frames-appended" | "write-committed" => {
            s.write("b", "e", &meta(100), &payload(100, 500)).unwrap();
        }
        "label-copy-committed" | "label-copy-appended" => {
            s.update_labels("b", "e", 5, &labels(&[("k", "v")]), &[])
                .unwrap();
        }
        "attachments-written" | "attachments-renamed" => {
            s.write_attachments("b", "e", new_attachments()).unwrap();
        }
        "attachments-unlinked" => {
            s.remove_attachments("b", "e", None).unwrap();
        }
        "compress-appended"
        | "compress-committed"
        | "compress-flagged"
        | "compress-block-trashed" => {
            // A compress rule over every record of `z` (1..=30: three blocks of ten).
            let rule = tsblob_storage::LifecycleRule {
                action: LifecycleAction::Compress,
                entries: vec!["z".into()],
                mode: LifecycleMode::Disabled,
                ..tsblob_storage::LifecycleRule::new("squeeze", 1_000_000)
            };
            s.set_lifecycle_rule("b", rule).unwrap();
            s.run_lifecycle("b", "squeeze", 31 + 1_000_000, u64::MAX)
                .unwrap();
        }
        other => panic!("no operation for {other}"),
    }
}

fn old_attachments() -> Vec<(String, Vec<u8>)> {
    vec![
        ("schema".into(), br#"{"v":1}"#.to_vec()),
        ("calib".into(), br#"{"k":[1,2,3]}"#.to_vec()),
    ]
}

fn new_attachments() -> Vec<(String, Vec<u8>)> {
    vec![
        ("schema".into(), br#"{"v":2}"#.to_vec()),
        ("$plugin".into(), vec![b'x'; 5000]),
    ]
}

/// The attachments of `b/e` as (name, bytes), by name.
fn attachments_of(s: &Store, b: &str, e: &str) -> Vec<(String, Vec<u8>)> {
    s.attachments(b, e)
        .unwrap()
        .into_iter()
        .map(|a| (a.name, a.data))
        .collect()
}

fn sorted(mut v: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    v.sort();
    v
}

/// Not a test of its own: the child's body (it returns at once without the variable).
#[test]
fn crash_point_child() {
    let Ok(dir) = std::env::var("TSBLOB_CRASH_POINT_DIR") else {
        return;
    };
    let step = std::env::var("TSBLOB_CRASH_POINT_STEP").unwrap();
    let s = Store::open(&dir, opts()).unwrap();
    if std::env::var("TSBLOB_CRASH_AT").is_err() {
        s.create_bucket("b", settings()).unwrap();
        for ts in 1..=30 {
            s.write("b", "e", &meta(ts), &payload(ts, 100)).unwrap();
        }
        s.write("b", "other", &meta(1), b"neighbour").unwrap();
        for ts in 1..=30 {
            s.write("b", "z", &text_meta(ts), &text(ts)).unwrap();
        }
        s.write_attachments("b", "e", old_attachments()).unwrap();
        return;
    }
    operate(&s, &step);
    panic!("step {step} was never reached");
}

fn child(dir: &std::path::Path, step: &str, crash: bool) -> std::process::ExitStatus {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "crash_points::crash_point_child",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("TSBLOB_CRASH_POINT_DIR", dir)
    .env("TSBLOB_CRASH_POINT_STEP", step)
    .env_remove("TSBLOB_CRASH_AT");
    if crash {
        // A label update passes through the write path's "frames-appended" step.
        let at = match step {
            "label-copy-appended" => "frames-appended",
            "retention-trashed" => "block-trashed",
            "retention-committed" => "block-removal-committed",
            "lifecycle-records-committed" => "records-removal-committed",
            "compress-appended" => "frames-appended",
            "compress-block-trashed" => "block-trashed",
            other => other,
        };
        cmd.env("TSBLOB_CRASH_AT", at);
    }
    cmd.status().unwrap()
}

/// Every record of `b/e` either reads back exactly or is not found, and the count agrees.
fn consistent(s: &Store) -> Vec<u64> {
    let mut present = Vec::new();
    if s.bucket("b").is_err() {
        return present;
    }
    for ts in (1..=30).chain([100]) {
        match s.read("b", "e", Some(ts)) {
            Ok(r) => {
                let want = match ts {
                    100 if r.data == b"evicts" => b"evicts".to_vec(),
                    100 => payload(100, 500),
                    _ => payload(ts, 100),
                };
                assert_eq!(r.data, want, "record {ts} reads back wrong");
                present.push(ts);
            }
            Err(Error::NotFound(_)) => {}
            Err(e) => panic!("record {ts}: {e}"),
        }
    }
    let counted = s.entry("b", "e").map(|e| e.record_count).unwrap_or(0);
    assert_eq!(counted, present.len() as u64, "count vs readable records");
    present
}

#[test]
fn a_crash_between_any_two_steps_keeps_the_store_consistent() {
    for step in STEPS {
        let dir = tempfile::tempdir().unwrap();
        assert!(child(dir.path(), step, false).success(), "{step}: set-up");
        let st = child(dir.path(), step, true);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            st.signal(),
            Some(libc_sigabrt()),
            "{step}: the child did not die at the step ({st:?})"
        );
        let s = open(dir.path());
        let present = consistent(&s);
        drop(s);
        let s = reopened_clean(dir.path(), step);
        let again = consistent(&s);
        // (a retention step's store goes on expiring in the background: only fewer)
        assert!(
            again.iter().all(|ts| present.contains(ts)),
            "{step}: {again:?}"
        );
        if !step.starts_with("retention") {
            assert_eq!(again, present, "{step}: the second open disagrees");
        }
        if step.starts_with("retention") {
            assert!(present
                .iter()
                .all(|ts| *ts > 10 || step == "retention-trashed"));
        }
        match step {
            // The removal was committed: what it removed never comes back.
            "block-removal-committed"
            | "retention-committed"
            | "records-removal-committed"
            | "lifecycle-records-committed" => {
                assert!(present.iter().all(|ts| *ts > 10), "{step}: {present:?}");
            }
            "entry-trashed" | "entry-removal-committed" => {
                assert!(present.is_empty(), "{step}: {present:?}");
                assert_eq!(s.read("b", "other", Some(1)).unwrap().data, b"neighbour");
            }
            "bucket-trashed" => assert!(matches!(s.bucket("b"), Err(Error::NotFound(_)))),
            "write-committed" => assert!(present.contains(&100), "{step}: {present:?}"),
            "label-copy-committed" | "label-copy-appended" => {
                assert_eq!(present.len(), 30, "{step}: {present:?}");
                let l = s.head("b", "e", Some(5)).unwrap().labels;
                assert_eq!(l, labels(&[("k", "v")]), "{step}");
            }
            "block-trashed" | "retention-trashed" => {}
            _ => assert!((1..=30).all(|ts| present.contains(&ts))),
        }
        // A rebuild from the block files alone agrees (the later copy of a label update
        // wins; trashed blocks are gone).
        drop(s);
        rebuild_index(dir.path(), &opts()).unwrap();
        let s = open(dir.path());
        let again = consistent(&s);
        if step.starts_with("retention") {
            // The reopened store goes on expiring in the background: only fewer records.
            assert!(
                again.iter().all(|ts| present.contains(ts) && *ts > 10),
                "{step}"
            );
        } else {
            assert_eq!(again, present, "{step}: a rebuild disagrees");
        }
        if step == "label-copy-committed" {
            let l = s.head("b", "e", Some(5)).unwrap().labels;
            assert_eq!(l, labels(&[("k", "v")]), "{step} after a rebuild");
        }
    }
}

/// A kill -9 in the middle of a rename (issue 28): after the folder was renamed but before
/// the index commit, and after the commit. Reopened (and rebuilt from the block files), every
/// record reads back under the new name and nowhere else; the neighbour entry is intact.
#[test]
fn a_crash_mid_rename_keeps_every_record_under_one_name() {
    let steps = [
        "entry-rename-moved",
        "entry-rename-committed",
        "bucket-rename-moved",
        "bucket-rename-committed",
    ];
    for step in steps {
        let dir = tempfile::tempdir().unwrap();
        assert!(child(dir.path(), step, false).success(), "{step}: set-up");
        let st = child(dir.path(), step, true);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc_sigabrt()), "{step}: {st:?}");
        let (b, e) = if step.starts_with("entry") {
            ("b", "e2")
        } else {
            ("b2", "e")
        };
        for rebuilt in [false, true] {
            let s = open(dir.path());
            if !rebuilt {
                // The folder kept its entry id: nothing re-read from the block files.
                let report = s.recovery_report();
                assert_eq!(report.reindexed, 0, "{step}: {:?}", report.events);
                let adopted = report.events.iter().any(|l| l.contains("a rename a crash"));
                assert_eq!(
                    adopted,
                    step.ends_with("moved"),
                    "{step}: {:?}",
                    report.events
                );
            }
            assert_eq!(
                attachments_of(&s, b, e),
                sorted(old_attachments()),
                "{step}: the attachments moved with the entry"
            );
            for ts in 1..=30 {
                let r = s.read(b, e, Some(ts));
                let r = r.unwrap_or_else(|err| panic!("{step} (rebuilt {rebuilt}): {ts}: {err}"));
                assert_eq!(r.data, payload(ts, 100), "{step}: record {ts}");
            }
            let count = s.entry(b, e).unwrap().record_count;
            assert_eq!(count, 30 + u64::from(rebuilt), "{step}");
            assert_eq!(s.read(b, "other", Some(1)).unwrap().data, b"neighbour");
            if b == "b" {
                assert!(
                    matches!(s.entry("b", "e"), Err(Error::NotFound(_))),
                    "{step}"
                );
            } else {
                assert!(matches!(s.bucket("b"), Err(Error::NotFound(_))), "{step}");
            }
            // The store goes on: a write under the new name, one under the old.
            if !rebuilt {
                s.write(b, e, &meta(31), b"after").unwrap();
                drop(s);
                drop(reopened_clean(dir.path(), step));
                rebuild_index(dir.path(), &opts()).unwrap();
            } else {
                assert_eq!(s.read(b, e, Some(31)).unwrap().data, b"after");
            }
        }
    }
}

/// A kill -9 in the middle of an attachments change: after the new file was written beside
/// the old one, after it replaced it, after the last one was removed. Reopened (and with the
/// index rebuilt), the entry holds the attachments before the change or after it, whole;
/// no `attachments.tmp` is left, and the records are untouched (attachments are no records).
#[test]
fn a_crash_mid_attachment_change_keeps_the_old_or_the_new_set() {
    for step in [
        "attachments-written",
        "attachments-renamed",
        "attachments-unlinked",
    ] {
        let dir = tempfile::tempdir().unwrap();
        assert!(child(dir.path(), step, false).success(), "{step}: set-up");
        let st = child(dir.path(), step, true);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc_sigabrt()), "{step}: {st:?}");
        let mut want = match step {
            "attachments-written" => sorted(old_attachments()),
            "attachments-renamed" => {
                let mut all = old_attachments();
                all.retain(|(n, _)| n != "schema");
                all.extend(new_attachments());
                sorted(all)
            }
            _ => vec![],
        };
        for rebuilt in [false, true] {
            if rebuilt {
                rebuild_index(dir.path(), &opts()).unwrap();
            }
            let s = open(dir.path());
            assert_eq!(
                attachments_of(&s, "b", "e"),
                want,
                "{step} (rebuilt {rebuilt})"
            );
            assert_eq!(consistent(&s).len(), 30, "{step}");
            assert!(!dir.path().join("b/e/attachments.tmp").exists(), "{step}");
            // The store goes on: a change after the crash holds.
            if !rebuilt {
                s.write_attachments("b", "e", vec![("after".into(), b"1".to_vec())])
                    .unwrap();
                want.push(("after".into(), b"1".to_vec()));
                want.sort();
                drop(s);
                drop(reopened_clean(dir.path(), step));
            }
        }
    }
}

/// A compressible payload of record `ts` of `z`.
fn text(ts: u64) -> Vec<u8> {
    format!("line {ts}: all quiet on the sensor front; ")
        .repeat(30)
        .into_bytes()
}

fn text_meta(ts: u64) -> WriteMeta {
    WriteMeta {
        ts: Some(ts),
        content_type: Some(format!("text/x-{}", ts % 4)),
        labels: labels(&[("n", &ts.to_string())]),
    }
}

/// A kill -9 in the middle of a compress rule's pass (issue 28): after the compressed frames
/// were appended, after their commit, after the raw frames were flagged, while an emptied
/// raw block goes to the trash. Reopened (and with the index rebuilt from the block files),
/// every record of `z` is there once, raw or compressed, with its bytes, content type and
/// labels; a pass after the restart finishes the work.
#[test]
fn a_crash_mid_compress_keeps_each_record_raw_or_compressed_never_lost_or_twice() {
    for step in [
        "compress-appended",
        "compress-committed",
        "compress-flagged",
        "compress-block-trashed",
    ] {
        let dir = tempfile::tempdir().unwrap();
        assert!(child(dir.path(), step, false).success(), "{step}: set-up");
        let st = child(dir.path(), step, true);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc_sigabrt()), "{step}: {st:?}");
        let check = |s: &Store, when: &str| {
            for ts in 1..=30 {
                let r = s.read("b", "z", Some(ts));
                let r = r.unwrap_or_else(|e| panic!("{step} ({when}): record {ts}: {e}"));
                assert_eq!(r.data, text(ts), "{step} ({when}): record {ts}");
                assert_eq!(r.meta.content_type, text_meta(ts).content_type.unwrap());
                assert_eq!(r.meta.labels, text_meta(ts).labels, "{step} ({when})");
            }
            let listed = all_ts(s, "b", "z", &Query::default());
            assert_eq!(listed, (1..=30).collect::<Vec<_>>(), "{step} ({when})");
            assert_eq!(
                s.entry("b", "z").unwrap().record_count,
                30,
                "{step} ({when})"
            );
            assert_eq!(consistent(s).len(), 30, "{step} ({when})");
        };
        let s = open(dir.path());
        check(&s, "reopened");
        drop(s);
        check(&reopened_clean(dir.path(), step), "reopened again");
        rebuild_index(dir.path(), &opts()).unwrap();
        let s = open(dir.path());
        check(&s, "rebuilt");
        // The store goes on: the rule runs again and leaves every record compressed.
        let rule = s.lifecycle_rule("b", "squeeze").unwrap().0;
        s.remove_lifecycle_rule("b", "squeeze").unwrap();
        s.set_lifecycle_rule("b", rule).unwrap();
        s.run_lifecycle("b", "squeeze", 31 + 1_000_000, u64::MAX)
            .unwrap();
        check(&s, "compressed again");
        let again = s
            .run_lifecycle("b", "squeeze", 31 + 1_000_000, u64::MAX)
            .unwrap();
        assert_eq!(again.compressed, 0, "{step}: {again:?}");
    }
}

/// SIGABRT, what `std::process::abort` dies of.
/// Opens a store a previous open repaired: nothing is left to repair. (An interrupted entry
/// or bucket removal left the entry's block rows, and a label copy re-indexed at open left
/// the old block's count: the index's counts disagreed with its records, and every later
/// open rebuilt the whole index from the block files. Kill -9 probe, F3.)
fn reopened_clean(dir: &std::path::Path, step: &str) -> Store {
    let s = open(dir);
    let report = s.recovery_report();
    assert_eq!(
        report.rebuilt, None,
        "{step}: the second open rebuilt the index"
    );
    assert!(
        report.events.is_empty(),
        "{step}: the second open repaired {:?}",
        report.events
    );
    s
}

fn libc_sigabrt() -> i32 {
    6
}
