//! Lifecycle rules' run state: what each rule of a bucket did and where its next pass
//! resumes. The rules themselves are bucket settings (`settings.rs`, `LifecycleRule`), the
//! passes `store/lifecycle.rs`.
//!
//! A rule's **round** removes what is older than its cutoff (`now - older_than`) and then
//! waits `interval`. A round is made of **passes**, each bounded by
//! `StoreOptions::lifecycle_pass_records`: a pass resumes, per entry, at the timestamp the
//! last one stopped at, and the next round resumes where the last round ended (only records
//! newer than that are looked at again; whole blocks past the cutoff are looked at every
//! pass, from the in-memory block list). A change of the rule starts its next round from
//! the oldest record again.
//!
//! A record put (written, or copied by a label update) behind a resume point would be missed
//! by the rule's later rounds: each entry notes the lowest timestamp put below the highest
//! cutoff a pass looked at it with (`EntryState::note_put`, under the entry lock), and the
//! next pass to list a page of the entry takes it and moves every rule's resume point of the
//! entry back to it (`behind` holds it for a rule whose pass is running, applied when that
//! pass stores its points). The resume points are written to `.lifecycle-resume` at a clean
//! close and read back (and the file removed) at open, so a restart resumes where the rules
//! were; after a crash the file is absent (a put noted in memory only may have been lost
//! with it) and rounds start from the oldest record again.

use std::collections::BTreeMap;

use crate::when::Condition;

/// What a lifecycle rule has done since the store was opened (or the rule was last set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LifecycleStatus {
    /// When (µs since the epoch) its last pass ended.
    pub last_run: Option<u64>,
    /// When its next pass is due (µs since the epoch).
    pub next_run: u64,
    /// Whether its last round reached the cutoff (false: passes go on at every tick).
    pub caught_up: bool,
    /// Records removed (or, in `dry_run`, that would have been) by its last pass.
    pub last_removed: u64,
    /// Records removed (or counted, in `dry_run`) since the store was opened.
    pub removed: u64,
    /// Whole blocks deleted since the store was opened (a compress rule: blocks left with
    /// no live record once their records were compressed).
    pub removed_blocks: u64,
    /// Records compressed (or counted, in `dry_run`) by its last pass (a compress rule).
    pub last_compressed: u64,
    /// Records compressed (or counted, in `dry_run`) since the store was opened.
    pub compressed: u64,
    /// Frame bytes the records it compressed gave up since the store was opened.
    pub saved_bytes: u64,
    /// The error of its last pass, if it failed (the next one tries again).
    pub last_error: Option<String>,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Records removed (or counted, in `dry_run`).
    pub removed: u64,
    /// Whole blocks deleted.
    pub blocks: u64,
    /// Records compressed (or counted, in `dry_run`) by a compress rule.
    pub compressed: u64,
    /// Frame bytes those records gave up (raw frame minus compressed frame).
    pub saved: u64,
    /// Index records looked at (the pass's bound counts these).
    pub looked_at: u64,
    /// Whether every selected entry reached the cutoff.
    pub caught_up: bool,
    /// Whether the rule only counted (`dry_run`): nothing was removed or compressed.
    pub dry_run: bool,
}

/// A rule's run state, kept by its bucket.
#[derive(Debug, Default)]
pub(crate) struct RuleRun {
    pub status: LifecycleStatus,
    /// Per entry id: the timestamp its next pass starts at.
    pub resume: BTreeMap<u32, u64>,
    /// The rule these points belong to: another rule under the name starts over.
    pub rule: Option<crate::settings::LifecycleRule>,
    /// The rule's `when`, compiled.
    pub condition: Option<Condition>,
    /// Per entry id: the lowest timestamp put behind a resume point while a pass of the
    /// rule ran (its points were copied out): applied when the pass stores them.
    pub behind: BTreeMap<u32, u64>,
}

impl RuleRun {
    /// A record was put at `ts` in entry `entry_id`, behind where this rule may resume.
    pub fn put_behind(&mut self, entry_id: u32, ts: u64) {
        if let Some(r) = self.resume.get_mut(&entry_id) {
            *r = (*r).min(ts);
        }
        let b = self.behind.entry(entry_id).or_insert(ts);
        *b = (*b).min(ts);
    }
}

#[cfg(test)]
mod tests {
    use crate::settings::{BucketSettings, LifecycleAction, LifecycleMode, LifecycleRule};

    #[test]
    fn rules_survive_the_settings_file_whatever_their_when_holds() {
        let mut s = BucketSettings {
            max_age: Some(5),
            ..BucketSettings::default()
        };
        s.lifecycle.push(LifecycleRule {
            name: "cold-logs".into(),
            older_than: 86_400_000_000,
            interval: 3_600_000_000,
            entries: vec!["logs/**".into(), "!logs/keep".into()],
            when: Some("{\"&a\": {\"$eq\": \"x when=y\\\\n\"},\n \"&b\": 1}\r".into()),
            mode: LifecycleMode::DryRun,
            action: LifecycleAction::Remove,
        });
        s.lifecycle.push(LifecycleRule::new("all", 1));
        s.lifecycle.push(LifecycleRule {
            action: LifecycleAction::Compress,
            ..LifecycleRule::new("squeeze", 7)
        });
        let text = s.to_file_text();
        assert_eq!(BucketSettings::from_file_text(&text).unwrap(), s);
        s.validate().unwrap();
        // an older server reads the file and ignores the rules it does not know: a compress
        // rule is under a key of its own, so it is not read as one that removes
        assert!(text.lines().filter(|l| l.starts_with("lifecycle.")).count() == 2);
        assert!(text.contains("\nlifecycle_compress.squeeze = older_than=7 "));
    }

    #[test]
    fn invalid_rules_are_refused_with_the_reason() {
        let bad = |r: LifecycleRule, want: &str| {
            let s = BucketSettings {
                lifecycle: vec![r],
                ..BucketSettings::default()
            };
            let e = s.validate().unwrap_err();
            assert!(e.contains(want), "{e}");
        };
        bad(LifecycleRule::new("max_age", 1), "max_age setting");
        bad(LifecycleRule::new("a b", 1), "not valid");
        bad(LifecycleRule::new("z", 0), "older_than");
        bad(
            LifecycleRule {
                interval: 10,
                ..LifecycleRule::new("z", 1)
            },
            "interval",
        );
        bad(
            LifecycleRule {
                entries: vec!["../x".into()],
                ..LifecycleRule::new("z", 1)
            },
            "entry pattern",
        );
        let twice = BucketSettings {
            lifecycle: vec![LifecycleRule::new("z", 1), LifecycleRule::new("z", 2)],
            ..BucketSettings::default()
        };
        assert!(twice
            .validate()
            .unwrap_err()
            .contains("two lifecycle rules"));
    }
}
