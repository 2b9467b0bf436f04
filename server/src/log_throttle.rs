//! Log lines a client can cause, throttled per kind: at most [`BURST`] lines of one kind in
//! a [`WINDOW`]; the others are counted, and the first line of the kind after its window
//! turns says how many were left out (`suppressed`). Every 507 (a full quota, `--max-entries`),
//! every 503 `busy`, every damaged record a query skips and every cut stream logs a line; a
//! client repeating a cheap refused request wrote two lines of ~500 bytes a request to a
//! blocking stderr, without bound.
//!
//! The kinds are `&'static str`s named in the code (an error code, a fixed word), never a
//! client's text, so the table holds at most as many windows as the code names kinds.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// Lines of one kind logged per window ...
pub const BURST: u32 = 20;
/// ... of this length.
pub const WINDOW: Duration = Duration::from_secs(10);

/// What the caller does with a line of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Log it; `suppressed` lines of the kind were left out before it (in windows past).
    Log { suppressed: u64 },
    /// Leave it out (counted).
    Quiet,
}

struct Window {
    started: Instant,
    logged: u32,
    suppressed: u64,
}

/// The windows of every kind ([`check`] uses the process's one).
pub struct Throttle {
    burst: u32,
    window: Duration,
    kinds: Mutex<HashMap<&'static str, Window>>,
}

impl Throttle {
    pub fn new(burst: u32, window: Duration) -> Throttle {
        Throttle {
            burst,
            window,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a line of `kind` is logged now.
    pub fn check(&self, kind: &'static str, now: Instant) -> Verdict {
        let mut kinds = match self.kinds.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let w = kinds.entry(kind).or_insert(Window {
            started: now,
            logged: 0,
            suppressed: 0,
        });
        if now.saturating_duration_since(w.started) >= self.window {
            w.started = now;
            w.logged = 0;
        }
        if w.logged >= self.burst {
            w.suppressed += 1;
            return Verdict::Quiet;
        }
        w.logged += 1;
        let suppressed = std::mem::take(&mut w.suppressed);
        Verdict::Log { suppressed }
    }
}

static THROTTLE: LazyLock<Throttle> = LazyLock::new(|| Throttle::new(BURST, WINDOW));

/// [`Throttle::check`] of the process's throttle, now.
pub fn check(kind: &'static str) -> Verdict {
    THROTTLE.check(kind, Instant::now())
}

/// Logs through `tracing` at `$level` if the throttle lets a line of `$kind` through, with
/// a `suppressed` field counting the lines left out before it.
#[macro_export]
macro_rules! throttled {
    ($level:ident, $kind:expr, target: $target:expr, $($rest:tt)+) => {
        if let $crate::log_throttle::Verdict::Log { suppressed } = $crate::log_throttle::check($kind) {
            if suppressed > 0 {
                tracing::$level!(target: $target, suppressed, $($rest)+);
            } else {
                tracing::$level!(target: $target, $($rest)+);
            }
        }
    };
    ($level:ident, $kind:expr, $($rest:tt)+) => {
        if let $crate::log_throttle::Verdict::Log { suppressed } = $crate::log_throttle::check($kind) {
            if suppressed > 0 {
                tracing::$level!(suppressed, $($rest)+);
            } else {
                tracing::$level!($($rest)+);
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bug "log flood": a client repeating a refused request logged two lines a request.
    #[test]
    fn a_kind_logs_its_burst_per_window_then_counts_what_it_left_out() {
        let t = Throttle::new(3, Duration::from_secs(10));
        let t0 = Instant::now();
        let verdicts: Vec<Verdict> = (0..10).map(|_| t.check("quota_exceeded", t0)).collect();
        assert_eq!(
            verdicts[..3],
            [Verdict::Log { suppressed: 0 }; 3],
            "{verdicts:?}"
        );
        assert!(verdicts[3..].iter().all(|v| *v == Verdict::Quiet));
        // Another kind has its own window.
        assert_eq!(t.check("busy", t0), Verdict::Log { suppressed: 0 });
        // Within the window: still quiet.
        assert_eq!(
            t.check("quota_exceeded", t0 + Duration::from_secs(9)),
            Verdict::Quiet
        );
        // The next window's first line carries the count.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(
            t.check("quota_exceeded", later),
            Verdict::Log { suppressed: 8 }
        );
        assert_eq!(
            t.check("quota_exceeded", later),
            Verdict::Log { suppressed: 0 }
        );
    }
}
