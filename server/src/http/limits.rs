//! The cost bounds of requests (issue 27, item 1): the flags of `tsblob serve` that bound
//! what one request may hold (`--memory-budget`, `--memory-wait`, the zstd body caps) and
//! how many long-lived streams may run at once, and [`Limiter`], the one count of running
//! streams, in all and per token, used for both caps below.
//!
//! A *stream* is a response that outlives its handler, fed by a producer: a query answer
//! (record frames or NDJSON lines), a live tail, an MCAP export. Each holds a task, a
//! bounded queue of pages and, while a step runs, a blocking thread; a client that opens
//! thousands of them would hold all of that at once. Every stream counts in
//! `--max-streams` / `--max-streams-per-token` (past the caller's share: 429
//! `too_many_streams`; past the server's: 503 `busy`; both with a `Retry-After`).
//!
//! A *tail* (`follow=true`) is a stream that never ends by itself: it also counts in
//! `--max-tails` / `--max-tails-per-token` (429 `too_many_tails` past either): lowered
//! below the stream caps, they keep stream slots for ordinary queries however many tails
//! clients open. A tail is admitted only when both caps have room (it takes a stream slot
//! and a tail slot).
//!
//! Gauges `tsblob_query_streams` and `tsblob_query_follows` count what runs; counters
//! `tsblob_streams_refused_total{limit}` and `tsblob_tails_refused_total{limit}` (`limit` =
//! `server` or `token`) count the refusals.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tsblob_proto::ErrorCode;

use parking_lot::Mutex;
use prometheus::{IntCounterVec, IntGauge};
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
    /// batch records and chunks, zstd decompression, query pages. Uploads hold at most 3/4
    /// of it (the rest is left to answers). When it is spent a single write is spooled to
    /// disk instead, and a batch waits up to --memory-wait, then 503.
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
    /// Most streams (query answers, live tails, MCAP exports, removals and label updates
    /// by query) running at once on the server; more: 503 busy.
    #[arg(long, env = "TSBLOB_MAX_STREAMS", default_value_t = Caps::STREAMS.max)]
    pub max_streams: usize,
    /// Most streams (query answers, live tails, MCAP exports, removals and label updates
    /// by query) one token may run at once (without authentication every client counts as
    /// one); more: 429 too_many_streams.
    #[arg(long, env = "TSBLOB_MAX_STREAMS_PER_TOKEN", default_value_t = Caps::STREAMS.per_token)]
    pub max_streams_per_token: usize,
    /// Most connections open at once (both listeners together); past it a new one is
    /// answered 503 busy and closed. Default: half of the file descriptors left after the
    /// store's block files (--max-open-files) and 128 others, at most 256.
    #[arg(long, env = "TSBLOB_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Most connections one client address (IPv6: its /64) may hold open at once; past it
    /// a new one is answered 429 too_many_connections and closed. Connections from
    /// --trusted-proxies count in --max-connections only. Default: half of
    /// --max-connections.
    #[arg(long, env = "TSBLOB_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: Option<usize>,
    /// Live tails (follow=true queries) the server streams at once; a tail also counts as
    /// a stream (--max-streams). Past it, 429 too_many_tails.
    #[arg(long, env = "TSBLOB_MAX_TAILS", default_value_t = Caps::TAILS.max)]
    pub max_tails: usize,
    /// Live tails one token may have open at once (without tokens, all callers share one
    /// count); a tail also counts as a stream (--max-streams-per-token). Past it, 429
    /// too_many_tails.
    #[arg(long, env = "TSBLOB_MAX_TAILS_PER_TOKEN", default_value_t = Caps::TAILS.per_token)]
    pub max_tails_per_token: usize,
    /// Damaged records a query names one by one in its skipped report (entry, timestamp,
    /// code); past it only the count grows (the report is sent whole in one frame).
    #[arg(long, env = "TSBLOB_MAX_SKIPPED_LISTED", default_value_t = super::damage::MAX_LISTED)]
    pub max_skipped_listed: usize,
    /// Point reads are served on the runtime's worker threads, without the hand-off to the
    /// blocking pool, when they cannot wait on the disk: the index's pages (checked
    /// whole, at most this many bytes of it) and the record's bytes in memory, payload
    /// under 256 KiB. A larger index, a page not in memory: the blocking pool. 0: never.
    #[arg(long, env = "TSBLOB_INLINE_READ_INDEX_MAX", default_value = "1MiB", value_parser = parse_size)]
    pub inline_read_index_max: u64,
    /// Replication: the most of a destination's JSON answer read (a record write's
    /// result); a longer one is cut and the attempt fails.
    #[arg(long, env = "TSBLOB_OUTBOUND_ANSWER_MAX", default_value = "1MiB", value_parser = parse_usize_size)]
    pub outbound_answer_max: usize,
    /// Replication: the most of a destination's error answer read; a batch answer may
    /// be this plus 1 KiB per record sent.
    #[arg(long, env = "TSBLOB_OUTBOUND_ERROR_MAX", default_value = "64KiB", value_parser = parse_usize_size)]
    pub outbound_error_max: usize,
    /// Replication: the most characters of a destination's error message kept (in a
    /// task's last_error and the log), as one line.
    #[arg(long, env = "TSBLOB_OUTBOUND_MESSAGE_MAX", default_value_t = tsblob_proto::outbound::MESSAGE_MAX)]
    pub outbound_message_max: usize,
}

