//! Lifecycle rules (issue 28, item 3): records older than a rule's `older_than`, in its
//! entries, matching its `when`, removed in bounded passes that resume where the last one
//! stopped, with writes going on meanwhile; `max_age` is the shorthand rule.

use std::time::{Duration, Instant};

use crate::common::*;
use tsblob_storage::*;

const HOUR: u64 = 3_600_000_000;

/// A rule the background leaves alone (it would run it with the clock, far past these
/// tests' timestamps): `run_lifecycle` runs it with the time each test gives.
fn manual(name: &str, older_than: u64) -> LifecycleRule {
    LifecycleRule {
        mode: LifecycleMode::Disabled,
        ..LifecycleRule::new(name, older_than)
    }
}

/// Records `0..n` of `b/e` at `base + i`, labelled `parity` = odd/even.
fn fill(s: &Store, b: &str, e: &str, base: u64, n: u64) {
    let batch: Vec<BatchRecord> = (0..n)
        .map(|i| BatchRecord {
            meta: WriteMeta {
                ts: Some(base + i),
                content_type: None,
                labels: labels(&[("parity", if i % 2 == 0 { "even" } else { "odd" })]),
            },
            data: vec![b'x'; 100],
        })
        .collect();
    for chunk in batch.chunks(5000) {
        for r in s.write_batch(b, e, chunk).unwrap() {
            r.unwrap();
        }
    }
}

fn count(s: &Store, b: &str, e: &str) -> u64 {
    s.entry(b, e).map(|i| i.record_count).unwrap_or(0)
}

fn small_blocks() -> BucketSettings {
    BucketSettings {
        max_block_records: 100,
        ..BucketSettings::default()
    }
}

#[test]
fn a_rule_removes_only_old_matching_records_in_its_entries() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", small_blocks()).unwrap();
    for e in ["cam/front", "cam/raw", "lidar"] {
        fill(&s, "b", e, 1_000, 1_000);
    }
    let rule = LifecycleRule {
        entries: vec!["cam/*".into(), "!cam/raw".into()],
        when: Some("parity=odd".into()),
        ..manual("odd-cams", HOUR)
    };
    assert!(!s.set_lifecycle_rule("b", rule.clone()).unwrap());
    // The clock one hour after 1_500: records before 1_500 are old.
    let pass = s
        .run_lifecycle("b", "odd-cams", 1_500 + HOUR, u64::MAX)
        .unwrap();
    assert_eq!(pass.removed, 250, "{pass:?}");
    assert!(pass.caught_up);
    let front = all_ts(&s, "b", "cam/front", &Query::default());
    assert_eq!(front.len(), 750);
    assert!(front.iter().all(|t| *t >= 1_500 || (t - 1_000) % 2 == 0));
    assert_eq!(count(&s, "b", "cam/raw"), 1_000);
    assert_eq!(count(&s, "b", "lidar"), 1_000);
    // The rule is a setting: it survives a reopen, listed with the rest.
    drop(s);
    let s = open(dir.path());
    let rules = s.lifecycle_rules("b").unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].0, rule);
    // A rule without `when` deletes whole blocks where it can, then record by record.
    s.set_lifecycle_rule("b", manual("all", HOUR)).unwrap();
    let pass = s.run_lifecycle("b", "all", 1_550 + HOUR, u64::MAX).unwrap();
    assert!(pass.blocks >= 12, "{pass:?}");
    for e in ["cam/front", "cam/raw", "lidar"] {
        let left = all_ts(&s, "b", e, &Query::default());
        assert!(left.iter().all(|t| *t >= 1_550), "{e}: {:?}", &left[..3]);
    }
    assert_eq!(count(&s, "b", "lidar"), 450);
    // Unknown and reserved names.
    assert!(matches!(
        s.run_lifecycle("b", "nope", 0, 1),
        Err(Error::NotFound(NotFound::Rule { .. }))
    ));
    assert!(matches!(
        s.set_lifecycle_rule("b", LifecycleRule::new("max_age", 1)),
        Err(Error::Bucket(BucketError::InvalidSettings(_)))
    ));
    assert!(matches!(
        s.set_lifecycle_rule(
            "b",
            LifecycleRule {
                when: Some("nonsense".into()),
                ..LifecycleRule::new("w", 1)
            }
        ),
        Err(Error::Bucket(BucketError::InvalidSettings(m))) if m.contains("nonsense")
    ));
    s.remove_lifecycle_rule("b", "all").unwrap();
    assert!(matches!(
        s.remove_lifecycle_rule("b", "all"),
        Err(Error::NotFound(NotFound::Rule { .. }))
    ));
}

