//! `Store`'s lifecycle rules (`lifecycle.rs` holds their run state): setting and listing
//! them, and their passes, run by the retention thread every second and by
//! [`Store::run_lifecycle`].
//!
//! A pass never holds a lock a write to another entry waits on, and holds an entry's lock
//! for one page of that entry at most: whole blocks are deleted a few at a time under the
//! entry lock (`delete_block`: the trash, then the index commit), records page by page
//! (`REMOVE_PAGE` index records listed under the entry lock, removed with `remove_listed`,
//! the lock released before the next page). It takes no bucket eviction lock. Removal goes
//! through the same code as `remove_where`, so a kill -9 never brings removed records back.
//! The work of one pass is bounded by `StoreOptions::lifecycle_pass_records`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::bucket::Bucket;
use crate::entry::{Entry, EntryState};
use crate::error::{BucketError, Error, NotFound, Result};
use crate::index::Order;
use crate::layout::LIFECYCLE_RESUME_FILE;
use crate::lifecycle::{LifecycleStatus, PassReport, RuleRun};
use crate::pattern::EntrySelection;
use crate::record::Query;
use crate::selector::{Selector, REMOVE_PAGE};
use crate::settings::{LifecycleAction, LifecycleMode, LifecycleRule, MAX_AGE_RULE};
use crate::store::{Inner, Store};
use crate::when::Condition;

/// Blocks deleted under one hold of an entry lock.
const BLOCKS_PER_LOCK: usize = 8;

/// How often the shorthand rule of `max_age` runs (µs).
const MAX_AGE_INTERVAL: u64 = crate::quota::EXPIRY_EVERY_MS * 1000;

/// The rule a bucket's `max_age` is reported as (whole blocks, every entry).
fn shorthand(max_age: u64) -> LifecycleRule {
    LifecycleRule {
        interval: MAX_AGE_INTERVAL,
        ..LifecycleRule::new(MAX_AGE_RULE, max_age)
    }
}

impl Store {
    /// Writes the lifecycle rules' resume points now (a server calls it when it stops; the
    /// last `Store` dropped does it too), so the next open resumes where they are.
    pub fn save_lifecycle_state(&self) -> Result<()> {
        Store::save_resume_points(&self.inner)
            .map_err(|e| Error::io("writing the lifecycle resume points", e))
    }

    /// Adds a lifecycle rule to a bucket, or replaces the one of its name (true: replaced).
    /// Its `when` is compiled with `StoreOptions::when_parser`; the settings file holds it
    /// before this returns. A replaced rule starts over (its run state is dropped), unless
    /// only its mode changed.
    pub fn set_lifecycle_rule(&self, bucket: &str, rule: LifecycleRule) -> Result<bool> {
        let b = self.get_bucket(bucket)?;
        rule.validate().map_err(BucketError::InvalidSettings)?;
        if let Some(text) = &rule.when {
            self.compile_when(&rule.name, text)?;
        }
        let mut replaced = false;
        {
            let _g = self.inner.structure.lock();
            self.still_registered(bucket, &b)?;
            b.change_rules(|rules| {
                match rules.iter_mut().find(|r| r.name == rule.name) {
                    Some(r) => {
                        *r = rule.clone();
                        replaced = true;
                    }
                    None => rules.push(rule.clone()),
                }
                Ok(())
            })?;
        }
        // A change of mode alone (ReductStore's `PATCH …/mode`) keeps what the rule did and
        // where it resumes; any other change starts it over.
        let mut runs = b.lifecycle_runs();
        let same = runs
            .get(&rule.name)
            .and_then(|r| r.rule.as_ref())
            .is_some_and(|old| {
                LifecycleRule {
                    mode: rule.mode,
                    ..old.clone()
                } == rule
            });
        match runs.get_mut(&rule.name) {
            Some(run) if same => run.rule = Some(rule),
            _ => {
                runs.remove(&rule.name);
            }
        }
        Ok(replaced)
    }

