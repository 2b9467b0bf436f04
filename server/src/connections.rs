//! Open connections, bounded: `--max-connections` in all, `--max-connections-per-ip` per
//! client address (IPv6: per /64 network), counted by the one [`Limiter`] of the stream
//! and tail caps.
//!
//! Why: every connection holds a file descriptor, a task and hyper's buffers from the
//! moment it is accepted, before any token is checked. Without a cap, one client that
//! opened connections until the process ran out of descriptors (`ulimit -n`) stopped the
//! server accepting anyone else (`accept` failed with `EMFILE` until some closed) and left
//! none for the store's own files. Now a connection past a cap is accepted, answered at
//! once (plain HTTP: 429 `too_many_connections` past its address's share, 503 `busy` past
//! the server's, both with `Retry-After: 1` and `Connection: close`; under TLS simply
//! closed: the answer would need a handshake) and closed; the others go on.
//!
//! The defaults follow the descriptors the process may open: [`raise_open_files_limit`]
//! first lifts the soft `RLIMIT_NOFILE` to the hard one (as Go's runtime and nginx's
//! `worker_rlimit_nofile` do), then [`default_caps`] leaves room for the store's block
//! files (`--max-open-files`) and 128 descriptors for the index, spools and outbound
//! calls, and gives connections half of the rest (a connection may hold a spool file
//! too), at most 256 (hyper's buffers: [`DEFAULT_MAX`]); one address may hold half of that. Connections from a trusted
//! reverse proxy (`--trusted-proxies`) count in the server's cap only: they carry many
//! clients.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::http::errors::AppError;
use crate::http::limits::{Caps, CostArgs, Kind, Limiter, Slot};

/// Descriptors kept outside the block files and connections: the index, the listeners,
/// spools, outbound calls (those the store's file budget leaves).
const RESERVED_FDS: usize = tsblob_storage::RESERVED_DESCRIPTORS;
/// The most connections by default, whatever the descriptors allow. Each holds a task and
/// hyper's buffers: ≈ 15 KB idle, but up to ≈ 400 KB while a request head arrives (hyper's
/// largest head), kept while the connection stays open: 1,000 connections with a 380 KB
/// head each took the server's RSS 23 → 423 MB (`docs/reliability.md`). 256 bound that to
/// ≈ 100 MB.
const DEFAULT_MAX: usize = 256;
/// Refused connections kept open at once to read what their client sent before closing
/// (so that the client reads the answer instead of a reset); more are closed at once.
const LINGER_MAX: usize = 64;
/// How long, and how many bytes of its request, a refused connection is read for.
const LINGER_TIME: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 << 10;

/// The open connections of every listener of the server (they share the descriptors).
#[derive(Debug)]
pub struct Connections {
    limiter: Arc<Limiter>,
    trusted: Vec<IpNet>,
    lingering: Arc<AtomicUsize>,
}