#[test]
fn passes_are_bounded_and_resume_where_the_last_one_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    fill(&s, "b", "e", 0, 10_000);
    let rule = LifecycleRule {
        when: Some("parity=even".into()),
        ..manual("even", HOUR)
    };
    s.set_lifecycle_rule("b", rule).unwrap();
    let now = 8_000 + HOUR;
    let mut passes = Vec::new();
    loop {
        let p = s.run_lifecycle("b", "even", now, 3_000).unwrap();
        assert!(p.looked_at <= 3_000, "{p:?}");
        passes.push(p);
        if p.caught_up {
            break;
        }
        assert!(passes.len() < 10, "{passes:?}");
    }
    // 8,000 records looked at, once each: 3 passes.
    assert_eq!(passes.len(), 3, "{passes:?}");
    assert_eq!(passes.iter().map(|p| p.looked_at).sum::<u64>(), 8_000);
    assert_eq!(passes.iter().map(|p| p.removed).sum::<u64>(), 4_000);
    assert_eq!(count(&s, "b", "e"), 6_000);
    // The next round looks only at what became old since.
    let p = s.run_lifecycle("b", "even", now + 1_000, u64::MAX).unwrap();
    assert_eq!((p.looked_at, p.removed), (1_000, 500), "{p:?}");
    let (_, status) = s.lifecycle_rule("b", "even").unwrap();
    assert_eq!(status.removed, 4_500);
    assert!(status.caught_up && status.last_error.is_none());
    assert_eq!(status.next_run, now + 1_000 + 60_000_000);
    // A change of mode alone keeps the status and the resume points; another change does not.
    let rule = s.lifecycle_rule("b", "even").unwrap().0;
    s.set_lifecycle_rule(
        "b",
        LifecycleRule {
            mode: LifecycleMode::DryRun,
            ..rule.clone()
        },
    )
    .unwrap();
    assert_eq!(s.lifecycle_rule("b", "even").unwrap().1.removed, 4_500);
    let p = s.run_lifecycle("b", "even", now + 1_000, u64::MAX).unwrap();
    assert_eq!(p.looked_at, 0, "{p:?}");
    s.set_lifecycle_rule(
        "b",
        LifecycleRule {
            older_than: HOUR + 1,
            ..rule
        },
    )
    .unwrap();
    assert_eq!(s.lifecycle_rule("b", "even").unwrap().1.removed, 0);
}

#[test]
fn dry_run_counts_and_removes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", small_blocks()).unwrap();
    fill(&s, "b", "e", 0, 1_000);
    let rule = LifecycleRule {
        mode: LifecycleMode::DryRun,
        ..LifecycleRule::new("preview", HOUR)
    };
    s.set_lifecycle_rule("b", rule).unwrap();
    let p = s
        .run_lifecycle("b", "preview", 600 + HOUR, u64::MAX)
        .unwrap();
    assert_eq!((p.removed, p.blocks), (600, 0));
    assert_eq!(count(&s, "b", "e"), 1_000);
}

/// `max_age` is the shorthand rule: listed as `max_age`, whole blocks only, and removing the
/// rule clears the setting.
#[test]
fn max_age_is_reported_as_the_shorthand_rule() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket(
        "b",
        BucketSettings {
            max_age: Some(HOUR),
            ..BucketSettings::default()
        },
    )
    .unwrap();
    s.set_lifecycle_rule("b", LifecycleRule::new("week", 7 * 24 * HOUR))
        .unwrap();
    let rules = s.lifecycle_rules("b").unwrap();
    let names: Vec<&str> = rules.iter().map(|(r, _)| r.name.as_str()).collect();
    assert_eq!(names, ["max_age", "week"]);
    assert_eq!(rules[0].0.older_than, HOUR);
    s.remove_lifecycle_rule("b", MAX_AGE_RULE).unwrap();
    assert_eq!(s.bucket("b").unwrap().settings.max_age, None);
    assert_eq!(s.lifecycle_rules("b").unwrap().len(), 1);
}