fn parse_usize_size(s: &str) -> Result<usize, String> {
    let n = parse_size(s)?;
    usize::try_from(n).map_err(|_| format!("{s:?} is too large for this machine"))
}

/// A cap on things running at once: in the whole server, and per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub max: usize,
    pub per_token: usize,
}

impl Caps {
    /// The defaults of `--max-streams`, `--max-streams-per-token`.
    pub const STREAMS: Caps = Caps {
        max: 256,
        per_token: 64,
    };
    /// The defaults of `--max-tails`, `--max-tails-per-token`: those of the streams (a
    /// tail is one); lower them to keep stream slots for ordinary queries.
    pub const TAILS: Caps = Caps {
        max: 256,
        per_token: 64,
    };
}

impl CostArgs {
    /// The bounds replication senders read a destination's answers with.
    pub fn outbound(&self) -> tsblob_proto::outbound::Bounds {
        tsblob_proto::outbound::Bounds {
            answer_max: self.outbound_answer_max,
            error_max: self.outbound_error_max,
            message_max: self.outbound_message_max,
        }
    }

    /// Sets these bounds in `limits`.
    pub fn apply(&self, limits: &mut Limits) {
        limits.memory_budget = self.memory_budget;
        limits.memory_wait = self.memory_wait;
        limits.max_compressed_body = self.max_compressed_body;
        limits.max_decompressed_body = self.max_decompressed_body;
        limits.streams = Caps {
            max: self.max_streams,
            per_token: self.max_streams_per_token,
        };
        limits.tails = Caps {
            max: self.max_tails,
            per_token: self.max_tails_per_token,
        };
        limits.max_skipped_listed = self.max_skipped_listed;
        limits.inline_read_index_max = self.inline_read_index_max;
    }
}

/// What a [`Limiter`] counts, and how it refuses: the noun and flags its messages name,
/// and its error codes.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    /// E.g. "streams (query answers, live tails, MCAP exports)".
    pub noun: &'static str,
    pub flag: &'static str,
    pub flag_per_token: &'static str,
    /// Who a share belongs to: "token", "client address".
    pub caller: &'static str,
    /// The refusals counter's `limit` label past a caller's share: `token`, `ip`.
    pub caller_limit: &'static str,
    /// The error past the caller's share, and past the server's cap.
    pub per_token_refusal: fn(String) -> AppError,
    pub server_refusal: fn(String) -> AppError,
}

