//! Live tails (`follow=true` queries): which tails a commit wakes, and how many may run.
//!
//! The engine's commit listener is given the ids of the entries a commit put records into
//! (`Store::on_commit`). [`Tails`] keeps, per entry id, the tails that read that entry and
//! wakes only those, telling each which of its entries changed, so a multi-entry tail walks
//! only them (`QueryIter::resume_changed`). A write to a bucket no tail watches costs one
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
//! Tails are capped per server (`--max-tails`) and per token (`--max-tails-per-token`) by a
//! [`Limiter`] (`limits.rs`, the same type that caps every stream): past either, a new
//! tail is answered 429 `too_many_tails` before any work.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
use tokio::sync::Notify;

use super::auth::Caller;
use super::errors::AppError;
use super::limits::{Caps, Kind, Limiter, Slot};

/// The live tails of a server (see the module documentation).
pub struct Tails {
    /// Entry id → the tails reading it.
    watchers: Mutex<HashMap<u32, Vec<Arc<Wake>>>>,
    /// The tails open, in all (`tsblob_query_follows`) and per token, against the caps;
    /// refusals in `tsblob_tails_refused_total{limit}`.
    limiter: Arc<Limiter>,
    /// True once the server stops ([`Tails::close`]): every tail ends, so that a shutdown
    /// does not wait its whole grace for streams that never end on their own.
    closing: tokio::sync::watch::Sender<bool>,
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
    pub fn new(caps: Caps, live: IntGauge, registry: &Registry) -> anyhow::Result<Tails> {
        let refused = IntCounterVec::new(
            Opts::new(
                "tsblob_tails_refused_total",
                "Live tails refused (429 too_many_tails), by the limit reached: server (--max-tails) or token (--max-tails-per-token)",
            ),
            &["limit"],
        )?;
        registry.register(Box::new(refused.clone()))?;
        Ok(Tails {
            watchers: Mutex::new(HashMap::new()),
            limiter: Arc::new(Limiter::new(Kind::TAILS, caps, live, refused)),
            closing: tokio::sync::watch::Sender::new(false),
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
        let slot = self
            .limiter
            .open(caller.name.as_deref().unwrap_or_default())?;
        Ok(Tail {
            tails: self.clone(),
            _slot: slot,
            wake: Arc::new(Wake::default()),
            entries: Vec::new(),
        })
    }

    /// Ends every tail, now and to come: the server is stopping (bug "a live tail holds a
    /// shutdown for its whole grace": `systemctl restart` waited 30 s for any open tail,
    /// whose client then saw a cut body instead of an end).
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Live tails now (all tokens).
    pub fn live(&self) -> usize {
        self.limiter.running()
    }
}

/// One admitted tail: counted while it exists, woken by commits to the entries it
/// [`Tail::watch`]es. Dropped when its stream ends or its client leaves.
pub struct Tail {
    tails: Arc<Tails>,
    /// Its place in the tail cap, given back when the tail is dropped.
    _slot: Slot,
    wake: Arc<Wake>,
    entries: Vec<u32>,
}

impl Tail {
    /// Resolves once the server stops ([`Tails::close`]); at once if it has.
    pub fn closing(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.tails.closing.subscribe();
        async move {
            // An error is the sender gone with the server: stopping as well.
            let _ = rx.wait_for(|closed| *closed).await;
        }
    }

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
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tails(max: usize, per_token: usize) -> Arc<Tails> {
        let live = IntGauge::new("live", "live").unwrap();
        Arc::new(Tails::new(Caps { max, per_token }, live, &Registry::new()).unwrap())
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
}