    /// Removes a bucket's lifecycle rule; `max_age` clears the bucket's `max_age`.
    pub fn remove_lifecycle_rule(&self, bucket: &str, name: &str) -> Result<()> {
        let b = self.get_bucket(bucket)?;
        {
            let _g = self.inner.structure.lock();
            self.still_registered(bucket, &b)?;
            if name == MAX_AGE_RULE {
                if b.max_age().is_none() {
                    return Err(rule_not_found(bucket, name));
                }
                b.update_settings(&crate::settings::BucketSettingsUpdate {
                    max_age: Some(None),
                    ..Default::default()
                })?;
            } else {
                b.change_rules(|rules| {
                    let before = rules.len();
                    rules.retain(|r| r.name != name);
                    if rules.len() == before {
                        return Err(rule_not_found(bucket, name));
                    }
                    Ok(())
                })?;
            }
        }
        b.lifecycle_runs().remove(name);
        Ok(())
    }

    /// A bucket's lifecycle rules with what each has done: the shorthand rule `max_age`
    /// first (when the bucket has `max_age`), then the others in the order they were added.
    pub fn lifecycle_rules(&self, bucket: &str) -> Result<Vec<(LifecycleRule, LifecycleStatus)>> {
        let b = self.get_bucket(bucket)?;
        let rules = rules_of(&b);
        let runs = b.lifecycle_runs();
        Ok(rules
            .into_iter()
            .map(|(r, _)| {
                let st = runs
                    .get(&r.name)
                    .map(|x| x.status.clone())
                    .unwrap_or_default();
                (r, st)
            })
            .collect())
    }

    /// One rule of a bucket (`max_age`: the shorthand) with what it has done.
    pub fn lifecycle_rule(
        &self,
        bucket: &str,
        name: &str,
    ) -> Result<(LifecycleRule, LifecycleStatus)> {
        self.lifecycle_rules(bucket)?
            .into_iter()
            .find(|(r, _)| r.name == name)
            .ok_or_else(|| rule_not_found(bucket, name))
    }

    /// Runs one pass of a rule now, as if the clock read `now` (µs), looking at no more
    /// than `limit` index records, whatever the rule's mode (`dry_run` counts only). The
    /// background runs the same passes every second with the clock and
    /// `StoreOptions::lifecycle_pass_records`.
    pub fn run_lifecycle(
        &self,
        bucket: &str,
        name: &str,
        now: u64,
        limit: u64,
    ) -> Result<PassReport> {
        let b = self.get_bucket(bucket)?;
        let (rule, whole) = rules_of(&b)
            .into_iter()
            .find(|(r, _)| r.name == name)
            .ok_or_else(|| rule_not_found(bucket, name))?;
        self.pass_and_note(&b, &rule, whole, now, limit)
    }

    /// The retention thread's tick: one pass of every due rule of every bucket.
    pub(crate) fn lifecycle_tick(&self) {
        for b in self.inner.buckets() {
            for (rule, whole) in rules_of(&b) {
                if rule.mode == LifecycleMode::Disabled {
                    continue;
                }
                let now = crate::now_micros();
                let due = b
                    .lifecycle_runs()
                    .get(&rule.name)
                    .is_none_or(|r| now >= r.status.next_run);
                if !due || b.is_removed() {
                    continue;
                }
                let limit = self.inner.opts.lifecycle_pass_records.max(1);
                if let Err(e) = self.pass_and_note(&b, &rule, whole, now, limit) {
                    log::error!("lifecycle rule {} of bucket {}: {e}", rule.name, b.name());
                }
            }
        }
    }

    /// One pass, its outcome noted in the rule's status (the next pass is due after the
    /// rule's interval once a round caught up, else at the next tick).
    fn pass_and_note(
        &self,
        b: &Arc<Bucket>,
        rule: &LifecycleRule,
        whole: bool,
        now: u64,
        limit: u64,
    ) -> Result<PassReport> {
        let result = self.lifecycle_pass(b, rule, whole, now, limit);
        let mut runs = b.lifecycle_runs();
        let run = runs.entry(rule.name.clone()).or_default();
        let st = &mut run.status;
        st.last_run = Some(crate::now_micros());
        match &result {
            Ok(r) => {
                st.last_removed = r.removed;
                st.removed += r.removed;
                st.last_compressed = r.compressed;
                st.compressed += r.compressed;
                st.saved_bytes = st.saved_bytes.saturating_add(r.saved);
                st.removed_blocks += r.blocks;
                st.caught_up = r.caught_up;
                st.last_error = None;
                st.next_run = if r.caught_up {
                    now.saturating_add(rule.interval)
                } else {
                    now
                };
            }
            Err(e) => {
                st.last_error = Some(e.to_string());
                st.caught_up = false;
                st.next_run = now.saturating_add(rule.interval.min(60_000_000));
            }
        }
        result
    }

