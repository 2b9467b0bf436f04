//! Live tails (`follow=true` queries): which tails a commit wakes, and how many may run.
//!
//! The engine's commit listener is given the ids of the entries a commit put records into
//! (`Store::on_commit`). [`Tails`] keeps, per entry id, the tails that read that entry and
//! wakes only those, telling each which of its entries changed, so a multi-entry tail walks
//! only them (`MultiIter::resume_changed`). A write to a bucket no tail watches costs one
//! map look-up, whatever the number of idle tails (defect 4 of issue 27: every commit woke
//! every tail, and each walked all its entries).
//!
//! No lost wake-ups: a tail is registered under its entries before its first walk, and
//! takes the changed entries ([`Wake::take`]) before each walk. A commit that lands once a
//! walk's read transaction began adds its entries again and leaves a permit in the tail's
//! `Notify`, so the tail walks once more.
//!
//! The listener runs on the committing thread, possibly under an engine entry lock: it
//! takes two short mutexes of this module (never one of the engine's) and never waits.
//!
//! Tails are capped per server (`--max-tails`) and per token (`--max-tails-per-token`):
//! past either, a new tail is answered 429 `too_many_tails` before any work.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::StatusCode;
use parking_lot::Mutex;
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
use tokio::sync::Notify;

use super::auth::Caller;
use super::errors::AppError;

/// How many live tails may stream at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailLimits {
    /// In the whole server.
    pub max: usize,
    /// Per token (by name; without tokens, every caller shares one count).
    pub per_token: usize,
}

impl Default for TailLimits {
    fn default() -> Self {
        TailLimits {
            max: 1024,
            per_token: 256,
        }
    }
}

/// The live tails of a server (see the module documentation).
pub struct Tails {
    limits: TailLimits,
    /// Entry id → the tails reading it.
    watchers: Mutex<HashMap<u32, Vec<Arc<Wake>>>>,
    /// Token name → its open tails (the total is `live`).
    per_token: Mutex<HashMap<String, usize>>,
    /// `tsblob_query_follows`: tails streaming now.
    live: IntGauge,
    /// `tsblob_tails_refused_total{limit}`.
    refused: IntCounterVec,
}

/// How one tail is woken: the entries that got records since it last looked, and a
/// permit-keeping `Notify`.
#[derive(Default)]
pub struct Wake {
    changed: Mutex<Vec<u32>>,
    notify: Notify,
}

impl Wake {
    /// The entries (ids, sorted) that got records since the last call. Called before a
    /// walk: a commit after it wakes the tail again.
    pub fn take(&self) -> Vec<u32> {
        let mut ids = std::mem::take(&mut *self.changed.lock());
        ids.sort_unstable();
        ids
    }

    /// Waits for a commit to one of the tail's entries (returns at once if one came since
    /// the last wait).
    pub async fn notified(&self) {
        self.notify.notified().await
    }

    fn wake(&self, entry: u32) {
        {
            let mut changed = self.changed.lock();
            // At most one id per watched entry: the list stays bounded however long the
            // tail takes to look.
            if !changed.contains(&entry) {
                changed.push(entry);
            }
        }
        self.notify.notify_one();
    }
}

impl Tails {
    /// The registry, with its metrics registered in `registry` (the gauge of live tails is
    /// the server's `tsblob_query_follows`).
    pub fn new(limits: TailLimits, live: IntGauge, registry: &Registry) -> anyhow::Result<Tails> {
        let refused = IntCounterVec::new(
            Opts::new(
                "tsblob_tails_refused_total",
                "Live tails refused (429 too_many_tails), by the limit reached: server (--max-tails) or token (--max-tails-per-token)",
            ),
            &["limit"],
        )?;
        registry.register(Box::new(refused.clone()))?;
        Ok(Tails {
            limits,
            watchers: Mutex::new(HashMap::new()),
            per_token: Mutex::new(HashMap::new()),
            live,
            refused,
        })
    }

    /// The commit listener: wakes the tails of the entries a commit put records into.
    /// Cheap and non-blocking (it runs under the committer's caller's locks).
    pub fn committed(&self, entries: &[u32]) {
        if entries.is_empty() {
            return;
        }
        let watchers = self.watchers.lock();
        if watchers.is_empty() {
            return;
        }
        for id in entries {
            for w in watchers.get(id).into_iter().flatten() {
                w.wake(*id);
            }
        }
    }