impl Connections {
    /// Counts in the gauge `tsblob_connections` and, refused, in
    /// `tsblob_connections_refused_total{limit}` (`server` or `ip`), both in `registry`.
    pub fn new(
        caps: Caps,
        trusted: Vec<IpNet>,
        registry: &Registry,
    ) -> prometheus::Result<Connections> {
        let open = IntGauge::new(
            "tsblob_connections",
            "Connections open now, against --max-connections",
        )?;
        let refused = IntCounterVec::new(
            Opts::new(
                "tsblob_connections_refused_total",
                "Connections refused, by the limit reached: server (--max-connections, 503 busy) or ip (--max-connections-per-ip, 429 too_many_connections)",
            ),
            &["limit"],
        )?;
        registry.register(Box::new(open.clone()))?;
        registry.register(Box::new(refused.clone()))?;
        Ok(Connections {
            limiter: Arc::new(Limiter::new(Kind::CONNECTIONS, caps, open, refused)),
            trusted,
            lingering: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// A place for one more connection from `peer`, held until the slot is dropped (with
    /// the connection's task).
    pub fn admit(&self, peer: IpAddr) -> Result<Slot, AppError> {
        let peer = peer.to_canonical();
        if self.trusted.iter().any(|n| n.contains(&peer)) {
            self.limiter.open_shared()
        } else {
            self.limiter.open(&client_of(peer))
        }
    }

    /// Answers a connection refused with `err` (over plain HTTP; `tls`: closed without
    /// a word) and closes it. Never waits: the answer is one non-blocking write into the
    /// fresh socket's empty send buffer, and the read of the client's request before the
    /// close runs in a task of its own, for at most [`LINGER_TIME`], when fewer than
    /// [`LINGER_MAX`] do.
    pub fn refuse(&self, mut tcp: TcpStream, err: &AppError, tls: bool) {
        if tls {
            return;
        }
        let answer = err.raw_answer();
        if tcp.try_write(&answer).is_err() {
            return;
        }
        if self.lingering.fetch_add(1, Ordering::AcqRel) >= LINGER_MAX {
            self.lingering.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let lingering = Arc::clone(&self.lingering);
        tokio::spawn(async move {
            let _ = tcp.shutdown().await;
            let mut buf = [0u8; 4096];
            let mut read = 0;
            let _ = tokio::time::timeout(LINGER_TIME, async {
                while read < LINGER_BYTES {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => read += n,
                    }
                }
            })
            .await;
            drop(tcp);
            lingering.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// The client an address counts for: an IPv4 address itself, an IPv6 address its /64
/// network (one host is usually given a whole /64, so counting single addresses would
/// give one client 2^64 shares).
fn client_of(peer: IpAddr) -> String {
    match peer {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => {
            let s = a.segments();
            let net = std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
            format!("{net}/64")
        }
    }
}

/// Lifts the soft limit of open files to the hard one (at most 1,048,576); returns the
/// soft limit in force after it.
pub fn raise_open_files_limit() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out-parameter.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    let want = lim.rlim_max.min(1 << 20);
    if want > lim.rlim_cur {
        let raised = libc::rlimit {
            rlim_cur: want,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: a valid rlimit, soft not above hard.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = want;
        }
    }
    usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
}

/// The connection caps of `args` (`--max-connections`, `--max-connections-per-ip`), else
/// [`default_caps`] for a process that may open `soft` files of which the store keeps
/// `open_files`; per address by default half the server's.
pub fn caps(args: &CostArgs, soft: usize, open_files: usize) -> Caps {
    let max = args
        .max_connections
        .unwrap_or_else(|| default_caps(soft, open_files).max)
        .max(1);
    let per_ip = args.max_connections_per_ip.unwrap_or(max / 2);
    Caps {
        max,
        per_token: per_ip.max(1),
    }
}

/// Whether `caps` and the store's `open_files` (with [`RESERVED_FDS`]) need more
/// descriptors than the soft limit `soft` allows: past it connections fail to be accepted.
pub fn past_the_open_files_limit(caps: Caps, soft: usize, open_files: usize) -> bool {
    caps.max + open_files + RESERVED_FDS > soft
}

/// The caps when no flag sets them: connections get half of the descriptors `soft` leaves
/// after the store's block files (`open_files`) and [`RESERVED_FDS`], at least 16 and at
/// most [`DEFAULT_MAX`]; one address half of that.
pub fn default_caps(soft: usize, open_files: usize) -> Caps {
    let max = (soft.saturating_sub(RESERVED_FDS + open_files) / 2).clamp(16, DEFAULT_MAX);
    Caps {
        max,
        per_token: (max / 2).max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_caps_leave_descriptors_for_the_store() {
        // `ulimit -n 1024`: the store's default budget is (1024 - 128) / 2 = 448.
        assert_eq!(
            default_caps(1024, 448),
            Caps {
                max: 224,
                per_token: 112
            }
        );
        assert!(!past_the_open_files_limit(
            default_caps(1024, 448),
            1024,
            448
        ));
        let many = Caps {
            max: 1000,
            per_token: 500,
        };
        assert!(past_the_open_files_limit(many, 1024, 448));
        assert_eq!(default_caps(65536, 4096).max, DEFAULT_MAX);
        assert_eq!(default_caps(64, 16).max, 16);
    }

    #[test]
    fn an_ipv6_client_is_its_64_network_and_a_mapped_ipv4_one_its_address() {
        let caps = Caps {
            max: 10,
            per_token: 1,
        };
        let c = Connections::new(caps, vec![], &Registry::new()).unwrap();
        let _a = c.admit("2001:db8:1:2::1".parse().unwrap()).unwrap();
        let e = c
            .admit("2001:db8:1:2:ffff::9".parse().unwrap())
            .unwrap_err();
        assert!(
            e.message.contains("--max-connections-per-ip 1"),
            "{}",
            e.message
        );
        let _b = c.admit("2001:db8:1:3::1".parse().unwrap()).unwrap();
        let _v4 = c.admit("192.0.2.7".parse().unwrap()).unwrap();
        assert!(c.admit("::ffff:192.0.2.7".parse().unwrap()).is_err());
    }

    #[test]
    fn a_trusted_proxy_counts_only_in_the_servers_cap() {
        let caps = Caps {
            max: 3,
            per_token: 1,
        };
        let proxy: IpNet = "10.0.0.0/8".parse().unwrap();
        let c = Connections::new(caps, vec![proxy], &Registry::new()).unwrap();
        let a = "192.0.2.1".parse().unwrap();
        let _a1 = c.admit(a).unwrap();
        let e = c.admit(a).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.code.as_str()),
            (429, "too_many_connections")
        );
        assert!(
            e.message.contains("--max-connections-per-ip 1"),
            "{}",
            e.message
        );
        let p = "10.1.2.3".parse().unwrap();
        let p1 = c.admit(p).unwrap();
        let _p2 = c.admit(p).unwrap();
        let e = c.admit("192.0.2.2".parse().unwrap()).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (503, "busy"));
        drop(p1);
        let _b = c.admit("192.0.2.2".parse().unwrap()).unwrap();
    }
}