    fn compile_when(&self, name: &str, text: &str) -> Result<Condition> {
        let Some(parser) = &self.inner.opts.when_parser else {
            return Err(BucketError::InvalidSettings(format!(
                "lifecycle rule {name} has a when, and this store was opened without a when parser (StoreOptions::when_parser)"
            ))
            .into());
        };
        (parser.0)(text).map_err(|e| {
            BucketError::InvalidSettings(format!("lifecycle rule {name}: its when: {e}")).into()
        })
    }

    /// One bounded pass of `rule` over `b` (see the module's comment and `lifecycle.rs`).
    fn lifecycle_pass(
        &self,
        b: &Arc<Bucket>,
        rule: &LifecycleRule,
        whole_blocks_only: bool,
        now: u64,
        limit: u64,
    ) -> Result<PassReport> {
        let cutoff = now.saturating_sub(rule.older_than);
        // Patterns were checked when the rule was set (`LifecycleRule::validate`): one that
        // does not compile now stops the pass rather than selecting everything.
        let sel = EntrySelection::new(&rule.entries)
            .map_err(|e| BucketError::InvalidSettings(e.to_string()))?;
        // The run state is copied out: no lock of ours is held across the pass.
        let (mut resume, condition) = {
            let mut runs = b.lifecycle_runs();
            let run = runs.entry(rule.name.clone()).or_default();
            if run.rule.as_ref() != Some(rule) {
                *run = RuleRun {
                    status: std::mem::take(&mut run.status),
                    rule: Some(rule.clone()),
                    ..RuleRun::default()
                };
            }
            run.behind.clear();
            (run.resume.clone(), run.condition.clone())
        };
        let condition = match (&rule.when, condition) {
            (Some(text), None) => {
                let c = self.compile_when(&rule.name, text)?;
                if let Some(run) = b.lifecycle_runs().get_mut(&rule.name) {
                    run.condition = Some(c.clone());
                }
                Some(c)
            }
            (_, c) => c,
        };
        let dry = rule.mode == LifecycleMode::DryRun;
        let mut report = PassReport {
            caught_up: true,
            dry_run: dry,
            ..PassReport::default()
        };
        let mut entries = b.entries();
        entries.sort_by_key(|e| e.id());
        for e in entries.iter().filter(|e| sel.selects(e.name())) {
            if report.looked_at >= limit {
                report.caught_up = false;
                break;
            }
            let compress = rule.action == LifecycleAction::Compress;
            if condition.is_none()
                && !dry
                && !compress
                && !self.expire_blocks(b, e, cutoff, limit, &mut report)?
            {
                report.caught_up = false;
                break;
            }
            if whole_blocks_only {
                continue;
            }
            // Records put behind where the rule resumes since the last look: start there.
            if let Ok(mut st) = e.lock_live(b.name()) {
                look_behind(b, e, &mut st, cutoff);
            }
            let mut from = resume.get(&e.id()).copied().unwrap_or(0);
            if let Some(run) = b.lifecycle_runs().get_mut(&rule.name) {
                if let Some(low) = run.behind.remove(&e.id()) {
                    from = from.min(low);
                }
            }
            let next = if compress {
                self.compress_older(
                    b,
                    e,
                    from,
                    cutoff,
                    condition.as_ref(),
                    dry,
                    limit,
                    &mut report,
                )?
            } else {
                self.remove_older(
                    b,
                    e,
                    from,
                    cutoff,
                    condition.as_ref(),
                    dry,
                    limit,
                    &mut report,
                )?
            };
            resume.insert(e.id(), next);
            if next < cutoff {
                report.caught_up = false;
                break;
            }
        }
        if let Some(run) = b.lifecycle_runs().get_mut(&rule.name) {
            if run.rule.as_ref() == Some(rule) {
                for (id, ts) in std::mem::take(&mut run.behind) {
                    if let Some(r) = resume.get_mut(&id) {
                        *r = (*r).min(ts);
                    }
                }
                run.resume = resume;
            }
        }
        Ok(report)
    }