/// The write check reads `max_age` from a copy kept beside the settings (not under their
/// lock): it must follow every way the setting changes — an update, the shorthand rule
/// removed, set again, and a reopen.
#[test]
fn writes_are_refused_as_too_old_by_max_age_as_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let too_old = |r: Result<u64>| matches!(r, Err(Error::Write(WriteError::TooOld { .. })));
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    let old = |ts| WriteMeta::at(ts);
    s.write("b", "e", &old(1), b"x").unwrap();
    let set = |s: &Store, age| {
        s.update_bucket(
            "b",
            &BucketSettingsUpdate {
                max_age: Some(age),
                ..Default::default()
            },
        )
        .unwrap()
    };
    set(&s, Some(HOUR));
    assert!(too_old(s.write("b", "e", &old(2), b"x")));
    s.remove_lifecycle_rule("b", MAX_AGE_RULE).unwrap();
    s.write("b", "e", &old(3), b"x").unwrap();
    set(&s, Some(HOUR));
    assert!(too_old(s.write("b", "e", &old(4), b"x")));
    set(&s, None);
    s.write("b", "e", &old(5), b"x").unwrap();
    set(&s, Some(HOUR));
    drop(s);
    let s = open(dir.path());
    assert!(too_old(s.write("b", "e", &old(6), b"x")));
    let recent = tsblob_storage::now_micros() - 60_000_000;
    s.write("b", "e", &old(recent), b"x").unwrap();
}

/// The background runs enabled rules with the clock, and only those.
#[test]
fn the_background_runs_enabled_rules() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", small_blocks()).unwrap();
    let old = now_micros() - 2 * HOUR;
    fill(&s, "b", "on", old, 500);
    fill(&s, "b", "off", old, 500);
    s.set_lifecycle_rule(
        "b",
        LifecycleRule {
            entries: vec!["on".into()],
            when: Some("parity=odd".into()),
            ..LifecycleRule::new("on", HOUR)
        },
    )
    .unwrap();
    s.set_lifecycle_rule(
        "b",
        LifecycleRule {
            entries: vec!["off".into()],
            mode: LifecycleMode::Disabled,
            ..LifecycleRule::new("off", HOUR)
        },
    )
    .unwrap();
    let t = Instant::now();
    while count(&s, "b", "on") > 250 {
        assert!(t.elapsed() < Duration::from_secs(20), "the rule never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(count(&s, "b", "on"), 250);
    assert_eq!(count(&s, "b", "off"), 500);
    let (_, st) = s.lifecycle_rule("b", "on").unwrap();
    assert_eq!(st.removed, 250);
    assert!(st.last_run.is_some());
}

/// A pass over a large backlog holds an entry's lock for one page at a time and no
/// bucket-wide lock: writes to the same entry and to others complete while it runs.
#[test]
fn writes_complete_while_a_big_rule_pass_runs() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    fill(&s, "b", "e", 0, 200_000);
    s.set_lifecycle_rule(
        "b",
        LifecycleRule {
            when: Some("parity=odd".into()),
            ..manual("big", HOUR)
        },
    )
    .unwrap();
    let s2 = s.clone();
    let pass = std::thread::spawn(move || {
        let t = Instant::now();
        let p = s2
            .run_lifecycle("b", "big", 200_000 + HOUR, u64::MAX)
            .unwrap();
        (p, t.elapsed())
    });
    let mut during = 0;
    let mut slowest = Duration::ZERO;
    let mut ts = 1_000_000_000;
    while !pass.is_finished() {
        for e in ["e", "other"] {
            let t = Instant::now();
            s.write("b", e, &meta(ts), b"new").unwrap();
            slowest = slowest.max(t.elapsed());
            ts += 1;
        }
        if !pass.is_finished() {
            during += 1;
        }
    }
    let (p, took) = pass.join().unwrap();
    eprintln!(
        "a pass removing {} of 200,000 records took {took:?}; {during} rounds of two writes finished during it, the slowest write {slowest:?}",
        p.removed
    );
    assert_eq!(p.removed, 100_000);
    assert!(
        during >= 5,
        "only {during} write rounds finished during a pass of {took:?}"
    );
    assert!(
        slowest < took / 2 && slowest < Duration::from_secs(2),
        "a write waited {slowest:?} during a pass of {took:?}"
    );
    assert!(count(&s, "b", "e") > 100_000 + during);
}