impl Kind {
    /// Every stream: 429 `too_many_streams` past the token's share, 503 `busy` past the
    /// server's.
    pub const STREAMS: Kind = Kind {
        noun:
            "streams (query answers, live tails, MCAP exports, removals and label updates by query)",
        flag: "--max-streams",
        flag_per_token: "--max-streams-per-token",
        caller: "token",
        caller_limit: "token",
        per_token_refusal: AppError::too_many,
        server_refusal: AppError::busy,
    };
    /// Live tails: 429 `too_many_tails` past either.
    pub const TAILS: Kind = Kind {
        noun: "live tails",
        flag: "--max-tails",
        flag_per_token: "--max-tails-per-token",
        caller: "token",
        caller_limit: "token",
        per_token_refusal: too_many_tails,
        server_refusal: too_many_tails,
    };
    /// Open connections (`crate::connections`): 429 `too_many_connections` past the
    /// client address's share, 503 `busy` past the server's.
    pub const CONNECTIONS: Kind = Kind {
        noun: "connections",
        flag: "--max-connections",
        flag_per_token: "--max-connections-per-ip",
        caller: "client address",
        caller_limit: "ip",
        per_token_refusal: too_many_connections,
        server_refusal: AppError::busy,
    };
}

fn too_many_connections(message: String) -> AppError {
    AppError::new(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::TooManyConnections,
        message,
    )
}

fn too_many_tails(message: String) -> AppError {
    AppError::new(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::TooManyTails,
        message,
    )
}

/// How many of one kind run, in all and per caller (a token's name, a client's address),
/// against [`Caps`]: the one implementation of the stream, tail and connection caps.
#[derive(Debug)]
pub struct Limiter {
    kind: Kind,
    caps: Caps,
    state: Mutex<Running>,
    /// Running now.
    gauge: IntGauge,
    /// Refused, by `limit` (`server` or `token`).
    refused: IntCounterVec,
}

#[derive(Debug, Default)]
struct Running {
    all: usize,
    by_caller: HashMap<String, usize>,
}

impl Running {
    /// One fewer, of `caller`'s when there is one.
    fn release(&mut self, caller: Option<&str>) {
        self.all = self.all.saturating_sub(1);
        if let Some(c) = caller {
            if let Some(n) = self.by_caller.get_mut(c) {
                *n -= 1;
                if *n == 0 {
                    self.by_caller.remove(c);
                }
            }
        }
    }
}

impl Limiter {
    /// A limiter counting in `gauge`, its refusals in `refused` (labelled `limit`).
    pub fn new(kind: Kind, caps: Caps, gauge: IntGauge, refused: IntCounterVec) -> Limiter {
        Limiter {
            kind,
            caps,
            state: Mutex::new(Running::default()),
            gauge,
            refused,
        }
    }

    /// A place for one more of `caller`'s, held until the returned slot is dropped (when
    /// the response's producer ends: the end of the answer or the client leaving).
    pub fn open(self: &Arc<Limiter>, caller: &str) -> Result<Slot, AppError> {
        self.take(Some(caller))
    }

    /// A place counted in the server's cap only: for a caller whose share is not its own
    /// (a trusted reverse proxy's connections carry many clients).
    pub fn open_shared(self: &Arc<Limiter>) -> Result<Slot, AppError> {
        self.take(None)
    }

    fn take(self: &Arc<Limiter>, caller: Option<&str>) -> Result<Slot, AppError> {
        let k = &self.kind;
        let mut s = self.state.lock();
        if let Some(c) = caller {
            let mine = s.by_caller.get(c).copied().unwrap_or(0);
            if mine >= self.caps.per_token {
                self.refused.with_label_values(&[k.caller_limit]).inc();
                return Err((k.per_token_refusal)(format!(
                    "this {} already has {mine} {} open, the server's limit per {} ({} {}): close one, or retry after the Retry-After delay",
                    k.caller, k.noun, k.caller, k.flag_per_token, self.caps.per_token
                )));
            }
        }
        if s.all >= self.caps.max {
            self.refused.with_label_values(&["server"]).inc();
            return Err((k.server_refusal)(format!(
                "the server already runs {} {}, its limit ({} {}): retry after the Retry-After delay, or raise the limit",
                s.all, k.noun, k.flag, self.caps.max
            )));
        }
        s.all += 1;
        if let Some(c) = caller {
            *s.by_caller.entry(c.to_string()).or_insert(0) += 1;
        }
        self.gauge.inc();
        Ok(Slot {
            limiter: Arc::clone(self),
            caller: caller.map(str::to_string),
        })
    }

