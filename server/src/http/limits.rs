//! The cost bounds of requests (issue 27, item 1): the flags of `tsblob serve` that bound
//! what one request may hold (`--memory-budget`, `--memory-wait`, the zstd body caps) and
//! how many long-lived streams may run at once (`--max-streams`,
//! `--max-streams-per-token`), and [`Streams`], the count of running streams.
//!
//! A *stream* is a response that outlives its handler: a query answer (records or NDJSON
//! lines, a live tail included) fed by a producer. Each holds a task, a bounded queue of
//! pages and, while a step runs, a blocking thread; a client that opens thousands of them
//! (or a thousand idle tails) would hold all of that at once. A stream over its caller's
//! share is refused 429 `too_many_streams`, one over the server's 503 `busy`, both with a
//! `Retry-After`; `tsblob_streams` (gauge) counts the running ones.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tsblob_proto::parse_size;

use super::errors::AppError;
use super::Limits;

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}): use e.g. 2s, 500ms"))
}

/// The cost flags of `tsblob serve` (flattened into its flags).
#[derive(Debug, Clone, clap::Args)]
pub struct CostArgs {
    /// Memory every request together may hold in memory: single bodies received whole,
    /// batch records and chunks, zstd decompression, query pages. When it is spent a single
    /// write is spooled to disk instead, and a batch waits up to --memory-wait, then 503.
    #[arg(long, env = "TSBLOB_MEMORY_BUDGET", default_value = "128MiB", value_parser = parse_size)]
    pub memory_budget: u64,
    /// How long a request waits for room in --memory-budget before it is answered 503 busy
    /// (with Retry-After).
    #[arg(long, env = "TSBLOB_MEMORY_WAIT", default_value = "2s", value_parser = parse_duration)]
    pub memory_wait: Duration,
    /// Largest Content-Encoding: zstd body as sent (compressed); over it: 413.
    #[arg(long, env = "TSBLOB_MAX_COMPRESSED_BODY", default_value = "1GiB", value_parser = parse_size)]
    pub max_compressed_body: u64,
    /// Largest Content-Encoding: zstd body once decompressed (decoded as it arrives, never
    /// held whole); over it: 413.
    #[arg(long, env = "TSBLOB_MAX_DECOMPRESSED_BODY", default_value = "4GiB", value_parser = parse_size)]
    pub max_decompressed_body: u64,
    /// Most query streams (queries and live tails) running at once on the server; more:
    /// 503 busy.
    #[arg(long, env = "TSBLOB_MAX_STREAMS", default_value_t = 256)]
    pub max_streams: usize,
    /// Most query streams (queries and live tails) one token may run at once (without
    /// authentication every client counts as one); more: 429 too_many_streams.
    #[arg(long, env = "TSBLOB_MAX_STREAMS_PER_TOKEN", default_value_t = 64)]
    pub max_streams_per_token: usize,
}

impl CostArgs {
    /// Sets these bounds in `limits`.
    pub fn apply(&self, limits: &mut Limits) {
        limits.memory_budget = self.memory_budget;
        limits.memory_wait = self.memory_wait;
        limits.max_compressed_body = self.max_compressed_body;
        limits.max_decompressed_body = self.max_decompressed_body;
        limits.max_streams = self.max_streams;
        limits.max_streams_per_token = self.max_streams_per_token;
    }
}

/// The running streams, in all and per caller.
#[derive(Debug)]
pub struct Streams {
    max: usize,
    per_caller: usize,
    state: Mutex<Running>,
    gauge: prometheus::IntGauge,
}

#[derive(Debug, Default)]
struct Running {
    all: usize,
    by_caller: HashMap<String, usize>,
}

impl Streams {
    pub fn new(max: usize, per_caller: usize, gauge: prometheus::IntGauge) -> Streams {
        Streams {
            max,
            per_caller,
            state: Mutex::new(Running::default()),
            gauge,
        }
    }

    /// A place for one more stream of `caller`, held until the returned slot is dropped
    /// (when the response's producer ends: the end of the answer or the client leaving).
    pub fn open(self: &Arc<Streams>, caller: &str) -> Result<StreamSlot, AppError> {
        let mut s = self.state.lock();
        let mine = s.by_caller.get(caller).copied().unwrap_or(0);
        if mine >= self.per_caller {
            return Err(AppError::too_many(format!(
                "this token already has {mine} query streams (queries or live tails) open, the server's limit per token (--max-streams-per-token): close one, or retry after the Retry-After delay"
            )));
        }
        if s.all >= self.max {
            return Err(AppError::busy(format!(
                "the server already runs {} query streams (queries or live tails), its limit (--max-streams): retry after the Retry-After delay",
                s.all
            )));
        }
        s.all += 1;
        *s.by_caller.entry(caller.to_string()).or_insert(0) += 1;
        self.gauge.inc();
        Ok(StreamSlot {
            streams: Arc::clone(self),
            caller: caller.to_string(),
        })
    }
}

/// One running stream's place in [`Streams`]; given back when dropped.
#[derive(Debug)]
pub struct StreamSlot {
    streams: Arc<Streams>,
    caller: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut s = self.streams.state.lock();
        s.all = s.all.saturating_sub(1);
        if let Some(n) = s.by_caller.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                s.by_caller.remove(&self.caller);
            }
        }
        self.streams.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_capped_per_caller_and_in_all_and_freed_on_drop() {
        let g = prometheus::IntGauge::new("t", "t").unwrap();
        let s = Arc::new(Streams::new(3, 2, g.clone()));
        let a1 = s.open("a").unwrap();
        let _a2 = s.open("a").unwrap();
        let e = s.open("a").unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (429, "too_many_streams"));
        let _b1 = s.open("b").unwrap();
        assert_eq!(g.get(), 3);
        let e = s.open("c").unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (503, "busy"));
        drop(a1);
        assert_eq!(g.get(), 2);
        let _c1 = s.open("c").unwrap();
    }
}