/// A compressible payload of record `i` (text that repeats, with its number in it).
fn text_payload(i: u64) -> Vec<u8> {
    format!("sensor reading {i:08}: temperature=21.5 humidity=40 status=ok; ")
        .repeat(60)
        .into_bytes()
}

/// Records `0..n` of `b/e` at `base + i` with compressible payloads, a content type and
/// labels of their own.
fn fill_text(s: &Store, b: &str, e: &str, base: u64, n: u64) {
    let batch: Vec<BatchRecord> = (0..n)
        .map(|i| BatchRecord {
            meta: WriteMeta {
                ts: Some(base + i),
                content_type: Some(format!("text/x-log-{}", i % 3)),
                labels: labels(&[
                    ("parity", if i % 2 == 0 { "even" } else { "odd" }),
                    ("n", &i.to_string()),
                ]),
            },
            data: text_payload(i),
        })
        .collect();
    for chunk in batch.chunks(1000) {
        for r in s.write_batch(b, e, chunk).unwrap() {
            r.unwrap();
        }
    }
}

/// Every record `0..n` of `b/e` reads back as written: bytes, content type, labels (by
/// point reads and by a query of `[base, base + n)`).
fn reads_back(s: &Store, b: &str, e: &str, base: u64, n: u64) {
    for i in 0..n {
        let r = s.read(b, e, Some(base + i)).unwrap();
        assert_eq!(r.data, text_payload(i), "{e}@{}", base + i);
        assert_eq!(r.meta.content_type, format!("text/x-log-{}", i % 3));
        assert_eq!(
            r.meta.labels.get("n").map(String::as_str),
            Some(&*i.to_string())
        );
        assert_eq!(r.meta.size, text_payload(i).len() as u64);
    }
    let range = Query {
        start: Some(base),
        stop: Some(base + n),
        ..Query::default()
    };
    let q: Vec<(u64, Vec<u8>)> = s
        .query(b, e, &range)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.meta.ts, r.data().unwrap())
        })
        .collect();
    assert_eq!(q.len() as u64, n);
    for (i, (ts, data)) in q.into_iter().enumerate() {
        assert_eq!((ts, data), (base + i as u64, text_payload(i as u64)));
    }
}

/// Issue 28 (lifecycle rules, `compress`): old raw records of the rule's entries are written
/// again zstd-compressed; they read back byte for byte with their content types and labels,
/// the blocks they left are deleted (the bucket's bytes go down), records already compressed
/// are not looked at again, and other entries are untouched.
#[test]
fn a_compress_rule_stores_old_records_compressed_and_gives_the_space_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", small_blocks()).unwrap();
    fill_text(&s, "b", "logs", 1_000, 1_000);
    fill_text(&s, "b", "keep", 1_000, 1_000);
    let before = s.bucket("b").unwrap().size;
    let rule = LifecycleRule {
        action: LifecycleAction::Compress,
        entries: vec!["logs".into()],
        ..manual("squeeze", HOUR)
    };
    s.set_lifecycle_rule("b", rule.clone()).unwrap();
    // A dry run counts and changes nothing.
    let dry = LifecycleRule {
        mode: LifecycleMode::DryRun,
        name: "preview".into(),
        ..rule.clone()
    };
    s.set_lifecycle_rule("b", dry).unwrap();
    let p = s
        .run_lifecycle("b", "preview", 1_600 + HOUR, u64::MAX)
        .unwrap();
    assert_eq!((p.compressed, p.removed, p.blocks), (600, 0, 0), "{p:?}");
    assert_eq!(s.bucket("b").unwrap().size, before);
    s.remove_lifecycle_rule("b", "preview").unwrap();
    // Records before 1_600 are old: 600 of them, six whole blocks of 100.
    let p = s
        .run_lifecycle("b", "squeeze", 1_600 + HOUR, u64::MAX)
        .unwrap();
    assert_eq!((p.compressed, p.removed), (600, 0), "{p:?}");
    assert!(p.caught_up && p.blocks >= 6, "{p:?}");
    let after = s.bucket("b").unwrap().size;
    let raw = text_payload(0).len() as u64;
    eprintln!(
        "compress rule: bucket {before} -> {after} bytes ({} saved by the pass) for 600 of 2,000 records of {raw} bytes",
        p.saved
    );
    assert!(
        before - after > 600 * raw * 8 / 10,
        "the space did not come back: {before} -> {after}"
    );
    assert_eq!(count(&s, "b", "logs"), 1_000);
    reads_back(&s, "b", "logs", 1_000, 1_000);
    reads_back(&s, "b", "keep", 1_000, 1_000);
    // Already compressed: the next round looks only at what became old since.
    let p = s
        .run_lifecycle("b", "squeeze", 1_700 + HOUR, u64::MAX)
        .unwrap();
    assert_eq!((p.looked_at, p.compressed), (100, 100), "{p:?}");
    let (r, st) = s.lifecycle_rule("b", "squeeze").unwrap();
    assert_eq!(r.action, LifecycleAction::Compress);
    assert_eq!((st.compressed, st.removed), (700, 0));
    assert!(st.saved_bytes > 700 * raw * 8 / 10, "{st:?}");
    // A new rule starts over: compressed records are looked at and left alone.
    s.remove_lifecycle_rule("b", "squeeze").unwrap();
    s.set_lifecycle_rule("b", rule.clone()).unwrap();
    let p = s
        .run_lifecycle("b", "squeeze", 1_700 + HOUR, u64::MAX)
        .unwrap();
    assert_eq!((p.looked_at, p.compressed), (700, 0), "{p:?}");
    // The rule (its action) survives a reopen, and so do the records; a rebuild of the
    // index from the block files alone finds each record once, compressed.
    let size = s.bucket("b").unwrap().size;
    drop(s);
    let s = open(dir.path());
    assert_eq!(s.lifecycle_rules("b").unwrap()[0].0, rule);
    reads_back(&s, "b", "logs", 1_000, 1_000);
    drop(s);
    rebuild_index(dir.path(), &opts()).unwrap();
    let s = open(dir.path());
    reads_back(&s, "b", "logs", 1_000, 1_000);
    reads_back(&s, "b", "keep", 1_000, 1_000);
    assert_eq!(s.bucket("b").unwrap().size, size);
    assert!(size < after);
}