    /// How many run now.
    pub fn running(&self) -> usize {
        self.state.lock().all
    }
}

/// One running stream's (or tail's) place in its [`Limiter`]; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    limiter: Arc<Limiter>,
    /// `None`: counted in the server's cap only ([`Limiter::open_shared`]).
    caller: Option<String>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.limiter.state.lock().release(self.caller.as_deref());
        self.limiter.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(kind: Kind, max: usize, per_token: usize) -> (Arc<Limiter>, IntGauge) {
        let g = IntGauge::new("t", "t").unwrap();
        let refused = IntCounterVec::new(prometheus::Opts::new("r", "r"), &["limit"]).unwrap();
        let caps = Caps { max, per_token };
        (Arc::new(Limiter::new(kind, caps, g.clone(), refused)), g)
    }

    #[test]
    fn streams_are_capped_per_caller_and_in_all_and_freed_on_drop() {
        let (s, g) = limiter(Kind::STREAMS, 3, 2);
        let a1 = s.open("a").unwrap();
        let _a2 = s.open("a").unwrap();
        let e = s.open("a").unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.code.as_str()),
            (429, "too_many_streams")
        );
        let _b1 = s.open("b").unwrap();
        assert_eq!(g.get(), 3);
        let e = s.open("c").unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (503, "busy"));
        drop(a1);
        assert_eq!(g.get(), 2);
        let _c1 = s.open("c").unwrap();
        assert_eq!(s.refused.with_label_values(&["token"]).get(), 1);
        assert_eq!(s.refused.with_label_values(&["server"]).get(), 1);
    }

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        cost: CostArgs,
    }

    #[test]
    fn the_cost_flags_reach_the_limits_and_the_outbound_bounds() {
        use clap::Parser;
        use tsblob_proto::outbound::Bounds;
        let defaults = Flags::try_parse_from(["serve"]).unwrap().cost;
        assert_eq!(defaults.outbound(), Bounds::DEFAULT);
        let mut l = Limits::default();
        defaults.apply(&mut l);
        assert_eq!((l.streams, l.tails), (Caps::STREAMS, Caps::TAILS));
        assert_eq!(l.max_skipped_listed, super::super::damage::MAX_LISTED);
        let f = Flags::try_parse_from([
            "serve",
            "--max-tails",
            "5",
            "--max-streams-per-token",
            "3",
            "--max-skipped-listed",
            "7",
            "--outbound-answer-max",
            "2KiB",
            "--outbound-error-max",
            "1KiB",
            "--outbound-message-max",
            "80",
        ])
        .unwrap()
        .cost;
        f.apply(&mut l);
        assert_eq!(l.tails.max, 5);
        assert_eq!(l.streams.per_token, 3);
        assert_eq!(l.max_skipped_listed, 7);
        assert_eq!(
            f.outbound(),
            Bounds {
                answer_max: 2048,
                error_max: 1024,
                message_max: 80
            }
        );
    }

    #[test]
    fn tails_are_capped_per_token_and_per_server() {
        let (t, g) = limiter(Kind::TAILS, 3, 2);
        let a1 = t.open("a").unwrap();
        let _a2 = t.open("a").unwrap();
        let e = t.open("a").unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.code.as_str()),
            (429, "too_many_tails")
        );
        assert!(
            e.message.contains("--max-tails-per-token 2"),
            "{}",
            e.message
        );
        let _b1 = t.open("b").unwrap();
        let e = t.open("b").unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.code.as_str()),
            (429, "too_many_tails")
        );
        assert!(e.message.contains("--max-tails 3"), "{}", e.message);
        drop(a1);
        let _b2 = t.open("b").unwrap();
        assert_eq!(t.refused.with_label_values(&["token"]).get(), 1);
        assert_eq!(t.refused.with_label_values(&["server"]).get(), 1);
        assert_eq!(g.get(), 3);
    }
}