    /// Deletes the entry's blocks whose newest record is older than `cutoff`, a few per
    /// hold of its lock. False when the pass's bound stopped it (at least one block goes
    /// per pass, however large).
    fn expire_blocks(
        &self,
        b: &Bucket,
        e: &Entry,
        cutoff: u64,
        limit: u64,
        report: &mut PassReport,
    ) -> Result<bool> {
        loop {
            let mut st = match e.lock_live(b.name()) {
                Ok(st) => st,
                Err(Error::NotFound(_)) => return Ok(true),
                Err(err) => return Err(err),
            };
            let old: Vec<(u64, u64)> = st
                .block_ids()
                .filter_map(|id| st.block(id).map(|m| (id, m)))
                .filter(|(_, m)| m.records > 0 && m.max_ts < cutoff)
                .map(|(id, m)| (id, m.records))
                .take(BLOCKS_PER_LOCK)
                .collect();
            if old.is_empty() {
                return Ok(true);
            }
            for (id, records) in old {
                if report.looked_at >= limit && report.blocks > 0 {
                    return Ok(false);
                }
                if self.delete_block(b, e, &mut st, id)? {
                    b.note_expired();
                    self.inner.note_expired();
                    report.blocks += 1;
                    report.removed += records;
                    report.looked_at += records;
                    log::debug!(
                        "lifecycle of bucket {}: block {id:016x} of {} is older than the cutoff {cutoff}",
                        b.name(),
                        e.name()
                    );
                }
            }
        }
    }

    /// Removes (or counts, `dry`) the entry's records in `[from, cutoff)` that `condition`
    /// keeps, a page under the entry lock at a time; returns where the next pass resumes
    /// (`cutoff` once the entry is done).
    #[allow(clippy::too_many_arguments)]
    fn remove_older(
        &self,
        b: &Bucket,
        e: &Entry,
        from: u64,
        cutoff: u64,
        condition: Option<&Condition>,
        dry: bool,
        limit: u64,
        report: &mut PassReport,
    ) -> Result<u64> {
        let query = Query {
            when: condition.cloned(),
            ..Query::default()
        };
        let mut sel = Selector::new(&query);
        let mut lo = from;
        while lo < cutoff {
            let room = limit.saturating_sub(report.looked_at);
            if room == 0 {
                return Ok(lo);
            }
            let n = (room as usize).min(REMOVE_PAGE);
            let mut st = match e.lock_live(b.name()) {
                Ok(st) => st,
                Err(Error::NotFound(_)) => return Ok(cutoff),
                Err(err) => return Err(err),
            };
            look_behind(b, e, &mut st, cutoff);
            let mut page = Vec::with_capacity(n);
            {
                let txn = self.inner.index.read_txn()?;
                self.inner
                    .index
                    .range(&txn, e.id(), lo..cutoff, Order::Ascending, n, &mut page)?;
            }
            let last = page.last().map(|(ts, _)| *ts);
            let full = page.len() == n;
            report.looked_at += page.len() as u64;
            let mut listed = Vec::new();
            let ended = sel.select(page, &mut listed)?;
            report.removed += listed.len() as u64;
            if !dry && !listed.is_empty() {
                self.remove_listed(b, e, &mut st, listed)?;
            }
            drop(st);
            match last {
                Some(ts) if full && !ended => lo = ts + 1,
                _ => return Ok(cutoff),
            }
        }
        Ok(lo)
    }
}

/// Under the entry lock, before a pass lists a page of it below `cutoff`: records put from
/// now on below `cutoff` are noted, and one put behind the rules' resume points since the
/// last look moves every rule of the bucket back to it (see `lifecycle.rs`).
pub(crate) fn look_behind(b: &Bucket, e: &Entry, st: &mut EntryState, cutoff: u64) {
    if let Some(low) = st.lifecycle_look(cutoff) {
        for run in b.lifecycle_runs().values_mut() {
            run.put_behind(e.id(), low);
        }
    }
}