    /// Admits a new tail of `caller`, or refuses it (429) when the server or the caller's
    /// token has as many as it may.
    pub fn admit(self: &Arc<Self>, caller: &Caller) -> Result<Tail, AppError> {
        let token = caller.name.clone().unwrap_or_default();
        let mut per_token = self.per_token.lock();
        let total: usize = per_token.values().sum();
        let mine = per_token.get(&token).copied().unwrap_or(0);
        if total >= self.limits.max {
            self.refused.with_label_values(&["server"]).inc();
            return Err(AppError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_tails",
                format!(
                    "the server streams {total} live tails, its limit (--max-tails {}): close a tail, retry later, or raise the limit",
                    self.limits.max
                ),
            ));
        }
        if mine >= self.limits.per_token {
            self.refused.with_label_values(&["token"]).inc();
            return Err(AppError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_tails",
                format!(
                    "token {token:?} has {mine} live tails open, its limit (--max-tails-per-token {}): close one first (one tail can follow many entries: entries=a,b or a glob)",
                    self.limits.per_token
                ),
            ));
        }
        *per_token.entry(token.clone()).or_insert(0) += 1;
        self.live.inc();
        Ok(Tail {
            tails: self.clone(),
            token,
            wake: Arc::new(Wake::default()),
            entries: Vec::new(),
        })
    }

    /// Live tails now (all tokens).
    pub fn live(&self) -> usize {
        self.per_token.lock().values().sum()
    }
}

/// One admitted tail: counted while it exists, woken by commits to the entries it
/// [`Tail::watch`]es. Dropped when its stream ends or its client leaves.
pub struct Tail {
    tails: Arc<Tails>,
    token: String,
    wake: Arc<Wake>,
    entries: Vec<u32>,
}

impl Tail {
    /// Registers the tail under the entries it reads. Call before its first walk.
    pub fn watch(&mut self, entries: Vec<u32>) {
        let mut watchers = self.tails.watchers.lock();
        for id in &entries {
            watchers.entry(*id).or_default().push(self.wake.clone());
        }
        self.entries = entries;
    }

    /// How the tail is woken.
    pub fn wake(&self) -> &Wake {
        &self.wake
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        {
            let mut watchers = self.tails.watchers.lock();
            for id in &self.entries {
                if let Some(list) = watchers.get_mut(id) {
                    list.retain(|w| !Arc::ptr_eq(w, &self.wake));
                    if list.is_empty() {
                        watchers.remove(id);
                    }
                }
            }
        }
        let mut per_token = self.tails.per_token.lock();
        if let Some(n) = per_token.get_mut(&self.token) {
            *n -= 1;
            if *n == 0 {
                per_token.remove(&self.token);
            }
        }
        self.tails.live.dec();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tails(max: usize, per_token: usize) -> Arc<Tails> {
        let live = IntGauge::new("live", "live").unwrap();
        Arc::new(Tails::new(TailLimits { max, per_token }, live, &Registry::new()).unwrap())
    }

    fn caller(name: &str) -> Caller {
        Caller {
            name: Some(name.into()),
            ..Caller::open()
        }
    }

    #[tokio::test]
    async fn a_commit_wakes_only_the_tails_of_its_entries() {
        let t = tails(10, 10);
        let mut a = t.admit(&caller("x")).unwrap();
        a.watch(vec![1, 2]);
        let mut b = t.admit(&caller("x")).unwrap();
        b.watch(vec![3]);
        t.committed(&[2, 7]);
        t.committed(&[2]);
        assert_eq!(a.wake().take(), [2]);
        assert!(b.wake().take().is_empty());
        // the permit left by the commit: a wait returns at once
        tokio::time::timeout(std::time::Duration::from_secs(1), a.wake().notified())
            .await
            .unwrap();
        drop(a);
        assert!(!t.watchers.lock().contains_key(&1));
        assert_eq!(t.live(), 1);
    }

    #[test]
    fn tails_are_capped_per_token_and_per_server() {
        let t = tails(3, 2);
        let a1 = t.admit(&caller("a")).unwrap();
        let _a2 = t.admit(&caller("a")).unwrap();
        let e = t.admit(&caller("a")).err().unwrap();
        assert_eq!((e.status.as_u16(), e.code), (429, "too_many_tails"));
        assert!(
            e.message.contains("--max-tails-per-token 2"),
            "{}",
            e.message
        );
        let _b1 = t.admit(&caller("b")).unwrap();
        let e = t.admit(&caller("b")).err().unwrap();
        assert!(e.message.contains("--max-tails 3"), "{}", e.message);
        drop(a1);
        let _b2 = t.admit(&caller("b")).unwrap();
        assert_eq!(t.refused.with_label_values(&["token"]).get(), 1);
        assert_eq!(t.refused.with_label_values(&["server"]).get(), 1);
        assert_eq!(t.live.get(), 3);
    }
}
