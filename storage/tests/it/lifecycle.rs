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