/// A compress rule with a `when` compresses only the records it keeps; the others stay raw
/// (and their blocks stay, holding them).
#[test]
fn a_compress_rule_with_a_when_compresses_only_what_it_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", small_blocks()).unwrap();
    fill_text(&s, "b", "logs", 0, 400);
    let rule = LifecycleRule {
        action: LifecycleAction::Compress,
        when: Some("parity=odd".into()),
        ..manual("odd", HOUR)
    };
    s.set_lifecycle_rule("b", rule).unwrap();
    let p = s.run_lifecycle("b", "odd", 400 + HOUR, u64::MAX).unwrap();
    assert_eq!(
        (p.looked_at, p.compressed, p.blocks),
        (400, 200, 0),
        "{p:?}"
    );
    reads_back(&s, "b", "logs", 0, 400);
    // Then every record: the rest compressed, the raw blocks all emptied and deleted.
    s.set_lifecycle_rule(
        "b",
        LifecycleRule {
            action: LifecycleAction::Compress,
            ..manual("all", HOUR)
        },
    )
    .unwrap();
    let p = s.run_lifecycle("b", "all", 400 + HOUR, u64::MAX).unwrap();
    assert_eq!(p.compressed, 200, "{p:?}");
    assert!(p.blocks >= 4, "{p:?}");
    reads_back(&s, "b", "logs", 0, 400);
}

/// A compress pass holds the entry lock only to list a page and to append and commit a
/// batch: writes to the same entry complete while it compresses a large backlog.
#[test]
fn writes_complete_while_a_compress_pass_runs() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    fill_text(&s, "b", "e", 0, 20_000);
    s.set_lifecycle_rule(
        "b",
        LifecycleRule {
            action: LifecycleAction::Compress,
            ..manual("big", HOUR)
        },
    )
    .unwrap();
    let s2 = s.clone();
    let pass = std::thread::spawn(move || {
        let t = Instant::now();
        let p = s2
            .run_lifecycle("b", "big", 20_000 + HOUR, u64::MAX)
            .unwrap();
        (p, t.elapsed())
    });
    let (mut during, mut slowest, mut ts) = (0, Duration::ZERO, 1_000_000_000);
    while !pass.is_finished() {
        let t = Instant::now();
        s.write("b", "e", &meta(ts), b"new").unwrap();
        slowest = slowest.max(t.elapsed());
        ts += 1;
        during += 1;
    }
    let (p, took) = pass.join().unwrap();
    eprintln!(
        "a pass compressing {} records took {took:?}; {during} writes to its entry finished during it, the slowest {slowest:?}",
        p.compressed
    );
    assert_eq!(p.compressed, 20_000);
    assert!(
        during >= 5,
        "only {during} writes during a pass of {took:?}"
    );
    assert!(
        slowest < took / 2,
        "a write waited {slowest:?} during {took:?}"
    );
    reads_back(&s, "b", "e", 0, 100);
}