impl Store {
    /// Writes every rule's resume points to `.lifecycle-resume` (at a clean close): one line
    /// per rule, `bucket TAB rule TAB entry=ts,... TAB the rule's settings line`.
    pub(crate) fn save_resume_points(inner: &Inner) -> std::io::Result<()> {
        let mut text = String::new();
        for b in inner.buckets() {
            let mut entries: BTreeMap<u32, String> = BTreeMap::new();
            for e in b.entries() {
                // What was put behind the points since the last pass moves them back.
                if let Ok(mut st) = e.lock_live(b.name()) {
                    look_behind(&b, &e, &mut st, 0);
                }
                entries.insert(e.id(), e.name().to_string());
            }
            for (name, run) in b.lifecycle_runs().iter() {
                let Some(rule) = &run.rule else { continue };
                let mut points: Vec<String> = run
                    .resume
                    .iter()
                    .filter_map(|(id, ts)| {
                        let ts = run.behind.get(id).map_or(*ts, |low| (*ts).min(*low));
                        entries.get(id).map(|n| format!("{n}={ts}"))
                    })
                    .collect();
                if points.is_empty() {
                    continue;
                }
                points.sort();
                text.push_str(&format!(
                    "{}\t{name}\t{}\t{}\t{}\n",
                    b.name(),
                    points.join(","),
                    rule.action,
                    rule.to_line()
                ));
            }
        }
        let path = inner.path.join(LIFECYCLE_RESUME_FILE);
        if text.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let tmp = inner.path.join(format!("{LIFECYCLE_RESUME_FILE}.tmp"));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &path)
    }

    /// Reads `.lifecycle-resume` back (at open) and removes it: a crash from now on leaves
    /// none, since a put behind a point is noted in memory only. A line whose bucket, rule
    /// (with the same settings) or entry is gone is skipped.
    pub(crate) fn load_resume_points(&self) {
        let path = self.inner.path.join(LIFECYCLE_RESUME_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                log::warn!("lifecycle resume points not read ({e}): rules start over");
                String::new()
            }
        };
        if let Err(e) = std::fs::remove_file(&path) {
            log::warn!("could not remove {path:?} ({e}): lifecycle rules start over");
            return;
        }
        for line in text.lines() {
            let mut f = line.splitn(5, '\t');
            let (Some(bucket), Some(name), Some(points), Some(action), Some(rule_line)) =
                (f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            let Ok(b) = self.get_bucket(bucket) else {
                continue;
            };
            let Some(rule) = b.settings().lifecycle.into_iter().find(|r| {
                r.name == name && r.to_line() == rule_line && r.action.to_string() == action
            }) else {
                continue;
            };
            let mut resume = BTreeMap::new();
            for p in points.split(',') {
                let Some((entry, ts)) = p.rsplit_once('=') else {
                    continue;
                };
                let (Ok(e), Ok(ts)) = (self.get_entry(&b, entry), ts.parse::<u64>()) else {
                    continue;
                };
                // Puts below the point are noted from now on (as after a pass's look).
                if let Ok(mut st) = e.lock_live(bucket) {
                    st.lifecycle_look(ts);
                }
                resume.insert(e.id(), ts);
            }
            b.lifecycle_runs().insert(
                name.to_string(),
                RuleRun {
                    resume,
                    rule: Some(rule),
                    ..RuleRun::default()
                },
            );
        }
    }
}

/// The bucket's rules as a pass runs them: the shorthand of `max_age` (true: whole blocks
/// only) first.
fn rules_of(b: &Bucket) -> Vec<(LifecycleRule, bool)> {
    let s = b.settings();
    s.max_age
        .map(|age| (shorthand(age), true))
        .into_iter()
        .chain(s.lifecycle.into_iter().map(|r| (r, false)))
        .collect()
}

fn rule_not_found(bucket: &str, name: &str) -> Error {
    NotFound::Rule {
        bucket: bucket.to_string(),
        name: name.to_string(),
    }
    .into()
}
