//! The bystander harness (issue 27, item 7): while an attack runs against a real `tsblob
//! serve`, a second client writes 1 KiB records and reads one back, each on a fresh
//! connection, and its latencies and the server's RSS are measured. Each attack's p99
//! must stay under [`P99_BOUND`] and the RSS under the memory budget plus [`RSS_SLACK`];
//! the figures are printed (`--nocapture`) for docs/reliability.md.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::reliability_cost::{
    batch_head, call, hostile_globs, incompressible_zstd_batch, long_entry, stalled_batch_record,
    start,
};
use crate::reliability_util::*;

/// The bystander's p99 bound (debug build, a shared 2-core machine: generous).
const P99_BOUND: Duration = Duration::from_secs(1);
/// RSS allowed above the server's before the attack plus the memory budget (hyper's read
/// buffers of the attack's connections, allocator slack).
const RSS_SLACK: u64 = 64 << 20;
const BUDGET: u64 = 64 << 20;
const ATTACK: Duration = Duration::from_secs(5);

struct Figures {
    p50: Duration,
    p99: Duration,
    ops: usize,
    failed: usize,
    rss_max: u64,
}

/// Runs the bystander (and an RSS sampler) for [`ATTACK`] while `stop` is not set.
fn bystander(a: &str, pid: u32, ts: &AtomicU64) -> Figures {
    let mut lat = Vec::new();
    let mut failed = 0;
    let mut rss_max = 0;
    let started = Instant::now();
    while started.elapsed() < ATTACK {
        let t = ts.fetch_add(1, Ordering::Relaxed);
        let op = Instant::now();
        let (w, _) = call(
            a,
            "POST",
            &format!("/api/v1/b/by/e?ts={t}"),
            &[7u8; 1024],
            Duration::from_secs(10),
        );
        lat.push(op.elapsed());
        let op = Instant::now();
        let (r, _) = call(
            a,
            "GET",
            "/api/v1/b/by/e?ts=1",
            b"",
            Duration::from_secs(10),
        );
        lat.push(op.elapsed());
        failed += usize::from(w != 201) + usize::from(r != 200);
        rss_max = rss_max.max(rss_bytes(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    lat.sort();
    let at = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    Figures {
        p50: at(0.50),
        p99: at(0.99),
        ops: lat.len(),
        failed,
        rss_max,
    }
}

/// Runs `attack` on its own threads until the bystander is done; checks and prints.
fn measure(
    name: &str,
    a: &str,
    pid: u32,
    ts: &AtomicU64,
    attack: impl Fn(&str, &AtomicBool) + Sync,
) {
    // The server's RSS before this attack (an allocator keeps some of what earlier
    // attacks freed).
    let base_rss = rss_bytes(pid);
    let stop = AtomicBool::new(false);
    let figures = std::thread::scope(|s| {
        s.spawn(|| attack(a, &stop));
        std::thread::sleep(Duration::from_millis(300)); // the attack under way
        let f = bystander(a, pid, ts);
        stop.store(true, Ordering::Relaxed);
        f
    });
    println!(
        "bystander during {name}: p50 {:.1} ms, p99 {:.1} ms over {} ops ({} failed); server RSS {} MiB at most (before the attack {} MiB, budget {} MiB)",
        figures.p50.as_secs_f64() * 1e3,
        figures.p99.as_secs_f64() * 1e3,
        figures.ops,
        figures.failed,
        figures.rss_max >> 20,
        base_rss >> 20,
        BUDGET >> 20
    );
    assert_eq!(figures.failed, 0, "{name}: bystander requests failed");
    assert!(figures.p99 < P99_BOUND, "{name}: p99 {:?}", figures.p99);
    assert!(
        figures.rss_max < base_rss + BUDGET + RSS_SLACK,
        "{name}: RSS {} MiB",
        figures.rss_max >> 20
    );
}

#[test]
fn bystander_latency_and_rss_stay_bounded_under_each_attack() {
    let (s, a) = start(&[
        "--memory-budget",
        "64MiB",
        "--memory-wait",
        "1s",
        "--max-decompressed-body",
        "256MiB",
    ]);
    let _entry = long_entry(&a);
    for bucket in ["by", "z"] {
        let path = format!("/api/v1/b/{bucket}");
        assert_eq!(call(&a, "POST", &path, b"", Duration::from_secs(20)).0, 201);
    }
    let ts = AtomicU64::new(1);
    let pid = s.pid();

    // 1. A flood of hostile glob queries (defect 1), 16 clients without pause.
    measure("a glob query flood", &a, pid, &ts, |a, stop| {
        std::thread::scope(|s| {
            for i in 0..16 {
                s.spawn(move || {
                    let globs = hostile_globs();
                    while !stop.load(Ordering::Relaxed) {
                        let _ = call(
                            a,
                            "GET",
                            &format!("/api/v1/b/b/query?entries={}", globs[i % 3]),
                            b"",
                            Duration::from_secs(10),
                        );
                    }
                });
            }
        });
    });

    // 2. 100 stalled batch records of 4 MiB − 4 KiB (defect 3).
    measure("100 stalled batch records", &a, pid, &ts, |a, stop| {
        let len = (4u64 << 20) - 4096;
        let conns: Vec<_> = (0..100)
            .map(|_| stalled_batch_record(a, len, len as usize - 4096))
            .collect();
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(conns);
    });

    // 3. zstd batches streamed in (defect 2): 2 clients, 64 MiB of incompressible records
    //    each, again and again.
    let body = Arc::new(incompressible_zstd_batch(64));
    measure("zstd batch streams", &a, pid, &ts, |a, stop| {
        std::thread::scope(|s| {
            for _ in 0..2 {
                let body = body.clone();
                s.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let mut r = batch_head("/api/v1/b/z/e/batch", body.len(), true);
                        r.extend_from_slice(&body);
                        let _ = raw_http(a, &r, Duration::from_secs(60));
                    }
                });
            }
        });
    });

    // 4. 300 idle live tails from one token (past --max-streams-per-token: 429).
    measure("300 idle live tails", &a, pid, &ts, |a, stop| {
        use std::io::Write;
        let conns: Vec<_> = (0..300)
            .map(|_| {
                let mut tcp = std::net::TcpStream::connect(a).unwrap();
                let _ = tcp.write_all(b"GET /api/v1/b/b/query?entries=**&follow=true HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer cost-admin\r\n\r\n");
                tcp
            })
            .collect();
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(conns);
    });
}