/// Issue 28 (lifecycle resume points): a record written with an old timestamp, or
/// relabelled to match, behind where a rule with a `when` resumes was skipped by every later
/// round until a restart or a change of the rule. Now the next round goes back to it.
#[test]
fn a_record_put_or_relabelled_behind_a_resume_point_is_caught_by_the_next_round() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", small_blocks()).unwrap();
    fill(&s, "b", "e", 0, 1_000);
    fill(&s, "b", "other", 0, 100);
    let rule = LifecycleRule {
        when: Some("parity=odd".into()),
        ..manual("odd", HOUR)
    };
    s.set_lifecycle_rule("b", rule).unwrap();
    let p = s.run_lifecycle("b", "odd", 1_000 + HOUR, u64::MAX).unwrap();
    assert_eq!(p.removed, 550, "{p:?}");
    // Behind the resume point (1,000): a new odd record, and an even one relabelled odd.
    let odd = WriteMeta {
        ts: Some(101),
        content_type: None,
        labels: labels(&[("parity", "odd")]),
    };
    s.write("b", "e", &odd, b"late").unwrap();
    s.update_labels("b", "e", 200, &labels(&[("parity", "odd")]), &[])
        .unwrap();
    let p = s.run_lifecycle("b", "odd", 1_010 + HOUR, u64::MAX).unwrap();
    assert_eq!(p.removed, 2, "{p:?}");
    assert!(s.read("b", "e", Some(101)).is_err() && s.read("b", "e", Some(200)).is_err());
    // Nothing behind: the round after looks only at what became old since.
    let p = s.run_lifecycle("b", "odd", 1_010 + HOUR, u64::MAX).unwrap();
    assert_eq!((p.looked_at, p.removed), (0, 0), "{p:?}");
}

/// Issue 28 (lifecycle resume points): they lived in memory, so every restart made each
/// rule look at every record again. A clean close writes them, the next open reads them back
/// (and removes the file, so a crash cannot leave stale ones), and a record put behind one
/// after the restart is still caught.
#[test]
fn lifecycle_resume_points_survive_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", small_blocks()).unwrap();
    fill(&s, "b", "e", 0, 1_000);
    let rule = LifecycleRule {
        when: Some("parity=odd".into()),
        ..manual("odd", HOUR)
    };
    s.set_lifecycle_rule("b", rule).unwrap();
    let p = s.run_lifecycle("b", "odd", 800 + HOUR, u64::MAX).unwrap();
    assert_eq!((p.looked_at, p.removed), (800, 400), "{p:?}");
    drop(s);
    assert!(dir.path().join(".lifecycle-resume").exists());
    let s = open(dir.path());
    assert!(!dir.path().join(".lifecycle-resume").exists());
    // Resumes at 800: the 200 records before 1,000, of which 100 odd.
    let p = s.run_lifecycle("b", "odd", 1_000 + HOUR, u64::MAX).unwrap();
    assert_eq!((p.looked_at, p.removed), (200, 100), "{p:?}");
    s.write(
        "b",
        "e",
        &WriteMeta {
            ts: Some(3),
            content_type: None,
            labels: labels(&[("parity", "odd")]),
        },
        b"late",
    )
    .unwrap();
    drop(s);
    let s = open(dir.path());
    let p = s.run_lifecycle("b", "odd", 1_000 + HOUR, u64::MAX).unwrap();
    assert_eq!(p.removed, 1, "{p:?}");
    assert_eq!(count(&s, "b", "e"), 500);
    // A changed rule starts over, restart or not.
    s.set_lifecycle_rule(
        "b",
        LifecycleRule {
            when: Some("parity=even".into()),
            ..manual("odd", HOUR)
        },
    )
    .unwrap();
    drop(s);
    let s = open(dir.path());
    let p = s.run_lifecycle("b", "odd", 1_000 + HOUR, u64::MAX).unwrap();
    assert_eq!((p.looked_at, p.removed), (500, 500), "{p:?}");
}
